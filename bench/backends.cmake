# The same ops and training step on cpu, vulkan:0 and opencl:0 (those
# present), as ratios from one interleaved run.
add_executable(backends_bench ${CMAKE_CURRENT_SOURCE_DIR}/backends_bench.c ${PROJECT_SOURCE_DIR}/tools/cmd_bench.c ${AG_CONF_SOURCES}
               ${PROJECT_SOURCE_DIR}/tools/cli.c)
target_include_directories(backends_bench PRIVATE ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(backends_bench PRIVATE anygrad m)
