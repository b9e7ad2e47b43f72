# Diagnostics: sync-debug sites, step profiler verdicts, leak detector, trace.
add_executable(diag_test ${CMAKE_CURRENT_SOURCE_DIR}/diag_test.c)
target_include_directories(diag_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(diag_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME diag COMMAND diag_test)
set_tests_properties(diag PROPERTIES TIMEOUT 300 LABELS threads
                     ENVIRONMENT "AG_CPU_STREAMS=threaded;AG_SYNC_DEBUG=off")
