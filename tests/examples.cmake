# The example programs that drive the models library run end to end (a few
# steps; what they train is tested by charlm_test and cnn_test).
if(TARGET example_train_words)
  add_test(NAME example_train_words COMMAND example_train_words cpu 20)
  set_tests_properties(example_train_words PROPERTIES TIMEOUT 120 LABELS "cli"
                       PASS_REGULAR_EXPRESSION "train_words: 20 steps, held-out loss")
endif()
