# Deterministic mode (tests/deterministic_test.c): the switch, AG_DETERMINISTIC,
# and embedding backward on gpuemu equal to the CPU bit for bit.
add_executable(deterministic_test ${CMAKE_CURRENT_SOURCE_DIR}/deterministic_test.c)
target_include_directories(deterministic_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(deterministic_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
if(TARGET anygrad-gpuemu)
  add_dependencies(deterministic_test anygrad-gpuemu)
endif()
add_test(NAME deterministic COMMAND deterministic_test)
set_tests_properties(deterministic PROPERTIES ENVIRONMENT "AG_DETERMINISTIC=" TIMEOUT 120)
add_test(NAME deterministic_env COMMAND deterministic_test)
set_tests_properties(deterministic_env PROPERTIES ENVIRONMENT "AG_DETERMINISTIC=1" TIMEOUT 120)
