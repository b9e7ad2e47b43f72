# The CPU's f32 GEMM engines side by side, one thread each (run by hand):
#   build/bin/gemm_bench --rounds 7 --json gemm_bench.json
if(AG_OPENBLAS_LIB AND AG_CBLAS_INCLUDE)
  add_executable(gemm_bench ${CMAKE_CURRENT_SOURCE_DIR}/gemm_bench.c)
  target_include_directories(gemm_bench PRIVATE ${AG_CBLAS_INCLUDE})
  target_link_libraries(gemm_bench PRIVATE anygrad ${AG_OPENBLAS_LIB} ${CMAKE_DL_LIBS})
endif()
