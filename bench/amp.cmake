# Mixed precision: step time and peak activation memory, f32 vs f16 vs bf16.
add_executable(amp_bench ${CMAKE_CURRENT_SOURCE_DIR}/amp_bench.c)
target_link_libraries(amp_bench PRIVATE anygrad m)
