/* Mixed-precision training: the grad scaler (skip on overflow, backoff and
 * growth on the device, unscale, call-order errors), no host sync inside a
 * scaled step, f32 master weights, and the training example in f16 and bf16
 * against f32. CPU always; opencl:0, cuda:0 and hip:0 too where present. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "charlm.h"

enum { IN = 8, OUT = 4, N = 16 };

/* A linear classifier trained through the scaler: small enough to compare
 * every parameter and state value bit for bit. */
typedef struct fixture {
  ag_device dev;
  ag_tensor *w, *b, *x, *y;
  ag_param_list params;
  ag_optimizer *opt;
  ag_grad_scaler *scaler;
} fixture;

/* Devices 0..N_DEV-1: the CPU, then opencl:0, cuda:0, hip:0 and gpuemu:0
 * where present (cuda and hip run on the GPU machine, the emulated GPU
 * everywhere). */
enum { N_DEV = 5 };
static bool device_for(int which, ag_device *d) {
  const ag_backend_kind k[N_DEV] = {AG_BACKEND_CPU, AG_BACKEND_OPENCL, AG_BACKEND_CUDA, AG_BACKEND_HIP,
                                    AG_BACKEND_GPUEMU};
  if (which > 0 && !ag_backend_available(k[which], NULL)) return false;
  *d = (ag_device){k[which], 0};
  return true;
}

static void fixture_init(fixture *f, ag_device dev, bool adamw, const ag_grad_scaler_options *so) {
  memset(f, 0, sizeof *f);
  f->dev = dev;
  ag_generator *g = ag_generator_create(7);
  int64_t ws[2] = {IN, OUT}, bs[1] = {OUT}, xs[2] = {N, IN};
  f->w = ag_rand(dev, AG_F32, 2, ws, -0.5, 0.5, g);
  f->b = ag_zeros(dev, AG_F32, 1, bs);
  /* |x| <= 0.5 keeps every f16 gradient of a 1024-scaled loss finite, so
   * only injected overflows are found. */
  f->x = ag_rand(dev, AG_F32, 2, xs, -0.5, 0.5, g);
  int32_t hy[N];
  for (int i = 0; i < N; i++) hy[i] = (i * 7) % OUT;
  int64_t ys[1] = {N};
  f->y = ag_from_host(dev, AG_I32, 1, ys, hy);
  ag_generator_free(g);
  assert_non_null(f->w);
  assert_non_null(f->y);
  assert_int_equal(ag_tensor_set_requires_grad(f->w, true), AG_OK);
  assert_int_equal(ag_tensor_set_requires_grad(f->b, true), AG_OK);
  assert_int_equal(ag_params_add(&f->params, "w", f->w), AG_OK);
  assert_int_equal(ag_params_add(&f->params, "b", f->b), AG_OK);
  if (adamw) {
    f->opt = ag_adamw_create(&f->params, NULL);
  } else {
    ag_sgd_options o = {.lr = 0.1, .momentum = 0.9};
    f->opt = ag_sgd_create(&f->params, &o);
  }
  assert_non_null(f->opt);
  f->scaler = ag_grad_scaler_create(dev, so);
  assert_non_null(f->scaler);
}

static void fixture_free(fixture *f) {
  ag_grad_scaler_free(f->scaler);
  ag_optimizer_free(f->opt);
  ag_params_free(&f->params);
  ag_tensor *ts[] = {f->w, f->b, f->x, f->y};
  for (int i = 0; i < 4; i++) ag_tensor_release(ts[i]);
}

/* Forward in an f16 region, scaled backward outside it. */
static void forward_backward(fixture *f, ag_dtype dt) {
  assert_int_equal(ag_autocast_begin(dt), AG_OK);
  ag_tensor *h = ag_matmul(f->x, f->w);
  ag_tensor *logits = ag_add(h, f->b);
  ag_tensor *loss = ag_cross_entropy(logits, f->y, AG_REDUCTION_MEAN, -1);
  assert_int_equal(ag_autocast_end(), AG_OK);
  assert_non_null(loss);
  assert_int_equal(ag_tensor_dtype(h), dt); /* the matmul ran in half */
  ag_tensor *scaled = ag_grad_scaler_scale(f->scaler, loss);
  assert_non_null(scaled);
  assert_int_equal(ag_backward(scaled, NULL, false), AG_OK);
}

/* One scaled step; inject: set one gradient element to +inf after backward. */
static ag_status scaled_step(fixture *f, bool inject, bool unscale_first) {
  ag_scope_begin();
  forward_backward(f, AG_F16);
  if (inject) {
    ag_tensor *row = ag_slice(ag_tensor_grad(f->w), 0, 2, 3, 1);
    assert_int_equal(ag_fill_(row, INFINITY), AG_OK);
  }
  ag_status st = AG_OK;
  if (unscale_first) st = ag_grad_scaler_unscale_(f->scaler, f->opt);
  if (st == AG_OK) st = ag_grad_scaler_step(f->scaler, f->opt);
  if (st == AG_OK) st = ag_grad_scaler_update(f->scaler);
  ag_optimizer_zero_grad(f->opt);
  ag_scope_end();
  return st;
}

/* Parameters and optimizer state, flattened to host floats. */
typedef struct snap {
  float v[4 * (IN * OUT + OUT)];
  int n;
} snap;

static void take(fixture *f, snap *s) {
  ag_param_list all = {0};
  assert_int_equal(ag_params_extend(&all, "", &f->params), AG_OK);
  assert_int_equal(ag_optimizer_state(f->opt, &all), AG_OK);
  s->n = 0;
  for (int i = 0; i < all.count; i++) {
    int64_t n = ag_tensor_numel(all.tensors[i]);
    assert_int_equal(ag_tensor_dtype(all.tensors[i]), AG_F32); /* master weights and state */
    assert_int_equal(ag_to_host(all.tensors[i], s->v + s->n, (size_t)n * sizeof(float)), AG_OK);
    s->n += (int)n;
  }
  ag_params_free(&all);
}

static bool same(const snap *a, const snap *b) {
  return a->n == b->n && memcmp(a->v, b->v, (size_t)a->n * sizeof(float)) == 0;
}

static void overflow_case(ag_device dev, bool adamw, bool unscale_first) {
  ag_grad_scaler_options so = ag_grad_scaler_defaults();
  so.init_scale = 1024;
  fixture f;
  fixture_init(&f, dev, adamw, &so);
  snap s0, s1, s2, s3;
  take(&f, &s0);
  assert_int_equal(scaled_step(&f, false, unscale_first), AG_OK);
  take(&f, &s1);
  assert_false(same(&s0, &s1));
  assert_true(ag_grad_scaler_get_scale(f.scaler) == 1024.0);
  assert_int_equal(ag_grad_scaler_skipped_steps(f.scaler), 0);
  /* the injected overflow: nothing moves, the scale halves */
  assert_int_equal(scaled_step(&f, true, unscale_first), AG_OK);
  take(&f, &s2);
  assert_true(same(&s1, &s2));
  assert_true(ag_grad_scaler_get_scale(f.scaler) == 512.0);
  assert_int_equal(ag_grad_scaler_skipped_steps(f.scaler), 1);
  /* and the next clean step updates again */
  assert_int_equal(scaled_step(&f, false, unscale_first), AG_OK);
  take(&f, &s3);
  assert_false(same(&s2, &s3));
  for (int i = 0; i < s3.n; i++) assert_true(isfinite(s3.v[i]));
  assert_true(ag_grad_scaler_get_scale(f.scaler) == 512.0);
  assert_int_equal(ag_grad_scaler_skipped_steps(f.scaler), 1);
  fixture_free(&f);
}

static void test_overflow_skips_step(void **state) {
  for (int which = 0; which < N_DEV; which++) {
    ag_device dev;
    if (!device_for(which, &dev)) continue;
    for (int adamw = 0; adamw < 2; adamw++)
      for (int un = 0; un < 2; un++) {
        print_message("device %d %s %s\n", which, adamw ? "adamw" : "sgd", un ? "unscale_+step" : "fused step");
        overflow_case(dev, adamw, un);
      }
  }
}

/* growth_interval 2 from scale 8: two clean steps double it, an overflow
 * halves it and restarts the count. */
static void test_growth_and_backoff(void **state) {
  for (int which = 0; which < N_DEV; which++) {
    ag_device dev;
    if (!device_for(which, &dev)) continue;
    ag_grad_scaler_options so = {.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5,
                                 .growth_interval = 2, .enabled = true};
    fixture f;
    fixture_init(&f, dev, true, &so);
    const bool inject[] = {false, false, true, false, false, false};
    const double want[] = {8, 16, 8, 8, 16, 16};
    for (int i = 0; i < 6; i++) {
      assert_int_equal(scaled_step(&f, inject[i], false), AG_OK);
      double sc = ag_grad_scaler_get_scale(f.scaler);
      if (sc != want[i]) fail_msg("step %d: scale %g, expected %g", i, sc, want[i]);
    }
    assert_int_equal(ag_grad_scaler_skipped_steps(f.scaler), 1);
    fixture_free(&f);
  }
}

/* unscale_ leaves the gradients a plain f32 backward would give, within f16
 * rounding; gradients of f32 parameters arrive in f32. */
static void test_unscale_matches_unscaled(void **state) {
  for (int which = 0; which < N_DEV; which++) {
    ag_device dev;
    if (!device_for(which, &dev)) continue;
    ag_grad_scaler_options off = ag_grad_scaler_defaults();
    off.enabled = false;
    fixture f;
    fixture_init(&f, dev, true, &off);
    ag_scope_begin();
    forward_backward(&f, AG_F16);
    float ref[IN * OUT], got[IN * OUT];
    assert_int_equal(ag_to_host(ag_tensor_grad(f.w), ref, sizeof ref), AG_OK);
    ag_optimizer_zero_grad(f.opt);
    ag_scope_end();
    ag_grad_scaler_free(f.scaler);
    f.scaler = ag_grad_scaler_create(dev, NULL);
    ag_scope_begin();
    forward_backward(&f, AG_F16);
    assert_int_equal(ag_tensor_dtype(ag_tensor_grad(f.w)), AG_F32);
    assert_int_equal(ag_tensor_dtype(ag_tensor_grad(f.b)), AG_F32);
    assert_int_equal(ag_grad_scaler_unscale_params_(f.scaler, &f.params), AG_OK);
    assert_int_equal(ag_to_host(ag_tensor_grad(f.w), got, sizeof got), AG_OK);
    double mx = 0, err = 0;
    for (int i = 0; i < IN * OUT; i++) {
      mx = fmax(mx, fabs(ref[i]));
      err = fmax(err, fabs(ref[i] - got[i]));
    }
    /* the scaled backward rounds differently in f16: 2^-10 relative */
    if (!(mx > 0 && err <= 2e-3 * mx)) fail_msg("unscaled grads differ: max err %g of %g", err, mx);
    /* call order */
    assert_int_equal(ag_grad_scaler_unscale_(f.scaler, f.opt), AG_ERR_STATE);
    assert_int_equal(ag_grad_scaler_step(f.scaler, f.opt), AG_OK);
    assert_int_equal(ag_grad_scaler_step(f.scaler, f.opt), AG_ERR_STATE);
    assert_int_equal(ag_grad_scaler_unscale_(f.scaler, f.opt), AG_ERR_STATE);
    assert_int_equal(ag_grad_scaler_update(f.scaler), AG_OK);
    assert_int_equal(ag_grad_scaler_update(f.scaler), AG_ERR_STATE);
    ag_optimizer_zero_grad(f.opt);
    ag_scope_end();
    fixture_free(&f);
  }
}

static void test_options_and_disabled(void **state) {
  ag_grad_scaler_options o = ag_grad_scaler_defaults();
  assert_true(o.init_scale == 65536 && o.growth_factor == 2 && o.backoff_factor == 0.5 &&
              o.growth_interval == 2000 && o.enabled);
  ag_grad_scaler *s = ag_grad_scaler_create(AG_CPU, NULL);
  assert_true(ag_grad_scaler_get_scale(s) == 65536.0);
  ag_param_list st = {0};
  assert_int_equal(ag_grad_scaler_state(s, "scaler.", &st), AG_OK);
  assert_int_equal(st.count, 3);
  assert_string_equal(st.names[0], "scaler.scale");
  /* a scale loaded from a checkpoint is used by the next unscale */
  assert_int_equal(ag_fill_(st.tensors[0], 4.0), AG_OK);
  ag_params_free(&st);
  int64_t sh[1] = {2};
  float host[2] = {8, 12};
  ag_tensor *p = ag_from_host(AG_CPU, AG_F32, 1, sh, host);
  assert_int_equal(ag_tensor_set_requires_grad(p, true), AG_OK);
  ag_tensor *l = ag_sum(p, 0, NULL, false);
  ag_tensor *sl = ag_grad_scaler_scale(s, l);
  assert_true(ag_item(sl) == 80.0);
  assert_int_equal(ag_backward(sl, NULL, false), AG_OK);
  ag_param_list pl = {0};
  assert_int_equal(ag_params_add(&pl, "p", p), AG_OK);
  assert_int_equal(ag_grad_scaler_unscale_params_(s, &pl), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(p), host, sizeof host), AG_OK);
  assert_true(host[0] == 1.0f && host[1] == 1.0f);
  ag_params_free(&pl);
  ag_tensor_release(sl);
  ag_tensor_release(l);
  ag_tensor_release(p);
  ag_grad_scaler_free(s);

  const ag_grad_scaler_options bad[] = {
      {.init_scale = 0, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 10, .enabled = true},
      {.init_scale = 1, .growth_factor = 1, .backoff_factor = 0.5, .growth_interval = 10, .enabled = true},
      {.init_scale = 1, .growth_factor = 2, .backoff_factor = 1, .growth_interval = 10, .enabled = true},
      {.init_scale = 1, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 0, .enabled = true},
      {.init_scale = 1, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = (1 << 24) + 1,
       .enabled = true},
  };
  for (int i = 0; i < 5; i++) {
    assert_null(ag_grad_scaler_create(AG_CPU, &bad[i]));
    assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  }
  o.enabled = false;
  s = ag_grad_scaler_create(AG_CPU, &o);
  assert_non_null(s);
  assert_true(ag_grad_scaler_get_scale(s) == 1.0);
  assert_int_equal(ag_grad_scaler_update(s), AG_OK);
  assert_int_equal(ag_grad_scaler_skipped_steps(s), 0);
  ag_grad_scaler_free(s);
}

/* A whole scaled step (batch upload, f16 forward, scaled backward, unscale,
 * clipping, skipping step, scale update) with sync-debug in error mode: any
 * host sync would fail the step, and the counter must not move. */
static void test_no_sync_in_scaled_step(void **state) {
  for (int which = 0; which < N_DEV; which++) {
    ag_device dev;
    if (!device_for(which, &dev)) continue;
    fixture f;
    fixture_init(&f, dev, true, NULL);
    ag_tensor *xs = f.x;
    ag_sync_debug mode = ag_get_sync_debug();
    /* settle lazily created device state before counting */
    assert_int_equal(scaled_step(&f, false, true), AG_OK);
    assert_int_equal(ag_device_synchronize(dev), AG_OK);
    uint64_t before = ag_sync_count();
    ag_set_sync_debug(AG_SYNC_DEBUG_ERROR);
    float hx[N * IN];
    for (int i = 0; i < N * IN; i++) hx[i] = (float)((i * 37) % 11 - 5) / 10.0f;
    int64_t sx[2] = {N, IN};
    for (int step = 0; step < 3; step++) {
      ag_scope_begin();
      f.x = ag_from_host(dev, AG_F32, 2, sx, hx);
      forward_backward(&f, AG_F16);
      if (step == 1) assert_int_equal(ag_fill_(ag_tensor_grad(f.b), NAN), AG_OK);
      assert_int_equal(ag_grad_scaler_unscale_(f.scaler, f.opt), AG_OK);
      assert_non_null(ag_clip_grad_norm(&f.params, 1.0));
      assert_int_equal(ag_grad_scaler_step(f.scaler, f.opt), AG_OK);
      assert_int_equal(ag_grad_scaler_update(f.scaler), AG_OK);
      ag_optimizer_zero_grad(f.opt);
      ag_scope_end();
    }
    uint64_t after = ag_sync_count();
    ag_set_sync_debug(mode);
    f.x = xs;
    print_message("syncs in 3 scaled steps: %llu\n", (unsigned long long)(after - before));
    assert_true(after == before);
    /* the device did the work: one skipped step (the NaN), scale backed off once */
    assert_int_equal(ag_grad_scaler_skipped_steps(f.scaler), 1);
    assert_true(ag_grad_scaler_get_scale(f.scaler) == 32768.0);
    assert_true(ag_sync_count() == after + 2); /* the two reads: one sync each */
    fixture_free(&f);
  }
}

/* The example trained in f16 (with loss scaling) and bf16 (without) against
 * f32 from the same seed. Tolerance: 0.03 nats on the held-out and the final
 * training loss (about 1% of the ~2.4 reached; measured gaps are near
 * 0.001, a broken cast or a skipped-every-step scaler moves them by 0.3+). */
static void test_train_precisions(void **state) {
  charlm_result r[3];
  const ag_dtype dts[3] = {AG_F32, AG_F16, AG_BF16};
  for (int i = 0; i < 3; i++) {
    charlm_options o = charlm_defaults(CHARLM_MLP);
    o.device = AG_CPU;
    o.steps = 150;
    o.batch = 64;
    o.hidden = 128;
    o.warmup = 10;
    o.lr = 1e-2;
    o.eval_batches = 4;
    o.samples = 0;
    o.quiet = true;
    o.log = stderr;
    o.precision = dts[i];
    ag_status st = charlm_train(&o, &r[i]);
    if (st != AG_OK) fail_msg("%s: %s", ag_dtype_name(dts[i]), ag_last_error());
    print_message("%-4s: loss %.5f -> %.5f, held-out %.5f, %.1f s\n", ag_dtype_name(dts[i]), r[i].first_loss,
                  r[i].final_loss, r[i].val_loss, r[i].seconds);
  }
  assert_true(r[0].final_loss < r[0].first_loss - 0.3); /* f32 learned */
  for (int i = 1; i < 3; i++) {
    assert_true(fabs(r[i].val_loss - r[0].val_loss) <= 0.03);
    assert_true(fabs(r[i].final_loss - r[0].final_loss) <= 0.03);
    /* and the run really was in half precision */
    assert_true(r[i].final_loss != r[0].final_loss || r[i].val_loss != r[0].val_loss);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options_and_disabled),
      cmocka_unit_test(test_overflow_skips_step),
      cmocka_unit_test(test_growth_and_backoff),
      cmocka_unit_test(test_unscale_matches_unscaled),
      cmocka_unit_test(test_no_sync_in_scaled_step),
      cmocka_unit_test(test_train_precisions),
  };
  return cmocka_run_group_tests_name("amp", tests, NULL, NULL);
}
