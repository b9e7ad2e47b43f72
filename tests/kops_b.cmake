# Error cases and small exact checks of sort/argsort, scatter_add/index_add
# and pad on the CPU (tests/kops_b_test.c); every backend's numerics are the
# conformance rows (anygrad check).
add_executable(kops_b_test ${CMAKE_CURRENT_SOURCE_DIR}/kops_b_test.c)
target_include_directories(kops_b_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(kops_b_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME kops_b COMMAND kops_b_test)
set_tests_properties(kops_b PROPERTIES TIMEOUT 120)
