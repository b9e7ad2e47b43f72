# In-place arithmetic written by one kernel (tests/inplace_direct_test.c):
# values equal to the out-of-place op on every device, aliasing, refusals.
add_executable(inplace_direct_test ${CMAKE_CURRENT_SOURCE_DIR}/inplace_direct_test.c)
target_include_directories(inplace_direct_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(inplace_direct_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
foreach(_m anygrad-opencl anygrad-vulkan anygrad-gpuemu)
  if(TARGET ${_m})
    add_dependencies(inplace_direct_test ${_m})
  endif()
endforeach()
add_test(NAME inplace_direct COMMAND inplace_direct_test)
set_tests_properties(inplace_direct PROPERTIES TIMEOUT 300)
