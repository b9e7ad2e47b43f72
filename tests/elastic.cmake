# `anygrad launch`, the elastic launcher (docs/distributed.md, "Elastic
# runs"): mpirun over test hosts reached through an agent script
# (tests/elastic_cli.py), a rank killed mid-run and the restart with the
# survivors compared byte for byte with a fresh run. Processes and timing:
# release only, one at a time.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT AG_SANITIZE AND TARGET anygrad-cli AND AG_HAVE_MPI AND AG_MPIEXEC AND Python3_Interpreter_FOUND)
  foreach(_case kill min_hosts rejoin stall restarts usage)
    add_test(NAME elastic_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/elastic_cli.py $<TARGET_FILE:anygrad-cli>
                     ${AG_MPIEXEC} ${CMAKE_CURRENT_BINARY_DIR}/elastic_${_case} ${_case})
    set_tests_properties(elastic_${_case} PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 LABELS "dist;cli" RUN_SERIAL ON)
  endforeach()
endif()
