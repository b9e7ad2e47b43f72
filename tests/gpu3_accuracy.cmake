# Accuracy of the default numerics mode (tests/gpu3_accuracy_test.c): gelu
# and mish backward at large |x|, log1p, expm1, elu and mish over their whole
# range, exact fmod and remainder, against long double references, on the
# cpu and each GPU backend built (a device that is absent skips).
add_executable(gpu3_accuracy_test ${CMAKE_CURRENT_SOURCE_DIR}/gpu3_accuracy_test.c)
target_include_directories(gpu3_accuracy_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(gpu3_accuracy_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME gpu3_accuracy_cpu COMMAND gpu3_accuracy_test cpu)
set_tests_properties(gpu3_accuracy_cpu PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
foreach(_b opencl gpuemu vulkan)
  if(TARGET anygrad-${_b})
    add_dependencies(gpu3_accuracy_test anygrad-${_b})
    add_test(NAME gpu3_accuracy_${_b} COMMAND gpu3_accuracy_test ${_b}:0)
    set_tests_properties(gpu3_accuracy_${_b} PROPERTIES TIMEOUT 300 LABELS ${_b} SKIP_RETURN_CODE 77
                         ENVIRONMENT "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-${_b}>")
  endif()
endforeach()
