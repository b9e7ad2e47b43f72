# PyTorch's type promotion against torch.result_type's table
# (tests/promotion_test.c; the table comes from tests/promotion_table.py).
add_executable(promotion_test ${CMAKE_CURRENT_SOURCE_DIR}/promotion_test.c)
target_link_libraries(promotion_test PRIVATE anygrad m)
add_test(NAME promotion COMMAND promotion_test ${CMAKE_CURRENT_SOURCE_DIR}/data/promotion_torch.txt)
set_tests_properties(promotion PROPERTIES TIMEOUT 60)
