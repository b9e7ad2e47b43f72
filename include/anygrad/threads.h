/* Host threads: the one thread count of the process. anygrad's host thread
 * pool (a core runtime service) runs the CPU backend's kernels with it, and
 * the loader sizes its default worker count from it. */
#ifndef ANYGRAD_THREADS_H
#define ANYGRAD_THREADS_H

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Set how many threads CPU kernels use: anygrad's one pool, which runs the
 * elementwise kernels, reductions, optimizer updates and GEMM (BLAS is kept
 * at one thread per call, split by the pool), and the default number of
 * loader workers. n = 0 restores the default: AG_NUM_THREADS when set, else
 * the CPUs this process may run on (sched_getaffinity, capped by a cgroup v2
 * cpu.max quota). Takes effect at the next kernel; idle threads sleep.
 * Errors: AG_ERR_INVALID for n < 0 or n > 256 (nothing changes).
 * Thread-safe. */
AG_API ag_status ag_set_num_threads(int n);

/* The thread count CPU kernels use now (>= 1). Thread-safe. */
AG_API int ag_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif
