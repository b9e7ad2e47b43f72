# logsumexp, vector norms, one_hot and conv1d: error paths and values on the
# CPU (tests/kops_a_test.c); the cross-backend rows are `anygrad check`'s.
add_executable(kops_a_test ${CMAKE_CURRENT_SOURCE_DIR}/kops_a_test.c)
target_include_directories(kops_a_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(kops_a_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME kops_a COMMAND kops_a_test)
set_tests_properties(kops_a PROPERTIES TIMEOUT 120 ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
# Against torch 1.13 through the Python package (skipped without
# python3-torch; not under sanitizers, as attention_torch).
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME kops_a_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/kops_a_torch.py
                                     $<TARGET_FILE:anygrad>)
  set_tests_properties(kops_a_torch PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
endif()
