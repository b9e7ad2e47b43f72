/* The vendor-neutral half of the CUDA and HIP backends: devices, memory,
 * streams, events, copies, the launch dispatch and supports(). Written once
 * against vendor.h, with the module's vtable; the vendor files in backends/
 * add BLAS, virtual memory, device details and the error translation, and
 * vendor.h the registry properties. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/dlpack.h"
#include "gpu.h"

/* SM/CU counts per device, written once by agg_init (the registry calls init
 * once, before any other entry) and only read afterwards. */
static int g_sm_count[AG_MAX_DEVICES];

#define CHECK(call, what)                                   \
  do {                                                      \
    gpuError_t e_ = (call);                                 \
    if (e_ != gpuSuccess) return agv_status((int)e_, AGV_RUNTIME, AG_GPU_API what); \
  } while (0)

/* The calling thread's current device belongs to the caller: a program that
 * uses CUDA or HIP beside anygrad on the same thread (PyTorch, CuPy, a
 * DLPack consumer) allocates and launches on it. Each entry that needs
 * device dev makes it current only when it is not (cudaGetDevice is a read
 * of thread state and creates no context) and gives the caller's device
 * back on every way out, as PyTorch's device guard does. The one exception
 * is a previous device that agv_device_restorable says the process has not
 * used yet: making it current again would create a context on it (cudaSetDevice
 * initializes the primary context since CUDA 12), so the thread stays on dev. */
namespace {
class dev_guard {
 public:
  explicit dev_guard(int dev) {
    if (gpuGetDevice(&prev_) != gpuSuccess) {
      (void)gpuGetLastError();
      prev_ = -1;
    }
    if (prev_ != dev) {
      err_ = gpuSetDevice(dev);
      set_ = err_ == gpuSuccess;
    }
  }
  ~dev_guard() {
    if (set_ && prev_ >= 0 && agv_device_restorable(prev_) && gpuSetDevice(prev_) != gpuSuccess)
      (void)gpuGetLastError();
  }
  dev_guard(const dev_guard &) = delete;
  dev_guard &operator=(const dev_guard &) = delete;
  /* gpuSuccess, or why dev could not be made current */
  gpuError_t error() const { return err_; }

 private:
  int prev_ = -1;
  bool set_ = false;
  gpuError_t err_ = gpuSuccess;
};
} // namespace

/* Make dev current for the rest of the enclosing block (dev_guard); a
 * failure returns the translated status. */
#define ON_DEVICE(dev)                                                                  \
  dev_guard guard_(dev);                                                                \
  if (guard_.error() != gpuSuccess) return agv_status((int)guard_.error(), AGV_RUNTIME, AG_GPU_API "SetDevice")
/* The same for entries that return nothing: a failure skips the body. */
#define ON_DEVICE_VOID(dev) \
  dev_guard guard_(dev);    \
  if (guard_.error() != gpuSuccess) return

int agg_sm_count(int dev) { return dev >= 0 && dev < AG_MAX_DEVICES ? g_sm_count[dev] : 0; }

bool agg_env_choice(const char *name, const char *const *ok, int n, char *reason, size_t reason_len) {
  const char *v = getenv(name);
  if (!v || !*v) return true;
  for (int i = 0; i < n; i++)
    if (!strcmp(v, ok[i])) return true;
  char shown[64], list[96] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? (i == n - 1 ? " or " : ", ") : "", ok[i]);
  snprintf(reason, reason_len, AG_GPU_BACKEND_NAME ": %s='%s' is not %s", name, ag_escape(v, shown, sizeof shown),
           list);
  return false;
}

ag_status agg_init(int *out_count, char *reason, size_t reason_len) {
  int n = 0;
  if (!agv_env_check(reason, reason_len)) {
    *out_count = 0;
    return AG_ERR_UNAVAILABLE;
  }
  gpuError_t e = gpuGetDeviceCount(&n);
  if (e != gpuSuccess || n <= 0) {
    void *drv = NULL;
    if (e == gpuSuccess) snprintf(reason, reason_len, "no " AG_GPU_BACKEND_NAME " device found");
#if defined(__CUDACC__) && !defined(__HIPCC__) && !defined(AG_GPU_HIP)
    /* cudart reports a missing driver as "driver version is insufficient". */
    else if (e == cudaErrorInsufficientDriver && !(drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)))
      snprintf(reason, reason_len,
               "no NVIDIA driver found (cudaGetDeviceCount: libcuda.so.1 is not loadable); install the NVIDIA "
               "driver to use CUDA");
#endif
    else
      snprintf(reason, reason_len, AG_GPU_API "GetDeviceCount: %s", gpuGetErrorString(e));
    if (drv) dlclose(drv);
    (void)gpuGetLastError();
    *out_count = 0;
    return AG_ERR_UNAVAILABLE;
  }
  if (n > AG_MAX_DEVICES) n = AG_MAX_DEVICES;
  for (int d = 0; d < n; d++) {
    gpuDeviceProp p;
    if (gpuGetDeviceProperties(&p, d) != gpuSuccess) continue;
    g_sm_count[d] = p.multiProcessorCount;
    /* The kernels' block reductions keep one shared slot per warp (32 for
     * 1024 threads) and shuffle in groups of up to 32 lanes: warps of 32 or
     * 64 lanes. Refuse anything else rather than compute wrong results. */
    if (p.warpSize != 32 && p.warpSize != 64) {
      snprintf(reason, reason_len, AG_GPU_BACKEND_NAME " device %d has a warp of %d lanes; the kernels need 32 or 64",
               d, p.warpSize);
      *out_count = 0;
      return AG_ERR_UNAVAILABLE;
    }
  }
  ag_status st = agv_init(reason, reason_len);
  if (st != AG_OK) {
    *out_count = 0;
    return st;
  }
  *out_count = n;
  return AG_OK;
}

ag_status agg_device_props(int dev, ag_device_props *out) {
  gpuDeviceProp p;
  CHECK(gpuGetDeviceProperties(&p, dev), "GetDeviceProperties");
  memset(out, 0, sizeof *out);
  size_t nl = strnlen(p.name, sizeof p.name);
  if (nl >= sizeof out->name) nl = sizeof out->name - 1;
  memcpy(out->name, p.name, nl); /* zeroed above: stays terminated */
  out->total_memory = p.totalGlobalMem;
  out->compute_units = p.multiProcessorCount;
  agv_props(dev, &p, out);
  return AG_OK;
}

ag_status agg_mem_info(int dev, size_t *out_free, size_t *out_total) {
  ON_DEVICE(dev);
  CHECK(gpuMemGetInfo(out_free, out_total), "MemGetInfo");
  return AG_OK;
}

ag_status agg_segment_alloc(int dev, size_t bytes, void **out_base) {
  ON_DEVICE(dev);
  CHECK(gpuMalloc(out_base, bytes), "Malloc");
  return AG_OK;
}
void agg_segment_free(int dev, void *base) {
  ON_DEVICE_VOID(dev);
  (void)gpuFree(base);
}

ag_status agg_pinned_alloc(int dev, size_t bytes, void **out_ptr) {
  ON_DEVICE(dev);
  CHECK(gpuHostAlloc(out_ptr, bytes, gpuHostAllocPortable), "HostAlloc");
  return AG_OK;
}
void agg_pinned_free(int dev, void *ptr) {
  ON_DEVICE_VOID(dev);
  (void)gpuFreeHost(ptr);
}

/* ---- virtual memory ---- */

ag_status agg_vm_reserve(int dev, size_t bytes, void **out_base) {
  ON_DEVICE(dev);
  return agv_vm_reserve(dev, bytes, out_base);
}
void agg_vm_release(int dev, void *base, size_t bytes) {
  ON_DEVICE_VOID(dev);
  agv_vm_release(dev, base, bytes);
}

ag_status agg_vm_map(int dev, void *base, size_t offset, size_t bytes) {
  ON_DEVICE(dev);
  size_t gran = agv_vm_granularity(dev);
  if (!gran) return ag_error_set(AG_ERR_UNSUPPORTED, AG_GPU_BACKEND_NAME ": no virtual memory on device %d", dev);
  if (offset % gran || bytes % gran)
    return ag_error_set(AG_ERR_INVALID, AG_GPU_BACKEND_NAME ": vm_map of [%zu, +%zu) is not in whole granules of %zu",
                        offset, bytes, gran);
  for (size_t done = 0; done < bytes; done += gran) {
    ag_status st = agv_vm_map_one(dev, (char *)base + offset + done, gran);
    if (st != AG_OK) {
      for (size_t u = 0; u < done; u += gran) (void)agv_vm_unmap_one(dev, (char *)base + offset + u, gran);
      return st;
    }
  }
  return AG_OK;
}

ag_status agg_vm_unmap(int dev, void *base, size_t offset, size_t bytes) {
  ON_DEVICE(dev);
  size_t gran = agv_vm_granularity(dev);
  if (!gran) return ag_error_set(AG_ERR_UNSUPPORTED, AG_GPU_BACKEND_NAME ": no virtual memory on device %d", dev);
  if (offset % gran || bytes % gran)
    return ag_error_set(AG_ERR_INVALID,
                        AG_GPU_BACKEND_NAME ": vm_unmap of [%zu, +%zu) is not in whole granules of %zu", offset, bytes,
                        gran);
  ag_status first = AG_OK;
  for (size_t done = 0; done < bytes; done += gran) {
    ag_status st = agv_vm_unmap_one(dev, (char *)base + offset + done, gran);
    if (st != AG_OK && first == AG_OK) first = st;
  }
  return first;
}

/* ---- streams ---- */

void agg_stream_destroy(ag_bstream *s) {
  if (!s) return;
  dev_guard guard(s->dev); /* a failure still frees what it can */
  if (s->s) (void)gpuStreamSynchronize(s->s);
  agv_stream_release(s);
  for (int i = 0; i < AGG_TABLE_SLOTS; i++) {
    if (s->slot[i].done) (void)gpuEventDestroy(s->slot[i].done);
    if (s->slot[i].dev) (void)gpuFree(s->slot[i].dev);
    if (s->slot[i].host) (void)gpuFreeHost(s->slot[i].host);
  }
  if (s->scratch) (void)gpuFree(s->scratch);
  if (s->err_host) (void)gpuFreeHost(s->err_host);
  if (s->s) (void)gpuStreamDestroy(s->s);
  free(s);
}

ag_status agg_stream_create(int dev, ag_bstream **out) {
  ON_DEVICE(dev);
  ag_bstream *s = (ag_bstream *)calloc(1, sizeof *s);
  ag_status st = AG_OK;
  gpuError_t e;
  const char *what = AG_GPU_API "StreamCreateWithFlags";
  if (!s) return ag_error_set(AG_ERR_OOM, AG_GPU_BACKEND_NAME ": stream_create: out of host memory");
  s->dev = dev;
  if ((e = gpuStreamCreateWithFlags(&s->s, gpuStreamNonBlocking)) != gpuSuccess) goto fail;
  what = AG_GPU_API "HostAlloc(error word)";
  if ((e = gpuHostAlloc((void **)&s->err_host, sizeof(ag_kernel_error), gpuHostAllocMapped | gpuHostAllocPortable)) !=
      gpuSuccess)
    goto fail;
  memset(s->err_host, 0, sizeof(ag_kernel_error));
  what = AG_GPU_API "HostGetDevicePointer";
  if ((e = gpuHostGetDevicePointer((void **)&s->err_dev, s->err_host, 0)) != gpuSuccess) goto fail;
  what = AG_GPU_API "Malloc(scratch)";
  if ((e = gpuMalloc(&s->scratch, AGK_SCRATCH_BYTES)) != gpuSuccess) goto fail;
  for (int i = 0; i < AGG_TABLE_SLOTS; i++) {
    what = AG_GPU_API "HostAlloc(table)";
    if ((e = gpuHostAlloc(&s->slot[i].host, AGK_TABLE_BYTES, gpuHostAllocPortable)) != gpuSuccess) goto fail;
    what = AG_GPU_API "Malloc(table)";
    if ((e = gpuMalloc(&s->slot[i].dev, AGK_TABLE_BYTES)) != gpuSuccess) goto fail;
    what = AG_GPU_API "EventCreate";
    if ((e = gpuEventCreateWithFlags(&s->slot[i].done, gpuEventDisableTiming)) != gpuSuccess) goto fail;
  }
  *out = s;
  return AG_OK;
fail:
  st = agv_status((int)e, AGV_RUNTIME, what);
  agg_stream_destroy(s);
  return st;
}

ag_status agg_stream_synchronize(ag_bstream *s) {
  ON_DEVICE(s->dev);
  CHECK(gpuStreamSynchronize(s->s), "StreamSynchronize");
  return AG_OK;
}

/* HIP records hipErrorNotReady from a query as the thread's last error, and
 * every launcher returns gpuGetLastError(): left there, it would fail the
 * next correct launch. CUDA does not record it; only that value is cleared. */
static void clear_not_ready(void) {
  if (gpuPeekAtLastError() == gpuErrorNotReady) (void)gpuGetLastError();
}

ag_status agg_stream_query(ag_bstream *s, bool *out_done) {
  ON_DEVICE(s->dev);
  gpuError_t e = gpuStreamQuery(s->s);
  if (e == gpuErrorNotReady) {
    clear_not_ready();
    *out_done = false;
    return AG_OK;
  }
  CHECK(e, "StreamQuery");
  *out_done = true;
  return AG_OK;
}

/* ---- events ---- */

ag_status agg_event_create(int dev, bool timing, ag_bevent **out) {
  ag_bevent *ev = (ag_bevent *)calloc(1, sizeof *ev);
  if (!ev) return ag_error_set(AG_ERR_OOM, AG_GPU_BACKEND_NAME ": event_create: out of host memory");
  ev->dev = dev;
  dev_guard guard(dev);
  gpuError_t e = guard.error();
  const char *what = AG_GPU_API "SetDevice";
  if (e == gpuSuccess) {
    e = gpuEventCreateWithFlags(&ev->e, timing ? gpuEventDefault : gpuEventDisableTiming);
    what = AG_GPU_API "EventCreateWithFlags";
  }
  if (e != gpuSuccess) {
    free(ev);
    return agv_status((int)e, AGV_RUNTIME, what);
  }
  *out = ev;
  return AG_OK;
}
void agg_event_destroy(ag_bevent *e) {
  if (!e) return;
  dev_guard guard(e->dev); /* the event is freed in any case */
  (void)gpuEventDestroy(e->e);
  free(e);
}
ag_status agg_event_record(ag_bevent *e, ag_bstream *s) {
  ON_DEVICE(s->dev);
  CHECK(gpuEventRecord(e->e, s->s), "EventRecord");
  return AG_OK;
}
ag_status agg_stream_wait_event(ag_bstream *s, ag_bevent *e) {
  ON_DEVICE(s->dev);
  CHECK(gpuStreamWaitEvent(s->s, e->e, 0), "StreamWaitEvent");
  return AG_OK;
}
ag_status agg_event_query(ag_bevent *e, bool *out_done) {
  ON_DEVICE(e->dev);
  gpuError_t r = gpuEventQuery(e->e);
  if (r == gpuErrorNotReady) {
    clear_not_ready();
    *out_done = false;
    return AG_OK;
  }
  CHECK(r, "EventQuery");
  *out_done = true;
  return AG_OK;
}
ag_status agg_event_synchronize(ag_bevent *e) {
  ON_DEVICE(e->dev);
  CHECK(gpuEventSynchronize(e->e), "EventSynchronize");
  return AG_OK;
}
ag_status agg_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms) {
  ON_DEVICE(a->dev);
  CHECK(gpuEventElapsedTime(out_ms, a->e, b->e), "EventElapsedTime");
  return AG_OK;
}

/* ---- copies ---- */

ag_status agg_copy_h2d(ag_bstream *s, void *dst_base, size_t dst_off, const void *src, size_t bytes,
                       bool src_pinned) {
  if (!bytes) return AG_OK;
  ON_DEVICE(s->dev);
  /* From pageable memory the runtime stages the source before returning, so
   * the caller may reuse src at once as the contract requires. */
  CHECK(gpuMemcpyAsync((char *)dst_base + dst_off, src, bytes, gpuMemcpyHostToDevice, s->s), "MemcpyAsync(H2D)");
#if defined(AG_GPU_HIP)
  if (!src_pinned) CHECK(gpuStreamSynchronize(s->s), "StreamSynchronize(pageable H2D)");
#endif
  return AG_OK;
}
ag_status agg_copy_d2h(ag_bstream *s, void *dst, const void *src_base, size_t src_off, size_t bytes) {
  if (!bytes) return AG_OK;
  ON_DEVICE(s->dev);
  CHECK(gpuMemcpyAsync(dst, (const char *)src_base + src_off, bytes, gpuMemcpyDeviceToHost, s->s),
        "MemcpyAsync(D2H)");
  return AG_OK;
}
ag_status agg_copy_d2d(ag_bstream *s, void *dst_base, size_t dst_off, const void *src_base, size_t src_off,
                       size_t bytes) {
  if (!bytes) return AG_OK;
  ON_DEVICE(s->dev);
  CHECK(gpuMemcpyAsync((char *)dst_base + dst_off, (const char *)src_base + src_off, bytes, gpuMemcpyDeviceToDevice,
                       s->s),
        "MemcpyAsync(D2D)");
  return AG_OK;
}

/* ---- kernels ---- */

static bool is_real(ag_dtype dt) { return dt == AG_F32 || dt == AG_F16 || dt == AG_BF16 || dt == AG_F64; }
static bool is_int(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

/* supports() from GPU_KOPS: the dtypes and variants of each op */
AGK_DEFINE_SUPPORTS(gpu_supports_data, GPU_KOPS)

/* The sub-op codes GPU_KOPS accepts as a whole (AGK_VANY), checked after
 * the data: floats always, integers where the op table's entry has an
 * integer rule (elementwise.cu); the reductions and pools of their lists. */
static bool gpu_supports_rule(ag_kop op, int sub, ag_dtype dt) {
  switch (op) {
    case AG_K_UNARY: {
      const ag_unary_info *u = ag_unary_info_of(sub);
      return u && (is_real(dt) || (is_int(dt) && u->ints == AG_OPT_INT));
    }
    case AG_K_BINARY: {
      const ag_binary_info *b = ag_binary_info_of(sub);
      return b && (is_real(dt) || (is_int(dt) && b->ints == AG_OPT_INT));
    }
    case AG_K_REDUCE: /* the core sums bool and u8 as i64 */
      return sub >= 0 && sub < AG_REDUCE_COUNT && !(sub == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL));
    case AG_K_POOL2D:
    case AG_K_POOL2D_BWD:
      return sub >= 0 && sub < AG_POOL_OP_COUNT;
    default:
      return true;
  }
}

bool agg_supports(int dev, ag_kop op, int sub, ag_dtype dt) {
  (void)dev;
  return gpu_supports_data(op, sub, dt) && gpu_supports_rule(op, sub, dt);
}

/* The status of a launcher's vendor error: gpuErrorNotSupported is a
 * combination the kernels lack (AG_ERR_UNSUPPORTED naming the op). */
static ag_status agg_status(const ag_kernel_call *c, ag_dtype dt, gpuError_t e) {
  if (e == gpuErrorNotSupported) {
    (void)gpuGetLastError();
    return ag_error_set(AG_ERR_UNSUPPORTED,
                        "%s: kernel op %s (variant %d) for %s is not supported on " AG_GPU_BACKEND_NAME,
                        c->name ? c->name : "launch", ag_kop_name(c->op), c->sub, ag_dtype_name(dt));
  }
  if (e != gpuSuccess) return agv_status((int)e, AGV_RUNTIME, c->name ? c->name : "kernel launch");
  return AG_OK;
}

/* An op of GPU_KOPS: its launcher (the .cu files here), the error translated
 * here; the overloads below route ops through a vendor library or the
 * stream's table staging first. */
template <typename A>
static ag_status agg_route(const agk_env *env, const A *a, gpuError_t (*launch)(const agk_env *, const A *)) {
  return agg_status(a->call, a->dtype, launch(env, a));
}
static ag_status agg_route(const agk_env *env, const ag_k_matmul *a,
                           gpuError_t (*)(const agk_env *, const ag_k_matmul *)) {
  return agv_gemm(env, a);
}
template <typename A> static ag_status agg_conv(const agk_env *env, const A *a) {
  const agk_conv cv = agk_conv_of(a);
  return agv_conv(env, &cv);
}
static ag_status agg_route(const agk_env *env, const ag_k_conv2d *a,
                           gpuError_t (*)(const agk_env *, const ag_k_conv2d *)) {
  return agg_conv(env, a);
}
static ag_status agg_route(const agk_env *env, const ag_k_conv2d_bwd_input *a,
                           gpuError_t (*)(const agk_env *, const ag_k_conv2d_bwd_input *)) {
  return agg_conv(env, a);
}
static ag_status agg_route(const agk_env *env, const ag_k_conv2d_bwd_weight *a,
                           gpuError_t (*)(const agk_env *, const ag_k_conv2d_bwd_weight *)) {
  return agg_conv(env, a);
}
/* The multi-tensor ops write their table into one of the stream's staging
 * slots, reused AGG_TABLE_SLOTS launches later: waiting for its event only
 * blocks when the device is that far behind. */
template <typename A>
static ag_status agg_multi(const agk_env *env, const A *a, gpuError_t (*launch)(const agk_env *, const A *)) {
  ag_bstream *s = env->bs;
  const int k = s->next_slot;
  s->next_slot = (k + 1) % AGG_TABLE_SLOTS;
  gpuError_t e = gpuEventSynchronize(s->slot[k].done);
  if (e == gpuSuccess) {
    agk_env t = *env;
    t.table_host = s->slot[k].host;
    t.table_dev = s->slot[k].dev;
    t.table_bytes = AGK_TABLE_BYTES;
    e = launch(&t, a);
    if (e == gpuSuccess) e = gpuEventRecord(s->slot[k].done, s->s);
  }
  return agg_status(a->call, a->dtype, e);
}
static ag_status agg_route(const agk_env *env, const ag_k_adamw *a,
                           gpuError_t (*launch)(const agk_env *, const ag_k_adamw *)) {
  return agg_multi(env, a, launch);
}
static ag_status agg_route(const agk_env *env, const ag_k_sgd *a,
                           gpuError_t (*launch)(const agk_env *, const ag_k_sgd *)) {
  return agg_multi(env, a, launch);
}
static ag_status agg_route(const agk_env *env, const ag_k_nonfinite_check *a,
                           gpuError_t (*launch)(const agk_env *, const ag_k_nonfinite_check *)) {
  return agg_multi(env, a, launch);
}
static ag_status agg_route(const agk_env *env, const ag_k_sumsq *a,
                           gpuError_t (*launch)(const agk_env *, const ag_k_sumsq *)) {
  return agg_multi(env, a, launch);
}

/* Portable numerics (docs/numerics.md): a call with AG_KF_PORTABLE of an op
 * of GPU_KOPS_PORTABLE_OWN runs its agkp_<name> (portable.cu); one of
 * GPU_KOPS_EXACT runs the default route (its kernel is exact by nature).
 * Anything else never gets here: the dispatch refuses it first. */
template <typename A> static ag_status agg_portable(const agk_env *, const A *a) {
  return ag_k__not_portable(a->call, AG_GPU_BACKEND_NAME, a->dtype);
}
#define AGG_PEXACT(ID, nm, dts, vs) \
  static ag_status agg_portable(const agk_env *env, const ag_k_##nm *a) { return agg_route(env, a, agk_##nm); }
GPU_KOPS_EXACT(AGG_PEXACT)
#define AGG_POWN(ID, nm, dts, vs)                                        \
  static ag_status agg_portable(const agk_env *env, const ag_k_##nm *a) { \
    return agg_status(a->call, a->dtype, agkp_##nm(env, a));             \
  }
GPU_KOPS_PORTABLE_OWN(AGG_POWN)

/* The dispatch from GPU_KOPS: every call decoded into its ag_k_<name>; a
 * portable call of an op outside GPU_KOPS_PORTABLE is refused */
#define AGG_OP(ID, nm, dts, vs)                                                                \
  static ag_status agg_k_##nm(const agk_env *env, const ag_k_##nm *a) {                        \
    return (a->call->flags & AG_KF_PORTABLE) ? agg_portable(env, a) : agg_route(env, a, agk_##nm); \
  }
GPU_KOPS(AGG_OP)
#define AGK_IMPL(name) agg_k_##name
#define AGK_CTX const agk_env *
AGK_DEFINE_DISPATCH_PORTABLE(gpu_dispatch, GPU_KOPS, GPU_KOPS_PORTABLE, AG_GPU_BACKEND_NAME)

/* The sub-op codes GPU_KOPS_PORTABLE takes as a whole (AGK_VANY): the
 * elementwise table's float entries (pmath in portable.cu) and the integer
 * rules, f64 only in copies and casts; REDUCE SUM (the canonical sum S, not
 * f64), MAX and MIN (the CPU's
 * first-of-equals rule, which fixes the sign of a zero result; the default
 * kernels' trees did not), ARGMAX (exact: the default kernel). */
static bool agg_portable_rule(ag_kop op, int sub, ag_dtype dt) {
  if (!gpu_supports_rule(op, sub, dt)) return false;
  switch (op) {
    case AG_K_UNARY: return dt != AG_F64 || sub == AG_U_COPY; /* f64: copies and casts */
    case AG_K_REDUCE:
      return (sub == AG_R_SUM && dt != AG_F64) || sub == AG_R_MAX || sub == AG_R_MIN || sub == AG_R_ARGMAX;
    default: return true;
  }
}

static bool agg_supports_portable(int dev, ag_kop op, int sub, ag_dtype dt) {
  return agg_supports(dev, op, sub, dt) && gpu_dispatch_portable(op, sub, dt) && agg_portable_rule(op, sub, dt);
}

/* portable_check: the probe kernel (portable.cu) on dev, once per device
 * (the core caches the answer) */
static ag_status agg_portable_check(int dev) {
  ON_DEVICE(dev);
  bool ok = false;
  char why[160] = "";
  gpuError_t e = agkp_probe(&ok, why, sizeof why);
  if (e != gpuSuccess) return agv_status((int)e, AGV_RUNTIME, "portable numerics probe");
  if (!ok)
    return ag_error_set(AG_ERR_UNSUPPORTED, AG_GPU_BACKEND_NAME ":%d refuses portable numerics: %s", dev, why);
  return AG_OK;
}

ag_status agg_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (c->struct_size < sizeof *c) return ag_kernel_call_check(c, sizeof *c, AG_GPU_BACKEND_NAME);
  agk_env env;
  memset(&env, 0, sizeof env);
  env.stream = s->s;
  env.bs = s;
  env.err = s->err_dev;
  env.scratch = s->scratch;
  env.scratch_bytes = AGK_SCRATCH_BYTES;
  env.sm_count = agg_sm_count(s->dev);
  ON_DEVICE(s->dev);
  return gpu_dispatch(&env, c);
}

ag_status agg_workspace(const ag_kernel_call *c, size_t bytes, void **out_ptr) {
  *out_ptr = NULL;
  if (!(c->flags & AG_KF_WORKSPACE) || !c->workspace) return AG_ERR_UNSUPPORTED;
  void *base = NULL;
  size_t off = 0;
  ag_status st = c->workspace(c->workspace_ctx, bytes, &base, &off);
  if (st == AG_OK) *out_ptr = (char *)base + off;
  return st;
}

ag_status agg_take_kernel_error(ag_bstream *s, ag_kernel_error *out) {
  /* the word lives in mapped host memory: after the core's synchronize the
   * kernels' writes are visible without another runtime call */
  volatile ag_kernel_error *w = s->err_host;
  out->code = w->code;
  out->kop = w->kop;
  out->index = w->index;
  out->limit = w->limit;
  if (out->code) {
    w->code = 0;
    w->kop = 0;
    w->index = 0;
    w->limit = 0;
  }
  return AG_OK;
}

/* The vtable of the CUDA, HIP and gpuemu modules, written once: what differs
 * is the vendor files' agv_* functions and vendor.h's AG_GPU_* properties. */
/* ---- the calling thread's device (ABI 4.4) ---- */
/* cudaSetDevice even when the device is already the current one: on a thread
 * that never set one, cudaGetDevice answers 0 while no context is current
 * yet, and a library on the driver API (an MPI's CUDA transport) would find
 * none. */
ag_status agg_thread_device(int dev, int *out_prev) {
  int prev = -1;
  if (gpuGetDevice(&prev) != gpuSuccess) {
    (void)gpuGetLastError();
    prev = -1;
  }
  *out_prev = prev;
  if (dev < 0) return AG_OK;
  gpuError_t e = gpuSetDevice(dev);
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, AG_GPU_API "SetDevice");
}

static const ag_backend g_backend = {
    AG_BACKEND_HEADER,
    .name = AG_GPU_BACKEND_NAME,
    .init = agg_init,
    .shutdown = NULL,
    .device_props = agg_device_props,
    .mem_info = agg_mem_info,
    .segment_alloc = agg_segment_alloc,
    .segment_free = agg_segment_free,
    .vm_granularity = agv_vm_granularity,
    .vm_reserve = agg_vm_reserve,
    .vm_map = agg_vm_map,
    .vm_unmap = agg_vm_unmap,
    .vm_release = agg_vm_release,
    .pinned_alloc = agg_pinned_alloc,
    .pinned_free = agg_pinned_free,
    .stream_create = agg_stream_create,
    .stream_destroy = agg_stream_destroy,
    .stream_synchronize = agg_stream_synchronize,
    .stream_query = agg_stream_query,
    .event_create = agg_event_create,
    .event_destroy = agg_event_destroy,
    .event_record = agg_event_record,
    .stream_wait_event = agg_stream_wait_event,
    .event_query = agg_event_query,
    .event_synchronize = agg_event_synchronize,
    .event_elapsed_ms = agg_event_elapsed_ms,
    .copy_h2d = agg_copy_h2d,
    .copy_d2h = agg_copy_d2h,
    .copy_d2d = agg_copy_d2d,
    .launch = agg_launch,
    .supports = agg_supports,
    .take_kernel_error = agg_take_kernel_error,
    .flags = AG_GPU_FLAGS,
    .dlpack_device = AG_GPU_DLPACK_DEVICE,
    .priority = AG_GPU_PRIORITY,
    .device_priority = NULL,
    .collective = AG_GPU_COLLECTIVE,
    .description = AG_GPU_DESCRIPTION,
    .thread_device = agg_thread_device,
    .portable_check = agg_portable_check,
    .supports_portable = agg_supports_portable,
};

extern "C" __attribute__((visibility("default"))) const ag_backend *ag_backend_module_get(void) { return &g_backend; }
