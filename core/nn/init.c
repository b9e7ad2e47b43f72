/* Parameter initialisers as torch.nn.init: uniform, normal, Xavier and
 * Kaiming (uniform and normal), truncated normal. Every draw comes from the
 * Philox generator (ag_rand / ag_randn on the tensor's device), so the same
 * seed gives the same values on every backend. */
#include <math.h>
#include <stdlib.h>

#include "anygrad/nn.h"
#include "autograd/grad_internal.h"

static ag_status check_target(ag_tensor *t, const char *fn) {
  if (!t) return ag_error_set(AG_ERR_INVALID, "%s: NULL tensor", fn);
  if (!ag_dtype_is_float(t->dtype)) {
    char b[96];
    return ag_error_set(AG_ERR_DTYPE, "%s: %s is not floating point", fn, ag_tensor_describe(t, b, sizeof b));
  }
  return AG_OK;
}

/* Copy src (released) into t without recording autograd. */
static ag_status fill_from(ag_tensor *t, ag_tensor *src) {
  if (!src) return ag_last_status();
  ag__grad_own(src);
  ag_no_grad_begin();
  ag_status st = ag_copy_(t, src);
  ag_grad_mode_end();
  ag_tensor_release(src);
  return st;
}

ag_status ag_init_uniform_(ag_tensor *t, double low, double high, ag_generator *g) {
  ag_status st = check_target(t, "ag_init_uniform_");
  if (st != AG_OK) return st;
  if (!(low <= high) || isinf(low) || isinf(high))
    return ag_error_set(AG_ERR_INVALID, "ag_init_uniform_: need finite low <= high, got [%g, %g)", low, high);
  return fill_from(t, ag_rand(ag_tensor_device(t), t->dtype, t->ndim, t->shape, low, high, g));
}

ag_status ag_init_normal_(ag_tensor *t, double mean, double std, ag_generator *g) {
  ag_status st = check_target(t, "ag_init_normal_");
  if (st != AG_OK) return st;
  if (!(std >= 0) || isinf(std) || !isfinite(mean))
    return ag_error_set(AG_ERR_INVALID, "ag_init_normal_: need finite mean and std >= 0, got %g, %g", mean, std);
  return fill_from(t, ag_randn(ag_tensor_device(t), t->dtype, t->ndim, t->shape, mean, std, g));
}

ag_status ag_init_fans(const ag_tensor *t, int64_t *fan_in, int64_t *fan_out) {
  if (!t || !fan_in || !fan_out) return ag_error_set(AG_ERR_INVALID, "ag_init_fans: NULL argument");
  if (t->ndim < 2)
    return ag_error_set(AG_ERR_SHAPE, "ag_init_fans: fans need a tensor of rank >= 2, got rank %d", t->ndim);
  int64_t rf = 1;
  for (int i = 2; i < t->ndim; i++) rf *= t->shape[i];
  *fan_in = t->shape[1] * rf;
  *fan_out = t->shape[0] * rf;
  return AG_OK;
}

double ag_init_gain(ag_activation act, double negative_slope) {
  switch (act) {
  case AG_ACT_NONE:
  case AG_ACT_SIGMOID: return 1.0;
  case AG_ACT_TANH: return 5.0 / 3.0;
  case AG_ACT_RELU: return sqrt(2.0);
  default: break;
  }
  if ((int)act == AG_INIT_LEAKY_RELU) return sqrt(2.0 / (1.0 + negative_slope * negative_slope));
  if ((int)act == AG_INIT_SELU) return 3.0 / 4.0;
  ag_error_set(AG_ERR_INVALID, "ag_init_gain: no recommended gain for activation %d (torch has none either)",
               (int)act);
  return NAN;
}

static ag_status fan_std(ag_tensor *t, const char *fn, double gain, int mode, double *std) {
  ag_status st = check_target(t, fn);
  if (st != AG_OK) return st;
  if (!(gain >= 0) || isinf(gain)) return ag_error_set(AG_ERR_INVALID, "%s: gain must be finite and >= 0, got %g", fn, gain);
  int64_t fi, fo;
  if (t->ndim < 2)
    return ag_error_set(AG_ERR_SHAPE, "%s: needs a tensor of rank >= 2 (fans), got rank %d", fn, t->ndim);
  ag_init_fans(t, &fi, &fo);
  double fan;
  if (mode == 0) fan = (double)(fi + fo) / 2.0; /* xavier */
  else if (mode == AG_FAN_IN) fan = (double)fi;
  else if (mode == AG_FAN_OUT) fan = (double)fo;
  else return ag_error_set(AG_ERR_INVALID, "%s: mode must be AG_FAN_IN or AG_FAN_OUT, got %d", fn, mode);
  if (fan <= 0) return ag_error_set(AG_ERR_SHAPE, "%s: zero-element tensor has no fan", fn);
  *std = gain / sqrt(fan);
  return AG_OK;
}

ag_status ag_init_xavier_uniform_(ag_tensor *t, double gain, ag_generator *g) {
  double s = 0;
  ag_status st = fan_std(t, "ag_init_xavier_uniform_", gain, 0, &s);
  return st != AG_OK ? st : ag_init_uniform_(t, -sqrt(3.0) * s, sqrt(3.0) * s, g);
}

ag_status ag_init_xavier_normal_(ag_tensor *t, double gain, ag_generator *g) {
  double s = 0;
  ag_status st = fan_std(t, "ag_init_xavier_normal_", gain, 0, &s);
  return st != AG_OK ? st : ag_init_normal_(t, 0.0, s, g);
}

ag_status ag_init_kaiming_uniform_(ag_tensor *t, double gain, ag_fan_mode mode, ag_generator *g) {
  double s = 0;
  ag_status st = fan_std(t, "ag_init_kaiming_uniform_", gain, (int)mode, &s);
  return st != AG_OK ? st : ag_init_uniform_(t, -sqrt(3.0) * s, sqrt(3.0) * s, g);
}

ag_status ag_init_kaiming_normal_(ag_tensor *t, double gain, ag_fan_mode mode, ag_generator *g) {
  double s = 0;
  ag_status st = fan_std(t, "ag_init_kaiming_normal_", gain, (int)mode, &s);
  return st != AG_OK ? st : ag_init_normal_(t, 0.0, s, g);
}

/* erf^-1 on (-1, 1): Giles' single-precision start, then Newton steps on
 * erf(x) - y in double. */
static double erfinv(double y) {
  if (y <= -1) return -INFINITY;
  if (y >= 1) return INFINITY;
  double w = -log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 3; i++) x -= (erf(x) - y) / (2.0 / sqrt(M_PI) * exp(-x * x));
  return x;
}

static double norm_cdf(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))); }

ag_status ag_init_trunc_normal_(ag_tensor *t, double mean, double std, double a, double b, ag_generator *g) {
  ag_status st = check_target(t, "ag_init_trunc_normal_");
  if (st != AG_OK) return st;
  if (!(std > 0) || isinf(std) || !isfinite(mean) || !(a < b) || isnan(a) || isnan(b))
    return ag_error_set(AG_ERR_INVALID, "ag_init_trunc_normal_: need finite mean, std > 0 and a < b, got %g, %g, [%g, %g]",
                        mean, std, a, b);
  double l = norm_cdf((a - mean) / std), u = norm_cdf((b - mean) / std);
  if (!(u > l))
    return ag_error_set(AG_ERR_INVALID, "ag_init_trunc_normal_: [%g, %g] holds no probability mass of N(%g, %g)", a, b,
                        mean, std);
  /* Philox uniforms on the tensor's device (the same bits everywhere),
   * mapped through the inverse normal CDF on the host in double. */
  ag_tensor *r = ag_rand(ag_tensor_device(t), AG_F32, t->ndim, t->shape, 0.0, 1.0, g);
  if (!r) return ag_last_status();
  ag__grad_own(r);
  size_t n = (size_t)t->numel;
  float *h = malloc((n ? n : 1) * sizeof *h);
  if (!h) {
    ag_tensor_release(r);
    return ag_error_set(AG_ERR_OOM, "ag_init_trunc_normal_: out of host memory");
  }
  st = ag_to_host(r, h, n * sizeof *h);
  ag_tensor_release(r);
  for (size_t i = 0; st == AG_OK && i < n; i++) {
    double p = l + (u - l) * (double)h[i];
    double x = mean + std * sqrt(2.0) * erfinv(2.0 * p - 1.0);
    h[i] = (float)(x < a ? a : x > b ? b : x);
  }
  if (st == AG_OK) st = fill_from(t, ag_from_host(ag_tensor_device(t), AG_F32, t->ndim, t->shape, h));
  free(h);
  return st;
}
