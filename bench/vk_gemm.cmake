# Matmul GFLOP/s on vulkan:0, f32 and f16, the register-blocked GEMM against
# gemm.comp in interleaved processes (run by hand, never by CTest):
#   bench/vk_gemm.py --rounds 5 --json docs/numbers/vk_gemm.json
add_executable(vk_gemm_bench ${CMAKE_CURRENT_SOURCE_DIR}/vk_gemm_bench.c)
target_link_libraries(vk_gemm_bench PRIVATE anygrad m)
