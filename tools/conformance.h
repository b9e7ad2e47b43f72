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

/* ---- kernel-op coverage ----
 * The rows above are public ops; each launches kernel ops (anygrad/kops.h).
 * `anygrad check` tallies the launches of every row (ag_optrace_tally_*)
 * and walks the kernel-op table with these, so a kernel op a device runs
 * that no row launches is reported, not silently untested. */

/* Number of kernel ops in the table (AG_KOP_COUNT) and the table's name of
 * op k ("layernorm"; "?" out of range). */
int ag_conf_kop_count(void);
const char *ag_conf_kop_name(int k);
/* Whether device d runs kernel op k in dtype dt for some sub-op or variant
 * (ag_device_supports over the op's range of sub codes). */
bool ag_conf_kop_supported(ag_device d, int k, ag_dtype dt);

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
/* Element i of a host buffer of dtype dt as a double, by the engine's own
 * conversion. */
double ag_conf_value(ag_dtype dt, const void *buf, int64_t i);

/* The engine's verdict on n result values against a reference (both as
 * doubles; the reference is rounded to dt before the NaN, infinity and
 * exact tests): NaN must meet NaN and an infinity the same infinity; tol 0
 * is an exact comparison, else the normalized mean squared error must stay
 * within tol (ag_conf_threshold(dt) for an op compared within its dtype's
 * rounding, the class of every DEF row). index (may be NULL) gives the
 * element number each value stands for when the values are a sample.
 * Returns true when within; else false with why (why_len bytes) naming
 * the element, both values and the metric ("nmse 3e-08 > 1e-10; worst
 * element 0: got 2.5, want 1.5"). */
bool ag_conf_compare(ag_dtype dt, const double *got, const double *ref, const int64_t *index, int64_t n, double tol,
                     char *why, size_t why_len);

uint16_t ag_conf_bf16_bits(double v);

/* Philox 4x32-10 written from the Random123 description, independent of the
 * core's: counter (lo, hi, 0, 0), key (seed lo, seed hi). */
void ag_conf_philox(uint64_t counter, uint64_t seed, uint32_t out[4]);

/* ---- accuracy (`anygrad check --accuracy`) ---- */

/* The error distribution of one kind of input: ULP distances of floating
 * outputs against the double reference rounded to the output dtype
 * (tools/ulp.h; f16 and bf16 counted in their own bit patterns), and the
 * exact-match count of integer and bool outputs. */
typedef struct ag_conf_dist {
  int64_t *ulps; /* one per floating output element; owned */
  int64_t n, cap;
  int64_t exact_n, exact_match; /* integer and bool output elements */
} ag_conf_dist;

/* One op x dtype x device: the existing shape cases and the adversarial
 * inputs (subnormals, large magnitudes, ill-conditioned points, NaN, inf,
 * signed zeros), kept apart. Zero-initialise; release with ag_conf_acc_free. */
typedef struct ag_conf_acc {
  ag_conf_dist shapes, adversarial;
  const char *dump_dir; /* when set, inputs, reference and output of the
                           cases with a torch counterpart are written here */
  char dump_error[1024]; /* the first file of dump_dir that could not be
                            written, and why ("" when none); no file is
                            written after it. The caller checks it after each
                            ag_conf_run_acc (ag_conf_acc_free clears it). */
} ag_conf_acc;

typedef struct ag_conf_stats {
  int64_t n;                    /* floating elements */
  int64_t median, p99, max;     /* ULPs; -1 when n is 0; INT64_MAX: a NaN where a number was due (or the reverse) */
  int64_t nan_mismatch;         /* elements at INT64_MAX */
  int64_t exact_n, exact_match; /* integer and bool elements */
} ag_conf_stats;

/* ag_conf_run that also records every compared element in `acc` (may be
 * NULL: then exactly ag_conf_run) and runs the adversarial cases, which are
 * recorded but never fail the cell. Sorts acc's arrays as a side effect. */
ag_conf_result ag_conf_run_acc(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                               size_t msg_len, ag_conf_acc *acc);
/* Order statistics of a distribution (sorts d->ulps in place). */
ag_conf_stats ag_conf_dist_stats(ag_conf_dist *d);
/* Free the arrays of acc and zero it (keeps dump_dir). NULL is a no-op. */
void ag_conf_acc_free(ag_conf_acc *acc);

/* ---- bit for bit (`anygrad check --numerics portable --bitwise`) ----
 * A row run with a capture records every tensor the engine reads back from
 * the device (outputs, and for grad_ rows the forward output and each
 * gradient), as raw bytes, in the order read; the reference comparisons are
 * not judged and the finite differences not run (bits, not accuracy, are
 * the question). Inputs are generated on the host from the seed and
 * copied, so two devices see the same bits; two captures of one row are
 * compared buffer by buffer. */

typedef struct ag_conf_buf {
  char what[160]; /* "case 'rows of 7' read 2" */
  ag_dtype dt;
  int ndim;
  int64_t shape[AG_MAX_DIMS];
  int64_t n;
  void *bytes; /* n * ag_dtype_size(dt); owned */
} ag_conf_buf;

typedef struct ag_conf_capture {
  ag_conf_buf *b; /* owned */
  int n, cap;
  bool oom; /* a buffer could not be kept: the capture is incomplete */
} ag_conf_capture;

/* ag_conf_run with every read-back recorded in cap (zero-initialised;
 * release with ag_conf_capture_free). */
ag_conf_result ag_conf_run_capture(int op, ag_dtype dt, ag_device d, uint64_t seed, FILE *log, char *msg,
                                   size_t msg_len, ag_conf_capture *cap);
void ag_conf_capture_free(ag_conf_capture *cap);

/* One element that differs: its index, both values' bits and values, and
 * their distance (ULPs of dt for floating dtypes, |a - b| for integers;
 * 0 for +0 against -0, INT64_MAX for NaN against a number). */
typedef struct ag_conf_bitdiff {
  ag_dtype dt;
  int buffer; /* ag_conf_capture_compare: which buffer of the captures */
  int64_t index;
  uint64_t a_bits, b_bits;
  double a, b;
  int64_t ulps;
} ag_conf_bitdiff;

/* Whether elements i of a and b (dtype dt) are the same: NaN equals NaN
 * whatever its sign and payload, every other value by its bits (+0 and -0
 * differ). */
bool ag_conf_bits_same(ag_dtype dt, const void *a, const void *b, int64_t i);
/* Compare n elements; returns how many differ and the first in *first
 * (may be NULL). */
int64_t ag_conf_bits_compare(ag_dtype dt, const void *a, const void *b, int64_t n, ag_conf_bitdiff *first);
/* "element 5: 0x3f800001 (1.00000012) vs 0x3f800000 (1), 1 ULP" into buf. */
const char *ag_conf_bitdiff_str(ag_dtype dt, const ag_conf_bitdiff *d, char *buf, size_t len);

/* The verdict on two captures of one row (a: the device, b: the
 * reference): 0 when every buffer is the same bit for bit, else the number
 * of differing elements (a buffer whose dtype, shape or count differs, or
 * one present in only one capture, counts as 1), with the first difference
 * described in why (where, shape, ag_conf_bitdiff_str) and returned in
 * *first (index -1 for a structural difference; may be NULL). */
int64_t ag_conf_capture_compare(const ag_conf_capture *a, const ag_conf_capture *b, char *why, size_t len,
                                ag_conf_bitdiff *first);

/* ---- measurements (tools/cmd_bench.c) ---- */

/* What became of one op: timed, refused by the device (AG_ERR_UNSUPPORTED:
 * a fact about the device), or failed (a launch or a synchronization
 * returned an error, or the result differed from the CPU's beyond the
 * conformance tolerance). Only ok rows carry times. */
typedef enum ag_bench_status { AG_BENCH_OK = 0, AG_BENCH_UNSUPPORTED, AG_BENCH_ERROR } ag_bench_status;

/* "ok", "unsupported", "error". */
const char *ag_bench_status_name(ag_bench_status s);

typedef struct ag_bench_row {
  char op[24];
  char device[24];
  char dtype[8];
  int64_t numel;        /* elements of the large case */
  double overhead_ns;   /* host time per launch of the small case, median */
  double large_ms;      /* time per op of the large case, median, synchronized */
  double gbps;          /* bytes read + written / large_ms; 0 where not meaningful */
  double gflops;        /* matmul only */
  ag_bench_status status; /* the timing fields hold numbers only when AG_BENCH_OK */
  char error[512];        /* what was refused or went wrong ("" when ok) */
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
 * Before timing, each case (small and large) runs once on d and once on
 * the CPU from the same inputs and the results are compared
 * (ag_bench_compare; on the cpu backend, its own reference, only the
 * statuses are checked); every launch and synchronization of the timed loops
 * is checked. A row that is not AG_BENCH_OK says why in its error and has
 * no times. Returns the number of rows written, or -1 with the error set
 * when the device cannot be used. */
int ag_bench_device(ag_device d, const ag_bench_opts *o, ag_bench_row *rows, int max_rows);

/* The check of a result against the CPU's: dt the output's dtype,
 * got and want host buffers of n elements of dt (the device's and the
 * CPU's), exact for an op the conformance rows compare exactly (copies,
 * casts), else ag_conf_threshold(dt). Up to 65536 elements are compared,
 * evenly spaced and always including the first and the last, so a large
 * output costs no second full-size double buffer. Returns AG_BENCH_OK, or
 * AG_BENCH_ERROR with why (why_len bytes) naming the element and both
 * values. */
ag_bench_status ag_bench_compare(ag_dtype dt, const void *got, const void *want, int64_t n, bool exact, char *why,
                                 size_t why_len);

/* Monotonic clock in nanoseconds. */
double ag_bench_now_ns(void);

#endif
