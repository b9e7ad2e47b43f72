/* The Fashion-MNIST CNN of models/cnn.h from a program of one's own: the
 * defaults, a device, the epochs and how many training images to use.
 * `anygrad train --task fashion-mnist` is this call with every option.
 * Usage: train_fashion_mnist [device] [epochs] [train images (0: all)] */
#include <stdio.h>
#include <stdlib.h>

#include "cnn.h"

int main(int argc, char **argv) {
  cnn_options o = cnn_defaults();
  o.device = ag_device_best();
  if (argc > 1 && ag_device_parse(argv[1], &o.device) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  if (argc > 2) o.epochs = atoi(argv[2]);
  if (argc > 3) o.train_limit = atoll(argv[3]);
  cnn_result r;
  if (cnn_train(&o, &r) != AG_OK) {
    fprintf(stderr, "train_fashion_mnist: %s\n", ag_last_error());
    return 1;
  }
  printf("train_fashion_mnist: %d epochs, test accuracy %.2f%%, %.1f s\n", r.epochs_done, 100 * r.test_accuracy,
         r.seconds);
  return 0;
}
