# Data parallelism: overlap of bucket reductions with backward, and the
# heterogeneous balance (in-process CPU replicas; docs/distributed.md).
if(TARGET anygrad_models)
  add_executable(ddp_bench ${CMAKE_CURRENT_SOURCE_DIR}/ddp_bench.c)
  target_link_libraries(ddp_bench PRIVATE anygrad_models anygrad Threads::Threads m)
endif()
