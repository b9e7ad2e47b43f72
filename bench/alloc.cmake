# Caching allocator benchmark (white-box: links the static core).
add_executable(alloc_bench ${CMAKE_CURRENT_SOURCE_DIR}/alloc_bench.c)
target_include_directories(alloc_bench PRIVATE ${PROJECT_SOURCE_DIR}/core)
target_link_libraries(alloc_bench PRIVATE anygrad_static)
