# GPU benchmark (bench/gpu_bench.c) and the kernel check against the CPU
# backend (tests/gpu_check.c). Both drive a backend module through its vtable
# and are built whenever a GPU module is, with or without cmocka, so
# scripts/gpu_check.sh can run them on a GPU machine with AG_TESTS=OFF, and
# CI runs the kernel check on the emulated GPU (gpuemu).
if(TARGET anygrad-cuda OR TARGET anygrad-hip OR TARGET anygrad-gpuemu OR TARGET anygrad-vulkan)
  add_executable(gpu_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpu_bench.c)
  target_link_libraries(gpu_bench PRIVATE anygrad ${CMAKE_DL_LIBS} m)
  add_executable(gpu_check ${PROJECT_SOURCE_DIR}/tests/gpu_check.c)
  # the static core gives the CPU kernels (ag__cpu_run) as the oracle
  target_link_libraries(gpu_check PRIVATE anygrad_static ${CMAKE_DL_LIBS} m)
  target_include_directories(gpu_check PRIVATE ${PROJECT_SOURCE_DIR}/tools)
  foreach(_b cuda hip gpuemu vulkan)
    if(TARGET anygrad-${_b})
      add_dependencies(gpu_bench anygrad-${_b})
      add_dependencies(gpu_check anygrad-${_b})
    endif()
  endforeach()
endif()

# Speed of the emulator's execution model (fiber switches per second).
if(TARGET anygrad-gpuemu)
  enable_language(CXX)
  set(_gpu ${PROJECT_SOURCE_DIR}/kernels/gpu)
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_bench.cu PROPERTIES LANGUAGE CXX
                              COMPILE_OPTIONS "-xc++")
  add_executable(gpuemu_bench ${CMAKE_CURRENT_SOURCE_DIR}/gpuemu_bench.cu ${_gpu}/emu/emu_exec.cc
                 ${_gpu}/emu/emu_runtime.cc)
  target_include_directories(gpuemu_bench PRIVATE ${_gpu})
  target_compile_definitions(gpuemu_bench PRIVATE AG_GPU_HOST=1)
  target_compile_options(gpuemu_bench PRIVATE -std=c++17 -ffp-contract=off -Wno-unknown-pragmas)
  set_target_properties(gpuemu_bench PROPERTIES LINKER_LANGUAGE CXX)
  target_link_libraries(gpuemu_bench PRIVATE anygrad Threads::Threads ${CMAKE_DL_LIBS})
endif()
