# The Vulkan backend's layout for discrete GPUs (tests/gpu3_vulkan_perf2_test.c):
# argument blocks in device-local memory (AG_VULKAN_TEST=device_local_args,
# mapped_args) give the default path's bits, under the validation layers with
# synchronization validation; the attention modules run work-groups of 64 or
# more invocations.
if(TARGET anygrad-vulkan)
  add_executable(gpu3_vulkan_perf2_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_vulkan_perf2_test.c)
  target_link_libraries(gpu3_vulkan_perf2_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(gpu3_vulkan_perf2_test anygrad-vulkan)
  get_property(_gpu3p2_spv GLOBAL PROPERTY AG_VULKAN_SPV)
  add_test(NAME gpu3_vulkan_device_local_args COMMAND gpu3_vulkan_perf2_test args)
  add_test(NAME gpu3_vulkan_sdpa_wg COMMAND gpu3_vulkan_perf2_test sdpa_wg ${_gpu3p2_spv})
  set_tests_properties(gpu3_vulkan_device_local_args gpu3_vulkan_sdpa_wg PROPERTIES LABELS "vulkan" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT
                       "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation;VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
endif()
