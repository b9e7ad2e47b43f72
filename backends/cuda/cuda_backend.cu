/* The CUDA backend module: NVIDIA specifics on top of the shared GPU glue
 * (kernels/gpu/runtime.cu): cuBLAS GEMM, virtual memory through driver entry
 * points (so only libcuda, found at run time by the static cudart, is needed),
 * device details and the error translation (the vtable is runtime.cu's). */
#include <cublas_v2.h>
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dnn.h"
#include "gpu.h"

/* Driver entry points and knobs, resolved once by agv_init (the registry
 * calls init once, before any other entry) and read-only afterwards. */
static struct {
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*MemAddressFree)(CUdeviceptr, size_t);
  CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*MemRelease)(CUmemGenericAllocationHandle);
  CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*MemUnmap)(CUdeviceptr, size_t);
  CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
  bool vm;          /* every VM entry point resolved */
  bool own_gemm;    /* AG_GPU_GEMM=own */
  bool allow_tf32;  /* AG_ALLOW_TF32=1 */
  bool allow_fp16_rr; /* AG_ALLOW_FP16_REDUCED_PRECISION=1 */
} g;

ag_status agv_status(int code, int api, const char *what) {
  const char *name = "?", *msg = "";
  ag_status st = AG_ERR_BACKEND;
  if (api == AGV_RUNTIME) {
    cudaError_t e = (cudaError_t)code;
    name = cudaGetErrorName(e);
    msg = cudaGetErrorString(e);
    (void)cudaGetLastError(); /* clear the non-sticky error */
    if (e == cudaErrorMemoryAllocation) st = AG_ERR_OOM;
    else if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) st = AG_ERR_UNAVAILABLE;
    else if (e == cudaErrorNotSupported) st = AG_ERR_UNSUPPORTED;
  } else if (api == AGV_DRIVER) {
    CUresult r = (CUresult)code;
    if (g.GetErrorName) (void)g.GetErrorName(r, &name);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) st = AG_ERR_OOM;
    else if (r == CUDA_ERROR_NOT_SUPPORTED) st = AG_ERR_UNSUPPORTED;
    else if (r == CUDA_ERROR_NO_DEVICE) st = AG_ERR_UNAVAILABLE;
  } else {
    cublasStatus_t b = (cublasStatus_t)code;
    name = cublasGetStatusName(b);
    msg = cublasGetStatusString(b);
    if (b == CUBLAS_STATUS_ALLOC_FAILED) st = AG_ERR_OOM;
    else if (b == CUBLAS_STATUS_NOT_SUPPORTED) st = AG_ERR_UNSUPPORTED;
  }
  return ag_error_set(st, "cuda: %s: %s%s%s (code %d)", what, name ? name : "?", msg && *msg ? ": " : "",
                      msg ? msg : "", code);
}

static void *entry(const char *sym) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
#if CUDART_VERSION >= 12050
  if (cudaGetDriverEntryPointByVersion(sym, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    fn = NULL;
#else
  if (cudaGetDriverEntryPoint(sym, &fn, cudaEnableDefault, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess)
    fn = NULL;
#endif
  (void)cudaGetLastError();
  return fn;
}

bool agv_env_check(char *reason, size_t reason_len) {
  static const char *const own[] = {"own", "vendor"}, *const bit[] = {"0", "1"};
  return agg_env_choice("AG_GPU_GEMM", own, 2, reason, reason_len) &&
         agg_env_choice("AG_GPU_CONV", own, 2, reason, reason_len) &&
         agg_env_choice("AG_ALLOW_TF32", bit, 2, reason, reason_len) &&
         agg_env_choice("AG_ALLOW_FP16_REDUCED_PRECISION", bit, 2, reason, reason_len);
}

ag_status agv_init(char *reason, size_t reason_len) {
  memset(&g, 0, sizeof g);
  *(void **)&g.GetErrorName = entry("cuGetErrorName");
  *(void **)&g.DeviceGetAttribute = entry("cuDeviceGetAttribute");
  *(void **)&g.MemGetAllocationGranularity = entry("cuMemGetAllocationGranularity");
  *(void **)&g.MemAddressReserve = entry("cuMemAddressReserve");
  *(void **)&g.MemAddressFree = entry("cuMemAddressFree");
  *(void **)&g.MemCreate = entry("cuMemCreate");
  *(void **)&g.MemRelease = entry("cuMemRelease");
  *(void **)&g.MemMap = entry("cuMemMap");
  *(void **)&g.MemUnmap = entry("cuMemUnmap");
  *(void **)&g.MemSetAccess = entry("cuMemSetAccess");
  *(void **)&g.DevicePrimaryCtxGetState = entry("cuDevicePrimaryCtxGetState");
  g.vm = g.DeviceGetAttribute && g.MemGetAllocationGranularity && g.MemAddressReserve && g.MemAddressFree &&
         g.MemCreate && g.MemRelease && g.MemMap && g.MemUnmap && g.MemSetAccess;
  const char *gemm = getenv("AG_GPU_GEMM"), *tf32 = getenv("AG_ALLOW_TF32");
  const char *rr = getenv("AG_ALLOW_FP16_REDUCED_PRECISION");
  g.own_gemm = gemm && strcmp(gemm, "own") == 0;
  g.allow_tf32 = tf32 && strcmp(tf32, "1") == 0;
  g.allow_fp16_rr = rr && strcmp(rr, "1") == 0;
  (void)reason;
  (void)reason_len;
  return AG_OK;
}

static bool dev_vm(int dev) {
  int v = 0;
  if (!g.vm || g.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS)
    return false;
  return v != 0;
}

/* cudaSetDevice initializes the device's primary context (CUDA 12): a
 * caller's previous device is made current again only if the process already
 * has that context, else every process of a one-GPU-per-rank job would get a
 * context on GPU 0 (PyTorch's MaybeSetDevice makes the same test). Without
 * the entry point (an old driver) the caller's device is always restored. */
bool agv_device_restorable(int dev) {
  unsigned int flags = 0;
  int active = 0;
  if (!g.DevicePrimaryCtxGetState) return true;
  if (g.DevicePrimaryCtxGetState((CUdevice)dev, &flags, &active) != CUDA_SUCCESS) return true;
  return active != 0;
}

void agv_props(int dev, const gpuDeviceProp *p, ag_device_props *out) {
  /* `anygrad info` shows the vendor: it says what runs conv2d */
  snprintf(out->vendor, sizeof out->vendor, "NVIDIA; conv2d: %s", agv_dnn_describe(dev));
  snprintf(out->arch, sizeof out->arch, "sm_%d%d", p->major, p->minor);
  out->native_f16 = p->major > 5 || (p->major == 5 && p->minor >= 3);
  out->native_bf16 = p->major >= 8;
  out->virtual_memory = dev_vm(dev);
  out->unified_memory = false;
}

/* ---- GEMM ---- */

static cudaDataType dtype_of(ag_dtype dt) {
  return dt == AG_F16 ? CUDA_R_16F : dt == AG_BF16 ? CUDA_R_16BF : dt == AG_F64 ? CUDA_R_64F : CUDA_R_32F;
}

ag_status agv_gemm(const agk_env *env, const ag_k_matmul *args) {
  ag_bstream *s = env->bs;
  const ag_kernel_call *c = args->call;
  const ag_koperand *o = args->c, *a = args->a, *b = args->b;
  int nd = o->ndim;
  long long M = o->shape[nd - 2], N = o->shape[nd - 1], K = a->shape[a->ndim - 1], batch = 1;
  for (int i = 0; i < nd - 2; i++) batch *= o->shape[i];
  if (M == 0 || N == 0 || batch == 0) return AG_OK;
  agk_mat am = agk_mat_of(a), bm = agk_mat_of(b);
  bool fits = M < 0x7fffffff && N < 0x7fffffff && K < 0x7fffffff && batch < 0x7fffffff && am.ld < 0x7fffffff &&
              bm.ld < 0x7fffffff;
  if (g.own_gemm || !fits || K == 0) {
    gpuError_t e = agk_matmul(env, args);
    return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, c->name ? c->name : "gemm");
  }
  cublasStatus_t r;
  if (!s->blas) {
    cublasHandle_t h;
    if ((r = cublasCreate(&h)) != CUBLAS_STATUS_SUCCESS) return agv_status((int)r, AGV_BLAS, "cublasCreate");
    /* f16/bf16 GEMMs accumulate in f32; without this cuBLAS may reduce
     * split-K partials in half precision. Opt in with
     * AG_ALLOW_FP16_REDUCED_PRECISION=1. */
    cublasMath_t mode = g.allow_fp16_rr ? CUBLAS_DEFAULT_MATH
                                        : (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if ((r = cublasSetMathMode(h, mode)) != CUBLAS_STATUS_SUCCESS) {
      (void)cublasDestroy(h);
      return agv_status((int)r, AGV_BLAS, "cublasSetMathMode");
    }
    s->blas = h;
  }
  cublasHandle_t h = (cublasHandle_t)s->blas;
  if ((r = cublasSetStream(h, s->s)) != CUBLAS_STATUS_SUCCESS) return agv_status((int)r, AGV_BLAS, "cublasSetStream");
  /* Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first. A
   * row-major operand is its own transpose in column-major terms (op N). */
  /* alpha and beta in the compute type: f64 for f64, else f32 */
  float alpha = (float)args->alpha, beta = (float)args->beta;
  double alpha_d = args->alpha, beta_d = args->beta;
  const bool f64 = o->dtype == AG_F64;
  cudaDataType t = dtype_of(o->dtype);
  cublasComputeType_t ct = f64 ? CUBLAS_COMPUTE_64F
                           : o->dtype == AG_F32 && g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                : CUBLAS_COMPUTE_32F;
  r = cublasGemmStridedBatchedEx(h, bm.row_major ? CUBLAS_OP_N : CUBLAS_OP_T, am.row_major ? CUBLAS_OP_N : CUBLAS_OP_T,
                                 (int)N, (int)M, (int)K, f64 ? (const void *)&alpha_d : (const void *)&alpha, bm.p, t, (int)bm.ld, bm.batch_stride, am.p, t,
                                 (int)am.ld, am.batch_stride, f64 ? (const void *)&beta_d : (const void *)&beta, agk_ptr(o), t, (int)N, M * N, (int)batch, ct,
                                 CUBLAS_GEMM_DEFAULT);
  if (r != CUBLAS_STATUS_SUCCESS) return agv_status((int)r, AGV_BLAS, "cublasGemmStridedBatchedEx");
  return AG_OK;
}

void agv_stream_release(ag_bstream *s) {
  if (s->blas) (void)cublasDestroy((cublasHandle_t)s->blas);
  s->blas = NULL;
  agv_dnn_release(s);
}

/* ---- virtual memory (expandable segments) ---- */

static CUmemAllocationProp vm_prop(int dev) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

size_t agv_vm_granularity(int dev) {
  size_t gran = 0;
  CUmemAllocationProp p = vm_prop(dev);
  if (!g.vm || g.MemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) return 0;
  return gran;
}

ag_status agv_vm_reserve(int dev, size_t bytes, void **out_base) {
  CUdeviceptr ptr = 0;
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "cuda: virtual memory entry points are unavailable");
  CUresult r = g.MemAddressReserve(&ptr, bytes, 0, 0, 0);
  if (r != CUDA_SUCCESS) return agv_status((int)r, AGV_DRIVER, "cuMemAddressReserve");
  *out_base = (void *)ptr;
  return AG_OK;
}

ag_status agv_vm_map_one(int dev, void *at_ptr, size_t bytes) {
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "cuda: virtual memory entry points are unavailable");
  CUmemAllocationProp p = vm_prop(dev);
  CUmemGenericAllocationHandle h;
  CUdeviceptr at = (CUdeviceptr)at_ptr;
  CUresult r = g.MemCreate(&h, bytes, &p, 0);
  if (r != CUDA_SUCCESS) return agv_status((int)r, AGV_DRIVER, "cuMemCreate");
  r = g.MemMap(at, bytes, 0, h, 0);
  /* the mapping keeps the physical memory alive; unmapping frees it */
  (void)g.MemRelease(h);
  if (r != CUDA_SUCCESS) return agv_status((int)r, AGV_DRIVER, "cuMemMap");
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location = p.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = g.MemSetAccess(at, bytes, &acc, 1);
  if (r != CUDA_SUCCESS) {
    (void)g.MemUnmap(at, bytes);
    return agv_status((int)r, AGV_DRIVER, "cuMemSetAccess");
  }
  return AG_OK;
}

ag_status agv_vm_unmap_one(int dev, void *at, size_t bytes) {
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "cuda: virtual memory entry points are unavailable");
  CUresult r = g.MemUnmap((CUdeviceptr)at, bytes);
  if (r != CUDA_SUCCESS) return agv_status((int)r, AGV_DRIVER, "cuMemUnmap");
  return AG_OK;
}

void agv_vm_release(int dev, void *base, size_t bytes) {
  if (g.vm) (void)g.MemAddressFree((CUdeviceptr)base, bytes);
}
