# Byte-level BPE tokenizer: training time and encode/decode MB/s on the
# fortunes corpus (synthetic text when absent), one thread.
add_executable(bpe_bench ${CMAKE_CURRENT_SOURCE_DIR}/bpe_bench.c)
target_link_libraries(bpe_bench PRIVATE anygrad)
