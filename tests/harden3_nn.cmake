# Hostile arguments to the optimizers, the learning-rate schedules, the norms
# and the Llama loader (tests/harden3_nn_test.c; docs/reliability.md).
add_executable(harden3_nn_test ${CMAKE_CURRENT_SOURCE_DIR}/harden3_nn_test.c)
target_compile_definitions(harden3_nn_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
target_include_directories(harden3_nn_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(harden3_nn_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} m)
add_test(NAME harden3_nn COMMAND harden3_nn_test)
set_tests_properties(harden3_nn PROPERTIES TIMEOUT 120 LABELS "autograd")
