# The GPU modules and the caller's current device (tests/gpu3_gpuemu_test.c):
# every public call that reaches the module, on one emulated device while
# the other is current on the thread, leaves the other current. Immediate
# and deferred streams.
if(TARGET anygrad-gpuemu)
  add_executable(gpu3_gpuemu_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_gpuemu_test.c)
  target_include_directories(gpu3_gpuemu_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(gpu3_gpuemu_test PRIVATE anygrad ${AG_CMOCKA_LIB} ${CMAKE_DL_LIBS} m)
  add_dependencies(gpu3_gpuemu_test anygrad-gpuemu)
  add_test(NAME gpu3_gpuemu_current_device COMMAND gpu3_gpuemu_test $<TARGET_FILE:anygrad-gpuemu>)
  add_test(NAME gpu3_gpuemu_current_device_deferred COMMAND gpu3_gpuemu_test $<TARGET_FILE:anygrad-gpuemu>)
  set_tests_properties(gpu3_gpuemu_current_device PROPERTIES ENVIRONMENT
                       "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
  set_tests_properties(gpu3_gpuemu_current_device_deferred PROPERTIES ENVIRONMENT
                       "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>;AG_GPUEMU_DEFERRED=1")
  set_tests_properties(gpu3_gpuemu_current_device gpu3_gpuemu_current_device_deferred PROPERTIES
                       TIMEOUT 120 LABELS gpuemu)
endif()
