# Hostile BPE tokenizer files and zero-copy layouts at the edge of int64
# (tests/harden3_bpe_test.c): NUL bytes and signed fields in a tokenizer
# file, a from_blob/DLPack layout whose last element sits at INT64_MAX.
add_executable(harden3_bpe_test ${CMAKE_CURRENT_SOURCE_DIR}/harden3_bpe_test.c)
target_compile_definitions(harden3_bpe_test PRIVATE AG_TEST_TMPDIR="${CMAKE_CURRENT_BINARY_DIR}")
target_link_libraries(harden3_bpe_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME harden3_bpe COMMAND harden3_bpe_test)
set_tests_properties(harden3_bpe PROPERTIES TIMEOUT 120 LABELS "data")
