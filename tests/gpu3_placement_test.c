/* Which device each rank runs on, and which device is current on the thread
 * that drives the communication library (docs/distributed.md, "Devices of
 * the ranks"). Two modes:
 *
 *   gpu3_placement_test          the launcher's local rank (ag_dist_local_rank:
 *                                every variable, bad values, none set) and the
 *                                gpuemu module's thread_device entry
 *   mpirun -np 2 ... mpi         each rank on gpuemu:<local rank>; the
 *                                emulated current device seen by every
 *                                MPI_Isend of a collective is the rank's, on
 *                                the communication thread and on the
 *                                caller's thread (a blocking call runs there)
 *
 * The MPI mode interposes MPI_Isend (the MPI profiling interface: the
 * executable exports it and calls PMPI_Isend), so it sees the calls that
 * libanygrad-mpi.so makes, on whichever thread makes them. The current
 * device is read through the gpuemu module's own table (thread_device with
 * dev -1 reads it), the same module the registry loaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#if AG_TEST_MPI
#include <mpi.h>
#endif

#include "anygrad/anygrad.h"
#include "anygrad/backend.h"

static const ag_backend *g_emu; /* the gpuemu module's table, as the registry loaded it */

static const ag_backend *emu_table(void) {
  ag_backend_kind k;
  ag_backend_info bi;
  if (ag_backend_find("gpuemu", &k) != AG_OK || ag_backend_info_get(k, &bi) != AG_OK ||
      ag_backend_device_count(k) < 2)
    return NULL;
  void *h = dlopen(bi.path, RTLD_NOW | RTLD_NOLOAD); /* the loaded one: same emulator */
  ag_backend_module_get_fn get = h ? (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL) : NULL;
  return get ? get() : NULL;
}

/* The emulated current device of the calling thread (-2: no entry). */
static int current_device(void) {
  int cur = -2;
  if (!g_emu->thread_device || g_emu->thread_device(-1, &cur) != AG_OK) return -2;
  return cur;
}

/* ---- local rank ---- */

static const char *const k_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                                     "SLURM_LOCALID", "LOCAL_RANK"};
#define N_VARS (sizeof k_vars / sizeof *k_vars)

static void clear_vars(void) {
  for (size_t i = 0; i < N_VARS; i++) unsetenv(k_vars[i]);
}

static void test_local_rank(void **state) {
  (void)state;
  int r = -1;
  const char *src = "x";
  clear_vars();
  assert_int_equal(ag_dist_local_rank(&r, &src), AG_ERR_UNAVAILABLE);
  assert_null(src);
  assert_non_null(strstr(ag_last_error(), "OMPI_COMM_WORLD_LOCAL_RANK"));
  assert_non_null(strstr(ag_last_error(), "LOCAL_RANK is set"));
  assert_int_equal(ag_dist_local_rank(NULL, NULL), AG_ERR_INVALID);
  /* each launcher's variable alone */
  for (size_t i = 0; i < N_VARS; i++) {
    clear_vars();
    char v[8];
    snprintf(v, sizeof v, "%zu", i + 1);
    setenv(k_vars[i], v, 1);
    assert_int_equal(ag_dist_local_rank(&r, &src), AG_OK);
    assert_int_equal(r, (int)i + 1);
    assert_string_equal(src, k_vars[i]);
  }
  /* the MPI launcher's wins over an inherited torchrun or srun one */
  setenv("LOCAL_RANK", "7", 1);
  setenv("SLURM_LOCALID", "5", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  assert_int_equal(ag_dist_local_rank(&r, NULL), AG_OK);
  assert_int_equal(r, 1);
  /* an empty value counts as unset */
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "", 1);
  assert_int_equal(ag_dist_local_rank(&r, &src), AG_OK);
  assert_string_equal(src, "SLURM_LOCALID");
  /* the strict parser: no sign, blank, hex, garbage or overflow */
  static const char *const bad[] = {"-1", " 1", "1 ", "0x1", "one", "1048576", "99999999999999999999", "+1"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    clear_vars();
    setenv("MPI_LOCALRANKID", bad[i], 1);
    r = 42;
    assert_int_equal(ag_dist_local_rank(&r, &src), AG_ERR_INVALID);
    assert_int_equal(r, 42);
    assert_non_null(strstr(ag_last_error(), "MPI_LOCALRANKID"));
  }
  clear_vars();
}

/* The module's entry: sets the calling thread's device and hands back the
 * one before; -1 only reads. */
static void test_thread_device(void **state) {
  (void)state;
  if (!g_emu) skip();
  assert_non_null(g_emu->thread_device);
  int prev = -2, cur = -2;
  assert_int_equal(g_emu->thread_device(1, &prev), AG_OK);
  assert_int_equal(g_emu->thread_device(-1, &cur), AG_OK);
  assert_int_equal(cur, 1);
  assert_int_equal(g_emu->thread_device(0, &prev), AG_OK);
  assert_int_equal(prev, 1);
  assert_int_equal(current_device(), 0);
  /* an ordinal the emulator does not have: an error, nothing changes */
  assert_int_equal(g_emu->thread_device(9, &prev), AG_ERR_BACKEND);
  assert_int_equal(prev, 0);
  assert_int_equal(current_device(), 0);
}

/* ---- under mpirun ---- */
#if AG_TEST_MPI

static atomic_int g_recording;
static atomic_int g_seen = -3; /* the device current at the last MPI_Isend; -3 none */
static atomic_int g_sends;

int MPI_Isend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm, MPI_Request *req) {
  if (atomic_load(&g_recording)) {
    atomic_store(&g_seen, current_device());
    atomic_fetch_add(&g_sends, 1);
  }
  return PMPI_Isend(buf, count, dt, dest, tag, comm, req);
}

static ag_group *g_group;
static ag_device g_dev;
static int g_local;

static ag_tensor *ranks_tensor(float v) {
  float h[4] = {v, v, v, v};
  int64_t shape[1] = {4};
  return ag_from_host(g_dev, AG_F32, 1, shape, h);
}

static void expect_sum(ag_tensor *t) {
  float h[4];
  assert_int_equal(ag_to_host(t, h, sizeof h), AG_OK);
  for (int i = 0; i < 4; i++) assert_true(h[i] == 1.0f); /* 0 + 1 */
}

static void start_recording(void) {
  atomic_store(&g_seen, -3);
  atomic_store(&g_sends, 0);
  atomic_store(&g_recording, 1);
}

/* The communication thread: a queued (asynchronous) collective. Its
 * pinned staging block is cached first, so no allocation on that thread
 * happens to select the device before MPI is called. */
static void test_comm_thread(void **state) {
  (void)state;
  void *p = NULL;
  assert_int_equal(ag_pinned_alloc(g_dev, 4 * sizeof(float) + 1, &p), AG_OK);
  ag_pinned_free(p);
  ag_tensor *t = ranks_tensor((float)ag_group_rank(g_group));
  assert_non_null(t);
  ag_work *w = NULL;
  start_recording();
  assert_int_equal(ag_all_reduce(g_group, t, AG_DIST_SUM, &w), AG_OK);
  assert_int_equal(ag_work_wait(w), AG_OK);
  atomic_store(&g_recording, 0);
  ag_work_release(w);
  assert_true(atomic_load(&g_sends) > 0);
  if (atomic_load(&g_seen) != g_dev.index)
    fail_msg("rank %d on gpuemu:%d: the communication thread called MPI with gpuemu:%d current", ag_group_rank(g_group),
             g_dev.index, atomic_load(&g_seen));
  expect_sum(t);
  ag_tensor_release(t);
}

/* The caller's thread: a blocking collective with nothing queued runs
 * there, whatever device the caller had made current. */
static void test_caller_thread(void **state) {
  (void)state;
  ag_tensor *t = ranks_tensor((float)ag_group_rank(g_group));
  assert_non_null(t);
  assert_int_equal(ag_stream_synchronize(ag_stream_current(g_dev)), AG_OK);
  int prev;
  assert_int_equal(g_emu->thread_device(1 - g_dev.index, &prev), AG_OK); /* the other device */
  start_recording();
  assert_int_equal(ag_all_reduce(g_group, t, AG_DIST_SUM, NULL), AG_OK);
  atomic_store(&g_recording, 0);
  assert_true(atomic_load(&g_sends) > 0);
  if (atomic_load(&g_seen) != g_dev.index)
    fail_msg("rank %d on gpuemu:%d: the calling thread called MPI with gpuemu:%d current", ag_group_rank(g_group),
             g_dev.index, atomic_load(&g_seen));
  expect_sum(t);
  ag_tensor_release(t);
}

static int run_mpi(void) {
  const char *src = NULL;
  if (ag_dist_local_rank(&g_local, &src) != AG_OK) {
    fprintf(stderr, "gpu3_placement_test mpi: %s (run it under mpirun)\n", ag_last_error());
    return 1;
  }
  g_dev = (ag_device){AG_BACKEND_CPU, 0};
  ag_backend_kind k;
  if (ag_backend_find("gpuemu", &k) != AG_OK) return 1;
  g_dev.backend = (int16_t)k;
  g_dev.index = (int16_t)(g_local % 2);
  ag_group_options o;
  ag_group_options_default(&o);
  o.timeout_ms = 60000;
  if (ag_group_create_mpi(g_dev, &o, &g_group) != AG_OK) {
    fprintf(stderr, "ag_group_create_mpi: %s\n", ag_last_error());
    return 1;
  }
  if (ag_group_size(g_group) != 2) {
    fprintf(stderr, "gpu3_placement_test mpi: run with mpirun -np 2\n");
    ag_group_destroy(g_group);
    return 1;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_comm_thread), cmocka_unit_test(test_caller_thread)};
  char name[48];
  snprintf(name, sizeof name, "gpu3_placement rank %d on gpuemu:%d", ag_group_rank(g_group), g_dev.index);
  int rc = _cmocka_run_group_tests(name, tests, sizeof tests / sizeof *tests, NULL, NULL);
  /* a failed rank must not leave its peer waiting in the next call */
  if (rc) _exit(rc);
  ag_group_destroy(g_group);
  return 0;
}
#else
static int run_mpi(void) {
  fprintf(stderr, "gpu3_placement_test: built without MPI\n");
  return 1;
}
#endif

int main(int argc, char **argv) {
  g_emu = emu_table();
  if (!g_emu) {
    printf("gpuemu with two devices is not available: skipped\n");
    return 77;
  }
  if (argc > 1 && !strcmp(argv[1], "mpi")) return run_mpi();
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_local_rank), cmocka_unit_test(test_thread_device)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
