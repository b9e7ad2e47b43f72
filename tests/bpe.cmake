# Byte-level BPE tokenizer (tests/bpe_test.c): round trips, the classic
# example, save/load and damaged files. Trains on /usr/share/games/fortunes
# (Debian package fortunes) when installed, skips that case otherwise.
add_executable(bpe_test ${CMAKE_CURRENT_SOURCE_DIR}/bpe_test.c)
target_link_libraries(bpe_test PRIVATE anygrad ${AG_CMOCKA_LIB})
add_test(NAME bpe COMMAND bpe_test)
set_tests_properties(bpe PROPERTIES TIMEOUT 120 LABELS data)
