# Fused scaled-dot-product attention (tests/attention_test.c).
add_executable(attention_test ${CMAKE_CURRENT_SOURCE_DIR}/attention_test.c)
target_link_libraries(attention_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME attention COMMAND attention_test)
set_tests_properties(attention PROPERTIES TIMEOUT 300 ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
# Against torch 1.13's unfused math through the Python package (skipped
# without python3-torch; not under sanitizers, as dlpack_torch).
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME attention_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/attention_torch.py
                                        $<TARGET_FILE:anygrad>)
  set_tests_properties(attention_torch PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
endif()
