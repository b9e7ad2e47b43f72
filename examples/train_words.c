/* The character-level word model from a program of one's own: the defaults
 * of models/charlm.h, a device and a step count, and one call. `anygrad
 * train` is this call with every option on the command line.
 * Usage: train_words [device] [steps] [mlp|gpt] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charlm.h"

int main(int argc, char **argv) {
  charlm_model_kind kind = argc > 3 && !strcmp(argv[3], "gpt") ? CHARLM_GPT : CHARLM_MLP;
  charlm_options o = charlm_defaults(kind);
  o.device = ag_device_best();
  if (argc > 1 && ag_device_parse(argv[1], &o.device) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  if (argc > 2) o.steps = atoll(argv[2]);
  o.out = NULL; /* no checkpoint */
  charlm_result r;
  if (charlm_train(&o, &r) != AG_OK) {
    fprintf(stderr, "train_words: %s\n", ag_last_error());
    return 1;
  }
  printf("train_words: %lld steps, held-out loss %.4f, %.0f examples/s\n", (long long)r.steps_done, r.val_loss,
         r.examples_per_s);
  return 0;
}
