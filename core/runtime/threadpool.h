/* The host thread pool, a core runtime service: the process's one thread
 * count (ag_set_num_threads, AG_NUM_THREADS, include/anygrad/threads.h) and
 * the blocking fork/join loop that CPU kernels run on. Backends and core
 * subsystems see only this header. Never installed. */
#ifndef AG_CORE_THREADPOOL_H
#define AG_CORE_THREADPOOL_H

#include <stdint.h>

#include <stdbool.h>

#include "hidden.h"

/* Work (elements x a per-element cost: 1 for an add, 8 for an exp; flops
 * / 16 for a GEMM) above which ag__pool_for splits across threads; below it
 * the loop stays on the calling thread, so small and cheap work never pays
 * a fork/join (which costs milliseconds, not microseconds, when the machine
 * is oversubscribed). 2^19: about 0.1-0.3 ms of one thread's work. At 2^17
 * the default `anygrad train` job (6 regions of 2^18 per step) ran 15% more
 * CPU with 2 threads than with 1 and switched context 40x as often
 * (docs/performance.md). */
#define AG_POOL_MIN_WORK 524288

/* Most threads ag_set_num_threads accepts. */
#define AG_MAX_THREADS 256

/* fn(ctx, a, b) runs on disjoint ranges covering [0, n) exactly once, on up
 * to ag_get_num_threads() threads (the caller is one of them) when work >=
 * AG_POOL_MIN_WORK, else on the caller alone. fn must not depend on how
 * [0, n) is split. Returns when every range is done. Thread-safe: a call
 * made while the pool runs another job (a second stream, a nested call)
 * runs serially on its caller. */
typedef void (*ag_range_fn)(void *ctx, int64_t a, int64_t b);
AG_HIDDEN void ag__pool_for(int64_t n, int64_t work, ag_range_fn fn, void *ctx);

/* CPUs this process may run on: the affinity mask, capped by a cgroup v2
 * cpu.max quota and by AG_MAX_THREADS. At least 1. */
AG_HIDDEN int ag__pool_default_threads(void);

#endif
