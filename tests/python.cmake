# The Python package (python/anygrad) under pytest, once per device: cpu runs
# every test, opencl:0, gpuemu:0 and vulkan:0 the device-parametrised ones
# (pytest -k).
# Absent devices skip inside pytest. Needs Debian's python3-pytest and
# python3-numpy (python3-torch and python3-hypothesis for part of the suite).
# Not in sanitizer builds: an instrumented libanygrad cannot be loaded into
# an uninstrumented python3.
add_executable(python_mlp_ref ${PROJECT_SOURCE_DIR}/python/tests/c/mlp_ref.c)
target_link_libraries(python_mlp_ref PRIVATE anygrad)

find_program(AG_PYTHON3_EXE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(AG_PYTHON3_EXE)
  execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import pytest, numpy"
                  RESULT_VARIABLE _ag_py_ok OUTPUT_QUIET ERROR_QUIET)
endif()
if(AG_SANITIZE)
  message(STATUS "sanitizer build: the python_* tests are not registered")
elseif(AG_PYTHON3_EXE AND _ag_py_ok EQUAL 0)
  set(_ag_py_env
      "ANYGRAD_LIBRARY=$<TARGET_FILE:anygrad>"
      "AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib"
      "ANYGRAD_MLP_REF=$<TARGET_FILE:python_mlp_ref>"
      "OMP_NUM_THREADS=1" "AG_NUM_THREADS=1"
      "PYTHONDONTWRITEBYTECODE=1")
  foreach(_case "cpu;cpu;" "opencl;opencl:0;-k;opencl" "gpuemu;gpuemu:0;-k;gpuemu"
                "vulkan;vulkan:0;-k;vulkan")
    list(GET _case 0 _name)
    list(GET _case 1 _dev)
    list(SUBLIST _case 2 -1 _sel)
    if(NOT _name STREQUAL "cpu" AND NOT TARGET anygrad-${_name})
      continue() # the module is not built in this configuration
    endif()
    add_test(NAME python_${_name}
             COMMAND ${AG_PYTHON3_EXE} -m pytest -q -p no:cacheprovider ${_sel}
                     ${PROJECT_SOURCE_DIR}/python/tests
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/python)
    set_tests_properties(python_${_name} PROPERTIES TIMEOUT 600 LABELS "python"
                         ENVIRONMENT "${_ag_py_env};ANYGRAD_TEST_DEVICES=${_dev}")
  endforeach()
  # pip install offline into a fresh directory, used from outside the tree
  execute_process(COMMAND ${AG_PYTHON3_EXE} -m pip --version RESULT_VARIABLE _ag_pip_ok OUTPUT_QUIET ERROR_QUIET)
  if(_ag_pip_ok EQUAL 0)
    add_test(NAME python_install
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python_install.sh ${AG_PYTHON3_EXE} ${PROJECT_SOURCE_DIR}
                     $<TARGET_FILE:anygrad> ${CMAKE_CURRENT_BINARY_DIR}/python_install)
    set_tests_properties(python_install PROPERTIES TIMEOUT 300 LABELS "python;package"
                         ENVIRONMENT "AG_BACKEND_PATH=${PROJECT_BINARY_DIR}/lib")
  endif()
else()
  message(STATUS "python3 with pytest and numpy not found: the python_* tests are not registered")
endif()
