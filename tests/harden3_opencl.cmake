# Threads meeting the OpenCL backend's first-use state (CLBlast's routine
# caches, the program, kernel objects): tests/harden3_opencl_test.c runs
# itself in fresh processes. Skips without an OpenCL device.
if(TARGET anygrad-opencl)
  add_executable(harden3_opencl_test ${CMAKE_CURRENT_SOURCE_DIR}/harden3_opencl_test.c)
  target_include_directories(harden3_opencl_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_compile_definitions(harden3_opencl_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(harden3_opencl_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads m)
  add_dependencies(harden3_opencl_test anygrad-opencl)
  add_test(NAME harden3_opencl_first_gemm COMMAND harden3_opencl_test)
  set_tests_properties(harden3_opencl_first_gemm PROPERTIES TIMEOUT 600 LABELS opencl)
endif()
