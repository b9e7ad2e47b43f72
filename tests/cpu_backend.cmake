# CPU backend: conversions, Philox, memory, streams (both modes) and kernels
# driven through the backend vtable.
add_executable(cpu_backend_test ${CMAKE_CURRENT_SOURCE_DIR}/cpu_backend_test.c)
target_include_directories(cpu_backend_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/tools
                           ${PROJECT_SOURCE_DIR}/backends/cpu)
target_link_libraries(cpu_backend_test PRIVATE anygrad_static ${AG_CMOCKA_LIB} m)
add_test(NAME cpu_backend_inline COMMAND cpu_backend_test)
set_tests_properties(cpu_backend_inline PROPERTIES ENVIRONMENT "AG_CPU_STREAMS=inline" TIMEOUT 300)
add_test(NAME cpu_backend_threaded COMMAND cpu_backend_test)
set_tests_properties(cpu_backend_threaded PROPERTIES ENVIRONMENT "AG_CPU_STREAMS=threaded" TIMEOUT 300 LABELS threads)
# the CBLAS GEMM path (the default is oneDNN's sgemm where libdnnl.so.2 loads)
add_test(NAME cpu_backend_openblas COMMAND cpu_backend_test)
set_tests_properties(cpu_backend_openblas PROPERTIES ENVIRONMENT "AG_CPU_GEMM=openblas" TIMEOUT 300)
# Sanitizer builds default to CBLAS (backends/cpu/cpu_gemm.c): oneDNN runs
# here on request, without LeakSanitizer (whose exit-time scan faults once
# oneDNN has run on several threads)
if(AG_SANITIZE)
  add_test(NAME cpu_backend_onednn COMMAND cpu_backend_test)
  set_tests_properties(cpu_backend_onednn PROPERTIES TIMEOUT 300
                       ENVIRONMENT "AG_CPU_GEMM=onednn;ASAN_OPTIONS=detect_leaks=0")
endif()
add_test(NAME cpu_backend_idle COMMAND cpu_backend_test idle_sleep)
set_tests_properties(cpu_backend_idle PROPERTIES TIMEOUT 60 LABELS threads)

# Launch-overhead and throughput measurements (not a test).
add_executable(cpu_backend_bench ${PROJECT_SOURCE_DIR}/backends/cpu/bench/cpu_backend_bench.c)
target_include_directories(cpu_backend_bench PRIVATE ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/backends/cpu)
target_link_libraries(cpu_backend_bench PRIVATE anygrad_static m)
