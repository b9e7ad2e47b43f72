/* Released tensor handles: every call given a tensor whose scope ended or
 * that was released returns AG_ERR_STATE naming the call and the release,
 * and never reads freed memory (the ASan build runs this program too). The
 * first case is the PyTorch habit of keeping `loss` past its step's scope.
 * Plain C with its own checks: the program must exit normally. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"

static int g_failed;

#define CHECK(cond)                                                                           \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              ag_last_error());                                                               \
      g_failed = 1;                                                                           \
    }                                                                                         \
  } while (0)

/* The last error is AG_ERR_STATE from `call`, saying how the tensor went. */
static void expect_released(const char *call, const char *by) {
  CHECK(ag_last_status() == AG_ERR_STATE);
  const char *m = ag_last_error();
  char head[96];
  snprintf(head, sizeof head, "%s: tensor ", call);
  bool site_ok = true;
#ifdef AG_SYNC_SITES
  site_ok = strstr(m, "use_after_release_test.c:") != NULL; /* the release's file:line */
#endif
  if (strncmp(m, head, strlen(head)) != 0 || !strstr(m, "was released") || !strstr(m, by) || !site_ok) {
    fprintf(stderr, "unexpected message for %s: %s\n", call, m);
    g_failed = 1;
  }
  ag_error_clear();
}

/* One training step of a tiny regressor; returns the loss, which the step's
 * scope owns. */
static ag_tensor *step(ag_tensor *w, ag_tensor *x, ag_tensor *y) {
  ag_tensor *pred = ag_matmul(x, w);
  ag_tensor *loss = ag_mse_loss(pred, y, AG_REDUCTION_MEAN);
  ag_backward(loss, NULL, false);
  return loss;
}

int main(void) {
  ag_tensor *w = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){3, 1});
  ag_tensor_set_requires_grad(w, true);
  ag_tensor *x = ag_ones(AG_CPU, AG_F32, 2, (int64_t[]){4, 3});
  ag_tensor *y = ag_zeros(AG_CPU, AG_F32, 2, (int64_t[]){4, 1});

  /* 1. the program: loss kept past the step's scope */
  ag_tensor *loss = NULL;
  ag_scope_begin();
  loss = step(w, x, y);
  CHECK(fabs(ag_item(loss) - 9.0) < 1e-6);
  ag_scope_end();
  double v = ag_item(loss);
  printf("ag_item(loss) after its scope ended: %s\n", ag_last_error());
  CHECK(isnan(v));
  expect_released("ag_item", "ag_scope_end");

  /* 2. the memory is reused by later steps: still refused */
  for (int i = 0; i < 100; i++) {
    ag_scope_begin();
    step(w, x, y);
    ag_scope_end();
  }
  v = ag_item(loss);
  CHECK(isnan(v));
  expect_released("ag_item", "ag_scope_end");

  /* 3. ops, views, properties, autograd and in-place writes on the dead
   * handle; a released tensor wins over a NULL beside it */
  CHECK(ag_add(loss, x) == NULL);
  expect_released("ag_add", "ag_scope_end");
  CHECK(ag_add(x, loss) == NULL);
  expect_released("ag_add", "ag_scope_end");
  CHECK(ag_relu(loss) == NULL);
  expect_released("ag_relu", "ag_scope_end");
  CHECK(ag_sum(loss, 0, NULL, false) == NULL);
  expect_released("ag_sum", "ag_scope_end");
  CHECK(ag_reshape(loss, 1, (int64_t[]){1}) == NULL);
  expect_released("ag_reshape", "ag_scope_end");
  CHECK(ag_cast(loss, AG_F64) == NULL);
  expect_released("ag_cast", "ag_scope_end");
  float host[1];
  CHECK(ag_to_host(loss, host, sizeof host) == AG_ERR_STATE);
  expect_released("ag_to_host", "ag_scope_end");
  CHECK(ag_tensor_shape(loss) == NULL);
  expect_released("ag_tensor_shape", "ag_scope_end");
  CHECK(ag_tensor_numel(loss) == 0);
  expect_released("ag_tensor_numel", "ag_scope_end");
  CHECK(ag_backward(loss, NULL, false) == AG_ERR_STATE);
  expect_released("ag_backward", "ag_scope_end");
  CHECK(ag_fill_(loss, 1.0) == AG_ERR_STATE);
  expect_released("ag_fill_", "ag_scope_end");
  CHECK(ag_tensor_keep(loss) == NULL);
  expect_released("ag_tensor_keep", "ag_scope_end");
  CHECK(ag_tensor_retain(loss) == NULL);
  expect_released("ag_tensor_retain", "ag_scope_end");
  CHECK(ag_detach(loss) == NULL);
  expect_released("ag_detach", "ag_scope_end");
  char buf[64];
  CHECK(strcmp(ag_tensor_describe(loss, buf, sizeof buf), "(released tensor)") == 0);

  /* 4. released by hand; a second release is reported, not a double free */
  ag_tensor *t = ag_full(AG_CPU, AG_F32, 1, (int64_t[]){16}, 2.0);
  ag_tensor_release(t);
  CHECK(ag_mul(t, t) == NULL);
  expect_released("ag_mul", "ag_tensor_release");
  ag_tensor_release(t);
  expect_released("ag_tensor_release", "ag_tensor_release");

  /* 5. the message names the tensor's dtype, shape and device */
  ag_tensor *m = ag_zeros(AG_CPU, AG_I64, 2, (int64_t[]){2, 5});
  ag_tensor_release(m);
  ag_tensor_ndim(m);
  CHECK(strstr(ag_last_error(), "i64[2,5] cpu:0") != NULL);
  ag_error_clear();

  /* 6. a NULL keeps meaning "an earlier call failed" */
  CHECK(ag_relu(NULL) == NULL);
  CHECK(ag_last_status() == AG_ERR_INVALID);
  ag_error_clear();

  ag_tensor_release(w);
  ag_tensor_release(x);
  ag_tensor_release(y);
  CHECK(ag_live_tensors() == 0);
  if (g_failed) return 1;
  printf("use_after_release: all checks passed\n");
  return 0;
}
