# The fused SwiGLU op against its composition (tests/swiglu_test.c).
add_executable(swiglu_test ${CMAKE_CURRENT_SOURCE_DIR}/swiglu_test.c)
target_link_libraries(swiglu_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME swiglu COMMAND swiglu_test)
set_tests_properties(swiglu PROPERTIES TIMEOUT 60 ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
