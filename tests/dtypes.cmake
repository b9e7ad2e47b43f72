# The integer dtypes i64, bool and u8 through the public API
# (tests/dtypes_test.c): on the CPU, and on every other backend built here
# through AG_TEST_DEVICE (skipped where the device is absent).
add_executable(dtypes_test ${CMAKE_CURRENT_SOURCE_DIR}/dtypes_test.c)
target_include_directories(dtypes_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(dtypes_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME dtypes COMMAND dtypes_test)
set_tests_properties(dtypes PROPERTIES TIMEOUT 120)
if(TARGET anygrad-gpuemu)
  foreach(_d 0 1)
    add_test(NAME dtypes_gpuemu${_d} COMMAND dtypes_test)
    set_tests_properties(dtypes_gpuemu${_d} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS gpuemu ENVIRONMENT
                         "AG_TEST_DEVICE=gpuemu:${_d};AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
  endforeach()
endif()
if(TARGET anygrad-opencl)
  add_test(NAME dtypes_opencl COMMAND dtypes_test)
  set_tests_properties(dtypes_opencl PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS opencl ENVIRONMENT
                       "AG_TEST_DEVICE=opencl:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-opencl>")
endif()
