# `anygrad train --task text` under hostile input (docs/reliability.md): the
# resume checkpoint's metadata and tensors, the corpus file, the outputs
# (tests/harden3_text_cli.py, one CTest test per case).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case resume_metadata data_file outputs)
    add_test(NAME harden3_text_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/harden3_text_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/harden3_text_cli_${_case} ${_case})
    set_tests_properties(harden3_text_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
