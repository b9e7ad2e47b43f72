/* Between the emulator's runtime (emu_runtime.cc), its executor
 * (emu_exec.cc) and the gpuemu backend file: launch descriptions, the
 * emulated virtual memory and the knobs. Hidden inside the module. */
#ifndef AG_GPU_EMU_INTERNAL_H
#define AG_GPU_EMU_INTERNAL_H

#include <string>

#include "emu.h"

namespace agemu {
struct launch_desc {
  dim3 grid, block;
  int warp;
  bool strict; /* a shuffle that reads an exited lane is an error */
};
/* Run every block of a launch on the calling thread; "" or the error. */
AGEMU_HIDDEN std::string run_grid(const launch_desc &d, const std::function<void()> &body);
} // namespace agemu

/* Emulated virtual memory with CUDA's rules: a reservation is address space
 * only; each map creates one physical allocation of exactly its range, and
 * an unmap must cover whole mappings (part of one is an error, as
 * cuMemUnmap refuses it). Sizes and addresses are granule multiples. */
AGEMU_API size_t agemu_vm_granularity(int dev);
AGEMU_API gpuError_t agemu_vm_reserve(int dev, size_t bytes, void **out_base);
AGEMU_API gpuError_t agemu_vm_map(int dev, void *at, size_t bytes);
AGEMU_API gpuError_t agemu_vm_unmap(int dev, void *at, size_t bytes);
AGEMU_API gpuError_t agemu_vm_release(int dev, void *base, size_t bytes);
/* Number of emulated devices and a one-line description of device dev. */
AGEMU_API int agemu_device_count(void);
AGEMU_API const char *agemu_device_flavour(int dev);
AGEMU_API int agemu_deferred(void);

#endif
