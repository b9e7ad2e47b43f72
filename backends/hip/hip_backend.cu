/* The HIP backend module: AMD specifics on top of the shared GPU glue
 * (kernels/gpu/runtime.cu). rocBLAS is loaded at run time when installed,
 * otherwise GEMM runs on our own tiled kernel; virtual memory uses the HIP
 * runtime's hipMem* entry points when the loaded runtime exports them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

/* The few rocBLAS declarations used, so the module builds without its headers. */
typedef void *agr_handle;
typedef int agr_status; /* rocblas_status_success == 0 */
enum { AGR_OP_N = 111, AGR_OP_T = 112 };
enum { AGR_F16 = 150, AGR_F32 = 151, AGR_F64 = 152, AGR_BF16 = 168 };
typedef agr_status (*agr_create_fn)(agr_handle *);
typedef agr_status (*agr_destroy_fn)(agr_handle);
typedef agr_status (*agr_set_stream_fn)(agr_handle, hipStream_t);
typedef agr_status (*agr_gemm_fn)(agr_handle, int, int, int32_t, int32_t, int32_t, const void *, const void *, int,
                                  int32_t, int64_t, const void *, int, int32_t, int64_t, const void *, const void *,
                                  int, int32_t, int64_t, void *, int, int32_t, int64_t, int32_t, int, int, int32_t,
                                  uint32_t);

/* Run-time resolved libraries and knobs, written once by agv_init (the
 * registry calls init once, before any other entry), read-only afterwards. */
static struct {
  agr_create_fn create;
  agr_destroy_fn destroy;
  agr_set_stream_fn set_stream;
  agr_gemm_fn gemm;
  hipError_t (*MemGetAllocationGranularity)(size_t *, const hipMemAllocationProp *,
                                            hipMemAllocationGranularity_flags);
  hipError_t (*MemAddressReserve)(void **, size_t, size_t, void *, unsigned long long);
  hipError_t (*MemAddressFree)(void *, size_t);
  hipError_t (*MemCreate)(hipMemGenericAllocationHandle_t *, size_t, const hipMemAllocationProp *,
                          unsigned long long);
  hipError_t (*MemRelease)(hipMemGenericAllocationHandle_t);
  hipError_t (*MemMap)(void *, size_t, size_t, hipMemGenericAllocationHandle_t, unsigned long long);
  hipError_t (*MemUnmap)(void *, size_t);
  hipError_t (*MemSetAccess)(void *, size_t, const hipMemAccessDesc *, size_t);
  bool vm;
  bool own_gemm;
} g;

ag_status agv_status(int code, int api, const char *what) {
  ag_status st = AG_ERR_BACKEND;
  if (api == AGV_BLAS) {
    /* rocblas_status: 5 memory error, 6..: others */
    st = code == 5 ? AG_ERR_OOM : AG_ERR_BACKEND;
    return ag_error_set(st, "hip: %s: rocblas_status %d", what, code);
  }
  hipError_t e = (hipError_t)code;
  (void)hipGetLastError(); /* clear the non-sticky error */
  if (e == hipErrorOutOfMemory) st = AG_ERR_OOM;
  else if (e == hipErrorNoDevice || e == hipErrorInsufficientDriver) st = AG_ERR_UNAVAILABLE;
  else if (e == hipErrorNotSupported) st = AG_ERR_UNSUPPORTED;
  return ag_error_set(st, "hip: %s: %s: %s (code %d)", what, hipGetErrorName(e), hipGetErrorString(e), code);
}

bool agv_env_check(char *reason, size_t reason_len) {
  static const char *const own[] = {"own", "vendor"};
  return agg_env_choice("AG_GPU_GEMM", own, 2, reason, reason_len);
}

ag_status agv_init(char *reason, size_t reason_len) {
  memset(&g, 0, sizeof g);
  const char *gemm = getenv("AG_GPU_GEMM");
  g.own_gemm = gemm && strcmp(gemm, "own") == 0;
  static const char *const libs[] = {"librocblas.so",   "librocblas.so.5", "librocblas.so.4", "librocblas.so.3",
                                     "librocblas.so.0"};
  for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !g.gemm; i++) {
    /* kept loaded for the life of the process: handles live in streams */
    void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    *(void **)&g.create = dlsym(h, "rocblas_create_handle");
    *(void **)&g.destroy = dlsym(h, "rocblas_destroy_handle");
    *(void **)&g.set_stream = dlsym(h, "rocblas_set_stream");
    *(void **)&g.gemm = dlsym(h, "rocblas_gemm_strided_batched_ex");
    if (!g.create || !g.destroy || !g.set_stream || !g.gemm) {
      g.gemm = NULL;
      dlclose(h);
    }
  }
  /* older runtimes declare the VM API but do not export it */
  *(void **)&g.MemGetAllocationGranularity = dlsym(RTLD_DEFAULT, "hipMemGetAllocationGranularity");
  *(void **)&g.MemAddressReserve = dlsym(RTLD_DEFAULT, "hipMemAddressReserve");
  *(void **)&g.MemAddressFree = dlsym(RTLD_DEFAULT, "hipMemAddressFree");
  *(void **)&g.MemCreate = dlsym(RTLD_DEFAULT, "hipMemCreate");
  *(void **)&g.MemRelease = dlsym(RTLD_DEFAULT, "hipMemRelease");
  *(void **)&g.MemMap = dlsym(RTLD_DEFAULT, "hipMemMap");
  *(void **)&g.MemUnmap = dlsym(RTLD_DEFAULT, "hipMemUnmap");
  *(void **)&g.MemSetAccess = dlsym(RTLD_DEFAULT, "hipMemSetAccess");
  g.vm = g.MemGetAllocationGranularity && g.MemAddressReserve && g.MemAddressFree && g.MemCreate && g.MemRelease &&
         g.MemMap && g.MemUnmap && g.MemSetAccess;
  (void)reason;
  (void)reason_len;
  return AG_OK;
}

static hipMemAllocationProp vm_prop(int dev) {
  hipMemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = hipMemAllocationTypePinned;
  p.location.type = hipMemLocationTypeDevice;
  p.location.id = dev;
  return p;
}

/* vm.max_map_count (65530 by default), or 0 if unreadable. */
static long max_map_count(void) {
  long n = 0;
  FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
  if (f) {
    if (fscanf(f, "%ld", &n) != 1) n = 0;
    fclose(f);
  }
  return n;
}

/* Whether the device says it supports virtual memory management: the
 * attribute exists from ROCm 6; older headers cannot ask, and then the
 * entry points' presence decides. */
static bool dev_vm(int dev) {
  if (!g.vm) return false;
#if HIP_VERSION_MAJOR >= 6
  int v = 0;
  if (hipDeviceGetAttribute(&v, hipDeviceAttributeVirtualMemoryManagementSupported, dev) != hipSuccess) {
    (void)hipGetLastError();
    return false;
  }
  return v != 0;
#else
  (void)dev;
  return true;
#endif
}

/* The allocator maps expandable segments one granule per call, and every
 * mapping may be a memory map of the process: ROCm's minimum granularity
 * (4 KiB on some devices) would exhaust vm.max_map_count long before the
 * device's memory. The recommended granularity is taken, at least 2 MiB,
 * and virtual memory is declined (0) when the whole device would need more
 * than half of the process's map count. */
size_t agv_vm_granularity(int dev) {
  size_t gran = 0, total = 0;
  hipMemAllocationProp p = vm_prop(dev);
  if (!dev_vm(dev) || g.MemGetAllocationGranularity(&gran, &p, hipMemAllocationGranularityRecommended) != hipSuccess ||
      !gran) {
    (void)hipGetLastError();
    return 0;
  }
  const size_t floor_b = (size_t)2 << 20;
  if (gran < floor_b) gran = (floor_b + gran - 1) / gran * gran;
  long maps = max_map_count();
  if (hipDeviceTotalMem(&total, dev) == hipSuccess && maps > 0 && total / gran > (size_t)maps / 2)
    return 0;
  (void)hipGetLastError();
  return gran;
}

/* hipSetDevice selects a device the runtime set up at its initialisation:
 * it creates nothing. */
bool agv_device_restorable(int dev) {
  (void)dev;
  return true;
}

void agv_props(int dev, const gpuDeviceProp *p, ag_device_props *out) {
  snprintf(out->vendor, sizeof out->vendor, "AMD");
  size_t n = strnlen(p->gcnArchName, sizeof p->gcnArchName);
  if (n >= sizeof out->arch) n = sizeof out->arch - 1;
  memcpy(out->arch, p->gcnArchName, n);
  out->arch[n] = 0;
  /* every gfx9+ target has packed f16; bf16 arithmetic from CDNA2/RDNA3 */
  out->native_f16 = true;
  out->native_bf16 = strncmp(out->arch, "gfx90a", 6) == 0 || strncmp(out->arch, "gfx94", 5) == 0 ||
                     strncmp(out->arch, "gfx95", 5) == 0 || strncmp(out->arch, "gfx11", 5) == 0 ||
                     strncmp(out->arch, "gfx12", 5) == 0;
  out->virtual_memory = agv_vm_granularity(dev) != 0;
  out->unified_memory = false;
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
  if (g.own_gemm || !g.gemm || !fits || K == 0) {
    hipError_t e = agk_matmul(env, args);
    return e == hipSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, c->name ? c->name : "gemm");
  }
  agr_status r;
  if (!s->blas) {
    agr_handle h;
    if ((r = g.create(&h)) != 0) return agv_status(r, AGV_BLAS, "rocblas_create_handle");
    s->blas = h;
  }
  if ((r = g.set_stream(s->blas, s->s)) != 0) return agv_status(r, AGV_BLAS, "rocblas_set_stream");
  /* column-major C^T = B^T A^T, as in the CUDA backend */
  /* alpha and beta in the compute type: f64 for f64, else f32 */
  float alpha = (float)args->alpha, beta = (float)args->beta;
  double alpha_d = args->alpha, beta_d = args->beta;
  const bool f64 = o->dtype == AG_F64;
  int t = o->dtype == AG_F16 ? AGR_F16 : o->dtype == AG_BF16 ? AGR_BF16 : f64 ? AGR_F64 : AGR_F32;
  r = g.gemm(s->blas, bm.row_major ? AGR_OP_N : AGR_OP_T, am.row_major ? AGR_OP_N : AGR_OP_T, (int32_t)N, (int32_t)M,
             (int32_t)K, f64 ? (const void *)&alpha_d : (const void *)&alpha, bm.p, t, (int32_t)bm.ld,
             bm.batch_stride, am.p, t, (int32_t)am.ld, am.batch_stride,
             f64 ? (const void *)&beta_d : (const void *)&beta, agk_ptr(o), t, (int32_t)N, M * N, agk_ptr(o), t,
             (int32_t)N, M * N, (int32_t)batch, f64 ? AGR_F64 : AGR_F32, 0, 0, 0);
  if (r != 0) return agv_status(r, AGV_BLAS, "rocblas_gemm_strided_batched_ex");
  return AG_OK;
}

/* Own kernels (kernels/gpu/conv.cu); MIOpen is not used. */
ag_status agv_conv(const agk_env *env, const agk_conv *cv) {
  gpuError_t e = agk_conv_run(env, cv);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, cv->call->name ? cv->call->name : "conv2d");
}

void agv_stream_release(ag_bstream *s) {
  if (s->blas && g.destroy) (void)g.destroy(s->blas);
  s->blas = NULL;
}

ag_status agv_vm_reserve(int dev, size_t bytes, void **out_base) {
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "hip: the HIP runtime has no virtual memory entry points");
  hipError_t e = g.MemAddressReserve(out_base, bytes, 0, NULL, 0);
  return e == hipSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, "hipMemAddressReserve");
}

ag_status agv_vm_map_one(int dev, void *at, size_t bytes) {
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "hip: the HIP runtime has no virtual memory entry points");
  hipMemAllocationProp p = vm_prop(dev);
  hipMemGenericAllocationHandle_t h;
  hipError_t e = g.MemCreate(&h, bytes, &p, 0);
  if (e != hipSuccess) return agv_status((int)e, AGV_RUNTIME, "hipMemCreate");
  e = g.MemMap(at, bytes, 0, h, 0);
  (void)g.MemRelease(h); /* the mapping keeps the memory alive */
  if (e != hipSuccess) return agv_status((int)e, AGV_RUNTIME, "hipMemMap");
  hipMemAccessDesc acc;
  memset(&acc, 0, sizeof acc);
  acc.location = p.location;
  acc.flags = hipMemAccessFlagsProtReadWrite;
  e = g.MemSetAccess(at, bytes, &acc, 1);
  if (e != hipSuccess) {
    (void)g.MemUnmap(at, bytes);
    return agv_status((int)e, AGV_RUNTIME, "hipMemSetAccess");
  }
  return AG_OK;
}

ag_status agv_vm_unmap_one(int dev, void *at, size_t bytes) {
  if (!g.vm) return ag_error_set(AG_ERR_UNSUPPORTED, "hip: the HIP runtime has no virtual memory entry points");
  hipError_t e = g.MemUnmap(at, bytes);
  return e == hipSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, "hipMemUnmap");
}

void agv_vm_release(int dev, void *base, size_t bytes) {
  if (g.vm) (void)g.MemAddressFree(base, bytes);
}
