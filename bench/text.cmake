# The default text job's training step (Llama-style model, models/text.c's
# defaults) against the same model in PyTorch eager (run by hand, never by CTest):
#   bench/text_torch.py --bench build/bin/text_bench --rounds 7
if(TARGET anygrad_models)
  add_executable(text_bench ${CMAKE_CURRENT_SOURCE_DIR}/text_bench.c)
  target_link_libraries(text_bench PRIVATE anygrad_models anygrad m)
endif()
