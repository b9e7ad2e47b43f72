# python/tests/test_traps.py (errors found on the device raised at the next
# sync, argmax/argmin without dim, Module.to after the optimizer, in-place
# ops) beyond python_cpu/_opencl/_gpuemu/_vulkan, which run it with the rest
# of the package's tests: once more with the C extension anygrad._fast built
# (tests/python_traps_fast.sh: item() through it) on cpu and vulkan:0.
# Absent devices skip inside pytest. Not in sanitizer builds, as python.cmake.
find_program(AG_PYTHON3_EXE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(AG_PYTHON3_EXE AND NOT AG_SANITIZE)
  execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import pytest, numpy"
                  RESULT_VARIABLE _ag_traps_ok OUTPUT_QUIET ERROR_QUIET)
  if(_ag_traps_ok EQUAL 0)
    execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import setuptools"
                    RESULT_VARIABLE _ag_traps_st OUTPUT_QUIET ERROR_QUIET)
    if(_ag_traps_st EQUAL 0)
      add_test(NAME python_traps_fast
               COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python_traps_fast.sh ${AG_PYTHON3_EXE} ${PROJECT_SOURCE_DIR}
                       $<TARGET_FILE:anygrad> ${CMAKE_CURRENT_BINARY_DIR}/python_traps_fast)
      set_tests_properties(python_traps_fast PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "python"
                           ENVIRONMENT "AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib;OMP_NUM_THREADS=1;AG_NUM_THREADS=1;PYTHONDONTWRITEBYTECODE=1;ANYGRAD_TEST_DEVICES=cpu,vulkan:0")
    endif()
  endif()
endif()
