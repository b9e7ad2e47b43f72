# Training-step benchmark against PyTorch CPU (run by hand, never by CTest):
#   build/bin/train_bench --torch bench/train_torch.py --json train_bench.json
add_executable(train_bench ${CMAKE_CURRENT_SOURCE_DIR}/train_bench.c)
target_link_libraries(train_bench PRIVATE anygrad m)
