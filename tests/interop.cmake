# Zero-copy interop: data pointers, ag_from_blob with deleters, DLPack export
# and import (tests/interop_test.c), and the round trip with PyTorch through
# ctypes (tests/dlpack_torch.py; skipped without python3-torch).
add_executable(interop_test ${CMAKE_CURRENT_SOURCE_DIR}/interop_test.c)
target_include_directories(interop_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(interop_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME interop COMMAND interop_test)
set_tests_properties(interop PROPERTIES TIMEOUT 120)
if(TARGET anygrad-opencl)
  add_test(NAME interop_opencl COMMAND interop_test --opencl)
  set_tests_properties(interop_opencl PROPERTIES TIMEOUT 300 LABELS opencl)
endif()
# (not under sanitizers: the interpreter would have to preload their runtimes)
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME dlpack_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/dlpack_torch.py
                                     $<TARGET_FILE:anygrad>)
  set_tests_properties(dlpack_torch PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
