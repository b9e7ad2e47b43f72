# The portable f32 math library (include/anygrad/pmath.h): ns per element of
# each function in a plain C loop against glibc's float functions.
add_executable(pmath_bench ${CMAKE_CURRENT_SOURCE_DIR}/pmath_bench.c)
target_compile_options(pmath_bench PRIVATE -ffp-contract=off -fno-math-errno -fno-trapping-math)
target_include_directories(pmath_bench PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(pmath_bench PRIVATE m)
