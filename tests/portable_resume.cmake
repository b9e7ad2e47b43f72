# Portable numerics across a checkpoint: trained on one backend, resumed on
# another, the same bits as the uninterrupted run (MLP and a small GPT).
add_executable(portable_resume_test ${CMAKE_CURRENT_SOURCE_DIR}/portable_resume_test.c)
target_compile_definitions(portable_resume_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
target_link_libraries(portable_resume_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME portable_resume COMMAND portable_resume_test)
set_tests_properties(portable_resume PROPERTIES TIMEOUT 600 LABELS "numerics")
if(AG_SANITIZE)
  # it opens opencl:0: PoCL's threads crash LeakSanitizer's exit-time scan
  # (scripts/test.sh runs the OpenCL tests without it too)
  set_tests_properties(portable_resume PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endif()
