# The Llama-style model (core/nn/llama.c) trained side by side with a
# hand-written PyTorch model from the same initial weights and batches:
# tests/llama_run.c writes weights, batches, losses; tests/llama_torch.py
# compares (skipped without python3-torch; not under sanitizers).
add_executable(llama_run ${CMAKE_CURRENT_SOURCE_DIR}/llama_run.c)
target_link_libraries(llama_run PRIVATE anygrad m)
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME llama_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/llama_torch.py
                                    $<TARGET_FILE:llama_run>)
  set_tests_properties(llama_torch PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
endif()
# The key/value cache (ag_llama_forward_cached): greedy generation through
# it equals generation by full recompute, token for token, logits within
# 1e-5 (tests/llama_cache_test.c); also on OpenCL and gpuemu when present.
add_executable(llama_cache_test ${CMAKE_CURRENT_SOURCE_DIR}/llama_cache_test.c)
target_link_libraries(llama_cache_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME llama_cache COMMAND llama_cache_test)
set_tests_properties(llama_cache PROPERTIES TIMEOUT 120 LABELS "autograd"
                     ENVIRONMENT "AG_LLAMA_CACHE_DEVICES=gpuemu:0,opencl:0")
