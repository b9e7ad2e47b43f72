/* backends/cuda/dnn_status.h: cuDNN status codes and version numbers of both
 * library versions the CUDA module may load (libcudnn.so.9, .so.8). The codes
 * are cudnn_graph.h's (9.x, every one of 9.19) and cudnn_ops_infer.h's (8.x),
 * each in its class: success, declined (own kernels for the call), cannot run
 * here (own kernels from then on, the reason kept for the vendor line),
 * out of memory, a bad parameter (a bug), failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "../backends/cuda/dnn_status.h"
#include "anygrad/device.h"

/* Every code of cudnn_graph.h (cuDNN 9.19) and its class (docs/gpu.md). */
static const struct {
  int code;
  ag_dnn_class cls;
} k_v9[] = {
    {0, AG_DNN_OK},
    {1001, AG_DNN_UNUSABLE}, /* NOT_INITIALIZED */
    {1002, AG_DNN_UNUSABLE}, /* SUBLIBRARY_VERSION_MISMATCH */
    {1003, AG_DNN_UNUSABLE}, /* SERIALIZATION_VERSION_MISMATCH */
    {1004, AG_DNN_UNUSABLE}, /* DEPRECATED */
    {1005, AG_DNN_UNUSABLE}, /* LICENSE_ERROR */
    {1006, AG_DNN_FAILED},   /* RUNTIME_IN_PROGRESS */
    {1007, AG_DNN_FAILED},   /* RUNTIME_FP_OVERFLOW */
    {1008, AG_DNN_UNUSABLE}, /* SUBLIBRARY_LOADING_FAILED */
    {2000, AG_DNN_BUG},      /* BAD_PARAM */
    {2001, AG_DNN_BUG},      /* INVALID_VALUE (deprecated name) */
    {2002, AG_DNN_BUG},      /* BAD_PARAM_NULL_POINTER */
    {2003, AG_DNN_BUG},      /* BAD_PARAM_MISALIGNED_POINTER */
    {2004, AG_DNN_BUG},      /* BAD_PARAM_NOT_FINALIZED */
    {2005, AG_DNN_BUG},      /* BAD_PARAM_OUT_OF_BOUND */
    {2006, AG_DNN_BUG},      /* BAD_PARAM_SIZE_INSUFFICIENT */
    {2007, AG_DNN_BUG},      /* BAD_PARAM_STREAM_MISMATCH */
    {2008, AG_DNN_BUG},      /* BAD_PARAM_SHAPE_MISMATCH */
    {2009, AG_DNN_BUG},      /* BAD_PARAM_DUPLICATED_ENTRIES */
    {2010, AG_DNN_BUG},      /* BAD_PARAM_ATTRIBUTE_TYPE */
    {2011, AG_DNN_BUG},      /* BAD_PARAM_CUDA_GRAPH_MISMATCH */
    {2012, AG_DNN_BUG},      /* BAD_PARAM_DESCRIPTOR_TYPE */
    {3000, AG_DNN_DECLINE},  /* NOT_SUPPORTED */
    {3001, AG_DNN_DECLINE},  /* NOT_SUPPORTED_GRAPH_PATTERN */
    {3002, AG_DNN_DECLINE},  /* NOT_SUPPORTED_SHAPE */
    {3003, AG_DNN_DECLINE},  /* NOT_SUPPORTED_DATA_TYPE */
    {3004, AG_DNN_DECLINE},  /* NOT_SUPPORTED_LAYOUT */
    {3005, AG_DNN_UNUSABLE}, /* NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER */
    {3006, AG_DNN_UNUSABLE}, /* NOT_SUPPORTED_INCOMPATIBLE_CUDART */
    {3007, AG_DNN_UNUSABLE}, /* NOT_SUPPORTED_ARCH_MISMATCH (the old ARCH_MISMATCH) */
    {3008, AG_DNN_UNUSABLE}, /* NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING */
    {3009, AG_DNN_UNUSABLE}, /* NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE */
    {3010, AG_DNN_DECLINE},  /* NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT */
    {3011, AG_DNN_DECLINE},  /* NOT_SUPPORTED_PADDING */
    {3012, AG_DNN_DECLINE},  /* NOT_SUPPORTED_BAD_LAUNCH_PARAM */
    {3013, AG_DNN_DECLINE},  /* NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API */
    {3014, AG_DNN_DECLINE},  /* NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE */
    {4000, AG_DNN_FAILED},   /* INTERNAL_ERROR */
    {4001, AG_DNN_UNUSABLE}, /* INTERNAL_ERROR_COMPILATION_FAILED */
    {4002, AG_DNN_FAILED},   /* INTERNAL_ERROR_UNEXPECTED_VALUE */
    {4003, AG_DNN_OOM},      /* INTERNAL_ERROR_HOST_ALLOCATION_FAILED (the old ALLOC_FAILED) */
    {4004, AG_DNN_OOM},      /* INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED */
    {4005, AG_DNN_FAILED},   /* INTERNAL_ERROR_BAD_LAUNCH_PARAM */
    {4006, AG_DNN_FAILED},   /* INTERNAL_ERROR_TEXTURE_CREATION_FAILED (the old MAPPING_ERROR) */
    {5000, AG_DNN_FAILED},   /* EXECUTION_FAILED */
    {5001, AG_DNN_FAILED},   /* EXECUTION_FAILED_CUDA_DRIVER */
    {5002, AG_DNN_FAILED},   /* EXECUTION_FAILED_CUBLAS */
    {5003, AG_DNN_FAILED},   /* EXECUTION_FAILED_CUDART */
    {5004, AG_DNN_FAILED},   /* EXECUTION_FAILED_CURAND */
};

static ag_status class_status(ag_dnn_class c) {
  switch (c) {
    case AG_DNN_OK: return AG_OK;
    case AG_DNN_DECLINE:
    case AG_DNN_UNUSABLE: return AG_ERR_UNSUPPORTED; /* the own kernels run */
    case AG_DNN_OOM: return AG_ERR_OOM;
    case AG_DNN_BUG: return AG_ERR_INTERNAL;
    default: return AG_ERR_BACKEND;
  }
}

static void v9_codes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof k_v9 / sizeof *k_v9; i++) {
    if (ag_dnn_classify(9, k_v9[i].code) != k_v9[i].cls)
      fail_msg("cuDNN 9 status %d: class %d, want %d", k_v9[i].code, (int)ag_dnn_classify(9, k_v9[i].code),
               (int)k_v9[i].cls);
    assert_int_equal(ag_dnn_status(9, k_v9[i].code), class_status(k_v9[i].cls));
  }
  /* "cannot run here": the own conv kernels take over, not a fatal error */
  assert_int_equal(ag_dnn_status(9, 1008), AG_ERR_UNSUPPORTED); /* a sublibrary failed to load */
  assert_int_equal(ag_dnn_status(9, 4001), AG_ERR_UNSUPPORTED); /* runtime compilation failed */
  /* codes a later cuDNN may add take their category's class */
  assert_int_equal(ag_dnn_classify(9, 1009), AG_DNN_FAILED);
  assert_int_equal(ag_dnn_classify(9, 2099), AG_DNN_BUG);
  assert_int_equal(ag_dnn_classify(9, 3099), AG_DNN_DECLINE);
  assert_int_equal(ag_dnn_classify(9, 4099), AG_DNN_FAILED);
  assert_int_equal(ag_dnn_classify(9, 5099), AG_DNN_FAILED);
  assert_int_equal(ag_dnn_classify(9, 7000), AG_DNN_FAILED);
  assert_int_equal(ag_dnn_classify(9, -1), AG_DNN_FAILED);
  /* cuDNN 8's numbers mean nothing special to cuDNN 9 */
  assert_int_equal(ag_dnn_status(9, 9), AG_ERR_BACKEND);
  assert_int_equal(ag_dnn_status(9, 2), AG_ERR_BACKEND);
}

static void v8_codes(void **state) {
  (void)state;
  static const ag_dnn_class want[15] = {
      AG_DNN_OK,       AG_DNN_UNUSABLE /* NOT_INITIALIZED */, AG_DNN_OOM /* ALLOC_FAILED */,
      AG_DNN_BUG /* BAD_PARAM */, AG_DNN_FAILED /* INTERNAL_ERROR */, AG_DNN_BUG /* INVALID_VALUE */,
      AG_DNN_UNUSABLE /* ARCH_MISMATCH */, AG_DNN_FAILED /* MAPPING_ERROR */, AG_DNN_FAILED /* EXECUTION_FAILED */,
      AG_DNN_DECLINE /* NOT_SUPPORTED */, AG_DNN_UNUSABLE /* LICENSE_ERROR */,
      AG_DNN_UNUSABLE /* RUNTIME_PREREQUISITE_MISSING */, AG_DNN_FAILED /* RUNTIME_IN_PROGRESS */,
      AG_DNN_FAILED /* RUNTIME_FP_OVERFLOW */, AG_DNN_UNUSABLE /* VERSION_MISMATCH */};
  for (int c = 0; c <= 14; c++) {
    if (ag_dnn_classify(8, c) != want[c])
      fail_msg("cuDNN 8 status %d: class %d, want %d", c, (int)ag_dnn_classify(8, c), (int)want[c]);
    assert_int_equal(ag_dnn_status(8, c), class_status(want[c]));
  }
  /* a v9 header's CUDNN_STATUS_NOT_SUPPORTED (3000) is not cuDNN 8's */
  assert_int_equal(ag_dnn_status(8, 3000), AG_ERR_BACKEND);
}

/* The reason cuDNN cannot run here is kept (the first one) and is what the
 * vendor line names for conv2d from then on. */
static void fallback_reason(void **state) {
  (void)state;
  ag_dnn_fallback f = {0};
  assert_false(ag_dnn_fallback_set(&f));
  assert_string_equal(ag_dnn_fallback_describe(&f, "cuDNN 9.1.0"), "cuDNN 9.1.0");
  assert_true(ag_dnn_fallback_record(&f, 9, 1, 0, 1008));
  assert_true(ag_dnn_fallback_set(&f));
  assert_string_equal(ag_dnn_fallback_describe(&f, "cuDNN 9.1.0"), "own kernels (cuDNN 9.1.0: status 1008)");
  /* a later one does not replace it */
  assert_false(ag_dnn_fallback_record(&f, 9, 1, 0, 4001));
  assert_string_equal(ag_dnn_fallback_describe(&f, "cuDNN 9.1.0"), "own kernels (cuDNN 9.1.0: status 1008)");
  /* the CUDA module's vendor line (ag_device_props.vendor, 64 bytes) holds it
   * whole, for the largest numbers too */
  ag_dnn_fallback big = {0};
  assert_true(ag_dnn_fallback_record(&big, 99, 99, 99, 4001));
  char vendor[sizeof ((ag_device_props *)0)->vendor];
  int n = snprintf(vendor, sizeof vendor, "NVIDIA; conv2d: %s", ag_dnn_fallback_describe(&big, ""));
  assert_true(n > 0 && (size_t)n < sizeof vendor);
  assert_string_equal(vendor, "NVIDIA; conv2d: own kernels (cuDNN 99.99.99: status 4001)");
}

static void versions(void **state) {
  (void)state;
  size_t ma, mi, pa;
  ag_dnn_version(91300, &ma, &mi, &pa); /* 9.13.0 */
  assert_int_equal(ma, 9);
  assert_int_equal(mi, 13);
  assert_int_equal(pa, 0);
  ag_dnn_version(90102, &ma, &mi, &pa);
  assert_int_equal(ma, 9);
  assert_int_equal(mi, 1);
  assert_int_equal(pa, 2);
  ag_dnn_version(8907, &ma, &mi, &pa); /* 8.9.7 */
  assert_int_equal(ma, 8);
  assert_int_equal(mi, 9);
  assert_int_equal(pa, 7);
  ag_dnn_version(8200, &ma, &mi, &pa); /* 8.2.0 */
  assert_int_equal(ma, 8);
  assert_int_equal(mi, 2);
  assert_int_equal(pa, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(v9_codes), cmocka_unit_test(v8_codes),
                                     cmocka_unit_test(fallback_reason), cmocka_unit_test(versions)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
