/* The CUDA and HIP backend modules as the registry loads them: both dlopen
 * into one process, each exports only its entry point, init without a device
 * is a clean AG_ERR_UNAVAILABLE with the driver's reason, and supports()
 * answers the implemented op table. On a machine with a GPU, init succeeds
 * and the device properties are checked instead. */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "anygrad/backend.h"

typedef struct mod {
  const char *name, *path;
  void *h;
  const ag_backend *be;
} mod;

static mod mods[] = {
#ifdef AG_CUDA_MODULE
    {"cuda", AG_CUDA_MODULE, NULL, NULL},
#endif
#ifdef AG_HIP_MODULE
    {"hip", AG_HIP_MODULE, NULL, NULL},
#endif
    {NULL, NULL, NULL, NULL}};

static int load_all(void **state) {
  (void)state;
  for (mod *m = mods; m->name; m++) {
    m->h = dlopen(m->path, RTLD_NOW | RTLD_LOCAL);
    if (!m->h) {
      fprintf(stderr, "dlopen %s: %s\n", m->path, dlerror());
      return -1;
    }
    ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(m->h, AG_BACKEND_MODULE_SYMBOL);
    if (!get) return -1;
    m->be = get();
  }
  return 0;
}

static void test_identity(void **state) {
  (void)state;
  if (!mods[0].name) skip();
  for (mod *m = mods; m->name; m++) {
    assert_non_null(m->be);
    assert_int_equal(m->be->struct_size, sizeof(ag_backend));
    assert_int_equal(m->be->abi_major, AG_BACKEND_ABI_MAJOR);
    assert_int_equal(m->be->abi_minor, AG_BACKEND_ABI_MINOR);
    assert_string_equal(m->be->name, m->name);
    /* required entries are all present */
    assert_non_null(m->be->init);
    assert_non_null(m->be->launch);
    assert_non_null(m->be->supports);
    assert_non_null(m->be->take_kernel_error);
    assert_non_null(m->be->stream_create);
    assert_non_null(m->be->copy_h2d);
    assert_non_null(m->be->event_elapsed_ms);
  }
  /* two modules in one process keep separate tables */
  if (mods[0].name && mods[1].name) assert_ptr_not_equal(mods[0].be, mods[1].be);
}

/* Internal and static-runtime symbols must not leak out of a module, or two
 * modules (and the user's own CUDA code) would bind to each other's copies. */
static void test_hidden_symbols(void **state) {
  (void)state;
  static const char *const hidden[] = {"agg_launch", "agg_init", "agk_fill", "agk_matmul", "agv_status",
                                       "agv_gemm",   "cudaMalloc", "cudaGetDeviceCount", "cudaLaunchKernel",
                                       "__cudaRegisterFatBinary"};
  if (!mods[0].name) skip();
  for (mod *m = mods; m->name; m++)
    for (size_t i = 0; i < sizeof hidden / sizeof hidden[0]; i++)
      if (dlsym(m->h, hidden[i])) fail_msg("%s exports %s", m->name, hidden[i]);
}

static void test_init(void **state) {
  (void)state;
  if (!mods[0].name) skip();
  for (mod *m = mods; m->name; m++) {
    char reason[256] = "";
    int n = -1;
    ag_status st = m->be->init(&n, reason, sizeof reason);
    if (st == AG_OK) {
      /* a machine with a device: check what the registry will show */
      assert_true(n > 0);
      ag_device_props p;
      memset(&p, 0, sizeof p);
      assert_int_equal(m->be->device_props(0, &p), AG_OK);
      assert_true(p.name[0] != 0);
      assert_true(p.total_memory > 0);
      assert_true(p.compute_units > 0);
      assert_true(p.arch[0] != 0);
      size_t fr = 0, tot = 0;
      assert_int_equal(m->be->mem_info(0, &fr, &tot), AG_OK);
      assert_true(tot > 0 && fr <= tot);
      printf("%s: %d device(s), %s %s\n", m->name, n, p.name, p.arch);
    } else {
      assert_int_equal(st, AG_ERR_UNAVAILABLE);
      assert_int_equal(n, 0);
      /* the driver's own words, naming the call that failed */
      assert_non_null(strstr(reason, "GetDeviceCount"));
      assert_true(strlen(reason) > strlen("cudaGetDeviceCount: "));
      printf("%s unavailable: %s\n", m->name, reason);
    }
  }
}

static void test_supports(void **state) {
  (void)state;
  if (!mods[0].name) skip();
  for (mod *m = mods; m->name; m++) {
    const ag_backend *b = m->be;
    for (int dt = AG_F32; dt <= AG_BF16; dt++) {
      for (int op = 0; op < AG_KOP_COUNT; op++) {
        if (op == AG_K_ADAMW || op == AG_K_SGD || op == AG_K_BN_STATS || op == AG_K_BN_APPLY) continue;
        int sub = op == AG_K_UNARY ? AG_U_EXP : 0;
        /* one_hot reads an index (T is the index's dtype) */
        assert_true(b->supports(0, (ag_kop)op, sub, op == AG_K_ONE_HOT ? AG_I64 : (ag_dtype)dt));
      }
      for (int s = 0; s < AG_UNARY_COUNT; s++) assert_true(b->supports(0, AG_K_UNARY, s, (ag_dtype)dt));
      for (int s = 0; s < AG_BINARY_COUNT; s++) assert_true(b->supports(0, AG_K_BINARY, s, (ag_dtype)dt));
      for (int s = 0; s < AG_REDUCE_COUNT; s++) assert_true(b->supports(0, AG_K_REDUCE, s, (ag_dtype)dt));
      assert_false(b->supports(0, AG_K_UNARY, AG_UNARY_COUNT, (ag_dtype)dt));
      assert_false(b->supports(0, AG_K_SOFTMAX, 2, (ag_dtype)dt));
      /* vision ops (kernels/gpu/conv.cu): every pooling variant, none beyond */
      for (int s = 0; s < AG_POOL_OP_COUNT; s++) {
        assert_true(b->supports(0, AG_K_POOL2D, s, (ag_dtype)dt));
        assert_true(b->supports(0, AG_K_POOL2D_BWD, s, (ag_dtype)dt));
      }
      assert_false(b->supports(0, AG_K_POOL2D, AG_POOL_OP_COUNT, (ag_dtype)dt));
      /* batch norm kernels: f32 only (the core composes the others), sub 0 and 1 */
      for (int s = 0; s < 3; s++) {
        assert_true(b->supports(0, AG_K_BN_STATS, s, (ag_dtype)dt) == (dt == AG_F32 && s < 2));
        assert_true(b->supports(0, AG_K_BN_APPLY, s, (ag_dtype)dt) == (dt == AG_F32 && s < 2));
      }
    }
    assert_false(b->supports(0, AG_K_CONV2D, 0, AG_I32));
    assert_false(b->supports(0, AG_K_POOL2D, AG_P_MAX, AG_I32));
    assert_true(b->supports(0, AG_K_ADAMW, 0, AG_F32));
    assert_false(b->supports(0, AG_K_ADAMW, 0, AG_F16));
    assert_true(b->supports(0, AG_K_SGD, 0, AG_F32));
    /* i32 where meaningful, nothing else */
    assert_true(b->supports(0, AG_K_FILL, 0, AG_I32));
    assert_true(b->supports(0, AG_K_ARANGE, 0, AG_I32));
    assert_true(b->supports(0, AG_K_WHERE, 0, AG_I32));
    assert_true(b->supports(0, AG_K_UNARY, AG_U_COPY, AG_I32));
    assert_true(b->supports(0, AG_K_UNARY, AG_U_AFFINE, AG_I32));
    assert_true(b->supports(0, AG_K_BINARY, AG_B_ADD, AG_I32));
    assert_true(b->supports(0, AG_K_BINARY, AG_B_LT, AG_I32));
    assert_true(b->supports(0, AG_K_REDUCE, AG_R_ARGMAX, AG_I32));
    assert_false(b->supports(0, AG_K_UNARY, AG_U_EXP, AG_I32));
    assert_false(b->supports(0, AG_K_BINARY, AG_B_DIV, AG_I32));
    assert_false(b->supports(0, AG_K_BINARY, AG_B_RELU_BWD, AG_I32));
    assert_false(b->supports(0, AG_K_MATMUL, 0, AG_I32));
    assert_false(b->supports(0, AG_K_SOFTMAX, 0, AG_I32));
    assert_false(b->supports(0, AG_K_RAND_NORMAL, 0, AG_I32));
    /* i64, u8 and bool as i32, plus comparisons of every dtype (bool output)
     * and i64 indices/targets (sub 1); the core sums bool and u8 as i64 */
    for (int dt = AG_I64; dt <= AG_U8; dt++) {
      assert_true(b->supports(0, AG_K_FILL, 0, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_WHERE, 0, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_UNARY, AG_U_COPY, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_BINARY, AG_B_MUL, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_BINARY, AG_B_GE, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_REDUCE, AG_R_MAX, (ag_dtype)dt));
      assert_true(b->supports(0, AG_K_REDUCE, AG_R_SUM, (ag_dtype)dt) == (dt == AG_I64));
      assert_false(b->supports(0, AG_K_UNARY, AG_U_EXP, (ag_dtype)dt));
      assert_false(b->supports(0, AG_K_MATMUL, 0, (ag_dtype)dt));
    }
    assert_true(b->supports(0, AG_K_EMBEDDING, 1, AG_F32));
    assert_true(b->supports(0, AG_K_CROSS_ENTROPY, 1, AG_BF16));
    assert_true(b->supports(0, AG_K_EMBEDDING_BWD, 1, AG_F16));
    assert_false(b->supports(0, AG_K_EMBEDDING, 2, AG_F32));
    /* f64 wherever the CPU has it, except the kernels written for f32 only
     * (conv, pooling, batch norm, the optimizers) */
    assert_true(b->supports(0, AG_K_MATMUL, 0, AG_F64));
    assert_true(b->supports(0, AG_K_UNARY, AG_U_EXP, AG_F64));
    assert_true(b->supports(0, AG_K_SOFTMAX, 0, AG_F64));
    assert_true(b->supports(0, AG_K_LAYERNORM, 0, AG_F64));
    assert_true(b->supports(0, AG_K_REDUCE, AG_R_SUM, AG_F64));
    assert_false(b->supports(0, AG_K_CONV2D, 0, AG_F64));
    assert_false(b->supports(0, AG_K_POOL2D, 0, AG_F64));
    assert_false(b->supports(0, AG_K_BN_STATS, 0, AG_F64));
    assert_false(b->supports(0, AG_K_ADAMW, 0, AG_F64));
    assert_false(b->supports(0, AG_KOP_COUNT, 0, AG_F32));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity),
      cmocka_unit_test(test_hidden_symbols),
      cmocka_unit_test(test_init),
      cmocka_unit_test(test_supports),
  };
  return cmocka_run_group_tests(tests, load_all, NULL);
}
