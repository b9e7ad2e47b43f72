# Views, scopes and reference counts (tests/views_test.c).
add_executable(views_test ${CMAKE_CURRENT_SOURCE_DIR}/views_test.c)
target_include_directories(views_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(views_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME views COMMAND views_test)
set_tests_properties(views PROPERTIES TIMEOUT 120)
