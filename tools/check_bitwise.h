/* `anygrad check --numerics portable --bitwise`: every conformance row on
 * each device and on the CPU, outputs and gradients compared bit for bit
 * (tools/check_bitwise.c). */
#ifndef AG_TOOLS_CHECK_BITWISE_H
#define AG_TOOLS_CHECK_BITWISE_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/tensor.h"

typedef struct ag_bitwise_opts {
  const ag_device *devices; /* the devices to prove against the CPU */
  int ndevices;
  bool all_devices;         /* devices not named: every device present (absent backends listed) */
  const int *rows;          /* conformance rows (ag_conf_op_*) */
  int nrows;
  const ag_dtype *dts;
  int ndt;
  uint64_t seed;
  bool json;                /* one JSON object on stdout instead of the table */
  bool verbose;             /* every case on stderr */
  int max_diffs;            /* differing cells described per device */
  bool full;                /* every row ran: list the portable kernel ops no row launched */
  bool coverage;            /* and fail when a device has one (--coverage) */
} ag_bitwise_opts;

/* Runs the comparison and prints it; returns the exit status (0: nothing
 * differs, no device that accepted the mode failed and, with coverage, every
 * kernel op a device lists as portable was launched by a row; 1 otherwise
 * or on a runtime error). */
int ag_check_bitwise(const ag_bitwise_opts *o);

#endif
