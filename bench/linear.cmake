# Linear forward with the bias folded into the GEMM against matmul + add (run by hand):
#   build/bin/linear_bench --threads 1 --rounds 15
add_executable(linear_bench ${CMAKE_CURRENT_SOURCE_DIR}/linear_bench.c)
target_link_libraries(linear_bench PRIVATE anygrad m)
