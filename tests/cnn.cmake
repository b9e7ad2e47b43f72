# The Fashion-MNIST job on a slice of the data (skipped without the data set),
# and its in-process replicas against one device.
if(TARGET anygrad_models)
  add_executable(cnn_test ${CMAKE_CURRENT_SOURCE_DIR}/cnn_test.c)
  target_compile_definitions(cnn_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(cnn_test PRIVATE anygrad_models anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
  add_test(NAME cnn COMMAND cnn_test)
  set_tests_properties(cnn PROPERTIES TIMEOUT 600 LABELS "cli"
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OPENBLAS_NUM_THREADS=1")
endif()
