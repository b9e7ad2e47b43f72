# Stream ordering, events and timing on the threaded CPU mode (tests/streams_test.c).
add_executable(streams_test ${CMAKE_CURRENT_SOURCE_DIR}/streams_test.c)
target_include_directories(streams_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(streams_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME streams COMMAND streams_test)
set_tests_properties(streams PROPERTIES TIMEOUT 300 LABELS threads ENVIRONMENT "AG_CPU_STREAMS=threaded")
