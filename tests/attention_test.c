/* ag_scaled_dot_product_attention: the fused CPU kernel against the unfused
 * composition (forward and the gradients of q, k, v), against a plain
 * double-precision reference written here, finite-difference gradients in
 * f64, dropout equal on both paths for one generator state, f16/bf16, GQA,
 * masks, causal, sizes that are not multiples of the tiles, argument
 * errors, and the other backends present (opencl:0, gpuemu:0, vulkan:0):
 * their fused kernels against the CPU's, and a check that the fused kernel
 * is the one that runs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

typedef struct cfg {
  int64_t B, H, Hkv, T, S, D, Dv;
  bool causal, mask;
  double p;
} cfg;

static ag_tensor *rnd(ag_device dev, ag_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d, ag_generator *g) {
  ag_tensor *t = ag_randn(dev, dt, 4, (int64_t[]){a, b, c, d}, 0, 1, g);
  assert_non_null(t);
  return t;
}

static double *host(ag_tensor *t) {
  ag_tensor *d = ag_cast(t, AG_F64);
  assert_non_null(d);
  int64_t n = ag_tensor_numel(d);
  double *h = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_int_equal(ag_to_host(d, h, sizeof(double) * (size_t)n), AG_OK);
  ag_tensor_release(d);
  return h;
}

/* max |a - b| / (1 + max |b|) */
static double rel_err(ag_tensor *a, ag_tensor *b) {
  assert_int_equal(ag_tensor_numel(a), ag_tensor_numel(b));
  double *x = host(a), *y = host(b), e = 0, m = 0;
  for (int64_t i = 0; i < ag_tensor_numel(a); i++) {
    double d = fabs(x[i] - y[i]);
    if (!(d <= e)) e = d; /* NaN wins */
    if (fabs(y[i]) > m) m = fabs(y[i]);
  }
  free(x);
  free(y);
  return e / (1 + m);
}

/* The inputs of one case, a mask (-inf on some keys, finite elsewhere),
 * and an upstream gradient. */
typedef struct inputs {
  ag_tensor *q, *k, *v, *mask, *w;
} inputs;

static inputs make(const cfg *c, ag_device dev, ag_dtype dt, uint64_t seed) {
  ag_generator *g = ag_generator_create(seed);
  inputs in;
  in.q = rnd(dev, dt, c->B, c->H, c->T, c->D, g);
  in.k = rnd(dev, dt, c->B, c->Hkv, c->S, c->D, g);
  in.v = rnd(dev, dt, c->B, c->Hkv, c->S, c->Dv, g);
  in.w = rnd(dev, dt, c->B, c->H, c->T, c->Dv, g);
  in.mask = NULL;
  if (c->mask) { /* [T, S]: broadcast over batch and heads; keys 0 always visible */
    float *h = malloc(sizeof(float) * (size_t)(c->T * c->S));
    for (int64_t i = 0; i < c->T; i++)
      for (int64_t j = 0; j < c->S; j++)
        h[i * c->S + j] = j > 0 && (i * 7 + j * 3) % 5 == 0 ? -INFINITY : (float)(((i + 2 * j) % 7) - 3) * 0.25f;
    ag_tensor *m32 = ag_from_host(dev, AG_F32, 2, (int64_t[]){c->T, c->S}, h);
    free(h);
    in.mask = ag_cast(m32, dt);
    ag_tensor_release(m32);
  }
  ag_generator_free(g);
  return in;
}

static void drop(inputs *in) {
  ag_tensor_release(in->q);
  ag_tensor_release(in->k);
  ag_tensor_release(in->v);
  ag_tensor_release(in->mask);
  ag_tensor_release(in->w);
}

/* out and the gradients of sum(out * w) wrt q, k, v, through the fused op
 * or the unfused composition. */
typedef struct result {
  ag_tensor *out, *dq, *dk, *dv;
} result;

static result run(const cfg *c, inputs *in, bool fused, uint64_t gseed) {
  ag_tensor *ts[3] = {in->q, in->k, in->v};
  for (int i = 0; i < 3; i++) {
    ag_tensor_zero_grad(ts[i]);
    assert_int_equal(ag_tensor_set_requires_grad(ts[i], true), AG_OK);
  }
  ag_generator *g = ag_generator_create(gseed);
  ag_tensor *o = fused ? ag_scaled_dot_product_attention(in->q, in->k, in->v, in->mask, c->causal, 0, c->p, g)
                       : ag_scaled_dot_product_attention_unfused(in->q, in->k, in->v, in->mask, c->causal, 0, c->p, g);
  if (!o) fail_msg("%s", ag_last_error());
  ag_tensor *ow = ag_mul(o, in->w), *l = ag_sum(ow, 0, NULL, false);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  result r = {ag_detach(o), ag_tensor_retain(ag_tensor_grad(in->q)), ag_tensor_retain(ag_tensor_grad(in->k)),
              ag_tensor_retain(ag_tensor_grad(in->v))};
  assert_non_null(r.dq);
  ag_tensor_release(o);
  ag_tensor_release(ow);
  ag_tensor_release(l);
  ag_generator_free(g);
  for (int i = 0; i < 3; i++) {
    ag_tensor_zero_grad(ts[i]);
    ag_tensor_set_requires_grad(ts[i], false);
  }
  return r;
}

static void rfree(result *r) {
  ag_tensor_release(r->out);
  ag_tensor_release(r->dq);
  ag_tensor_release(r->dk);
  ag_tensor_release(r->dv);
}

static void check_close(const cfg *c, const char *what, result *a, result *b, double tol) {
  double e[4] = {rel_err(a->out, b->out), rel_err(a->dq, b->dq), rel_err(a->dk, b->dk), rel_err(a->dv, b->dv)};
  for (int i = 0; i < 4; i++)
    if (!(e[i] <= tol))
      fail_msg("%s B%lld H%lld Hkv%lld T%lld S%lld D%lld Dv%lld causal %d mask %d p %g: %s error %g > %g", what,
               (long long)c->B, (long long)c->H, (long long)c->Hkv, (long long)c->T, (long long)c->S, (long long)c->D,
               (long long)c->Dv, c->causal, c->mask, c->p, (const char *[]){"out", "dq", "dk", "dv"}[i], e[i], tol);
}

static const cfg k_cfgs[] = {
    {1, 1, 1, 1, 1, 4, 4, false, false, 0},     {2, 4, 4, 37, 37, 16, 16, false, false, 0},
    {2, 4, 4, 37, 37, 16, 16, true, false, 0},  {2, 4, 2, 33, 70, 8, 12, false, true, 0},
    {1, 6, 2, 70, 65, 16, 16, true, true, 0},   {1, 8, 1, 100, 100, 32, 32, true, false, 0},
    {2, 2, 1, 45, 29, 8, 8, true, false, 0},    {1, 2, 2, 129, 130, 4, 4, false, false, 0},
    {1, 4, 2, 300, 300, 16, 16, true, false, 0}, /* several 64 x 128 tiles on and off the diagonal */
};

/* fused f32 vs unfused f32, and both vs each other in f64; at 1 thread
 * the CPU backward runs in one pass over (batch, kv head), at 4 threads the
 * configurations with 1 or 2 of those (fewer than the threads) run dq and
 * dk, dv in two passes, so both backward paths are checked */
static void test_fused_vs_unfused(void **state) {
  (void)state;
  const int threads = ag_get_num_threads();
  for (size_t i = 0; i < 2 * (sizeof k_cfgs / sizeof *k_cfgs); i++) {
    const cfg *c = &k_cfgs[i % (sizeof k_cfgs / sizeof *k_cfgs)];
    if (i % (sizeof k_cfgs / sizeof *k_cfgs) == 0)
      assert_int_equal(ag_set_num_threads(i ? 4 : 1), AG_OK);
    for (int dbl = 0; dbl < 2; dbl++) {
      inputs in = make(c, AG_CPU, dbl ? AG_F64 : AG_F32, 100 + i);
      result a = run(c, &in, true, 1), b = run(c, &in, false, 1);
      check_close(c, dbl ? "f64 fused vs unfused" : "f32 fused vs unfused", &a, &b, dbl ? 1e-12 : 2e-5);
      rfree(&a);
      rfree(&b);
      drop(&in);
    }
  }
  assert_int_equal(ag_set_num_threads(threads), AG_OK);
}

/* the forward against loops in double written from the definition */
static void test_double_reference(void **state) {
  (void)state;
  for (size_t ci = 0; ci < sizeof k_cfgs / sizeof *k_cfgs; ci++) {
    const cfg *c = &k_cfgs[ci];
    inputs in = make(c, AG_CPU, AG_F32, 7 + ci);
    ag_tensor *o = ag_scaled_dot_product_attention(in.q, in.k, in.v, in.mask, c->causal, 0, 0, NULL);
    assert_non_null(o);
    double *q = host(in.q), *k = host(in.k), *v = host(in.v), *out = host(o);
    double *m = in.mask ? host(in.mask) : NULL;
    double *s = malloc(sizeof(double) * (size_t)c->S), worst = 0;
    const double sc = 1 / sqrt((double)c->D);
    const int64_t G = c->H / c->Hkv;
    for (int64_t b = 0; b < c->B; b++)
      for (int64_t h = 0; h < c->H; h++)
        for (int64_t i = 0; i < c->T; i++) {
          const double *qi = q + ((b * c->H + h) * c->T + i) * c->D;
          const int64_t kh = b * c->Hkv + h / G;
          double mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < c->S; j++) {
            double d = 0;
            for (int64_t e = 0; e < c->D; e++) d += qi[e] * k[(kh * c->S + j) * c->D + e];
            s[j] = d * sc + (m ? m[i * c->S + j] : 0) + (c->causal && j > i ? -INFINITY : 0);
            if (s[j] > mx) mx = s[j];
          }
          for (int64_t j = 0; j < c->S; j++) sum += s[j] = exp(s[j] - mx);
          for (int64_t e = 0; e < c->Dv; e++) {
            double r = 0;
            for (int64_t j = 0; j < c->S; j++) r += s[j] / sum * v[(kh * c->S + j) * c->Dv + e];
            double d = fabs(r - out[((b * c->H + h) * c->T + i) * c->Dv + e]);
            if (!(d <= worst)) worst = d;
          }
        }
    if (!(worst < 1e-5)) fail_msg("case %zu: max error %g against the double reference", ci, worst);
    free(q), free(k), free(v), free(out), free(m), free(s);
    ag_tensor_release(o);
    drop(&in);
  }
}

/* central differences of sum(out * w) in f64 against the fused gradients */
static void test_gradcheck_f64(void **state) {
  (void)state;
  const cfg cs[] = {{1, 2, 1, 5, 7, 3, 2, true, true, 0}, {1, 2, 2, 6, 4, 3, 3, false, false, 0}};
  for (size_t ci = 0; ci < 2; ci++) {
    const cfg *c = &cs[ci];
    inputs in = make(c, AG_CPU, AG_F64, 50 + ci);
    result r = run(c, &in, true, 1);
    ag_tensor *ts[3] = {in.q, in.k, in.v}, *gs[3] = {r.dq, r.dk, r.dv};
    for (int t = 0; t < 3; t++) {
      int64_t n = ag_tensor_numel(ts[t]);
      double *x = host(ts[t]), *gr = host(gs[t]);
      for (int64_t e = 0; e < n; e++) {
        double f[2];
        for (int sgn = 0; sgn < 2; sgn++) {
          const double x0 = x[e];
          x[e] = x0 + (sgn ? -1e-6 : 1e-6);
          ag_tensor *xt = ag_from_host(AG_CPU, AG_F64, 4, ag_tensor_shape(ts[t]), x);
          x[e] = x0;
          ag_tensor *a[3] = {in.q, in.k, in.v};
          a[t] = xt;
          ag_tensor *o = ag_scaled_dot_product_attention(a[0], a[1], a[2], in.mask, c->causal, 0, 0, NULL);
          ag_tensor *ow = ag_mul(o, in.w), *l = ag_sum(ow, 0, NULL, false);
          f[sgn] = ag_item(l);
          ag_tensor_release(xt), ag_tensor_release(o), ag_tensor_release(ow), ag_tensor_release(l);
        }
        double fd = (f[0] - f[1]) / 2e-6;
        if (!(fabs(fd - gr[e]) <= 1e-6 * (1 + fabs(fd))))
          fail_msg("case %zu input %d element %lld: finite difference %.10g, gradient %.10g", ci, t, (long long)e, fd,
                   gr[e]);
      }
      free(x), free(gr);
    }
    rfree(&r);
    drop(&in);
  }
}

/* dropout: the same Philox bits on both paths for one generator state */
static void test_dropout(void **state) {
  (void)state;
  const cfg cs[] = {{2, 4, 2, 37, 45, 8, 8, false, false, 0.3}, {1, 2, 1, 70, 70, 16, 8, true, true, 0.5}};
  for (size_t ci = 0; ci < 2; ci++) {
    inputs in = make(&cs[ci], AG_CPU, AG_F64, 70 + ci);
    result a = run(&cs[ci], &in, true, 9), b = run(&cs[ci], &in, false, 9);
    check_close(&cs[ci], "dropout fused vs unfused", &a, &b, 1e-12);
    rfree(&a);
    rfree(&b);
    drop(&in);
  }
}

/* f16 and bf16: the fused kernel (f32 inside) against the unfused path run
 * in f32 on the same rounded inputs */
static void test_half(void **state) {
  (void)state;
  const ag_dtype dts[2] = {AG_F16, AG_BF16};
  for (int di = 0; di < 2; di++)
    for (size_t ci = 1; ci < 5; ci++) {
      const cfg *c = &k_cfgs[ci];
      inputs in = make(c, AG_CPU, dts[di], 30 + ci);
      inputs in32 = {ag_cast(in.q, AG_F32), ag_cast(in.k, AG_F32), ag_cast(in.v, AG_F32),
                     in.mask ? ag_cast(in.mask, AG_F32) : NULL, ag_cast(in.w, AG_F32)};
      result a = run(c, &in, true, 1), b = run(c, &in32, false, 1);
      check_close(c, ag_dtype_name(dts[di]), &a, &b, dts[di] == AG_F16 ? 4e-3 : 3e-2);
      rfree(&a);
      rfree(&b);
      drop(&in);
      drop(&in32);
    }
}

static void test_errors(void **state) {
  (void)state;
  ag_tensor *q = ag_zeros(AG_CPU, AG_F32, 4, (int64_t[]){1, 3, 4, 8});
  ag_tensor *k = ag_zeros(AG_CPU, AG_F32, 4, (int64_t[]){1, 2, 5, 8});
  ag_tensor *k1 = ag_zeros(AG_CPU, AG_F32, 4, (int64_t[]){1, 1, 5, 8});
  ag_tensor *kd = ag_zeros(AG_CPU, AG_F64, 4, (int64_t[]){1, 1, 5, 8});
  ag_tensor *m = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 6});
  assert_null(ag_scaled_dot_product_attention(q, k, k, NULL, false, 0, 0, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "H % Hkv"));
  assert_null(ag_scaled_dot_product_attention(q, kd, kd, NULL, false, 0, 0, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_scaled_dot_product_attention(q, k1, k1, m, false, 0, 0, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_scaled_dot_product_attention(q, k1, k1, NULL, false, 0, 1.0, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_tensor *o = ag_scaled_dot_product_attention(q, k1, k1, NULL, true, 0, 0, NULL);
  assert_non_null(o);
  ag_tensor_release(o);
  ag_tensor *ts[] = {q, k, k1, kd, m};
  for (size_t i = 0; i < 5; i++) ag_tensor_release(ts[i]);
}

static bool present(const char *name, ag_device *dev) {
  if (ag_device_parse(name, dev) != AG_OK || !ag_backend_available((ag_backend_kind)dev->backend, NULL) ||
      dev->index >= ag_backend_device_count((ag_backend_kind)dev->backend)) {
    ag_error_clear();
    return false;
  }
  return true;
}

static const char *k_devs[] = {"opencl:0", "gpuemu:0", "vulkan:0"};
#define N_DEVS (sizeof k_devs / sizeof *k_devs)

/* The other backends (their fused kernel, or the unfused path where they
 * decline the shapes): forward and gradients against the CPU's fused
 * kernel, dropout and f16 included. */
static void test_other_backends(void **state) {
  (void)state;
  int ran = 0;
  for (size_t bi = 0; bi < N_DEVS; bi++) {
    ag_device dev;
    if (!present(k_devs[bi], &dev)) continue;
    const bool slow = bi > 0; /* emulated GPU and lavapipe run on the host */
    /* a head of 136 (declined: the unfused path) and dropout; dropout on a
     * shape every fused kernel takes */
    const cfg big = {1, 2, 1, 20, 24, 136, 8, true, false, 0.25};
    const cfg dropc = {1, 4, 2, 37, 45, 8, 8, true, true, 0.3};
    for (size_t ci = 1; ci < 7; ci++) {
      if (slow && ci == 1) continue;
      const cfg *c = ci < 5 ? &k_cfgs[ci] : ci == 5 ? &big : &dropc;
      inputs in = make(c, AG_CPU, AG_F32, 200 + ci);
      inputs dv = {ag_to_device(in.q, dev), ag_to_device(in.k, dev), ag_to_device(in.v, dev),
                   in.mask ? ag_to_device(in.mask, dev) : NULL, ag_to_device(in.w, dev)};
      result a = run(c, &in, true, 1), b = run(c, &dv, true, 1);
      result bc = {ag_to_device(b.out, AG_CPU), ag_to_device(b.dq, AG_CPU), ag_to_device(b.dk, AG_CPU),
                   ag_to_device(b.dv, AG_CPU)};
      check_close(c, k_devs[bi], &a, &bc, 1e-4);
      printf("%s case %zu: max |error| vs the CPU's fused kernel %.3g (out) %.3g %.3g %.3g (dq dk dv)\n",
             k_devs[bi], ci, rel_err(a.out, bc.out), rel_err(a.dq, bc.dq), rel_err(a.dk, bc.dk),
             rel_err(a.dv, bc.dv));
      rfree(&a), rfree(&b), rfree(&bc);
      drop(&in), drop(&dv);
      ran++;
    }
    /* f16 storage (f32 inside) against the CPU's fused f16 */
    for (size_t ci = 3; ci < 5 && bi > 0; ci++) {
      const cfg *c = &k_cfgs[ci];
      inputs in = make(c, AG_CPU, AG_F16, 300 + ci);
      inputs dv = {ag_to_device(in.q, dev), ag_to_device(in.k, dev), ag_to_device(in.v, dev),
                   in.mask ? ag_to_device(in.mask, dev) : NULL, ag_to_device(in.w, dev)};
      result a = run(c, &in, true, 1), b = run(c, &dv, true, 1);
      result bc = {ag_to_device(b.out, AG_CPU), ag_to_device(b.dq, AG_CPU), ag_to_device(b.dk, AG_CPU),
                   ag_to_device(b.dv, AG_CPU)};
      check_close(c, "f16 on the device", &a, &bc, 5e-3);
      rfree(&a), rfree(&b), rfree(&bc);
      drop(&in), drop(&dv);
    }
  }
  if (!ran) skip();
}

/* The fused kernel is what runs: a query row whose keys are all masked
 * gives 0 (and finite gradients) on the fused path and NaN on the unfused
 * composition; a head of 136, which the GPU kernels decline, gives NaN
 * there. */
static void test_fused_used(void **state) {
  (void)state;
  int ran = 0;
  for (size_t bi = 0; bi < N_DEVS + 1; bi++) {
    ag_device dev = AG_CPU;
    if (bi > 0 && !present(k_devs[bi - 1], &dev)) continue;
    for (int big = 0; big < 2; big++) {
      const int64_t T = 5, S = 6, D = big ? 136 : 8;
      const cfg c = {1, 2, 1, T, S, D, 4, false, false, 0};
      inputs in = make(&c, dev, AG_F32, 40);
      float h[5 * 6];
      for (int i = 0; i < T * S; i++) h[i] = i / S == 2 ? -INFINITY : 0.0f;
      in.mask = ag_from_host(dev, AG_F32, 2, (int64_t[]){T, S}, h);
      result r = run(&c, &in, true, 1);
      double *o = host(r.out), *g = host(r.dq);
      bool fused = true;
      for (int hh = 0; hh < 2; hh++)
        for (int e = 0; e < 4; e++) fused = fused && o[(hh * T + 2) * 4 + e] == 0.0;
      for (int64_t i = 0; i < 2 * T * D; i++) fused = fused && isfinite(g[i]);
      /* the CPU fuses every head size; OpenCL and the GPU kernels up to 128 */
      bool want = !big || bi == 0;
      if (fused != want)
        fail_msg("%s, head %lld: the %s path ran, expected the %s one", bi ? k_devs[bi - 1] : "cpu", (long long)D,
                 fused ? "fused" : "unfused", want ? "fused" : "unfused");
      free(o);
      free(g);
      rfree(&r);
      drop(&in);
      ran++;
    }
  }
  if (!ran) skip();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fused_vs_unfused), cmocka_unit_test(test_double_reference),
      cmocka_unit_test(test_gradcheck_f64),    cmocka_unit_test(test_dropout),
      cmocka_unit_test(test_half),             cmocka_unit_test(test_errors),
      cmocka_unit_test(test_other_backends),   cmocka_unit_test(test_fused_used),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
