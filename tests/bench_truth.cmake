# `anygrad bench` and the bench/ programs time only what ran and was right
# (docs/performance.md): the result check itself on crafted buffers
# (tests/bench_truth_test.c), and the command line with a refused op (the
# minihost module of tests/extbackend, built by tests/registry.cmake), an
# op that fails (a memory cap) and a wrong result (AG_FAULT) in
# tests/bench_truth_cli.py, one CTest test per case.
add_executable(bench_truth_test ${CMAKE_CURRENT_SOURCE_DIR}/bench_truth_test.c ${PROJECT_SOURCE_DIR}/tools/cmd_bench.c
               ${PROJECT_SOURCE_DIR}/tools/cli.c ${AG_CONF_SOURCES})
target_include_directories(bench_truth_test PRIVATE ${AG_CMOCKA_INCLUDE} ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(bench_truth_test PRIVATE anygrad ${AG_CMOCKA_LIB} m)
add_test(NAME bench_truth COMMAND bench_truth_test)
set_tests_properties(bench_truth PROPERTIES TIMEOUT 120 ENVIRONMENT "AG_BACKENDS=cpu")
find_package(Python3 COMPONENTS Interpreter QUIET)
if(TARGET anygrad-cli AND Python3_Interpreter_FOUND)
  foreach(_case refused failing wrong_result device_limit)
    add_test(NAME bench_truth_cli_${_case}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bench_truth_cli.py $<TARGET_FILE:anygrad-cli>
                     ${CMAKE_CURRENT_BINARY_DIR}/bench_truth_cli_${_case} ${_case})
    set_tests_properties(bench_truth_cli_${_case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cli" ENVIRONMENT
                         "AG_NUMERICS=;AG_FAULT=;AG_ALLOC_CONF=;AG_BENCH_MINIHOST=${CMAKE_CURRENT_BINARY_DIR}/extbackend")
  endforeach()
endif()
