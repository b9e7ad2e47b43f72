/* The gpuemu backend module: the single-source GPU kernels (kernels/gpu) and
 * the shared runtime glue compiled by the host C++ compiler against the
 * emulated runtime (kernels/gpu/emu). A testing and debugging device: it
 * runs every kernel's indexing, barriers, shuffles, launch limits and
 * numerics on any machine; GEMM always takes the project's own kernel. */
#include <stdio.h>
#include <string.h>

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

ag_status agv_init(char *reason, size_t reason_len) {
  (void)reason;
  (void)reason_len;
  return AG_OK;
}

void agv_props(int dev, const gpuDeviceProp *p, ag_device_props *out) {
  snprintf(out->vendor, sizeof out->vendor, "anygrad (emulated on the CPU, for testing)");
  snprintf(out->arch, sizeof out->arch, "emu-warp%d", p->warpSize);
  out->native_f16 = true;
  out->native_bf16 = true;
  out->virtual_memory = agemu_vm_granularity(dev) != 0;
  out->unified_memory = false;
}

ag_status agv_gemm(ag_bstream *s, const agk_env *env, const ag_kernel_call *c) {
  (void)s;
  gpuError_t e = agk_gemm(env, c);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, c->name ? c->name : "gemm");
}

/* Own kernels (kernels/gpu/conv.cu). */
ag_status agv_conv(ag_bstream *s, const agk_env *env, const ag_kernel_call *c) {
  (void)s;
  gpuError_t e = agk_conv2d(env, c);
  if (e == gpuSuccess) e = gpuGetLastError();
  return e == gpuSuccess ? AG_OK : agv_status((int)e, AGV_RUNTIME, c->name ? c->name : "conv2d");
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
