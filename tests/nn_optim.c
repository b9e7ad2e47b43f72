/* nn modules and optimizers: SGD (momentum, nesterov, weight decay) and
 * AdamW against host reference updates, gradient clipping over more tensors
 * than one kernel list holds, gradient accumulation, the cosine schedule,
 * and GPT/attention shapes and causality. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

#define N 5

static ag_tensor *param(const float *v) {
  int64_t s = N;
  ag_tensor *t = ag_from_host(AG_CPU, AG_F32, 1, &s, v);
  ag_tensor_set_requires_grad(t, true);
  return t;
}

/* loss = sum(c * p^2): grad = 2 c p */
static void backward_quadratic(ag_tensor *p, const float *c) {
  int64_t s = N;
  ag_scope_begin();
  ag_tensor *ct = ag_from_host(AG_CPU, AG_F32, 1, &s, c);
  assert_int_equal(ag_backward(ag_sum(ag_mul(ct, ag_mul(p, p)), 0, NULL, false), NULL, false), AG_OK);
  ag_scope_end();
}

static void check_close(ag_tensor *t, const double *want, double tol) {
  float got[N];
  assert_int_equal(ag_to_host(t, got, sizeof got), AG_OK);
  for (int i = 0; i < N; i++)
    if (fabs(got[i] - want[i]) > tol * fmax(1.0, fabs(want[i]))) fail_msg("[%d] = %.7f, want %.7f", i, got[i], want[i]);
}

static const float P0[N] = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f}, C[N] = {0.5f, 1.0f, 2.0f, 0.1f, 3.0f};

static void run_sgd(bool nesterov) {
  ag_tensor *p = param(P0);
  ag_param_list l = {0};
  ag_params_add(&l, "p", p);
  ag_sgd_options o = {.lr = 0.05, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = nesterov};
  ag_optimizer *opt = ag_sgd_create(&l, &o);
  assert_non_null(opt);
  double ref[N], buf[N] = {0};
  for (int i = 0; i < N; i++) ref[i] = P0[i];
  for (int step = 0; step < 4; step++) {
    backward_quadratic(p, C);
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    for (int i = 0; i < N; i++) { /* torch.optim.SGD */
      double g = 2 * C[i] * ref[i] + o.weight_decay * ref[i];
      buf[i] = step == 0 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
      double d = nesterov ? g + o.momentum * buf[i] : buf[i];
      ref[i] -= o.lr * d;
    }
  }
  check_close(p, ref, 1e-5);
  ag_optimizer_free(opt);
  ag_params_free(&l);
  ag_tensor_release(p);
}

static void test_sgd(void **state) {
  (void)state;
  run_sgd(false);
  run_sgd(true);
  ag_sgd_options bad = {.lr = 0.1, .momentum = 0, .nesterov = true};
  ag_param_list l = {0};
  assert_null(ag_sgd_create(&l, &bad));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
}

static void test_adamw(void **state) {
  (void)state;
  ag_tensor *p = param(P0);
  ag_param_list l = {0};
  ag_params_add(&l, "p", p);
  ag_adamw_options o = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  ag_optimizer *opt = ag_adamw_create(&l, &o);
  double ref[N], m[N] = {0}, v[N] = {0};
  for (int i = 0; i < N; i++) ref[i] = P0[i];
  for (int t = 1; t <= 5; t++) {
    backward_quadratic(p, C);
    assert_int_equal(ag_optimizer_step(opt), AG_OK);
    ag_optimizer_zero_grad(opt);
    for (int i = 0; i < N; i++) { /* torch.optim.AdamW */
      double g = 2 * C[i] * ref[i];
      ref[i] *= 1 - o.lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      double mh = m[i] / (1 - pow(o.beta1, t)), vh = v[i] / (1 - pow(o.beta2, t));
      ref[i] -= o.lr * mh / (sqrt(vh) + o.eps);
    }
  }
  check_close(p, ref, 1e-5);
  assert_int_equal(ag_optimizer_steps(opt), 5);
  ag_param_list st = {0};
  assert_int_equal(ag_optimizer_state(opt, &st), AG_OK);
  assert_int_equal(st.count, 2);
  assert_string_equal(st.names[1], "p.exp_avg_sq");
  ag_params_free(&st);
  /* AdamW keeps f32 parameters: others are refused with a reason */
  int64_t s = 2;
  ag_tensor *h = ag_zeros(AG_CPU, AG_F64, 1, &s);
  ag_param_list l2 = {0};
  ag_params_add(&l2, "h", h);
  assert_null(ag_adamw_create(&l2, &o));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_params_free(&l2);
  ag_tensor_release(h);
  ag_optimizer_free(opt);
  ag_params_free(&l);
  ag_tensor_release(p);
}

/* 600 one-element gradients (more than one multi-tensor list) with known
 * values: the norm and the clipped gradients match the host computation. */
static void test_clip_grad_norm(void **state) {
  (void)state;
  enum { K = 600 };
  ag_param_list l = {0};
  double ss = 0;
  for (int k = 0; k < K; k++) {
    int64_t s = 1;
    float v = 0;
    ag_tensor *p = ag_from_host(AG_CPU, AG_F32, 1, &s, &v);
    ag_tensor_set_requires_grad(p, true);
    ag_scope_begin();
    /* grad of sum(p * c) is c */
    ag_tensor *c = ag_full(AG_CPU, AG_F32, 1, &s, 0.01 * (k % 7 + 1));
    assert_int_equal(ag_backward(ag_sum(ag_mul(p, c), 0, NULL, false), NULL, false), AG_OK);
    ag_scope_end();
    ss += pow(0.01 * (k % 7 + 1), 2);
    char name[16];
    snprintf(name, sizeof name, "p%d", k);
    ag_params_add(&l, name, p);
    ag_tensor_release(p);
  }
  double norm = sqrt(ss), max_norm = 0.5, coef = fmin(1.0, max_norm / (norm + 1e-6));
  ag_scope_begin();
  ag_tensor *n = ag_clip_grad_norm(&l, max_norm);
  assert_non_null(n);
  assert_true(fabs(ag_item(n) - norm) < 1e-5 * norm);
  for (int k = 0; k < K; k += 97) {
    float g;
    assert_int_equal(ag_to_host(ag_tensor_grad(l.tensors[k]), &g, sizeof g), AG_OK);
    assert_true(fabs(g - 0.01 * (k % 7 + 1) * coef) < 1e-6);
  }
  ag_scope_end();
  assert_null(ag_clip_grad_norm(&l, 0.0));
  ag_params_free(&l);
}

/* Two micro-batches of half the data accumulate the same gradient as one
 * full batch (mean losses scaled by 1/2). */
static void test_gradient_accumulation(void **state) {
  (void)state;
  int64_t sizes[2] = {4, 3};
  ag_mlp m;
  assert_int_equal(ag_mlp_init(&m, AG_CPU, AG_F32, 2, sizes, AG_ACT_NONE, NULL), AG_OK);
  int64_t xs[2] = {8, 4}, ys = 8, hs[2] = {4, 4}, hy = 4;
  float x[32];
  int32_t y[8] = {0, 1, 2, 0, 1, 2, 0, 1};
  for (int i = 0; i < 32; i++) x[i] = (float)sin(i * 0.7);
  ag_scope_begin();
  ag_tensor *X = ag_from_host(AG_CPU, AG_F32, 2, xs, x), *Y = ag_from_host(AG_CPU, AG_I32, 1, &ys, y);
  assert_int_equal(ag_backward(ag_cross_entropy(ag_mlp_forward(&m, X), Y, AG_REDUCTION_MEAN, -1), NULL, false), AG_OK);
  float full[12], acc[12];
  assert_int_equal(ag_to_host(ag_tensor_grad(m.params.tensors[0]), full, sizeof full), AG_OK);
  ag_params_zero_grad(&m.params);
  for (int h = 0; h < 2; h++) {
    ag_tensor *Xh = ag_from_host(AG_CPU, AG_F32, 2, hs, x + 16 * h), *Yh = ag_from_host(AG_CPU, AG_I32, 1, &hy, y + 4 * h);
    ag_tensor *l = ag_mul_scalar(ag_cross_entropy(ag_mlp_forward(&m, Xh), Yh, AG_REDUCTION_MEAN, -1), 0.5);
    assert_int_equal(ag_backward(l, NULL, false), AG_OK);
  }
  assert_int_equal(ag_to_host(ag_tensor_grad(m.params.tensors[0]), acc, sizeof acc), AG_OK);
  for (int i = 0; i < 12; i++) assert_true(fabsf(full[i] - acc[i]) < 1e-6f);
  ag_scope_end();
  ag_mlp_free(&m);
}

static void test_cosine_schedule(void **state) {
  (void)state;
  assert_true(fabs(ag_lr_cosine(0, 10, 110, 1.0, 0.1) - 0.1) < 1e-12);
  assert_true(fabs(ag_lr_cosine(9, 10, 110, 1.0, 0.1) - 1.0) < 1e-12);
  assert_true(fabs(ag_lr_cosine(10, 10, 110, 1.0, 0.1) - 1.0) < 1e-12);
  assert_true(fabs(ag_lr_cosine(60, 10, 110, 1.0, 0.1) - 0.55) < 1e-12);
  assert_true(fabs(ag_lr_cosine(110, 10, 110, 1.0, 0.1) - 0.1) < 1e-12);
  assert_true(fabs(ag_lr_cosine(500, 10, 110, 1.0, 0.1) - 0.1) < 1e-12);
}

/* The GPT's logits at position t do not depend on tokens after t. */
static void test_gpt_causal(void **state) {
  (void)state;
  ag_gpt_config c = {.vocab_size = 11, .block_size = 6, .n_layer = 2, .n_embd = 8, .n_head = 2};
  ag_gpt m;
  ag_generator *g = ag_generator_create(3);
  assert_int_equal(ag_gpt_init(&m, &c, AG_CPU, AG_F32, g), AG_OK);
  assert_int_equal(m.params.count, 2 + 2 * 12 + 2); /* the head is wte.weight (tied) */
  assert_ptr_equal(m.head.weight, m.wte.weight);
  int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 2, 3, 9, 0, 7};
  int64_t s[2] = {1, 6};
  ag_scope_begin();
  ag_tensor *la = ag_gpt_forward(&m, ag_from_host(AG_CPU, AG_I32, 2, s, a), false, NULL);
  ag_tensor *lb = ag_gpt_forward(&m, ag_from_host(AG_CPU, AG_I32, 2, s, b), false, NULL);
  assert_int_equal(ag_tensor_dim(la, 2), 11);
  float fa[66], fb[66];
  assert_int_equal(ag_to_host(la, fa, sizeof fa), AG_OK);
  assert_int_equal(ag_to_host(lb, fb, sizeof fb), AG_OK);
  for (int i = 0; i < 33; i++) assert_true(fabsf(fa[i] - fb[i]) < 1e-5f); /* positions 0..2 equal */
  float diff = 0;
  for (int i = 33; i < 66; i++) diff += fabsf(fa[i] - fb[i]);
  assert_true(diff > 1e-3f);
  int64_t s7[2] = {1, 7};
  int32_t seven[7] = {0};
  assert_null(ag_gpt_forward(&m, ag_from_host(AG_CPU, AG_I32, 2, s7, seven), false, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  ag_scope_end();
  ag_gpt_free(&m);
  ag_generator_free(g);
}

/* Host copy of an f32 tensor of n elements. */
static void host(ag_tensor *t, float *out, size_t n) { assert_int_equal(ag_to_host(t, out, n * sizeof *out), AG_OK); }

/* A Linear forward with bias is one matmul node whose GEMM adds the bias
 * (no separate add node), with the values and gradients of x @ W^T + b. */
static void test_linear_folds_bias(void **state) {
  (void)state;
  ag_generator *g = ag_generator_create(5);
  ag_linear l;
  assert_int_equal(ag_linear_init(&l, AG_CPU, AG_F32, 4, 3, true, g), AG_OK);
  ag_no_grad_begin();
  const int64_t bs = 3;
  ag_tensor *bv = ag_randn(AG_CPU, AG_F32, 1, &bs, 0, 1, g); /* non-zero bias */
  assert_int_equal(ag_copy_(l.bias, bv), AG_OK);
  ag_tensor_release(bv);
  ag_grad_mode_end();
  const int64_t xs[3] = {2, 5, 4};
  ag_tensor *x = ag_randn(AG_CPU, AG_F32, 3, xs, 0, 1, g);
  ag_tensor_set_requires_grad(x, true);
  float y1[30], y2[30], gx[2][40], gw[2][12], gb[2][3];
  for (int pass = 0; pass < 2; pass++) {
    ag_scope_begin();
    int64_t n0 = ag_live_nodes();
    ag_tensor *y;
    if (pass == 0) {
      y = ag_linear_forward(&l, x);
      assert_int_equal(ag_live_nodes() - n0, 2); /* the weight's transpose view and one matmul */
    } else {
      y = ag_add(ag_matmul(x, ag_transpose(l.weight, 0, 1)), l.bias);
    }
    host(y, pass ? y2 : y1, 30);
    ag_generator *g2 = ag_generator_create(7); /* the same upstream gradient in both passes */
    ag_tensor *up = ag_randn(AG_CPU, AG_F32, 3, (int64_t[]){2, 5, 3}, 0, 1, g2);
    ag_generator_free(g2);
    assert_int_equal(ag_backward(ag_sum(ag_mul(y, up), 0, NULL, false), NULL, false), AG_OK);
    host(ag_tensor_grad(x), gx[pass], 40);
    host(ag_tensor_grad(l.weight), gw[pass], 12);
    host(ag_tensor_grad(l.bias), gb[pass], 3);
    ag_tensor_zero_grad(x);
    ag_tensor_zero_grad(l.weight);
    ag_tensor_zero_grad(l.bias);
    ag_scope_end();
  }
  for (int i = 0; i < 30; i++) assert_true(fabsf(y1[i] - y2[i]) < 1e-5f);
  for (int i = 0; i < 40; i++) assert_true(fabsf(gx[0][i] - gx[1][i]) < 1e-5f);
  for (int i = 0; i < 12; i++) assert_true(fabsf(gw[0][i] - gw[1][i]) < 1e-4f);
  for (int i = 0; i < 3; i++) assert_true(fabsf(gb[0][i] - gb[1][i]) < 1e-4f && gb[0][i] != 0.0f);
  ag_tensor_release(x);
  ag_linear_free(&l);
  ag_generator_free(g);
}

/* Loss of a small GPT on fixed tokens, backward; grads stay on the params. */
static void gpt_backward(ag_gpt *m) {
  int32_t ids[12], tg[12];
  for (int i = 0; i < 12; i++) ids[i] = (i * 7 + 3) % 11, tg[i] = (i * 5 + 1) % 11;
  int64_t s[2] = {2, 6}, f[1] = {12}, l2[2] = {12, 11};
  ag_scope_begin();
  ag_tensor *x = ag_from_host(AG_CPU, AG_I32, 2, s, ids), *y = ag_from_host(AG_CPU, AG_I32, 1, f, tg);
  ag_tensor *logits = ag_reshape(ag_gpt_forward(m, x, true, NULL), 2, l2);
  assert_int_equal(ag_backward(ag_cross_entropy(logits, y, AG_REDUCTION_MEAN, -1), NULL, false), AG_OK);
  ag_scope_end();
}

/* GPT-2 weight tying: the tied wte.weight's gradient is the sum of its
 * embedding use and its head use, which an untied model with the same
 * values reports as two gradients (wte.weight, head.weight). */
static void test_gpt_tied_gradient(void **state) {
  (void)state;
  ag_gpt_config c = {.vocab_size = 11, .block_size = 6, .n_layer = 1, .n_embd = 8, .n_head = 2};
  ag_gpt t, u;
  ag_generator *g = ag_generator_create(3);
  assert_int_equal(ag_gpt_init(&t, &c, AG_CPU, AG_F32, g), AG_OK);
  c.untied_head = true;
  assert_int_equal(ag_gpt_init(&u, &c, AG_CPU, AG_F32, g), AG_OK);
  assert_int_equal(u.params.count, t.params.count + 1);
  /* u gets t's values, its separate head a copy of t's wte */
  ag_no_grad_begin();
  for (int i = 0; i < t.params.count; i++) {
    ag_tensor *dst = NULL;
    for (int j = 0; j < u.params.count; j++)
      if (!strcmp(u.params.names[j], t.params.names[i])) dst = u.params.tensors[j];
    assert_non_null(dst);
    assert_int_equal(ag_copy_(dst, t.params.tensors[i]), AG_OK);
  }
  assert_int_equal(ag_copy_(u.head.weight, t.wte.weight), AG_OK);
  ag_grad_mode_end();
  gpt_backward(&t);
  gpt_backward(&u);
  float gt[88], ge[88], gh[88];
  assert_int_equal(ag_to_host(ag_tensor_grad(t.wte.weight), gt, sizeof gt), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(u.wte.weight), ge, sizeof ge), AG_OK);
  assert_int_equal(ag_to_host(ag_tensor_grad(u.head.weight), gh, sizeof gh), AG_OK);
  double head_norm = 0;
  for (int i = 0; i < 88; i++) {
    head_norm += fabs(gh[i]);
    if (fabsf(gt[i] - (ge[i] + gh[i])) > 1e-5f) fail_msg("[%d] tied %g, embedding %g + head %g", i, gt[i], ge[i], gh[i]);
  }
  assert_true(head_norm > 1e-3); /* the head's share is not nothing */
  ag_gpt_free(&t);
  ag_gpt_free(&u);
  ag_generator_free(g);
}

/* A tied model's checkpoint stores the shared tensor once and loads back
 * into a tied model; across tying, ag_gpt_check_tying refuses clearly. */
static void test_gpt_tied_checkpoint(void **state) {
  (void)state;
  char path[64];
  snprintf(path, sizeof path, "/tmp/ag_tied_%d.safetensors", (int)getpid());
  ag_gpt_config c = {.vocab_size = 11, .block_size = 6, .n_layer = 1, .n_embd = 8, .n_head = 2};
  ag_gpt a, b, u;
  ag_generator *g = ag_generator_create(4);
  assert_int_equal(ag_gpt_init(&a, &c, AG_CPU, AG_F32, g), AG_OK);
  assert_int_equal(ag_gpt_init(&b, &c, AG_CPU, AG_F32, g), AG_OK); /* other values */
  c.untied_head = true;
  assert_int_equal(ag_gpt_init(&u, &c, AG_CPU, AG_F32, g), AG_OK);
  assert_int_equal(ag_safetensors_save(path, &a.params, 0, NULL, NULL), AG_OK);
  ag_safetensors *f;
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  int n = ag_safetensors_count(f);
  assert_int_equal(n, a.params.count);
  const char *names[64];
  for (int i = 0; i < n; i++) {
    names[i] = ag_safetensors_name(f, i);
    assert_string_not_equal(names[i], "head.weight");
  }
  assert_int_equal(ag_gpt_check_tying(&b, n, names, NULL), AG_OK);
  assert_int_equal(ag_safetensors_load_into(f, &b.params), AG_OK);
  assert_int_equal(ag_gpt_check_tying(&u, n, names, NULL), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "untied_head = false"));
  assert_int_not_equal(ag_safetensors_load_into(f, &u.params), AG_OK); /* no head.weight in the file */
  ag_safetensors_close(f);
  /* b now computes a's logits, through the shared head */
  int32_t ids[6] = {1, 2, 3, 4, 5, 6};
  int64_t s[2] = {1, 6};
  float la[66], lb[66];
  ag_scope_begin();
  ag_tensor *x = ag_from_host(AG_CPU, AG_I32, 2, s, ids);
  assert_int_equal(ag_to_host(ag_gpt_forward(&a, x, false, NULL), la, sizeof la), AG_OK);
  assert_int_equal(ag_to_host(ag_gpt_forward(&b, x, false, NULL), lb, sizeof lb), AG_OK);
  ag_scope_end();
  for (int i = 0; i < 66; i++) assert_true(fabsf(la[i] - lb[i]) < 1e-6f);
  /* an untied file refuses a tied model */
  assert_int_equal(ag_safetensors_save(path, &u.params, 0, NULL, NULL), AG_OK);
  assert_int_equal(ag_safetensors_open(path, &f), AG_OK);
  n = ag_safetensors_count(f);
  for (int i = 0; i < n; i++) names[i] = ag_safetensors_name(f, i);
  assert_int_equal(ag_gpt_check_tying(&a, n, names, NULL), AG_ERR_CORRUPT);
  assert_non_null(strstr(ag_last_error(), "untied_head = true"));
  assert_int_equal(ag_gpt_check_tying(&u, n, names, NULL), AG_OK);
  ag_safetensors_close(f);
  remove(path);
  ag_gpt_free(&a);
  ag_gpt_free(&b);
  ag_gpt_free(&u);
  ag_generator_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sgd),           cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_clip_grad_norm), cmocka_unit_test(test_gradient_accumulation),
      cmocka_unit_test(test_cosine_schedule), cmocka_unit_test(test_gpt_causal),
      cmocka_unit_test(test_linear_folds_bias), cmocka_unit_test(test_gpt_tied_gradient),
      cmocka_unit_test(test_gpt_tied_checkpoint),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
