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
