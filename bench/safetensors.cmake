# safetensors loading: peak RSS of the memory-mapped reader against reading
# the whole file first (bench/safetensors_bench.c).
add_executable(safetensors_bench ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_bench.c)
target_link_libraries(safetensors_bench PRIVATE anygrad)
