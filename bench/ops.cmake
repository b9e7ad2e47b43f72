# Per-op host overhead and throughput on a backend, against memcpy bandwidth
# and (with --torch) PyTorch on the CPU.
add_executable(ops_bench ${CMAKE_CURRENT_SOURCE_DIR}/ops_bench.c ${PROJECT_SOURCE_DIR}/tools/cmd_bench.c ${AG_CONF_SOURCES}
               ${PROJECT_SOURCE_DIR}/tools/cli.c)
target_include_directories(ops_bench PRIVATE ${PROJECT_SOURCE_DIR}/tools)
target_compile_definitions(ops_bench PRIVATE AG_OPS_TORCH_SCRIPT="${CMAKE_CURRENT_SOURCE_DIR}/ops_torch.py")
target_link_libraries(ops_bench PRIVATE anygrad m)
