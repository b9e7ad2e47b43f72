# ag_tensor_format / ag_print and the device-side metrics
# (tests/print_metrics_test.c) on cpu, opencl:0 and gpuemu:0; the layout
# against torch 1.13's str(tensor) (tests/format_torch.py; skipped without
# python3-torch; not under sanitizers, as dlpack_torch).
add_executable(print_metrics_test ${CMAKE_CURRENT_SOURCE_DIR}/print_metrics_test.c)
target_include_directories(print_metrics_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(print_metrics_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME print_metrics COMMAND print_metrics_test)
set_tests_properties(print_metrics PROPERTIES TIMEOUT 120 LABELS "autograd")
if(TARGET anygrad-opencl)
  add_test(NAME print_metrics_opencl COMMAND print_metrics_test)
  set_tests_properties(print_metrics_opencl PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS opencl
                       ENVIRONMENT "AG_TEST_DEVICE=opencl:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-opencl>")
endif()
if(TARGET anygrad-gpuemu)
  add_test(NAME print_metrics_gpuemu COMMAND print_metrics_test)
  set_tests_properties(print_metrics_gpuemu PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS gpuemu
                       ENVIRONMENT "AG_TEST_DEVICE=gpuemu:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
endif()
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME format_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/format_torch.py
                                     $<TARGET_FILE:anygrad>)
  set_tests_properties(format_torch PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
endif()
# ag_sequential (tests/sequential_test.c): a classifier from layer specs
# trains, round-trips through safetensors, refuses bad specs; cpu, opencl:0, gpuemu:0.
add_executable(sequential_test ${CMAKE_CURRENT_SOURCE_DIR}/sequential_test.c)
target_include_directories(sequential_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(sequential_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME sequential COMMAND sequential_test)
set_tests_properties(sequential PROPERTIES TIMEOUT 120 LABELS "autograd")
if(TARGET anygrad-opencl)
  add_test(NAME sequential_opencl COMMAND sequential_test)
  set_tests_properties(sequential_opencl PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS opencl
                       ENVIRONMENT "AG_TEST_DEVICE=opencl:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-opencl>")
endif()
if(TARGET anygrad-gpuemu)
  add_test(NAME sequential_gpuemu COMMAND sequential_test)
  set_tests_properties(sequential_gpuemu PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS gpuemu
                       ENVIRONMENT "AG_TEST_DEVICE=gpuemu:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
endif()
