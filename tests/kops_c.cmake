# Group norm and interpolate: argument errors, determinism of the backward,
# and the other backends present against the CPU (tests/kops_c_test.c).
add_executable(kops_c_test ${CMAKE_CURRENT_SOURCE_DIR}/kops_c_test.c)
target_link_libraries(kops_c_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME kops_c COMMAND kops_c_test)
set_tests_properties(kops_c PROPERTIES TIMEOUT 300 ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
