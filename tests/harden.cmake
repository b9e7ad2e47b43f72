# Hostile input through every entry point (docs/reliability.md): the library
# cases (tests/harden_test.c, white box for the storage version counter) and
# the command line (tests/harden_cli.py, one CTest test per case).
if(ZLIB_FOUND)
  add_executable(harden_test ${CMAKE_CURRENT_SOURCE_DIR}/harden_test.c)
  target_compile_definitions(harden_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_include_directories(harden_test PRIVATE ${PROJECT_SOURCE_DIR}/core)
  target_link_libraries(harden_test PRIVATE anygrad_static ZLIB::ZLIB ${AG_CMOCKA_LIB} m)
  add_test(NAME harden COMMAND harden_test)
  set_tests_properties(harden PROPERTIES TIMEOUT 300 LABELS "data")
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case cnn_out special_inputs report_same_file cnn_metadata lists_and_batch env_numbers)
    add_test(NAME harden_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/harden_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/harden_cli_${_case} ${_case})
    set_tests_properties(harden_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
