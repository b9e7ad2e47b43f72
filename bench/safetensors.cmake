# safetensors loading: peak RSS of the reader (pread, tensor by tensor)
# against reading the whole file first, and with --names N the time and page
# faults of opening a header of N names (bench/safetensors_bench.c).
add_executable(safetensors_bench ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_bench.c)
target_link_libraries(safetensors_bench PRIVATE anygrad)
