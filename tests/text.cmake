# The text task's checkpoints (tests/text_test.c): an interrupted run
# resumed equals the straight run bit for bit; damaged, foreign and
# mismatched checkpoints are refused.
if(TARGET anygrad_models)
  add_executable(text_test ${CMAKE_CURRENT_SOURCE_DIR}/text_test.c)
  target_compile_definitions(text_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(text_test PRIVATE anygrad_models anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME text_resume COMMAND text_test)
  set_tests_properties(text_resume PROPERTIES TIMEOUT 120 LABELS "cli")
endif()
