# The Vulkan backend at the level of the specification (tests/gpu3_vulkan_test.c):
# NaN, infinity and signed zeros against the CPU, the SignedZeroInfNanPreserve
# execution mode of every SPIR-V module, semaphore lifetimes across streams,
# and the device limits and non-coherent memory through AG_VULKAN_TEST. Under
# the validation layers as tests/vulkan.cmake's: any message fails the test.
if(TARGET anygrad-vulkan)
  add_executable(gpu3_vulkan_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_vulkan_test.c)
  target_link_libraries(gpu3_vulkan_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(gpu3_vulkan_test anygrad-vulkan)
  get_property(_gpu3_spv GLOBAL PROPERTY AG_VULKAN_SPV)
  set(_gpu3_env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
      "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
      "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  add_test(NAME gpu3_vulkan_ops COMMAND gpu3_vulkan_test ops)
  add_test(NAME gpu3_vulkan_semaphore COMMAND gpu3_vulkan_test semaphore)
  add_test(NAME gpu3_vulkan_spirv COMMAND gpu3_vulkan_test spirv ${_gpu3_spv})
  add_test(NAME gpu3_vulkan_noncoherent COMMAND gpu3_vulkan_test coherent)
  add_test(NAME gpu3_vulkan_no_float_controls COMMAND gpu3_vulkan_test no_float_controls)
  add_test(NAME gpu3_vulkan_max_buffer COMMAND gpu3_vulkan_test max_buffer)
  add_test(NAME gpu3_vulkan_workgroup COMMAND gpu3_vulkan_test workgroup)
  set(_gpu3_switch
      gpu3_vulkan_noncoherent "AG_VULKAN_TEST=noncoherent"
      gpu3_vulkan_no_float_controls "AG_VULKAN_TEST=no_float_controls"
      gpu3_vulkan_max_buffer "AG_VULKAN_TEST=max_buffer_size:8388608"
      gpu3_vulkan_workgroup "AG_VULKAN_TEST=max_workgroup_size:128")
  foreach(_t gpu3_vulkan_ops gpu3_vulkan_semaphore gpu3_vulkan_spirv gpu3_vulkan_noncoherent
             gpu3_vulkan_no_float_controls gpu3_vulkan_max_buffer gpu3_vulkan_workgroup)
    set_tests_properties(${_t} PROPERTIES LABELS "vulkan" TIMEOUT 300 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_gpu3_env}")
  endforeach()
  while(_gpu3_switch)
    list(POP_FRONT _gpu3_switch _t _v)
    set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT "${_v}")
  endwhile()
  # Under the sanitizers the semaphore stress runs with the layer's core
  # validation only: synchronization validation (1.3.239) leaks its batch
  # records of the 40 destroyed streams, in frames LeakSanitizer cannot
  # attribute to the layer.
  if(AG_SANITIZE)
    set_property(TEST gpu3_vulkan_semaphore APPEND PROPERTY ENVIRONMENT "VK_LAYER_ENABLES=")
  endif()
endif()
