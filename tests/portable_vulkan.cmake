# Portable numerics on vulkan:0 bit for bit against the CPU
# (tests/portable_vulkan_test.c), under the validation layers with
# synchronization validation as tests/gpu3_vulkan.cmake's: any message
# fails the test. Skips without a Vulkan device.
if(TARGET anygrad-vulkan)
  add_executable(portable_vulkan_test ${CMAKE_CURRENT_SOURCE_DIR}/portable_vulkan_test.c)
  target_link_libraries(portable_vulkan_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(portable_vulkan_test anygrad-vulkan)
  add_test(NAME portable_vulkan COMMAND portable_vulkan_test)
  # without SignedZeroInfNanPreserve the device refuses the mode
  add_test(NAME portable_vulkan_refused COMMAND portable_vulkan_test refused)
  set_tests_properties(portable_vulkan portable_vulkan_refused PROPERTIES LABELS "vulkan" TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation;VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  set_property(TEST portable_vulkan_refused APPEND PROPERTY ENVIRONMENT "AG_VULKAN_TEST=no_float_controls")
endif()
