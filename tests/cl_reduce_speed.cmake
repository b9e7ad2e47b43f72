# The OpenCL default-mode reductions, softmax and norms at the sizes where
# their multi-pass grids change shape (tests/cl_reduce_speed_test.c), against
# double references. Release builds only: 2^24 + 1 elements and rows of 1M
# take seconds there. Skips without an OpenCL device.
if(TARGET anygrad-opencl AND CMAKE_BUILD_TYPE STREQUAL "Release")
  add_executable(cl_reduce_speed_test ${CMAKE_CURRENT_SOURCE_DIR}/cl_reduce_speed_test.c)
  target_include_directories(cl_reduce_speed_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(cl_reduce_speed_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(cl_reduce_speed_test anygrad-opencl)
  add_test(NAME cl_reduce_speed_opencl COMMAND cl_reduce_speed_test opencl:0)
  set_tests_properties(cl_reduce_speed_opencl PROPERTIES TIMEOUT 300 LABELS opencl SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-opencl>")
endif()
