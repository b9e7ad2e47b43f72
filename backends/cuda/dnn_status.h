/* cuDNN's status codes and version number read for the major version of the
 * library loaded at run time: the module is compiled against one cudnn.h but
 * may open libcudnn.so.9 or libcudnn.so.8, whose numbers differ, so these
 * compare plain integers and include no cuDNN header (tests/dnn_status_test.c
 * checks them on any machine). */
#ifndef AG_CUDA_DNN_STATUS_H
#define AG_CUDA_DNN_STATUS_H

#include <stddef.h>

#include "anygrad/status.h"

/* The anygrad status for cuDNN status `code` from a library of major version
 * `major` (from cudnnGetVersion): AG_OK, AG_ERR_UNSUPPORTED when cuDNN
 * declined the problem (the caller falls back to its own kernels), AG_ERR_OOM
 * for an allocation failure (the caching allocator frees and retries), else
 * AG_ERR_BACKEND.
 * cuDNN 9 numbers codes by category: 1000 not initialised, 2000 bad
 * parameter, 3000-3099 not supported (shape, type, layout, architecture,
 * driver), 4000 internal (4003 host and 4004 device allocation failed), 5000
 * execution failed. cuDNN 8 numbers them 0-14: 2 allocation failed, 6
 * architecture mismatch, 9 not supported. */
static inline ag_status ag_dnn_status(size_t major, int code) {
  if (code == 0) return AG_OK;
  if (major >= 9) {
    if (code / 100 == 30) return AG_ERR_UNSUPPORTED;
    if (code == 4003 || code == 4004) return AG_ERR_OOM;
    return AG_ERR_BACKEND;
  }
  if (code == 9 || code == 6) return AG_ERR_UNSUPPORTED;
  if (code == 2) return AG_ERR_OOM;
  return AG_ERR_BACKEND;
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
