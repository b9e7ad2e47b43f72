# Data parallelism: overlap of bucket reductions with backward, and the
# heterogeneous balance (in-process CPU replicas; docs/distributed.md).
if(TARGET anygrad_models)
  add_executable(ddp_bench ${CMAKE_CURRENT_SOURCE_DIR}/ddp_bench.c)
  target_link_libraries(ddp_bench PRIVATE anygrad_models anygrad Threads::Threads m)
endif()
# Sharded optimizer state (ZeRO stages 1 and 2): optimizer memory per
# replica and step time against unsharded DDP (docs/distributed.md).
if(TARGET anygrad_models)
  add_executable(zero_bench ${CMAKE_CURRENT_SOURCE_DIR}/zero_bench.c)
  target_link_libraries(zero_bench PRIVATE anygrad_models anygrad Threads::Threads m)
endif()

# Across processes (hosts): the same overlap under mpirun
# (scripts/mhost_bench.sh: one rank per network-namespace host over TCP).
if(TARGET anygrad_models AND AG_HAVE_MPI)
  add_executable(mhost_ddp_bench ${CMAKE_CURRENT_SOURCE_DIR}/mhost_ddp_bench.c)
  target_link_libraries(mhost_ddp_bench PRIVATE anygrad_models anygrad MPI::MPI_C m)
  add_dependencies(mhost_ddp_bench anygrad-mpi)
endif()
