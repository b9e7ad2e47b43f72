# The typed kernel-op table (tests/kargs_test.c): the table's consistency,
# the generated decoders with their checks on (AG_KCHECK), and a backend's
# generated dispatch and supports() data.
add_executable(kargs_test ${CMAKE_CURRENT_SOURCE_DIR}/kargs_test.c)
target_link_libraries(kargs_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME kargs COMMAND kargs_test)
set_tests_properties(kargs PROPERTIES TIMEOUT 60 LABELS "abi")
