# PyTorch programs run unchanged on anygrad (tests/python/compat): each runs
# once with Debian's torch and once with anygrad standing in for torch (an
# import hook on PYTHONPATH), on the CPU; their JSON results are compared
# within each program's stated tolerance (docs/python.md, "Running PyTorch
# programs"). Fails when fewer than AG_COMPAT_MIN programs match. Needs
# python3 with numpy and torch (python3-torch). Release builds only, and not
# in sanitizer builds (an instrumented libanygrad cannot be loaded into an
# uninstrumented python3).
set(AG_COMPAT_MIN 17 CACHE STRING "python_compat: programs that must run unchanged and match torch")
find_program(AG_PYTHON3_EXE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(AG_PYTHON3_EXE AND NOT AG_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Release")
  execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import numpy, torch"
                  RESULT_VARIABLE _ag_compat_ok OUTPUT_QUIET ERROR_QUIET)
  if(_ag_compat_ok EQUAL 0)
    add_test(NAME python_compat
             COMMAND ${AG_PYTHON3_EXE} ${PROJECT_SOURCE_DIR}/tests/python/compat/run_compat.py
                     --min ${AG_COMPAT_MIN} --python ${AG_PYTHON3_EXE}
                     --json ${CMAKE_CURRENT_BINARY_DIR}/python_compat.json
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/python/compat)
    set_tests_properties(python_compat PROPERTIES TIMEOUT 300 LABELS "python"
                         ENVIRONMENT "ANYGRAD_LIBRARY=$<TARGET_FILE:anygrad>;AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib;OMP_NUM_THREADS=1;AG_NUM_THREADS=1;PYTHONDONTWRITEBYTECODE=1")
  else()
    message(STATUS "python3 with numpy and torch not found: python_compat is not registered")
  endif()
endif()
