/* The C half of test_training.py: a small MLP (8 -> 16 -> 1, ReLU, MSE,
 * AdamW) trained for `steps` steps on data and initial weights drawn from
 * the default generator after ag_manual_seed(0), printing the loss of every
 * step. The Python test builds the same run through the anygrad package and
 * compares step by step.
 * Usage: python_mlp_ref [device] [steps] */
#include <stdio.h>
#include <stdlib.h>

#include <anygrad/anygrad.h>

int main(int argc, char **argv) {
  ag_device d = AG_CPU;
  if (argc > 1 && ag_device_parse(argv[1], &d) != AG_OK) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 2;
  }
  int steps = argc > 2 ? atoi(argv[2]) : 20;
  ag_manual_seed(0);
  const int64_t sx[2] = {64, 8}, sy[2] = {64, 1}, s1[2] = {8, 16}, s2[2] = {16, 1};
  const int64_t sb1[1] = {16}, sb2[1] = {1};
  ag_tensor *x = ag_randn(d, AG_F32, 2, sx, 0, 1, NULL);
  ag_tensor *y = ag_randn(d, AG_F32, 2, sy, 0, 1, NULL);
  ag_tensor *w1 = ag_randn(d, AG_F32, 2, s1, 0, 0.3, NULL);
  ag_tensor *w2 = ag_randn(d, AG_F32, 2, s2, 0, 0.3, NULL);
  ag_tensor *b1 = ag_zeros(d, AG_F32, 1, sb1);
  ag_tensor *b2 = ag_zeros(d, AG_F32, 1, sb2);
  ag_param_list params = {0};
  ag_tensor *ps[4] = {w1, b1, w2, b2};
  for (int i = 0; i < 4; i++) ag_tensor_set_requires_grad(ps[i], true);
  ag_params_add(&params, "w1", w1);
  ag_params_add(&params, "b1", b1);
  ag_params_add(&params, "w2", w2);
  ag_params_add(&params, "b2", b2);
  ag_adamw_options o = ag_adamw_defaults();
  o.lr = 1e-2;
  ag_optimizer *opt = ag_adamw_create(&params, &o);
  if (!opt) {
    fprintf(stderr, "%s\n", ag_last_error());
    return 1;
  }
  for (int s = 0; s < steps; s++) {
    ag_scope_begin();
    ag_tensor *h = ag_relu(ag_add(ag_matmul(x, w1), b1));
    ag_tensor *out = ag_add(ag_matmul(h, w2), b2);
    ag_tensor *loss = ag_mse_loss(out, y, AG_REDUCTION_MEAN);
    ag_backward(loss, NULL, false);
    ag_optimizer_step(opt);
    ag_optimizer_zero_grad(opt);
    printf("%d %.9g\n", s, ag_item(loss));
    ag_scope_end();
    if (ag_last_status() != AG_OK) {
      fprintf(stderr, "%s\n", ag_last_error());
      return 1;
    }
  }
  ag_optimizer_free(opt);
  ag_params_free(&params);
  for (int i = 0; i < 4; i++) ag_tensor_release(ps[i]);
  ag_tensor_release(x);
  ag_tensor_release(y);
  return 0;
}
