/* Internal interface of the Vulkan backend module: the loader's entry points
 * (libvulkan.so.1 is opened at run time), the device table, streams,
 * batches, events, pipelines and the kernel launcher. Nothing here is
 * exported; the module's only public symbol is ag_backend_module_get. */
#ifndef AG_VK_INTERNAL_H
#define AG_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <vulkan/vulkan.h>

#include "anygrad/backend.h"

#define VKB_HIDDEN __attribute__((visibility("hidden")))

/* Work-group size of the 1-D and row shaders (WG in common.glsl). */
#define VKB_WG 256

/* gemm_tiled.comp's tile, its specialization constant 0: TM | TN << 4 |
 * BK << 8, a work-group of 8 x 8 invocations computing (8 TM) x (8 TN)
 * outputs, each a TM x TN block, K in slices of BK. Chosen by measurement
 * on lavapipe (docs/vulkan.md); AG_VULKAN_TEST=gemm_tile:CFG tries others. */
#define VKB_GEMM_CFG (12 | 8 << 4 | 16 << 8)
static inline bool vkb_gemm_cfg_ok(uint64_t c) {
  uint64_t tm = c & 15, tn = (c >> 4) & 15, bk = (c >> 8) & 63;
  return c >> 14 == 0 && tm && tm % 4 == 0 && tn && tn % 4 == 0 && bk && bk % 4 == 0;
}
/* its shared memory: A's BK x 8 TM and B's BK x 8 TN slices in f32 */
static inline uint32_t vkb_gemm_shared_bytes(int c) {
  return (uint32_t)(((c >> 8) & 63) * 8 * ((c & 15) + ((c >> 4) & 15)) * 4);
}

/* Entry points, loaded through vkGetInstanceProcAddr / vkGetDeviceProcAddr. */
#define VKB_GLOBAL_FNS(X) \
  X(vkCreateInstance) X(vkEnumerateInstanceExtensionProperties) X(vkEnumerateInstanceLayerProperties)
#define VKB_INSTANCE_FNS(X)                                                                          \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)              \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2)                                \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkGetPhysicalDeviceMemoryProperties)              \
  X(vkGetPhysicalDeviceMemoryProperties2) X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice) \
  X(vkGetDeviceProcAddr)
#define VKB_DEVICE_FNS(X)                                                                            \
  X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle) X(vkCreateBuffer) X(vkDestroyBuffer)  \
  X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)       \
  X(vkMapMemory) X(vkUnmapMemory) X(vkGetBufferDeviceAddress) X(vkCreateCommandPool)               \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkFreeCommandBuffers)                      \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkResetCommandBuffer) X(vkCmdPipelineBarrier)    \
  X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants)                 \
  X(vkCmdDispatch) X(vkCmdWriteTimestamp) X(vkCmdResetQueryPool) X(vkQueueSubmit)                  \
  X(vkCreateSemaphore) X(vkDestroySemaphore) X(vkGetSemaphoreCounterValue) X(vkWaitSemaphores)     \
  X(vkCreateShaderModule) X(vkDestroyShaderModule) X(vkCreatePipelineLayout)                       \
  X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)                      \
  X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults)                             \
  X(vkFlushMappedMemoryRanges) X(vkInvalidateMappedMemoryRanges)

#define VKB_DECL(fn) PFN_##fn fn;
typedef struct vkb_fns {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
  VKB_GLOBAL_FNS(VKB_DECL)
  VKB_INSTANCE_FNS(VKB_DECL)
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
} vkb_fns;
typedef struct vkb_dfns {
  VKB_DEVICE_FNS(VKB_DECL)
} vkb_dfns;
#undef VKB_DECL

/* Shaders embedded at build time (one SPIR-V module per entry of
 * VKB_SHADERS in vk_shaders_gen.c, in this order). */
typedef enum vkb_shader {
  VKS_UNARY, VKS_BINARY, VKS_WHERE, VKS_FILL, VKS_ARANGE, VKS_RAND, VKS_RAND64, VKS_DROPOUT, VKS_DROPOUT64,
  VKS_REDUCE_ROWS, VKS_REDUCE_COLS, VKS_SUMSQ_PART, VKS_SUMSQ_FINAL,
  VKS_SOFTMAX, VKS_SOFTMAX_BWD, VKS_CE, VKS_CE_BWD, VKS_LN, VKS_LN_BWD, VKS_LN_BWD_WB,
  VKS_RMS, VKS_RMS_BWD, VKS_RMS_BWD_W, VKS_VAR_ROWS, VKS_VAR_COLS, VKS_CUMSUM,
  VKS_GATHER, VKS_GATHER_BWD, VKS_TOPK,
  VKS_EMB, VKS_EMB_BWD, VKS_ADAMW, VKS_SGD, VKS_NONFINITE, VKS_GEMM,
  VKS_CONV, VKS_CONV_BWD_IN, VKS_CONV_BWD_W, VKS_POOL, VKS_POOL_BWD, VKS_BN_STATS, VKS_BN_APPLY,
  VKS_SDPA, VKS_SDPA_BWD_DQ, VKS_SDPA_BWD_DKV,
  VKS_LOGSUMEXP, VKS_NORM, VKS_ONE_HOT, VKS_LOGSUMEXP_ROWS, VKS_NORM_ROWS,
  VKS_GN, VKS_GN_BWD, VKS_GN_BWD_WB, VKS_INTERP, VKS_INTERP_BWD, /* resample.comp */
  /* f64.comp: created only on devices with shaderFloat64 */
  VKS_UNARY_D, VKS_BINARY_D, VKS_FILL_D, VKS_ARANGE_D, VKS_REDUCE_D, VKS_VAR_D, VKS_CUMSUM_D,
  VKS_SOFTMAX_D, VKS_SOFTMAX_BWD_D, VKS_GATHER_D, VKS_GATHER_BWD_D, VKS_EMB_BWD_D, VKS_GEMM_D,
  VKS_LN_D, VKS_LN_BWD_D, VKS_LN_BWD_WB_D, VKS_RMS_D, VKS_RMS_BWD_D, VKS_RMS_BWD_W_D,
  VKS_LOGSUMEXP_D, VKS_NORM_D, VKS_LOGSUMEXP_ROWS_D, VKS_NORM_ROWS_D,
  VKS_GN_D, VKS_GN_BWD_D, VKS_GN_BWD_WB_D, VKS_INTERP_D, VKS_INTERP_BWD_D, /* resample64.comp */
  /* the kernel ops of their own files (vk_kops.h) */
  VKS_SORT,
  VKS_SCATTER_ADD,
  VKS_PAD,
  VKS_PAD_BWD,
  /* their f64 builds: used only on devices with shaderFloat64 */
  VKS_SORT_D,
  VKS_SCATTER_ADD_D,
  VKS_PAD_D,
  VKS_PAD_BWD_D,
  /* tree.comp: reductions, scans and softmax of any length (vk_tree.c);
   * the _D builds only on devices with shaderFloat64 */
  VKS_TREE,
  VKS_SMX_PART,
  VKS_SMX_ROW,
  VKS_SMX_OUT,
  VKS_SCAN_PART,
  VKS_SCAN_MID,
  VKS_SCAN_OUT,
  VKS_SMXB_OUT,
  VKS_LSE_FIN,
  VKS_TREE_SG,
  VKS_TREE_D,
  VKS_SMX_PART_D,
  VKS_SMX_ROW_D,
  VKS_SMX_OUT_D,
  VKS_SCAN_PART_D,
  VKS_SCAN_MID_D,
  VKS_SCAN_OUT_D,
  VKS_SMXB_OUT_D,
  VKS_LSE_FIN_D,
  /* gemm_tiled.comp: register-blocked GEMM, f32 and f16 inputs */
  VKS_GEMM_T32,
  VKS_GEMM_T16,
  /* tree.comp's reductions of the integer dtypes in i64 */
  VKS_TREE_I,
  /* the portable-numerics modules (vk_portable.c), in the order of
   * CMakeLists.txt's p_ entries */
  VKS_P_PROBE,
  VKS_P_UNARY,
  VKS_P_BINARY,
  VKS_P_RAND,
  VKS_P_DROPOUT,
  VKS_P_SUM,
  VKS_P_GEMM,
  VKS_P_SOFTMAX,
  VKS_P_SOFTMAX_BWD,
  VKS_P_CE,
  VKS_P_CE_BWD,
  VKS_P_LN,
  VKS_P_LN_BWD,
  VKS_P_LN_BWD_WB,
  VKS_P_RMS,
  VKS_P_RMS_BWD,
  VKS_P_RMS_BWD_W,
  VKS_P_LSE,
  VKS_P_ADAMW,
  VKS_P_SGD,
  VKS_P_CONV,
  VKS_P_CONV_BWD_IN,
  VKS_P_CONV_BWD_W,
  VKS_P_POOL,
  VKS_P_POOL_BWD,
  VKS_P_VAR,
  VKS_P_BN_STATS,
  VKS_P_GN,
  VKS_P_GN_BWD,
  VKS_P_GN_BWD_WB,
  VKS_P_NORM,
  VKS_P_INTERP,
  VKS_P_INTERP_BWD,
  VKS_P_REDUCE_ROWS,
  VKS_COUNT
} vkb_shader;
typedef struct vkb_spirv {
  const char *name;
  const uint32_t *code;
  size_t bytes;
} vkb_spirv;
VKB_HIDDEN extern const vkb_spirv vkb_spirv_table[VKS_COUNT];

/* The argument block of a dispatch; the layout equals Args in
 * kernels/vulkan/common.glsl (std430). */
typedef struct vkb_args {
  uint64_t p[8];
  int64_t n[64];
  float f[16];
  int32_t k[16];
} vkb_args;
_Static_assert(sizeof(vkb_args) == 704, "vkb_args must match Args in common.glsl");

/* A pipeline per (shader, specialization constant), created on first use. */
typedef struct vkb_pipe {
  int shader, spec;
  VkPipeline pipe;
} vkb_pipe;

typedef struct vkb_device {
  VkPhysicalDevice phys;
  VkDevice dev;
  vkb_dfns f;
  VkQueue queue;
  uint32_t qfamily;
  pthread_mutex_t qlock; /* vkQueueSubmit and vkDeviceWaitIdle */
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties mem;
  uint32_t subgroup_size;
  bool subgroup_arith; /* compute shaders have subgroup basic, vote and arithmetic operations */
  int gemm_cfg;        /* gemm_tiled.comp's tile (VKB_GEMM_CFG), 0: gemm.comp for every matmul */
  bool budget, f64, timestamps;
  /* f64 runs at about the f32 rate: a CPU device (lavapipe); GPUs run it at
   * 1/2 to 1/64 of it and Vulkan does not say which. Dropout and the
   * normal fill compute in f64 (bits equal to the CPU's) only then;
   * AG_VULKAN_TEST=slow_f64 clears it. */
  bool fast_f64;
  double ts_period_ns;
  uint64_t ts_mask;
  int dev_type; /* VkPhysicalDeviceType */
  char driver[64];
  /* Iterations one invocation's loops may run in all: lavapipe (gallivm)
   * stops a shader's loops after 65535 back-edges; INT64_MAX elsewhere.
   * Kernels with long sequential loops are refused above it. */
  int64_t loop_limit;
  uint32_t mt_device, mt_host; /* memory types: segments, pinned/arenas */
  /* Where the dispatches' argument blocks live (vkb_args_mode): in the
   * batch's host-visible arena (CPU and integrated devices: their memory is
   * the host's), or, on a discrete GPU, in device-local memory, mapped
   * (ReBAR: a DEVICE_LOCAL | HOST_VISIBLE type, mt_args) or filled by a
   * copy from a host-visible staging arena at the start of the batch. */
  int args_mode;
  uint32_t mt_args;
  bool device_mapped;          /* segment memory is host-visible (mapped) */
  size_t total_mem, max_alloc;
  size_t max_buffer;           /* maxBufferSize (maintenance4), else SIZE_MAX */
  VkDeviceSize atom;           /* nonCoherentAtomSize */
  /* the device takes SignedZeroInfNanPreserve for f32 / f64 (else the
   * modules' declarations are removed when they are created) */
  bool szinp32, szinp64;
  /* shaderDenormPreserveFloat32: the portable modules (VKS_P_*) declare
   * DenormPreserve for f32 (elsewhere subnormals are probed, not promised:
   * vkb_portable_check) */
  bool denorm32;
  /* AG_VULKAN_TEST=noncoherent: memory other than pinned blocks is treated
   * as not HOST_COHERENT (vkb_mem_flush, vkb_mem_invalidate) */
  bool test_noncoherent;
  /* The logical device is created on first use (vkb_dev_open), not by init:
   * listing devices or choosing the best one never creates one. `opened`
   * and `open_status` are written under the module's init lock. */
  bool opened;
  ag_status open_status;
  char open_why[160];
  VkPipelineLayout layout;
  /* The device's streams, so a segment being freed can first be flushed out
   * of every stream's unsubmitted batch (slock, then each stream's lock). */
  pthread_mutex_t slock;
  struct ag_bstream *streams;
  pthread_mutex_t plock; /* modules and pipelines */
  VkShaderModule mod[VKS_COUNT];
  vkb_pipe *pipes;
  int npipes, cap_pipes;
} vkb_device;

/* Device memory: a buffer with its own allocation and device address.
 * The host reads what the device wrote to mapped memory only after
 * vkb_mem_invalidate, and the device sees what the host wrote only after
 * vkb_mem_flush; both do nothing for HOST_COHERENT memory. */
typedef struct vkb_mem {
  VkBuffer buf;
  VkDeviceMemory mem;
  uint64_t addr;
  void *map;     /* host mapping when host-visible, else NULL */
  void *dev_map; /* the real mapping when map is a host copy (AG_VULKAN_TEST=noncoherent), else NULL */
  bool coherent; /* HOST_COHERENT (or not mapped) */
  size_t bytes;
  size_t alloc_bytes; /* the allocation's size (>= bytes) */
} vkb_mem;

/* What memory is for: segments (device-local), the streams' arenas and
 * error words (host-visible), pinned blocks (host-visible and coherent:
 * the program reads and writes them at any time). */
typedef enum vkb_mem_kind { VKB_MEM_SEGMENT, VKB_MEM_HOST, VKB_MEM_PINNED, VKB_MEM_ARGS } vkb_mem_kind;

/* d->args_mode. ARENA: argument blocks in the batch's host-visible arena
 * (read by the shaders where they are). MAPPED: in a device-local
 * host-visible buffer per batch, written through the mapping. STAGED: written
 * to a host-visible staging buffer per batch, copied to a device-local one
 * by a command buffer submitted ahead of the batch's (one copy and two
 * barriers per batch). */
enum { VKB_ARGS_ARENA, VKB_ARGS_MAPPED, VKB_ARGS_STAGED };

/* A timeline semaphore shared by a stream and the events recorded on it, so
 * an event outlives its stream. */
typedef struct vkb_timeline {
  vkb_device *d;
  VkSemaphore sem;
  atomic_int refs;
} vkb_timeline;

#define VKB_WAITS 16

/* Commands recorded between two submits, with the host-visible arena that
 * holds their argument blocks and staged uploads. A submitted batch holds a
 * reference to each timeline it waits on until it has completed, so no
 * semaphore is destroyed while a pending batch refers to it. */
typedef struct vkb_batch {
  VkCommandBuffer cb;
  vkb_mem arena;
  size_t used;
  /* argument blocks outside the arena (args_mode MAPPED, STAGED): the
   * device-local buffer the shaders read, the host-visible staging buffer
   * (STAGED) and the command buffer that copies it, submitted first */
  vkb_mem args, args_stage;
  size_t args_used;
  VkCommandBuffer pre;
  uint64_t value; /* timeline value signalled when it completes; 0 idle */
  int commands;
  vkb_timeline *wait_tl[VKB_WAITS];
  int nwait;
} vkb_batch;

/* A byte range of a buffer that commands recorded since the stream's last
 * barrier read or wrote (barrier tracking, vk_queue.c). */
typedef struct vkb_range {
  VkBuffer buf;
  size_t lo, hi; /* [lo, hi) */
} vkb_range;
#define VKB_TRACK 32
#define VKB_LAUNCH_RANGES (AG_KMAX_OPERANDS + 1)

#define VKB_BATCHES 4
#define VKB_ARENA_BYTES ((size_t)4 << 20)
#define VKB_BATCH_COMMANDS 256
/* argument blocks per batch outside the arena: one per command at most */
#define VKB_ARGS_BYTES ((size_t)VKB_BATCH_COMMANDS * sizeof(vkb_args))

struct ag_bstream {
  vkb_device *d;
  int dev;
  /* Held by every vtable entry on the stream: the core serializes calls on
   * one stream, and segment_free may flush it from another thread. */
  pthread_mutex_t lock;
  struct ag_bstream *next_on_dev;
  VkCommandPool pool;
  vkb_timeline *tl;
  uint64_t value;        /* last value submitted */
  vkb_batch b[VKB_BATCHES];
  int cur;               /* open (recording) batch, or -1 */
  int next;              /* batch to open next */
  /* semaphores the next submit waits on (stream_wait_event) */
  vkb_timeline *wait_tl[VKB_WAITS];
  uint64_t wait_v[VKB_WAITS];
  int nwait;
  vkb_mem err;           /* ag_kernel_error, zeroed */
  bool err_armed;
  vkb_mem scratch;       /* grow-only workspace, reused in queue order */
  VkQueryPool qpool;     /* timestamps of timing events */
  uint32_t qnext, qcount;
  /* Barrier tracking: what dispatches recorded since the last barrier read
   * and wrote (all: unknown writes, e.g. a multi-tensor launch), kept
   * across batches (a barrier orders everything earlier in submission
   * order on the queue). */
  vkb_range rd[VKB_TRACK], wr[VKB_TRACK];
  int nrd, nwr;
  bool wr_all;
  /* The launch being recorded: its operands' ranges (and the scratch
   * buffer once it asks for it), and how many dispatches it recorded
   * (-1 outside a launch: every dispatch then gets a barrier first). */
  vkb_range lrd[VKB_LAUNCH_RANGES], lwr[VKB_LAUNCH_RANGES];
  int nlrd, nlwr;
  bool lwr_all;
  int ldispatches;
};

struct ag_bevent {
  vkb_device *d;
  bool timing;
  vkb_timeline *tl; /* NULL until recorded */
  uint64_t value;
  ag_bstream *ts_stream; /* timing: the stream whose query pool holds the stamp */
  uint32_t query;
  uint64_t stamp;
  bool have_stamp;
};

VKB_HIDDEN extern vkb_fns vkb_f;
/* The one translation from VkResult to ag_status; sets the message
 * "vulkan: <what>: <result name>". */
VKB_HIDDEN ag_status vkb_error(VkResult r, const char *what);
VKB_HIDDEN vkb_device *vkb_dev(int dev);
/* The device with its logical device created (on the first call); NULL with
 * the error set when creating it failed (the failure is kept and repeated). */
VKB_HIDDEN vkb_device *vkb_dev_open(int dev);
/* Validation: AG_ERR_BACKEND when the debug messenger counted messages not
 * yet reported (only when validation was requested). */
VKB_HIDDEN ag_status vkb_validation_status(void);

VKB_HIDDEN ag_status vkb_mem_alloc(vkb_device *d, size_t bytes, vkb_mem_kind kind, vkb_mem *out);
VKB_HIDDEN void vkb_mem_free(vkb_device *d, vkb_mem *m);
/* Makes host writes to [off, off + bytes) of mapped m visible to the device
 * (vkFlushMappedMemoryRanges over whole nonCoherentAtomSize blocks); a
 * no-op for coherent memory. */
VKB_HIDDEN ag_status vkb_mem_flush(vkb_device *d, vkb_mem *m, size_t off, size_t bytes);
/* Makes device writes to [off, off + bytes) visible to host reads of the
 * mapping (vkInvalidateMappedMemoryRanges); a no-op for coherent memory. */
VKB_HIDDEN ag_status vkb_mem_invalidate(vkb_device *d, vkb_mem *m, size_t off, size_t bytes);
/* The pinned block containing [p, p + bytes) (copied into *out), or false. */
VKB_HIDDEN bool vkb_pinned_find(const void *p, size_t bytes, vkb_mem *out, size_t *out_off);
/* Submits every stream's open batch on the device (segment_free). */
VKB_HIDDEN void vkb_flush_device(vkb_device *d);

VKB_HIDDEN ag_status vkb_pipeline(vkb_device *d, vkb_shader sh, int spec, VkPipeline *out);

/* Recording (vk_queue.c). */
VKB_HIDDEN ag_status vkb_open(ag_bstream *s, vkb_batch **out);
VKB_HIDDEN ag_status vkb_flush(ag_bstream *s);
/* Room for bytes in the open batch's arena (16-byte aligned): host pointer
 * and device address. Flushes and opens a new batch when full. */
VKB_HIDDEN ag_status vkb_arena(ag_bstream *s, size_t bytes, vkb_batch **out_b, void **out_host,
                               uint64_t *out_addr, VkBuffer *out_buf, size_t *out_off);
/* Records one dispatch of shader sh (spec constant spec) with args, over
 * gx * gy * gz work-groups. A barrier comes first when the dispatch may
 * depend on a command recorded since the last one: the first dispatch of
 * a launch when its operands overlap what was written since (or it writes
 * what was read since), every later dispatch of the same launch (they
 * depend on each other through the launch's outputs and scratch). */
VKB_HIDDEN ag_status vkb_dispatch(ag_bstream *s, vkb_shader sh, int spec, const vkb_args *a,
                                  uint32_t gx, uint32_t gy, uint32_t gz);
/* A 1-D dispatch covering `items` invocations in groups of VKB_WG. */
VKB_HIDDEN ag_status vkb_dispatch1(ag_bstream *s, vkb_shader sh, int spec, const vkb_args *a,
                                   int64_t items);
VKB_HIDDEN void vkb_barrier(ag_bstream *s, VkCommandBuffer cb);
/* Dispatches and barriers recorded by this process (every device and
 * stream), for the tests (ag_vulkan_debug_counters). */
VKB_HIDDEN extern atomic_uint_fast64_t vkb_n_dispatches, vkb_n_barriers;
VKB_HIDDEN ag_status vkb_scratch(ag_bstream *s, size_t bytes, uint64_t *out_addr);

VKB_HIDDEN ag_status vkb_launch(ag_bstream *s, const ag_kernel_call *c);
VKB_HIDDEN ag_status vkb_launch_locked(ag_bstream *s, const ag_kernel_call *c);
VKB_HIDDEN bool vkb_supports(int dev, ag_kop op, int sub, ag_dtype dt);

/* Typed kernel ops (vk_reduce2.c), each reading its decoded arguments
 * (kargs.h); f64 only on devices with shaderFloat64. */
VKB_HIDDEN ag_status vk_k_logsumexp(ag_bstream *s, const ag_k_logsumexp *a);
VKB_HIDDEN ag_status vk_k_norm(ag_bstream *s, const ag_k_norm *a);
VKB_HIDDEN ag_status vk_k_one_hot(ag_bstream *s, const ag_k_one_hot *a);

/* Reductions, variance, cumsum, softmax, logsumexp and long-K matmuls of
 * any length (vk_tree.c, tree.comp): passes of work-groups over chunks of
 * VKB_TREE_CHUNK elements (tree.comp's TREE_CHUNK), partials in the
 * stream's scratch buffer. Each function records its passes into the
 * launch being recorded; `scratch` is a device address of the matching
 * *_scratch() bytes that the launch owns (vkb_scratch). Errors:
 * AG_ERR_UNSUPPORTED past the device's grid limits, AG_ERR_OOM from the
 * argument arena. */
#define VKB_TREE_CHUNK ((int64_t)VKB_WG * 64)
/* One reduction over [outer, r, inner] of x (dtype xdt) into out (odt):
 * op an ag_reduce_op (ARGMAX: out an integer dtype), the sum times scale,
 * plus beta times out where beta != 0; f64: the double build (xdt and odt
 * f64, or odt an integer for ARGMAX). */
typedef struct vkb_tree_red {
  uint64_t out, x;
  ag_dtype odt, xdt;
  int op;
  int64_t outer, r, inner;
  double scale, beta;
  bool f64;
  bool i64; /* an integer x: sum (wrapping), max, min, argmax in i64 */
  /* dot: r = K, rows outer = B * M * N of a matmul, x = A (strides xs:
   * batch, row, k), y = B (dtype ydt, strides ys: batch, k, col) */
  bool dot;
  uint64_t y;
  ag_dtype ydt;
  int64_t M, N, xs[3], ys[3];
  /* the variance: squares about mean (a device address of one value per
   * row, f32, or f64 with f64); sqrt: its square root */
  uint64_t mean;
  bool sqrt;
} vkb_tree_red;
/* Scratch bytes the passes need for `rows` rows of `r` (0: one pass). */
VKB_HIDDEN size_t vkb_tree_scratch(int64_t rows, int64_t r);
VKB_HIDDEN ag_status vkb_tree_reduce(ag_bstream *s, uint64_t scratch, const vkb_tree_red *t);
/* cumsum (variant AG_KV_CUMSUM_PREFIX or _SUFFIX) of [outer, r, inner]
 * lines of any length: block sums, their scan per line, block scans. */
VKB_HIDDEN size_t vkb_tree_cumsum_scratch(int64_t lines, int64_t r);
VKB_HIDDEN ag_status vkb_tree_cumsum(ag_bstream *s, uint64_t scratch, uint64_t y, uint64_t x, ag_dtype dt,
                                     int variant, int64_t outer, int64_t r, int64_t inner);
/* The softmax gradient (dx, dy, y) of long rows: the row sums by tree
 * passes, then dx. */
VKB_HIDDEN size_t vkb_tree_softmax_bwd_scratch(int64_t rows, int64_t cols);
VKB_HIDDEN ag_status vkb_tree_softmax_bwd(ag_bstream *s, uint64_t scratch, uint64_t dx, uint64_t dy, uint64_t y,
                                          ag_dtype dt, int variant, int64_t rows, int64_t cols);
/* logsumexp over [outer, r, inner] of any r: the softmax pairs, a max,
 * then out per line. */
VKB_HIDDEN size_t vkb_tree_lse_scratch(int64_t lines, int64_t r);
VKB_HIDDEN ag_status vkb_tree_lse(ag_bstream *s, uint64_t scratch, uint64_t out, uint64_t x, ag_dtype dt,
                                  int64_t outer, int64_t r, int64_t inner);
/* Softmax (variant AG_KV_SOFTMAX or AG_KV_LOG_SOFTMAX) of contiguous rows
 * of any length: partial (max, sum) per chunk, a merge per row, then y. */
VKB_HIDDEN size_t vkb_tree_softmax_scratch(int64_t rows, int64_t cols);
VKB_HIDDEN ag_status vkb_tree_softmax(ag_bstream *s, uint64_t scratch, uint64_t y, uint64_t x, ag_dtype dt,
                                      int variant, int64_t rows, int64_t cols);

/* Portable numerics (vk_portable.c): the device probe (the vtable's
 * portable_check), whether a launch computes (op, sub, dtype) as
 * docs/numerics.md fixes it (supports_portable, vk_launch.c), and S over
 * [outer, r, inner] into out (REDUCE SUM). */
VKB_HIDDEN ag_status vkb_portable_check(int dev);
VKB_HIDDEN bool vkb_supports_portable(int dev, ag_kop op, int sub, ag_dtype dt);
VKB_HIDDEN ag_status vkb_portable_sum(ag_bstream *s, uint64_t out, ag_dtype odt, uint64_t x, ag_dtype xdt,
                                      int64_t outer, int64_t r, int64_t inner, double scale);
/* SUMSQ, LOGSUMEXP and NORM with portable numerics (vk_portable.c). */
VKB_HIDDEN ag_status vkb_portable_sumsq(ag_bstream *s, const ag_k_sumsq *a);
VKB_HIDDEN ag_status vkb_portable_lse(ag_bstream *s, const ag_k_logsumexp *a);
VKB_HIDDEN ag_status vkb_portable_norm(ag_bstream *s, const ag_k_norm *a);

VKB_HIDDEN ag_status vkb_stream_create(int dev, ag_bstream **out);
VKB_HIDDEN void vkb_stream_destroy(ag_bstream *s);
VKB_HIDDEN ag_status vkb_stream_synchronize(ag_bstream *s);
VKB_HIDDEN ag_status vkb_stream_query(ag_bstream *s, bool *out_done);
VKB_HIDDEN ag_status vkb_event_create(int dev, bool timing, ag_bevent **out);
VKB_HIDDEN void vkb_event_destroy(ag_bevent *e);
VKB_HIDDEN ag_status vkb_event_record(ag_bevent *e, ag_bstream *s);
VKB_HIDDEN ag_status vkb_stream_wait_event(ag_bstream *s, ag_bevent *e);
VKB_HIDDEN ag_status vkb_event_query(ag_bevent *e, bool *out_done);
VKB_HIDDEN ag_status vkb_event_synchronize(ag_bevent *e);
VKB_HIDDEN ag_status vkb_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms);
VKB_HIDDEN ag_status vkb_copy_h2d(ag_bstream *s, void *dst, size_t doff, const void *src,
                                  size_t bytes, bool pinned);
VKB_HIDDEN ag_status vkb_copy_d2h(ag_bstream *s, void *dst, const void *src, size_t soff,
                                  size_t bytes);
VKB_HIDDEN ag_status vkb_copy_d2d(ag_bstream *s, void *dst, size_t doff, const void *src,
                                  size_t soff, size_t bytes);
VKB_HIDDEN ag_status vkb_take_kernel_error(ag_bstream *s, ag_kernel_error *out);

#endif
