# The command line's outputs and options under hostile input
# (docs/reliability.md): `check --report` and `--dump-inputs`
# (tests/harden3_tools_cli.py, one CTest test per case).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case check_outputs)
    add_test(NAME harden3_tools_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/harden3_tools_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/harden3_tools_cli_${_case} ${_case})
    set_tests_properties(harden3_tools_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
