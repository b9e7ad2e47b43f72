# The CUDA/HIP attention kernels on the emulated GPU beyond tests/attention_test.c
# (tests/gpu3_attention_test.c: heads of 65 to 128, repeatable bits), plainly
# and under the emulator's checker; and scripts/gpu_resources.py's gate on
# local memory (stack frames, spills, scratch) in hot kernels
# (tests/gpu3_attention_cli.py, on compiler reports it writes: no GPU
# compiler needed).
if(TARGET anygrad-gpuemu)
  add_executable(gpu3_attention_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_attention_test.c)
  target_link_libraries(gpu3_attention_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME gpu3_attention COMMAND gpu3_attention_test)
  set_tests_properties(gpu3_attention PROPERTIES TIMEOUT 300 LABELS gpuemu ENVIRONMENT
                       "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
  if(TARGET anygrad-gpuemu-check)
    add_test(NAME gpu3_attention_checked COMMAND gpu3_attention_test)
    set_tests_properties(gpu3_attention_checked PROPERTIES TIMEOUT 300 LABELS gpuemu ENVIRONMENT
                         "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>;AG_GPUEMU_CHECK=1")
  endif()
endif()
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  foreach(_case stack_frame cumulative_stack spill callee_not_counted amd_scratch amd_unattributed notes
                clean_and_list)
    add_test(NAME gpu3_attention_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_attention_cli.py
                     ${PROJECT_SOURCE_DIR}/scripts/gpu_resources.py
                     ${CMAKE_CURRENT_BINARY_DIR}/gpu3_attention_cli_${_case} ${_case})
    set_tests_properties(gpu3_attention_cli_${_case} PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
