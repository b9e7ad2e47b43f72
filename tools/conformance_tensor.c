/* Conformance cases of creation (full, arange, rand, randn), casts, views
 * and copies (contiguous, copy_, to_device) against host references. */
#include "conformance_internal.h"

/* ---- creation ---- */

void ag__conf_op_full(ctx *c) {
  static const struct {
    const char *name;
    int n;
    int64_t s[2];
    double v;
  } F[] = {
      {"[3,5] = 0.1", 2, {3, 5}, 0.1},       {"[1000] = -3.5", 1, {1000}, -3.5},
      {"scalar = 7", 0, {0}, 7},             {"[2,3] = 1e5", 2, {2, 3}, 1e5},
      {"empty [0,3]", 2, {0, 3}, 1},
  };
  for (size_t k = 0; k < sizeof F / sizeof F[0]; k++) {
    ag__conf_case_begin(c, F[k].name);
    int64_t n = ag__conf_prod(F[k].n, F[k].s);
    double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) ref[i] = F[k].v;
    guard g;
    ag__conf_guard_begin(c, &g, c->dt, n);
    ag_tensor *o = ag_full(c->dev, c->dt, F[k].n, F[k].s, F[k].v);
    if (!o) ag__conf_on_null(c, "ag_full");
    else if (ref) {
      ag__conf_check(c, o, F[k].n, F[k].s, c->dt, ref, EXACT);
      ag__conf_guard_end(c, &g);
    }
    ag__conf_case_end(c);
  }
  ag__conf_case_begin(c, "zeros/ones [4,4]");
  int64_t s[2] = {4, 4};
  double z[16] = {0}, one[16];
  for (int i = 0; i < 16; i++) one[i] = 1;
  ag_tensor *a = ag_zeros(c->dev, c->dt, 2, s), *b = ag_ones(c->dev, c->dt, 2, s);
  if (!a || !b) ag__conf_on_null(c, "ag_zeros/ag_ones");
  else {
    ag__conf_check(c, a, 2, s, c->dt, z, EXACT);
    ag__conf_check(c, b, 2, s, c->dt, one, EXACT);
  }
  ag__conf_case_end(c);
}

void ag__conf_op_arange(ctx *c) {
  static const struct {
    const char *name;
    double a, b, st;
    bool isint;
  } A[] = {
      {"0.5..10 step 0.75", 0.5, 10, 0.75, false},
      {"5..-5 step -1.5", 5, -5, -1.5, false},
      {"0..10 step 3", 0, 10, 3, true},
      {"0..1000 step 1", 0, 1000, 1, true},
  };
  for (size_t k = 0; k < sizeof A / sizeof A[0]; k++) {
    if (ag_dtype_is_int(c->dt) && !A[k].isint) continue;
    if (c->dt == AG_U8 && A[k].b > 255) continue;
    ag__conf_case_begin(c, A[k].name);
    int64_t n = (int64_t)ceil((A[k].b - A[k].a) / A[k].st);
    double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) ref[i] = A[k].a + (double)i * A[k].st;
    ag_tensor *o = ag_arange(c->dev, c->dt, A[k].a, A[k].b, A[k].st);
    if (!o) ag__conf_on_null(c, "ag_arange");
    else if (ref) ag__conf_check(c, o, 1, &n, c->dt, ref, EXACT);
    ag__conf_case_end(c);
  }
}

static void run_random(ctx *c, bool normal) {
  ag__conf_case_begin(c, normal ? "randn [256,256] mean 0.5 std 2" : "rand [256,256] in [-1,3)");
  int64_t s[2] = {256, 256}, n = 65536;
  double lo = normal ? 0.5 : -1, hi = normal ? 2 : 3;
  ag_generator *g = ag_generator_create(c->seed ^ 0x4A4Dull);
  uint64_t gs, go, gs2, go2;
  ag_generator_get_state(g, &gs, &go);
  ag_tensor *o = normal ? ag_randn(c->dev, c->dt, 2, s, lo, hi, g) : ag_rand(c->dev, c->dt, 2, s, lo, hi, g);
  ag_generator_get_state(g, &gs2, &go2);
  double *v = o ? ag__conf_rd(c, o) : NULL;
  if (!o) ag__conf_on_null(c, normal ? "ag_randn" : "ag_rand");
  else if (v) {
    /* the documented Philox mapping (tensor.h), rounded like the device */
    double *ref = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
    for (int64_t i = 0; ref && i < n; i++) {
      if (!normal) {
        double u = ag__conf_philox_uniform(gs, go, i);
        ref[i] = c->dt == AG_F64 ? u * (hi - lo) + lo : (double)((float)u * (float)(hi - lo) + (float)lo);
      } else {
        uint32_t r[4];
        ag_conf_philox(go + (uint64_t)i / 2, gs, r);
        double u1 = (double)((r[2 * (i % 2)] >> 8) + 1) * 0x1p-24, u2 = (double)(r[2 * (i % 2) + 1] >> 8) * 0x1p-24;
        ref[i] = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2) * hi + lo;
      }
    }
    double m = 0, m2 = 0, in1 = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
      m += v[i];
      mn = fmin(mn, v[i]);
      mx = fmax(mx, v[i]);
    }
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) {
      m2 += (v[i] - m) * (v[i] - m);
      in1 += fabs(v[i] - lo) < hi;
    }
    double sd = sqrt(m2 / (double)(n - 1));
    double want_m = normal ? lo : (lo + hi) / 2, want_sd = normal ? hi : (hi - lo) / sqrt(12);
    if (fabs(m - want_m) > 5 * want_sd / sqrt((double)n))
      ag__conf_case_fail(c, "mean %.5f, want %.5f", m, want_m);
    else if (fabs(sd / want_sd - 1) > 0.03)
      ag__conf_case_fail(c, "std %.5f, want %.5f", sd, want_sd);
    else if (normal && fabs(in1 / (double)n - 0.682689) > 0.01)
      ag__conf_case_fail(c, "fraction within one std %.4f, want 0.6827", in1 / (double)n);
    else if (!normal && (mn < lo || mx > hi || (c->dt != AG_F16 && c->dt != AG_BF16 && mx >= hi)))
      ag__conf_case_fail(c, "values outside [%g, %g): min %g max %g", lo, hi, mn, mx);
    else if (go2 == go)
      ag__conf_case_fail(c, "the generator offset did not advance");
    else if (ref)
      ag__conf_check(c, o, 2, s, c->dt, ref, normal && c->dt == AG_F32 ? 1e-9 : DEF);
    if (c->cres == AG_CONF_PASS) { /* same state, same bits */
      ag_generator_set_state(g, gs, go);
      ag_tensor *o2 = normal ? ag_randn(c->dev, c->dt, 2, s, lo, hi, g) : ag_rand(c->dev, c->dt, 2, s, lo, hi, g);
      if (!o2) ag__conf_on_null(c, "second draw");
      else ag__conf_check(c, o2, 2, s, c->dt, v, EXACT);
    }
  }
  ag_generator_free(g);
  ag__conf_case_end(c);
}

void ag__conf_op_rand(ctx *c) { run_random(c, false); }
void ag__conf_op_randn(ctx *c) { run_random(c, true); }

/* ---- casts, views, copies ---- */

void ag__conf_op_cast(ctx *c) {
  /* ties and edges of f16/bf16 rounding, exact in f32/f64 */
  static const double special[] = {1 + 0x1p-11, 1 + 3 * 0x1p-11, 2049, 2051, 257, 259, 1 + 0x1p-8,
                                   1 + 3 * 0x1p-8, 65504, 65519, 65520, 1e-6, 6e-8, -0.0, 0x1p-126,
                                   3e38, INFINITY, -INFINITY, NAN, -2.5, 2.5, 70000, -131073};
  const int ns = (int)(sizeof special / sizeof special[0]);
  for (int dst = 0; dst < AG_DTYPE_COUNT; dst++) {
    char name[64];
    snprintf(name, sizeof name, "to %s", ag_dtype_name((ag_dtype)dst));
    ag__conf_case_begin(c, name);
    int64_t s[2] = {12, 10};
    hbuf *h;
    double lo = c->dt == AG_I32 || c->dt == AG_I64 ? -70000 : -300, hi = -lo;
    if (c->dt == AG_U8) lo = 0, hi = 255;
    if (c->dt == AG_BOOL) lo = 0, hi = 1;
    /* between integer dtypes a cast keeps the low bits; from floats it
     * truncates and saturates (ag_conf_round) */
    const bool int2int = ag_dtype_is_int(c->dt) && ag_dtype_is_int((ag_dtype)dst);
    ag_tensor *a = ag__conf_mk(c, &h, L_T, 2, s, G_UNI, lo, hi);
    if (a) {
      /* overwrite the first values with the special ones the source can hold */
      double *vals = ag__conf_cx_alloc(c, 120 * sizeof(double));
      for (int i = 0; i < 120; i++) vals[i] = h->v[i];
      for (int i = 0; !ag_dtype_is_int(c->dt) && i < ns; i++) {
        double v = ag_conf_round(c->dt, special[i]);
        /* undefined in C and on devices */
        if ((dst == AG_I32 || dst == AG_I64 || dst == AG_U8) && (isnan(v) || fabs(v) > 2e9)) continue;
        vals[i] = v;
      }
      ag_tensor *src = ag__conf_mk_vals(c, c->dt, &h, 2, s, vals);
      ag_tensor *o = src ? ag_cast(src, (ag_dtype)dst) : NULL;
      double ref[120];
      for (int i = 0; i < 120; i++)
        ref[i] = int2int ? ag__conf_wrap_int((ag_dtype)dst, h->v[i]) : ag_conf_round((ag_dtype)dst, h->v[i]);
      if (!o) ag__conf_on_null(c, "ag_cast");
      else ag__conf_check(c, o, 2, s, (ag_dtype)dst, ref, EXACT);
      /* and from a non-contiguous view */
      ag_tensor *o2 = ag_cast(a, (ag_dtype)dst);
      if (!o2) ag__conf_on_null(c, "ag_cast (view)");
      else {
        double *rv = ag__conf_rd(c, a);
        for (int i = 0; rv && i < 120; i++)
          rv[i] = int2int ? ag__conf_wrap_int((ag_dtype)dst, rv[i]) : ag_conf_round((ag_dtype)dst, rv[i]);
        if (rv) ag__conf_check(c, o2, 2, s, (ag_dtype)dst, rv, EXACT);
      }
    }
    ag__conf_case_end(c);
  }
}

/* A host view over a contiguous base, mirroring the device's view ops. */
typedef struct hview {
  int ndim;
  int64_t shape[AG_MAX_DIMS], strides[AG_MAX_DIMS], off;
} hview;

static hview hv_of(const hbuf *h) {
  hview v = {h->ndim, {0}, {0}, 0};
  memcpy(v.shape, h->shape, sizeof v.shape);
  ag__conf_cstrides(h->ndim, h->shape, v.strides);
  return v;
}

static double *hv_gather(ctx *c, const hview *v, const double *base) {
  int64_t n = ag__conf_prod(v->ndim, v->shape), idx[AG_MAX_DIMS];
  double *o = ag__conf_cx_alloc(c, (size_t)n * sizeof(double));
  for (int64_t i = 0; o && i < n; i++) {
    ag__conf_unravel(i, v->ndim, v->shape, idx);
    int64_t p = v->off;
    for (int d = 0; d < v->ndim; d++) p += idx[d] * v->strides[d];
    o[i] = base[p];
  }
  return o;
}

static void hv_slice(hview *v, int d, int64_t a, int64_t b, int64_t st) {
  if (a < 0) a += v->shape[d];
  if (b < 0) b += v->shape[d];
  v->off += a * v->strides[d];
  v->shape[d] = (b - a + st - 1) / st;
  v->strides[d] *= st;
}

void ag__conf_op_contiguous(ctx *c) {
  for (int k = 0; k < 6; k++) {
    static const char *names[] = {"transpose [5,7]",           "permute [2,3,4] (2,0,1)",
                                  "slice step 3, negative ends", "expand [1,6] -> [4,6]",
                                  "reshape of a transposed view", "unsqueeze/squeeze/flatten of a slice"};
    ag__conf_case_begin(c, names[k]);
    int64_t s0[3][3] = {{5, 7}, {2, 3, 4}, {10, 6}};
    int nd = k == 1 ? 3 : 2;
    int64_t *s = k < 3 ? s0[k] : k == 3 ? (int64_t[]){1, 6} : k == 4 ? (int64_t[]){4, 6} : (int64_t[]){10, 6};
    hbuf *h;
    ag_tensor *t = ag__conf_mk(c, &h, L_C, nd, s, G_UNI, -9, 9);
    if (!t) {
      ag__conf_case_end(c);
      continue;
    }
    hview v = hv_of(h);
    ag_tensor *w = NULL;
    int64_t tmp;
    switch (k) {
      case 0:
        w = ag_transpose(t, 0, 1);
        tmp = v.shape[0], v.shape[0] = v.shape[1], v.shape[1] = tmp;
        tmp = v.strides[0], v.strides[0] = v.strides[1], v.strides[1] = tmp;
        break;
      case 1: {
        static const int perm[3] = {2, 0, 1};
        w = ag_permute(t, perm);
        hview u = v;
        for (int d = 0; d < 3; d++) u.shape[d] = v.shape[perm[d]], u.strides[d] = v.strides[perm[d]];
        v = u;
        break;
      }
      case 2: {
        ag_tensor *w1 = ag_slice(t, 0, 1, 9, 3);
        w = w1 ? ag_slice(w1, 1, -4, -1, 1) : NULL;
        hv_slice(&v, 0, 1, 9, 3);
        hv_slice(&v, 1, -4, -1, 1);
        break;
      }
      case 3: {
        int64_t es[2] = {4, 6};
        w = ag_expand(t, 2, es);
        v.shape[0] = 4;
        v.strides[0] = 0;
        break;
      }
      case 4: {
        ag_tensor *tt = ag_transpose(t, 0, 1);
        int64_t rs[2] = {3, 8};
        w = tt ? ag_reshape(tt, 2, rs) : NULL;
        tmp = v.shape[0], v.shape[0] = v.shape[1], v.shape[1] = tmp;
        tmp = v.strides[0], v.strides[0] = v.strides[1], v.strides[1] = tmp;
        double *tv = hv_gather(c, &v, h->v); /* reshape = reinterpret the row-major order */
        if (tv) memcpy(h->v, tv, 24 * sizeof(double));
        v = (hview){2, {3, 8}, {8, 1}, 0};
        break;
      }
      default: {
        ag_tensor *w1 = ag_slice(t, 0, 2, 8, 2);          /* [3,6] */
        ag_tensor *w2 = w1 ? ag_unsqueeze(w1, 1) : NULL;  /* [3,1,6] */
        ag_tensor *w3 = w2 ? ag_squeeze(w2, 1) : NULL;    /* [3,6] */
        w = w3 ? ag_flatten(w3) : NULL;                   /* [18] (copies) */
        hv_slice(&v, 0, 2, 8, 2);
        double *tv = hv_gather(c, &v, h->v);
        if (tv) memcpy(h->v, tv, 18 * sizeof(double));
        v = (hview){1, {18}, {1}, 0};
        break;
      }
    }
    if (!w) ag__conf_on_null(c, names[k]);
    else {
      double *ref = hv_gather(c, &v, h->v);
      ag_tensor *o = ag_contiguous(w);
      if (!o) ag__conf_on_null(c, "ag_contiguous");
      else if (!ag_tensor_is_contiguous(o)) ag__conf_case_fail(c, "ag_contiguous returned a non-contiguous tensor");
      else if (ref) ag__conf_check(c, o, v.ndim, v.shape, c->dt, ref, EXACT);
      if (ref && c->cres == AG_CONF_PASS) ag__conf_check(c, w, v.ndim, v.shape, c->dt, ref, EXACT);
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_copy(ctx *c) {
  for (int k = 0; k < 3; k++) {
    static const char *names[] = {"copy_ transposed into a stepped view",
                                  "copy_ broadcast f32 [5] into [4,5] view", "fill_ a stepped view"};
    ag__conf_case_begin(c, names[k]);
    int64_t bs[2] = {4, 11}, s[2] = {4, 5};
    double *base = ag__conf_cx_alloc(c, 44 * sizeof(double));
    for (int i = 0; base && i < 44; i++) base[i] = ag__conf_sentinel(c->dt);
    ag_tensor *big = ag_full(c->dev, c->dt, 2, bs, ag__conf_sentinel(c->dt));
    ag_tensor *dst = big ? ag_slice(big, 1, 1, 11, 2) : NULL; /* [4,5] at odd columns */
    hbuf *h = NULL;
    ag_tensor *src = NULL;
    ag_status st = AG_OK;
    if (!dst || !base) ag__conf_on_null(c, "ag_full/ag_slice");
    else if (k == 0 && (src = ag__conf_mk(c, &h, L_T, 2, s, G_UNI, -5, 5))) st = ag_copy_(dst, src);
    else if (k == 1 && (src = ag__conf_mk_dt(c, AG_F32, &h, L_C, 1, s + 1, G_UNI, -5, 5))) st = ag_copy_(dst, src);
    else if (k == 2) st = ag_fill_(dst, 2.5);
    if (st != AG_OK) {
      if (st == AG_ERR_UNSUPPORTED) ag__conf_case_unsup(c, names[k]);
      else ag__conf_case_fail(c, "%s: %s (%s)", names[k], ag_status_name(st), ag_last_error());
    } else if (dst && (k == 2 || src)) {
      for (int r = 0; r < 4; r++)
        for (int j = 0; j < 5; j++)
          base[r * 11 + 1 + 2 * j] = k == 2 ? ag_conf_round(c->dt, 2.5)
                                            : ag_conf_round(c->dt, h->v[k == 0 ? r * 5 + j : j]);
      ag__conf_check(c, big, 2, bs, c->dt, base, EXACT);
    }
    ag__conf_case_end(c);
  }
}

void ag__conf_op_to_device(ctx *c) {
  ag__conf_case_begin(c, "host <-> device round trip");
  int64_t s[2] = {9, 13};
  hbuf *h;
  ag_tensor *t = ag__conf_mk(c, &h, L_T, 2, s, G_UNI, -50, 50);
  if (t) {
    ag_tensor *on_cpu = ag_to_device(t, AG_CPU);
    ag_tensor *back = on_cpu ? ag_to_device(on_cpu, c->dev) : NULL;
    ag_tensor *same = ag_to_device(t, c->dev);
    if (!on_cpu || !back || !same) ag__conf_on_null(c, "ag_to_device");
    else {
      if (!ag_device_eq(ag_tensor_device(on_cpu), AG_CPU) || !ag_device_eq(ag_tensor_device(back), c->dev))
        ag__conf_case_fail(c, "ag_to_device produced a tensor on the wrong device");
      ag__conf_check(c, on_cpu, 2, s, c->dt, h->v, EXACT);
      ag__conf_check(c, back, 2, s, c->dt, h->v, EXACT);
      ag__conf_check(c, same, 2, s, c->dt, h->v, EXACT);
    }
  }
  ag__conf_case_end(c);
}
