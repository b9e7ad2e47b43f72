# OpenCL backend throughput on the first OpenCL device, and CLBlast GEMM
# against OpenBLAS on the host CPU.
if(TARGET anygrad-opencl AND AG_OPENBLAS_LIB AND AG_CBLAS_INCLUDE)
  add_executable(opencl_bench ${CMAKE_CURRENT_SOURCE_DIR}/opencl_bench.c)
  target_include_directories(opencl_bench PRIVATE ${AG_CBLAS_INCLUDE})
  target_compile_definitions(opencl_bench PRIVATE AG_OPENCL_MODULE="$<TARGET_FILE:anygrad-opencl>")
  target_link_libraries(opencl_bench PRIVATE anygrad ${AG_OPENBLAS_LIB} ${CMAKE_DL_LIBS})
  add_dependencies(opencl_bench anygrad-opencl)
endif()
