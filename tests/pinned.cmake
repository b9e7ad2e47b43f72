# Pinned host caching allocator (threaded CPU streams: copies really run later).
add_executable(pinned_test ${CMAKE_CURRENT_SOURCE_DIR}/pinned_test.c)
target_include_directories(pinned_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(pinned_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME pinned COMMAND pinned_test)
set_tests_properties(pinned PROPERTIES TIMEOUT 300 LABELS threads ENVIRONMENT "AG_CPU_STREAMS=threaded")
