# Fused attention against the unfused composition: time and memory vs T.
add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
target_link_libraries(attention_bench PRIVATE anygrad m)
