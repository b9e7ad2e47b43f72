# `anygrad compare` (tools/cmd_compare.c) run in-process by cmocka, and the
# command line itself on two CPU replicas, which must agree exactly.
if(TARGET anygrad_models)
  add_executable(compare_test ${CMAKE_CURRENT_SOURCE_DIR}/compare_test.c ${PROJECT_SOURCE_DIR}/tools/cmd_compare.c
                 ${PROJECT_SOURCE_DIR}/tools/cli.c ${PROJECT_SOURCE_DIR}/tools/conformance_html.c
                 ${AG_CONF_SOURCES})
  target_compile_definitions(compare_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(compare_test PRIVATE anygrad_models anygrad ${AG_CMOCKA_LIB} m)
  add_test(NAME compare COMMAND compare_test)
  add_test(NAME compare_cli_cpu COMMAND $<TARGET_FILE:anygrad-cli> compare --devices cpu,cpu --steps 3 --tol 0)
  set_tests_properties(compare compare_cli_cpu PROPERTIES TIMEOUT 300 LABELS "compare")
endif()
