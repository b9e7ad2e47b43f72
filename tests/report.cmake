# The HTML run report (docs/report.md): the embedded template is in sync
# with core/diag/report.html, the CLI paths (tests/report_test.py), the page in
# headless Chromium (skips without chromium), and the C API (report_api).
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME report_template_sync COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/report_html.py --check)
  set_tests_properties(report_template_sync PROPERTIES LABELS "diag")
endif()
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  # the page in Chromium: once, outside the sanitizer stages
  set(_report_cases cli browser)
  if(AG_SANITIZE)
    set(_report_cases cli)
  endif()
  foreach(_case ${_report_cases})
    add_test(NAME report_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/report_test.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/report_${_case} ${CMAKE_SOURCE_DIR} ${_case})
    set_tests_properties(report_${_case} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "diag;cli")
  endforeach()
endif()
add_executable(report_api_test ${CMAKE_CURRENT_SOURCE_DIR}/report_api_test.c)
target_compile_definitions(report_api_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
target_link_libraries(report_api_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME report_api COMMAND report_api_test)
set_tests_properties(report_api PROPERTIES TIMEOUT 120 LABELS "diag")
