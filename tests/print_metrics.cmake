# ag_tensor_format / ag_print and the device-side metrics
# (tests/print_metrics_test.c), and ag_sequential (tests/sequential_test.c:
# a classifier from layer specs trains, round-trips through safetensors,
# refuses bad specs), each on cpu, opencl:0 and gpuemu:0; the layout against
# torch 1.13's str(tensor) (tests/format_torch.py; skipped without
# python3-torch; not under sanitizers, as dlpack_torch).
foreach(_t print_metrics sequential)
  add_executable(${_t}_test ${CMAKE_CURRENT_SOURCE_DIR}/${_t}_test.c)
  target_include_directories(${_t}_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(${_t}_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME ${_t} COMMAND ${_t}_test)
  set_tests_properties(${_t} PROPERTIES TIMEOUT 120 LABELS "autograd")
  foreach(_b opencl gpuemu)
    if(TARGET anygrad-${_b})
      add_test(NAME ${_t}_${_b} COMMAND ${_t}_test)
      set_tests_properties(${_t}_${_b} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS ${_b}
                           ENVIRONMENT "AG_TEST_DEVICE=${_b}:0;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-${_b}>")
    endif()
  endforeach()
endforeach()
if(EXISTS /usr/bin/python3 AND NOT AG_SANITIZE)
  add_test(NAME format_torch COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/format_torch.py
                                     $<TARGET_FILE:anygrad>)
  set_tests_properties(format_torch PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
endif()
