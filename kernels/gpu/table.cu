/* The vtable entries appended after runtime.cu's table (backend ABI 4.4 on),
 * written once against vendor.h for the CUDA, HIP and gpuemu modules. Each
 * module's exported entry point (backends/<name>/) copies runtime.cu's table
 * and completes it with agg_table_extend. */
#include "gpu.h"

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

void agg_table_extend(ag_backend *t) { t->thread_device = agg_thread_device; }
