# Training steps under CPU contention, beside PyTorch (run by hand, never by CTest):
#   build/bin/contention_bench --torch bench/contention_torch.py --json contention.json
add_executable(contention_bench ${CMAKE_CURRENT_SOURCE_DIR}/contention_bench.c)
target_link_libraries(contention_bench PRIVATE anygrad m)
