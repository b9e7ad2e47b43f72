/* The portable f32 math library compiled by a second compiler: the OpenCL
 * device (PoCL here) runs every function of include/anygrad/pmath.h on the
 * same inputs as this C program, with FP_CONTRACT OFF and
 * -cl-fp32-correctly-rounded-divide-sqrt, and the results must be the same
 * bits (NaN: any NaN). Skips (77) where no OpenCL device is present or it
 * lacks correctly rounded division and square root or denormals.
 *   pmath_opencl_test [n]   n inputs per function (default 10^6) */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AGP_NATIVE_DIVSQRT 1
#include "anygrad/pmath.h"

/* the functions, in the kernel's switch order */
#define PM_FUNCS(X)                                                  \
  X(exp, agp_exp(x)) X(exp2, agp_exp2(x)) X(expm1, agp_expm1(x))     \
  X(log, agp_log(x)) X(log1p, agp_log1p(x)) X(tanh, agp_tanh(x))     \
  X(sigmoid, agp_sigmoid(x)) X(erf, agp_erf(x)) X(sin, agp_sin(x))   \
  X(cos, agp_cos(x)) X(sinh, agp_sinh(x)) X(cosh, agp_cosh(x))       \
  X(sqrt, agp_sqrt(x)) X(rsqrt, agp_rsqrt(x)) X(div, agp_div(x, y))  \
  X(pow, agp_pow(x, y)) X(atan2, agp_atan2(x, y))                    \
  X(fmod, agp_fmod(x, y)) X(div_built, agp_div_built(x, y))          \
  X(sqrt_built, agp_sqrt_built(x)) X(floor, agp_floor(x))            \
  X(rint, agp_rint(x)) X(f16, agp_f16_bits_to_f32(agp_f32_to_f16_bits(x))) \
  X(bf16, agp_bf16_bits_to_f32(agp_f32_to_bf16_bits(x)))

static float host_eval(int f, float x, float y) {
  float r = 0;
  int k = 0;
#define PM_HOST(name, expr) \
  if (f == k++) return expr;
  PM_FUNCS(PM_HOST)
#undef PM_HOST
  return r;
}

static const char *g_names[] = {
#define PM_NAME(name, expr) #name,
    PM_FUNCS(PM_NAME)
#undef PM_NAME
};
#define PM_COUNT ((int)(sizeof g_names / sizeof *g_names))

/* the kernel: one switch case per function, numbered as above */
static char *kernel_source(void) {
  static char src[16384];
  int n = snprintf(src, sizeof src,
                   "#define AGP_NATIVE_DIVSQRT 1\n#include \"anygrad/pmath.h\"\n"
                   "__kernel void pm(int f, __global const float *xs, __global const float *ys, __global float *out) {\n"
                   "  size_t i = get_global_id(0);\n  float x = xs[i], y = ys[i], r = 0.0f;\n  switch (f) {\n");
  int k = 0;
#define PM_SRC(name, expr) n += snprintf(src + n, sizeof src - (size_t)n, "  case %d: r = %s; break;\n", k++, #expr);
  PM_FUNCS(PM_SRC)
#undef PM_SRC
  snprintf(src + n, sizeof src - (size_t)n, "  }\n  out[i] = r;\n}\n");
  return src;
}

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd32(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float fb(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* inputs: a quarter any bits, the rest in the ranges models use */
static float input(int64_t i) {
  switch (i & 3) {
  case 0: return fb(rnd32());
  case 1: return (float)((int32_t)rnd32()) * 0x1p-28f;    /* |x| < 8 */
  case 2: return (float)((int32_t)rnd32()) * 0x1p-24f;    /* |x| < 128 */
  default: return fb(rnd32() & 0x3fffffffu) * (rnd32() & 1 ? 1.0f : -1.0f); /* |x| < 2 */
  }
}

#define SKIP(...)                  \
  do {                             \
    printf("skipped: " __VA_ARGS__); \
    printf("\n");                  \
    return 77;                     \
  } while (0)
#define CHECK(e, what)                                     \
  do {                                                     \
    if ((e) != CL_SUCCESS) {                               \
      fprintf(stderr, "%s failed: %d\n", what, (int)(e));  \
      return 1;                                            \
    }                                                      \
  } while (0)

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 1000000;
  cl_platform_id plat[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, plat, &np) != CL_SUCCESS || np == 0) SKIP("no OpenCL platform");
  cl_device_id dev = NULL;
  for (cl_uint p = 0; p < np && !dev; p++) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(plat[p], CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS || nd == 0) dev = NULL;
  }
  if (!dev) SKIP("no OpenCL device");
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
  if (!(fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) || !(fp & CL_FP_DENORM))
    SKIP("the device lacks correctly rounded divide/sqrt or denormals");
  char dname[256] = "";
  clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
  cl_int err;
  cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
  CHECK(err, "clCreateContext");
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  CHECK(err, "clCreateCommandQueue");
  const char *src = kernel_source();
  cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
  CHECK(err, "clCreateProgramWithSource");
  char opts[1024];
  snprintf(opts, sizeof opts, "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt -I %s", PMATH_INCLUDE);
  err = clBuildProgram(prog, 1, &dev, opts, NULL, NULL);
  if (err != CL_SUCCESS) {
    static char log[65536];
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    fprintf(stderr, "build failed: %s\n", log);
    return 1;
  }
  cl_kernel k = clCreateKernel(prog, "pm", &err);
  CHECK(err, "clCreateKernel");
  size_t bytes = (size_t)n * sizeof(float);
  float *xs = malloc(bytes), *ys = malloc(bytes), *out = malloc(bytes);
  if (!xs || !ys || !out) return 1;
  cl_mem bx = clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &err);
  CHECK(err, "clCreateBuffer");
  cl_mem by = clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &err);
  CHECK(err, "clCreateBuffer");
  cl_mem bo = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, bytes, NULL, &err);
  CHECK(err, "clCreateBuffer");
  int64_t total_bad = 0;
  printf("device: %s, %lld inputs per function\n", dname, (long long)n);
  for (int f = 0; f < PM_COUNT; f++) {
    for (int64_t i = 0; i < n; i++) {
      xs[i] = input(i);
      ys[i] = input(i + 1);
    }
    if (!strcmp(g_names[f], "pow")) /* mostly x > 0 and moderate y, where results are not 0 or inf */
      for (int64_t i = 0; i < n; i++) {
        if (i & 1) xs[i] = fabsf(xs[i]);
        if (i % 3) ys[i] = (float)((int32_t)rnd32()) * 0x1p-27f;
      }
    CHECK(clEnqueueWriteBuffer(q, bx, CL_TRUE, 0, bytes, xs, 0, NULL, NULL), "write");
    CHECK(clEnqueueWriteBuffer(q, by, CL_TRUE, 0, bytes, ys, 0, NULL, NULL), "write");
    cl_int fi = f;
    CHECK(clSetKernelArg(k, 0, sizeof fi, &fi), "arg");
    CHECK(clSetKernelArg(k, 1, sizeof bx, &bx), "arg");
    CHECK(clSetKernelArg(k, 2, sizeof by, &by), "arg");
    CHECK(clSetKernelArg(k, 3, sizeof bo, &bo), "arg");
    size_t gs = (size_t)n;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &gs, NULL, 0, NULL, NULL), "launch");
    CHECK(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, bytes, out, 0, NULL, NULL), "read");
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      float h = host_eval(f, xs[i], ys[i]);
      if (isnan(h) && isnan(out[i])) continue;
      if (bf(h) != bf(out[i])) {
        if (bad < 3)
          printf("  %s(%a, %a): device %a, host %a\n", g_names[f], xs[i], ys[i], out[i], h);
        bad++;
      }
    }
    printf("%-11s %lld mismatches\n", g_names[f], (long long)bad);
    total_bad += bad;
  }
  clReleaseMemObject(bx);
  clReleaseMemObject(by);
  clReleaseMemObject(bo);
  clReleaseKernel(k);
  clReleaseProgram(prog);
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  free(xs);
  free(ys);
  free(out);
  printf("total: %lld mismatches\n", (long long)total_bad);
  return total_bad == 0 ? 0 : 1;
}
