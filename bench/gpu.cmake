# GPU benchmark (bench/gpu_bench.c) and the kernel check against the CPU
# backend (tests/gpu_check.c). Both drive a backend module through its vtable
# and are built whenever a GPU module is, with or without cmocka, so
# scripts/gpu_check.sh can run them on a GPU machine with AG_TESTS=OFF.
if(TARGET anygrad-cuda OR TARGET anygrad-hip)
  add_executable(gpu_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu_bench.c)
  target_link_libraries(gpu_bench PRIVATE anygrad ${CMAKE_DL_LIBS} m)
  add_executable(gpu_check ${PROJECT_SOURCE_DIR}/tests/gpu_check.c)
  # the static core gives the CPU kernels (ag__cpu_run) as the oracle
  target_link_libraries(gpu_check PRIVATE anygrad_static ${CMAKE_DL_LIBS} m)
  foreach(_b cuda hip)
    if(TARGET anygrad-${_b})
      add_dependencies(gpu_bench anygrad-${_b})
      add_dependencies(gpu_check anygrad-${_b})
    endif()
  endforeach()
endif()
