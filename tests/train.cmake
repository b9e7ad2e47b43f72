# Training against the PyTorch reference and the memory-growth check.
add_executable(train_reference_test ${CMAKE_CURRENT_SOURCE_DIR}/train_reference.c)
target_compile_definitions(train_reference_test PRIVATE AG_TEST_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data")
target_link_libraries(train_reference_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME train_reference COMMAND train_reference_test)
set_tests_properties(train_reference PROPERTIES TIMEOUT 300 LABELS "autograd")
