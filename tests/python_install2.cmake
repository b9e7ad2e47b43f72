# The package installed as users install it, each copy imported from outside
# the tree (tests/python_install2.sh): pip from a clean git clone building
# libanygrad itself, pip against an installed prefix (ANYGRAD_PREFIX), and
# cmake --install with AG_INSTALL_PYTHON; each must load the library it was
# installed against. It configures and builds a clone (ccache when present,
# only the library and module targets), so it runs in one configuration: the
# Release build, not the sanitizer or clang builds.
find_program(AG_PYTHON3_EXE NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT AG_SANITIZE AND CMAKE_BUILD_TYPE STREQUAL "Release" AND AG_PYTHON3_EXE)
  execute_process(COMMAND ${AG_PYTHON3_EXE} -c "import numpy, setuptools"
                  RESULT_VARIABLE _ag_pip2_ok OUTPUT_QUIET ERROR_QUIET)
  find_program(AG_GIT_EXE git)
  if(_ag_pip2_ok EQUAL 0 AND AG_GIT_EXE)
    add_test(NAME python_install2
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/python_install2.sh ${AG_PYTHON3_EXE} ${PROJECT_SOURCE_DIR}
                     ${CMAKE_CURRENT_BINARY_DIR}/python_install2)
    set_tests_properties(python_install2 PROPERTIES TIMEOUT 600 LABELS "python;package" PROCESSORS 2
                         SKIP_RETURN_CODE 77)
  endif()
endif()
