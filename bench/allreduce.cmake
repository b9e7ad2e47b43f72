# All-reduce bus bandwidth: anygrad's MPI group against raw MPI_Allreduce
# (when MPI is found), the in-process group, a 1-rank NCCL group.
add_executable(allreduce_bench ${CMAKE_CURRENT_SOURCE_DIR}/allreduce_bench.c)
target_link_libraries(allreduce_bench PRIVATE anygrad Threads::Threads m)
if(AG_HAVE_MPI)
  find_package(MPI COMPONENTS C QUIET) # imported targets are per directory
  target_compile_definitions(allreduce_bench PRIVATE AG_BENCH_MPI=1)
  target_link_libraries(allreduce_bench PRIVATE MPI::MPI_C)
  add_dependencies(allreduce_bench anygrad-mpi)
endif()
