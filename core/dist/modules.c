/* The communication-module registry: libanygrad-mpi.so (MPI) and
 * libanygrad-nccl.so (NCCL and RCCL, which share NCCL's API), found where the
 * backend modules are and loaded once per kind (pthread_once). A module that
 * is absent, or whose vendor library is absent, is recorded with the reason.
 * Process-wide and read-only after loading: safe from any thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dist_internal.h"
#include "runtime/devstate.h"

typedef struct slot {
  const ag_dist_module *mod;
  char why[512]; /* description when available, reason when not */
} slot;

static slot g_slots[AG_DIST_KIND_COUNT];
static pthread_once_t g_once[AG_DIST_KIND_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                                     PTHREAD_ONCE_INIT};

static const char *const k_files[] = {"libanygrad-mpi.so", "libanygrad-nccl.so"};

bool ag__dist_module_file(const char *file) {
  for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++)
    if (strcmp(file, k_files[i]) == 0) return true;
  return false;
}

static void load(ag_dist_kind kind) {
  slot *sl = &g_slots[kind];
  const char *file = k_files[kind == AG_DIST_MPI ? 0 : 1];
  char err[400] = "";
  void *h = ag__module_open(file, err, sizeof err);
  if (!h) {
    snprintf(sl->why, sizeof sl->why, "%s %s", file, err[0] ? err : "not found (module not built)");
    return;
  }
  ag_dist_module_get_fn get = (ag_dist_module_get_fn)dlsym(h, AG_DIST_MODULE_SYMBOL);
  const ag_dist_module *m = get ? get((int)kind) : NULL;
  if (!m) {
    snprintf(sl->why, sizeof sl->why, "%s: no %s for %s", file, AG_DIST_MODULE_SYMBOL, ag_dist_kind_name(kind));
    dlclose(h);
    return;
  }
  if (m->abi != AG_DIST_MODULE_ABI) {
    snprintf(sl->why, sizeof sl->why, "%s: module ABI %u, core expects %u", file, m->abi, AG_DIST_MODULE_ABI);
    dlclose(h);
    return;
  }
  if (!m->probe(sl->why, sizeof sl->why)) {
    /* The module stays loaded (its vendor library may hold references). */
    ag_error_clear();
    return;
  }
  sl->mod = m;
}

static void load_mpi(void) { load(AG_DIST_MPI); }
static void load_nccl(void) { load(AG_DIST_NCCL); }
static void load_rccl(void) { load(AG_DIST_RCCL); }

const ag_dist_module *ag__dist_module(ag_dist_kind kind, char *why, size_t n) {
  static void (*const k_load[AG_DIST_KIND_COUNT])(void) = {NULL, load_mpi, load_nccl, load_rccl};
  if (kind <= AG_DIST_INPROC || kind >= AG_DIST_KIND_COUNT) {
    if (why && n) snprintf(why, n, "not a module kind");
    return kind == AG_DIST_INPROC ? ag__dist_inproc_module() : NULL;
  }
  pthread_once(&g_once[kind], k_load[kind]);
  if (why && n) snprintf(why, n, "%s", g_slots[kind].why);
  return g_slots[kind].mod;
}
