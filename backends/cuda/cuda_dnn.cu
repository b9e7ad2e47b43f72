/* conv2d through cuDNN, loaded at run time (dlopen libcudnn.so.9, then .so.8)
 * so the module neither links nor requires it: without cuDNN, or with
 * AG_GPU_CONV=own, the backend runs its own kernels (kernels/gpu/conv.cu).
 * Only cudnn.h's types are used at build time; when the toolkit has no
 * cudnn.h the module is built without this path. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "cuda_dnn.h"
#include "dnn_status.h"

#if __has_include(<cudnn.h>)
#include <cudnn.h>
#define AG_HAVE_CUDNN_H 1
#endif

/* Resolved once by dnn_load (pthread_once, on the first conv2d) and
 * read-only afterwards. */
static char g_describe[96] = "own kernels";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_loaded; /* set (release) when dnn_load finished g_describe */
/* Per device, set once cuDNN proved unable to run there (a status of class
 * AG_DNN_UNUSABLE, dnn_status.h; an architecture may be unsupported on one
 * device only): the own kernels run every conv2d on it from then on, and
 * its vendor line names the status. A broken installation found at load
 * marks every device. */
static ag_dnn_fallback g_fallback[AG_MAX_DEVICES];

static ag_dnn_fallback *fallback_of(int dev) {
  return &g_fallback[dev >= 0 && dev < AG_MAX_DEVICES ? dev : 0];
}

#if defined(AG_HAVE_CUDNN_H)

#define DNN_FNS(X)                                                                                          \
  X(cudnnStatus_t, Create, (cudnnHandle_t *))                                                               \
  X(cudnnStatus_t, Destroy, (cudnnHandle_t))                                                                \
  X(cudnnStatus_t, SetStream, (cudnnHandle_t, cudaStream_t))                                                \
  X(const char *, GetErrorString, (cudnnStatus_t))                                                          \
  X(size_t, GetVersion, (void))                                                                             \
  X(cudnnStatus_t, CreateTensorDescriptor, (cudnnTensorDescriptor_t *))                                     \
  X(cudnnStatus_t, SetTensor4dDescriptor,                                                                   \
    (cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int))                    \
  X(cudnnStatus_t, DestroyTensorDescriptor, (cudnnTensorDescriptor_t))                                      \
  X(cudnnStatus_t, CreateFilterDescriptor, (cudnnFilterDescriptor_t *))                                     \
  X(cudnnStatus_t, SetFilter4dDescriptor,                                                                   \
    (cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, int, int, int))                    \
  X(cudnnStatus_t, DestroyFilterDescriptor, (cudnnFilterDescriptor_t))                                      \
  X(cudnnStatus_t, CreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t *))                          \
  X(cudnnStatus_t, SetConvolution2dDescriptor,                                                              \
    (cudnnConvolutionDescriptor_t, int, int, int, int, int, int, cudnnConvolutionMode_t, cudnnDataType_t))  \
  X(cudnnStatus_t, SetConvolutionGroupCount, (cudnnConvolutionDescriptor_t, int))                           \
  X(cudnnStatus_t, SetConvolutionMathType, (cudnnConvolutionDescriptor_t, cudnnMathType_t))                 \
  X(cudnnStatus_t, DestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t))                            \
  X(cudnnStatus_t, GetConvolutionForwardWorkspaceSize,                                                      \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t, size_t *))                                         \
  X(cudnnStatus_t, GetConvolutionBackwardDataWorkspaceSize,                                                 \
    (cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgo_t, size_t *))                                     \
  X(cudnnStatus_t, GetConvolutionBackwardFilterWorkspaceSize,                                               \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnFilterDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, size_t *))                                   \
  X(cudnnStatus_t, GetConvolutionForwardAlgorithm_v7,                                                       \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnTensorDescriptor_t, int, int *, cudnnConvolutionFwdAlgoPerf_t *))                                 \
  X(cudnnStatus_t, ConvolutionForward,                                                                      \
    (cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, cudnnFilterDescriptor_t,           \
     const void *, cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void *, size_t, const void *,   \
     cudnnTensorDescriptor_t, void *))                                                                      \
  X(cudnnStatus_t, GetConvolutionBackwardDataAlgorithm_v7,                                                  \
    (cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnTensorDescriptor_t, int, int *, cudnnConvolutionBwdDataAlgoPerf_t *))                             \
  X(cudnnStatus_t, ConvolutionBackwardData,                                                                 \
    (cudnnHandle_t, const void *, cudnnFilterDescriptor_t, const void *, cudnnTensorDescriptor_t,           \
     const void *, cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t, void *, size_t,             \
     const void *, cudnnTensorDescriptor_t, void *))                                                        \
  X(cudnnStatus_t, GetConvolutionBackwardFilterAlgorithm_v7,                                                \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,          \
     cudnnFilterDescriptor_t, int, int *, cudnnConvolutionBwdFilterAlgoPerf_t *))                           \
  X(cudnnStatus_t, ConvolutionBackwardFilter,                                                               \
    (cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, cudnnTensorDescriptor_t,           \
     const void *, cudnnConvolutionDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, void *, size_t,           \
     const void *, cudnnFilterDescriptor_t, void *))                                                        \
  X(cudnnStatus_t, AddTensor,                                                                               \
    (cudnnHandle_t, const void *, cudnnTensorDescriptor_t, const void *, const void *,                      \
     cudnnTensorDescriptor_t, void *))

#define DNN_FIELD(ret, name, args) ret(*name) args;
static struct {
  void *lib;
  bool tf32; /* AG_ALLOW_TF32=1: f32 convolutions may use TF32 tensor cores */
  size_t major, minor, patch; /* of the loaded library: its status codes differ (dnn_status.h) */
  DNN_FNS(DNN_FIELD)
} d;

/* Workspaces above this are not taken: the heuristics' next algorithm that
 * fits is used instead (their list always ends with one that needs none). */
#define DNN_WS_CAP ((size_t)256 << 20)

/* cuDNN takes a second and hundreds of MiB of host memory to load: only a
 * process that runs a convolution pays for it. */
static void dnn_open(void) {
  memset(&d, 0, sizeof d);
  const char *own = getenv("AG_GPU_CONV");
  if (own && strcmp(own, "own") == 0) {
    snprintf(g_describe, sizeof g_describe, "own kernels (AG_GPU_CONV=own)");
    return;
  }
  static const char *const names[] = {"libcudnn.so.9", "libcudnn.so.8"};
  for (size_t i = 0; i < sizeof names / sizeof *names && !d.lib; i++) d.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) {
    snprintf(g_describe, sizeof g_describe, "own kernels (no libcudnn.so.9/.8)");
    return;
  }
  bool all = true;
#define DNN_RESOLVE(ret, name, args)                                   \
  *(void **)&d.name = dlsym(d.lib, "cudnn" #name);                    \
  if (!d.name) all = false;
  DNN_FNS(DNN_RESOLVE)
#undef DNN_RESOLVE
  if (!all) {
    dlclose(d.lib);
    memset(&d, 0, sizeof d);
    snprintf(g_describe, sizeof g_describe, "own kernels (libcudnn lacks an entry point)");
    return;
  }
  const char *tf32 = getenv("AG_ALLOW_TF32");
  d.tf32 = tf32 && strcmp(tf32, "1") == 0;
  ag_dnn_version(d.GetVersion(), &d.major, &d.minor, &d.patch);
  snprintf(g_describe, sizeof g_describe, "cuDNN %zu.%zu.%zu", d.major, d.minor, d.patch);
  /* cuDNN 9 loads its sublibraries lazily: a missing or mismatched one
   * would surface only at the first convolution, as 1008 or 1002. Each
   * sublibrary's check loads it now. */
  static const char *const checks[] = {"cudnnGraphVersionCheck", "cudnnOpsVersionCheck", "cudnnCnnVersionCheck"};
  for (size_t i = 0; d.major >= 9 && i < sizeof checks / sizeof *checks; i++) {
    cudnnStatus_t (*check)(void);
    *(void **)&check = dlsym(d.lib, checks[i]);
    cudnnStatus_t r = check ? check() : CUDNN_STATUS_SUCCESS;
    if (r != CUDNN_STATUS_SUCCESS) {
      for (int dev = 0; dev < AG_MAX_DEVICES; dev++)
        (void)ag_dnn_fallback_record(&g_fallback[dev], d.major, d.minor, d.patch, (int)r);
      break;
    }
  }
}

static void dnn_load(void) {
  dnn_open();
  __atomic_store_n(&g_loaded, true, __ATOMIC_RELEASE);
}


/* Codes are compared as the loaded library numbers them, not as the cudnn.h
 * the module was built with. A status that says cuDNN cannot run on device
 * dev is recorded: AG_ERR_UNSUPPORTED, and no later call there asks cuDNN
 * again. */
static ag_status dnn_status(int dev, cudnnStatus_t r, const char *what) {
  ag_dnn_class k = ag_dnn_classify(d.major, (int)r);
  ag_status st = k == AG_DNN_OK ? AG_ERR_BACKEND : ag_dnn_status(d.major, (int)r);
  if (k == AG_DNN_UNUSABLE) (void)ag_dnn_fallback_record(fallback_of(dev), d.major, d.minor, d.patch, (int)r);
  return ag_error_set(st, "cuda: %s: %s (cuDNN code %d)%s", what, d.GetErrorString ? d.GetErrorString(r) : "?",
                      (int)r, k == AG_DNN_BUG ? ": cuDNN refused anygrad's parameters (a bug in anygrad)" : "");
}

static cudnnDataType_t dnn_type(ag_dtype dt) {
  return dt == AG_F16 ? CUDNN_DATA_HALF : dt == AG_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* cuDNN's workspace for this call: a block of the core's caching allocator
 * (category workspace, in ag_memory_stats), freed by the core when the
 * launch returns and reused in the stream's order. None needed: NULL. A full
 * device (AG_ERR_OOM, counted by the allocator after it released its cache)
 * or a core without the service: AG_ERR_UNSUPPORTED, so the own kernels,
 * which need none, take the call. */
static ag_status dnn_workspace(const ag_kernel_call *c, size_t bytes, void **out) {
  *out = NULL;
  if (!bytes) return AG_OK;
  ag_status st = agg_workspace(c, bytes, out);
  if (st == AG_ERR_OOM || st == AG_ERR_UNSUPPORTED) {
    ag_error_clear();
    return AG_ERR_UNSUPPORTED;
  }
  return st;
}

/* The first algorithm of the heuristics' list that succeeded, fits the
 * workspace cap and, in deterministic mode, is deterministic. The heuristics'
 * `memory` is an estimate: the size passed to the convolution is the one
 * cudnnGet*WorkspaceSize (the WS_SIZE call, which sets ws_ from algo_)
 * reports for that algorithm; an algorithm it declines is skipped. */
#define PICK(perf, n, det, out_algo, out_ws, WS_SIZE)                                              \
  do {                                                                                             \
    for (int i_ = 0; i_ < (n); i_++) {                                                             \
      if ((perf)[i_].status != CUDNN_STATUS_SUCCESS || (perf)[i_].memory > DNN_WS_CAP) continue;   \
      if ((det) && (perf)[i_].determinism != CUDNN_DETERMINISTIC) continue;                       \
      size_t ws_ = 0;                                                                              \
      const auto algo_ = (perf)[i_].algo;                                                          \
      if ((WS_SIZE) != CUDNN_STATUS_SUCCESS || ws_ > DNN_WS_CAP) continue;                         \
      *(out_algo) = algo_;                                                                         \
      *(out_ws) = ws_;                                                                             \
      found = true;                                                                                \
      break;                                                                                       \
    }                                                                                              \
  } while (0)

static ag_status dnn_conv(ag_bstream *s, const agk_conv *cv) {
  const ag_kernel_call *c = cv->call;
  const bool fwd = cv->op == AG_K_CONV2D, bin = cv->op == AG_K_CONV2D_BWD_INPUT;
  const ag_koperand *X = cv->x, *Y = cv->y, *W = cv->w;
  const bool det = (c->flags & AG_KF_DETERMINISTIC) != 0;
  const cudnnDataType_t t = dnn_type(X->dtype);
  cudnnStatus_t r;
  if (!s->dnn) {
    cudnnHandle_t h;
    if ((r = d.Create(&h)) != CUDNN_STATUS_SUCCESS) return dnn_status(s->dev, r, "cudnnCreate");
    s->dnn = h;
  }
  cudnnHandle_t h = (cudnnHandle_t)s->dnn;
  if ((r = d.SetStream(h, s->s)) != CUDNN_STATUS_SUCCESS) return dnn_status(s->dev, r, "cudnnSetStream");
  cudnnTensorDescriptor_t xd = NULL, yd = NULL, bd = NULL;
  cudnnFilterDescriptor_t wd = NULL;
  cudnnConvolutionDescriptor_t cd = NULL;
  ag_status st = AG_OK;
  const char *what = "cudnnCreate*Descriptor";
  bool found = false;
  size_t ws = 0;
  void *wsp = NULL;
  const float one = 1.0f, zero = 0.0f;
  /* one cleanup tail: every step below sets r and what */
  if ((r = d.CreateTensorDescriptor(&xd)) != CUDNN_STATUS_SUCCESS || (r = d.CreateTensorDescriptor(&yd)) != CUDNN_STATUS_SUCCESS ||
      (r = d.CreateFilterDescriptor(&wd)) != CUDNN_STATUS_SUCCESS ||
      (r = d.CreateConvolutionDescriptor(&cd)) != CUDNN_STATUS_SUCCESS)
    goto done;
  what = "cudnnSet*Descriptor";
  if ((r = d.SetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, t, (int)X->shape[0], (int)X->shape[1], (int)X->shape[2],
                                   (int)X->shape[3])) != CUDNN_STATUS_SUCCESS ||
      (r = d.SetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, t, (int)Y->shape[0], (int)Y->shape[1], (int)Y->shape[2],
                                   (int)Y->shape[3])) != CUDNN_STATUS_SUCCESS ||
      (r = d.SetFilter4dDescriptor(wd, t, CUDNN_TENSOR_NCHW, (int)W->shape[0], (int)W->shape[1], (int)W->shape[2],
                                   (int)W->shape[3])) != CUDNN_STATUS_SUCCESS ||
      (r = d.SetConvolution2dDescriptor(cd, (int)cv->pad_h, (int)cv->pad_w, (int)cv->stride_h, (int)cv->stride_w,
                                        (int)cv->dilation_h, (int)cv->dilation_w, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT)) != CUDNN_STATUS_SUCCESS ||
      (r = d.SetConvolutionGroupCount(cd, (int)cv->groups)) != CUDNN_STATUS_SUCCESS ||
      /* f32 stays f32 unless TF32 is allowed, as for cuBLAS (docs/gpu.md) */
      (r = d.SetConvolutionMathType(cd, X->dtype != AG_F32 ? CUDNN_TENSOR_OP_MATH
                                        : d.tf32 ? CUDNN_DEFAULT_MATH
                                                 : CUDNN_FMA_MATH)) != CUDNN_STATUS_SUCCESS)
    goto done;
  what = "cudnnGetConvolution*Algorithm_v7";
  if (fwd) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    if ((r = d.GetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf)) !=
        CUDNN_STATUS_SUCCESS)
      goto done;
    PICK(perf, n, det, &algo, &ws, d.GetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo_, &ws_));
    if (!found || (st = dnn_workspace(c, ws, &wsp)) != AG_OK) goto done;
    what = "cudnnConvolutionForward";
    if ((r = d.ConvolutionForward(h, &one, xd, agk_ptr(X), wd, agk_ptr(W), cd, algo, wsp, ws, &zero, yd,
                                  agk_ptr(Y))) != CUDNN_STATUS_SUCCESS)
      goto done;
    if (cv->bias && cv->bias->base) {
      what = "cudnnAddTensor(bias)";
      if ((r = d.CreateTensorDescriptor(&bd)) != CUDNN_STATUS_SUCCESS ||
          (r = d.SetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, t, 1, (int)Y->shape[1], 1, 1)) != CUDNN_STATUS_SUCCESS ||
          (r = d.AddTensor(h, &one, bd, agk_ptr(cv->bias), &one, yd, agk_ptr(Y))) != CUDNN_STATUS_SUCCESS)
        goto done;
    }
  } else if (bin) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    cudnnConvolutionBwdDataAlgo_t algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    if ((r = d.GetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
                                                      perf)) != CUDNN_STATUS_SUCCESS)
      goto done;
    PICK(perf, n, det, &algo, &ws, d.GetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, algo_, &ws_));
    if (!found || (st = dnn_workspace(c, ws, &wsp)) != AG_OK) goto done;
    what = "cudnnConvolutionBackwardData";
    if ((r = d.ConvolutionBackwardData(h, &one, wd, agk_ptr(W), yd, agk_ptr(Y), cd, algo, wsp, ws, &zero, xd,
                                       agk_ptr(X))) != CUDNN_STATUS_SUCCESS)
      goto done;
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    cudnnConvolutionBwdFilterAlgo_t algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    if ((r = d.GetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                        &n, perf)) != CUDNN_STATUS_SUCCESS)
      goto done;
    PICK(perf, n, det, &algo, &ws, d.GetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, algo_, &ws_));
    if (!found || (st = dnn_workspace(c, ws, &wsp)) != AG_OK) goto done;
    what = "cudnnConvolutionBackwardFilter";
    if ((r = d.ConvolutionBackwardFilter(h, &one, xd, agk_ptr(X), yd, agk_ptr(Y), cd, algo, wsp, ws, &zero, wd,
                                         agk_ptr(W))) != CUDNN_STATUS_SUCCESS)
      goto done;
  }
done:
  if (st == AG_OK && r != CUDNN_STATUS_SUCCESS) st = dnn_status(s->dev, r, what);
  /* no algorithm qualified: the caller falls back to the own kernels */
  if (st == AG_OK && !found) st = AG_ERR_UNSUPPORTED;
  if (bd) (void)d.DestroyTensorDescriptor(bd);
  if (cd) (void)d.DestroyConvolutionDescriptor(cd);
  if (wd) (void)d.DestroyFilterDescriptor(wd);
  if (yd) (void)d.DestroyTensorDescriptor(yd);
  if (xd) (void)d.DestroyTensorDescriptor(xd);
  return st;
}

static bool dnn_fits(const agk_conv *cv) {
  const ag_koperand *t[3] = {cv->x, cv->y, cv->w};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++)
      if (t[k]->shape[i] > 0x7fffffff) return false;
  return true;
}

ag_status agv_conv(const agk_env *env, const agk_conv *cv) {
  ag_bstream *s = env->bs;
  (void)pthread_once(&g_once, dnn_load);
  if (d.lib && dnn_fits(cv) && !ag_dnn_fallback_set(fallback_of(s->dev))) {
    ag_status st = dnn_conv(s, cv);
    if (st != AG_ERR_UNSUPPORTED) return st;
    ag_error_clear(); /* cuDNN declined this shape or cannot run here: the own kernels take it */
  }
  gpuError_t e = agk_conv_run(env, cv);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, cv->call->name ? cv->call->name : "conv2d");
}

void agv_dnn_release(ag_bstream *s) {
  if (s->dnn && d.Destroy) (void)d.Destroy((cudnnHandle_t)s->dnn);
  s->dnn = NULL;
}

#else /* no cudnn.h in this toolkit: own kernels only */

static void dnn_load(void) {
  snprintf(g_describe, sizeof g_describe, "own kernels (built without cudnn.h)");
  __atomic_store_n(&g_loaded, true, __ATOMIC_RELEASE);
}

ag_status agv_conv(const agk_env *env, const agk_conv *cv) {
  (void)pthread_once(&g_once, dnn_load);
  gpuError_t e = agk_conv_run(env, cv);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, cv->call->name ? cv->call->name : "conv2d");
}

void agv_dnn_release(ag_bstream *s) { (void)s; }

#endif

const char *agv_dnn_describe(int dev) {
  return ag_dnn_fallback_describe(fallback_of(dev), __atomic_load_n(&g_loaded, __ATOMIC_ACQUIRE)
                                                        ? g_describe
                                                        : "cuDNN if present (loaded by the first conv2d)");
}
