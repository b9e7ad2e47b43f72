/* cuDNN's status codes and version number read for the major version of the
 * library loaded at run time: the module is compiled against one cudnn.h but
 * may open libcudnn.so.9 or libcudnn.so.8, whose numbers differ, so these
 * compare plain integers and include no cuDNN header (tests/dnn_status_test.c
 * checks them on any machine). */
#ifndef AG_CUDA_DNN_STATUS_H
#define AG_CUDA_DNN_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "anygrad/status.h"

/* What a cuDNN status means for the module (docs/gpu.md has the table of
 * every code). */
typedef enum ag_dnn_class {
  AG_DNN_OK = 0,
  /* cuDNN does not run this problem (shape, type, layout, padding): the own
   * kernels run this call; the next one asks cuDNN again */
  AG_DNN_DECLINE,
  /* cuDNN cannot run here at all (a sublibrary failed to load or does not
   * match, runtime compilation failed, driver, CUDA runtime or architecture
   * unsupported, licence): the own kernels run this call and every later
   * one, and the reason is recorded (ag_dnn_unusable_note) */
  AG_DNN_UNUSABLE,
  AG_DNN_OOM,  /* an allocation failed: AG_ERR_OOM (the allocator frees and retries) */
  AG_DNN_BUG,  /* a bad parameter: anygrad called cuDNN wrongly, AG_ERR_INTERNAL */
  AG_DNN_FAILED, /* execution or internal failure: AG_ERR_BACKEND */
} ag_dnn_class;

/* The class of cuDNN status `code` from a library of major version `major`
 * (from cudnnGetVersion). cuDNN 9 numbers codes by category (cudnn_graph.h):
 * 1000 library state, 2000 bad parameter, 3000 not supported, 4000 internal,
 * 5000 execution failed; a code this table does not know takes its
 * category's class (1000: failed). cuDNN 8 numbers them 0-14. */
static inline ag_dnn_class ag_dnn_classify(size_t major, int code) {
  if (code == 0) return AG_DNN_OK;
  if (major >= 9) {
    switch (code) {
      case 1001: /* NOT_INITIALIZED: cudnnCreate could not start on this device */
      case 1002: /* SUBLIBRARY_VERSION_MISMATCH */
      case 1003: /* SERIALIZATION_VERSION_MISMATCH */
      case 1004: /* DEPRECATED: this build refuses an entry point anygrad calls */
      case 1005: /* LICENSE_ERROR */
      case 1008: /* SUBLIBRARY_LOADING_FAILED */
      case 3005: /* NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER */
      case 3006: /* NOT_SUPPORTED_INCOMPATIBLE_CUDART */
      case 3007: /* NOT_SUPPORTED_ARCH_MISMATCH */
      case 3008: /* NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING */
      case 3009: /* NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE */
      case 4001: /* INTERNAL_ERROR_COMPILATION_FAILED: runtime compilation (NVRTC) */
        return AG_DNN_UNUSABLE;
      case 4003: /* INTERNAL_ERROR_HOST_ALLOCATION_FAILED (the old ALLOC_FAILED) */
      case 4004: /* INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED */
        return AG_DNN_OOM;
      default: break;
    }
    switch (code / 1000) {
      case 2: return AG_DNN_BUG;     /* BAD_PARAM and its details, INVALID_VALUE (2001) */
      case 3: return AG_DNN_DECLINE; /* NOT_SUPPORTED: shape, type, layout, padding, ... */
      default: return AG_DNN_FAILED; /* 1006-1007 (runtime errors), 4000, 4002, 4005, 4006, 5000-5004 */
    }
  }
  switch (code) {
    case 9: return AG_DNN_DECLINE;   /* NOT_SUPPORTED */
    case 1:                          /* NOT_INITIALIZED */
    case 6:                          /* ARCH_MISMATCH */
    case 10:                         /* LICENSE_ERROR */
    case 11:                         /* RUNTIME_PREREQUISITE_MISSING */
    case 14: return AG_DNN_UNUSABLE; /* VERSION_MISMATCH */
    case 2: return AG_DNN_OOM;       /* ALLOC_FAILED */
    case 3:                          /* BAD_PARAM */
    case 5: return AG_DNN_BUG;       /* INVALID_VALUE */
    default: return AG_DNN_FAILED;   /* 4 internal, 7 mapping, 8 execution, 12-13 runtime errors */
  }
}

/* The anygrad status of a class: AG_OK, AG_ERR_UNSUPPORTED for both
 * fallbacks (the caller runs its own kernels), AG_ERR_OOM, AG_ERR_INTERNAL,
 * AG_ERR_BACKEND. */
static inline ag_status ag_dnn_status(size_t major, int code) {
  switch (ag_dnn_classify(major, code)) {
    case AG_DNN_OK: return AG_OK;
    case AG_DNN_DECLINE:
    case AG_DNN_UNUSABLE: return AG_ERR_UNSUPPORTED;
    case AG_DNN_OOM: return AG_ERR_OOM;
    case AG_DNN_BUG: return AG_ERR_INTERNAL;
    default: return AG_ERR_BACKEND;
  }
}

/* What runs conv2d once cuDNN proved unusable, for the device's vendor line
 * ("NVIDIA; conv2d: " + this, in ag_device_props.vendor's 64 bytes):
 * "own kernels (cuDNN 9.19.0: status 1008)". The status names the reason
 * (docs/gpu.md). Always NUL-terminated. */
static inline void ag_dnn_unusable_note(char *buf, size_t n, size_t major, size_t minor, size_t patch, int code) {
  if (n) snprintf(buf, n, "own kernels (cuDNN %zu.%zu.%zu: status %d)", major, minor, patch, code);
}

/* The first reason cuDNN proved unusable in this process, kept for the
 * vendor line. Zero-initialized: none. Written once (the first
 * ag_dnn_fallback_record wins), read from any thread. */
typedef struct ag_dnn_fallback {
  int state;     /* 0 none, 1 being written, 2 note ready */
  char note[48]; /* ag_dnn_unusable_note */
} ag_dnn_fallback;

/* Record that cuDNN cannot run here (status `code` of library
 * major.minor.patch); true if this call recorded it, false if a reason was
 * recorded before (kept). */
static inline bool ag_dnn_fallback_record(ag_dnn_fallback *f, size_t major, size_t minor, size_t patch, int code) {
  int none = 0;
  if (!__atomic_compare_exchange_n(&f->state, &none, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return false;
  ag_dnn_unusable_note(f->note, sizeof f->note, major, minor, patch, code);
  __atomic_store_n(&f->state, 2, __ATOMIC_RELEASE);
  return true;
}

/* Whether cuDNN is to be left alone from now on. */
static inline bool ag_dnn_fallback_set(const ag_dnn_fallback *f) {
  return __atomic_load_n(&f->state, __ATOMIC_ACQUIRE) != 0;
}

/* What runs conv2d: the recorded note, else `loaded` (what was loaded:
 * "cuDNN 9.19.0", "own kernels (no libcudnn.so.9/.8)"). Borrowed. */
static inline const char *ag_dnn_fallback_describe(const ag_dnn_fallback *f, const char *loaded) {
  return __atomic_load_n(&f->state, __ATOMIC_ACQUIRE) == 2 ? f->note : loaded;
}

/* cudnnGetVersion()'s number split: major*10000 + minor*100 + patch from
 * cuDNN 9 on, major*1000 + minor*100 + patch before. */
static inline void ag_dnn_version(size_t v, size_t *out_major, size_t *out_minor, size_t *out_patch) {
  if (v >= 90000) {
    *out_major = v / 10000;
    *out_minor = v / 100 % 100;
  } else {
    *out_major = v / 1000;
    *out_minor = v % 1000 / 100;
  }
  *out_patch = v % 100;
}

#endif
