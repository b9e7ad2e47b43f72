# When the NCCL/RCCL module reports a collective complete (non-blocking
# communicators: ncclInProgress, asynchronous errors, aborts and destroys in
# progress, HIP's recorded hipErrorNotReady), against the stub of
# tests/nccl_stub (built by nccl_stub.cmake). Linked statically for the
# core's test entry, with the executable's symbols exported so the module's
# errors land in the same core. Labelled threads for TSan.
if(TARGET anygrad-nccl)
  add_executable(gpu3_nccl_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_nccl_test.c)
  set_target_properties(gpu3_nccl_test PROPERTIES ENABLE_EXPORTS ON)
  target_include_directories(gpu3_nccl_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
  target_link_libraries(gpu3_nccl_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} Threads::Threads ${CMAKE_DL_LIBS} m)
  add_dependencies(gpu3_nccl_test nccl_stub anygrad-nccl)
  add_test(NAME gpu3_nccl_stub COMMAND gpu3_nccl_test $<TARGET_FILE:anygrad-nccl>)
  set_tests_properties(gpu3_nccl_stub PROPERTIES TIMEOUT 60 LABELS "dist;threads"
                       ENVIRONMENT "LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/nccl_stub;AG_DIST_TIMEOUT_MS=;AG_DIST_HALF_REDUCE=")
endif()
