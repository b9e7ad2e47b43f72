# Matmul through the register-blocked GEMM on vulkan:0 (tests/vk_gemm_test.c)
# under the validation layers with synchronization validation (a message
# fails the next synchronization): the default tile, and tiles of other
# specialization constant (TM | TN << 4 | BK << 8: 12 x 4 blocks, K in
# slices of 12; a new pipeline to JIT, so in the release configuration
# only). Skips (77) without vulkan:0.
if(TARGET anygrad-vulkan)
  add_executable(vk_gemm_test ${CMAKE_CURRENT_SOURCE_DIR}/vk_gemm_test.c)
  target_link_libraries(vk_gemm_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(vk_gemm_test anygrad-vulkan)
  set(_vkg_env "VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation"
      "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"
      "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-vulkan>"
      "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
  add_test(NAME vulkan_gemm COMMAND vk_gemm_test)
  set_tests_properties(vulkan_gemm PROPERTIES ENVIRONMENT "${_vkg_env}" LABELS vulkan TIMEOUT 600
                       SKIP_RETURN_CODE 77)
  if(NOT AG_SANITIZE)
    add_test(NAME vulkan_gemm_tile COMMAND vk_gemm_test)
    set_tests_properties(vulkan_gemm_tile PROPERTIES ENVIRONMENT "${_vkg_env};AG_VULKAN_TEST=gemm_tile:0xc4c"
                         LABELS vulkan TIMEOUT 600 SKIP_RETURN_CODE 77)
  endif()
endif()
