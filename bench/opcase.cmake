# One op at one shape on one device, the anygrad side of bench/ggml_vulkan.py
# (beside ggml's Vulkan backend; run by hand, never by CTest).
add_executable(opcase_bench ${CMAKE_CURRENT_SOURCE_DIR}/opcase_bench.c)
target_link_libraries(opcase_bench PRIVATE anygrad m)
