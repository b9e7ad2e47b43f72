# The GPU kernels' portable numerics (kernels/gpu/portable.cu) on gpuemu:0
# and gpuemu:1 against the CPU backend, bit for bit (docs/numerics.md); the
# same kernels under the emulator's race and memory checker; every
# conformance row and two training runs bit for bit.
if(TARGET anygrad-gpuemu)
  add_executable(portable_gpu_test ${CMAKE_CURRENT_SOURCE_DIR}/portable_gpu_test.c)
  target_include_directories(portable_gpu_test PRIVATE ${AG_CMOCKA_INCLUDE})
  target_link_libraries(portable_gpu_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
  add_dependencies(portable_gpu_test anygrad-gpuemu)
  add_test(NAME portable_gpu COMMAND portable_gpu_test)
  set_tests_properties(portable_gpu PROPERTIES ENVIRONMENT "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>"
                       TIMEOUT 600 LABELS gpuemu)
  # training: the MLP and the GPT, weights identical after the steps (every
  # conformance row bit for bit: check_portable_bitwise, tests/numerics.cmake)
  add_test(NAME portable_gpu_compare_mlp COMMAND $<TARGET_FILE:anygrad-cli> compare --numerics portable --tol 0
           --devices cpu,gpuemu:0,gpuemu:1 --steps 20)
  add_test(NAME portable_gpu_compare_gpt COMMAND $<TARGET_FILE:anygrad-cli> compare --numerics portable --tol 0
           --devices cpu,gpuemu:0 --model gpt --steps 4 --batch 8)
  set_tests_properties(portable_gpu_compare_mlp portable_gpu_compare_gpt PROPERTIES PASS_REGULAR_EXPRESSION
                       "weights identical on")
  set_tests_properties(portable_gpu_compare_mlp portable_gpu_compare_gpt PROPERTIES
                       TIMEOUT 600 LABELS gpuemu)
  if(TARGET anygrad-gpuemu-check)
    add_test(NAME portable_gpu_checked COMMAND portable_gpu_test)
    set_tests_properties(portable_gpu_checked PROPERTIES ENVIRONMENT
                         "AG_GPUEMU_CHECK=1;AG_GPUEMU_SCHED=random:3;AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>"
                         TIMEOUT 900 LABELS gpuemu)
  endif()
endif()
