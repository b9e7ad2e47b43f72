/* Threads meeting the OpenCL backend's first-use state: 4 threads on
 * opencl:0 run their first GEMM (matmul f32 and f16, batched, transposed,
 * conv2d) at the same instant, then more shapes at once, each on a stream
 * of its own or all on the default stream. CLBlast builds its tuning
 * database and compiles each routine on first use, in process-wide state,
 * so each round runs in a fresh process: the test runs itself again as a
 * child, several times. Inputs are multiples of 1/4 in [-3/4, 3/4] and the
 * sums stay below 2^6 in steps of 1/16, so every product is exact in f32
 * and f16: results are compared bit for bit with a plain C reference
 * (conv2d: with the CPU backend). Skips without an OpenCL device. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

extern char **environ;

#define NTHREADS 4
#define CHILD_ARG "--first-use-child"

static ag_device CL;
/* Spinning gates rather than pthread_barrier_wait: the threads that are on
 * a core leave together, not one futex wake-up after another. */
static atomic_int g_gate[2];

static void gate(int i) {
  atomic_fetch_add(&g_gate[i], 1);
  while (atomic_load(&g_gate[i]) < NTHREADS) sched_yield();
}

/* ---- exact data ---- */

/* The f16 bits of a normal value that f16 holds exactly (these inputs). */
static uint16_t f16_of(float v) {
  if (v == 0) return 0;
  uint32_t b;
  memcpy(&b, &v, 4);
  uint32_t sign = (b >> 16) & 0x8000u, e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  return (uint16_t)(sign | ((e - 112u) << 10) | (m >> 13));
}

static float f32_of_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0 && m == 0) {
    float z;
    memcpy(&z, &sign, 4);
    return z;
  }
  if (e == 0 || e == 31) return -1e30f; /* never produced by these inputs */
  uint32_t b = sign | ((e + 112u) << 23) | (m << 13);
  float f;
  memcpy(&f, &b, 4);
  return f;
}

static float val(int salt, int64_t i) { return (float)((i * 3 + i / 11 + salt * 13) % 7 - 3) * 0.25f; }

/* ---- one case ---- */

typedef enum kind { MM, MM_T, MM_BATCH, CONV } kind;

typedef struct gcase {
  kind k;
  ag_dtype dt;
  int64_t b, m, k_, n; /* conv: N, C, HW, Co (3x3 kernel, padding 1) */
} gcase;

typedef struct worker {
  int id;
  const gcase *cases;
  int ncases;
  char fail[512];
} worker;

static void failf(worker *w, const char *fmt, ...) {
  if (w->fail[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->fail, sizeof w->fail, fmt, ap);
  va_end(ap);
}

static ag_tensor *upload(ag_device d, ag_dtype dt, int nd, const int64_t *shape, int salt) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  void *h = malloc((size_t)n * 4);
  if (!h) return NULL;
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F16) ((uint16_t *)h)[i] = f16_of(val(salt, i));
    else ((float *)h)[i] = val(salt, i);
  }
  ag_tensor *t = ag_from_host(d, dt, nd, shape, h);
  free(h);
  return t;
}

static bool fetch(worker *w, ag_tensor *t, ag_dtype dt, int64_t n, float *out) {
  void *h = malloc((size_t)n * 4);
  if (!h) return false;
  ag_status st = ag_to_host(t, h, (size_t)n * (dt == AG_F16 ? 2 : 4));
  if (st != AG_OK) {
    failf(w, "ag_to_host: %s", ag_last_error());
    free(h);
    return false;
  }
  for (int64_t i = 0; i < n; i++) out[i] = dt == AG_F16 ? f32_of_f16(((uint16_t *)h)[i]) : ((float *)h)[i];
  free(h);
  return true;
}

/* Launches the case on the current stream, compares with the reference. */
static void run_case(worker *w, const gcase *c, bool wait_first) {
  const int64_t B = c->b, M = c->m, K = c->k_, N = c->n;
  ag_tensor *a = NULL, *b = NULL, *bt = NULL, *y = NULL, *ref = NULL;
  int64_t n_out = 0;
  float *got = NULL, *want = NULL;
  bool waited = !wait_first;
  if (c->k == CONV) {
    int64_t xs[4] = {B, M, K, K}, ws[4] = {N, M, 3, 3};
    a = upload(CL, c->dt, 4, xs, w->id);
    b = upload(CL, c->dt, 4, ws, w->id + 5);
    n_out = B * N * K * K;
  } else {
    int64_t as[3] = {B, M, K}, bs[3] = {B, K, N}, bts[3] = {B, N, K};
    int nd = c->k == MM_BATCH ? 3 : 2;
    a = upload(CL, c->dt, nd, as + 3 - nd, w->id);
    /* MM_T: B is the transpose of a contiguous [N, K] (a column-major view) */
    if (c->k == MM_T) bt = upload(CL, c->dt, 2, bts + 1, w->id + 5);
    else b = upload(CL, c->dt, nd, bs + 3 - nd, w->id + 5);
    n_out = B * M * N;
  }
  if (!a || (!b && !bt)) {
    failf(w, "upload: %s", ag_last_error());
    goto done;
  }
  if (bt && !(b = ag_transpose(bt, 0, 1))) {
    failf(w, "ag_transpose: %s", ag_last_error());
    goto done;
  }
  /* every input is on the device before the threads meet */
  if (ag_stream_synchronize(ag_stream_current(CL)) != AG_OK) {
    failf(w, "sync: %s", ag_last_error());
    goto done;
  }
  /* the threads meet here: the next call is their first GEMM */
  gate(0);
  waited = true;
  y = c->k == CONV ? ag_conv2d(a, b, NULL, &(ag_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 1}) : ag_matmul(a, b);
  if (!y) {
    failf(w, "thread %d: first op failed: %s", w->id, ag_last_error());
    goto done;
  }
  got = malloc((size_t)n_out * 4);
  want = calloc((size_t)n_out, 4);
  if (!got || !want || !fetch(w, y, c->dt, n_out, got)) goto done;
  if (c->k == CONV) {
    int64_t xs[4] = {B, M, K, K}, ws[4] = {N, M, 3, 3};
    ag_tensor *xc = upload(AG_CPU, AG_F32, 4, xs, w->id), *wc = upload(AG_CPU, AG_F32, 4, ws, w->id + 5);
    ref = xc && wc ? ag_conv2d(xc, wc, NULL, &(ag_conv2d_params){{1, 1}, {1, 1}, {1, 1}, 1}) : NULL;
    ag_tensor_release(xc);
    ag_tensor_release(wc);
    if (!ref || !fetch(w, ref, AG_F32, n_out, want)) {
      failf(w, "CPU reference: %s", ag_last_error());
      goto done;
    }
  } else {
    for (int64_t z = 0; z < B; z++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          double s = 0;
          for (int64_t k = 0; k < K; k++) {
            int64_t bi = c->k == MM_T ? j * K + k : (z * K + k) * N + j;
            s += (double)val(w->id, (z * M + i) * K + k) * val(w->id + 5, bi);
          }
          want[(z * M + i) * N + j] = (float)s;
        }
  }
  for (int64_t i = 0; i < n_out; i++)
    if (got[i] != want[i]) {
      failf(w, "thread %d, %s %s [%lld,%lld,%lld,%lld]: element %lld is %g, expected %g", w->id,
            c->k == CONV ? "conv2d" : "matmul", ag_dtype_name(c->dt), (long long)B, (long long)M, (long long)K,
            (long long)N, (long long)i, (double)got[i], (double)want[i]);
      break;
    }
done:
  if (!waited) gate(0);
  free(got);
  free(want);
  ag_tensor_release(ref);
  ag_tensor_release(y);
  ag_tensor_release(b);
  ag_tensor_release(bt);
  ag_tensor_release(a);
}

static bool g_own_streams;

static void *worker_main(void *p) {
  worker *w = p;
  ag_stream *s = NULL;
  if (g_own_streams) {
    /* The stream's kernel objects exist before the threads meet: the first
     * GEMMs then reach CLBlast together. */
    s = ag_stream_create(CL);
    if (s) ag_stream_set_current(CL, s);
    int64_t one = 1;
    ag_tensor *t = s ? ag_ones(CL, AG_F32, 1, &one) : NULL;
    ag_tensor *u = t ? ag_neg(t) : NULL;
    if (!u || ag_stream_synchronize(s) != AG_OK) failf(w, "stream setup: %s", ag_last_error());
    ag_tensor_release(u);
    ag_tensor_release(t);
  }
  run_case(w, &w->cases[0], true);
  /* the next shapes, again all at once */
  gate(1);
  for (int i = 1; i < w->ncases; i++) run_case(w, &w->cases[i], false);
  if (s) {
    ag_stream_set_current(CL, NULL);
    ag_stream_destroy(s);
  }
  return NULL;
}

/* One round: the threads' first GEMMs at once. Returns 0 when every result
 * is exact. */
static int child_main(bool own_streams) {
  g_own_streams = own_streams;
  if (ag_device_parse("opencl:0", &CL) != AG_OK) {
    fprintf(stderr, "opencl:0: %s\n", ag_last_error());
    return 1;
  }
  /* Two threads with the same first routine (f32 GEMM, one key in
   * CLBlast's caches), one with f16 (staged through anygrad's kernels), one
   * with conv2d (im2col + batched GEMM); then each runs the others' kinds. */
  static const gcase plan[NTHREADS][4] = {
      {{MM, AG_F32, 1, 64, 48, 40}, {MM_BATCH, AG_F32, 3, 20, 30, 24}, {MM, AG_F16, 1, 33, 17, 95}, {CONV, AG_F32, 2, 3, 9, 5}},
      {{MM, AG_F32, 1, 64, 48, 40}, {MM_T, AG_F32, 1, 31, 45, 27}, {MM, AG_F16, 1, 40, 24, 56}, {MM, AG_F32, 1, 130, 70, 90}},
      {{MM, AG_F16, 1, 48, 40, 56}, {MM, AG_F32, 1, 17, 95, 33}, {MM_BATCH, AG_F16, 2, 24, 16, 40}, {MM_T, AG_F32, 1, 8, 64, 8}},
      {{CONV, AG_F32, 2, 4, 8, 6}, {MM, AG_F32, 1, 96, 64, 80}, {MM_T, AG_F16, 1, 20, 36, 28}, {MM_BATCH, AG_F32, 4, 9, 11, 13}},
  };
  worker w[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    w[i] = (worker){.id = i, .cases = plan[i], .ncases = 4};
    if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
      fprintf(stderr, "pthread_create failed\n");
      return 1;
    }
  }
  int bad = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    if (w[i].fail[0]) {
      fprintf(stderr, "%s\n", w[i].fail);
      bad = 1;
    }
  }
  return bad;
}

/* Rounds in fresh processes, so each meets CLBlast's process-wide first-use
 * state again (CLBlast keeps no cache on disk). The rounds share a new,
 * empty anygrad program cache, so the program is built under the threads'
 * contention at least once whatever earlier runs left; PoCL's own kernel
 * cache only shortens compiles. */
static void run_rounds(const char *mode) {
  if (!ag_backend_available(AG_BACKEND_OPENCL, NULL)) skip();
  char dir[512];
  snprintf(dir, sizeof dir, "%s/harden3_opencl_%s_%ld", AG_TEST_TMPDIR, mode, (long)getpid());
  assert_int_equal(mkdir(dir, 0755), 0);
  setenv("AG_CACHE_DIR", dir, 1);
  unsetenv("CLBLAST_BUILD_OPTIONS");
  const char *env = getenv("HARDEN3_OPENCL_ROUNDS");
  int rounds = env && atoi(env) > 0 ? atoi(env) : 6;
  int failed = 0;
  for (int r = 0; r < rounds; r++) {
    char *argv[] = {(char *)"/proc/self/exe", (char *)CHILD_ARG, (char *)mode, NULL};
    pid_t pid;
    int ws = 0;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      print_message("%s streams, round %d failed (%s %d)\n", mode, r, WIFEXITED(ws) ? "exit" : "signal",
                    WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
      failed++;
    }
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) print_message("could not remove %s\n", dir);
  if (failed) fail_msg("%d of %d rounds failed", failed, rounds);
}

/* Each thread on a stream of its own (ag_stream_create, made current). */
static void test_first_gemm_own_streams(void **state) {
  (void)state;
  run_rounds("own");
}

/* Every thread on the device's default stream (what two ranks of an
 * in-process group on one device do): the stream's kernel objects, its
 * scratch buffer and CLBlast all meet the threads at once. */
static void test_first_gemm_default_stream(void **state) {
  (void)state;
  run_rounds("default");
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], CHILD_ARG)) return child_main(!strcmp(argv[2], "own"));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_first_gemm_own_streams),
      cmocka_unit_test(test_first_gemm_default_stream),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
