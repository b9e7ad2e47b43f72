# Collectives (include/anygrad/dist.h). The in-process group is threaded
# (label threads, so the TSan stage runs it); the MPI tests launch mpirun.
add_executable(dist_inproc_test ${CMAKE_CURRENT_SOURCE_DIR}/dist_inproc_test.c)
target_include_directories(dist_inproc_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(dist_inproc_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
add_test(NAME dist_inproc COMMAND dist_inproc_test)
set_tests_properties(dist_inproc PROPERTIES TIMEOUT 300 LABELS "dist;threads" ENVIRONMENT "AG_DIST_TIMEOUT_MS=")
