# `anygrad compare --bisect` (docs/compare.md): two CPU replicas agree op by
# op, and a defect planted with the test switch AG_FAULT into one forward
# and one backward op on another backend is the op the bisect names first
# (the charlm models, the CNN and the Llama decoder); the --report page.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND TARGET anygrad_models AND Python3_Interpreter_FOUND)
  add_test(NAME compare_bisect_cpu COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                           $<TARGET_FILE:anygrad-cli> cpu cpu)
  set(_bisect_tests compare_bisect_cpu)
  if(AG_SANITIZE)
    set_tests_properties(compare_bisect_cpu PROPERTIES ENVIRONMENT "AG_TEST_SANITIZED=1")
  endif()
  foreach(_dev opencl gpuemu)
    add_test(NAME compare_bisect_${_dev} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                                 $<TARGET_FILE:anygrad-cli> ${_dev}:0 mlp)
    list(APPEND _bisect_tests compare_bisect_${_dev})
  endforeach()
  # The other models' planted faults on the other backends run in the
  # release stage only: under the sanitizers the bisection's own code runs
  # through compare_bisect_cpu (every model) and the MLP cases above.
  if(NOT AG_SANITIZE)
  add_test(NAME compare_bisect_gpt_opencl COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                                  $<TARGET_FILE:anygrad-cli> opencl:0 gpt)
  list(APPEND _bisect_tests compare_bisect_gpt_opencl)
  # The CNN (conv2d, pooling, batch norm) on the emulated GPU and PoCL.
  foreach(_dev opencl gpuemu)
    add_test(NAME compare_bisect_cnn_${_dev} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                                     $<TARGET_FILE:anygrad-cli> ${_dev}:0 cnn)
    list(APPEND _bisect_tests compare_bisect_cnn_${_dev})
  endforeach()
  # The Llama-style decoder (RMSNorm, rotary embeddings, grouped-query attention).
  foreach(_dev opencl gpuemu)
    add_test(NAME compare_bisect_llama_${_dev}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py $<TARGET_FILE:anygrad-cli>
                     ${_dev}:0 llama)
    list(APPEND _bisect_tests compare_bisect_llama_${_dev})
  endforeach()
  endif()
  set_tests_properties(${_bisect_tests} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "compare")
  # --report: the page and its data, and the page in headless Chromium
  # (skips without chromium). They use opencl:0 when it is built: the name
  # says so for the sanitizer stage (scripts/test.sh).
  set(_sfx "")
  if("opencl" IN_LIST AG_BUILT_BACKENDS)
    set(_sfx "_opencl")
  endif()
  set(_cases report browser)
  if(AG_SANITIZE)
    set(_cases report) # the page in Chromium: in the release stage
  endif()
  foreach(_case ${_cases})
    add_test(NAME compare_report_${_case}${_sfx}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/compare_report_test.py
                     $<TARGET_FILE:anygrad-cli> ${CMAKE_CURRENT_BINARY_DIR}/compare_report_${_case} ${_case})
    set_tests_properties(compare_report_${_case}${_sfx} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "compare;cli")
  endforeach()
endif()
