# The Hugging Face layout (docs/export.md): tests/hf_layout_test.c (round
# trips bit for bit, configs refused with the key named, nothing replaced by
# a failed save), and tests/hf_tokenizer_check.py: the `tokenizers` library
# gives anygrad's ids on the whole fortunes corpus. The latter runs with the
# virtual environment scripts/deps.sh --test makes (.venv, or AG_TEST_VENV)
# and skips (77) without `tokenizers` or the corpus.
add_executable(hf_layout_test ${CMAKE_CURRENT_SOURCE_DIR}/hf_layout_test.c)
target_link_libraries(hf_layout_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME hf_layout COMMAND hf_layout_test)
set_tests_properties(hf_layout PROPERTIES TIMEOUT 120)
set(AG_TEST_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "virtual environment with the Python test packages")
if(NOT AG_SANITIZE)
  add_test(NAME hf_tokenizer
           COMMAND sh -c "p=\"$0/bin/python3\"; [ -x \"$p\" ] || p=/usr/bin/python3; exec \"$p\" \"$@\""
                   ${AG_TEST_VENV} ${CMAKE_CURRENT_SOURCE_DIR}/hf_tokenizer_check.py $<TARGET_FILE:anygrad>
                   512 4096)
  set_tests_properties(hf_tokenizer PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS data)
endif()
# anygrad train --task text --hf DIR (tests/cli_test.py, case text_hf).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  add_test(NAME cli_text_hf
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.py $<TARGET_FILE:anygrad-cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/cli_text_hf ${PROJECT_SOURCE_DIR} $<TARGET_FILE_DIR:anygrad> text_hf)
  set_tests_properties(cli_text_hf PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "cli")
endif()
