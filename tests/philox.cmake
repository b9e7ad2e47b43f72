# Philox reproducibility and random-tensor statistics (tests/philox_test.c).
add_executable(philox_test ${CMAKE_CURRENT_SOURCE_DIR}/philox_test.c ${AG_CONF_SOURCES})
target_include_directories(philox_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(philox_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME philox COMMAND philox_test)
set_tests_properties(philox PROPERTIES TIMEOUT 120)
