# Mixed precision: grad scaler, sync-free scaled steps, f16/bf16 training of
# the example against f32, and every op under autocast (CPU; opencl:0 when
# present, skipped otherwise).
if(TARGET anygrad_models)
  add_executable(amp_test ${CMAKE_CURRENT_SOURCE_DIR}/amp_test.c)
  target_include_directories(amp_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(amp_test PRIVATE anygrad anygrad_models ${AG_CMOCKA_LIB} m)
  add_test(NAME amp COMMAND amp_test)
  set_tests_properties(amp PROPERTIES TIMEOUT 600 LABELS amp)
endif()

add_executable(amp_ops_test ${CMAKE_CURRENT_SOURCE_DIR}/amp_ops_test.c)
target_include_directories(amp_ops_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(amp_ops_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME amp_ops COMMAND amp_ops_test)
set_tests_properties(amp_ops PROPERTIES TIMEOUT 600 LABELS amp)
