# Autograd: gradient check of every op and dtype, tape semantics, nn, optim,
# checkpoints.
foreach(_t gradcheck autograd grad_hooks nn_optim optim_utils safetensors checkpoint)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_t}.c)
    add_executable(${_t}_test ${CMAKE_CURRENT_SOURCE_DIR}/${_t}.c)
    target_compile_definitions(${_t}_test PRIVATE AG_TEST_DATA="${CMAKE_CURRENT_SOURCE_DIR}/data")
    target_link_libraries(${_t}_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
    add_test(NAME ${_t} COMMAND ${_t}_test)
    set_tests_properties(${_t} PROPERTIES TIMEOUT 300 LABELS "autograd")
  endif()
endforeach()
# Gradients through the CBLAS GEMM path too (the default is oneDNN's sgemm
# where libdnnl.so.2 loads)
if(TARGET gradcheck_test)
  add_test(NAME gradcheck_openblas COMMAND gradcheck_test)
  set_tests_properties(gradcheck_openblas PROPERTIES TIMEOUT 300 LABELS "autograd" ENVIRONMENT "AG_CPU_GEMM=openblas")
endif()
