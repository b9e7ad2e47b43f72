/* Vision ops (conv2d, max/avg/adaptive-avg pooling, batch_norm): gradients
 * against central finite differences in f64; forward, backward and running
 * statistics against PyTorch (torch 1.13 through /usr/bin/python3, skipped
 * when absent); f32 against f64; the argument errors. With AG_TEST_DEVICE
 * set (gpuemu:0, opencl:0, ...) only the device test runs: every case's
 * forward and gradients on that device against the CPU, in f32. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "test_device.h"

typedef struct vcase {
  const char *name;
  int n_in;            /* differentiable inputs (x, then weight, bias) */
  int64_t shape[3][4]; /* shapes; ndim 4 for x and w, 1 for bias */
  int nd[3];
  ag_tensor *(*fn)(ag_tensor **in);
} vcase;

static const ag_conv2d_params k_conv = {{2, 1}, {1, 2}, {2, 1}, 2};
static ag_tensor *f_conv(ag_tensor **in) { return ag_conv2d(in[0], in[1], in[2], &k_conv); }
static ag_tensor *f_conv1x1(ag_tensor **in) { return ag_conv2d(in[0], in[1], NULL, NULL); }
static ag_tensor *f_maxpool(ag_tensor **in) {
  ag_pool2d_params p = {{3, 2}, {2, 2}, {1, 1}, false};
  return ag_max_pool2d(in[0], &p);
}
static ag_tensor *f_avgpool(ag_tensor **in) {
  ag_pool2d_params p = {{3, 3}, {2, 2}, {1, 1}, true};
  return ag_avg_pool2d(in[0], &p);
}
static ag_tensor *f_avgpool_nopad(ag_tensor **in) {
  ag_pool2d_params p = {{3, 3}, {2, 2}, {1, 1}, false};
  return ag_avg_pool2d(in[0], &p);
}
static ag_tensor *f_adaptive(ag_tensor **in) { return ag_adaptive_avg_pool2d(in[0], 3, 4); }
static ag_tensor *f_bn(ag_tensor **in) { return ag_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5); }
static ag_tensor *f_bn_plain(ag_tensor **in) { return ag_batch_norm(in[0], NULL, NULL, NULL, NULL, true, 0.1, 1e-5); }
/* eval: fixed running statistics, built on x's device in x's dtype */
static ag_tensor *f_bn_eval(ag_tensor **in) {
  static const float m[3] = {0.2f, -0.1f, 0.3f}, v[3] = {0.5f, 1.5f, 2.0f};
  int64_t c3 = 3;
  ag_tensor *md = ag_from_host(ag_tensor_device(in[0]), AG_F32, 1, &c3, m);
  ag_tensor *vd = ag_from_host(ag_tensor_device(in[0]), AG_F32, 1, &c3, v);
  ag_tensor *rm = ag_cast(md, ag_tensor_dtype(in[0])), *rv = ag_cast(vd, ag_tensor_dtype(in[0]));
  return ag_batch_norm(in[0], rm, rv, in[1], in[2], false, 0.1, 1e-5);
}
static ag_tensor *f_maxpool_2x2(ag_tensor **in) {
  ag_pool2d_params p = {{2, 2}, {2, 2}, {0, 0}, false};
  return ag_max_pool2d(in[0], &p);
}

static const vcase k_cases[] = {
    {"conv2d", 3, {{2, 4, 7, 6}, {6, 2, 3, 3}, {6}}, {4, 4, 1}, f_conv},
    {"conv2d_1x1", 2, {{2, 3, 4, 5}, {4, 3, 1, 1}}, {4, 4}, f_conv1x1},
    {"max_pool2d", 1, {{2, 3, 7, 8}}, {4}, f_maxpool},
    {"avg_pool2d", 1, {{2, 3, 7, 8}}, {4}, f_avgpool},
    {"avg_pool2d_nopad", 1, {{2, 3, 7, 8}}, {4}, f_avgpool_nopad},
    {"adaptive_avg_pool2d", 1, {{2, 3, 7, 9}}, {4}, f_adaptive},
    {"batch_norm", 3, {{4, 3, 5, 5}, {3}, {3}}, {4, 1, 1}, f_bn},
    {"batch_norm_plain", 1, {{3, 2, 4, 3}}, {4}, f_bn_plain},
    {"batch_norm_eval", 3, {{2, 3, 4, 5}, {3}, {3}}, {4, 1, 1}, f_bn_eval},
    {"max_pool2d_2x2", 1, {{2, 3, 7, 9}}, {4}, f_maxpool_2x2},
};

static int64_t numel_of(int nd, const int64_t *s) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= s[i];
  return n;
}

static double *rand_vec(int64_t n, unsigned *seed) {
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (double)rand_r(seed) / RAND_MAX * 2.0 - 1.0;
  return v;
}

/* L = sum(f(in) * R) with fixed R, in f64. */
static double loss_of(const vcase *vc, double **vals, const double *R, ag_tensor **grads_out) {
  ag_scope_begin();
  ag_tensor *in[3] = {NULL, NULL, NULL};
  for (int i = 0; i < vc->n_in; i++) {
    in[i] = ag_from_host(AG_CPU, AG_F64, vc->nd[i], vc->shape[i], vals[i]);
    if (grads_out) ag_tensor_set_requires_grad(in[i], true);
  }
  ag_tensor *y = vc->fn(in);
  if (!y) fail_msg("%s: %s", vc->name, ag_last_error());
  ag_tensor *r = ag_from_host(AG_CPU, AG_F64, ag_tensor_ndim(y), ag_tensor_shape(y), R);
  ag_tensor *l = ag_sum(ag_mul(y, r), 0, NULL, false);
  double v = ag_item(l);
  if (grads_out) {
    assert_int_equal(ag_backward(l, NULL, false), AG_OK);
    for (int i = 0; i < vc->n_in; i++) grads_out[i] = ag_tensor_keep(ag_tensor_retain(ag_tensor_grad(in[i])));
  }
  ag_scope_end();
  return v;
}

static void test_gradcheck(void **state) {
  for (size_t k = 0; k < sizeof k_cases / sizeof *k_cases; k++) {
    const vcase *vc = &k_cases[k];
    unsigned seed = 1234 + (unsigned)k;
    double *vals[3];
    for (int i = 0; i < vc->n_in; i++) vals[i] = rand_vec(numel_of(vc->nd[i], vc->shape[i]), &seed);
    /* output size: run once */
    ag_scope_begin();
    ag_tensor *in[3] = {NULL, NULL, NULL};
    for (int i = 0; i < vc->n_in; i++) in[i] = ag_from_host(AG_CPU, AG_F64, vc->nd[i], vc->shape[i], vals[i]);
    ag_tensor *y = vc->fn(in);
    if (!y) fail_msg("%s: %s", vc->name, ag_last_error());
    int64_t ny = ag_tensor_numel(y);
    ag_scope_end();
    double *R = rand_vec(ny, &seed);
    ag_tensor *grads[3] = {NULL, NULL, NULL};
    loss_of(vc, vals, R, grads);
    for (int i = 0; i < vc->n_in; i++) {
      int64_t n = numel_of(vc->nd[i], vc->shape[i]);
      double *ga = malloc(sizeof(double) * (size_t)n);
      assert_non_null(grads[i]);
      assert_int_equal(ag_to_host(grads[i], ga, sizeof(double) * (size_t)n), AG_OK);
      double maxerr = 0, maxg = 0;
      for (int64_t j = 0; j < n; j++) {
        const double h = 1e-6, v0 = vals[i][j];
        vals[i][j] = v0 + h;
        double lp = loss_of(vc, vals, R, NULL);
        vals[i][j] = v0 - h;
        double lm = loss_of(vc, vals, R, NULL);
        vals[i][j] = v0;
        double fd = (lp - lm) / (2 * h);
        if (getenv("VDEBUG")) fprintf(stderr, "%s %d %lld fd %g an %g\n", vc->name, i, (long long)j, fd, ga[j]);
        if (fabs(fd - ga[j]) > maxerr) maxerr = fabs(fd - ga[j]);
        if (fabs(fd) > maxg) maxg = fabs(fd);
      }
      if (maxerr > 1e-6 * (1 + maxg)) fail_msg("%s input %d: max |fd - analytic| = %g", vc->name, i, maxerr);
      free(ga);
      ag_tensor_release(grads[i]);
    }
    for (int i = 0; i < vc->n_in; i++) free(vals[i]);
    free(R);
  }
}

/* ---- a device against the CPU ---- */

/* More than one tile and a long weight-gradient reduction, beside the small
 * cases above (the shapes of the Fashion-MNIST CNN's second block). */
static const ag_conv2d_params k_pad1 = {{1, 1}, {1, 1}, {1, 1}, 1};
static ag_tensor *f_conv_cnn(ag_tensor **in) { return ag_conv2d(in[0], in[1], in[2], &k_pad1); }
static const vcase k_cnn_case = {"conv2d 3x3 pad 1, CNN block", 3, {{6, 16, 14, 14}, {32, 16, 3, 3}, {32}}, {4, 4, 1},
                                 f_conv_cnn};

/* Runs vc in f32 on dev: output and input gradients of sum(f(in) * R). */
static void run_on(ag_device dev, const vcase *vc, float **vals, const float *R, int64_t ny, float *y_out,
                   float **g_out) {
  ag_scope_begin();
  ag_tensor *in[3] = {NULL, NULL, NULL};
  for (int i = 0; i < vc->n_in; i++) {
    in[i] = ag_from_host(dev, AG_F32, vc->nd[i], vc->shape[i], vals[i]);
    assert_non_null(in[i]);
    ag_tensor_set_requires_grad(in[i], true);
  }
  ag_tensor *y = vc->fn(in);
  if (!y) fail_msg("%s on %s: %s", vc->name, getenv("AG_TEST_DEVICE"), ag_last_error());
  assert_int_equal(ag_tensor_numel(y), ny);
  ag_tensor *r = ag_from_host(dev, AG_F32, ag_tensor_ndim(y), ag_tensor_shape(y), R);
  ag_tensor *l = ag_sum(ag_mul(y, r), 0, NULL, false);
  if (!l || ag_backward(l, NULL, false) != AG_OK) fail_msg("%s backward: %s", vc->name, ag_last_error());
  assert_int_equal(ag_to_host(y, y_out, sizeof(float) * (size_t)ny), AG_OK);
  for (int i = 0; i < vc->n_in; i++) {
    ag_tensor *g = ag_tensor_grad(in[i]);
    assert_non_null(g);
    assert_int_equal(ag_to_host(g, g_out[i], sizeof(float) * (size_t)numel_of(vc->nd[i], vc->shape[i])), AG_OK);
  }
  ag_scope_end();
}

static void expect_same(const char *what, const float *got, const float *want, int64_t n) {
  double err = 0, mag = 0;
  for (int64_t j = 0; j < n; j++) {
    if (isnan(got[j]) || fabs((double)got[j] - want[j]) > err) err = isnan(got[j]) ? INFINITY : fabs((double)got[j] - want[j]);
    if (fabs(want[j]) > mag) mag = fabs(want[j]);
  }
  if (!(err <= 1e-4 * (1 + mag))) fail_msg("%s on %s: max abs error %g against the cpu (scale %g)", what,
                                           getenv("AG_TEST_DEVICE"), err, mag);
}

static void test_device(void **state) {
  ag_device dev = TEST_DEV;
  if (dev.backend == AG_BACKEND_CPU) skip();
  const size_t nc = sizeof k_cases / sizeof *k_cases;
  for (size_t k = 0; k <= nc; k++) {
    const vcase *vc = k < nc ? &k_cases[k] : &k_cnn_case;
    unsigned seed = 99 + (unsigned)k;
    float *vals[3] = {NULL, NULL, NULL}, *gc[3] = {NULL, NULL, NULL}, *gd[3] = {NULL, NULL, NULL};
    for (int i = 0; i < vc->n_in; i++) {
      int64_t n = numel_of(vc->nd[i], vc->shape[i]);
      vals[i] = malloc(sizeof(float) * (size_t)n);
      gc[i] = malloc(sizeof(float) * (size_t)n);
      gd[i] = malloc(sizeof(float) * (size_t)n);
      for (int64_t j = 0; j < n; j++) vals[i][j] = (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f;
    }
    ag_scope_begin(); /* output size */
    ag_tensor *in[3] = {NULL, NULL, NULL};
    for (int i = 0; i < vc->n_in; i++) in[i] = ag_from_host(AG_CPU, AG_F32, vc->nd[i], vc->shape[i], vals[i]);
    int64_t ny = ag_tensor_numel(vc->fn(in));
    ag_scope_end();
    float *R = malloc(sizeof(float) * (size_t)ny), *yc = malloc(sizeof(float) * (size_t)ny),
          *yd = malloc(sizeof(float) * (size_t)ny);
    for (int64_t j = 0; j < ny; j++) R[j] = (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f;
    run_on(AG_CPU, vc, vals, R, ny, yc, gc);
    run_on(dev, vc, vals, R, ny, yd, gd);
    char what[128];
    snprintf(what, sizeof what, "%s forward", vc->name);
    expect_same(what, yd, yc, ny);
    for (int i = 0; i < vc->n_in; i++) {
      snprintf(what, sizeof what, "%s gradient %d", vc->name, i);
      expect_same(what, gd[i], gc[i], numel_of(vc->nd[i], vc->shape[i]));
    }
    for (int i = 0; i < vc->n_in; i++) free(vals[i]), free(gc[i]), free(gd[i]);
    free(R);
    free(yc);
    free(yd);
  }
}

/* ---- PyTorch reference ---- */

static const char k_script[] =
    "import torch, struct, sys\n"
    "import torch.nn.functional as F\n"
    "torch.manual_seed(0)\n"
    "out = open(sys.argv[1], 'wb')\n"
    "def put(*ts):\n"
    "    for t in ts:\n"
    "        v = t.detach().contiguous().view(-1).tolist()\n"
    "        out.write(struct.pack('<%dd' % len(v), *v))\n"
    "def case(f, shapes, gshape):\n"
    "    ins = [torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes]\n"
    "    y = f(*ins)\n"
    "    g = torch.randn(*y.shape, dtype=torch.float64)\n"
    "    y.backward(g)\n"
    "    put(*ins); put(g, y); put(*[i.grad for i in ins])\n"
    "case(lambda x, w, b: F.conv2d(x, w, b, stride=(2,1), padding=(1,2), dilation=(2,1), groups=2),\n"
    "     [(2,4,7,6), (6,2,3,3), (6,)], None)\n"
    "case(lambda x: F.max_pool2d(x, (3,2), (2,2), (1,1)), [(2,3,7,8)], None)\n"
    "case(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=True), [(2,3,7,8)], None)\n"
    "case(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [(2,3,7,8)], None)\n"
    "case(lambda x: F.adaptive_avg_pool2d(x, (3,4)), [(2,3,7,9)], None)\n"
    "rm = torch.randn(3, dtype=torch.float64); rv = torch.rand(3, dtype=torch.float64) + 0.5\n"
    "put(rm, rv)\n"
    "case(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5), [(4,3,5,5), (3,), (3,)], None)\n"
    "put(rm, rv)\n"
    "x = torch.randn(4,3,5,5, dtype=torch.float64)\n"
    "w = torch.randn(3, dtype=torch.float64); b = torch.randn(3, dtype=torch.float64)\n"
    "put(x, w, b, F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5))\n"
    "out.close()\n";

typedef struct rdr {
  FILE *f;
} rdr;

static ag_tensor *rd(rdr *r, int nd, const int64_t *shape) {
  int64_t n = numel_of(nd, shape);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  assert_int_equal(fread(v, sizeof(double), (size_t)n, r->f), (size_t)n);
  ag_tensor *t = ag_from_host(AG_CPU, AG_F64, nd, shape, v);
  free(v);
  return t;
}

static void expect_close(const char *what, ag_tensor *got, ag_tensor *want, double tol) {
  if (!got) fail_msg("%s: %s", what, ag_last_error());
  assert_int_equal(ag_tensor_numel(got), ag_tensor_numel(want));
  for (int d = 0; d < ag_tensor_ndim(want); d++) assert_int_equal(ag_tensor_shape(got)[d], ag_tensor_shape(want)[d]);
  double err = ag_item(ag_max(ag_abs(ag_sub(ag_cast(got, AG_F64), want)), 0, NULL, false));
  double mag = ag_item(ag_max(ag_abs(want), 0, NULL, false));
  if (!(err <= tol * (1 + mag))) fail_msg("%s: max abs error %g (scale %g)", what, err, mag);
}

/* One case: read inputs, g, y_ref, grads_ref; check f64 and f32. */
static void ref_case(rdr *r, const vcase *vc) {
  ag_scope_begin();
  ag_tensor *in[3] = {NULL, NULL, NULL}, *want_g[3];
  for (int i = 0; i < vc->n_in; i++) in[i] = rd(r, vc->nd[i], vc->shape[i]);
  ag_tensor *y0 = vc->fn(in); /* for the output shape */
  assert_non_null(y0);
  ag_tensor *g = rd(r, 4, ag_tensor_shape(y0));
  ag_tensor *y_ref = rd(r, 4, ag_tensor_shape(y0));
  for (int i = 0; i < vc->n_in; i++) want_g[i] = rd(r, vc->nd[i], vc->shape[i]);
  for (int pass = 0; pass < 2; pass++) {
    ag_dtype dt = pass ? AG_F32 : AG_F64;
    double tol = pass ? 1e-4 : 1e-10;
    ag_tensor *xi[3] = {NULL, NULL, NULL};
    for (int i = 0; i < vc->n_in; i++) {
      xi[i] = ag_cast(in[i], dt);
      xi[i] = ag_detach(xi[i]);
      ag_tensor_set_requires_grad(xi[i], true);
    }
    ag_tensor *y = vc->fn(xi);
    char what[96];
    snprintf(what, sizeof what, "%s %s forward", vc->name, ag_dtype_name(dt));
    expect_close(what, y, y_ref, tol);
    assert_int_equal(ag_backward(y, ag_cast(g, dt), false), AG_OK);
    for (int i = 0; i < vc->n_in; i++) {
      snprintf(what, sizeof what, "%s %s grad %d", vc->name, ag_dtype_name(dt), i);
      expect_close(what, ag_tensor_grad(xi[i]), want_g[i], tol);
    }
  }
  ag_scope_end();
}

static ag_tensor *bn_ref_rm, *bn_ref_rv;
static ag_tensor *f_bn_running(ag_tensor **in) {
  return ag_batch_norm(in[0], bn_ref_rm, bn_ref_rv, in[1], in[2], true, 0.1, 1e-5);
}

static void test_pytorch_reference(void **state) {
  if (access("/usr/bin/python3", X_OK) != 0 || system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0)
    skip();
  char dir[] = "/tmp/ag_vision_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char py[300], bin[300], cmd[700];
  snprintf(py, sizeof py, "%s/ref.py", dir);
  snprintf(bin, sizeof bin, "%s/ref.bin", dir);
  FILE *f = fopen(py, "w");
  assert_non_null(f);
  fputs(k_script, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", py, bin);
  assert_int_equal(system(cmd), 0);
  rdr r = {fopen(bin, "rb")};
  assert_non_null(r.f);
  const int order[] = {0, 2, 3, 4, 5};
  for (size_t k = 0; k < sizeof order / sizeof *order; k++) ref_case(&r, &k_cases[order[k]]);
  /* batch norm with running statistics, in f64: training updates them as
   * PyTorch does; eval normalises by them. */
  ag_scope_begin();
  int64_t c3 = 3;
  bn_ref_rm = ag_tensor_keep(rd(&r, 1, &c3));
  bn_ref_rv = ag_tensor_keep(rd(&r, 1, &c3));
  vcase bn = k_cases[6];
  bn.fn = f_bn_running;
  ag_scope_end();
  /* ref_case runs f64 and f32: the f32 pass needs its own f32 stats */
  {
    ag_scope_begin();
    ag_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = rd(&r, bn.nd[i], bn.shape[i]);
    int64_t ys[4] = {4, 3, 5, 5};
    ag_tensor *g = rd(&r, 4, ys), *y_ref = rd(&r, 4, ys), *wg[3];
    for (int i = 0; i < 3; i++) wg[i] = rd(&r, bn.nd[i], bn.shape[i]);
    for (int i = 0; i < 3; i++) ag_tensor_set_requires_grad(in[i], true);
    ag_tensor *y = f_bn_running(in);
    expect_close("batch_norm train forward", y, y_ref, 1e-10);
    assert_int_equal(ag_backward(y, g, false), AG_OK);
    for (int i = 0; i < 3; i++) expect_close("batch_norm train grad", ag_tensor_grad(in[i]), wg[i], 1e-10);
    ag_tensor *rm_ref = rd(&r, 1, &c3), *rv_ref = rd(&r, 1, &c3);
    expect_close("batch_norm running_mean", bn_ref_rm, rm_ref, 1e-12);
    expect_close("batch_norm running_var", bn_ref_rv, rv_ref, 1e-12);
    ag_tensor *x = rd(&r, 4, ys), *w = rd(&r, 1, &c3), *b = rd(&r, 1, &c3), *ye_ref = rd(&r, 4, ys);
    ag_tensor *ye = ag_batch_norm(x, bn_ref_rm, bn_ref_rv, w, b, false, 0.1, 1e-5);
    expect_close("batch_norm eval forward", ye, ye_ref, 1e-10);
    expect_close("batch_norm eval leaves running_mean", bn_ref_rm, rm_ref, 0);
    ag_scope_end();
  }
  ag_tensor_release(bn_ref_rm);
  ag_tensor_release(bn_ref_rv);
  double extra;
  assert_int_equal(fread(&extra, sizeof extra, 1, r.f), 0); /* read exactly what was written */
  fclose(r.f);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* The 2x2 stride-2 max pool: a NaN wins its window (the first NaN, for the
 * index) and the first of equal maxima is taken, as in the general loop. */
static void test_maxpool_2x2_nan_ties(void **state) {
  ag_scope_begin();
  /* one plane 2x4: windows {1, 5, 1, 5} (tie at 1, 3) and {NaN, 2, NaN, 9} */
  const float xv[8] = {1, 5, NAN, 2, 1, 5, NAN, 9};
  int64_t xs[4] = {1, 1, 2, 4};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 4, xs, xv);
  ag_tensor_set_requires_grad(x, true);
  ag_pool2d_params p = {{2, 2}, {2, 2}, {0, 0}, false};
  ag_tensor *y = ag_max_pool2d(x, &p);
  assert_non_null(y);
  float yv[2];
  assert_int_equal(ag_to_host(y, yv, sizeof yv), AG_OK);
  assert_true(yv[0] == 5.0f);
  assert_true(isnan(yv[1]));
  assert_int_equal(ag_backward(ag_sum(y, 0, NULL, false), NULL, false), AG_OK);
  float gv[8];
  assert_int_equal(ag_to_host(ag_tensor_grad(x), gv, sizeof gv), AG_OK);
  const float want[8] = {0, 1, 1, 0, 0, 0, 0, 0}; /* first 5, first NaN */
  for (int i = 0; i < 8; i++) assert_true(gv[i] == want[i]);
  ag_scope_end();
}

/* f32 runs batch norm as kernels, f16 through the composed ops: both
 * paths give the same forward and gradients (to f16 precision), with a
 * channel mean far from 0. */
static void test_batch_norm_paths(void **state) {
  ag_scope_begin();
  int64_t xs[4] = {4, 3, 6, 5}, c3 = 3;
  unsigned seed = 99;
  double *xv = rand_vec(4 * 3 * 6 * 5, &seed), *gv = rand_vec(4 * 3 * 6 * 5, &seed);
  for (int i = 0; i < 4 * 3 * 6 * 5; i++) xv[i] = 4.0 + 2.0 * xv[i];
  const double wv[3] = {1.5, -0.5, 2.0}, bv[3] = {0.1, 0.2, -0.3};
  ag_tensor *out[2][6];
  const ag_dtype dts[2] = {AG_F32, AG_F16};
  for (int k = 0; k < 2; k++) {
    ag_tensor *x = ag_cast(ag_from_host(AG_CPU, AG_F64, 4, xs, xv), dts[k]);
    ag_tensor *w = ag_cast(ag_from_host(AG_CPU, AG_F64, 1, &c3, wv), dts[k]);
    ag_tensor *b = ag_cast(ag_from_host(AG_CPU, AG_F64, 1, &c3, bv), dts[k]);
    ag_tensor *rm = ag_zeros(AG_CPU, dts[k], 1, &c3), *rv = ag_ones(AG_CPU, dts[k], 1, &c3);
    ag_tensor *in[3] = {x, w, b};
    for (int i = 0; i < 3; i++) ag_tensor_set_requires_grad(in[i], true);
    ag_tensor *y = ag_batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
    assert_non_null(y);
    assert_int_equal(ag_backward(y, ag_cast(ag_from_host(AG_CPU, AG_F64, 4, xs, gv), dts[k]), false), AG_OK);
    out[k][0] = y;
    for (int i = 0; i < 3; i++) out[k][1 + i] = ag_tensor_grad(in[i]);
    out[k][4] = rm;
    out[k][5] = rv;
  }
  static const char *const what[6] = {"forward", "dx", "dweight", "dbias", "running_mean", "running_var"};
  for (int i = 0; i < 6; i++)
    expect_close(what[i], ag_cast(out[1][i], AG_F64), ag_cast(out[0][i], AG_F64), i == 2 ? 5e-2 : 2e-2);
  free(xv);
  free(gv);
  ag_scope_end();
}

static void test_errors(void **state) {
  ag_scope_begin();
  int64_t xs[4] = {2, 4, 5, 5}, ws[4] = {6, 3, 3, 3}, ws2[4] = {6, 2, 3, 3}, big[4] = {6, 4, 9, 9};
  ag_tensor *x = ag_zeros(AG_CPU, AG_F32, 4, xs);
  ag_tensor *w = ag_zeros(AG_CPU, AG_F32, 4, ws);
  ag_tensor *w2 = ag_zeros(AG_CPU, AG_F32, 4, ws2);
  ag_tensor *wb = ag_zeros(AG_CPU, AG_F32, 4, big);
  ag_conv2d_params g2 = {{1, 1}, {0, 0}, {1, 1}, 2}, bad = {{0, 1}, {0, 0}, {1, 1}, 1};
  assert_null(ag_conv2d(x, w, NULL, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_non_null(strstr(ag_last_error(), "groups=1"));
  assert_non_null(ag_conv2d(x, w2, NULL, &g2));
  assert_null(ag_conv2d(x, w2, NULL, &bad));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_conv2d(x, wb, NULL, NULL));
  assert_non_null(strstr(ag_last_error(), "larger than the padded input"));
  ag_tensor *xi = ag_zeros(AG_CPU, AG_I32, 4, xs);
  assert_null(ag_conv2d(xi, w, NULL, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  ag_tensor *xh = ag_zeros(AG_CPU, AG_F16, 4, xs), *wh = ag_zeros(AG_CPU, AG_F16, 4, ws2);
  assert_null(ag_conv2d(xh, wh, NULL, &g2)); /* f16 conv not on the CPU: reported, not crashed */
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  ag_error_clear();
  assert_null(ag_conv2d(NULL, w, NULL, NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_pool2d_params p = {{3, 3}, {0, 0}, {2, 2}, false};
  assert_null(ag_max_pool2d(x, &p)); /* padding > kernel/2 */
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_max_pool2d(x, NULL));
  ag_pool2d_params p2 = {{2, 2}, {0, 0}, {0, 0}, false};
  ag_tensor *y = ag_max_pool2d(x, &p2); /* stride 0 = kernel */
  assert_non_null(y);
  assert_int_equal(ag_tensor_shape(y)[2], 2);
  assert_null(ag_adaptive_avg_pool2d(x, 0, 2));
  int64_t c4 = 4, c3 = 3;
  ag_tensor *v3 = ag_zeros(AG_CPU, AG_F32, 1, &c3), *v4 = ag_ones(AG_CPU, AG_F32, 1, &c4);
  assert_null(ag_batch_norm(x, v3, v3, NULL, NULL, true, 0.1, 1e-5));
  assert_int_equal(ag_last_status(), AG_ERR_SHAPE);
  assert_null(ag_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1, 1e-5));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_batch_norm(x, v4, NULL, NULL, NULL, true, 0.1, 1e-5));
  assert_null(ag_batch_norm(x, v4, v4, NULL, NULL, true, 1.5, 1e-5));
  assert_non_null(ag_batch_norm(x, v4, v4, NULL, NULL, true, 0.1, 1e-5));
  ag_scope_end();
}

int main(void) {
  const char *d = getenv("AG_TEST_DEVICE");
  if (d && *d) {
    const struct CMUnitTest dev_tests[] = {cmocka_unit_test(test_device)};
    return cmocka_run_group_tests(dev_tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gradcheck),
      cmocka_unit_test(test_pytorch_reference),
      cmocka_unit_test(test_maxpool_2x2_nan_ties),
      cmocka_unit_test(test_batch_norm_paths),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
