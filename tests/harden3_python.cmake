# The Python package's hostile-argument cases (python/tests/test_harden3.py,
# run from the tree by python_cpu with ctypes' item()) once more with the
# optional C extension anygrad._fast built (tests/harden3_python.sh; skips
# where Python.h is missing). Not in sanitizer builds, as python.cmake.
find_program(AG_PYTHON3_EXE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(AG_PYTHON3_EXE AND NOT AG_SANITIZE)
  execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import pytest, numpy, setuptools"
                  RESULT_VARIABLE _ag_h3_ok OUTPUT_QUIET ERROR_QUIET)
  if(_ag_h3_ok EQUAL 0)
    add_test(NAME python_harden3_fast
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/harden3_python.sh ${AG_PYTHON3_EXE} ${PROJECT_SOURCE_DIR}
                     $<TARGET_FILE:anygrad> ${CMAKE_CURRENT_BINARY_DIR}/python_harden3_fast)
    set_tests_properties(python_harden3_fast PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "python"
                         ENVIRONMENT "AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib;OMP_NUM_THREADS=1;AG_NUM_THREADS=1;PYTHONDONTWRITEBYTECODE=1")
  endif()
endif()
