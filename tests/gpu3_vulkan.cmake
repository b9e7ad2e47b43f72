# The Vulkan backend at the level of the specification (tests/gpu3_vulkan_test.c):
# semaphore lifetimes across streams. Under the validation layers as
# tests/vulkan.cmake's: any message fails the test.
if(TARGET anygrad-vulkan)
  add_executable(gpu3_vulkan_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_vulkan_test.c)
  target_link_libraries(gpu3_vulkan_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(gpu3_vulkan_test anygrad-vulkan)
  set(_gpu3_env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
      "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
      "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  add_test(NAME gpu3_vulkan_semaphore COMMAND gpu3_vulkan_test semaphore)
  foreach(_t gpu3_vulkan_semaphore)
    set_tests_properties(${_t} PROPERTIES LABELS "vulkan" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_gpu3_env}")
  endforeach()
  # Under the sanitizers the semaphore stress runs with the layer's core
  # validation only: synchronization validation (1.3.239) leaks its batch
  # records of the 40 destroyed streams, in frames LeakSanitizer cannot
  # attribute to the layer.
  if(AG_SANITIZE)
    set_property(TEST gpu3_vulkan_semaphore APPEND PROPERTY ENVIRONMENT "VK_LAYER_ENABLES=")
  endif()
endif()
