/* The AG_* environment variables of the core, checked once when a device
 * opens: a value that is not what the variable takes (garbage, a number out
 * of range or overflowing) stops the open with AG_ERR_INVALID naming the
 * variable, rather than being ignored or wrapped. The sites that read them
 * use the same strict parser (anygrad/checks.h). */
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/dist.h"
#include "runtime/devstate.h"
#include "runtime/threadpool.h"

/* AG_FAULT (a test switch, docs/design/core.md): parsed by diag/optrace.c. */
AG_HIDDEN const char *ag__env_fault(void);
const char *ag__env_fault(void) { return getenv("AG_FAULT"); }

ag_memory_hooks ag__memory_hooks;

/* Checks of the layers above (AG_ALLOC_CONF, AG_FAULT, AG_DIST_HALF_REDUCE):
 * filled by constructors, read-only once any thread can call in. */
#define MAX_ENV_CHECKS 8
static ag_env_check_fn g_checks[MAX_ENV_CHECKS];
static int g_nchecks;

void ag__env_check_add(ag_env_check_fn fn) {
  if (fn && g_nchecks < MAX_ENV_CHECKS) g_checks[g_nchecks++] = fn;
}

ag_status ag_env_check(void) { return ag__env_check(); }

ag_status ag__env_check(void) {
  ag_status st = ag__sync_debug_env_check();
  int64_t i;
  double f;
  if (st == AG_OK) st = ag_env_i64("AG_NUM_THREADS", 1, AG_MAX_THREADS, 1, &i);
  if (st == AG_OK) st = ag_env_f64("AG_PINNED_CACHE_MB", 0, 1 << 30, 0, &f);
  if (st == AG_OK) st = ag_env_i64("AG_DIST_TIMEOUT_MS", 1, AG_DIST_MAX_TIMEOUT_MS, 1, &i);
  if (st == AG_OK) st = ag__env_numerics_check();
  const char *d = getenv("AG_DETERMINISTIC");
  if (st == AG_OK && d && *d) {
    static const char *const ok[] = {"0", "1", "on", "off", "true", "false"};
    bool known = false;
    for (size_t k = 0; k < sizeof ok / sizeof *ok; k++) known = known || !strcmp(d, ok[k]);
    char b[64];
    if (!known)
      st = ag_error_set(AG_ERR_INVALID, "AG_DETERMINISTIC='%s' is not 0, 1, on, off, true or false",
                        ag_escape(d, b, sizeof b));
  }
  /* read by the MPI module when a group is created, which refuses it too;
   * here a typo is reported at the first device open */
  const char *ar = getenv("AG_DIST_MPI_ALLREDUCE");
  if (st == AG_OK && ar && *ar && strcmp(ar, "auto") && strcmp(ar, "mpi")) {
    char b[64];
    st = ag_error_set(AG_ERR_INVALID, "AG_DIST_MPI_ALLREDUCE='%s' is not auto or mpi", ag_escape(ar, b, sizeof b));
  }
  for (int k = 0; k < g_nchecks && st == AG_OK; k++) st = g_checks[k]();
  return st;
}
