# Vision ops: finite differences, PyTorch references (skipped without torch), errors.
add_executable(vision_test ${CMAKE_CURRENT_SOURCE_DIR}/vision_test.c)
target_link_libraries(vision_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME vision COMMAND vision_test)
set_tests_properties(vision PROPERTIES TIMEOUT 300 LABELS autograd)
