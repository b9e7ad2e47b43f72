# The current-device program of scripts/gpu_check.sh (tests/gpu3_current_device.c,
# built by bench/gpucheck.cmake) on the two emulated devices: a fresh thread
# on gpuemu:1, the caller on one device and anygrad on the other, placement
# across both; immediate and deferred streams.
if(TARGET gpu3_current_device AND TARGET anygrad-gpuemu)
  add_dependencies(gpu3_current_device anygrad-gpuemu)
  foreach(_mode immediate deferred)
    set(_env "AG_BACKEND_PATH=$<TARGET_FILE_DIR:anygrad-gpuemu>")
    if(_mode STREQUAL "deferred")
      string(APPEND _env ";AG_GPUEMU_DEFERRED=1")
    endif()
    add_test(NAME gpu3_gpucheck_current_device_${_mode}
             COMMAND gpu3_current_device gpuemu $<TARGET_FILE:anygrad-gpuemu>)
    set_tests_properties(gpu3_gpucheck_current_device_${_mode} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                         LABELS gpuemu ENVIRONMENT "${_env}")
  endforeach()
endif()
# The NCCL program without a GPU: it must say why and skip (77), not fail.
if(TARGET gpu3_nccl_two)
  add_test(NAME gpu3_gpucheck_nccl_two_skips COMMAND gpu3_nccl_two --mib 1 --iters 1)
  set_tests_properties(gpu3_gpucheck_nccl_two_skips PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS dist)
endif()
