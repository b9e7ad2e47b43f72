# Vulkan ops past one work-group's loop (tests/vk_size_test.c): 64M-element
# reductions, cumsum and softmax, a matmul with K = 4M and f64 rows of 1M on
# vulkan:0 under the validation layers with synchronization validation (a
# message fails the next synchronization). Lavapipe takes tens of seconds
# and gigabytes: the release configuration only, label vulkan_size.
if(TARGET anygrad-vulkan AND NOT AG_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Release")
  add_executable(vk_size_test ${CMAKE_CURRENT_SOURCE_DIR}/vk_size_test.c)
  target_link_libraries(vk_size_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(vk_size_test anygrad-vulkan)
  add_test(NAME vulkan_size COMMAND vk_size_test)
  set_tests_properties(vulkan_size PROPERTIES LABELS "vulkan;vulkan_size" TIMEOUT 600 SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE ENVIRONMENT
                       "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation;VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>;LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
endif()
