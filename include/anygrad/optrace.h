/* Op traces: every kernel launch of one thread recorded with the bytes of
 * its operands before and after, so a single op can be re-run on another
 * device from exactly the same inputs and the outputs compared
 * (`anygrad compare --bisect`, docs/compare.md).
 *
 * A trace records on the thread that began it, from ag_optrace_begin to
 * ag_optrace_end: before and after each launch the device is synchronized
 * and every operand read to the host, so a traced region runs many times
 * slower than normal and holds its operands in host memory. Untraced
 * launches pay one predictable branch. Multi-tensor launches (optimizers)
 * are recorded with their tensor lists. Ownership: a trace is owned by the
 * caller (ag_optrace_free); pointers returned by the accessors are borrowed
 * from the trace and live as long as it. Errors: functions returning
 * ag_status return AG_OK or set the error (ag_last_error); functions
 * returning a pointer return NULL with the error set. */
#ifndef ANYGRAD_OPTRACE_H
#define ANYGRAD_OPTRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/device.h"
#include "anygrad/status.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ag_optrace ag_optrace;

/* Start recording the launches of the calling thread into a new trace,
 * owned by the caller. NULL with AG_ERR_STATE when the thread already
 * records, AG_ERR_OOM without memory. */
AG_API ag_optrace *ag_optrace_begin(void);

/* Stop recording (t stays readable). AG_ERR_INVALID for NULL,
 * AG_ERR_STATE when t is not the calling thread's recording trace. The
 * first error met while recording (a failed snapshot, out of memory) is
 * returned here too; records made before it stay valid. */
AG_API ag_status ag_optrace_end(ag_optrace *t);

/* Label the records that follow (e.g. "forward", "backward"); the label
 * is copied (at most 15 characters kept). NULL t is ignored. */
AG_API void ag_optrace_phase(ag_optrace *t, const char *phase);

/* Free a trace (NULL ignored); a recording trace is ended first. */
AG_API void ag_optrace_free(ag_optrace *t);

/* Number of recorded launches (0 for NULL). */
AG_API int64_t ag_optrace_count(const ag_optrace *t);

typedef struct ag_optrace_op {
  const char *name;   /* the public call that launched ("ag_matmul", "ag_softmax backward") */
  const char *kop;    /* the kernel op ("matmul", "unary:exp") */
  const char *phase;  /* the label set by ag_optrace_phase ("" none) */
  const char *node;   /* the autograd node whose gradient ran it ("" outside ag_backward) */
  int node_index;     /* that node's position in the backward order (-1 none) */
  ag_device device;
  int n_operands;     /* operands then multi-tensor list entries */
} ag_optrace_op;

typedef struct ag_optrace_operand {
  ag_dtype dtype;
  int ndim;
  int64_t shape[AG_MAX_DIMS];
  int64_t numel;
  bool written;       /* its bytes changed in the launch (an output) */
} ag_optrace_operand;

/* Record k (0-based). Strings are borrowed from t. AG_ERR_INVALID for NULL
 * arguments or k out of range. */
AG_API ag_status ag_optrace_get(const ag_optrace *t, int64_t k, ag_optrace_op *out);

/* Operand j of record k. AG_ERR_INVALID for NULL arguments, k or j out of
 * range. */
AG_API ag_status ag_optrace_get_operand(const ag_optrace *t, int64_t k, int j, ag_optrace_operand *out);

/* The n (= the operand's numel) elements of operand j of record k before
 * (after false) or after the launch, in row-major order of its shape,
 * converted to double into caller memory. AG_ERR_INVALID for NULL
 * arguments, indices out of range or n different from numel. */
AG_API ag_status ag_optrace_values(const ag_optrace *t, int64_t k, int j, bool after, double *out, int64_t n);

/* Re-run record k of t on dev from the bytes its operands held before the
 * launch (every operand uploaded to fresh memory of dev, aliasing kept),
 * and return a new one-record trace of that launch, owned by the caller.
 * NULL with the error set: AG_ERR_INVALID (NULL t, k out of range), the
 * device's errors (unavailable, AG_ERR_UNSUPPORTED for a kernel it lacks,
 * AG_ERR_OOM). */
AG_API ag_optrace *ag_optrace_replay(const ag_optrace *t, int64_t k, ag_device dev);

/* ---- kernel-op tally ----
 * Counts, per kernel op (the ag_kop codes of anygrad/kops.h), the launches
 * the calling thread makes on device d: counts[op] += 1 for each launch of
 * an op below n. Nothing is synchronized or copied, so a tallied region
 * runs at its usual speed (`anygrad check` uses it to find kernel ops no
 * conformance row launches). One tally per thread, independent of a trace;
 * counts is borrowed by the tally until ag_optrace_tally_end. */

/* Start the calling thread's tally. AG_ERR_INVALID for NULL counts or n <
 * 0, AG_ERR_STATE when the thread already tallies. */
AG_API ag_status ag_optrace_tally_begin(ag_device d, int64_t *counts, int n);

/* Stop the calling thread's tally (counts keep their values).
 * AG_ERR_STATE when none is on. */
AG_API ag_status ag_optrace_tally_end(void);

#ifdef __cplusplus
}
#endif

#endif
