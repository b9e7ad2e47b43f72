# Data parallelism (include/anygrad/ddp.h) on in-process groups: buckets,
# reduced gradients against the full batch, no_sync, the grad scaler, charlm
# replicas against one device, resume from N to M replicas, balance. Threaded
# (label threads, so the TSan stage runs it).
if(TARGET anygrad_examples)
  add_executable(ddp_test ${CMAKE_CURRENT_SOURCE_DIR}/ddp_test.c)
  target_compile_definitions(ddp_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(ddp_test PRIVATE anygrad_examples anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
  add_test(NAME ddp COMMAND ddp_test)
  set_tests_properties(ddp PROPERTIES TIMEOUT 300 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=60000")
endif()
