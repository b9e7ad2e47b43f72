/* The gpuemu backend module: the single-source GPU kernels (kernels/gpu) and
 * the shared runtime glue compiled by the host C++ compiler against the
 * emulated runtime (kernels/gpu/emu). A testing and debugging device: it
 * runs every kernel's indexing, barriers, shuffles, launch limits and
 * numerics on any machine; GEMM always takes the project's own kernel. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <string>
#include <vector>

#include "gpu.h"
#include "emu/emu_internal.h"

ag_status agv_status(int code, int api, const char *what) {
  (void)api;
  gpuError_t e = code;
  (void)gpuGetLastError();
  ag_status st = AG_ERR_BACKEND;
  if (e == gpuErrorMemoryAllocation) st = AG_ERR_OOM;
  else if (e == gpuErrorNotSupported) st = AG_ERR_UNSUPPORTED;
  else if (e == gpuErrorNoDevice) st = AG_ERR_UNAVAILABLE;
  else if (e == gpuErrorInvalidConfiguration) st = AG_ERR_INVALID;
  const char *detail = agemu_error_detail();
  st = ag_error_set(st, "gpuemu: %s: %s: %s%s%s (code %d)", what, gpuGetErrorName(e), gpuGetErrorString(e),
                    *detail ? ": " : "", detail, code);
  agemu_error_detail_clear();
  return st;
}

/* The emulator's own variables (AG_GPUEMU_*) are parsed by the emulator,
 * which keeps the first bad one. */
bool agv_env_check(char *reason, size_t reason_len) {
  const char *bad = agemu_config_error();
  if (!*bad) return true;
  snprintf(reason, reason_len, "%s", bad);
  return false;
}

ag_status agv_init(char *reason, size_t reason_len) {
  (void)reason;
  (void)reason_len;
  return AG_OK;
}

/* The emulator creates no contexts: setting a device costs nothing. */
bool agv_device_restorable(int dev) {
  (void)dev;
  return true;
}

void agv_props(int dev, const gpuDeviceProp *p, ag_device_props *out) {
  snprintf(out->vendor, sizeof out->vendor, "anygrad (emulated on the CPU, for testing)");
  snprintf(out->arch, sizeof out->arch, "emu-warp%d", p->warpSize);
  out->native_f16 = true;
  out->native_bf16 = true;
  out->virtual_memory = agemu_vm_granularity(dev) != 0;
  out->unified_memory = false;
}

ag_status agv_gemm(const agk_env *env, const ag_k_matmul *a) {
  gpuError_t e = agk_matmul(env, a);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, a->call->name ? a->call->name : "gemm");
}

/* Own kernels (kernels/gpu/conv.cu). */
ag_status agv_conv(const agk_env *env, const agk_conv *cv) {
  gpuError_t e = agk_conv_run(env, cv);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, cv->call->name ? cv->call->name : "conv2d");
}

void agv_stream_release(ag_bstream *s) { (void)s; }

size_t agv_vm_granularity(int dev) { return agemu_vm_granularity(dev); }

ag_status agv_vm_map_one(int dev, void *at, size_t bytes) {
  gpuError_t e = agemu_vm_map(dev, at, bytes);
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_DRIVER, "vm map");
}

ag_status agv_vm_unmap_one(int dev, void *at, size_t bytes) {
  gpuError_t e = agemu_vm_unmap(dev, at, bytes);
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_DRIVER, "vm unmap");
}

ag_status agv_vm_reserve(int dev, size_t bytes, void **out_base) {
  gpuError_t e = agemu_vm_reserve(dev, bytes, out_base);
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_DRIVER, "vm reserve");
}

void agv_vm_release(int dev, void *base, size_t bytes) {
  if (agemu_vm_release(dev, base, bytes) != gpuSuccess) (void)agv_status(gpuErrorInvalidValue, AGV_DRIVER, "vm release");
}

/* ---- the module's entry point ----
 * runtime.cu's table is renamed agemu_glue_module_get here (CMakeLists.txt).
 * The plain module answers with it, or with the check module's table when
 * AG_GPUEMU_CHECK=1 (anygrad-gpuemu-check.so next to this file: the same
 * sources with instrumented kernels, so the plain module pays nothing). The
 * check module wraps launch and segment calls so the checker knows the
 * operands' extents and which allocations are the core's segments. */
extern "C" const ag_backend *agemu_glue_module_get(void);

namespace {

/* Filled once under std::call_once, then read only. */
ag_backend g_entry;
std::once_flag g_entry_once;

#ifdef AGEMU_CHECK
const ag_backend *g_glue;

/* [lo, hi) of the elements a view reaches: strides may be zero (broadcast)
 * and, in principle, negative. */
bool operand_extent(void *base, size_t offset, ag_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                    agemu::extent *out) {
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0) return false;
    int64_t span = (shape[d] - 1) * strides[d];
    if (span < 0) lo += span;
    else hi += span;
  }
  size_t es = ag_dtype_size(dt);
  uintptr_t p = (uintptr_t)base + offset;
  out->lo = p + (uintptr_t)(lo * (int64_t)es);
  out->hi = p + (uintptr_t)((hi + 1) * (int64_t)es);
  return es != 0;
}

ag_status checked_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (c->struct_size < sizeof *c) return ag_kernel_call_check(c, sizeof *c, "gpuemu");
  std::vector<agemu::extent> ext;
  for (int i = 0; i < c->n_operands && i < AG_KMAX_OPERANDS; i++) {
    const ag_koperand *o = &c->o[i];
    agemu::extent e;
    if (!o->base || !operand_extent(o->base, o->offset, o->dtype, o->ndim, o->shape, o->strides, &e)) continue;
    e.operand = i;
    ext.push_back(e);
  }
  if (c->multi)
    for (int k = 0; k < c->multi->count; k++) {
      size_t es = ag_dtype_size(c->multi->t[k].dtype);
      if (!c->multi->t[k].base || c->multi->t[k].numel <= 0 || !es) continue;
      agemu::extent e;
      e.lo = (uintptr_t)c->multi->t[k].base + c->multi->t[k].offset;
      e.hi = e.lo + (uintptr_t)c->multi->t[k].numel * es;
      e.operand = 100 + k; /* multi-tensor list entry k */
      ext.push_back(e);
    }
  agemu_check_call(ext.data(), (int)ext.size(), true);
  ag_status st = g_glue->launch(s, c);
  agemu_check_call(NULL, 0, false);
  return st;
}

ag_status checked_segment_alloc(int dev, size_t bytes, void **out_base) {
  ag_status st = g_glue->segment_alloc(dev, bytes, out_base);
  if (st == AG_OK && *out_base) agemu_check_segment(*out_base, true);
  return st;
}

void checked_segment_free(int dev, void *base) {
  if (base) agemu_check_segment(base, false);
  g_glue->segment_free(dev, base);
}

void entry_init() {
  g_glue = agemu_glue_module_get();
  g_entry = *g_glue;
  g_entry.launch = checked_launch;
  g_entry.segment_alloc = checked_segment_alloc;
  g_entry.segment_free = checked_segment_free;
}
#else
char g_check_why[512];
/* The check module's gpuemuSetDevice/gpuemuGetDevice when it runs the
 * devices (its emulator is another copy, with its own current device). */
int (*g_fwd_set)(int);
int (*g_fwd_get)(int *);

ag_status check_unavailable(int *out_count, char *reason, size_t reason_len) {
  *out_count = 0;
  snprintf(reason, reason_len, "%s", g_check_why);
  return AG_ERR_UNAVAILABLE;
}

void entry_init() {
  const ag_backend *glue = agemu_glue_module_get();
  g_entry = *glue;
  const char *v = getenv("AG_GPUEMU_CHECK");
  if (!v || strcmp(v, "1")) return; /* a value other than 0 or 1 fails agv_init */
  Dl_info info;
  std::string path;
  if (dladdr((void *)&entry_init, &info) && info.dli_fname) {
    path = info.dli_fname;
    size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  }
  path += "anygrad-gpuemu-check.so";
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ag_backend_module_get_fn get = h ? (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL) : NULL;
  if (get && get()) {
    g_entry = *get();
    *(void **)&g_fwd_set = dlsym(h, "gpuemuSetDevice");
    *(void **)&g_fwd_get = dlsym(h, "gpuemuGetDevice");
    return;
  }
  snprintf(g_check_why, sizeof g_check_why, "AG_GPUEMU_CHECK=1 needs %s: %s", path.c_str(),
           h ? "it has no module entry" : dlerror());
  g_entry.init = check_unavailable;
}
#endif

} // namespace

extern "C" __attribute__((visibility("default"))) const ag_backend *ag_backend_module_get(void) {
  std::call_once(g_entry_once, entry_init);
  return &g_entry;
}

/* The emulator's cudaSetDevice/cudaGetDevice as a program sees them: the
 * calling thread's current device of the emulator that runs the devices (the
 * check module's under AG_GPUEMU_CHECK=1). What a program using CUDA beside
 * anygrad on one thread (PyTorch, CuPy, DLPack) would call; the module's
 * entries must leave it as they found it (tests/gpu3_gpuemu_test.c).
 * Returns 0 or the emulator's error code. */
extern "C" __attribute__((visibility("default"))) int gpuemuSetDevice(int dev) {
  std::call_once(g_entry_once, entry_init);
#ifndef AGEMU_CHECK
  if (g_fwd_set) return g_fwd_set(dev);
#endif
  return gpuSetDevice(dev);
}
extern "C" __attribute__((visibility("default"))) int gpuemuGetDevice(int *dev) {
  std::call_once(g_entry_once, entry_init);
#ifndef AGEMU_CHECK
  if (g_fwd_get) return g_fwd_get(dev);
#endif
  return gpuGetDevice(dev);
}
