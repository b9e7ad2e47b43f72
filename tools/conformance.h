/* The backend comparison engine shared by `anygrad check`, `anygrad bench`,
 * the CTest suite and bench/: conformance cases (every op x dtype x shape
 * against a double-precision host reference) and launch measurements.
 * Written against the public API only, so it judges any backend the same way. */
#ifndef AG_TOOLS_CONFORMANCE_H
#define AG_TOOLS_CONFORMANCE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/device.h"
#include "anygrad/ops.h"
#include "anygrad/tensor.h"

/* ---- conformance ---- */

typedef enum ag_conf_result {
  AG_CONF_PASS = 0,
  AG_CONF_FAIL,
  AG_CONF_UNSUPPORTED, /* the backend answered AG_ERR_UNSUPPORTED (or DTYPE where optional) */
  AG_CONF_NA,          /* the op does not take this dtype by contract (exp of i32) */
} ag_conf_result;

/* "pass", "FAIL", "unsup", "-". Never NULL. */
const char *ag_conf_result_name(ag_conf_result r);

/* The ops the engine knows, in matrix order; names as on the command line
 * ("add", "softmax", "cast", "rand", ...). Borrowed static strings. */
int ag_conf_op_count(void);
const char *ag_conf_op_name(int op);
/* Index of an op name, or -1. */
int ag_conf_op_find(const char *name);

/* Default seed when none is given (tests, `anygrad check`). */
#define AG_CONF_DEFAULT_SEED 0x5eedULL

/* Run every shape case of op `op` for dtype `dt` on device `d`. Inputs come
 * from a host generator keyed by (seed, op, dtype, case), so one seed
 * reproduces any failure. On FAIL (and on UNSUPPORTED) `msg` (msg_len bytes,
 * may be NULL) receives the first problem: case, seed, metric or the status.
 * When `log` is not NULL every case is also reported there, one line each.
 * Creates and releases its own tensors inside a scope; leaves the thread's
 * error message cleared. Never aborts on a backend's misbehaviour. */
ag_conf_result ag_conf_run(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log,
                           char *msg, size_t msg_len);

/* The NMSE threshold used for dtype dt with an op's tolerance class
 * (documented in docs/conformance.md); 0 for exact comparisons. */
double ag_conf_threshold(ag_dtype dt);

/* Round a double to dtype dt with round-to-nearest-even (truncation toward
 * zero for i32) and return the value it represents: the engine's own
 * conversion, independent of the core's. */
double ag_conf_round(ag_dtype dt, double v);
uint16_t ag_conf_f16_bits(double v);
uint16_t ag_conf_bf16_bits(double v);

/* Philox 4x32-10 written from the Random123 description, independent of the
 * core's: counter (lo, hi, 0, 0), key (seed lo, seed hi). */
void ag_conf_philox(uint64_t counter, uint64_t seed, uint32_t out[4]);

/* ---- measurements (tools/cmd_bench.c) ---- */

typedef struct ag_bench_row {
  char op[24];
  char device[24];
  char dtype[8];
  int64_t numel;        /* elements of the large case */
  double overhead_ns;   /* host time per launch of the small case, median */
  double large_ms;      /* time per op of the large case, median, synchronized */
  double gbps;          /* bytes read + written / large_ms; 0 where not meaningful */
  double gflops;        /* matmul only */
  bool unsupported;
} ag_bench_row;

typedef struct ag_bench_opts {
  int64_t large_numel;  /* elements per operand of the large elementwise case */
  int64_t small_numel;  /* elements of the overhead case (16) */
  int matmul_n;         /* square matmul size */
  int reps;             /* timed repetitions (median taken) */
  const char *ops;      /* comma list or NULL for all */
} ag_bench_opts;

/* Default options: 4M elements, 16, 512, 7 repetitions, all ops. */
ag_bench_opts ag_bench_default_opts(void);

/* Measure every benchmark op on device d, appending up to max_rows rows.
 * Returns the number of rows written, or -1 with the error set when the
 * device cannot be used. */
int ag_bench_device(ag_device d, const ag_bench_opts *o, ag_bench_row *rows, int max_rows);

/* Monotonic clock in nanoseconds. */
double ag_bench_now_ns(void);

#endif
