/* Internal interface of the OpenCL backend module: device table, streams,
 * events, the program cache and the kernel launcher. Nothing here is
 * exported; the module's only public symbol is ag_backend_module_get. */
#ifndef AG_CL_INTERNAL_H
#define AG_CL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>

#include "anygrad/backend.h"

#define CLB_HIDDEN __attribute__((visibility("hidden")))

/* Kernels of the embedded program, looked up by name once per stream. */
typedef enum clb_kernel {
  CLK_UNARY, CLK_BINARY, CLK_WHERE, CLK_FILL, CLK_ARANGE, CLK_RAND, CLK_DROPOUT,
  CLK_REDUCE_ROWS, CLK_REDUCE_COLS, CLK_SUMSQ_PART, CLK_SUMSQ_FINAL,
  CLK_SOFTMAX, CLK_SOFTMAX_BWD, CLK_CE, CLK_CE_BWD, CLK_LN, CLK_LN_BWD, CLK_LN_BWD_WB,
  CLK_EMB, CLK_EMB_BWD, CLK_ADAMW, CLK_SGD, CLK_NONFINITE,
  CLK_IM2COL, CLK_COL2IM, CLK_CONV_BIAS, CLK_POOL, CLK_POOL_BWD, CLK_BN_STATS, CLK_BN_APPLY,
  CLK_RMS, CLK_RMS_BWD, CLK_RMS_BWD_W, CLK_VAR_ROWS, CLK_VAR_COLS, CLK_CUMSUM,
  CLK_GATHER, CLK_GATHER_BWD, CLK_TOPK, CLK_SDPA, CLK_SDPA_BWD_DQ, CLK_SDPA_BWD_DKV,
  CLK_LOGSUMEXP,
  CLK_NORM,
  CLK_ONE_HOT,
  CLK_LOGSUMEXP_ROWS,
  CLK_NORM_ROWS,
  CLK_GN, CLK_GN_BWD, CLK_GN_BWD_WB, CLK_INTERP, CLK_INTERP_BWD, /* resample.cl */
  CLK_GN_D, CLK_GN_BWD_D, CLK_GN_BWD_WB_D, CLK_INTERP_D, CLK_INTERP_BWD_D, /* resample.cl, f64: NULL without cl_khr_fp64 */
  /* the kernel ops of their own files (cl_kops.h) */
  CLK_SORT,
  CLK_SCATTER_ADD,
  CLK_PAD,
  CLK_PAD_BWD,
  /* their f64 kernels: NULL without cl_khr_fp64 */
  CLK_SORT_D,
  CLK_SCATTER_ADD_D,
  CLK_PAD_D,
  CLK_PAD_BWD_D,
  /* f64.cl: NULL without cl_khr_fp64 */
  CLK_UNARY_D, CLK_BINARY_D, CLK_FILL_D, CLK_REDUCE_D, CLK_VAR_D, CLK_CUMSUM_D, CLK_SOFTMAX_D,
  CLK_SOFTMAX_BWD_D, CLK_GATHER_D, CLK_GATHER_BWD_D, CLK_EMB_BWD_D, CLK_ARANGE_D,
  /* portable.cl: only in the portable program (NULL in the default one) */
  CLK_P_SUM,
  CLK_P_MATMUL,
  CLK_P_PROBE,
  CLK_P_ADAMW,
  CLK_P_CONV,
  CLK_P_CONV_BWD_IN,
  CLK_P_CONV_BWD_W,
  /* rowred.cl: only in the default program (NULL in the portable one) */
  CLK_RED_ROWS,
  CLK_RED_COLS4,
  CLK_ARGMAX_ROWS,
  /* contiguous fast paths, one per sub-op, named from the op table
   * (ag_u_EXP, ag_b_GELU_BWD); comparisons, which write bool, have none */
  CLK_UNARY_C0,
  CLK_BINARY_C0 = CLK_UNARY_C0 + AG_UNARY_COUNT,
  CLK_COUNT = CLK_BINARY_C0 + AG_BINARY_COUNT
} clb_kernel;

/* Shape and per-operand strides of an elementwise launch; the layout equals
 * ew_meta in kernels/opencl/common.cl (passed by value). */
typedef struct clb_ew_meta {
  cl_long shape[AG_MAX_DIMS];
  cl_long st[4][AG_MAX_DIMS];
} clb_ew_meta;

typedef struct clb_device {
  cl_platform_id platform;
  cl_device_id id;
  cl_context ctx;
  char name[128], vendor[64], version[64], driver[64], platform_version[128];
  size_t total_mem, max_alloc, max_wg;
  int compute_units;
  bool fp16, fp64, unified, amd_free_mem;
  /* Guards the program build; the program is built once, on first launch. */
  pthread_mutex_t lock;
  bool prog_tried;
  cl_program prog;
  ag_status prog_status;
  char prog_error[1024];
  /* The portable-numerics program (docs/numerics.md), built on the first
   * portable launch; native_divsqrt: the device honours
   * -cl-fp32-correctly-rounded-divide-sqrt, so pmath uses its / and sqrt. */
  bool pprog_tried, native_divsqrt;
  cl_program pprog;
  ag_status pprog_status;
  char pprog_error[1024];
} clb_device;

struct ag_bstream {
  clb_device *d;
  int dev;
  /* Threads may share a stream (the default stream of a device that two
   * ranks of an in-process group use): launches hold this lock, so one
   * thread's kernel arguments and scratch are not another's; the flags
   * below are read and written under it. */
  pthread_mutex_t lock;
  cl_command_queue q;
  cl_mem err;        /* ag_kernel_error, zeroed */
  bool err_armed;    /* a kernel that may set err ran since the last take */
  bool busy;         /* work enqueued since the queue was last seen idle */
  bool since_probe;  /* work enqueued after `probe` */
  unsigned long enqueued; /* enqueues so far: a synchronize clears busy only if none came meanwhile */
  cl_event probe;    /* marker used by stream_query */
  /* Kernel sets of the default [0] and portable [1] programs, created on
   * first use; k and kwg point at the set of the launch in progress. */
  bool have_set[2];
  cl_kernel kset[2][CLK_COUNT];
  size_t kwgset[2][CLK_COUNT];
  cl_kernel *k;
  size_t *kwg;       /* work-group limit per kernel */
  bool portable;     /* the launch in progress has AG_KF_PORTABLE */
  cl_mem scratch;    /* grow-only workspace, reused in queue order */
  size_t scratch_bytes;
};

struct ag_bevent {
  clb_device *d;
  bool timing;
  cl_event ev; /* NULL until recorded */
};

/* The one translation from OpenCL (and CLBlast) codes to ag_status; sets the
 * message "opencl: <what>: <code name>". */
CLB_HIDDEN ag_status clb_error(cl_int err, const char *what);
CLB_HIDDEN clb_device *clb_dev(int dev);

/* Builds (or loads from the on-disk cache) the device's program once;
 * portable: the portable-numerics build of the same sources. */
CLB_HIDDEN ag_status clb_program(clb_device *d, bool portable, cl_program *out);
/* The embedded kernel source (generated at build time). */
CLB_HIDDEN extern const char clb_kernel_source[];
CLB_HIDDEN extern const size_t clb_kernel_source_len;
/* The portable program's prelude (portable_prelude.cl and pmath.h), put
 * in front of clb_kernel_source. */
CLB_HIDDEN extern const char clb_portable_source[];
CLB_HIDDEN extern const size_t clb_portable_source_len;

/* Every enqueue calls this, with s->lock held, so stream_query can answer
 * without a marker when nothing was queued since the queue was last idle. */
static inline void clb_touch(ag_bstream *s) {
  s->busy = true;
  s->since_probe = true;
  s->enqueued++;
}

CLB_HIDDEN ag_status clb_stream_kernels(ag_bstream *s, bool portable);
/* portable_check and supports_portable (cl_launch.c). */
CLB_HIDDEN ag_status clb_portable_check(int dev);
CLB_HIDDEN bool clb_supports_portable(int dev, ag_kop op, int sub, ag_dtype dt);
CLB_HIDDEN ag_status clb_scratch(ag_bstream *s, size_t bytes, cl_mem *out);

CLB_HIDDEN ag_status clb_launch(ag_bstream *s, const ag_kernel_call *c);
CLB_HIDDEN bool clb_supports(int dev, ag_kop op, int sub, ag_dtype dt);

/* Typed kernel ops (cl_reduce2.c), each reading its decoded arguments
 * (kargs.h); f64 lines only on devices with fp64. */
CLB_HIDDEN ag_status cl_k_logsumexp(ag_bstream *s, const ag_k_logsumexp *a);
CLB_HIDDEN ag_status cl_k_norm(ag_bstream *s, const ag_k_norm *a);
CLB_HIDDEN ag_status cl_k_one_hot(ag_bstream *s, const ag_k_one_hot *a);

/* queue objects (cl_queue.c) */
CLB_HIDDEN ag_status clb_stream_create(int dev, ag_bstream **out);
CLB_HIDDEN void clb_stream_destroy(ag_bstream *s);
CLB_HIDDEN ag_status clb_stream_synchronize(ag_bstream *s);
CLB_HIDDEN ag_status clb_stream_query(ag_bstream *s, bool *out_done);
CLB_HIDDEN ag_status clb_event_create(int dev, bool timing, ag_bevent **out);
CLB_HIDDEN void clb_event_destroy(ag_bevent *e);
CLB_HIDDEN ag_status clb_event_record(ag_bevent *e, ag_bstream *s);
CLB_HIDDEN ag_status clb_stream_wait_event(ag_bstream *s, ag_bevent *e);
CLB_HIDDEN ag_status clb_event_query(ag_bevent *e, bool *out_done);
CLB_HIDDEN ag_status clb_event_synchronize(ag_bevent *e);
CLB_HIDDEN ag_status clb_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms);
CLB_HIDDEN ag_status clb_copy_h2d(ag_bstream *s, void *dst, size_t doff, const void *src,
                                  size_t bytes, bool pinned);
CLB_HIDDEN ag_status clb_copy_d2h(ag_bstream *s, void *dst, const void *src, size_t soff,
                                  size_t bytes);
CLB_HIDDEN ag_status clb_copy_d2d(ag_bstream *s, void *dst, size_t doff, const void *src,
                                  size_t soff, size_t bytes);
CLB_HIDDEN ag_status clb_take_kernel_error(ag_bstream *s, ag_kernel_error *out);

#endif
