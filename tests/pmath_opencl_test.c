/* The portable f32 math library compiled by a second compiler: the OpenCL
 * device (PoCL here) runs every function of include/anygrad/pmath.h on the
 * same inputs as this C program, with FP_CONTRACT OFF and
 * -cl-fp32-correctly-rounded-divide-sqrt, and the results must be the same
 * bits (NaN: any NaN). Skips (77) where no OpenCL device is present or it
 * lacks correctly rounded division and square root or denormals.
 *   pmath_opencl_test [n]   n inputs per function (default 10^6) */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdlib.h>

#include "pmath_cross.h"

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
    pm_inputs(f, xs, ys, n);
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
    int64_t bad = pm_compare(f, xs, ys, out, n);
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
