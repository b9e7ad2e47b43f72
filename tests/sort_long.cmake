# Sort of long lines (100003 elements, ties and NaNs, both directions, along
# a middle dim) on each GPU-style backend against the CPU, bit for bit
# (tests/sort_long_test.c; the merge-sort passes: docs/vulkan.md, docs/opencl.md); the
# Vulkan run under the validation layers, where any message fails it.
add_executable(sort_long_test ${CMAKE_CURRENT_SOURCE_DIR}/sort_long_test.c)
target_include_directories(sort_long_test PRIVATE ${AG_CMOCKA_INCLUDE} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(sort_long_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
foreach(_be opencl vulkan gpuemu)
  if(TARGET anygrad-${_be})
    set(_env "AG_TEST_DEVICE=${_be}:0" "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-${_be}>")
    if(_be STREQUAL "vulkan")
      list(APPEND _env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
           "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
           "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
    endif()
    add_test(NAME sort_long_${_be} COMMAND sort_long_test)
    set_tests_properties(sort_long_${_be} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "ops;${_be}"
                         ENVIRONMENT "${_env}")
  endif()
endforeach()
