# The real-GPU checks of scripts/gpu_check.sh that are programs of their own,
# built with or without cmocka (AG_TESTS=OFF there): the caller's current
# device around anygrad's calls (tests/gpu3_current_device.c: on the CUDA
# runtime with AG_CD_CUDA, against the emulated GPU without; CTest runs the
# latter, tests/gpu3_gpucheck.cmake) and two NCCL communicators on one GPU
# (tests/gpu3_nccl_two.c).
if(TARGET anygrad-cuda OR TARGET anygrad-gpuemu)
  add_executable(gpu3_current_device ${PROJECT_SOURCE_DIR}/tests/gpu3_current_device.c)
  target_link_libraries(gpu3_current_device PRIVATE anygrad Threads::Threads ${CMAKE_DL_LIBS})
endif()
if(TARGET anygrad-cuda)
  # the test's own shared cudart beside the module's hidden static one, as
  # PyTorch's is: the current device is the driver's, shared by both
  get_filename_component(_cd_root ${AG_NVCC} DIRECTORY)
  get_filename_component(_cd_root ${_cd_root} DIRECTORY)
  find_library(AG_CUDART_SHARED NAMES cudart HINTS ${_cd_root}/lib64 ${_cd_root}/lib
               ${_cd_root}/targets/x86_64-linux/lib NO_DEFAULT_PATH)
  find_path(AG_CUDA_INCLUDE cuda_runtime_api.h HINTS ${_cd_root}/include ${_cd_root}/targets/x86_64-linux/include
            NO_DEFAULT_PATH)
  if(AG_CUDART_SHARED AND AG_CUDA_INCLUDE)
    add_executable(gpu3_current_device_cuda ${PROJECT_SOURCE_DIR}/tests/gpu3_current_device.c)
    target_compile_definitions(gpu3_current_device_cuda PRIVATE AG_CD_CUDA=1)
    target_include_directories(gpu3_current_device_cuda SYSTEM PRIVATE ${AG_CUDA_INCLUDE})
    target_link_libraries(gpu3_current_device_cuda PRIVATE anygrad ${AG_CUDART_SHARED} Threads::Threads
                          ${CMAKE_DL_LIBS})
    get_filename_component(_cd_libdir ${AG_CUDART_SHARED} DIRECTORY)
    set_target_properties(gpu3_current_device_cuda PROPERTIES BUILD_RPATH "${_cd_libdir}")
  endif()
endif()
if(TARGET anygrad-nccl)
  add_executable(gpu3_nccl_two ${PROJECT_SOURCE_DIR}/tests/gpu3_nccl_two.c)
  target_link_libraries(gpu3_nccl_two PRIVATE anygrad Threads::Threads)
  add_dependencies(gpu3_nccl_two anygrad-nccl)
endif()
