/* OpenCL backend, driven through its vtable (the module is dlopened as the
 * registry would load it) and checked against double-precision references
 * computed here. Skips when the module or an OpenCL device is absent. */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include <cmocka.h>

#include "op_ref.h"
#include "anygrad/backend.h"

static const ag_backend *B;
static ag_bstream *S;
static char cache_dir[256];

/* ---- host helpers ---- */

static uint64_t rng = 88172645463325252ull;
static float frand(float lo, float hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 40) * 0x1.0p-24);
}

static size_t dsz(ag_dtype dt) { return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_BOOL ? 1 : 4; }

/* Value of v after storage in dt. */
static double rnd(ag_dtype dt, double v) {
  switch (dt) {
    case AG_F16: return ag_f16_to_f32(ag_f32_to_f16((float)v));
    case AG_BF16: return ag_bf16_to_f32(ag_f32_to_bf16((float)v));
    case AG_I32: return (double)(int32_t)v;
    case AG_BOOL: return v != 0;
    default: return (float)v;
  }
}

static void pack(ag_dtype dt, const float *v, int64_t n, void *dst) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F32) ((float *)dst)[i] = v[i];
    else if (dt == AG_F16) ((uint16_t *)dst)[i] = ag_f32_to_f16(v[i]);
    else if (dt == AG_BF16) ((uint16_t *)dst)[i] = ag_f32_to_bf16(v[i]);
    else if (dt == AG_BOOL) ((uint8_t *)dst)[i] = v[i] != 0;
    else ((int32_t *)dst)[i] = (int32_t)v[i];
  }
}

static void unpack(ag_dtype dt, const void *src, int64_t n, double *v) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == AG_F32) v[i] = ((const float *)src)[i];
    else if (dt == AG_F16) v[i] = ag_f16_to_f32(((const uint16_t *)src)[i]);
    else if (dt == AG_BF16) v[i] = ag_bf16_to_f32(((const uint16_t *)src)[i]);
    else if (dt == AG_BOOL) v[i] = ((const uint8_t *)src)[i];
    else v[i] = ((const int32_t *)src)[i];
  }
}

static void *dalloc(size_t bytes) {
  void *b = NULL;
  assert_int_equal(B->segment_alloc(0, bytes, &b), AG_OK);
  return b;
}

/* Writes v (rounded to dt) at byte offset off; returns the stored values. */
static void upload(void *base, size_t off, ag_dtype dt, const float *v, int64_t n) {
  void *tmp = malloc((size_t)n * 4 + 4);
  pack(dt, v, n, tmp);
  assert_int_equal(B->copy_h2d(S, base, off, tmp, (size_t)n * dsz(dt), false), AG_OK);
  free(tmp);
}

static void download(void *base, size_t off, ag_dtype dt, double *v, int64_t n) {
  void *tmp = malloc((size_t)n * 4 + 4);
  assert_int_equal(B->copy_d2h(S, tmp, base, off, (size_t)n * dsz(dt)), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  unpack(dt, tmp, n, v);
  free(tmp);
}

static ag_koperand opnd(void *base, size_t off, ag_dtype dt, int nd, const int64_t *shape,
                        const int64_t *strides) {
  ag_koperand o = {.base = base, .offset = off, .dtype = dt, .ndim = nd};
  int64_t st = 1;
  for (int d = nd - 1; d >= 0; d--) {
    o.shape[d] = shape[d];
    o.strides[d] = strides ? strides[d] : st;
    st *= shape[d];
  }
  return o;
}

static double tol_of(ag_dtype dt) {
  return dt == AG_F16 ? 2e-3 : dt == AG_BF16 ? 1.6e-2 : dt == AG_I32 ? 0 : 2e-5;
}

/* |got - want| <= tol * max(1, |want|); NaN only where NaN is expected. */
static void check(const char *what, ag_dtype dt, const double *got, const double *want, int64_t n,
                  double scale) {
  double tol = tol_of(dt) * scale;
  for (int64_t i = 0; i < n; i++) {
    bool ok = isnan(want[i]) ? isnan(got[i])
                             : (got[i] == want[i] ||
                                fabs(got[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])));
    if (!ok) fail_msg("%s (%s): element %lld: got %.9g, want %.9g", what, ag_dtype_name(dt),
                      (long long)i, got[i], want[i]);
  }
}

static ag_status launch(ag_kernel_call *c) {
  ag_status st = B->launch(S, c);
  if (st != AG_OK) print_error("launch: %s\n", ag_last_error());
  return st;
}

#define NEED_DEVICE() \
  do {                \
    if (!B) skip();   \
  } while (0)

/* ---- setup ---- */

static int setup(void **state) {
  snprintf(cache_dir, sizeof cache_dir, "/tmp/ag-opencl-test-XXXXXX");
  if (!mkdtemp(cache_dir)) cache_dir[0] = 0;
  setenv("AG_CACHE_DIR", cache_dir, 1);
  void *h = dlopen(AG_OPENCL_MODULE, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    print_message("opencl module not loadable: %s\n", dlerror());
    return 0;
  }
  ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL);
  if (!get) return -1;
  const ag_backend *be = get();
  int n = 0;
  char reason[256] = "";
  if (be->abi_major != AG_BACKEND_ABI_MAJOR || strcmp(be->name, "opencl") != 0) return -1;
  if (be->init(&n, reason, sizeof reason) != AG_OK || n == 0) {
    print_message("no OpenCL device: %s\n", reason);
    return 0;
  }
  B = be;
  if (B->stream_create(0, &S) != AG_OK) return -1;
  return 0;
}

static int teardown(void **state) {
  if (B) {
    B->stream_destroy(S);
    B->shutdown();
  }
  if (cache_dir[0]) {
    DIR *d = opendir(cache_dir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d)))
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", cache_dir, e->d_name);
        remove(p);
      }
    if (d) closedir(d);
    rmdir(cache_dir);
  }
  return 0;
}

/* ---- device, memory, streams ---- */

static void test_props_memory(void **state) {
  NEED_DEVICE();
  ag_device_props p;
  assert_int_equal(B->device_props(0, &p), AG_OK);
  assert_true(p.name[0] != 0);
  assert_true(p.total_memory > 0);
  assert_true(p.compute_units > 0);
  assert_false(p.native_bf16);
  size_t fr = 0, tot = 0;
  assert_int_equal(B->mem_info(0, &fr, &tot), AG_OK);
  assert_true(tot == p.total_memory && fr > 0 && fr <= tot);
  /* Larger than any single buffer the device allows: a clear OOM. */
  void *b = NULL;
  assert_int_equal(B->segment_alloc(0, p.total_memory * 4, &b), AG_ERR_OOM);
  assert_non_null(strstr(ag_last_error(), "opencl"));
}

static void test_copies(void **state) {
  NEED_DEVICE();
  enum { N = 1000 };
  float h[N];
  double back[N];
  for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f - 7;
  void *a = dalloc(8192), *b = dalloc(8192);
  upload(a, 512, AG_F32, h, N);
  assert_int_equal(B->copy_d2d(S, b, 1024, a, 512 + 40, (N - 10) * 4), AG_OK);
  download(b, 1024, AG_F32, back, N - 10);
  for (int i = 0; i < N - 10; i++) assert_true(back[i] == h[i + 10]);
  /* pinned staging: async both ways */
  float *pin = NULL;
  assert_int_equal(B->pinned_alloc(0, 2 * N * sizeof(float), (void **)&pin), AG_OK);
  for (int i = 0; i < N; i++) pin[i] = (float)(3 * i);
  assert_int_equal(B->copy_h2d(S, a, 0, pin, N * 4, true), AG_OK);
  assert_int_equal(B->copy_d2h(S, pin + N, a, 0, N * 4), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  for (int i = 0; i < N; i++) assert_true(pin[N + i] == (float)(3 * i));
  B->pinned_free(0, pin);
  B->segment_free(0, a);
  B->segment_free(0, b);
}

static void test_streams_events(void **state) {
  NEED_DEVICE();
  enum { N = 1 << 20 };
  ag_bstream *s2;
  ag_bevent *e, *t0, *t1;
  assert_int_equal(B->stream_create(0, &s2), AG_OK);
  assert_int_equal(B->event_create(0, false, &e), AG_OK);
  assert_int_equal(B->event_create(0, true, &t0), AG_OK);
  assert_int_equal(B->event_create(0, true, &t1), AG_OK);
  bool done = false;
  assert_int_equal(B->event_query(e, &done), AG_OK);
  assert_true(done); /* never recorded */
  void *a = dalloc(N * 4), *b = dalloc(N * 4);
  int64_t shape[1] = {N};
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {3.25}};
  c.o[0] = opnd(a, 0, AG_F32, 1, shape, NULL);
  /* Warm-up: the first launch builds the program, which would otherwise fall
   * between the timing events (elapsed time includes host gaps, as on CUDA). */
  assert_int_equal(launch(&c), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  assert_int_equal(B->event_record(t0, S), AG_OK);
  assert_int_equal(launch(&c), AG_OK);
  assert_int_equal(B->event_record(t1, S), AG_OK);
  assert_int_equal(B->event_record(e, S), AG_OK);
  /* s2 must see the fill although nothing on the host waited for it. */
  assert_int_equal(B->stream_wait_event(s2, e), AG_OK);
  assert_int_equal(B->copy_d2d(s2, b, 0, a, 0, N * 4), AG_OK);
  assert_int_equal(B->stream_synchronize(s2), AG_OK);
  float last[2];
  assert_int_equal(B->copy_d2h(s2, last, b, (N - 2) * 4, 8), AG_OK);
  assert_int_equal(B->stream_synchronize(s2), AG_OK);
  assert_true(last[0] == 3.25f && last[1] == 3.25f);
  assert_int_equal(B->event_synchronize(t1), AG_OK);
  float ms = -1;
  assert_int_equal(B->event_elapsed_ms(t0, t1, &ms), AG_OK);
  if (!(ms >= 0 && ms < 60000)) fail_msg("elapsed %f ms", ms);
  assert_int_equal(B->event_elapsed_ms(e, t1, &ms), AG_ERR_INVALID);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  assert_int_equal(B->stream_query(S, &done), AG_OK);
  assert_true(done);
  B->event_destroy(e);
  B->event_destroy(t0);
  B->event_destroy(t1);
  B->stream_destroy(s2);
  B->segment_free(0, a);
  B->segment_free(0, b);
}

/* ---- elementwise ---- */

static const ag_dtype FLOATS[3] = {AG_F32, AG_F16, AG_BF16};

/* Output [5, 6] contiguous from an input stored transposed (strides 1, 5),
 * so the strided path runs; then a contiguous pass. */
static void test_unary(void **state) {
  NEED_DEVICE();
  enum { R = 5, C = 6, N = R * C };
  int64_t shape[2] = {R, C}, tstr[2] = {1, R};
  void *x = dalloc(N * 4), *o = dalloc(N * 4 + 64);
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FLOATS[di];
    for (int op = 0; op < AG_UNARY_COUNT; op++) {
      assert_true(B->supports(0, AG_K_UNARY, op, dt));
      const ag_ref_dom dom = ag_ref_unary_dom(op, 0);
      float h[N];
      for (int i = 0; i < N; i++) h[i] = (float)ag_ref_draw(dom, frand(0, 1), frand(0, 1));
      upload(x, 0, dt, h, N);
      double s0, s1;
      ag_ref_unary_scalars(op, &s0, &s1);
      for (int strided = 0; strided < 2; strided++) {
        ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_UNARY, .sub = op, .n_operands = 2, .s = {s0, s1}};
        c.o[0] = opnd(o, 64, dt, 2, shape, NULL);
        c.o[1] = opnd(x, 0, dt, 2, shape, strided ? tstr : NULL);
        assert_int_equal(launch(&c), AG_OK);
        double got[N], want[N], in[N];
        unpack(dt, (pack(dt, h, N, (void *)got), (void *)got), N, in);
        download(o, 64, dt, got, N);
        for (int r = 0; r < R; r++)
          for (int cc = 0; cc < C; cc++) {
            int src = strided ? cc * R + r : r * C + cc;
            want[r * C + cc] = rnd(dt, ag_ref_unary(op, in[src], s0, s1));
          }
        char what[64];
        snprintf(what, sizeof what, "unary %d strided %d", op, strided);
        check(what, dt, got, want, N, 1);
      }
    }
  }
  B->segment_free(0, x);
  B->segment_free(0, o);
}

static void test_unary_i32_and_casts(void **state) {
  NEED_DEVICE();
  enum { N = 8 };
  const int32_t xi[N] = {0, 1, -1, 2147483647, -2147483647 - 1, 123456789, -77, 40000};
  void *x = dalloc(64), *o = dalloc(64);
  assert_int_equal(B->copy_h2d(S, x, 0, xi, sizeof xi, false), AG_OK);
  int64_t shape[1] = {N};
  const int ops[4] = {AG_U_COPY, AG_U_NEG, AG_U_ABS, AG_U_AFFINE};
  for (int k = 0; k < 4; k++) {
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_UNARY, .sub = ops[k], .n_operands = 2, .s = {3, -5}, .i = {3, -5}};
    c.o[0] = opnd(o, 0, AG_I32, 1, shape, NULL);
    c.o[1] = opnd(x, 0, AG_I32, 1, shape, NULL);
    assert_int_equal(launch(&c), AG_OK);
    int32_t got[N];
    assert_int_equal(B->copy_d2h(S, got, o, 0, sizeof got), AG_OK);
    assert_int_equal(B->stream_synchronize(S), AG_OK);
    for (int i = 0; i < N; i++) {
      int64_t v = xi[i], w;
      if (ops[k] == AG_U_COPY) w = v;
      else if (ops[k] == AG_U_NEG) w = (int32_t)(0u - (uint32_t)v);
      else if (ops[k] == AG_U_ABS) w = v < 0 ? (int32_t)(0u - (uint32_t)v) : v;
      else w = (int32_t)((uint32_t)v * 3u - 5u); /* wraps, as the CPU's (kops.h) */
      if (got[i] != w) fail_msg("i32 unary %d element %d: got %d want %lld", ops[k], i, got[i], (long long)w);
    }
  }
  assert_false(B->supports(0, AG_K_UNARY, AG_U_EXP, AG_I32));
  /* casts: f32 -> i32 truncates, f32 -> f16/bf16 rounds to nearest even. */
  const float xf[N] = {1.9f, -1.9f, 0.5f, 65504.0f, 1.0009765625f + 0x1p-12f, 3.0e38f, -2.5f, 1e-8f};
  assert_int_equal(B->copy_h2d(S, x, 0, xf, sizeof xf, false), AG_OK);
  const ag_dtype to[3] = {AG_I32, AG_F16, AG_BF16};
  for (int k = 0; k < 3; k++) {
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_UNARY, .sub = AG_U_COPY, .n_operands = 2};
    c.o[0] = opnd(o, 0, to[k], 1, shape, NULL);
    c.o[1] = opnd(x, 0, AG_F32, 1, shape, NULL);
    assert_int_equal(launch(&c), AG_OK);
    unsigned char raw[64];
    assert_int_equal(B->copy_d2h(S, raw, o, 0, N * dsz(to[k])), AG_OK);
    assert_int_equal(B->stream_synchronize(S), AG_OK);
    for (int i = 0; i < N; i++) {
      if (to[k] == AG_I32) {
        int32_t w = xf[i] >= 2147483647.0f ? INT32_MAX : (int32_t)xf[i];
        assert_int_equal(((int32_t *)raw)[i], w);
      } else {
        uint16_t w = to[k] == AG_F16 ? ag_f32_to_f16(xf[i]) : ag_f32_to_bf16(xf[i]);
        if (((uint16_t *)raw)[i] != w) fail_msg("cast to %s element %d: got 0x%04x want 0x%04x", ag_dtype_name(to[k]), i, ((uint16_t *)raw)[i], w);
      }
    }
  }
  B->segment_free(0, x);
  B->segment_free(0, o);
}

/* a [4, 7] contiguous, b broadcast from [1, 7] (stride 0 on dim 0). */
static void test_binary(void **state) {
  NEED_DEVICE();
  enum { R = 4, C = 7, N = R * C };
  int64_t shape[2] = {R, C}, bstr[2] = {0, 1};
  void *a = dalloc(N * 4), *b = dalloc(N * 4), *o = dalloc(N * 4);
  const ag_dtype dts[4] = {AG_F32, AG_F16, AG_BF16, AG_I32};
  for (int di = 0; di < 4; di++) {
    ag_dtype dt = dts[di];
    for (int op = 0; op < AG_BINARY_COUNT; op++) {
      /* comparisons write bool (ABI 3) for every dtype */
      const ag_binary_info *bi = ag_binary_info_of(op);
      bool cmp = bi->compare;
      ag_dtype odt = cmp ? AG_BOOL : dt;
      bool want_sup = dt != AG_I32 || bi->ints == AG_OPT_INT;
      assert_int_equal(B->supports(0, AG_K_BINARY, op, dt), want_sup);
      if (!want_sup) continue;
      float ha[N], hb[C];
      const ag_ref_dom da = ag_ref_binary_dom(op, 0), db = ag_ref_binary_dom(op, 1);
      for (int i = 0; i < N; i++)
        ha[i] = dt == AG_I32 ? (float)(int)frand(-50, 50) : (float)ag_ref_draw(da, frand(0, 1), frand(0, 1));
      for (int i = 0; i < C; i++)
        hb[i] = dt == AG_I32 ? (float)(int)frand(-50, 50) : (float)ag_ref_draw(db, frand(0, 1), frand(0, 1));
      ha[3] = hb[3]; /* an equal pair for EQ */
      upload(a, 0, dt, ha, N);
      double s0, s1;
      ag_ref_binary_scalars(op, &s0, &s1);
      if (op == AG_B_ADD) s0 = -2;
      /* pass 0: b broadcast (strided kernel); pass 1: b repeated in memory
       * so every operand is contiguous (fast path) */
      for (int pass = 0; pass < 2; pass++) {
        float hbf[N];
        for (int i = 0; i < N; i++) hbf[i] = hb[i % C];
        upload(b, 0, dt, pass ? hbf : hb, pass ? N : C);
        ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_BINARY, .sub = op, .n_operands = 3, .s = {s0, s1}};
        c.o[0] = opnd(o, 0, odt, 2, shape, NULL);
        c.o[1] = opnd(a, 0, dt, 2, shape, NULL);
        c.o[2] = opnd(b, 0, dt, 2, shape, pass ? NULL : bstr);
        assert_int_equal(launch(&c), AG_OK);
        double got[N], want[N], ia[N], ib[C];
        for (int i = 0; i < N; i++) ia[i] = rnd(dt, ha[i]);
        for (int i = 0; i < C; i++) ib[i] = rnd(dt, hb[i]);
        for (int i = 0; i < N; i++) want[i] = rnd(odt, ag_ref_binary(op, ia[i], ib[i % C], s0, s1));
        download(o, 0, odt, got, N);
        char what[40];
        snprintf(what, sizeof what, "binary %d pass %d", op, pass);
        check(what, odt, got, want, N, 1);
      }
    }
  }
  B->segment_free(0, a);
  B->segment_free(0, b);
  B->segment_free(0, o);
}

static void test_where_fill_arange(void **state) {
  NEED_DEVICE();
  enum { N = 12 };
  int64_t shape[1] = {N};
  void *cnd = dalloc(64), *a = dalloc(64), *b = dalloc(64), *o = dalloc(64);
  const int32_t hc[N] = {1, 0, 5, 0, -1, 0, 0, 1, 1, 0, 2, 0};
  const int32_t ha[N] = {10, 11, 12, 13, 2147483647, 15, 16, 17, 18, 19, 20, 21};
  assert_int_equal(B->copy_h2d(S, cnd, 0, hc, sizeof hc, false), AG_OK);
  assert_int_equal(B->copy_h2d(S, a, 0, ha, sizeof ha, false), AG_OK);
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_WHERE, .n_operands = 4};
  c.o[0] = opnd(o, 0, AG_I32, 1, shape, NULL);
  c.o[1] = opnd(cnd, 0, AG_I32, 1, shape, NULL);
  c.o[2] = opnd(a, 0, AG_I32, 1, shape, NULL);
  int64_t zero[1] = {0};
  c.o[3] = opnd(a, 4, AG_I32, 1, shape, zero); /* b = broadcast ha[1] */
  assert_int_equal(launch(&c), AG_OK);
  int32_t got[N];
  assert_int_equal(B->copy_d2h(S, got, o, 0, sizeof got), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  for (int i = 0; i < N; i++) assert_int_equal(got[i], hc[i] ? ha[i] : ha[1]);
  /* fill through a strided view: every other element of o */
  float init[N];
  for (int i = 0; i < N; i++) init[i] = -1;
  upload(o, 0, AG_BF16, init, N);
  int64_t half[1] = {N / 2}, two[1] = {2};
  ag_kernel_call f = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {1.5}};
  f.o[0] = opnd(o, 0, AG_BF16, 1, half, two);
  assert_int_equal(launch(&f), AG_OK);
  double d[N];
  download(o, 0, AG_BF16, d, N);
  for (int i = 0; i < N; i++) assert_true(d[i] == (i % 2 ? -1 : 1.5));
  /* arange in f32 and i32 */
  ag_kernel_call r = {AG_KERNEL_CALL_HEADER, .op = AG_K_ARANGE, .n_operands = 1, .s = {-3, 0.25}};
  r.o[0] = opnd(o, 0, AG_F32, 1, shape, NULL);
  assert_int_equal(launch(&r), AG_OK);
  download(o, 0, AG_F32, d, N);
  for (int i = 0; i < N; i++) assert_true(d[i] == -3 + 0.25 * i);
  r.s[0] = 100000000;
  r.s[1] = 7;
  r.o[0].dtype = AG_I32;
  assert_int_equal(launch(&r), AG_OK);
  assert_int_equal(B->copy_d2h(S, got, o, 0, sizeof got), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  for (int i = 0; i < N; i++) assert_int_equal(got[i], 100000000 + 7 * i);
  B->segment_free(0, cnd);
  B->segment_free(0, a);
  B->segment_free(0, b);
  B->segment_free(0, o);
}

/* ---- reductions ---- */

static void test_reduce(void **state) {
  NEED_DEVICE();
  enum { OU = 3, RR = 300, MAXIN = 5 };
  void *x = dalloc(OU * RR * MAXIN * 4), *o = dalloc(OU * MAXIN * 4);
  const ag_dtype dts[4] = {AG_F32, AG_F16, AG_BF16, AG_I32};
  for (int di = 0; di < 4; di++)
    for (int inner = 1; inner <= MAXIN; inner += MAXIN - 1)
      for (int op = 0; op < AG_REDUCE_COUNT; op++) {
        ag_dtype dt = dts[di];
        int n = OU * RR * inner;
        float *h = malloc(n * sizeof(float));
        for (int i = 0; i < n; i++) h[i] = dt == AG_I32 ? (float)(int)frand(-1000, 1000) : frand(-1, 1);
        /* a tie for the maximum: argmax must return the first */
        for (int ou = 0; ou < OU; ou++)
          for (int in = 0; in < inner; in++) {
            h[(ou * RR + 17) * inner + in] = 5000;
            h[(ou * RR + 250) * inner + in] = 5000;
          }
        upload(x, 0, dt, h, n);
        double scale = op == AG_R_SUM ? (dt == AG_I32 ? 1 : 0.5) : 1;
        ag_dtype odt = op == AG_R_ARGMAX ? AG_I32 : dt;
        int64_t ishape[1] = {n}, oshape[1] = {OU * inner};
        ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_REDUCE, .sub = op, .n_operands = 2, .s = {scale},
                            .i = {OU, RR, inner}};
        c.o[0] = opnd(o, 0, odt, 1, oshape, NULL);
        c.o[1] = opnd(x, 0, dt, 1, ishape, NULL);
        assert_int_equal(launch(&c), AG_OK);
        double got[OU * MAXIN], want[OU * MAXIN];
        for (int ou = 0; ou < OU; ou++)
          for (int in = 0; in < inner; in++) {
            double acc = op == AG_R_SUM ? 0 : rnd(dt, h[ou * RR * inner + in]);
            int arg = 0;
            for (int j = 0; j < RR; j++) {
              double v = rnd(dt, h[(ou * RR + j) * inner + in]);
              if (op == AG_R_SUM) acc += v;
              else if (op == AG_R_MIN) acc = v < acc ? v : acc;
              else if (v > acc) {
                acc = v;
                arg = j;
              }
            }
            want[ou * inner + in] = op == AG_R_ARGMAX ? arg : rnd(odt, acc * scale);
          }
        download(o, 0, odt, got, OU * inner);
        char what[48];
        snprintf(what, sizeof what, "reduce %d inner %d", op, inner);
        /* sums of 300 terms in another order: allow a few more ulps */
        check(what, odt, got, want, OU * inner, op == AG_R_SUM ? 8 : 1);
        free(h);
      }
  B->segment_free(0, x);
  B->segment_free(0, o);
}

/* ---- GEMM ---- */

static void gemm_case(ag_dtype dt, int64_t Bn, int64_t M, int64_t N, int64_t K, bool a_col,
                      bool b_col, bool a_bcast, bool a_gap, double alpha, double beta) {
  /* a_gap: A's last-dim stride is 2 (neither layout CLBlast takes). */
  int64_t ab = a_bcast ? 1 : Bn;
  int64_t na = ab * M * K * (a_gap ? 2 : 1), nb = Bn * K * N, nc = Bn * M * N;
  float *ha = malloc(na * 4), *hb = malloc(nb * 4), *hc = malloc(nc * 4);
  for (int64_t i = 0; i < na; i++) ha[i] = frand(-1, 1);
  for (int64_t i = 0; i < nb; i++) hb[i] = frand(-1, 1);
  for (int64_t i = 0; i < nc; i++) hc[i] = beta == 0 ? NAN : frand(-1, 1);
  void *a = dalloc(na * 4 + 256), *b = dalloc(nb * 4), *o = dalloc(nc * 4);
  upload(a, 256, dt, ha, na);
  upload(b, 0, dt, hb, nb);
  upload(o, 0, dt, hc, nc);
  int64_t sa[3], sb[3];
  sa[0] = a_bcast ? 0 : M * K * (a_gap ? 2 : 1);
  if (a_gap) {
    sa[1] = K * 2;
    sa[2] = 2;
  } else if (a_col) {
    sa[1] = 1;
    sa[2] = M;
  } else {
    sa[1] = K;
    sa[2] = 1;
  }
  sb[0] = K * N;
  sb[1] = b_col ? 1 : N;
  sb[2] = b_col ? K : 1;
  int64_t shA[3] = {Bn, M, K}, shB[3] = {Bn, K, N}, shC[3] = {Bn, M, N};
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_MATMUL, .n_operands = 3, .s = {alpha, beta}};
  c.o[0] = opnd(o, 0, dt, 3, shC, NULL);
  c.o[1] = opnd(a, 256, dt, 3, shA, sa);
  c.o[2] = opnd(b, 0, dt, 3, shB, sb);
  assert_int_equal(launch(&c), AG_OK);
  double *got = malloc(nc * 8), *want = malloc(nc * 8);
  download(o, 0, dt, got, nc);
  for (int64_t bi = 0; bi < Bn; bi++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++)
          acc += rnd(dt, ha[(a_bcast ? 0 : bi) * sa[0] + i * sa[1] + k * sa[2]]) *
                 rnd(dt, hb[bi * sb[0] + k * sb[1] + j * sb[2]]);
        int64_t ci = (bi * M + i) * N + j;
        want[ci] = rnd(dt, alpha * acc + (beta != 0 ? beta * rnd(dt, hc[ci]) : 0));
      }
  char what[96];
  snprintf(what, sizeof what, "matmul B%lld M%lld N%lld K%lld acol%d bcol%d bcast%d gap%d",
           (long long)Bn, (long long)M, (long long)N, (long long)K, a_col, b_col, a_bcast, a_gap);
  check(what, dt, got, want, nc, 20);
  free(ha);
  free(hb);
  free(hc);
  free(got);
  free(want);
  B->segment_free(0, a);
  B->segment_free(0, b);
  B->segment_free(0, o);
}

static void test_matmul(void **state) {
  NEED_DEVICE();
  gemm_case(AG_F32, 1, 5, 7, 3, false, true, false, false, 1, 0);  /* NaN-filled output */
  gemm_case(AG_F32, 3, 9, 4, 13, true, false, true, false, 2, 0.5);
  gemm_case(AG_F32, 2, 6, 5, 4, false, false, false, true, 1, 0);
  gemm_case(AG_F16, 2, 4, 6, 5, false, true, false, false, 1, 0);
  gemm_case(AG_BF16, 2, 33, 17, 40, true, false, false, false, 1, 1);
  assert_false(B->supports(0, AG_K_MATMUL, 0, AG_I32));
  assert_false(B->supports(0, AG_K_MATMUL, 0, AG_F64));
}

/* ---- row kernels ---- */

static void test_softmax(void **state) {
  NEED_DEVICE();
  enum { R = 3, C = 300, N = R * C };
  int64_t shape[2] = {R, C};
  void *x = dalloc(N * 4), *y = dalloc(N * 4), *dy = dalloc(N * 4), *dx = dalloc(N * 4);
  for (int di = 0; di < 3; di++)
    for (int lg = 0; lg < 2; lg++) {
      ag_dtype dt = FLOATS[di];
      float hx[N], hg[N];
      for (int i = 0; i < N; i++) {
        hx[i] = frand(-4, 4);
        hg[i] = frand(-1, 1);
      }
      upload(x, 0, dt, hx, N);
      upload(dy, 0, dt, hg, N);
      ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_SOFTMAX, .sub = lg, .n_operands = 2, .i = {R, C}};
      c.o[0] = opnd(y, 0, dt, 2, shape, NULL);
      c.o[1] = opnd(x, 0, dt, 2, shape, NULL);
      assert_int_equal(launch(&c), AG_OK);
      ag_kernel_call bw = {AG_KERNEL_CALL_HEADER, .op = AG_K_SOFTMAX_BWD, .sub = lg, .n_operands = 3, .i = {R, C}};
      bw.o[0] = opnd(dx, 0, dt, 2, shape, NULL);
      bw.o[1] = opnd(dy, 0, dt, 2, shape, NULL);
      bw.o[2] = opnd(y, 0, dt, 2, shape, NULL);
      assert_int_equal(launch(&bw), AG_OK);
      double gy[N], gdx[N], want[N], wdx[N];
      download(y, 0, dt, gy, N);
      download(dx, 0, dt, gdx, N);
      for (int r = 0; r < R; r++) {
        double m = -INFINITY, s = 0, dot = 0;
        for (int j = 0; j < C; j++) m = fmax(m, rnd(dt, hx[r * C + j]));
        for (int j = 0; j < C; j++) s += exp(rnd(dt, hx[r * C + j]) - m);
        for (int j = 0; j < C; j++) {
          double v = rnd(dt, hx[r * C + j]) - m;
          want[r * C + j] = rnd(dt, lg ? v - log(s) : exp(v) / s);
        }
        /* the backward uses the stored y, as the core's autograd does */
        for (int j = 0; j < C; j++) dot += rnd(dt, hg[r * C + j]) * (lg ? 1 : gy[r * C + j]);
        for (int j = 0; j < C; j++) {
          double g = rnd(dt, hg[r * C + j]), yv = gy[r * C + j];
          wdx[r * C + j] = rnd(dt, lg ? g - exp(yv) * dot : yv * (g - dot));
        }
      }
      check(lg ? "log_softmax" : "softmax", dt, gy, want, N, 4);
      check(lg ? "log_softmax bwd" : "softmax bwd", dt, gdx, wdx, N, 50);
    }
  B->segment_free(0, x);
  B->segment_free(0, y);
  B->segment_free(0, dy);
  B->segment_free(0, dx);
}

static void test_cross_entropy(void **state) {
  NEED_DEVICE();
  enum { R = 4, C = 37, N = R * C };
  int64_t shape[2] = {R, C}, rows[1] = {R}, zero[1] = {0};
  void *x = dalloc(N * 4), *t = dalloc(64), *l = dalloc(64), *g = dalloc(64), *dl = dalloc(N * 4);
  int32_t ht[R] = {3, -100, 36, 0};
  float hx[N], hg = 0.25f;
  for (int i = 0; i < N; i++) hx[i] = frand(-3, 3);
  assert_int_equal(B->copy_h2d(S, g, 0, &hg, 4, false), AG_OK);
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FLOATS[di];
    upload(x, 0, dt, hx, N);
    assert_int_equal(B->copy_h2d(S, t, 0, ht, sizeof ht, false), AG_OK);
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_CROSS_ENTROPY, .n_operands = 3, .i = {R, C, -100}};
    c.o[0] = opnd(l, 0, AG_F32, 1, rows, NULL);
    c.o[1] = opnd(x, 0, dt, 2, shape, NULL);
    c.o[2] = opnd(t, 0, AG_I32, 1, rows, NULL);
    assert_int_equal(launch(&c), AG_OK);
    ag_kernel_call bw = {AG_KERNEL_CALL_HEADER, .op = AG_K_CROSS_ENTROPY_BWD, .n_operands = 4, .i = {R, C, -100}};
    bw.o[0] = opnd(dl, 0, dt, 2, shape, NULL);
    bw.o[1] = c.o[1];
    bw.o[2] = c.o[2];
    bw.o[3] = opnd(g, 0, AG_F32, 1, rows, zero);
    assert_int_equal(launch(&bw), AG_OK);
    double gl[R], gdl[N], wl[R], wdl[N];
    download(l, 0, AG_F32, gl, R);
    download(dl, 0, dt, gdl, N);
    for (int r = 0; r < R; r++) {
      double m = -INFINITY, s = 0;
      for (int j = 0; j < C; j++) m = fmax(m, rnd(dt, hx[r * C + j]));
      for (int j = 0; j < C; j++) s += exp(rnd(dt, hx[r * C + j]) - m);
      bool ign = ht[r] == -100;
      wl[r] = ign ? 0 : log(s) + m - rnd(dt, hx[r * C + ht[r]]);
      for (int j = 0; j < C; j++)
        wdl[r * C + j] = ign ? 0 : rnd(dt, (exp(rnd(dt, hx[r * C + j]) - m) / s - (j == ht[r])) * hg);
    }
    check("cross_entropy", AG_F32, gl, wl, R, 4);
    check("cross_entropy bwd", dt, gdl, wdl, N, 4);
    ag_kernel_error e;
    assert_int_equal(B->take_kernel_error(S, &e), AG_OK);
    assert_int_equal(e.code, 0);
  }
  /* an out-of-range target: NaN row, error word set once, then cleared */
  ht[1] = 37;
  assert_int_equal(B->copy_h2d(S, t, 0, ht, sizeof ht, false), AG_OK);
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_CROSS_ENTROPY, .n_operands = 3, .i = {R, C, -100}};
  c.o[0] = opnd(l, 0, AG_F32, 1, rows, NULL);
  c.o[1] = opnd(x, 0, AG_BF16, 2, shape, NULL);
  c.o[2] = opnd(t, 0, AG_I32, 1, rows, NULL);
  assert_int_equal(launch(&c), AG_OK);
  double gl[R];
  download(l, 0, AG_F32, gl, R);
  assert_true(isnan(gl[1]) && !isnan(gl[0]));
  ag_kernel_error e;
  assert_int_equal(B->take_kernel_error(S, &e), AG_OK);
  assert_int_equal(e.code, AG_ERR_INDEX);
  assert_int_equal(e.kop, AG_K_CROSS_ENTROPY);
  assert_int_equal(e.index, 37);
  assert_int_equal(e.limit, C);
  assert_int_equal(B->take_kernel_error(S, &e), AG_OK);
  assert_int_equal(e.code, 0);
  B->segment_free(0, x);
  B->segment_free(0, t);
  B->segment_free(0, l);
  B->segment_free(0, g);
  B->segment_free(0, dl);
}

static void test_layernorm(void **state) {
  NEED_DEVICE();
  enum { R = 3, D = 300, N = R * D };
  int64_t shape[2] = {R, D}, dshape[1] = {D}, rshape[1] = {R};
  void *x = dalloc(N * 4), *w = dalloc(D * 4), *b = dalloc(D * 4), *y = dalloc(N * 4);
  void *mean = dalloc(R * 4), *rstd = dalloc(R * 4), *dy = dalloc(N * 4), *dx = dalloc(N * 4);
  void *dw = dalloc(D * 4), *db = dalloc(D * 4);
  float hx[N], hw[D], hb[D], hg[N];
  for (int i = 0; i < N; i++) {
    hx[i] = frand(-2, 3);
    hg[i] = frand(-1, 1);
  }
  for (int i = 0; i < D; i++) {
    hw[i] = frand(0.5f, 1.5f);
    hb[i] = frand(-0.5f, 0.5f);
  }
  for (int di = 0; di < 3; di++)
    for (int affine = 0; affine < 2; affine++) {
      ag_dtype dt = FLOATS[di];
      upload(x, 0, dt, hx, N);
      upload(w, 0, dt, hw, D);
      upload(b, 0, dt, hb, D);
      upload(dy, 0, dt, hg, N);
      ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_LAYERNORM, .n_operands = 6, .s = {1e-5}, .i = {R, D}};
      c.o[0] = opnd(y, 0, dt, 2, shape, NULL);
      c.o[1] = opnd(x, 0, dt, 2, shape, NULL);
      c.o[2] = opnd(affine ? w : NULL, 0, dt, 1, dshape, NULL);
      c.o[3] = opnd(affine ? b : NULL, 0, dt, 1, dshape, NULL);
      c.o[4] = opnd(mean, 0, AG_F32, 1, rshape, NULL);
      c.o[5] = opnd(rstd, 0, AG_F32, 1, rshape, NULL);
      assert_int_equal(launch(&c), AG_OK);
      static ag_kmulti mt;
      mt.count = 2;
      mt.t[0].base = dw;
      mt.t[1].base = db;
      mt.t[0].dtype = mt.t[1].dtype = AG_F32;
      mt.t[0].numel = mt.t[1].numel = D;
      ag_kernel_call bw = {AG_KERNEL_CALL_HEADER, .op = AG_K_LAYERNORM_BWD, .n_operands = 6, .multi = &mt};
      bw.o[0] = opnd(dx, 0, dt, 2, shape, NULL);
      bw.o[1] = opnd(dy, 0, dt, 2, shape, NULL);
      bw.o[2] = c.o[1];
      bw.o[3] = c.o[4];
      bw.o[4] = c.o[5];
      bw.o[5] = c.o[2];
      assert_int_equal(launch(&bw), AG_OK);
      double gy[N], gdx[N], gdw[D], gdb[D], wy[N], wdx[N], wdw[D] = {0}, wdb[D] = {0};
      download(y, 0, dt, gy, N);
      download(dx, 0, dt, gdx, N);
      download(dw, 0, AG_F32, gdw, D);
      download(db, 0, AG_F32, gdb, D);
      for (int r = 0; r < R; r++) {
        double mu = 0, var = 0, s1 = 0, s2 = 0;
        for (int j = 0; j < D; j++) mu += rnd(dt, hx[r * D + j]) / D;
        for (int j = 0; j < D; j++) var += pow(rnd(dt, hx[r * D + j]) - mu, 2) / D;
        double rs = 1 / sqrt(var + 1e-5);
        for (int j = 0; j < D; j++) {
          double xh = (rnd(dt, hx[r * D + j]) - mu) * rs;
          double wj = affine ? rnd(dt, hw[j]) : 1, bj = affine ? rnd(dt, hb[j]) : 0;
          double gj = rnd(dt, hg[r * D + j]);
          wy[r * D + j] = rnd(dt, xh * wj + bj);
          s1 += gj * wj / D;
          s2 += gj * wj * xh / D;
          wdw[j] += gj * xh;
          wdb[j] += gj;
        }
        for (int j = 0; j < D; j++) {
          double xh = (rnd(dt, hx[r * D + j]) - mu) * rs;
          double gj = rnd(dt, hg[r * D + j]) * (affine ? rnd(dt, hw[j]) : 1);
          wdx[r * D + j] = rnd(dt, rs * (gj - s1 - xh * s2));
        }
      }
      check("layer_norm", dt, gy, wy, N, 8);
      check("layer_norm bwd dx", dt, gdx, wdx, N, 50);
      check("layer_norm bwd dw", AG_F32, gdw, wdw, D, 50);
      check("layer_norm bwd db", AG_F32, gdb, wdb, D, 50);
    }
  void *bufs[] = {x, w, b, y, mean, rstd, dy, dx, dw, db};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) B->segment_free(0, bufs[i]);
}

/* Batch norm kernels (AG_K_BN_STATS, AG_K_BN_APPLY), f32, both subs, on
 * shapes from a single element per plane to large planes and few channels,
 * operands at nonzero byte offsets, inputs of mean ~3 and (for the centred
 * variance) ~1000, against double sums. */
static bool bn_near(double got, double want, double mag, double tol) {
  return fabs(got - want) <= tol * fmax(mag, 1e-30);
}

static void bn_case(int64_t N, int64_t C, int64_t HW, float centre) {
  const int64_t n = N * C * HW;
  const size_t off = 64; /* bytes before each operand */
  int64_t shape[3] = {N, C, HW}, sshape[2] = {2, C}, cshape[2] = {4, C}, mshape[1] = {C};
  void *a = dalloc(off + (size_t)n * 4), *b = dalloc(off + (size_t)n * 4), *y = dalloc(off + (size_t)n * 4);
  void *st = dalloc(off + (size_t)C * 8), *mu = dalloc(off + (size_t)C * 4), *cf = dalloc(off + (size_t)C * 16);
  float *ha = malloc((size_t)n * 4), *hb = malloc((size_t)n * 4), *hmu = malloc((size_t)C * 4);
  float *hc = malloc((size_t)C * 16);
  double *got = malloc((size_t)(n > 2 * C ? n : 2 * C) * 8), *gst2 = malloc((size_t)C * 16);
  assert_non_null(ha);
  assert_non_null(hb);
  assert_non_null(hmu);
  assert_non_null(hc);
  assert_non_null(got);
  assert_non_null(gst2);
  for (int64_t i = 0; i < n; i++) {
    ha[i] = frand(centre - 1.0f, centre + 1.0f);
    hb[i] = frand(centre - 1.0f, centre + 1.0f);
  }
  for (int64_t ch = 0; ch < C; ch++) {
    hmu[ch] = frand(centre - 0.5f, centre + 0.5f);
    hc[ch] = frand(0.5f, 1.5f);          /* p */
    hc[C + ch] = frand(-1.0f, 1.0f);     /* q */
    hc[2 * C + ch] = frand(-0.5f, 0.5f); /* r */
    hc[3 * C + ch] = hmu[ch];            /* mu */
  }
  upload(a, off, AG_F32, ha, n);
  upload(b, off, AG_F32, hb, n);
  upload(mu, off, AG_F32, hmu, C);
  upload(cf, off, AG_F32, hc, 4 * C);
  const double tol = 1e-5;
  for (int sub = 0; sub < 2; sub++) {
    ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_BN_STATS, .sub = sub, .n_operands = sub ? 4 : 2,
                        .i = {N, C, HW}};
    c.o[0] = opnd(st, off, AG_F32, 2, sshape, NULL);
    c.o[1] = opnd(a, off, AG_F32, 3, shape, NULL);
    if (sub) {
      c.o[2] = opnd(b, off, AG_F32, 3, shape, NULL);
      c.o[3] = opnd(mu, off, AG_F32, 1, mshape, NULL);
    }
    assert_int_equal(launch(&c), AG_OK);
    download(st, off, AG_F32, got, 2 * C);
    assert_int_equal(launch(&c), AG_OK); /* no atomics: a rerun is bitwise equal */
    download(st, off, AG_F32, gst2, 2 * C);
    for (int64_t ch = 0; ch < C; ch++) {
      double s0 = 0, s1 = 0, m0 = 0, m1 = 0;
      for (int64_t q = 0; q < N; q++)
        for (int64_t i = 0; i < HW; i++) {
          const int64_t e = (q * C + ch) * HW + i;
          s0 += ha[e];
          m0 += fabs(ha[e]);
          if (sub) {
            s1 += (double)ha[e] * ((double)hb[e] - hmu[ch]);
            m1 += fabs((double)ha[e] * ((double)hb[e] - hmu[ch]));
          }
        }
      if (!sub) {
        const double mean = s0 / (double)(N * HW);
        for (int64_t q = 0; q < N; q++)
          for (int64_t i = 0; i < HW; i++) s1 += pow(ha[(q * C + ch) * HW + i] - mean, 2);
        s0 = mean;
        m0 /= (double)(N * HW);
        s1 /= (double)(N * HW);
        m1 = s1;
      }
      if (!bn_near(got[ch], s0, m0, tol) || !bn_near(got[C + ch], s1, m1, tol))
        fail_msg("bn_stats sub %d [%lld, %lld, %lld] channel %lld: got (%.9g, %.9g), want (%.9g, %.9g)", sub,
                 (long long)N, (long long)C, (long long)HW, (long long)ch, got[ch], got[C + ch], s0, s1);
      if (got[ch] != gst2[ch] || got[C + ch] != gst2[C + ch])
        fail_msg("bn_stats sub %d channel %lld: rerun differs", sub, (long long)ch);
    }
    ag_kernel_call ap = {AG_KERNEL_CALL_HEADER, .op = AG_K_BN_APPLY, .sub = sub, .n_operands = sub ? 4 : 3,
                         .i = {N, C, HW}};
    ap.o[0] = opnd(y, off, AG_F32, 3, shape, NULL);
    ap.o[1] = opnd(a, off, AG_F32, 3, shape, NULL);
    ap.o[2] = opnd(cf, off, AG_F32, 2, cshape, NULL);
    if (sub) ap.o[3] = opnd(b, off, AG_F32, 3, shape, NULL);
    assert_int_equal(launch(&ap), AG_OK);
    download(y, off, AG_F32, got, n);
    for (int64_t e = 0; e < n; e++) {
      const int64_t ch = (e / HW) % C;
      const double p = hc[ch], q = hc[C + ch], r = hc[2 * C + ch], m = hc[3 * C + ch];
      double want = ha[e] * p + q, mag = fabs(ha[e] * p) + fabs(q);
      if (sub) {
        want += (hb[e] - m) * r;
        mag += fabs((hb[e] - m) * r);
      }
      if (!bn_near(got[e], want, mag, 1e-6))
        fail_msg("bn_apply sub %d [%lld, %lld, %lld] element %lld: got %.9g, want %.9g", sub, (long long)N,
                 (long long)C, (long long)HW, (long long)e, got[e], want);
    }
  }
  free(ha);
  free(hb);
  free(hmu);
  free(hc);
  free(got);
  free(gst2);
  void *bufs[] = {a, b, y, st, mu, cf};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) B->segment_free(0, bufs[i]);
}

static void test_batchnorm(void **state) {
  NEED_DEVICE();
  static const int64_t shapes[][3] = {{2, 3, 5}, {3, 7, 33}, {32, 16, 784}, {64, 2, 4096}, {100, 5, 1}};
  for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) bn_case(shapes[k][0], shapes[k][1], shapes[k][2], 3.0f);
  /* mean 1000, spread 1: E[a^2] - mean^2 in f32 would be off by ~10% */
  bn_case(4, 3, 300, 1000.0f);
  for (int sub = 0; sub < 2; sub++) {
    assert_true(B->supports(0, AG_K_BN_STATS, sub, AG_F32));
    assert_true(B->supports(0, AG_K_BN_APPLY, sub, AG_F32));
    assert_false(B->supports(0, AG_K_BN_STATS, sub, AG_F16));
    assert_false(B->supports(0, AG_K_BN_APPLY, sub, AG_F16));
    assert_false(B->supports(0, AG_K_BN_STATS, sub, AG_F64));
    assert_false(B->supports(0, AG_K_BN_APPLY, sub, AG_F64));
  }
  assert_false(B->supports(0, AG_K_BN_STATS, 2, AG_F32));
  assert_false(B->supports(0, AG_K_BN_APPLY, 2, AG_F32));
}

static void test_embedding(void **state) {
  NEED_DEVICE();
  enum { V = 6, D = 5, N = 7 };
  int64_t tshape[2] = {V, D}, oshape[2] = {N, D}, ishape[1] = {N};
  void *tab = dalloc(V * D * 4), *ix = dalloc(N * 4), *o = dalloc(N * D * 4),
       *dt_ = dalloc(V * D * 4);
  int32_t hi[N] = {5, 0, 2, 2, 5, 1, 2};
  int32_t htab[V * D];
  for (int i = 0; i < V * D; i++) htab[i] = 16777217 + 1000 * i; /* not exact in f32 */
  assert_int_equal(B->copy_h2d(S, tab, 0, htab, sizeof htab, false), AG_OK);
  assert_int_equal(B->copy_h2d(S, ix, 0, hi, sizeof hi, false), AG_OK);
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_EMBEDDING, .n_operands = 3, .i = {N, D, V}};
  c.o[0] = opnd(o, 0, AG_I32, 2, oshape, NULL);
  c.o[1] = opnd(tab, 0, AG_I32, 2, tshape, NULL);
  c.o[2] = opnd(ix, 0, AG_I32, 1, ishape, NULL);
  assert_int_equal(launch(&c), AG_OK);
  int32_t got[N * D];
  assert_int_equal(B->copy_d2h(S, got, o, 0, sizeof got), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  for (int i = 0; i < N * D; i++) assert_int_equal(got[i], htab[hi[i / D] * D + i % D]);
  /* backward: duplicates accumulate into an f32 table (+=) */
  float hg[N * D], zeros[V * D];
  for (int i = 0; i < N * D; i++) hg[i] = frand(-1, 1);
  for (int i = 0; i < V * D; i++) zeros[i] = 0.5f;
  upload(o, 0, AG_BF16, hg, N * D);
  upload(dt_, 0, AG_F32, zeros, V * D);
  ag_kernel_call bw = {AG_KERNEL_CALL_HEADER, .op = AG_K_EMBEDDING_BWD, .n_operands = 3};
  bw.o[0] = opnd(dt_, 0, AG_F32, 2, tshape, NULL);
  bw.o[1] = opnd(o, 0, AG_BF16, 2, oshape, NULL);
  bw.o[2] = c.o[2];
  assert_int_equal(launch(&bw), AG_OK);
  double gt[V * D], wt[V * D];
  for (int i = 0; i < V * D; i++) wt[i] = 0.5;
  for (int n = 0; n < N; n++)
    for (int j = 0; j < D; j++) wt[hi[n] * D + j] += rnd(AG_BF16, hg[n * D + j]);
  download(dt_, 0, AG_F32, gt, V * D);
  check("embedding bwd", AG_F32, gt, wt, V * D, 1);
  /* out of range: zero row and AG_ERR_INDEX */
  hi[3] = V;
  assert_int_equal(B->copy_h2d(S, ix, 0, hi, sizeof hi, false), AG_OK);
  assert_int_equal(launch(&c), AG_OK);
  assert_int_equal(B->copy_d2h(S, got, o, 0, sizeof got), AG_OK);
  assert_int_equal(B->stream_synchronize(S), AG_OK);
  for (int j = 0; j < D; j++) assert_int_equal(got[3 * D + j], 0);
  ag_kernel_error e;
  assert_int_equal(B->take_kernel_error(S, &e), AG_OK);
  assert_int_equal(e.code, AG_ERR_INDEX);
  assert_int_equal(e.kop, AG_K_EMBEDDING);
  assert_int_equal(e.index, V);
  assert_int_equal(e.limit, V);
  B->segment_free(0, tab);
  B->segment_free(0, ix);
  B->segment_free(0, o);
  B->segment_free(0, dt_);
}

/* ---- random ---- */

static void philox_ref(uint64_t ctr, uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

static void test_random(void **state) {
  NEED_DEVICE();
  /* Random123's known answer for counter 0, key 0. */
  uint32_t kat[4];
  philox_ref(0, 0, kat);
  assert_true(kat[0] == 0x6627e8d5u && kat[1] == 0xe169c58du && kat[2] == 0xbc57ac4cu &&
              kat[3] == 0x9b00dbd8u);
  uint32_t core[4];
  ag_philox4x32(12345, 0xfeedfacecafebeefull, core);
  philox_ref(12345, 0xfeedfacecafebeefull, kat);
  assert_memory_equal(core, kat, sizeof kat);

  enum { N = 1001 };
  const uint64_t seed = 0x123456789abcdefull, off = 77;
  int64_t shape[1] = {N};
  void *o = dalloc(N * 4), *x = dalloc(N * 4), *m = dalloc(N * 4);
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_RAND_UNIFORM, .n_operands = 1, .s = {0, 1}, .seed = seed,
                      .offset = off};
  c.o[0] = opnd(o, 0, AG_F32, 1, shape, NULL);
  assert_int_equal(launch(&c), AG_OK);
  double got[N];
  download(o, 0, AG_F32, got, N);
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    philox_ref(off + i / 4, seed, r);
    float u = (float)(r[i % 4] >> 8) * 0x1p-24f;
    if (got[i] != u) fail_msg("uniform element %d: got %.9g want %.9g", i, got[i], u);
  }
  c.op = AG_K_RAND_NORMAL;
  c.s[0] = 1;
  c.s[1] = 2;
  assert_int_equal(launch(&c), AG_OK);
  download(o, 0, AG_F32, got, N);
  double want[N], mean = 0;
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    philox_ref(off + i / 2, seed, r);
    float u1 = (float)((r[2 * (i % 2)] >> 8) + 1) * 0x1p-24f;
    float u2 = (float)(r[2 * (i % 2) + 1] >> 8) * 0x1p-24f;
    want[i] = sqrtf(-2 * logf(u1)) * cosf(6.2831853071795865f * u2) * 2 + 1;
    mean += got[i] / N;
  }
  check("randn", AG_F32, got, want, N, 20);
  assert_true(fabs(mean - 1) < 0.3);
  /* dropout: keep iff uniform >= p, scale 1/(1-p), mask written */
  float hx[N];
  for (int i = 0; i < N; i++) hx[i] = frand(-1, 1);
  upload(x, 0, AG_F16, hx, N);
  ag_kernel_call d = {AG_KERNEL_CALL_HEADER, .op = AG_K_DROPOUT, .n_operands = 3, .s = {0.3}, .seed = seed,
                      .offset = off};
  d.o[0] = opnd(o, 0, AG_F16, 1, shape, NULL);
  d.o[1] = opnd(x, 0, AG_F16, 1, shape, NULL);
  d.o[2] = opnd(m, 0, AG_F16, 1, shape, NULL);
  assert_int_equal(launch(&d), AG_OK);
  double gm[N], wm[N], wo[N];
  download(o, 0, AG_F16, got, N);
  download(m, 0, AG_F16, gm, N);
  int kept = 0;
  for (int i = 0; i < N; i++) {
    uint32_t r[4];
    philox_ref(off + i / 4, seed, r);
    float u = (float)(r[i % 4] >> 8) * 0x1p-24f;
    double keep = u >= 0.3f ? 1 / (1 - 0.3) : 0;
    kept += keep != 0;
    wm[i] = rnd(AG_F16, keep);
    wo[i] = rnd(AG_F16, rnd(AG_F16, hx[i]) * keep);
  }
  check("dropout mask", AG_F16, gm, wm, N, 1);
  check("dropout out", AG_F16, got, wo, N, 1);
  assert_true(kept > N / 2 && kept < N);
  B->segment_free(0, o);
  B->segment_free(0, x);
  B->segment_free(0, m);
}

/* ---- optimizers and mixed precision ---- */

static void test_optimizers(void **state) {
  NEED_DEVICE();
  enum { N0 = 100, N1 = 37, N = N0 + N1 };
  void *p = dalloc(N * 4), *g = dalloc(N * 4), *m = dalloc(N * 4), *v = dalloc(N * 4),
       *sc = dalloc(8);
  float hp[N], hg[N], hm[N], hv[N], hs[2] = {0.5f, 0};
  for (int i = 0; i < N; i++) {
    hp[i] = frand(-1, 1);
    hg[i] = frand(-1, 1);
    hm[i] = frand(-0.1f, 0.1f);
    hv[i] = frand(0, 0.01f);
  }
  upload(p, 0, AG_F32, hp, N);
  upload(g, 0, AG_F32, hg, N);
  upload(m, 0, AG_F32, hm, N);
  upload(v, 0, AG_F32, hv, N);
  upload(sc, 0, AG_F32, hs, 2);
  static ag_kmulti mt;
  mt.count = 8;
  void *bases[4] = {p, g, m, v};
  for (int k = 0; k < 8; k++) {
    mt.t[k].base = bases[k % 4];
    mt.t[k].offset = k < 4 ? 0 : N0 * 4;
    mt.t[k].dtype = AG_F32;
    mt.t[k].numel = k < 4 ? N0 : N1;
  }
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, bc1 = 0.19, bc2 = 0.002;
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_ADAMW, .n_operands = 2, .multi = &mt,
                      .s = {lr, b1, b2, eps, wd, bc1, bc2}};
  c.o[0] = opnd(sc, 0, AG_F32, 0, NULL, NULL);
  c.o[1] = opnd(sc, 4, AG_F32, 0, NULL, NULL);
  assert_int_equal(launch(&c), AG_OK);
  double gp[N], gmm[N], wp[N], wmm[N];
  download(p, 0, AG_F32, gp, N);
  download(m, 0, AG_F32, gmm, N);
  for (int i = 0; i < N; i++) {
    double gi = hg[i] * 0.5, mi = b1 * hm[i] + (1 - b1) * gi, vi = b2 * hv[i] + (1 - b2) * gi * gi;
    wmm[i] = mi;
    wp[i] = hp[i] * (1 - lr * wd) - lr / bc1 * mi / (sqrt(vi) / sqrt(bc2) + eps);
  }
  check("adamw m", AG_F32, gmm, wmm, N, 4);
  check("adamw p", AG_F32, gp, wp, N, 20);
  /* found_inf set: the step is skipped */
  hs[1] = 1;
  upload(sc, 0, AG_F32, hs, 2);
  assert_int_equal(launch(&c), AG_OK);
  double again[N];
  download(p, 0, AG_F32, again, N);
  assert_memory_equal(again, gp, sizeof gp);
  /* SGD with Nesterov momentum (first step), then without a buffer */
  upload(p, 0, AG_F32, hp, N);
  mt.count = 3;
  for (int k = 0; k < 3; k++) {
    mt.t[k].base = bases[k];
    mt.t[k].offset = 0;
    mt.t[k].numel = N;
  }
  ag_kernel_call s = {AG_KERNEL_CALL_HEADER, .op = AG_K_SGD, .n_operands = 2, .multi = &mt,
                      .s = {0.1, 0.9, 0.0, 0.01, 1, 1}};
  s.o[0] = opnd(NULL, 0, AG_F32, 0, NULL, NULL);
  s.o[1] = opnd(NULL, 0, AG_F32, 0, NULL, NULL);
  assert_int_equal(launch(&s), AG_OK);
  mt.t[2].base = NULL;
  s.s[4] = 0;
  assert_int_equal(launch(&s), AG_OK);
  download(p, 0, AG_F32, gp, N);
  download(m, 0, AG_F32, gmm, N);
  for (int i = 0; i < N; i++) {
    double d = hg[i] + 0.01 * hp[i];
    double p1 = hp[i] - 0.1 * (d + 0.9 * d);
    wmm[i] = d;
    wp[i] = p1 - 0.1 * (hg[i] + 0.01 * p1);
  }
  check("sgd buffer", AG_F32, gmm, wmm, N, 4);
  check("sgd p", AG_F32, gp, wp, N, 4);
  B->segment_free(0, p);
  B->segment_free(0, g);
  B->segment_free(0, m);
  B->segment_free(0, v);
  B->segment_free(0, sc);
}

static void test_nonfinite_sumsq(void **state) {
  NEED_DEVICE();
  enum { N = 50 };
  void *a = dalloc(N * 4), *b = dalloc(N * 4), *sc = dalloc(16);
  float ha[N], hb[N], hs[3] = {0, 0.25f, 0};
  for (int i = 0; i < N; i++) {
    ha[i] = frand(-2, 2);
    hb[i] = frand(-2, 2);
  }
  upload(a, 0, AG_F16, ha, N);
  upload(b, 0, AG_F32, hb, N);
  upload(sc, 0, AG_F32, hs, 3);
  static ag_kmulti mt;
  mt.count = 2;
  mt.t[0].base = a;
  mt.t[0].dtype = AG_F16;
  mt.t[0].numel = N;
  mt.t[1].base = b;
  mt.t[1].dtype = AG_F32;
  mt.t[1].numel = N;
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_NONFINITE_CHECK, .n_operands = 2, .multi = &mt};
  c.o[0] = opnd(sc, 0, AG_F32, 0, NULL, NULL);
  c.o[1] = opnd(sc, 4, AG_F32, 0, NULL, NULL);
  assert_int_equal(launch(&c), AG_OK);
  double flag[1], ga[N], wa[N];
  download(sc, 0, AG_F32, flag, 1);
  assert_true(flag[0] == 0);
  download(a, 0, AG_F16, ga, N);
  for (int i = 0; i < N; i++) wa[i] = rnd(AG_F16, rnd(AG_F16, ha[i]) * 0.25);
  check("unscale", AG_F16, ga, wa, N, 1);
  /* sum of squares over both (after the unscale) */
  ag_kernel_call q = {AG_KERNEL_CALL_HEADER, .op = AG_K_SUMSQ, .n_operands = 1, .multi = &mt};
  q.o[0] = opnd(sc, 8, AG_F32, 0, NULL, NULL);
  assert_int_equal(launch(&q), AG_OK);
  double ss[1], want = 0;
  for (int i = 0; i < N; i++) want += ga[i] * ga[i] + (double)rnd(AG_F32, hb[i] * 0.25) * rnd(AG_F32, hb[i] * 0.25);
  download(sc, 8, AG_F32, ss, 1);
  check("sumsq", AG_F32, ss, &want, 1, 8);
  /* an inf sets the flag */
  hb[7] = INFINITY;
  upload(b, 0, AG_F32, hb, N);
  assert_int_equal(launch(&c), AG_OK);
  download(sc, 0, AG_F32, flag, 1);
  assert_true(flag[0] == 1);
  B->segment_free(0, a);
  B->segment_free(0, b);
  B->segment_free(0, sc);
}

static void test_supports(void **state) {
  NEED_DEVICE();
  /* f64: the kernels of f64.cl (elementwise, reductions, var, cumsum,
   * arange, softmax, gather, embedding), the f64 lines of reduce2.cl
   * (logsumexp, norms), of resample.cl (group norm, interpolate) and of
   * sort.cl, scatter.cl and pad.cl, all or none (cl_khr_fp64) */
  bool f64 = B->supports(0, AG_K_FILL, 0, AG_F64);
  for (int op = 0; op < AG_KOP_COUNT; op++) {
    bool elementwise = op == AG_K_FILL || op == AG_K_WHERE || op == AG_K_UNARY || op == AG_K_BINARY ||
                       op == AG_K_REDUCE || op == AG_K_ARANGE || op == AG_K_VAR || op == AG_K_CUMSUM ||
                       op == AG_K_SOFTMAX || op == AG_K_SOFTMAX_BWD || op == AG_K_GATHER || op == AG_K_GATHER_BWD ||
                       op == AG_K_EMBEDDING || op == AG_K_EMBEDDING_BWD || op == AG_K_LOGSUMEXP || op == AG_K_NORM ||
                       op == AG_K_GROUP_NORM || op == AG_K_GROUP_NORM_BWD || op == AG_K_INTERPOLATE ||
                       op == AG_K_INTERPOLATE_BWD || op == AG_K_SORT || op == AG_K_SCATTER_ADD || op == AG_K_PAD ||
                       op == AG_K_PAD_BWD;
    assert_int_equal(B->supports(0, op, 0, AG_F64), elementwise && f64);
  }
  assert_true(B->supports(0, AG_K_REDUCE, AG_R_ARGMAX, AG_I32));
  assert_false(B->supports(0, AG_K_SOFTMAX, 0, AG_I32));
  assert_false(B->supports(0, AG_K_ADAMW, 0, AG_F16));
  assert_false(B->supports(0, AG_K_UNARY, AG_UNARY_COUNT, AG_F32));
}

/* The program binary lands in $AG_CACHE_DIR; a corrupt cache file is
 * rebuilt from source and replaced. Runs last: it re-initialises the module. */
static void test_program_cache(void **state) {
  NEED_DEVICE();
  if (!cache_dir[0]) skip();
  char path[600] = "";
  DIR *d = opendir(cache_dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strncmp(e->d_name, "opencl-", 7) == 0 && strstr(e->d_name, ".bin"))
      snprintf(path, sizeof path, "%s/%s", cache_dir, e->d_name);
  if (d) closedir(d);
  assert_true(path[0] != 0);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("not a program binary", f);
  fclose(f);
  B->stream_destroy(S);
  B->shutdown();
  int n = 0;
  char reason[128];
  assert_int_equal(B->init(&n, reason, sizeof reason), AG_OK);
  assert_int_equal(B->stream_create(0, &S), AG_OK);
  void *o = dalloc(64);
  int64_t shape[1] = {16};
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {2}};
  c.o[0] = opnd(o, 0, AG_F32, 1, shape, NULL);
  assert_int_equal(launch(&c), AG_OK);
  double got[16];
  download(o, 0, AG_F32, got, 16);
  for (int i = 0; i < 16; i++) assert_true(got[i] == 2);
  B->segment_free(0, o);
  f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  assert_true(ftell(f) > 100);
  fclose(f);
}

/* A program that does not compile: AG_ERR_BACKEND with the compiler log,
 * on every launch, without crashing. Re-initialises the module. */
static void test_build_failure(void **state) {
  NEED_DEVICE();
  setenv("AG_OPENCL_OPTIONS", "-DAG_WG=(", 1);
  B->stream_destroy(S);
  B->shutdown();
  int n = 0;
  char reason[128];
  assert_int_equal(B->init(&n, reason, sizeof reason), AG_OK);
  assert_int_equal(B->stream_create(0, &S), AG_OK);
  void *o = dalloc(64);
  int64_t shape[1] = {16};
  ag_kernel_call c = {AG_KERNEL_CALL_HEADER, .op = AG_K_FILL, .n_operands = 1, .s = {2}};
  c.o[0] = opnd(o, 0, AG_F32, 1, shape, NULL);
  for (int k = 0; k < 2; k++) {
    ag_error_clear();
    assert_int_equal(B->launch(S, &c), AG_ERR_BACKEND);
    assert_non_null(strstr(ag_last_error(), "building the anygrad kernels"));
    assert_true(strlen(ag_last_error()) > 80); /* the log is included */
    if (k == 0) print_message("%s\n", ag_last_error());
  }
  unsetenv("AG_OPENCL_OPTIONS");
  B->segment_free(0, o);
  B->stream_destroy(S);
  B->shutdown();
  assert_int_equal(B->init(&n, reason, sizeof reason), AG_OK);
  assert_int_equal(B->stream_create(0, &S), AG_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_props_memory),    cmocka_unit_test(test_copies),
      cmocka_unit_test(test_streams_events),  cmocka_unit_test(test_unary),
      cmocka_unit_test(test_unary_i32_and_casts), cmocka_unit_test(test_binary),
      cmocka_unit_test(test_where_fill_arange), cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_matmul),          cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_cross_entropy),   cmocka_unit_test(test_layernorm),
      cmocka_unit_test(test_batchnorm),
      cmocka_unit_test(test_embedding),       cmocka_unit_test(test_random),
      cmocka_unit_test(test_optimizers),      cmocka_unit_test(test_nonfinite_sumsq),
      cmocka_unit_test(test_supports),        cmocka_unit_test(test_program_cache),
      cmocka_unit_test(test_build_failure),
  };
  return cmocka_run_group_tests_name("opencl", tests, setup, teardown);
}
