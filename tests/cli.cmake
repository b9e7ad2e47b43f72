# The command line as a user runs it (tests/cli_test.py): strict options and
# exit codes, unavailable backends, and the main job's checkpoint guarantees.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case usage_errors unavailable_backend json_version resume_no_rewrite nonfinite out_unwritable
                resume_seed metadata temp_files fifo ulimit ulimit_exit profiler_output docs cuda_reason data_parallel threads
                text_task numerics zero)
    add_test(NAME cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/cli_test.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/cli_${_case} ${PROJECT_SOURCE_DIR} $<TARGET_FILE_DIR:anygrad> ${_case})
    set_tests_properties(cli_${_case} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
# The job's library entry and the checkpoint writer under hostile input.
if(TARGET anygrad_models)
  add_executable(charlm_test ${CMAKE_CURRENT_SOURCE_DIR}/charlm_test.c)
  target_compile_definitions(charlm_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(charlm_test PRIVATE anygrad_models anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME charlm COMMAND charlm_test)
  set_tests_properties(charlm PROPERTIES TIMEOUT 300 LABELS "cli" ENVIRONMENT "AG_CHARLM_TEST_DEVICES=gpuemu:0")
  # The OpenCL device on its own (PoCL's threads crash LeakSanitizer's
  # exit-time scan, so the sanitizer stage runs *opencl* tests without leak
  # checks: scripts/test.sh).
  if(TARGET anygrad-opencl)
    add_test(NAME charlm_opencl COMMAND charlm_test)
    set_tests_properties(charlm_opencl PROPERTIES TIMEOUT 300 LABELS "cli;opencl" ENVIRONMENT
                         "AG_CHARLM_TEST_DEVICES=opencl:0;AG_TEST_FILTER=batch_auto_under_a_cap")
  endif()
endif()
