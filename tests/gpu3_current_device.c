/* The calling thread's current device around anygrad's GPU calls, on a real
 * CUDA runtime (built with -DAG_CD_CUDA, linked with libcudart: the script
 * scripts/gpu_check.sh builds it) or on the emulated GPU (gpuemu's exported
 * gpuemuSetDevice/gpuemuGetDevice; CTest). docs/design/gpu.md has the rule:
 * every entry gives the caller's current device back, except that on CUDA a
 * previous device whose primary context the process does not have yet is not
 * made current again (cudaSetDevice would create that context).
 *   1. fresh thread: a thread that never touched the runtime runs anygrad on
 *      the last device; on CUDA no other device gets a primary context, and
 *      the thread ends on the device the rule says;
 *   2. caller's device: the last device made current (cudaSetDevice), every
 *      public call that reaches the module (open, alloc, copies, launches,
 *      autograd and an optimizer step, streams and events, synchronize,
 *      props, mem info, pinned memory, empty cache) on device 0, and the
 *      other way round; after each, the current device (and on CUDA the
 *      driver's current context) has not moved;
 *   3. placement (two devices or more): each tensor's memory is on its own
 *      device (cudaPointerGetAttributes) and a copy across devices is exact.
 * Plain C without cmocka (the GPU machine has no test libraries): exit 0
 * passed, 1 failed (each failure printed), 77 no device.
 *   gpu3_current_device PREFIX [MODULE]   PREFIX cuda or gpuemu; MODULE the
 *   gpuemu module file (its exports give the current device). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"

#ifdef AG_CD_CUDA
#include <cuda.h> /* driver types only; the entries come through the runtime */
#include <cuda_runtime_api.h>
#endif

static int g_failures;
static const char *g_prefix;

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);              \
    fputc('\n', stderr);                       \
    g_failures++;                              \
  } while (0)

/* ---- the runtime's current device ---- */
#ifdef AG_CD_CUDA
static CUresult (*drv_primary_state)(CUdevice, unsigned int *, int *);
static CUresult (*drv_ctx_current)(CUcontext *);
static CUresult (*drv_ctx_device)(CUdevice *);

static bool rt_init(const char *module) {
  (void)module;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    return false;
  }
  struct {
    const char *name;
    void **fn;
  } want[] = {{"cuDevicePrimaryCtxGetState", (void **)&drv_primary_state},
              {"cuCtxGetCurrent", (void **)&drv_ctx_current},
              {"cuCtxGetDevice", (void **)&drv_ctx_device}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(want[i].name, want[i].fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      FAIL("the driver does not give %s", want[i].name);
      *want[i].fn = NULL;
    }
  }
  return true;
}
static int rt_set(int d) { return (int)cudaSetDevice(d); }
static int rt_get(int *d) { return (int)cudaGetDevice(d); }
/* 1 active, 0 not, -1 unknown */
static int primary_active(int d) {
  unsigned int flags = 0;
  int active = 0;
  if (!drv_primary_state || drv_primary_state((CUdevice)d, &flags, &active) != CUDA_SUCCESS) return -1;
  return active != 0;
}
/* The device of the driver's current context, -1 none, -2 unknown. */
static int ctx_device(void) {
  CUcontext c = NULL;
  CUdevice d = -1;
  if (!drv_ctx_current || !drv_ctx_device || drv_ctx_current(&c) != CUDA_SUCCESS) return -2;
  if (!c) return -1;
  return drv_ctx_device(&d) == CUDA_SUCCESS ? (int)d : -2;
}
static int ptr_device(const void *p) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) return -2;
  return a.type == cudaMemoryTypeDevice ? a.device : -3;
}
#else
static int (*emu_set)(int);
static int (*emu_get)(int *);
static bool rt_init(const char *module) {
  void *h = module ? dlopen(module, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) {
    printf("cannot open the gpuemu module: %s\n", module ? dlerror() : "no MODULE argument");
    return false;
  }
  *(void **)&emu_set = dlsym(h, "gpuemuSetDevice");
  *(void **)&emu_get = dlsym(h, "gpuemuGetDevice");
  if (!emu_set || !emu_get) {
    FAIL("%s does not export gpuemuSetDevice/gpuemuGetDevice", module);
    return false;
  }
  return true;
}
static int rt_set(int d) { return emu_set(d); }
static int rt_get(int *d) { return emu_get(d); }
static int primary_active(int d) { /* the emulator has no contexts */
  (void)d;
  return -1;
}
static int ctx_device(void) { return -2; }
static int ptr_device(const void *p) {
  (void)p;
  return -2;
}
#endif

static int current(void) {
  int d = -1;
  if (rt_get(&d) != 0) FAIL("GetDevice failed");
  return d;
}

/* After each call: the caller's device is still `want`, in the runtime and
 * (CUDA) in the driver's current context. */
static void keep(int want, const char *what) {
  if (want < 0) return;
  int cur = current();
  if (cur != want) FAIL("%s moved the current device from %d to %d", what, want, cur);
  int cd = ctx_device();
  if (cd != -2 && cd != want) FAIL("%s left the context of device %d current (the caller's is %d)", what, cd, want);
}
#define KEEP(want, what) keep((want), (what))
#define OK(call, want)                                                 \
  do {                                                                 \
    ag_status st_ = (call);                                            \
    if (st_ != AG_OK) FAIL("%s: %s", #call, ag_last_error());          \
    KEEP(want, #call);                                                 \
  } while (0)
#define NN(expr, want, what)                                           \
  do {                                                                 \
    if (!(expr)) FAIL("%s: %s", what, ag_last_error());               \
    KEEP(want, what);                                                  \
  } while (0)

static ag_device dev_n(int i) {
  char s[32];
  snprintf(s, sizeof s, "%s:%d", g_prefix, i);
  ag_device d = AG_CPU;
  if (ag_device_parse(s, &d) != AG_OK) FAIL("ag_device_parse(%s): %s", s, ag_last_error());
  return d;
}

/* Every public entry that reaches the module, on device `d` while `mine` is
 * current on this thread (mine < 0: whatever is current; only failures). */
static void exercise(ag_device d, int mine) {
  ag_device_props props;
  OK(ag_device_props_get(d, &props), mine);
  size_t free_b = 0, total_b = 0;
  OK(ag_device_mem_info(d, &free_b, &total_b), mine);
  int64_t n[2] = {64, 64};
  static float host[64 * 64], back[64 * 64];
  for (int i = 0; i < 64 * 64; i++) host[i] = (float)(i % 7);
  ag_tensor *a = ag_zeros(d, AG_F32, 2, n);
  NN(a, mine, "ag_zeros (device open, segment, launch)");
  ag_tensor *b = ag_from_host(d, AG_F32, 2, n, host);
  NN(b, mine, "ag_from_host");
  if (!a || !b) return;
  OK(ag_copy_(a, b), mine);
  ag_tensor *c = ag_matmul(a, b);
  NN(c, mine, "ag_matmul");
  ag_tensor *s = c ? ag_sum(c, 0, NULL, false) : NULL;
  NN(s, mine, "ag_sum");
  ag_tensor *w = ag_from_host(d, AG_F32, 2, n, host);
  NN(w, mine, "ag_from_host (parameter)");
  if (w) {
    OK(ag_tensor_set_requires_grad(w, true), mine);
    ag_scope_begin();
    ag_tensor *loss = ag_sum(ag_mul(w, w), 0, NULL, false);
    NN(loss, mine, "ag_sum(ag_mul) (autograd)");
    if (loss) OK(ag_backward(loss, NULL, false), mine);
    OK(ag_scope_end(), mine);
    ag_param_list pl = {0};
    OK(ag_params_add(&pl, "w", w), mine);
    ag_tensor *norm = ag_clip_grad_norm(&pl, 1.0);
    NN(norm, mine, "ag_clip_grad_norm");
    ag_tensor_release(norm);
    ag_sgd_options so = {0.1, 0.9, 0, 0, false};
    ag_optimizer *opt = ag_sgd_create(&pl, &so);
    NN(opt, mine, "ag_sgd_create");
    if (opt) OK(ag_optimizer_step(opt), mine);
    ag_optimizer_free(opt);
    ag_params_free(&pl);
    ag_tensor_release(w);
  }
  if (c) OK(ag_to_host(c, back, sizeof back), mine);
  if (s) {
    (void)ag_item(s);
    KEEP(mine, "ag_item");
  }

  ag_stream *st = ag_stream_create(d);
  NN(st, mine, "ag_stream_create");
  if (st) {
    ag_stream *prev = ag_stream_set_current(d, st);
    KEEP(mine, "ag_stream_set_current");
    ag_event *e0 = ag_event_create(d, true), *e1 = ag_event_create(d, true);
    NN(e0 && e1, mine, "ag_event_create");
    if (e0 && e1) {
      OK(ag_event_record(e0, st), mine);
      OK(ag_fill_(a, 2), mine);
      OK(ag_event_record(e1, st), mine);
      OK(ag_stream_wait_event(ag_stream_default(d), e1), mine);
      (void)ag_event_query(e1);
      KEEP(mine, "ag_event_query");
      (void)ag_stream_query(st);
      KEEP(mine, "ag_stream_query");
      OK(ag_event_synchronize(e1), mine);
      float ms = -1;
      OK(ag_event_elapsed_ms(e0, e1, &ms), mine);
      OK(ag_stream_synchronize(st), mine);
    }
    ag_stream_set_current(d, prev);
    ag_event_destroy(e0);
    ag_event_destroy(e1);
    KEEP(mine, "ag_event_destroy");
    ag_stream_destroy(st);
    KEEP(mine, "ag_stream_destroy");
  }

  void *pin = NULL;
  OK(ag_pinned_alloc(d, sizeof host, &pin), mine);
  if (pin) {
    memcpy(pin, host, sizeof host);
    OK(ag_copy_from_host_async(a, pin, sizeof host, ag_stream_current(d)), mine);
    OK(ag_device_synchronize(d), mine);
    OK(ag_pinned_free(pin), mine);
  }
  OK(ag_pinned_empty_cache(d), mine);
  OK(ag_to_host(a, back, sizeof back), mine);
  if (memcmp(back, host, sizeof back) != 0) FAIL("the pinned copy to %s:%d is not exact", g_prefix, d.index);
  ag_tensor_release(s);
  ag_tensor_release(c);
  ag_tensor_release(b);
  ag_tensor_release(a);
  KEEP(mine, "ag_tensor_release");
  OK(ag_device_synchronize(d), mine);
  OK(ag_memory_empty_cache(d), mine);
}

/* ---- 1. a thread that never touched the runtime ---- */
typedef struct fresh_args {
  int last, count;
  int restorable0; /* before: the process had device 0's primary context (CUDA; -1 unknown) */
} fresh_args;

static void *fresh_thread(void *p) {
  fresh_args *f = p;
  int before = current(); /* a read: no context (0 on a thread that set none) */
  exercise(dev_n(f->last), -1);
  int after = current();
  /* entry device == the thread's (one device): nothing to restore; else the
   * previous device comes back unless CUDA had no context on it */
  int want = before == f->last ? before : f->restorable0 == 0 ? f->last : before;
  if (after != want)
    FAIL("fresh thread: current device %d before, %d after anygrad ran on %s:%d (expected %d)", before, after,
         g_prefix, f->last, want);
  for (int d = 0; d < f->count; d++) {
    if (d == f->last) continue;
    int a = primary_active(d);
    if (a == 1)
      FAIL("fresh thread: anygrad ran on %s:%d only, and device %d now has a primary context", g_prefix, f->last, d);
  }
  printf("fresh thread: current device %d before, %d after; other devices' primary contexts: %s\n", before, after,
         f->count == 1 ? "none (one device)" : primary_active(0) < 0 ? "n/a" : "checked");
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "cuda") != 0 && strcmp(argv[1], "gpuemu") != 0)) {
    fprintf(stderr, "usage: gpu3_current_device cuda|gpuemu [MODULE]\n");
    return 2;
  }
  g_prefix = argv[1];
  if (!rt_init(argc > 2 ? argv[2] : NULL)) return g_failures ? 1 : 77;
  ag_backend_kind kind;
  if (ag_backend_find(g_prefix, &kind) != AG_OK) {
    printf("backend %s: %s\n", g_prefix, ag_last_error());
    return 77;
  }
  const char *why = NULL;
  if (!ag_backend_available(kind, &why)) {
    printf("backend %s unavailable: %s\n", g_prefix, why ? why : "?");
    return 77;
  }
  int count = ag_backend_device_count(kind), last = count - 1;
  printf("%s: %d device%s\n", g_prefix, count, count == 1 ? "" : "s");
  if (count < 1) return 77;

  /* 1. before anything here makes a device current */
  fresh_args f = {.last = last, .count = count, .restorable0 = primary_active(0)};
  if (count > 1 && f.restorable0 == 1)
    FAIL("device 0 has a primary context before anything ran on it (opening the backend made one)");
  pthread_t th;
  if (pthread_create(&th, NULL, fresh_thread, &f) != 0 || pthread_join(th, NULL) != 0) FAIL("pthread");

  /* 2. the caller's device: the last one current, anygrad on device 0; then
   * device 0 current, anygrad on the last one */
  if (rt_set(last) != 0) FAIL("SetDevice(%d) failed", last);
  KEEP(last, "SetDevice");
  exercise(dev_n(0), last);
  printf("caller on device %d, anygrad on %s:0: %s\n", last, g_prefix, g_failures ? "FAILED" : "kept");
  if (rt_set(0) != 0) FAIL("SetDevice(0) failed");
  exercise(dev_n(last), 0);
  printf("caller on device 0, anygrad on %s:%d: %s\n", g_prefix, last, g_failures ? "FAILED" : "kept");

  /* 3. placement across devices */
  if (count > 1) {
    int64_t n = 1 << 20;
    float *h = malloc((size_t)n * sizeof *h), *back = malloc((size_t)n * sizeof *back);
    if (!h || !back) return 1;
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 1009) - 500.0f;
    for (int d = 0; d < count; d++) {
      ag_device dv = dev_n(d);
      ag_tensor *t = ag_from_host(dv, AG_F32, 1, &n, h);
      if (!t) {
        FAIL("ag_from_host on %s:%d: %s", g_prefix, d, ag_last_error());
        continue;
      }
      int pd = ptr_device(ag_tensor_data_ptr(t));
      if (pd >= -1 && pd != d) FAIL("a tensor on %s:%d has its memory on device %d", g_prefix, d, pd);
      ag_device other = dev_n((d + 1) % count);
      ag_tensor *u = ag_to_device(t, other);
      ag_tensor *u2 = u ? ag_mul_scalar(u, 2.0) : NULL;
      ag_tensor *v = u2 ? ag_to_device(u2, dv) : NULL;
      if (!v) {
        FAIL("a copy %s:%d -> %s:%d and back: %s", g_prefix, d, g_prefix, other.index, ag_last_error());
      } else {
        if (ag_tensor_device(v).index != d) FAIL("ag_to_device(%s:%d) gave device %d", g_prefix, d,
                                                  ag_tensor_device(v).index);
        if (ag_to_host(v, back, (size_t)n * sizeof *back) != AG_OK) FAIL("ag_to_host: %s", ag_last_error());
        for (int64_t i = 0; i < n; i++)
          if (back[i] != 2 * h[i]) {
            FAIL("%s:%d -> %s:%d x2 -> back: element %lld is %g (expected %g)", g_prefix, d, g_prefix, other.index,
                 (long long)i, (double)back[i], (double)(2 * h[i]));
            break;
          }
      }
      ag_tensor_release(v);
      ag_tensor_release(u2);
      ag_tensor_release(u);
      ag_tensor_release(t);
    }
    free(h);
    free(back);
    printf("placement over %d devices: %s\n", count, g_failures ? "FAILED" : "ok");
  } else {
    printf("placement: skipped (one device)\n");
  }
  printf("gpu3_current_device %s: %s (%d failure%s)\n", g_prefix, g_failures ? "FAILED" : "passed", g_failures,
         g_failures == 1 ? "" : "s");
  return g_failures ? 1 : 0;
}
