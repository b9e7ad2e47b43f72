# The CPU's portable numerics (tests/portable_cpu_test.c): thread-count
# independence, scalar references from docs/numerics.md bit for bit,
# refusals. Built without contraction, as the kernels it checks.
add_executable(portable_cpu_test ${CMAKE_CURRENT_SOURCE_DIR}/portable_cpu_test.c)
target_include_directories(portable_cpu_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core
                           ${PROJECT_SOURCE_DIR}/backends/cpu)
target_compile_options(portable_cpu_test PRIVATE -ffp-contract=off -fno-fast-math)
target_link_libraries(portable_cpu_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} m)
add_test(NAME portable_cpu COMMAND portable_cpu_test)
set_tests_properties(portable_cpu PROPERTIES TIMEOUT 300 LABELS threads)

# Portable against default, kernel by kernel (not a test; run by hand).
add_executable(portable_cpu_bench ${PROJECT_SOURCE_DIR}/backends/cpu/bench/portable_bench.c)
target_include_directories(portable_cpu_bench PRIVATE ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/backends/cpu)
target_link_libraries(portable_cpu_bench PRIVATE anygrad_static m)
