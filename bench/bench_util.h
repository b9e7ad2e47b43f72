/* What the bench/ programs share so that a time is printed only for work
 * that ran: every synchronization that ends a timed region and every
 * result of a timed op is checked, and a failure ends the program with the
 * library's message and exit status 1 instead of a number (a launch that
 * was refused or failed costs no time, so its "time" would be a lie).
 * Header-only; the checks sit outside the timed loops' bodies where they
 * can, and add no synchronization of their own. */
#ifndef AG_BENCH_UTIL_H
#define AG_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "anygrad/anygrad.h"

/* Ends the program when st is not AG_OK: "PROG: WHAT: STATUS (message); no
 * time reported". Returns otherwise. */
static inline void bench_check(const char *prog, ag_status st, const char *what) {
  if (st == AG_OK) return;
  fprintf(stderr, "%s: %s: %s (%s); no time reported\n", prog, what, ag_status_name(st), ag_last_error());
  exit(1);
}

/* ag_device_synchronize(d), checked: what a timed loop ran asynchronously
 * reports its failure here. */
static inline void bench_sync(const char *prog, ag_device d, const char *what) {
  bench_check(prog, ag_device_synchronize(d), what);
}

/* t, or the end of the program when a timed op returned NULL (refused or
 * failed: the library's status and message). */
static inline ag_tensor *bench_result(const char *prog, ag_tensor *t, const char *what) {
  if (!t) {
    ag_status st = ag_last_status();
    bench_check(prog, st != AG_OK ? st : AG_ERR_INTERNAL, what);
  }
  return t;
}

#endif
