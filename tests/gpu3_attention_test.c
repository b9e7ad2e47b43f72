/* The CUDA/HIP attention kernels (kernels/gpu/attention.cu) on the emulated
 * GPU, for what tests/attention_test.c leaves out: heads of 65 to 128 (the
 * kernels' DM = 128 instantiation) and the boundary at 64, mixed D and Dv,
 * T < S and T > S under causal, dropout; f32 and f16 against the CPU's fused
 * kernel (out and the gradients of q, k and v), and the same bits on every
 * run and on both emulated devices (warp 32 and warp 64: the kernels' sums
 * do not depend on the warp width or the grid). CTest runs it once plainly
 * and once under the emulator's checker (AG_GPUEMU_CHECK=1: races,
 * uninitialised shared memory, bounds). */
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

static const cfg k_cfgs[] = {
    {1, 4, 2, 37, 45, 128, 72, true, true, 0},    /* widest head, GQA, mask */
    {2, 2, 1, 33, 20, 80, 128, false, true, 0.2}, /* S < T, dropout */
    {1, 2, 2, 17, 50, 100, 100, true, false, 0},  /* causal with T < S */
    {1, 2, 1, 40, 33, 64, 64, true, true, 0},     /* the widest DM = 64 head */
    {1, 3, 3, 21, 19, 64, 65, false, false, 0.1}, /* one column past DM = 64 */
};
#define N_CFGS (sizeof k_cfgs / sizeof *k_cfgs)

static bool present(const char *name, ag_device *dev) {
  if (ag_device_parse(name, dev) != AG_OK || !ag_backend_available((ag_backend_kind)dev->backend, NULL) ||
      dev->index >= ag_backend_device_count((ag_backend_kind)dev->backend)) {
    ag_error_clear();
    return false;
  }
  return true;
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

/* max |a - b| / (1 + max |b|); NaN gives NaN */
static double rel_err(ag_tensor *a, ag_tensor *b) {
  assert_int_equal(ag_tensor_numel(a), ag_tensor_numel(b));
  double *x = host(a), *y = host(b), e = 0, m = 0;
  for (int64_t i = 0; i < ag_tensor_numel(a); i++) {
    double d = fabs(x[i] - y[i]);
    if (!(d <= e)) e = d;
    if (fabs(y[i]) > m) m = fabs(y[i]);
  }
  free(x);
  free(y);
  return e / (1 + m);
}

typedef struct inputs {
  ag_tensor *q, *k, *v, *mask, *w;
} inputs;

static ag_tensor *rnd(ag_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d, ag_generator *g) {
  ag_tensor *t = ag_randn(AG_CPU, dt, 4, (int64_t[]){a, b, c, d}, 0, 1, g);
  assert_non_null(t);
  return t;
}

/* on the CPU; a [T, S] mask with -inf on some keys (key 0 always visible) */
static inputs make(const cfg *c, ag_dtype dt, uint64_t seed) {
  ag_generator *g = ag_generator_create(seed);
  inputs in = {rnd(dt, c->B, c->H, c->T, c->D, g), rnd(dt, c->B, c->Hkv, c->S, c->D, g),
               rnd(dt, c->B, c->Hkv, c->S, c->Dv, g), NULL, rnd(dt, c->B, c->H, c->T, c->Dv, g)};
  if (c->mask) {
    float *h = malloc(sizeof(float) * (size_t)(c->T * c->S));
    for (int64_t i = 0; i < c->T; i++)
      for (int64_t j = 0; j < c->S; j++)
        h[i * c->S + j] = j > 0 && (i * 5 + j * 3) % 7 == 0 ? -INFINITY : (float)(((i + 3 * j) % 5) - 2) * 0.3f;
    ag_tensor *m32 = ag_from_host(AG_CPU, AG_F32, 2, (int64_t[]){c->T, c->S}, h);
    free(h);
    in.mask = ag_cast(m32, dt);
    ag_tensor_release(m32);
  }
  ag_generator_free(g);
  return in;
}

static inputs to_dev(const inputs *in, ag_device dev) {
  inputs d = {ag_to_device(in->q, dev), ag_to_device(in->k, dev), ag_to_device(in->v, dev),
              in->mask ? ag_to_device(in->mask, dev) : NULL, ag_to_device(in->w, dev)};
  assert_non_null(d.q);
  assert_non_null(d.w);
  return d;
}

static void drop(inputs *in) {
  ag_tensor_release(in->q);
  ag_tensor_release(in->k);
  ag_tensor_release(in->v);
  ag_tensor_release(in->mask);
  ag_tensor_release(in->w);
}

/* out, dq, dk, dv of sum(out * w), copied to the CPU */
typedef struct result {
  ag_tensor *t[4];
} result;

static result run(const cfg *c, inputs *in) {
  ag_tensor *ts[3] = {in->q, in->k, in->v};
  for (int i = 0; i < 3; i++) assert_int_equal(ag_tensor_set_requires_grad(ts[i], true), AG_OK);
  ag_generator *g = ag_generator_create(99);
  ag_tensor *o = ag_scaled_dot_product_attention(in->q, in->k, in->v, in->mask, c->causal, 0, c->p, g);
  if (!o) fail_msg("%s", ag_last_error());
  ag_tensor *ow = ag_mul(o, in->w), *l = ag_sum(ow, 0, NULL, false);
  assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  result r = {{ag_to_device(o, AG_CPU), ag_to_device(ag_tensor_grad(in->q), AG_CPU),
               ag_to_device(ag_tensor_grad(in->k), AG_CPU), ag_to_device(ag_tensor_grad(in->v), AG_CPU)}};
  for (int i = 0; i < 4; i++) assert_non_null(r.t[i]);
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
  for (int i = 0; i < 4; i++) ag_tensor_release(r->t[i]);
}

static const char *k_names[4] = {"out", "dq", "dk", "dv"};

static void desc(char *buf, size_t n, const cfg *c) {
  snprintf(buf, n, "B%lld H%lld/%lld T%lld S%lld D%lld/%lld%s%s p %g", (long long)c->B, (long long)c->H,
           (long long)c->Hkv, (long long)c->T, (long long)c->S, (long long)c->D, (long long)c->Dv,
           c->causal ? " causal" : "", c->mask ? " mask" : "", c->p);
}

/* every case on gpuemu:0 and gpuemu:1 against the CPU's fused kernel, in
 * f32 and (the first two cases) f16 */
static void test_wide_heads(void **state) {
  (void)state;
  ag_device devs[2];
  if (!present("gpuemu:0", &devs[0]) || !present("gpuemu:1", &devs[1])) skip();
  for (size_t ci = 0; ci < N_CFGS; ci++)
    for (int half = 0; half < 2; half++) {
      if (half && ci >= 2) continue;
      const cfg *c = &k_cfgs[ci];
      inputs in = make(c, half ? AG_F16 : AG_F32, 10 + ci);
      result ref = run(c, &in);
      for (int di = 0; di < 2; di++) {
        inputs dv = to_dev(&in, devs[di]);
        result r = run(c, &dv);
        char what[128];
        desc(what, sizeof what, c);
        for (int i = 0; i < 4; i++) {
          double e = rel_err(r.t[i], ref.t[i]), tol = half ? 5e-3 : 1e-4;
          if (!(e <= tol))
            fail_msg("gpuemu:%d %s %s: %s error %g > %g", di, half ? "f16" : "f32", what, k_names[i], e, tol);
        }
        rfree(&r);
        drop(&dv);
      }
      rfree(&ref);
      drop(&in);
    }
}

static bool same_bits(ag_tensor *a, ag_tensor *b) {
  size_t n = (size_t)ag_tensor_numel(a) * sizeof(float);
  float *x = malloc(n), *y = malloc(n);
  assert_int_equal(ag_to_host(a, x, n), AG_OK);
  assert_int_equal(ag_to_host(b, y, n), AG_OK);
  bool eq = memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return eq;
}

/* two runs on gpuemu:0 and one on gpuemu:1 give the same bits (f32) */
static void test_repeatable(void **state) {
  (void)state;
  ag_device devs[2];
  if (!present("gpuemu:0", &devs[0]) || !present("gpuemu:1", &devs[1])) skip();
  for (size_t ci = 0; ci < 2; ci++) {
    const cfg *c = &k_cfgs[ci];
    inputs in = make(c, AG_F32, 30 + ci);
    inputs d0 = to_dev(&in, devs[0]), d1 = to_dev(&in, devs[1]);
    result r[3] = {run(c, &d0), run(c, &d0), run(c, &d1)};
    char what[128];
    desc(what, sizeof what, c);
    for (int k = 1; k < 3; k++)
      for (int i = 0; i < 4; i++)
        if (!same_bits(r[0].t[i], r[k].t[i]))
          fail_msg("%s: %s differs between %s", what, k_names[i],
                   k == 1 ? "two runs on gpuemu:0" : "gpuemu:0 and gpuemu:1");
    for (int k = 0; k < 3; k++) rfree(&r[k]);
    drop(&d0);
    drop(&d1);
    drop(&in);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wide_heads),
      cmocka_unit_test(test_repeatable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
