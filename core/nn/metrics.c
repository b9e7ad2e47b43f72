/* Device-side metrics: accuracy and a running mean accumulated in a 0-d
 * tensor on the metric's device, so an update queues kernels and never
 * waits for the device; ag_metric_value reads the total (one host sync). */
#include <math.h>
#include <stdlib.h>

#include "anygrad/autograd.h"
#include "anygrad/nn.h"
#include "anygrad/ops.h"
#include "tensor/tensor_internal.h"

enum { KIND_ACCURACY = 1, KIND_MEAN = 2 };

struct ag_metric {
  int kind;
  ag_device dev;
  ag_tensor *acc; /* 0-d: correct predictions (i64) or the sum (f32, f64) */
  int64_t count;  /* samples seen: known from shapes, kept on the host */
};

static ag_tensor *zero_acc(ag_device d, int kind) {
  ag_tensor *t = ag_zeros(d, kind == KIND_ACCURACY ? AG_I64 : AG_F32, 0, NULL);
  return t;
}

static ag_metric *metric_new(ag_device d, int kind, const char *fn) {
  ag_metric *m = calloc(1, sizeof *m);
  if (!m) {
    ag_error_set(AG_ERR_OOM, "%s: no host memory", fn);
    return NULL;
  }
  m->kind = kind;
  m->dev = d;
  /* outside any scope the caller's scope could own: the metric keeps it */
  ag_scope_begin();
  ag_tensor *z = zero_acc(d, kind);
  m->acc = z ? ag_tensor_retain(z) : NULL;
  ag_scope_end();
  if (!m->acc) {
    free(m);
    return NULL;
  }
  return m;
}

ag_metric *ag_metric_accuracy(ag_device d) { return metric_new(d, KIND_ACCURACY, "ag_metric_accuracy"); }
ag_metric *ag_metric_mean(ag_device d) { return metric_new(d, KIND_MEAN, "ag_metric_mean"); }

static ag_status check_metric(const ag_metric *m, int kind, const char *fn) {
  if (!m) return ag_error_set(AG_ERR_INVALID, "%s: NULL metric", fn);
  if (kind && m->kind != kind)
    return ag_error_set(AG_ERR_INVALID, "%s: the metric is %s; use %s", fn,
                        m->kind == KIND_ACCURACY ? "an accuracy" : "a running mean",
                        m->kind == KIND_ACCURACY ? "ag_metric_update" : "ag_metric_mean_update");
  return AG_OK;
}

static ag_status check_device(const ag_metric *m, ag_tensor *t, const char *fn, const char *what) {
  if (ag__bad_tensor(t, fn)) return ag_last_status() != AG_OK ? ag_last_status() : AG_ERR_INVALID;
  ag_device d = ag_tensor_device(t);
  if (!ag_device_eq(d, m->dev)) {
    char a[48], b[48];
    return ag_error_set(AG_ERR_DEVICE, "%s: %s is on %s, the metric on %s", fn, what, ag_device_str(d, a, sizeof a),
                        ag_device_str(m->dev, b, sizeof b));
  }
  return AG_OK;
}

/* acc <- acc + delta inside the caller's open scope; the metric holds the
 * new total outside any scope. */
static bool add_to(ag_metric *m, ag_tensor *delta) {
  ag_tensor *sum = delta ? ag_add(m->acc, delta) : NULL;
  if (!sum) return false;
  ag_tensor *old = m->acc;
  m->acc = ag_tensor_retain(sum);
  ag_tensor_release(old);
  return true;
}

ag_status ag_metric_update(ag_metric *m, ag_tensor *logits, ag_tensor *targets) {
  const char *fn = "ag_metric_update";
  ag_status st = check_metric(m, KIND_ACCURACY, fn);
  if (st == AG_OK) st = check_device(m, logits, fn, "logits");
  if (st == AG_OK) st = check_device(m, targets, fn, "targets");
  if (st != AG_OK) return st;
  int ln = ag_tensor_ndim(logits), tn = ag_tensor_ndim(targets);
  ag_dtype tdt = ag_tensor_dtype(targets);
  if (!ag_dtype_is_float(ag_tensor_dtype(logits)))
    return ag_error_set(AG_ERR_DTYPE, "%s: logits must be floating point, got %s", fn,
                        ag_dtype_name(ag_tensor_dtype(logits)));
  if (!ag_dtype_is_int(tdt) || tdt == AG_BOOL)
    return ag_error_set(AG_ERR_DTYPE, "%s: targets must hold class indices (i64, i32 or u8), got %s", fn,
                        ag_dtype_name(tdt));
  bool ok = ln >= 1 && tn == ln - 1;
  for (int i = 0; ok && i < tn; i++) ok = ag_tensor_shape(targets)[i] == ag_tensor_shape(logits)[i];
  if (!ok) {
    char a[96], b[96];
    return ag_error_set(AG_ERR_SHAPE, "%s: logits %s and targets %s: targets must be the logits' shape without the "
                        "last (class) dim",
                        fn, ag_tensor_describe(logits, a, sizeof a), ag_tensor_describe(targets, b, sizeof b));
  }
  ag_scope_begin();
  ag_no_grad_begin();
  ag_tensor *pred = ag_argmax(logits, -1, false);
  ag_tensor *hit = ag_eq(pred, targets);
  ag_tensor *n = ag_sum(hit, 0, NULL, false);
  st = add_to(m, n) ? AG_OK : ag_last_status();
  if (st == AG_OK) m->count += ag_tensor_numel(targets);
  ag_grad_mode_end();
  ag_scope_end();
  return st;
}

ag_status ag_metric_mean_update(ag_metric *m, ag_tensor *values) {
  const char *fn = "ag_metric_mean_update";
  ag_status st = check_metric(m, KIND_MEAN, fn);
  if (st == AG_OK) st = check_device(m, values, fn, "values");
  if (st != AG_OK) return st;
  ag_dtype dt = ag_tensor_dtype(values);
  if (dt == AG_BOOL) dt = AG_U8;
  ag_scope_begin();
  ag_no_grad_begin();
  ag_tensor *x = dt == AG_F16 || dt == AG_BF16 || ag_dtype_is_int(dt) ? ag_cast(values, AG_F32) : values;
  ag_tensor *s = ag_sum(x, 0, NULL, false);
  st = add_to(m, s) ? AG_OK : ag_last_status();
  if (st == AG_OK) m->count += ag_tensor_numel(values);
  ag_grad_mode_end();
  ag_scope_end();
  return st;
}

ag_status ag_metric_value(ag_metric *m, double *out) {
  ag_status st = check_metric(m, 0, "ag_metric_value");
  if (st != AG_OK) return st;
  if (!out) return ag_error_set(AG_ERR_INVALID, "ag_metric_value: NULL out");
  if (m->count == 0) {
    *out = NAN;
    return AG_OK;
  }
  union {
    int64_t i;
    float f;
    double d;
  } v;
  ag_dtype dt = ag_tensor_dtype(m->acc);
  st = ag_to_host(m->acc, &v, ag_dtype_size(dt));
  if (st != AG_OK) return st;
  double total = dt == AG_I64 ? (double)v.i : dt == AG_F32 ? (double)v.f : v.d;
  *out = total / (double)m->count;
  return AG_OK;
}

int64_t ag_metric_count(const ag_metric *m) { return m ? m->count : 0; }

ag_status ag_metric_reset(ag_metric *m) {
  ag_status st = check_metric(m, 0, "ag_metric_reset");
  if (st != AG_OK) return st;
  ag_scope_begin();
  ag_tensor *z = zero_acc(m->dev, m->kind);
  if (z) {
    ag_tensor_release(m->acc);
    m->acc = ag_tensor_retain(z);
    m->count = 0;
  }
  st = z ? AG_OK : ag_last_status();
  ag_scope_end();
  return st;
}

void ag_metric_free(ag_metric *m) {
  if (!m) return;
  ag_tensor_release(m->acc);
  free(m);
}
