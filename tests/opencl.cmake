# OpenCL backend: the vtable driven directly through the dlopened module.
# Skips (does not fail) on machines without an OpenCL device.
if(TARGET anygrad-opencl)
  add_executable(opencl_test ${CMAKE_CURRENT_SOURCE_DIR}/opencl_test.c)
  target_include_directories(opencl_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
  target_compile_definitions(opencl_test PRIVATE AG_OPENCL_MODULE="$<TARGET_FILE:anygrad-opencl>")
  target_link_libraries(opencl_test PRIVATE anygrad ${AG_CMOCKA_LIB} ${CMAKE_DL_LIBS} m)
  add_dependencies(opencl_test anygrad-opencl)
  add_test(NAME opencl COMMAND opencl_test)
  set_tests_properties(opencl PROPERTIES TIMEOUT 600 LABELS opencl)
endif()

# The public API on opencl:0, including the training example against the CPU.
if(TARGET anygrad-opencl AND TARGET anygrad_models)
  add_executable(opencl_api_test ${CMAKE_CURRENT_SOURCE_DIR}/opencl_api_test.c)
  target_include_directories(opencl_api_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(opencl_api_test PRIVATE anygrad anygrad_models ${AG_CMOCKA_LIB} m)
  add_dependencies(opencl_api_test anygrad-opencl)
  add_test(NAME opencl_api COMMAND opencl_api_test)
  set_tests_properties(opencl_api PROPERTIES TIMEOUT 600 LABELS opencl)
endif()

# Portable numerics: opencl:0 bit for bit equal to the CPU (docs/numerics.md).
if(TARGET anygrad-opencl)
  add_executable(portable_opencl_test ${CMAKE_CURRENT_SOURCE_DIR}/portable_opencl_test.c)
  target_include_directories(portable_opencl_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(portable_opencl_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(portable_opencl_test anygrad-opencl)
  add_test(NAME portable_opencl COMMAND portable_opencl_test)
  set_tests_properties(portable_opencl PROPERTIES TIMEOUT 900 LABELS opencl)
endif()
