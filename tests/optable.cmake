# The op table through every backend present: each (sub-op, dtype) of
# include/anygrad/optable.h matches tools/op_ref.h or is refused as
# unsupported, as the backend's supports() says.
add_executable(optable_test ${CMAKE_CURRENT_SOURCE_DIR}/optable_test.c)
target_include_directories(optable_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core
                           ${PROJECT_SOURCE_DIR}/tools ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(optable_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} m)
# statically linked: the modules are found through AG_BACKEND_PATH
set(_mods "AG_BACKEND_PATH=${CMAKE_LIBRARY_OUTPUT_DIRECTORY}")
add_test(NAME optable_cpu COMMAND optable_test)
set_tests_properties(optable_cpu PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
if("opencl" IN_LIST AG_BUILT_BACKENDS)
  add_test(NAME optable_opencl0 COMMAND optable_test)
  set_tests_properties(optable_opencl0 PROPERTIES ENVIRONMENT "AG_TEST_DEVICE=opencl:0;${_mods}" TIMEOUT 600
                       SKIP_RETURN_CODE 77)
endif()
if(TARGET anygrad-gpuemu)
  foreach(_d 0 1)
    add_test(NAME optable_gpuemu${_d} COMMAND optable_test)
    set_tests_properties(optable_gpuemu${_d} PROPERTIES ENVIRONMENT "AG_TEST_DEVICE=gpuemu:${_d};${_mods}" TIMEOUT 600
                         SKIP_RETURN_CODE 77 LABELS gpuemu)
  endforeach()
endif()
