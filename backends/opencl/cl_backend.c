/* OpenCL backend: device discovery across platforms, device memory (cl_mem
 * segments), pinned host memory, the error translation, and the vtable the
 * module exports. Streams are in cl_queue.c, kernels in cl_launch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/dlpack.h"
#include "cl_internal.h"

#ifndef CL_DEVICE_GLOBAL_FREE_MEMORY_AMD
#define CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039
#endif

/* The device table is this module's registry: filled once by init under
 * g_init_lock, read-only afterwards (per-device mutable parts have their own
 * lock). Pinned blocks are tracked in a table under g_pin_lock. */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_inited;
static ag_status g_init_status;
static char g_init_reason[512];
static int g_count;
static clb_device g_dev[AG_MAX_DEVICES];

typedef struct clb_pinned {
  void *ptr;
  cl_mem mem;
  int dev;
} clb_pinned;
static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static clb_pinned *g_pin;
static size_t g_pin_n, g_pin_cap;

static const char *cl_code_name(cl_int e) {
  switch (e) {
#define C(x) case x: return #x
    C(CL_DEVICE_NOT_FOUND); C(CL_DEVICE_NOT_AVAILABLE); C(CL_COMPILER_NOT_AVAILABLE);
    C(CL_MEM_OBJECT_ALLOCATION_FAILURE); C(CL_OUT_OF_RESOURCES); C(CL_OUT_OF_HOST_MEMORY);
    C(CL_PROFILING_INFO_NOT_AVAILABLE); C(CL_MEM_COPY_OVERLAP); C(CL_BUILD_PROGRAM_FAILURE);
    C(CL_MISALIGNED_SUB_BUFFER_OFFSET); C(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
    C(CL_INVALID_VALUE); C(CL_INVALID_DEVICE); C(CL_INVALID_CONTEXT);
    C(CL_INVALID_COMMAND_QUEUE); C(CL_INVALID_MEM_OBJECT); C(CL_INVALID_BINARY);
    C(CL_INVALID_BUILD_OPTIONS); C(CL_INVALID_PROGRAM); C(CL_INVALID_PROGRAM_EXECUTABLE);
    C(CL_INVALID_KERNEL_NAME); C(CL_INVALID_KERNEL); C(CL_INVALID_ARG_INDEX);
    C(CL_INVALID_ARG_VALUE); C(CL_INVALID_ARG_SIZE); C(CL_INVALID_KERNEL_ARGS);
    C(CL_INVALID_WORK_DIMENSION); C(CL_INVALID_WORK_GROUP_SIZE); C(CL_INVALID_WORK_ITEM_SIZE);
    C(CL_INVALID_GLOBAL_OFFSET); C(CL_INVALID_EVENT_WAIT_LIST); C(CL_INVALID_EVENT);
    C(CL_INVALID_OPERATION); C(CL_INVALID_BUFFER_SIZE); C(CL_INVALID_GLOBAL_WORK_SIZE);
#undef C
  }
  return NULL;
}

ag_status clb_error(cl_int err, const char *what) {
  const char *name = cl_code_name(err);
  char buf[32];
  if (!name) {
    /* CLBlast extends the OpenCL codes with values <= -1024. */
    snprintf(buf, sizeof buf, "%s %d", err <= -1024 ? "CLBlast status" : "OpenCL error", (int)err);
    name = buf;
  }
  ag_status s = AG_ERR_BACKEND;
  if (err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
      err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE)
    s = AG_ERR_OOM;
  else if (err == CL_DEVICE_NOT_AVAILABLE || err == CL_DEVICE_NOT_FOUND)
    s = AG_ERR_UNAVAILABLE;
  const char *hint = "";
  if (err == CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST || err == CL_INVALID_COMMAND_QUEUE)
    hint = " (the device may have been lost or a kernel faulted)";
  return ag_error_set(s, "opencl: %s: %s%s", what, name, hint);
}

clb_device *clb_dev(int dev) { return &g_dev[dev]; }

/* Truncates long strings (PoCL's device version is over 64 bytes) instead of
 * failing as clGetDeviceInfo does with a short buffer. */
static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t len) {
  char tmp[1024];
  if (clGetDeviceInfo(d, what, sizeof tmp, tmp, NULL) != CL_SUCCESS) tmp[0] = 0;
  tmp[sizeof tmp - 1] = 0;
  snprintf(buf, len, "%s", tmp);
}

static bool has_ext(cl_device_id d, const char *ext) {
  size_t n = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS || !n) return false;
  char *s = malloc(n + 1);
  if (!s) return false;
  bool found = false;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, NULL) == CL_SUCCESS) {
    s[n] = 0;
    size_t el = strlen(ext);
    for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
      found = (p == s || p[-1] == ' ') && (p[el] == 0 || p[el] == ' ');
  }
  free(s);
  return found;
}

/* AG_OPENCL_PLATFORM: a platform index or a case-sensitive substring of the
 * platform name or vendor. */
static bool platform_selected(cl_platform_id p, unsigned idx, const char *sel) {
  if (!sel || !*sel) return true;
  uint64_t v; /* an index through the strict parser: "99999999999999999999" selects none, not a wrapped one */
  if (ag_parse_u64(sel, &v)) return v == idx;
  char name[256] = "", vendor[256] = "";
  clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof name, name, NULL);
  clGetPlatformInfo(p, CL_PLATFORM_VENDOR, sizeof vendor, vendor, NULL);
  name[255] = vendor[255] = 0;
  return strstr(name, sel) || strstr(vendor, sel);
}

static ag_status add_device(cl_platform_id p, cl_device_id id) {
  clb_device *d = &g_dev[g_count];
  memset(d, 0, sizeof *d);
  d->platform = p;
  d->id = id;
  info_str(id, CL_DEVICE_NAME, d->name, sizeof d->name);
  info_str(id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
  info_str(id, CL_DEVICE_VERSION, d->version, sizeof d->version);
  info_str(id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
  clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof d->platform_version, d->platform_version,
                    NULL);
  d->platform_version[sizeof d->platform_version - 1] = 0;
  cl_ulong mem = 0, maxa = 0;
  cl_uint cus = 0;
  cl_bool unified = CL_FALSE;
  size_t wg = 1;
  cl_device_type type = 0;
  clGetDeviceInfo(id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxa, &maxa, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
  clGetDeviceInfo(id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
  clGetDeviceInfo(id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  d->total_mem = (size_t)mem;
  d->max_alloc = (size_t)maxa;
  d->compute_units = (int)cus;
  d->max_wg = wg;
  d->unified = unified || (type & CL_DEVICE_TYPE_CPU);
  d->fp16 = has_ext(id, "cl_khr_fp16");
  d->fp64 = has_ext(id, "cl_khr_fp64");
  /* the portable program asks for IEEE / and sqrt only where the device
   * says it honours -cl-fp32-correctly-rounded-divide-sqrt (pmath builds
   * them from + - * otherwise) */
  cl_device_fp_config fpc = 0;
  d->native_divsqrt = clGetDeviceInfo(id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fpc, &fpc, NULL) == CL_SUCCESS &&
                      (fpc & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT);
  d->amd_free_mem = has_ext(id, "cl_amd_device_attribute_query");
  cl_int err;
  d->ctx = clCreateContext(NULL, 1, &id, NULL, NULL, &err);
  if (!d->ctx) return clb_error(err, "clCreateContext");
  pthread_mutex_init(&d->lock, NULL);
  g_count++;
  return AG_OK;
}

/* A CPU OpenCL driver (PoCL) starts its worker threads inside
 * clGetPlatformIDs and aborts the process when one cannot start, which
 * an address-space limit (ulimit -v) makes likely: each thread takes a
 * stack and a malloc arena. Under a limit, probe for that much free address
 * space first; without it OpenCL is unavailable with the reason, never an
 * abort. Without a limit there is nothing to probe. */
#define CL_INIT_HEADROOM ((size_t)256 << 20)
static bool address_space_short(char *reason, size_t len) {
  unsigned long long limit_kib = 0;
  if (!ag_address_space_short(CL_INIT_HEADROOM, &limit_kib)) return false;
  snprintf(reason, len,
           "libanygrad-opencl.so: the address-space limit (ulimit -v %llu KiB) leaves less than %zu MiB free, "
           "which an OpenCL driver's worker threads need (PoCL aborts the process when one cannot start)",
           limit_kib, CL_INIT_HEADROOM >> 20);
  return true;
}

static ag_status cl_init(int *out_count, char *reason, size_t reason_len) {
  pthread_mutex_lock(&g_init_lock);
  if (!g_inited) {
    g_inited = true;
    g_init_status = AG_OK;
    cl_uint np = 0;
    cl_platform_id plats[16];
    cl_int err = CL_SUCCESS;
    if (address_space_short(g_init_reason, sizeof g_init_reason))
      g_init_status = AG_ERR_UNAVAILABLE;
    else
      err = clGetPlatformIDs(16, plats, &np);
    if (g_init_status == AG_OK && (err != CL_SUCCESS || np == 0)) {
      snprintf(g_init_reason, sizeof g_init_reason,
               "libanygrad-opencl.so: clGetPlatformIDs: no OpenCL platform (%d)", (int)err);
      g_init_status = AG_ERR_UNAVAILABLE;
    }
    const char *sel = getenv("AG_OPENCL_PLATFORM");
    bool matched = false;
    for (cl_uint p = 0; p < np && p < 16 && g_init_status == AG_OK; p++) {
      if (!platform_selected(plats[p], p, sel)) continue;
      matched = true;
      cl_uint nd = 0;
      cl_device_id ids[AG_MAX_DEVICES];
      if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, AG_MAX_DEVICES, ids, &nd) != CL_SUCCESS)
        continue;
      for (cl_uint i = 0; i < nd && i < AG_MAX_DEVICES && g_count < AG_MAX_DEVICES; i++)
        if (add_device(plats[p], ids[i]) != AG_OK) {
          /* A device whose context fails is skipped, not fatal. */
          ag_error_clear();
        }
    }
    if (g_init_status == AG_OK && g_count == 0) {
      char shown[64];
      if (sel && *sel && !matched) {
        /* the platforms there are, so the user can pick one */
        char names[200] = "";
        for (cl_uint p = 0; p < np && p < 16; p++) {
          char name[96] = "";
          clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof name, name, NULL);
          name[sizeof name - 1] = 0;
          snprintf(names + strlen(names), sizeof names - strlen(names), "%s%u: %s", p ? ", " : "", p, name);
        }
        snprintf(g_init_reason, sizeof g_init_reason,
                 "libanygrad-opencl.so: AG_OPENCL_PLATFORM='%s' matches no platform's index, name or vendor "
                 "(platforms: %s)",
                 ag_escape(sel, shown, sizeof shown), names);
      } else {
        snprintf(g_init_reason, sizeof g_init_reason, "libanygrad-opencl.so: no OpenCL device%s%s",
                 sel && *sel ? " on platform " : "", sel && *sel ? ag_escape(sel, shown, sizeof shown) : "");
      }
      g_init_status = AG_ERR_UNAVAILABLE;
    }
  }
  ag_status st = g_init_status;
  *out_count = g_count;
  if (st != AG_OK && reason && reason_len) snprintf(reason, reason_len, "%s", g_init_reason);
  pthread_mutex_unlock(&g_init_lock);
  if (st != AG_OK) ag_error_set(st, "%s", g_init_reason);
  return st;
}

static void cl_shutdown(void) {
  pthread_mutex_lock(&g_init_lock);
  for (int i = 0; i < g_count; i++) {
    if (g_dev[i].prog) clReleaseProgram(g_dev[i].prog);
    if (g_dev[i].pprog) clReleaseProgram(g_dev[i].pprog);
    if (g_dev[i].ctx) clReleaseContext(g_dev[i].ctx);
    pthread_mutex_destroy(&g_dev[i].lock);
  }
  g_count = 0;
  g_inited = false;
  pthread_mutex_unlock(&g_init_lock);
}

static ag_status cl_device_props(int dev, ag_device_props *out) {
  clb_device *d = &g_dev[dev];
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", d->name);
  snprintf(out->vendor, sizeof out->vendor, "%s", d->vendor);
  snprintf(out->arch, sizeof out->arch, "%s", d->version);
  out->total_memory = d->total_mem;
  out->compute_units = d->compute_units;
  out->native_f16 = d->fp16;
  out->native_bf16 = false;
  out->virtual_memory = false;
  out->unified_memory = d->unified;
  return AG_OK;
}

/* Free memory only where a vendor extension reports it; otherwise total, and
 * the caching allocator subtracts what it holds. */
static ag_status cl_meminfo(int dev, size_t *out_free, size_t *out_total) {
  clb_device *d = &g_dev[dev];
  *out_total = d->total_mem;
  *out_free = d->total_mem;
  if (d->amd_free_mem) {
    size_t kb[2] = {0, 0};
    if (clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kb, kb, NULL) ==
        CL_SUCCESS && kb[0])
      *out_free = kb[0] * 1024 < d->total_mem ? kb[0] * 1024 : d->total_mem;
  }
  return AG_OK;
}

static ag_status cl_segment_alloc(int dev, size_t bytes, void **out_base) {
  clb_device *d = &g_dev[dev];
  if (bytes > d->max_alloc)
    return ag_error_set(AG_ERR_OOM,
                        "opencl: segment of %zu bytes exceeds the device's largest buffer "
                        "(CL_DEVICE_MAX_MEM_ALLOC_SIZE %zu) on %s",
                        bytes, d->max_alloc, d->name);
  cl_int err;
  cl_mem m = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
  if (!m) return clb_error(err, "clCreateBuffer");
  *out_base = m;
  return AG_OK;
}

static void cl_segment_free(int dev, void *base) {
  if (base) clReleaseMemObject((cl_mem)base);
}

/* A buffer allocated by the runtime in host-visible memory and kept mapped:
 * transfers from the mapped pointer are DMA-able on discrete GPUs. */
static ag_status cl_pinned_alloc(int dev, size_t bytes, void **out_ptr) {
  clb_device *d = &g_dev[dev];
  cl_int err;
  ag_status st = AG_OK;
  cl_mem m = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes ? bytes : 1,
                            NULL, &err);
  if (!m) return clb_error(err, "clCreateBuffer(CL_MEM_ALLOC_HOST_PTR)");
  cl_command_queue q = clCreateCommandQueue(d->ctx, d->id, 0, &err);
  void *p = NULL;
  if (!q) {
    st = clb_error(err, "clCreateCommandQueue");
    goto fail;
  }
  p = clEnqueueMapBuffer(q, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes ? bytes : 1, 0, NULL,
                         NULL, &err);
  clReleaseCommandQueue(q);
  if (!p) {
    st = clb_error(err, "clEnqueueMapBuffer");
    goto fail;
  }
  pthread_mutex_lock(&g_pin_lock);
  if (g_pin_n == g_pin_cap) {
    size_t cap = g_pin_cap ? 2 * g_pin_cap : 16;
    clb_pinned *t = realloc(g_pin, cap * sizeof *t);
    if (!t) {
      pthread_mutex_unlock(&g_pin_lock);
      st = ag_error_set(AG_ERR_OOM, "opencl: pinned table");
      goto fail;
    }
    g_pin = t;
    g_pin_cap = cap;
  }
  g_pin[g_pin_n++] = (clb_pinned){p, m, dev};
  pthread_mutex_unlock(&g_pin_lock);
  *out_ptr = p;
  return AG_OK;
fail:
  /* Releasing a mapped buffer also drops the mapping. */
  clReleaseMemObject(m);
  return st;
}

static void cl_pinned_free(int dev, void *ptr) {
  cl_mem m = NULL;
  pthread_mutex_lock(&g_pin_lock);
  for (size_t i = 0; i < g_pin_n; i++)
    if (g_pin[i].ptr == ptr) {
      m = g_pin[i].mem;
      g_pin[i] = g_pin[--g_pin_n];
      break;
    }
  pthread_mutex_unlock(&g_pin_lock);
  if (!m) return;
  cl_int err;
  cl_command_queue q = clCreateCommandQueue(g_dev[dev].ctx, g_dev[dev].id, 0, &err);
  if (q) {
    cl_event ev = NULL;
    if (clEnqueueUnmapMemObject(q, m, ptr, 0, NULL, &ev) == CL_SUCCESS) {
      clWaitForEvents(1, &ev);
      clReleaseEvent(ev);
    }
    clReleaseCommandQueue(q);
  }
  clReleaseMemObject(m);
}

/* A CPU OpenCL device (PoCL) is no faster than the native cpu backend:
 * it ranks below it; a GPU ranks below CUDA and HIP. */
static int32_t cl_device_priority(int dev) { return g_dev[dev].unified ? -1 : 100; }

static const ag_backend g_backend = {
    AG_BACKEND_HEADER,
    .name = "opencl",
    .init = cl_init,
    .shutdown = cl_shutdown,
    .device_props = cl_device_props,
    .mem_info = cl_meminfo,
    .segment_alloc = cl_segment_alloc,
    .segment_free = cl_segment_free,
    .pinned_alloc = cl_pinned_alloc,
    .pinned_free = cl_pinned_free,
    .stream_create = clb_stream_create,
    .stream_destroy = clb_stream_destroy,
    .stream_synchronize = clb_stream_synchronize,
    .stream_query = clb_stream_query,
    .event_create = clb_event_create,
    .event_destroy = clb_event_destroy,
    .event_record = clb_event_record,
    .stream_wait_event = clb_stream_wait_event,
    .event_query = clb_event_query,
    .event_synchronize = clb_event_synchronize,
    .event_elapsed_ms = clb_event_elapsed_ms,
    .copy_h2d = clb_copy_h2d,
    .copy_d2h = clb_copy_d2h,
    .copy_d2d = clb_copy_d2d,
    .launch = clb_launch,
    .supports = clb_supports,
    .take_kernel_error = clb_take_kernel_error,
    .portable_check = clb_portable_check,
    .supports_portable = clb_supports_portable,
    .flags = 0, /* a cl_mem is a handle, not an address */
    .dlpack_device = kDLOpenCL,
    .priority = 100,
    .device_priority = cl_device_priority,
};

__attribute__((visibility("default"))) const ag_backend *ag_backend_module_get(void) {
  return &g_backend;
}
