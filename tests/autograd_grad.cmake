# ag_autograd_grad (gradients without accumulation), gradient pre-hooks that
# replace the gradient, custom functions and the grad_fn accessors.
if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/autograd_grad_test.c)
  add_executable(autograd_grad_test ${CMAKE_CURRENT_SOURCE_DIR}/autograd_grad_test.c)
  target_link_libraries(autograd_grad_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME autograd_grad COMMAND autograd_grad_test)
  set_tests_properties(autograd_grad PROPERTIES TIMEOUT 300 LABELS "autograd")
endif()
