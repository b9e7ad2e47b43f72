# Vision benchmarks of issue 17 (run by hand, never by CTest):
#   build/bin/cnn_bench --torch bench/cnn_torch.py --json cnn_bench.json
add_executable(cnn_bench ${CMAKE_CURRENT_SOURCE_DIR}/cnn_bench.c)
target_link_libraries(cnn_bench PRIVATE anygrad m)
