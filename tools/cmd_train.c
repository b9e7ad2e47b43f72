/* `anygrad train`: the character-level language model of examples/charlm.c
 * on the best available device (or --device), with progress, held-out loss,
 * samples and a resumable checkpoint. */
#include <stdio.h>

#include "../examples/charlm.h"

int ag_cmd_train(int argc, char **argv) {
  charlm_options o;
  int rc = charlm_parse_args(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : 2;
  charlm_result r;
  ag_status st = charlm_train(&o, &r);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(st), ag_last_error());
    return 1;
  }
  return 0;
}
