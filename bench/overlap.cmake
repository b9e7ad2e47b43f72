# Staging pipeline overlap benchmark (threaded CPU streams).
add_executable(overlap_bench ${CMAKE_CURRENT_SOURCE_DIR}/overlap_bench.c)
target_link_libraries(overlap_bench PRIVATE anygrad m)
