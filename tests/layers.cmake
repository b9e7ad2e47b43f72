# The layers of core/ hold (scripts/layers.py reads core/layers.txt; the rules
# are in docs/design/layering.md), and the checker itself fails on each kind
# of violation (tests/layers_check.py). Python 3 standard library only.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME layers COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/layers.py ${PROJECT_SOURCE_DIR})
  add_test(NAME layers_check COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/layers_check.py)
  set_tests_properties(layers layers_check PROPERTIES TIMEOUT 60 LABELS "docs;lint")
endif()
