# The Vulkan backend where a GPU would be slow (tests/gpu3_vulkan_perf_test.c):
# barriers only between dependent dispatches, and f32 dropout and normal fills
# where f64 is slow (AG_VULKAN_TEST=slow_f64). Under the validation layers
# with synchronization validation, as tests/gpu3_vulkan.cmake's.
if(TARGET anygrad-vulkan)
  add_executable(gpu3_vulkan_perf_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_vulkan_perf_test.c)
  target_link_libraries(gpu3_vulkan_perf_test PRIVATE anygrad ${AG_CMOCKA_LIB} ${CMAKE_DL_LIBS} m)
  add_dependencies(gpu3_vulkan_perf_test anygrad-vulkan)
  set(_gpu3p_env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
      "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
      "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  add_test(NAME gpu3_vulkan_barriers COMMAND gpu3_vulkan_perf_test barriers)
  add_test(NAME gpu3_vulkan_random COMMAND gpu3_vulkan_perf_test random)
  add_test(NAME gpu3_vulkan_slow_f64 COMMAND gpu3_vulkan_perf_test random)
  set_tests_properties(gpu3_vulkan_barriers gpu3_vulkan_random gpu3_vulkan_slow_f64 PROPERTIES LABELS "vulkan" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_gpu3p_env}")
  set_property(TEST gpu3_vulkan_slow_f64 APPEND PROPERTY ENVIRONMENT "AG_VULKAN_TEST=slow_f64")
endif()
