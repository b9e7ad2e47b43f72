# Conformance: the op engine of tools/conformance*.c run per backend, and the
# `anygrad check` command as CI runs it.
set(AG_CONF_SRC ${AG_CONF_SOURCES}) # tools/CMakeLists.txt

add_executable(ops_test ${CMAKE_CURRENT_SOURCE_DIR}/ops_test.c ${AG_CONF_SRC})
target_include_directories(ops_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(ops_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME ops_cpu COMMAND ops_test cpu)
add_test(NAME ops_opencl COMMAND ops_test opencl)
set_tests_properties(ops_cpu ops_opencl PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)

# --coverage: every kernel op the cpu backend runs (kops.h, its supports())
# must be launched by some row; an op without a row fails the test.
add_test(NAME check_cpu COMMAND $<TARGET_FILE:anygrad-cli> check --backend cpu --coverage)
set_tests_properties(check_cpu PROPERTIES TIMEOUT 600)
# The same walk finds what a subset leaves out: with f16 alone the gradient
# rows (f32, f64) do not run, so the f16 backward kernels are reported.
add_test(NAME check_cpu_coverage_gap COMMAND $<TARGET_FILE:anygrad-cli> check --backend cpu --coverage --dtype f16)
set_tests_properties(check_cpu_coverage_gap PROPERTIES TIMEOUT 600
                     PASS_REGULAR_EXPRESSION "kernel ops? that no row launched:[^\n]*\n(  [^\n]*\n)*  softmax_bwd \\(f16\\)")
if("opencl" IN_LIST AG_BUILT_BACKENDS)
  # An absent OpenCL device is listed as skipped and the command exits 0.
  add_test(NAME check_opencl COMMAND $<TARGET_FILE:anygrad-cli> check --backend opencl:0)
  set_tests_properties(check_opencl PROPERTIES TIMEOUT 600)
endif()

# Accuracy (`anygrad check --accuracy`, docs/conformance.md): the ULP helpers
# and order statistics, the JSON schema on the CI backends, the dumped inputs,
# and the HTML page in headless Chromium (skips without chromium).
add_executable(ulp_test ${CMAKE_CURRENT_SOURCE_DIR}/ulp_test.c ${AG_CONF_SRC})
target_include_directories(ulp_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(ulp_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME ulp COMMAND ulp_test)
set_tests_properties(ulp PROPERTIES TIMEOUT 60)
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_acc_backends "cpu")
  foreach(_b opencl gpuemu)
    if(_b IN_LIST AG_BUILT_BACKENDS)
      string(APPEND _acc_backends ",${_b}:0")
    endif()
  endforeach()
  # Names with "opencl" when it is in the list: the sanitizer stage runs
  # those without leak checks (scripts/test.sh).
  set(_acc_sfx "")
  if("opencl" IN_LIST AG_BUILT_BACKENDS)
    set(_acc_sfx "_opencl")
  endif()
  # Under the sanitizers the tool's own code runs on the CPU only and the
  # page is not rendered: every backend's kernels and the page in Chromium
  # are checked in the release stage.
  set(_acc_cases schema dump report browser)
  if(AG_SANITIZE)
    set(_acc_cases schema dump report)
    set(_acc_backends "cpu")
    set(_acc_sfx "")
  endif()
  foreach(_case ${_acc_cases})
    set(_name accuracy_${_case}${_acc_sfx})
    set(_list ${_acc_backends})
    if(_case STREQUAL "dump")
      set(_name accuracy_dump)
      set(_list cpu)
    endif()
    add_test(NAME ${_name}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/accuracy_test.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/${_name} ${PROJECT_SOURCE_DIR} ${_case} ${_list})
    set_tests_properties(${_name} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "cli")
  endforeach()
endif()
