# The numerics mode (docs/numerics.md): the API, AG_NUMERICS, the refusal of a
# module without portable kernels (tests/extbackend, built by
# tests/registry.cmake), the bit-for-bit comparison on crafted buffers
# (tests/numerics_test.c), and `anygrad check --numerics portable --bitwise`.
add_executable(numerics_test ${CMAKE_CURRENT_SOURCE_DIR}/numerics_test.c ${AG_CONF_SOURCES})
target_include_directories(numerics_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(numerics_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_dependencies(numerics_test anygrad-minihost)
add_test(NAME numerics COMMAND numerics_test)
set_tests_properties(numerics PROPERTIES TIMEOUT 120 ENVIRONMENT
                     "AG_NUMERICS=;AG_BACKEND_PATH=${CMAKE_CURRENT_BINARY_DIR}/extbackend;AG_BACKENDS=cpu,minihost")
# The variable, each in a process of its own (it is read once).
add_test(NAME numerics_env_portable COMMAND numerics_test env-portable)
set_tests_properties(numerics_env_portable PROPERTIES TIMEOUT 60 ENVIRONMENT "AG_NUMERICS=portable;AG_BACKENDS=cpu")
add_test(NAME numerics_env_reject COMMAND numerics_test env-reject)
set_tests_properties(numerics_env_reject PROPERTIES TIMEOUT 60 ENVIRONMENT "AG_NUMERICS=fast;AG_BACKENDS=cpu")

if(TARGET anygrad-cli)
  # The proof: every row on each device and on the CPU, bit for bit, the CPU
  # also against itself with another thread count. A refused cell is neither
  # a pass nor a failure, so it passes while the backends list no portable
  # kernels; a differing or failing cell fails it. The CPU at once; a backend
  # is added when its portable kernels are complete, by naming it here (or
  # with -DAG_PORTABLE_BITWISE_BACKENDS="gpuemu;opencl;vulkan"): one test per
  # backend, check_portable_bitwise_<backend>, run where the module is built
  # (an absent device then fails: CI has them).
  set(AG_PORTABLE_BITWISE_BACKENDS "" CACHE STRING
      "backends whose devices check_portable_bitwise_<backend> proves bit for bit against the CPU")
  add_test(NAME check_portable_bitwise_cpu
           COMMAND $<TARGET_FILE:anygrad-cli> check --numerics portable --bitwise cpu)
  set_tests_properties(check_portable_bitwise_cpu PROPERTIES TIMEOUT 600 LABELS "numerics")
  foreach(_b ${AG_PORTABLE_BITWISE_BACKENDS})
    if(_b IN_LIST AG_BUILT_BACKENDS)
      add_test(NAME check_portable_bitwise_${_b}
               COMMAND $<TARGET_FILE:anygrad-cli> check --numerics portable --bitwise ${_b}:0)
      set_tests_properties(check_portable_bitwise_${_b} PROPERTIES TIMEOUT 600 LABELS "numerics;${_b}"
                           ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
    endif()
  endforeach()
  # The path of a difference, end to end: a defect planted into the emulated
  # GPU's additions (AG_FAULT, docs/compare.md) must show as a differing cell
  # with both values and their distance, and exit 1. In the default mode, as
  # it runs before the backends have portable kernels.
  if("gpuemu" IN_LIST AG_BUILT_BACKENDS)
    add_test(NAME check_bitwise_fault_gpuemu
             COMMAND $<TARGET_FILE:anygrad-cli> check --numerics default --bitwise gpuemu:0 --ops add --dtype f32)
    set_tests_properties(check_bitwise_fault_gpuemu PROPERTIES TIMEOUT 300 LABELS "numerics;gpuemu" WILL_FAIL TRUE
                         ENVIRONMENT "AG_FAULT=ag_add:gpuemu:0:ulp;AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
    add_test(NAME check_bitwise_fault_gpuemu_report
             COMMAND $<TARGET_FILE:anygrad-cli> check --numerics default --bitwise gpuemu:0 --ops add --dtype f32)
    set_tests_properties(check_bitwise_fault_gpuemu_report PROPERTIES TIMEOUT 300 LABELS "numerics;gpuemu"
                         ENVIRONMENT "AG_FAULT=ag_add:gpuemu:0:ulp;AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib"
                         PASS_REGULAR_EXPRESSION "gpuemu:0 against cpu:0: 0 identical, 1 differ[^\n]*\n[^\n]*\n    add f32: case '[^']*' read 0 f32\\[[0-9]+\\], [0-9]+ of [0-9]+ elements differ; first element 0: 0x[0-9a-f]{8} \\([^)]*\\) vs 0x[0-9a-f]{8} \\([^)]*\\), 1 ULP")
  endif()
endif()
