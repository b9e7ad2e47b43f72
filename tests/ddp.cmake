# Data parallelism (include/anygrad/ddp.h) on in-process groups: buckets,
# reduced gradients against the full batch, no_sync, the grad scaler, charlm
# replicas against one device, resume from N to M replicas, balance. Threaded
# (label threads, so the TSan stage runs it).
if(TARGET anygrad_models)
  add_executable(ddp_test ${CMAKE_CURRENT_SOURCE_DIR}/ddp_test.c)
  target_compile_definitions(ddp_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(ddp_test PRIVATE anygrad_models anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
  add_test(NAME ddp COMMAND ddp_test)
  set_tests_properties(ddp PROPERTIES TIMEOUT 300 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=60000")
endif()

# Across processes: mpirun -np 2 and -np 4 (oversubscribed on CI's 2 cores).
if(TARGET anygrad_models AND AG_HAVE_MPI)
  add_executable(ddp_mpi_test ${CMAKE_CURRENT_SOURCE_DIR}/ddp_mpi_test.c)
  target_link_libraries(ddp_mpi_test PRIVATE anygrad_models anygrad m)
  add_dependencies(ddp_mpi_test anygrad-mpi)
  # Open MPI keeps its MPI_Init allocations at exit: no leak check here (as
  # tests/dist.cmake); the in-process ddp test keeps it.
  set(_ag_ddp_mpi_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;AG_DIST_TIMEOUT_MS=60000;ASAN_OPTIONS=detect_leaks=0")
  add_test(NAME ddp_mpi_np2 COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:ddp_mpi_test>)
  add_test(NAME ddp_mpi_np4 COMMAND ${AG_MPIEXEC} -np 4 --oversubscribe $<TARGET_FILE:ddp_mpi_test>)
  add_test(NAME ddp_mpi_np2_balance COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:ddp_mpi_test> balance)
  add_test(NAME ddp_mpi_np2_zero1 COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:ddp_mpi_test> zero1)
  add_test(NAME ddp_mpi_np2_zero2 COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:ddp_mpi_test> zero2)
  set_tests_properties(ddp_mpi_np2 ddp_mpi_np4 ddp_mpi_np2_balance ddp_mpi_np2_zero1 ddp_mpi_np2_zero2 PROPERTIES
                       TIMEOUT 120 LABELS dist ENVIRONMENT "${_ag_ddp_mpi_env}" RUN_SERIAL ON)
endif()

# Sharded optimizer state (ZeRO stages 1 and 2): equality with unsharded
# DDP, optimizer memory per rank, checkpoints resharded from 2 ranks to 3
# and to one device. In-process ranks on threads (label threads).
if(TARGET anygrad)
  add_executable(zero_test ${CMAKE_CURRENT_SOURCE_DIR}/zero_test.c)
  target_compile_definitions(zero_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(zero_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
  add_test(NAME ddp_zero COMMAND zero_test)
  set_tests_properties(ddp_zero PROPERTIES TIMEOUT 120 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=60000")
endif()
