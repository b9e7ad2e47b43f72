# CUDA and HIP backend modules: loading, symbol hiding, init without a device
# and the supports() table (tests/gpu_module_test.c). Kernel results are
# checked on a GPU machine by tests/gpu_check.c (built in bench/gpu.cmake so
# it exists without cmocka) and `anygrad check --backend cuda`.
if(TARGET anygrad-cuda OR TARGET anygrad-hip)
  add_executable(gpu_module_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu_module_test.c)
  target_include_directories(gpu_module_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(gpu_module_test PRIVATE anygrad ${AG_CMOCKA_LIB} ${CMAKE_DL_LIBS})
  foreach(_b cuda hip)
    if(TARGET anygrad-${_b})
      string(TOUPPER ${_b} _B)
      target_compile_definitions(gpu_module_test PRIVATE AG_${_B}_MODULE="$<TARGET_FILE:anygrad-${_b}>")
      add_dependencies(gpu_module_test anygrad-${_b})
    endif()
  endforeach()
  add_test(NAME gpu_module COMMAND gpu_module_test)
  set_tests_properties(gpu_module PROPERTIES TIMEOUT 120 LABELS gpu)
endif()
