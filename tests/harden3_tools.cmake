# The command line's outputs and options under hostile input
# (docs/reliability.md): the library's checks they use
# (tests/harden3_tools_test.c), and `check --report` and `--dump-inputs`,
# outputs that are an input or another output, option values
# (tests/harden3_tools_cli.py, one CTest test per case).
add_executable(harden3_tools_test ${CMAKE_CURRENT_SOURCE_DIR}/harden3_tools_test.c)
target_compile_definitions(harden3_tools_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
target_include_directories(harden3_tools_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(harden3_tools_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME harden3_tools COMMAND harden3_tools_test)
set_tests_properties(harden3_tools PROPERTIES TIMEOUT 60 LABELS "cli")
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case check_outputs outputs_distinct option_values)
    add_test(NAME harden3_tools_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/harden3_tools_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/harden3_tools_cli_${_case} ${_case})
    set_tests_properties(harden3_tools_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
