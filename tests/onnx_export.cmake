# ONNX export (docs/export.md "ONNX"): tests/onnx_export_test.c checks the C
# API's error paths (NULL, bad paths, an op with no ONNX form refused by
# name, nothing left behind by a failed save; without protobuf-c, the
# "built without ONNX" refusal). tests/onnx_check.py trains each example
# model a few steps, exports it with `anygrad export --onnx` and checks the
# file with onnx.checker (full_check) and ONNX Runtime (CPU) against
# anygrad's outputs on two batch sizes; it runs with the virtual environment
# of scripts/deps.sh --test (.venv, or AG_TEST_VENV) and skips (77) without
# onnx and onnxruntime. onnx_export_cli: the command's refusals (usage
# errors, an output that is an input or a folder, a GPT checkpoint), each
# with its exit status and message and no file left behind.
add_executable(onnx_export_test ${CMAKE_CURRENT_SOURCE_DIR}/onnx_export_test.c)
target_link_libraries(onnx_export_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME onnx_export COMMAND onnx_export_test ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential)
set_tests_properties(onnx_export PROPERTIES TIMEOUT 60 FIXTURES_SETUP onnx_sequential)
set(AG_TEST_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "virtual environment with the Python test packages")
if(TARGET anygrad-cli AND AG_HAVE_ONNX)
  foreach(_m mlp cnn llama)
    add_test(NAME onnx_export_${_m}
             COMMAND sh -c "p=\"$0/bin/python3\"; [ -x \"$p\" ] || p=/usr/bin/python3; exec \"$p\" \"$@\""
                     ${AG_TEST_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/onnx_check.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_${_m} ${_m})
    set_tests_properties(onnx_export_${_m} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
  # every ag_sequential layer kind and every mapped elementwise op, written by onnx_export_test
  add_test(NAME onnx_export_sequential
           COMMAND sh -c "p=\"$0/bin/python3\"; [ -x \"$p\" ] || p=/usr/bin/python3; exec \"$p\" \"$@\""
                   ${AG_TEST_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/onnx_check.py
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/sequential.onnx
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/sequential_samples.safetensors
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/unary.onnx
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/unary_samples.safetensors
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/unary_pos.onnx
                   ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_sequential/unary_pos_samples.safetensors)
  set_tests_properties(onnx_export_sequential PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED onnx_sequential)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME onnx_export_cli
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/onnx_check.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/onnx_export_cli refusals)
    set_tests_properties(onnx_export_cli PROPERTIES TIMEOUT 60 LABELS "cli")
  endif()
endif()
