/* Between the emulator's runtime (emu_runtime.cc), its executor
 * (emu_exec.cc) and the gpuemu backend file: launch descriptions, the
 * emulated virtual memory and the knobs. Hidden inside the module. */
#ifndef AG_GPU_EMU_INTERNAL_H
#define AG_GPU_EMU_INTERNAL_H

#include <memory>
#include <string>
#include <vector>

#include "emu.h"

namespace agemu {
/* Check mode: the byte range [lo, hi) of operand `operand` of a launch. */
struct extent {
  uintptr_t lo, hi;
  int operand; /* -1: not an operand */
};
/* A device allocation: core means a segment of the core's caching
 * allocator, inside which a launch may touch only its operands' extents. */
struct region {
  uintptr_t lo, hi;
  bool core;
};
/* Check mode: the device address space around one gpuMalloc block. Each
 * block has a mapping of its own, [lo, hi), with redzones before and after
 * [user_lo, user_hi); a freed block keeps its mapping a while (freed true).
 * An access inside a span but outside every live allocation is an error:
 * this is how the checker tells device memory from the host memory a kernel
 * may touch (its parameters, stack, shared and constant data, pinned
 * buffers), which lies outside every span. */
struct span {
  uintptr_t lo, hi, user_lo, user_hi;
  bool core;  /* a segment of the core's caching allocator */
  bool freed;
};
/* What the checker knows of one launch (AG_GPUEMU_CHECK=1). */
struct check_info {
  std::string kernel;
  int dev;
  std::vector<extent> operands; /* empty: the launch did not come from a kernel call */
  bool have_operands;
  std::vector<region> regions;  /* the device's allocations when the launch ran */
  std::vector<span> spans;      /* and the address space around its gpuMalloc blocks */
};
/* Orders of threads between barriers and of blocks within a grid
 * (AG_GPUEMU_SCHED): a kernel whose result depends on the order has a race. */
enum sched_kind { SCHED_FORWARD = 0, SCHED_REVERSE = 1, SCHED_RANDOM = 2 };
struct launch_desc {
  dim3 grid, block;
  int warp;
  bool strict; /* a shuffle that reads an exited lane is an error */
  int sched;   /* sched_kind */
  uint64_t seed; /* SCHED_RANDOM: this launch's seed */
  std::shared_ptr<check_info> chk; /* NULL unless checking */
};
#ifdef AGEMU_CHECK
/* The checker (emu_check.cc), driven by the executor. */
namespace chk {
AGEMU_HIDDEN void *launch_begin(const launch_desc &d);
AGEMU_HIDDEN std::string launch_end(void *ctx);
AGEMU_HIDDEN void block_begin(void *ctx, uint64_t linear, int nthreads);
AGEMU_HIDDEN const std::string &block_error(void *ctx);
AGEMU_HIDDEN void barrier(void *ctx);
/* The fiber about to run: its linear thread index and its stack. */
AGEMU_HIDDEN void set_thread(void *ctx, int linear, const void *lo, size_t bytes);
AGEMU_HIDDEN void warp_sync(void *ctx, int warp);
/* The demangled name of the module's function containing pc, or "". */
AGEMU_HIDDEN std::string function_name(const void *pc);
} // namespace chk
#endif
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
/* Check mode: the operands' extents of the kernel call being launched on
 * this thread (n 0 and set false after the call); the launches it makes
 * may touch only those inside the core's segments. */
AGEMU_API void agemu_check_call(const agemu::extent *ext, int n, bool set);
/* Check mode: base (from gpuMalloc) is a segment of the core's caching
 * allocator (segment true), or no longer one. */
AGEMU_API void agemu_check_segment(void *base, bool segment);
/* Whether launches are checked (AG_GPUEMU_CHECK=1 in a check build). */
AGEMU_API int agemu_checking(void);
/* "" or why a malformed AG_GPUEMU_* knob makes the backend unavailable
 * (borrowed, lives as long as the module). */
AGEMU_API const char *agemu_config_error(void);

#endif
