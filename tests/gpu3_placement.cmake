# Which device each rank runs on and which one is current on the thread that
# drives the communication library (docs/distributed.md): the launcher's
# local rank and the gpuemu module's thread_device entry (no MPI needed),
# two MPI ranks on gpuemu:0 and gpuemu:1 (tests/gpu3_placement_test.c), and
# `anygrad train --dist mpi --device gpuemu` (tests/gpu3_placement_cli.py).
if(TARGET anygrad-gpuemu)
  add_executable(gpu3_placement_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_placement_test.c)
  target_include_directories(gpu3_placement_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(gpu3_placement_test PRIVATE anygrad ${AG_CMOCKA_LIB} ${CMAKE_DL_LIBS})
  add_dependencies(gpu3_placement_test anygrad-gpuemu)
  add_test(NAME gpu3_placement COMMAND gpu3_placement_test)
  set_tests_properties(gpu3_placement PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS "dist;gpuemu")
  if(AG_HAVE_MPI AND AG_MPIEXEC)
    find_package(MPI COMPONENTS C QUIET)
    # MPI_Isend is interposed (PMPI): the executable exports it
    target_link_libraries(gpu3_placement_test PRIVATE MPI::MPI_C)
    target_compile_definitions(gpu3_placement_test PRIVATE AG_TEST_MPI=1)
    set_target_properties(gpu3_placement_test PROPERTIES ENABLE_EXPORTS ON)
    add_dependencies(gpu3_placement_test anygrad-mpi)
    set(_ag_pl_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;AG_DIST_TIMEOUT_MS=;ASAN_OPTIONS=detect_leaks=0")
    add_test(NAME gpu3_placement_mpi_np2 COMMAND ${AG_MPIEXEC} -np 2 $<TARGET_FILE:gpu3_placement_test> mpi)
    set_tests_properties(gpu3_placement_mpi_np2 PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "dist;gpuemu"
                         ENVIRONMENT "${_ag_pl_env}" RUN_SERIAL ON)
  endif()
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND TARGET anygrad-gpuemu AND Python3_Interpreter_FOUND)
  foreach(_case local_rank named_device no_launcher)
    add_test(NAME gpu3_placement_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_placement_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/gpu3_placement_cli_${_case} $<TARGET_FILE_DIR:anygrad> ${_case})
    set_tests_properties(gpu3_placement_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                         LABELS "cli;dist;gpuemu" RUN_SERIAL ON)
  endforeach()
endif()
