# The cost of portable numerics against the default mode (run by hand, never
# by CTest): build/bin/numerics_bench --device cpu --json numerics_bench.json
add_executable(numerics_bench ${CMAKE_CURRENT_SOURCE_DIR}/numerics_bench.c)
target_link_libraries(numerics_bench PRIVATE anygrad m)
