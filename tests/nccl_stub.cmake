# The NCCL module's threading without a GPU: a stub libnccl.so.2 that is also
# the CUDA runtime and driver, RCCL and the HIP runtime (links libcudart.so,
# libcuda.so.1, librccl.so.1, libamdhip64.so in the same folder, found first
# through LD_LIBRARY_PATH). Labelled threads for TSan.
if(TARGET anygrad-nccl)
  set(_stub_dir ${CMAKE_BINARY_DIR}/nccl_stub)
  add_library(nccl_stub SHARED ${CMAKE_CURRENT_SOURCE_DIR}/nccl_stub/nccl_stub.c)
  set_target_properties(nccl_stub PROPERTIES OUTPUT_NAME nccl PREFIX "lib" SUFFIX ".so.2" C_VISIBILITY_PRESET hidden
                        LIBRARY_OUTPUT_DIRECTORY ${_stub_dir})
  add_custom_command(TARGET nccl_stub POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -E create_symlink libnccl.so.2 ${_stub_dir}/libcudart.so
                     COMMAND ${CMAKE_COMMAND} -E create_symlink libnccl.so.2 ${_stub_dir}/libcuda.so.1
                     COMMAND ${CMAKE_COMMAND} -E create_symlink libnccl.so.2 ${_stub_dir}/librccl.so.1
                     COMMAND ${CMAKE_COMMAND} -E create_symlink libnccl.so.2 ${_stub_dir}/libamdhip64.so)
  add_executable(nccl_abort_test ${CMAKE_CURRENT_SOURCE_DIR}/nccl_abort_test.c)
  target_include_directories(nccl_abort_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core)
  target_link_libraries(nccl_abort_test PRIVATE anygrad ${AG_CMOCKA_LIB} Threads::Threads ${CMAKE_DL_LIBS})
  add_dependencies(nccl_abort_test nccl_stub anygrad-nccl)
  add_test(NAME nccl_abort_stub COMMAND nccl_abort_test $<TARGET_FILE:anygrad-nccl>)
  set_tests_properties(nccl_abort_stub PROPERTIES TIMEOUT 60 LABELS "dist;threads"
                       ENVIRONMENT "LD_LIBRARY_PATH=${_stub_dir}")
endif()
