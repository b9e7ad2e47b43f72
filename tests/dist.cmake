# Collectives (include/anygrad/dist.h). The in-process group is threaded
# (label threads, so the TSan stage runs it); the MPI tests launch mpirun.
add_executable(dist_inproc_test ${CMAKE_CURRENT_SOURCE_DIR}/dist_inproc_test.c)
target_include_directories(dist_inproc_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(dist_inproc_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
add_test(NAME dist_inproc COMMAND dist_inproc_test)
set_tests_properties(dist_inproc PROPERTIES TIMEOUT 300 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=")

if(AG_HAVE_MPI AND AG_MPIEXEC)
  add_executable(dist_mpi_test ${CMAKE_CURRENT_SOURCE_DIR}/dist_mpi_test.c)
  target_include_directories(dist_mpi_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(dist_mpi_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(dist_mpi_test anygrad-mpi)
  # As root, Open MPI refuses to start without these; --oversubscribe lets 4
  # ranks share CI's 2 cores. Open MPI's own allocations at MPI_Init are
  # still held at exit: not a finding about anygrad, so no leak check here
  # (the in-process test keeps it).
  set(_ag_mpi_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;AG_DIST_TIMEOUT_MS=;ASAN_OPTIONS=detect_leaks=0")
  add_test(NAME dist_mpi_np2 COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:dist_mpi_test>)
  add_test(NAME dist_mpi_np4 COMMAND ${AG_MPIEXEC} -np 4 --oversubscribe $<TARGET_FILE:dist_mpi_test>)
  # not a power of two: the small all-reduce's pairing step
  add_test(NAME dist_mpi_np3 COMMAND ${AG_MPIEXEC} -np 3 --oversubscribe $<TARGET_FILE:dist_mpi_test>)
  add_test(NAME dist_mpi_never_arrive COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist_mpi_fail.sh ${AG_MPIEXEC}
           $<TARGET_FILE:dist_mpi_test> never-arrive)
  add_test(NAME dist_mpi_killed_rank COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/dist_mpi_fail.sh ${AG_MPIEXEC}
           $<TARGET_FILE:dist_mpi_test> kill)
  set_tests_properties(dist_mpi_np2 dist_mpi_np3 dist_mpi_np4 dist_mpi_never_arrive dist_mpi_killed_rank PROPERTIES
                       TIMEOUT 120 LABELS dist ENVIRONMENT "${_ag_mpi_env}" RUN_SERIAL ON)
  # A device that is not host memory: pinned staging and f16/bf16 widening.
  if(TARGET anygrad-gpuemu)
    add_test(NAME dist_mpi_np2_staged COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:dist_mpi_test>)
    set_tests_properties(dist_mpi_np2_staged PROPERTIES TIMEOUT 180 LABELS "dist;gpuemu" RUN_SERIAL ON
                         ENVIRONMENT "${_ag_mpi_env};AG_DIST_TEST_DEVICE=gpuemu:0")
  endif()
endif()

# f16/bf16 sums on the device path (NCCL's) widened to f32: a test-only
# implementation reducing in the dtype it is handed (linked statically for
# the core's test entry that forces device buffers on the CPU device).
add_executable(dist_half_test ${CMAKE_CURRENT_SOURCE_DIR}/dist_half_test.c)
target_include_directories(dist_half_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
target_link_libraries(dist_half_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} m)
add_test(NAME dist_half COMMAND dist_half_test)
set_tests_properties(dist_half PROPERTIES TIMEOUT 60 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=;AG_DIST_HALF_REDUCE=")
