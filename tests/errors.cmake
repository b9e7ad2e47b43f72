# Error paths of the public API (tests/errors_test.c).
add_executable(errors_test ${CMAKE_CURRENT_SOURCE_DIR}/errors_test.c)
target_include_directories(errors_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(errors_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME errors COMMAND errors_test)
set_tests_properties(errors PROPERTIES TIMEOUT 120)
# A misspelt AG_SYNC_DEBUG is an error, as a bad AG_ALLOC_CONF is.
add_test(NAME errors_sync_debug_env COMMAND errors_test sync-debug-env)
set_tests_properties(errors_sync_debug_env PROPERTIES ENVIRONMENT "AG_SYNC_DEBUG=bogus" TIMEOUT 60)
