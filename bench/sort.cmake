# Sort of 1M f32 elements (one line, and 1000 lines of 1000) on one device.
add_executable(sort_bench ${CMAKE_CURRENT_SOURCE_DIR}/sort_bench.c)
target_link_libraries(sort_bench PRIVATE anygrad)
