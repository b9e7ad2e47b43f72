# Fused scaled-dot-product attention (tests/attention_test.c).
add_executable(attention_test ${CMAKE_CURRENT_SOURCE_DIR}/attention_test.c)
target_link_libraries(attention_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME attention COMMAND attention_test)
set_tests_properties(attention PROPERTIES TIMEOUT 300 ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
