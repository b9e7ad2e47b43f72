# Single-precision sin and cos of the GPU kernels (kernels/gpu/trig.cuh) on
# gpuemu:0 against double-precision libm, at most 2 ulp; the CPU backend's
# stay libm's (tests/gpu3_trig_test.c).
if(TARGET anygrad-gpuemu)
  add_executable(gpu3_trig_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_trig_test.c)
  target_include_directories(gpu3_trig_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(gpu3_trig_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(gpu3_trig_test anygrad-gpuemu)
  add_test(NAME gpu3_trig_sincos COMMAND gpu3_trig_test)
  set_tests_properties(gpu3_trig_sincos PROPERTIES ENVIRONMENT "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>"
                       TIMEOUT 300 LABELS gpuemu)
endif()
