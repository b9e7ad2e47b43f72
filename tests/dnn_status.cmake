# cuDNN status codes and version numbers of cuDNN 9 and 8, read by the CUDA
# module's loader (backends/cuda/dnn_status.h); pure C, built everywhere.
add_executable(dnn_status_test ${CMAKE_CURRENT_SOURCE_DIR}/dnn_status_test.c)
target_include_directories(dnn_status_test PRIVATE ${AG_CMOCKA_INCLUDE})
target_link_libraries(dnn_status_test PRIVATE ${AG_CMOCKA_LIB})
add_test(NAME dnn_status COMMAND dnn_status_test)
set_tests_properties(dnn_status PROPERTIES TIMEOUT 30)
