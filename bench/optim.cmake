# Optimizer update bandwidth against memcpy (run by hand, never by CTest):
#   build/bin/optim_bench --threads 1 --json optim.json
add_executable(optim_bench ${CMAKE_CURRENT_SOURCE_DIR}/optim_bench.c)
target_link_libraries(optim_bench PRIVATE anygrad m)
