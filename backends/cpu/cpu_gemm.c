/* The CPU backend's f32 GEMM engine: oneDNN's sgemm when libdnnl.so.2 can be
 * loaded, else CBLAS (OpenBLAS), else the caller's own loop.
 *
 * oneDNN generates its kernels at run time for the CPU it finds (AVX-512 on
 * this project's Zen 4 machines), where OpenBLAS 0.3.21 runs its Haswell AVX2
 * kernel: on the GPT and MLP shapes one thread of oneDNN's sgemm does 1.8-2x
 * the GFLOP/s of OpenBLAS (docs/performance.md). It is opened with dlopen,
 * so libanygrad neither needs its headers to build nor the library to run.
 *
 * Threads: the pool splits every GEMM into panels and runs each on one
 * thread (cpu_matmul.c), so each call here must stay on its thread. oneDNN
 * built with OpenMP (Debian's) sizes its team by omp_get_max_threads() of
 * the calling thread: each thread that calls it sets its own OpenMP thread
 * count to 1 once (an OpenMP setting is per thread outside parallel
 * regions), in the runtime oneDNN's calls resolve to, so no OpenMP team is
 * ever started.
 *
 * AG_CPU_GEMM=openblas (or blas) keeps CBLAS; AG_CPU_GEMM=onednn requires
 * oneDNN (the engine falls back to CBLAS with a note on stderr when it
 * cannot load). The choice is made once per process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/cpu.h"
#include "cpu_backend.h"

#if defined(AG_HAVE_CBLAS)
#include <cblas.h>
#endif

/* dnnl_sgemm (dnnl.h, stable since oneDNN 1.0): row-major C = alpha A B + beta C. */
typedef int (*dnnl_sgemm_fn)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                             int64_t ldc);
typedef void (*omp_set_fn)(int);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_sgemm_fn g_dnnl;   /* set once under g_once, then read-only */
static omp_set_fn g_omp_set;   /* the OpenMP runtime oneDNN uses, or NULL */
static char g_engine[96] = "";

/* Sanitizer builds default to CBLAS: LeakSanitizer's exit-time scan
 * faults ("Tracer caught signal 11") in processes where oneDNN's sgemm has
 * run on several threads, a failure of the tool, not a leak. They still run
 * oneDNN when AG_CPU_GEMM=onednn asks (tests/cpu_backend.cmake does, with
 * leak checks off). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AG_GEMM_DEFAULT_BLAS true
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define AG_GEMM_DEFAULT_BLAS true
#endif
#endif
#ifndef AG_GEMM_DEFAULT_BLAS
#define AG_GEMM_DEFAULT_BLAS false
#endif

static void engine_init(void) {
  const char *want = getenv("AG_CPU_GEMM");
  bool blas_only = want && *want ? (!strcmp(want, "openblas") || !strcmp(want, "blas")) : AG_GEMM_DEFAULT_BLAS;
  bool need_dnnl = want && !strcmp(want, "onednn");
  if (want && *want && !blas_only && !need_dnnl) {
    char shown[64]; /* escaped: a value never writes raw control sequences to the terminal */
    fprintf(stderr, "anygrad: AG_CPU_GEMM='%s' is not onednn, openblas or blas; using the default\n",
            ag_escape(want, shown, sizeof shown));
  }
  if (!blas_only) {
    void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    dnnl_sgemm_fn f = h ? (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm") : NULL;
    if (f) {
      g_dnnl = f;
      /* The OpenMP runtime oneDNN's calls bind to: one already in the
       * process's global scope wins (a libanygrad built by clang links
       * LLVM's libomp, which also serves GOMP programs), else the libgomp
       * oneDNN brought in its own scope. */
      g_omp_set = (omp_set_fn)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
      if (!g_omp_set) g_omp_set = (omp_set_fn)dlsym(h, "omp_set_num_threads");
      snprintf(g_engine, sizeof g_engine, "oneDNN sgemm (libdnnl.so.2)");
    } else if (need_dnnl) {
      fprintf(stderr, "anygrad: AG_CPU_GEMM=onednn but libdnnl.so.2 cannot be used (%s); using %s\n",
              h ? "no dnnl_sgemm" : dlerror(),
#if defined(AG_HAVE_CBLAS)
              "CBLAS"
#else
              "the built-in GEMM"
#endif
      );
    }
  }
  if (!g_dnnl) {
#if defined(AG_HAVE_CBLAS)
    snprintf(g_engine, sizeof g_engine, "CBLAS sgemm");
#else
    snprintf(g_engine, sizeof g_engine, "built-in GEMM (no BLAS)");
#endif
  }
}

/* ---- BLAS: one thread per call; the pool splits the GEMM instead ---- */

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_single(void) {
  /* Resolved by name so any CBLAS links; OpenBLAS's own pthreads spin for
   * milliseconds after each call, which is what the pool replaces. */
  void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  if (set) set(1);
  /* OpenBLAS started its server threads when it loaded, and they spin
   * (sched_yield) for a while before sleeping; with one thread per call
   * they are never used again, so stop them. A later multi-threaded
   * OpenBLAS call from elsewhere restarts them itself. */
  int (*shutdown)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "blas_thread_shutdown_");
  if (set && shutdown) shutdown();
  void (*mkl)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads");
  if (mkl) mkl(1);
}

void ag__cpu_blas_init(void) { pthread_once(&g_blas_once, blas_single); }

const char *ag_cpu_gemm_engine(void) {
  pthread_once(&g_once, engine_init);
  return g_engine;
}

bool ag__cpu_sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  pthread_once(&g_once, engine_init);
  if (g_dnnl) {
    static _Thread_local bool one_thread;
    if (!one_thread) {
      if (g_omp_set) g_omp_set(1);
      one_thread = true;
    }
    if (g_dnnl(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0) return true;
    /* a status other than success (bad arguments it rejects): CBLAS or the loop */
  }
#if defined(AG_HAVE_CBLAS)
  if (M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31) && lda < (1LL << 31) && ldb < (1LL << 31) &&
      ldc < (1LL << 31)) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return true;
  }
#endif
  return false;
}

bool ag__cpu_sgemm_small(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
#if defined(AG_HAVE_CBLAS)
  if (M <= 256 && N <= 256 && K <= 256 && lda < (1LL << 31) && ldb < (1LL << 31) && ldc < (1LL << 31)) {
    ag__cpu_blas_init();
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return true;
  }
#endif
  return ag__cpu_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
