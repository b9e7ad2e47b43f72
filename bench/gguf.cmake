# anygrad's greedy generation from a Hugging Face folder, which
# bench/gguf_llamacpp_check.py compares with llama.cpp on the GGUF export
# (docs/export.md, "GGUF"; not in CI: llama.cpp is built from source).
add_executable(gguf_greedy ${CMAKE_CURRENT_SOURCE_DIR}/gguf_greedy.c)
target_link_libraries(gguf_greedy PRIVATE anygrad m)
