/* Zero-copy interop on the CPU: data pointers, ag_from_blob with its deleter
 * called exactly once after the last view goes, DLPack export/import keeping
 * strides and offsets, and the errors for what cannot be represented. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"

typedef struct deleter_log {
  int calls;
  void *data;
} deleter_log;

static void count_deleter(void *data, void *ctx) {
  deleter_log *l = ctx;
  l->calls++;
  l->data = data;
}

static void test_data_ptr_is_host_memory(void **state) {
  const float v[4] = {1, 2, 3, 4};
  const int64_t shape[1] = {4};
  ag_tensor *t = ag_from_host(AG_CPU, AG_F32, 1, shape, v);
  assert_non_null(t);
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
  float *p = ag_tensor_data_ptr(t);
  assert_non_null(p);
  assert_true(p[3] == 4.0f);
  p[0] = 9.0f; /* the pointer is the tensor's memory, not a copy */
  ag_tensor *first = ag_slice(t, 0, 0, 1, 1);
  assert_true(ag_item(first) == 9.0);
  ag_tensor_release(first);
  ag_tensor *s = ag_slice(t, 0, 2, 4, 1);
  assert_ptr_equal(ag_tensor_data_ptr(s), p + 2);
  ag_tensor_memory m;
  assert_int_equal(ag_tensor_memory_get(s, &m), AG_OK);
  assert_ptr_equal(m.ptr, p + 2);
  assert_ptr_equal((char *)m.handle + m.byte_offset, (char *)(p + 2));
  assert_non_null(m.stream);
  assert_null(ag_tensor_data_ptr(NULL));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  ag_tensor_release(s);
  ag_tensor_release(t);
}

static void test_from_blob_shares_and_deletes_once(void **state) {
  float buf[6] = {0, 1, 2, 3, 4, 5};
  deleter_log log = {0, NULL};
  const int64_t shape[2] = {3, 2}, strides[2] = {1, 3}; /* a transposed [2,3] */
  ag_tensor *t = ag_from_blob(AG_CPU, AG_F32, 2, shape, strides, buf, count_deleter, &log);
  assert_non_null(t);
  assert_ptr_equal(ag_tensor_data_ptr(t), buf);
  assert_false(ag_tensor_is_contiguous(t));
  float out[6];
  assert_int_equal(ag_to_host(t, out, sizeof out), AG_OK);
  const float want[6] = {0, 3, 1, 4, 2, 5};
  assert_memory_equal(out, want, sizeof want);
  assert_int_equal(ag_fill_(t, 2.5), AG_OK); /* writes land in the caller's buffer */
  assert_int_equal(ag_device_synchronize(AG_CPU), AG_OK);
  assert_true(buf[5] == 2.5f);
  ag_tensor *v = ag_slice(t, 0, 1, 3, 1); /* a view keeps the memory */
  ag_tensor_release(t);
  assert_int_equal(log.calls, 0);
  ag_tensor_release(v);
  assert_int_equal(log.calls, 1);
  assert_ptr_equal(log.data, buf);
}

static void test_from_blob_errors_call_nothing(void **state) {
  float buf[4];
  deleter_log log = {0, NULL};
  const int64_t shape[1] = {4}, neg[1] = {-1};
  assert_null(ag_from_blob(AG_CPU, AG_F32, 1, shape, neg, buf, count_deleter, &log));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_non_null(strstr(ag_last_error(), "negative stride"));
  assert_null(ag_from_blob(AG_CPU, AG_F32, 1, shape, NULL, NULL, count_deleter, &log));
  assert_int_equal(ag_last_status(), AG_ERR_INVALID);
  assert_null(ag_from_blob(AG_CPU, (ag_dtype)99, 1, shape, NULL, buf, count_deleter, &log));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_null(ag_from_blob((ag_device){AG_BACKEND_CPU, 7}, AG_F32, 1, shape, NULL, buf, count_deleter, &log));
  assert_int_equal(log.calls, 0);
  ag_error_clear();
}

/* A release whose device sync is refused (sync-debug mode error) keeps the
 * memory instead of handing it to the deleter under a possibly running
 * kernel, and says so. */
static void test_refused_sync_keeps_memory(void **state) {
  float buf[2] = {1, 2};
  deleter_log log = {0, NULL};
  const int64_t shape[1] = {2};
  ag_tensor *t = ag_from_blob(AG_CPU, AG_F32, 1, shape, NULL, buf, count_deleter, &log);
  assert_non_null(t);
  ag_sync_debug old = ag_get_sync_debug();
  ag_set_sync_debug(AG_SYNC_DEBUG_ERROR);
  ag_error_clear();
  ag_tensor_release(t);
  ag_set_sync_debug(old);
  assert_int_equal(log.calls, 0);
  assert_int_equal(ag_last_status(), AG_ERR_SYNC);
  assert_non_null(strstr(ag_last_error(), "not returned to its deleter"));
  ag_error_clear();
}

static void test_dlpack_export_keeps_layout(void **state) {
  const float v[6] = {0, 1, 2, 3, 4, 5};
  const int64_t shape[2] = {2, 3};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 2, shape, v);
  const int perm[2] = {1, 0};
  ag_tensor *xt = ag_permute(x, perm);
  ag_tensor *s = ag_slice(xt, 0, 1, 3, 1); /* [2,2] at element offset 1 */
  int64_t live = ag_live_tensors();
  DLManagedTensor *m = NULL;
  assert_int_equal(ag_to_dlpack(s, &m), AG_OK);
  assert_non_null(m);
  DLTensor *d = &m->dl_tensor;
  assert_int_equal(d->device.device_type, kDLCPU);
  assert_int_equal(d->dtype.code, kDLFloat);
  assert_int_equal(d->dtype.bits, 32);
  assert_int_equal(d->dtype.lanes, 1);
  assert_int_equal(d->ndim, 2);
  assert_int_equal(d->shape[0], 2);
  assert_int_equal(d->strides[0], 1);
  assert_int_equal(d->strides[1], 3);
  assert_true(((float *)((char *)d->data + d->byte_offset))[0] == 1.0f);
  ag_tensor_release(s);
  ag_tensor_release(xt);
  ag_tensor_release(x); /* the export keeps the memory */
  assert_true(((float *)d->data)[3] == 4.0f);
  /* back into anygrad: same memory, same layout, one deleter call at the end */
  ag_tensor *y = ag_from_dlpack(m);
  assert_non_null(y);
  assert_ptr_equal(ag_tensor_data_ptr(y), d->data);
  assert_int_equal(ag_tensor_strides(y)[1], 3);
  float out[4];
  assert_int_equal(ag_to_host(y, out, sizeof out), AG_OK);
  const float want[4] = {1, 4, 2, 5};
  assert_memory_equal(out, want, sizeof want);
  ag_tensor_release(y);
  assert_int_equal(ag_live_tensors(), live - 3); /* every header, the export's too, is gone */
}

static void test_dlpack_versioned_and_refusals(void **state) {
  const int64_t shape[1] = {3};
  ag_tensor *x = ag_full(AG_CPU, AG_BF16, 1, shape, 1.5);
  DLManagedTensorVersioned *m = NULL;
  assert_int_equal(ag_to_dlpack_versioned(x, &m), AG_OK);
  assert_int_equal(m->version.major, 1);
  assert_int_equal(m->flags, 0);
  assert_int_equal(m->dl_tensor.dtype.code, kDLBfloat);
  m->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  assert_null(ag_from_dlpack_versioned(m));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), "read-only"));
  m->flags = 0;
  m->dl_tensor.dtype = (DLDataType){kDLInt, 16, 1};
  assert_null(ag_from_dlpack_versioned(m));
  assert_int_equal(ag_last_status(), AG_ERR_DTYPE);
  assert_non_null(strstr(ag_last_error(), "int16"));
  m->dl_tensor.dtype = (DLDataType){kDLFloat, 32, 4};
  assert_null(ag_from_dlpack_versioned(m));
  assert_non_null(strstr(ag_last_error(), "lanes"));
  m->dl_tensor.dtype = (DLDataType){kDLBfloat, 16, 1};
  m->dl_tensor.device.device_type = kDLOpenCL;
  assert_null(ag_from_dlpack_versioned(m));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  m->dl_tensor.device.device_type = kDLCPU;
  m->deleter(m); /* refused imports leave ownership with the caller */
  ag_tensor_release(x);
  ag_error_clear(); /* a NULL tensor keeps an earlier error, else reports its own */
  assert_int_equal(ag_to_dlpack(NULL, (DLManagedTensor **)&m), AG_ERR_INVALID);
  ag_error_clear();
}

/* OpenCL memory is a cl_mem handle: no data pointer (with the reason), the
 * handle and offset through ag_tensor_memory_get, DLPack export as kDLOpenCL
 * with the element offset in byte_offset, and no import. */
static void test_opencl_handles(void **state) {
  ag_device cl = AG_CPU; /* skip() does not return, but clang cannot tell */
  if (!ag_backend_available(AG_BACKEND_OPENCL, NULL) || ag_device_parse("opencl:0", &cl) != AG_OK) skip();
  ag_tensor *t = ag_arange(cl, AG_F32, 0, 8, 1);
  ag_tensor *s = ag_slice(t, 0, 2, 8, 1);
  assert_non_null(s);
  assert_null(ag_tensor_data_ptr(s));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  assert_non_null(strstr(ag_last_error(), "cl_mem"));
  ag_tensor_memory m;
  assert_int_equal(ag_tensor_memory_get(s, &m), AG_OK);
  assert_null(m.ptr);
  assert_non_null(m.handle);
  ag_tensor_memory m0;
  assert_int_equal(ag_tensor_memory_get(t, &m0), AG_OK);
  assert_ptr_equal(m.handle, m0.handle);
  assert_int_equal(m.byte_offset, m0.byte_offset + 2 * sizeof(float));
  DLManagedTensor *d = NULL;
  assert_int_equal(ag_to_dlpack(s, &d), AG_OK);
  assert_int_equal(d->dl_tensor.device.device_type, kDLOpenCL);
  assert_ptr_equal(d->dl_tensor.data, m.handle);
  assert_int_equal(d->dl_tensor.byte_offset, m.byte_offset);
  assert_null(ag_from_dlpack(d));
  assert_int_equal(ag_last_status(), AG_ERR_UNSUPPORTED);
  d->deleter(d);
  ag_tensor_release(s);
  ag_tensor_release(t);
  ag_error_clear();
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--opencl")) {
    const struct CMUnitTest cl_tests[] = {cmocka_unit_test(test_opencl_handles)};
    return cmocka_run_group_tests(cl_tests, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_data_ptr_is_host_memory),
      cmocka_unit_test(test_from_blob_shares_and_deletes_once),
      cmocka_unit_test(test_from_blob_errors_call_nothing),
      cmocka_unit_test(test_refused_sync_keeps_memory),
      cmocka_unit_test(test_dlpack_export_keeps_layout),
      cmocka_unit_test(test_dlpack_versioned_and_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
