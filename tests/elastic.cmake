# `anygrad launch`, the elastic launcher (docs/distributed.md, "Elastic
# runs"): mpirun over test hosts reached through an agent script
# (tests/elastic_cli.py), a rank killed mid-run and the restart with the
# survivors compared byte for byte with a fresh run; the same with hosts made
# of network namespaces and a link taken down. Processes and timing:
# release only, one at a time.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT AG_SANITIZE AND TARGET anygrad-cli AND AG_HAVE_MPI AND AG_MPIEXEC AND Python3_Interpreter_FOUND)
  foreach(_case kill min_hosts rejoin stall restarts usage)
    add_test(NAME elastic_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/elastic_cli.py $<TARGET_FILE:anygrad-cli>
                     ${AG_MPIEXEC} ${CMAKE_CURRENT_BINARY_DIR}/elastic_${_case} ${_case})
    set_tests_properties(elastic_${_case} PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 LABELS "dist;cli" RUN_SERIAL ON)
  endforeach()
  # Across hosts made of network namespaces (tests/elastic_netns.py): a
  # host's link taken down mid-run, the restart with the 2 survivors (and,
  # in `rejoin`, the host back at the next restart). Needs root and network
  # namespaces: SKIP (exit 77) with the reason otherwise.
  foreach(_case down rejoin)
    add_test(NAME elastic_netns_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/elastic_netns.py
                     ${PROJECT_SOURCE_DIR}/scripts/netns_hosts.sh $<TARGET_FILE:anygrad-cli> ${AG_MPIEXEC}
                     ${CMAKE_CURRENT_BINARY_DIR}/elastic_netns_${_case} ${_case})
    set_tests_properties(elastic_netns_${_case} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "dist;cli"
                         RUN_SERIAL ON ENVIRONMENT "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad>")
  endforeach()
endif()
