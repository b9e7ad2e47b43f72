/* The device a device-generic test runs on: AG_TEST_DEVICE ("gpuemu:0",
 * "opencl:0", ...), the CPU when unset. A named device that is unavailable
 * ends the test with exit status 77, which CTest reports as skipped. */
#ifndef AG_TEST_DEVICE_H
#define AG_TEST_DEVICE_H

#include <stdio.h>
#include <stdlib.h>

#include "anygrad/anygrad.h"

static inline ag_device ag_test_device(void) {
  static ag_device d;
  static int done;
  if (!done) {
    const char *s = getenv("AG_TEST_DEVICE");
    d = AG_CPU;
    if (s && *s && ag_device_parse(s, &d) != AG_OK) {
      fprintf(stderr, "skipped: AG_TEST_DEVICE=%s: %s\n", s, ag_last_error());
      exit(77);
    }
    done = 1;
  }
  return d;
}
#define TEST_DEV ag_test_device()

#endif
