# Generation with and without the Llama key/value cache: time per token vs
# sequence length (docs/llama.md).
add_executable(llama_gen_bench ${CMAKE_CURRENT_SOURCE_DIR}/llama_gen_bench.c)
target_link_libraries(llama_gen_bench PRIVATE anygrad m)
