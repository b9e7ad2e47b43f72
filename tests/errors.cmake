# Error paths of the public API (tests/errors_test.c).
add_executable(errors_test ${CMAKE_CURRENT_SOURCE_DIR}/errors_test.c)
target_include_directories(errors_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(errors_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME errors COMMAND errors_test)
set_tests_properties(errors PROPERTIES TIMEOUT 120)
