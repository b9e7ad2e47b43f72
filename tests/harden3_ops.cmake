# Ops that gave silent wrong results on hostile shapes and values
# (tests/harden3_ops_test.c, docs/reliability.md): on the CPU, and on every
# other backend built here through AG_TEST_DEVICE (skipped where absent).
add_executable(harden3_ops_test ${CMAKE_CURRENT_SOURCE_DIR}/harden3_ops_test.c)
target_include_directories(harden3_ops_test PRIVATE ${AG_CMOCKA_INCLUDE} ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(harden3_ops_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME harden3_ops COMMAND harden3_ops_test)
set_tests_properties(harden3_ops PROPERTIES TIMEOUT 120 LABELS "ops")
# the CPU's other GEMM engine (skipped where OpenBLAS is not built in)
add_test(NAME harden3_ops_openblas COMMAND harden3_ops_test)
set_tests_properties(harden3_ops_openblas PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "ops"
                     ENVIRONMENT "AG_TEST_DEVICE=cpu:0;AG_CPU_GEMM=openblas")
foreach(_be opencl gpuemu vulkan)
  if(TARGET anygrad-${_be})
    set(_env "AG_TEST_DEVICE=${_be}:0" "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-${_be}>")
    if(_be STREQUAL "vulkan")
      list(APPEND _env "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan_vulkan.supp")
    endif()
    add_test(NAME harden3_ops_${_be} COMMAND harden3_ops_test)
    set_tests_properties(harden3_ops_${_be} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "ops;${_be}"
                         ENVIRONMENT "${_env}")
  endif()
endforeach()
