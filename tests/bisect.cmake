# `anygrad compare --bisect` (docs/compare.md): two CPU replicas agree op by
# op, and a defect planted with the test switch AG_FAULT into one forward
# and one backward op on another backend is the op the bisect names first.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND TARGET anygrad_models AND Python3_Interpreter_FOUND)
  add_test(NAME compare_bisect_cpu COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                           $<TARGET_FILE:anygrad-cli> cpu cpu)
  set(_bisect_tests compare_bisect_cpu)
  foreach(_dev opencl gpuemu)
    add_test(NAME compare_bisect_${_dev} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                                 $<TARGET_FILE:anygrad-cli> ${_dev}:0 mlp)
    list(APPEND _bisect_tests compare_bisect_${_dev})
  endforeach()
  add_test(NAME compare_bisect_gpt_opencl COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bisect_test.py
                                                  $<TARGET_FILE:anygrad-cli> opencl:0 gpt)
  list(APPEND _bisect_tests compare_bisect_gpt_opencl)
  set_tests_properties(${_bisect_tests} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "compare")
endif()
