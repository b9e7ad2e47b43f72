# Loader: order, determinism, errors, shutdown, scopes, bucketing (threaded CPU streams).
add_executable(loader_test ${CMAKE_CURRENT_SOURCE_DIR}/loader_test.c)
target_include_directories(loader_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(loader_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME loader COMMAND loader_test)
set_tests_properties(loader PROPERTIES TIMEOUT 300 LABELS threads ENVIRONMENT "AG_CPU_STREAMS=threaded")
