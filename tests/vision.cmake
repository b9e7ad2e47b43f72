# Vision ops: finite differences, PyTorch references (skipped without torch), errors.
add_executable(vision_test ${CMAKE_CURRENT_SOURCE_DIR}/vision_test.c)
target_link_libraries(vision_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME vision COMMAND vision_test)
set_tests_properties(vision PROPERTIES TIMEOUT 300 LABELS autograd)
# The same cases on the emulated GPU (both warp widths) and on OpenCL (PoCL)
# against the CPU; a device that is absent skips (exit 77).
foreach(_d gpuemu:0 gpuemu:1 opencl:0)
  string(REPLACE ":" "" _n ${_d})
  string(REGEX REPLACE ":.*" "" _b ${_d})
  if(TARGET anygrad-${_b})
    add_dependencies(vision_test anygrad-${_b})
    add_test(NAME vision_${_n} COMMAND vision_test)
    set_tests_properties(vision_${_n} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS ${_b}
                         ENVIRONMENT "AG_TEST_DEVICE=${_d}")
  endif()
endforeach()
# The whole kernel check (gpu_check, bench/gpu.cmake) through the OpenCL
# module's vtable against the CPU backend's kernels: elementwise, reductions
# (argmax's NaN and tie rules), random numbers and dropout bit for bit,
# GEMM through CLBlast, conv2d (im2col/col2im), pooling, batch norm.
if(TARGET anygrad-opencl AND TARGET gpu_check)
  add_test(NAME gpu_check_opencl COMMAND gpu_check $<TARGET_FILE:anygrad-opencl>)
  set_tests_properties(gpu_check_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 2 LABELS opencl)
endif()
