# Docs that stay true (scripts/doc_check.py, Python 3 standard library):
# ownership and error comments of the public API, one environment table,
# the CMake options, every command-line option both ways, the runnable
# blocks of README.md and docs/ against this build, and the C examples of
# headers and docs compiled against include/.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(_dc ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/doc_check.py ${PROJECT_SOURCE_DIR})
  foreach(_what api env cmake)
    add_test(NAME docs_${_what} COMMAND ${_dc} ${_what})
    set_tests_properties(docs_${_what} PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77 LABELS "docs")
  endforeach()
  # Every generated figure (scripts/doc_numbers.py spans) equals its JSON in docs/numbers/.
  add_test(NAME docs_numbers COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/doc_numbers.py --json
                                     ${PROJECT_SOURCE_DIR}/docs/numbers --check)
  set_tests_properties(docs_numbers PROPERTIES TIMEOUT 60 LABELS "docs")
  add_test(NAME docs_compile COMMAND ${_dc} compile ${CMAKE_C_COMPILER} ${CMAKE_CURRENT_BINARY_DIR}/docs_compile)
  set_tests_properties(docs_compile PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "docs")
  # The ```python blocks marked runnable (the DLPack/PyTorch snippet of
  # docs/interop.md) run as written against the shared library, with
  # Debian's interpreter (it has torch where python3-torch is installed).
  get_target_property(_ag_type anygrad TYPE)
  if(_ag_type STREQUAL "SHARED_LIBRARY" AND NOT AG_SANITIZE)
    if(EXISTS /usr/bin/python3)
      set(_ag_doc_py /usr/bin/python3)
    else()
      set(_ag_doc_py ${Python3_EXECUTABLE})
    endif()
    add_test(NAME docs_python COMMAND ${_dc} python ${_ag_doc_py} $<TARGET_FILE:anygrad>
                                      ${CMAKE_CURRENT_BINARY_DIR}/docs_python)
    set_tests_properties(docs_python PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "docs")
  endif()
  if(TARGET anygrad-cli)
    add_test(NAME docs_help COMMAND ${_dc} help $<TARGET_FILE:anygrad-cli>)
    set_tests_properties(docs_help PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "docs;cli")
    # every AG_* variable of the environment table refuses a value it does
    # not take, with a message naming it (`anygrad info` shows it)
    add_test(NAME docs_env_reject COMMAND ${_dc} reject $<TARGET_FILE:anygrad-cli> $<TARGET_FILE_DIR:anygrad>)
    set_tests_properties(docs_env_reject PROPERTIES TIMEOUT 300 LABELS "docs;cli")
    add_test(NAME docs_runnable COMMAND ${_dc} runnable $<TARGET_FILE:anygrad-cli> $<TARGET_FILE_DIR:anygrad>
                                        ${CMAKE_CURRENT_BINARY_DIR}/docs_runnable)
    set_tests_properties(docs_runnable PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "docs;cli")
  endif()
endif()
