/* backends/cuda/dnn_status.h: cuDNN status codes and version numbers of both
 * library versions the CUDA module may load (libcudnn.so.9, .so.8). The codes
 * are cudnn_graph.h's (9.x) and cudnn_ops_infer.h's (8.x). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../backends/cuda/dnn_status.h"

static void v9_codes(void **state) {
  (void)state;
  assert_int_equal(ag_dnn_status(9, 0), AG_OK);
  /* every code of the not-supported category declines: the own kernels run */
  for (int c = 3000; c <= 3014; c++) assert_int_equal(ag_dnn_status(9, c), AG_ERR_UNSUPPORTED);
  assert_int_equal(ag_dnn_status(9, 3099), AG_ERR_UNSUPPORTED);
  assert_int_equal(ag_dnn_status(9, 4004), AG_ERR_OOM); /* device allocation failed */
  assert_int_equal(ag_dnn_status(9, 4003), AG_ERR_OOM); /* host allocation failed (the old ALLOC_FAILED) */
  assert_int_equal(ag_dnn_status(9, 4000), AG_ERR_BACKEND);
  assert_int_equal(ag_dnn_status(9, 2000), AG_ERR_BACKEND);
  assert_int_equal(ag_dnn_status(9, 1001), AG_ERR_BACKEND);
  assert_int_equal(ag_dnn_status(9, 5000), AG_ERR_BACKEND);
  /* cuDNN 8's numbers mean nothing special to cuDNN 9 */
  assert_int_equal(ag_dnn_status(9, 9), AG_ERR_BACKEND);
  assert_int_equal(ag_dnn_status(9, 2), AG_ERR_BACKEND);
}

static void v8_codes(void **state) {
  (void)state;
  assert_int_equal(ag_dnn_status(8, 0), AG_OK);
  assert_int_equal(ag_dnn_status(8, 9), AG_ERR_UNSUPPORTED); /* NOT_SUPPORTED */
  assert_int_equal(ag_dnn_status(8, 6), AG_ERR_UNSUPPORTED); /* ARCH_MISMATCH */
  assert_int_equal(ag_dnn_status(8, 2), AG_ERR_OOM);         /* ALLOC_FAILED */
  for (int c = 1; c <= 14; c++)
    if (c != 2 && c != 6 && c != 9) assert_int_equal(ag_dnn_status(8, c), AG_ERR_BACKEND);
  /* a v9 header's CUDNN_STATUS_NOT_SUPPORTED (3000) is not cuDNN 8's */
  assert_int_equal(ag_dnn_status(8, 3000), AG_ERR_BACKEND);
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
                                     cmocka_unit_test(versions)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
