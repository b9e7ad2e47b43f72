/* RMSprop (ag_rmsprop_create): the update against a host reference of
 * torch.optim.RMSprop's single-tensor update (f64 within 1e-12, f32 within
 * a few ulp), every option, two groups with their own lr and weight decay,
 * the state names and a checkpoint round trip, the refusals, and the same
 * run on the devices present. */
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

#define N 7
#define STEPS 5

/* torch's update for one parameter, in double: g = 3 p^2 (loss sum(p^3)). */
typedef struct ref_state {
  double sq[N], buf[N], ga[N];
} ref_state;

static void ref_step(double *p, ref_state *s, const ag_rmsprop_options *o, double lr, double wd) {
  for (int i = 0; i < N; i++) {
    double g = 3 * p[i] * p[i];
    if (wd != 0) g += wd * p[i];
    s->sq[i] = s->sq[i] * o->alpha + (1 - o->alpha) * g * g;
    double avg;
    if (o->centered) {
      s->ga[i] = s->ga[i] * o->alpha + (1 - o->alpha) * g;
      avg = sqrt(s->sq[i] - s->ga[i] * s->ga[i]) + o->eps;
    } else {
      avg = sqrt(s->sq[i]) + o->eps;
    }
    if (o->momentum > 0) {
      s->buf[i] = s->buf[i] * o->momentum + g / avg;
      p[i] -= lr * s->buf[i];
    } else {
      p[i] -= lr * g / avg;
    }
  }
}

static ag_tensor *param(ag_device d, ag_dtype dt, const double *v) {
  ag_tensor *t = ag_cast(ag_from_host(AG_CPU, AG_F64, 1, (const int64_t[]){N}, v), dt);
  assert_non_null(t);
  if (d.backend != AG_CPU.backend || d.index != AG_CPU.index) {
    ag_tensor *m = ag_to_device(t, d);
    ag_tensor_release(t);
    t = m;
    assert_non_null(t);
  }
  ag_tensor_set_requires_grad(t, true);
  return t;
}

static void read(ag_tensor *t, double *out) {
  ag_tensor *c = ag_cast(t, AG_F64);
  assert_non_null(c);
  assert_int_equal(ag_to_host(c, out, N * sizeof *out), AG_OK);
  ag_tensor_release(c);
}

static void backward_cubes(ag_tensor *const *ps, int n) {
  ag_scope_begin();
  ag_tensor *loss = NULL;
  for (int i = 0; i < n; i++) {
    ag_tensor *s = ag_sum(ag_mul(ps[i], ag_mul(ps[i], ps[i])), 0, NULL, false);
    loss = loss ? ag_add(loss, s) : s;
  }
  assert_int_equal(ag_backward(loss, NULL, false), AG_OK);
  ag_scope_end();
}

static const double P0[N] = {0.5, -0.3, 0.8, 0.1, -0.9, 0.25, 0.6};
static const double P1[N] = {-0.2, 0.4, 0.7, -0.65, 0.05, 0.33, -0.5};

/* Two groups (P0: the options' lr and decay; P1: its own) for STEPS steps
 * on device d in dtype dt; the largest error against the reference,
 * relative to max(1, |p|). */
static double run_case(ag_device d, ag_dtype dt, ag_rmsprop_options o) {
  ag_tensor *a = param(d, dt, P0), *b = param(d, dt, P1);
  ag_param_list la = {0}, lb = {0};
  ag_params_add(&la, "a", a);
  ag_params_add(&lb, "b", b);
  const double lr1 = o.lr * 0.5, wd1 = 0.05;
  ag_param_group g[2] = {{&la, AG_GROUP_INHERIT, AG_GROUP_INHERIT}, {&lb, lr1, wd1}};
  ag_optimizer *opt = ag_rmsprop_create_groups(g, 2, &o);
  if (!opt) fail_msg("%s", ag_last_error());
  double ra[N], rb[N];
  memcpy(ra, P0, sizeof ra);
  memcpy(rb, P1, sizeof rb);
  ref_state sa, sb;
  memset(&sa, 0, sizeof sa);
  memset(&sb, 0, sizeof sb);
  for (int s = 0; s < STEPS; s++) {
    backward_cubes((ag_tensor *[]){a, b}, 2);
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    ref_step(ra, &sa, &o, o.lr, o.weight_decay);
    ref_step(rb, &sb, &o, lr1, wd1);
  }
  assert_int_equal(ag_optimizer_steps(opt), STEPS);
  double xa[N], xb[N], err = 0;
  read(a, xa);
  read(b, xb);
  for (int i = 0; i < N; i++) {
    err = fmax(err, fabs(xa[i] - ra[i]) / fmax(1, fabs(ra[i])));
    err = fmax(err, fabs(xb[i] - rb[i]) / fmax(1, fabs(rb[i])));
  }
  ag_optimizer_free(opt);
  ag_params_free(&la);
  ag_params_free(&lb);
  ag_tensor_release(a);
  ag_tensor_release(b);
  return err;
}

static ag_rmsprop_options opts(double momentum, bool centered, double wd) {
  ag_rmsprop_options o = ag_rmsprop_defaults();
  o.lr = 0.01;
  o.alpha = 0.9;
  o.momentum = momentum;
  o.centered = centered;
  o.weight_decay = wd;
  return o;
}

static void test_against_reference(void **state) {
  (void)state;
  const ag_rmsprop_options cases[] = {opts(0, false, 0), opts(0.9, false, 0), opts(0, true, 0.1),
                                      opts(0.5, true, 0.01)};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    double e64 = run_case(AG_CPU, AG_F64, cases[k]), e32 = run_case(AG_CPU, AG_F32, cases[k]);
    printf("# case %zu: f64 error %.3g, f32 error %.3g\n", k, e64, e32);
    assert_true(e64 <= 1e-12);
    assert_true(e32 <= 1e-6);
  }
}

static void test_defaults_state_and_resume(void **state) {
  (void)state;
  ag_rmsprop_options d = ag_rmsprop_defaults();
  assert_true(d.lr == 1e-2 && d.alpha == 0.99 && d.eps == 1e-8 && d.weight_decay == 0 && d.momentum == 0 &&
              !d.centered);
  ag_rmsprop_options o = opts(0.9, true, 0);
  ag_tensor *a = param(AG_CPU, AG_F32, P0), *b = param(AG_CPU, AG_F32, P0);
  ag_param_list la = {0}, lb = {0};
  ag_params_add(&la, "w", a);
  ag_params_add(&lb, "w", b);
  ag_optimizer *oa = ag_rmsprop_create(&la, &o), *ob = ag_rmsprop_create(&lb, &o);
  assert_non_null(oa);
  assert_non_null(ob);
  ag_param_list st = {0};
  assert_int_equal(ag_optimizer_state(oa, &st), AG_OK);
  assert_int_equal(st.count, 3);
  assert_string_equal(st.names[0], "w.square_avg");
  assert_string_equal(st.names[1], "w.momentum_buffer");
  assert_string_equal(st.names[2], "w.grad_avg");
  for (int s = 0; s < 3; s++) {
    backward_cubes(&a, 1);
    assert_int_equal(ag_optimizer_step(oa), AG_OK);
    ag_optimizer_zero_grad(oa);
  }
  /* copy parameter, state and step count into the second: the next steps agree bit for bit */
  ag_param_list sb = {0};
  assert_int_equal(ag_optimizer_state(ob, &sb), AG_OK);
  for (int i = 0; i < st.count; i++) assert_int_equal(ag_copy_(sb.tensors[i], st.tensors[i]), AG_OK);
  ag_no_grad_begin();
  assert_int_equal(ag_copy_(b, a), AG_OK);
  ag_grad_mode_end();
  ag_optimizer_set_steps(ob, ag_optimizer_steps(oa));
  for (int s = 0; s < 2; s++) {
    backward_cubes(&a, 1);
    backward_cubes(&b, 1);
    assert_int_equal(ag_optimizer_step(oa), AG_OK);
    assert_int_equal(ag_optimizer_step(ob), AG_OK);
    ag_optimizer_zero_grad(oa);
    ag_optimizer_zero_grad(ob);
  }
  double x[N], y[N];
  read(a, x);
  read(b, y);
  assert_memory_equal(x, y, sizeof x);
  /* a parameter without a gradient is skipped */
  read(a, x);
  assert_int_equal(ag_optimizer_step(oa), AG_OK);
  read(a, y);
  assert_memory_equal(x, y, sizeof x);
  /* set_lr reaches it */
  assert_int_equal(ag_optimizer_set_lr(oa, 0.5), AG_OK);
  assert_true(ag_optimizer_lr(oa) == 0.5);
  ag_params_free(&st);
  ag_params_free(&sb);
  ag_optimizer_free(oa);
  ag_optimizer_free(ob);
  ag_params_free(&la);
  ag_params_free(&lb);
  ag_tensor_release(a);
  ag_tensor_release(b);
}

static void test_refusals(void **state) {
  (void)state;
  ag_tensor *a = param(AG_CPU, AG_F32, P0);
  ag_param_list l = {0};
  ag_params_add(&l, "w", a);
  const double bad[] = {-1, NAN, INFINITY};
  for (int k = 0; k < 3; k++) {
    for (int f = 0; f < 5; f++) {
      ag_rmsprop_options o = ag_rmsprop_defaults();
      double *fields[] = {&o.lr, &o.alpha, &o.eps, &o.weight_decay, &o.momentum};
      *fields[f] = bad[k];
      assert_null(ag_rmsprop_create(&l, &o));
      assert_int_equal(ag_last_status(), AG_ERR_INVALID);
      assert_non_null(strstr(ag_last_error(), "ag_rmsprop_create"));
    }
  }
  ag_params_add(&l, "again", a);
  assert_null(ag_rmsprop_create(&l, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_params_free(&l);
  ag_tensor *i = ag_zeros(AG_CPU, AG_I32, 1, (const int64_t[]){3});
  ag_params_add(&l, "i", i);
  assert_null(ag_rmsprop_create(&l, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_params_free(&l);
  ag_params_add(&l, "w", a);
  ag_optimizer *o = ag_rmsprop_create(&l, NULL);
  assert_non_null(o);
  ag_tensor *one = ag_scalar(AG_CPU, AG_F32, 1.0);
  assert_int_equal(ag_optimizer_step_amp(o, one, NULL), AG_ERR_UNSUPPORTED);
  assert_int_equal(ag_optimizer_step_amp(o, NULL, NULL), AG_OK);
  assert_null(ag_rmsprop_create_groups(NULL, 1, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_tensor_release(one);
  ag_optimizer_free(o);
  ag_params_free(&l);
  ag_tensor_release(i);
  ag_tensor_release(a);
}

static void test_devices(void **state) {
  (void)state;
  const char *names[] = {"opencl:0", "gpuemu:0", "vulkan:0"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    ag_device d;
    ag_device_props p;
    if (ag_device_parse(names[k], &d) != AG_OK || ag_device_props_get(d, &p) != AG_OK) {
      ag_error_clear();
      printf("# %s: not present\n", names[k]);
      continue;
    }
    double e = run_case(d, AG_F32, opts(0.5, true, 0.01));
    printf("# %s: f32 error %.3g\n", names[k], e);
    assert_true(e <= 1e-6);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_reference),
      cmocka_unit_test(test_defaults_state_and_resume),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
