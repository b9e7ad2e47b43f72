# The CUDA/HIP attention kernels on the emulated GPU beyond tests/attention_test.c
# (tests/gpu3_attention_test.c: heads of 65 to 128, repeatable bits), plainly
# and under the emulator's checker.
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
