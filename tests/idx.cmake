# idx reader: crafted gzip files for each kind of damage, and the installed data set.
if(ZLIB_FOUND)
  add_executable(idx_test ${CMAKE_CURRENT_SOURCE_DIR}/idx_test.c)
  target_link_libraries(idx_test PRIVATE anygrad ZLIB::ZLIB ${AG_CMOCKA_LIB})
  add_test(NAME idx COMMAND idx_test)
  set_tests_properties(idx PROPERTIES TIMEOUT 120 LABELS data)
endif()
