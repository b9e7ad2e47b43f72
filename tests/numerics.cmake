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
  # The proof (docs/numerics.md, "Proving it"): every conformance row on each
  # device of every built backend and on the CPU, bit for bit, the CPU also
  # against itself with another thread count, and --coverage: a kernel op a
  # device lists as portable that no row launched fails it. A refused cell
  # is neither a pass nor a failure; a differing or failing cell fails it,
  # and so does a device present that refuses the mode. CI has every device
  # (PoCL, lavapipe, gpuemu:0 and gpuemu:1).
  # OpenCL in a test of its own: the sanitizer stage runs the OpenCL tests
  # (by name) without LeakSanitizer, which PoCL's threads crash at exit.
  set(_ag_bitwise_devs cpu)
  if("gpuemu" IN_LIST AG_BUILT_BACKENDS)
    list(APPEND _ag_bitwise_devs gpuemu:0 gpuemu:1)
  endif()
  if("vulkan" IN_LIST AG_BUILT_BACKENDS)
    list(APPEND _ag_bitwise_devs vulkan:0)
  endif()
  add_test(NAME check_portable_bitwise
           COMMAND $<TARGET_FILE:anygrad-cli> check --numerics portable --bitwise --coverage ${_ag_bitwise_devs})
  set_tests_properties(check_portable_bitwise PROPERTIES TIMEOUT 900 LABELS "numerics"
                       ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
  if("opencl" IN_LIST AG_BUILT_BACKENDS)
    add_test(NAME check_portable_bitwise_opencl
             COMMAND $<TARGET_FILE:anygrad-cli> check --numerics portable --bitwise --coverage cpu opencl:0)
    set_tests_properties(check_portable_bitwise_opencl PROPERTIES TIMEOUT 900 LABELS "numerics;opencl"
                         ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
    list(INSERT _ag_bitwise_devs 1 opencl:0)
  endif()
  # Training on every device at once: the GPT, the Fashion-MNIST CNN and the
  # Llama text model, losses and parameters identical after every step
  # (--tol 0) and a hash of every weight per device at the end. Short runs
  # (the 100-step runs are in docs/numerics.md), in the Release stage only.
  string(REPLACE ";" "," _ag_compare_devs "${_ag_bitwise_devs}")
  string(REPLACE ",gpuemu:1" "" _ag_compare_devs "${_ag_compare_devs}")
  list(LENGTH _ag_bitwise_devs _ag_ndevs)
  if(NOT AG_SANITIZE AND _ag_ndevs GREATER 2)
    add_test(NAME portable_compare_gpt COMMAND $<TARGET_FILE:anygrad-cli> compare --numerics portable --tol 0
             --devices ${_ag_compare_devs} --model gpt --steps 5 --batch 8)
    add_test(NAME portable_compare_llama COMMAND $<TARGET_FILE:anygrad-cli> compare --numerics portable --tol 0
             --devices ${_ag_compare_devs} --model llama --steps 5 --batch 8)
    add_test(NAME portable_compare_cnn COMMAND $<TARGET_FILE:anygrad-cli> compare --numerics portable --tol 0
             --devices ${_ag_compare_devs} --model cnn --data synthetic --steps 3 --batch 16)
    set_tests_properties(portable_compare_gpt portable_compare_llama portable_compare_cnn PROPERTIES
                         TIMEOUT 900 LABELS "numerics" PASS_REGULAR_EXPRESSION "weights identical on"
                         ENVIRONMENT "AG_BACKEND_PATH=${CMAKE_BINARY_DIR}/lib")
  endif()
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
