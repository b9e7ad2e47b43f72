/* CPU backend controls. The CPU backend is built into libanygrad; these
 * functions tune how its streams execute. */
#ifndef ANYGRAD_CPU_H
#define ANYGRAD_CPU_H

#include "anygrad/status.h"
/* ag_set_num_threads / ag_get_num_threads moved to threads.h (the host
 * thread pool is a core service); included here for existing callers. */
#include "anygrad/threads.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ag_cpu_stream_mode {
  /* Kernels and copies run synchronously on the calling thread; events
   * complete when recorded. Lowest per-op overhead (the default). */
  AG_CPU_STREAMS_INLINE = 0,
  /* One worker thread per stream runs its queue in order; the host returns
   * at once, so host work (data loading) overlaps CPU compute and two
   * streams run concurrently. */
  AG_CPU_STREAMS_THREADED = 1,
} ag_cpu_stream_mode;

/* Choose how CPU streams execute. The environment variable
 * AG_CPU_STREAMS=inline|threaded gives the initial mode; this call overrides
 * it. Valid only before the first CPU stream exists (the default stream is
 * created by the first use of the CPU device): afterwards it returns
 * AG_ERR_STATE and changes nothing, unless `mode` equals the current mode.
 * Errors: AG_ERR_INVALID for an unknown mode. Thread-safe. */
AG_API ag_status ag_cpu_set_stream_mode(ag_cpu_stream_mode mode);

/* The mode CPU streams use (or will use once created). Thread-safe. */
AG_API ag_cpu_stream_mode ag_cpu_stream_mode_get(void);

/* What runs f32 matrix products on the CPU, chosen once per process at the
 * first product: "oneDNN sgemm (libdnnl.so.2)" when oneDNN's library loads
 * (its kernels are generated for the CPU found, AVX-512 where present),
 * else "CBLAS sgemm" (OpenBLAS), else "built-in GEMM (no BLAS)". The
 * environment variable AG_CPU_GEMM=openblas (or blas) keeps CBLAS;
 * AG_CPU_GEMM=onednn asks for oneDNN and says on stderr when it cannot
 * load. Builds with AddressSanitizer or ThreadSanitizer default to CBLAS
 * (docs/design/cpu-backend.md). f64 products always use CBLAS. Returns a static string, never NULL.
 * Thread-safe. */
AG_API const char *ag_cpu_gemm_engine(void);

#ifdef __cplusplus
}
#endif
#endif
