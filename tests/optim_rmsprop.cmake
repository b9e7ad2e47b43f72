# RMSprop (ag_rmsprop_create, composed from elementwise ops) against a host
# reference of torch.optim.RMSprop's update, with groups, on the devices.
add_executable(optim_rmsprop_test ${CMAKE_CURRENT_SOURCE_DIR}/optim_rmsprop_test.c)
target_include_directories(optim_rmsprop_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(optim_rmsprop_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME optim_rmsprop COMMAND optim_rmsprop_test)
set_tests_properties(optim_rmsprop PROPERTIES TIMEOUT 120 LABELS "autograd")
if(AG_SANITIZE)
  # it opens opencl:0: PoCL's threads crash LeakSanitizer's exit-time scan
  set_tests_properties(optim_rmsprop PROPERTIES ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
endif()
