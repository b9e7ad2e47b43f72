# Data parallelism across hosts made of network namespaces
# (scripts/netns_hosts.sh): 2 hosts on the fast profile, 4 on the slow one,
# Open MPI over TCP (btl tcp,self), the charlm GPT and the CNN against one
# device, the veth traffic checked, the losses bit for bit against the same
# job in one machine's processes; on 2 hosts also `anygrad train --dist mpi`
# (GPT against one device, CNN against one machine's processes). Needs root and network namespaces: SKIP
# (exit 77) with the reason otherwise. Not under the sanitizers (Open MPI's
# own allocations; the MPI tests of tests/ddp.cmake run there).
if(TARGET anygrad_models AND AG_HAVE_MPI AND AG_MPIEXEC AND NOT AG_SANITIZE)
  add_executable(mhost_test ${CMAKE_CURRENT_SOURCE_DIR}/mhost_test.c)
  target_link_libraries(mhost_test PRIVATE anygrad_models anygrad m)
  add_dependencies(mhost_test anygrad-mpi)
  # The command line (anygrad train --dist mpi, GPT and CNN) on 2 hosts only:
  # the C API runs above cover 4, and the suite stays short.
  foreach(_n 2 4)
    set(_prof fast)
    set(_cli $<TARGET_FILE:anygrad-cli>)
    if(_n EQUAL 4)
      set(_prof slow)
      set(_cli "")
    endif()
    add_test(NAME mhost_np${_n}_${_prof} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mhost_test.sh
             ${PROJECT_SOURCE_DIR}/scripts/netns_hosts.sh ${_n} ${_prof} ${AG_MPIEXEC} $<TARGET_FILE:mhost_test> ${_cli})
    set_tests_properties(mhost_np${_n}_${_prof} PROPERTIES TIMEOUT 120 LABELS dist RUN_SERIAL ON
                         SKIP_RETURN_CODE 77
                         ENVIRONMENT "AG_DIST_TIMEOUT_MS=60000;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad>")
  endforeach()
endif()
