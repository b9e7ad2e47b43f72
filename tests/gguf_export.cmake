# The GGUF export (docs/export.md, "GGUF"): tests/gguf_export_test.c (the
# refusals leave an existing file as it was and no temp file; an untied f16
# model read back by a small parser, its F32 tensors the model's values with
# attn_q/attn_k rows permuted), and tests/gguf_check.py: `anygrad export
# --gguf` read by the pinned `gguf` package (every metadata key and value,
# tensor names, shapes, types; f32 bit for bit, f16 as rounded, q8_0 as
# gguf.quants quantizes). The latter runs with the virtual environment
# scripts/deps.sh --test makes (.venv, or AG_TEST_VENV) and skips (77)
# without the `gguf` package.
add_executable(gguf_export_test ${CMAKE_CURRENT_SOURCE_DIR}/gguf_export_test.c)
target_link_libraries(gguf_export_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME gguf_export COMMAND gguf_export_test)
set_tests_properties(gguf_export PROPERTIES TIMEOUT 120)
set(AG_TEST_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "virtual environment with the Python test packages")
if(TARGET anygrad-cli AND NOT AG_SANITIZE)
  add_test(NAME gguf_reader
           COMMAND sh -c "p=\"$0/bin/python\"; [ -x \"$p\" ] || { echo 'skipped: no .venv'; exit 77; }; exec \"$p\" \"$@\""
                   ${AG_TEST_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/gguf_check.py $<TARGET_FILE:anygrad-cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/gguf_reader)
  set_tests_properties(gguf_reader PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
endif()
