# Fused attention against the unfused composition: time and memory vs T.
# Beside PyTorch's unfused math, and the memory fit (run by hand, never by CTest):
#   bench/attention_torch.py --T 256,1024,4096 --rounds 5
#   bench/attention_memory.py --T 256,512,1024,1536,2048,3072,4096
add_executable(attention_bench ${CMAKE_CURRENT_SOURCE_DIR}/attention_bench.c)
target_link_libraries(attention_bench PRIVATE anygrad m)
