# Released tensor handles (tests/use_after_release_test.c): AG_ERR_STATE, no
# read of freed memory; runs under the sanitizer builds like every test.
add_executable(use_after_release_test ${CMAKE_CURRENT_SOURCE_DIR}/use_after_release_test.c)
target_link_libraries(use_after_release_test PRIVATE anygrad m)
add_test(NAME use_after_release COMMAND use_after_release_test)
set_tests_properties(use_after_release PROPERTIES TIMEOUT 60)
# The same program with the call sites marked: messages name the release's file:line.
add_executable(use_after_release_sites_test ${CMAKE_CURRENT_SOURCE_DIR}/use_after_release_test.c)
target_compile_definitions(use_after_release_sites_test PRIVATE AG_SYNC_SITES)
target_link_libraries(use_after_release_sites_test PRIVATE anygrad m)
add_test(NAME use_after_release_sites COMMAND use_after_release_sites_test)
set_tests_properties(use_after_release_sites PROPERTIES TIMEOUT 60)
