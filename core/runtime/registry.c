/* The backend registry: names -> kinds -> loaded backends -> device states.
 * Backends are modules found by name (libanygrad-<name>.so on AG_BACKEND_PATH,
 * beside libanygrad.so, or in its anygrad/ subfolder); the CPU backend is
 * compiled into the library but registered through the same path, from a
 * table of built-in getters. The registry knows no backend but by its name
 * and what its table reports (include/anygrad/backend.h, ABI 5.x).
 *
 * Thread safety: g_reg is the registry's only global mutable state (besides
 * each thread's current streams, tl_current). Kinds are appended under
 * g_reg.lock and published with a release store of the count; a slot's name
 * never changes once published. Each slot is loaded and started once under
 * its own mutex, published by release stores of its stage flags; its table
 * never changes after loading. Device states are created under g_reg.lock
 * and live until exit. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anygrad/checks.h"
#include "runtime/devstate.h"

/* Built-in modules: compiled into libanygrad, registered like the others.
 * Their getters are the only backend symbols the core names. */
const ag_backend *ag__cpu_backend(void);
static const ag_backend_module_get_fn k_builtin[] = {ag__cpu_backend};

/* The kinds ag_backend_kind names (device.h), frozen for source
 * compatibility: they keep their numbers whether or not their module is
 * present. A new backend is never added here; it gets a kind when found. */
static const char *const k_named[] = {"cuda", "hip", "opencl", "gpuemu"};
_Static_assert(sizeof k_builtin / sizeof k_builtin[0] + sizeof k_named / sizeof k_named[0] == AG_BACKEND_COUNT,
               "the named kinds are the built-in ones followed by k_named");

enum { STAGE_NONE = 0, STAGE_LOADED = 1, STAGE_STARTED = 2 };
#define NAME_MAX_LEN 31

/* The lists of AG_BACKEND_TABLES bound by name, in the order of their
 * sections; a kernel op's sub is a code of list k_kop_sub[op] (0: a
 * variant number, passed as it is). */
enum { L_KOP, L_UNARY, L_BINARY, L_REDUCE, L_POOL, L_COUNT };
enum { L_VAR = L_KOP };
static const char *const k_list_name[L_COUNT] = {"kop", "unary", "binary", "reduce", "pool"};
static const int k_list_len[L_COUNT] = {AG_KOP_COUNT, AG_UNARY_COUNT, AG_BINARY_COUNT, AG_REDUCE_COUNT,
                                        AG_POOL_OP_COUNT};
enum {
  MAP_SIZE = AG_KOP_COUNT + AG_UNARY_COUNT + AG_BINARY_COUNT + AG_REDUCE_COUNT + AG_POOL_OP_COUNT
};
static const int k_list_base[L_COUNT] = {0, AG_KOP_COUNT, AG_KOP_COUNT + AG_UNARY_COUNT,
                                         AG_KOP_COUNT + AG_UNARY_COUNT + AG_BINARY_COUNT,
                                         AG_KOP_COUNT + AG_UNARY_COUNT + AG_BINARY_COUNT + AG_REDUCE_COUNT};
#define KOP_SUB(ID, nm, sub, ...) L_##sub,
static const unsigned char k_kop_sub[AG_KOP_COUNT] = {AG_KOPS(KOP_SUB)};
#undef KOP_SUB
/* The sections a module's tables must hold unchanged, in order. */
static const char *const k_exact[] = {"anygrad-tables", "layout", "dtype"};

/* The tables are pinned with the ABI version (backend.h): a table edited
 * without a version bump stops the build here. The two declarations of
 * each pair then conflict as well, and the compiler's message shows the
 * values to pin (the second declaration's). */
extern char ag__tables_entries[AG_BACKEND_TABLES_ENTRIES];
extern char ag__tables_entries[AG_TABLES_ENTRIES_NOW];
extern char ag__tables_checksum[AG_BACKEND_TABLES_CHECKSUM];
extern char ag__tables_checksum[AG_TABLES_CHECKSUM_NOW];
_Static_assert(AG_TABLES_ENTRIES_NOW == AG_BACKEND_TABLES_ENTRIES &&
                   AG_TABLES_CHECKSUM_NOW == AG_BACKEND_TABLES_CHECKSUM,
               "the op tables (kops.h, optable.h) changed: bump AG_BACKEND_ABI_MINOR (entries added) or "
               "AG_BACKEND_ABI_MAJOR (an entry's meaning changed), log it in backend.h, and set "
               "AG_BACKEND_TABLES_ENTRIES and AG_BACKEND_TABLES_CHECKSUM to the values reported with this");

typedef struct backend_slot {
  char name[NAME_MAX_LEN + 1];
  ag_backend_module_get_fn builtin; /* NULL for a run-time module */
  pthread_mutex_t mu;               /* serialises load and start */
  atomic_int loaded;                /* load() ran (vt valid if ok) */
  atomic_int started;               /* start() ran (count valid) */
  bool ok;                          /* the table was accepted */
  ag_backend vt;                    /* the module's table, zero beyond its struct_size */
  /* A module whose op codes differ from the core's (other tables): vt's
   * supports, launch and take_kernel_error are this slot's trampolines,
   * which translate through map into the module's own entries. */
  bool bound;
  int16_t map[MAP_SIZE]; /* the core's code -> the module's, -1: its tables lack it */
  bool (*mod_supports)(int dev, ag_kop op, int sub, ag_dtype dtype);
  ag_status (*mod_launch)(ag_bstream *s, const ag_kernel_call *call);
  ag_status (*mod_kernel_error)(ag_bstream *s, ag_kernel_error *out);
  void *dl;
  char path[PATH_MAX];
  int count;
  char reason[512];
  ag_devstate *dev[AG_MAX_DEVICES];
} backend_slot;

static struct {
  pthread_once_t boot, scan;
  pthread_mutex_t lock; /* kinds, device states */
  atomic_int count;     /* registered kinds */
  backend_slot slot[AG_MAX_BACKENDS];
} g_reg = {.boot = PTHREAD_ONCE_INIT, .scan = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local ag_stream *tl_current[AG_MAX_BACKENDS][AG_MAX_DEVICES];

/* ---- names and kinds ---- */

static bool valid_name(const char *s, size_t n) {
  if (n == 0 || n > NAME_MAX_LEN) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return false;
  return true;
}

/* Register a name under g_reg.lock; its kind, or -1 when the table is full. */
static int add_locked(const char *name, size_t n, ag_backend_module_get_fn builtin) {
  int c = atomic_load_explicit(&g_reg.count, memory_order_relaxed);
  for (int k = 0; k < c; k++)
    if (strlen(g_reg.slot[k].name) == n && strncmp(g_reg.slot[k].name, name, n) == 0) return k;
  if (c >= AG_MAX_BACKENDS) return -1;
  backend_slot *sl = &g_reg.slot[c];
  memcpy(sl->name, name, n);
  sl->name[n] = 0;
  sl->builtin = builtin;
  pthread_mutex_init(&sl->mu, NULL);
  atomic_store_explicit(&g_reg.count, c + 1, memory_order_release);
  return c;
}

static void boot(void) {
  pthread_mutex_lock(&g_reg.lock);
  for (size_t i = 0; i < sizeof k_builtin / sizeof k_builtin[0]; i++) {
    const ag_backend *be = k_builtin[i]();
    add_locked(be->name, strlen(be->name), k_builtin[i]);
  }
  for (size_t i = 0; i < sizeof k_named / sizeof k_named[0]; i++) add_locked(k_named[i], strlen(k_named[i]), NULL);
  pthread_mutex_unlock(&g_reg.lock);
}

static inline int kinds(void) {
  pthread_once(&g_reg.boot, boot);
  return atomic_load_explicit(&g_reg.count, memory_order_acquire);
}

const char *ag_backend_name(ag_backend_kind kind) {
  return ((int)kind >= 0 && (int)kind < kinds()) ? g_reg.slot[kind].name : "?";
}

/* AG_BACKENDS="cpu,opencl" restricts which modules are loaded. */
static bool backend_enabled(const char *name) {
  const char *env = getenv("AG_BACKENDS");
  if (!env || !*env) return true;
  size_t n = strlen(name);
  for (const char *p = env; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

/* AG_BACKENDS names only backends the registry knows (built in, the named
 * kinds, modules found in the search folders): a typo would otherwise
 * disable every module without a word. Checked when a device first opens. */
static ag_status backends_env_check(void) {
  const char *env = getenv("AG_BACKENDS");
  if (!env || !*env) return AG_OK;
  int c = ag_backend_count();
  for (const char *p = env;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    bool found = false;
    for (int k = 0; k < c && !found; k++) found = strlen(g_reg.slot[k].name) == len && !strncmp(g_reg.slot[k].name, p, len);
    if (!found) {
      char known[256] = "", shown[64], item[40];
      for (int k = 0; k < c; k++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "", g_reg.slot[k].name);
      snprintf(item, sizeof item, "%.*s", (int)(len < 39 ? len : 39), p);
      char item_shown[64];
      return ag_error_set(AG_ERR_INVALID, "AG_BACKENDS='%s': '%s' is no backend here (known: %s)",
                          ag_escape(env, shown, sizeof shown), ag_escape(item, item_shown, sizeof item_shown),
                          known);
    }
    if (!e) break;
    p = e + 1;
  }
  return AG_OK;
}

/* ---- the search folders ---- */

/* Calls fn(dir, ctx) for each search folder in order until it returns true:
 * AG_BACKEND_PATH's, the folder of libanygrad.so, its anygrad/ subfolder. */
static bool each_dir(bool (*fn)(const char *dir, void *ctx), void *ctx) {
  const char *env = getenv("AG_BACKEND_PATH");
  if (env && *env) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save))
      if (fn(d, ctx)) return true;
  }
  Dl_info info;
  if (dladdr((void *)&ag_backend_name, &info) && info.dli_fname) {
    char self[PATH_MAX], real[PATH_MAX];
    snprintf(self, sizeof self, "%s", realpath(info.dli_fname, real) ? real : info.dli_fname);
    const char *dir = dirname(self);
    if (fn(dir, ctx)) return true;
    char sub[PATH_MAX];
    snprintf(sub, sizeof sub, "%.*s/anygrad", PATH_MAX - 9, dir);
    if (fn(sub, ctx)) return true;
  }
  return false;
}

typedef struct open_ctx {
  const char *file;
  char *err;
  size_t errlen;
  char searched[400];
  void *h;
  char path[PATH_MAX];
} open_ctx;

static bool try_open(const char *dir, void *vctx) {
  open_ctx *c = vctx;
  size_t used = strlen(c->searched);
  snprintf(c->searched + used, sizeof c->searched - used, "%s%s", used ? ", " : "", dir);
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", dir, c->file);
  if (n < 0 || (size_t)n >= sizeof path || access(path, F_OK) != 0) return false;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    /* A present-but-broken module is reported over "not found". */
    const char *m = dlerror();
    snprintf(c->err, c->errlen, "failed to load: %s", m ? m : "dlopen failed");
    return true;
  }
  c->h = h;
  snprintf(c->path, sizeof c->path, "%s", path);
  return true;
}

static void *module_open(const char *file, char *err, size_t errlen, char *out_path, size_t path_len) {
  open_ctx c = {.file = file, .err = err, .errlen = errlen};
  err[0] = 0;
  if (!each_dir(try_open, &c) && !err[0]) snprintf(err, errlen, "not found in %s (module not built)", c.searched);
  if (c.h && out_path) snprintf(out_path, path_len, "%s", c.path);
  return c.h;
}

void *ag__module_open(const char *file, char *err, size_t errlen) {
  return module_open(file, err, errlen, NULL, 0);
}

typedef struct find_ctx {
  const char *file;
  char searched[400];
} find_ctx;

static bool file_exists(const char *dir, void *vctx) {
  find_ctx *c = vctx;
  size_t used = strlen(c->searched);
  snprintf(c->searched + used, sizeof c->searched - used, "%s%s", used ? ", " : "", dir);
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", dir, c->file);
  return n > 0 && (size_t)n < sizeof path && access(path, F_OK) == 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* Registers every libanygrad-<name>.so in the search folders (not the
 * communication modules), in folder order, names sorted within a folder. */
static bool scan_dir(const char *dir, void *ctx) {
  DIR *d = opendir(dir);
  if (!d) return false;
  char names[AG_MAX_BACKENDS][NAME_MAX_LEN + 1];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < AG_MAX_BACKENDS;) {
    const char *f = e->d_name;
    size_t len = strlen(f);
    if (len <= 14 || strncmp(f, "libanygrad-", 11) != 0 || strcmp(f + len - 3, ".so") != 0) continue;
    if (!valid_name(f + 11, len - 14) || ag__dist_module_file(f)) continue;
    memcpy(names[n], f + 11, len - 14);
    names[n++][len - 14] = 0;
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], name_cmp);
  pthread_mutex_lock(&g_reg.lock);
  for (int i = 0; i < n; i++) add_locked(names[i], strlen(names[i]), NULL);
  pthread_mutex_unlock(&g_reg.lock);
  return false;
}

static void scan(void) { each_dir(scan_dir, NULL); }

int ag_backend_count(void) {
  kinds();
  pthread_once(&g_reg.scan, scan);
  return kinds();
}

ag_status ag_backend_find(const char *name, ag_backend_kind *out_kind) {
  if (!name || !out_kind) return ag_error_set(AG_ERR_INVALID, "ag_backend_find: NULL argument");
  size_t n = strlen(name);
  if (!valid_name(name, n))
    return ag_error_set(AG_ERR_INVALID,
                        "ag_backend_find: '%s' is not a backend name (1-%d of a-z, 0-9, _)", name, NAME_MAX_LEN);
  int c = kinds();
  for (int k = 0; k < c; k++)
    if (strcmp(g_reg.slot[k].name, name) == 0) {
      *out_kind = (ag_backend_kind)k;
      return AG_OK;
    }
  find_ctx f = {0};
  char file[64];
  snprintf(file, sizeof file, "libanygrad-%s.so", name);
  f.file = file;
  if (ag__dist_module_file(file))
    return ag_error_set(AG_ERR_INVALID, "ag_backend_find: %s is a communication module, not a backend", file);
  if (!each_dir(file_exists, &f)) {
    char known[256] = "";
    size_t used = 0;
    c = ag_backend_count();
    for (int k = 0; k < c && used < sizeof known; k++)
      used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "", g_reg.slot[k].name);
    return ag_error_set(AG_ERR_INVALID, "ag_backend_find: no backend '%s' (known: %s; no %s in %s)", name, known,
                        file, f.searched);
  }
  pthread_mutex_lock(&g_reg.lock);
  int k = add_locked(name, n, NULL);
  pthread_mutex_unlock(&g_reg.lock);
  if (k < 0)
    return ag_error_set(AG_ERR_UNAVAILABLE, "ag_backend_find: %s: the registry is full (%d backends)", file,
                        AG_MAX_BACKENDS);
  *out_kind = (ag_backend_kind)k;
  return AG_OK;
}

/* ---- loading: the version ---- */

#define REQUIRED(f) {offsetof(ag_backend, f), #f}
static const struct {
  size_t off;
  const char *name;
} k_required[] = {
    REQUIRED(init),          REQUIRED(device_props),      REQUIRED(mem_info),         REQUIRED(segment_alloc),
    REQUIRED(segment_free),  REQUIRED(pinned_alloc),      REQUIRED(pinned_free),      REQUIRED(stream_create),
    REQUIRED(stream_destroy), REQUIRED(stream_synchronize), REQUIRED(stream_query),    REQUIRED(event_create),
    REQUIRED(event_destroy), REQUIRED(event_record),      REQUIRED(stream_wait_event), REQUIRED(event_query),
    REQUIRED(event_synchronize), REQUIRED(event_elapsed_ms), REQUIRED(copy_h2d),      REQUIRED(copy_d2h),
    REQUIRED(copy_d2d),      REQUIRED(launch),            REQUIRED(supports),         REQUIRED(take_kernel_error),
};
#undef REQUIRED

/* ---- loading: the op tables ---- */

#define TABLES_MAX 65536 /* bytes of a module's tables string */
#define LIST_MAX 1024    /* entries of one section */

typedef struct tok {
  const char *p;
  int n;
} tok;

static bool tok_eq(tok a, tok b) { return a.n == b.n && memcmp(a.p, b.p, (size_t)a.n) == 0; }

/* The entries of section `name` of a tables string: their count, or -1
 * when the section is absent or holds more than LIST_MAX. */
static int section(const char *tables, const char *name, tok *out) {
  size_t nl = strlen(name);
  for (const char *s = tables;;) {
    size_t len = strcspn(s, ";"), head = strcspn(s, " ;");
    if (head == nl && strncmp(s, name, nl) == 0) {
      int n = 0;
      for (size_t i = head; i < len;) {
        size_t w = strcspn(s + i, " ;");
        if (w && n == LIST_MAX) return -1;
        if (w) out[n++] = (tok){s + i, (int)w};
        i += w ? w : 1;
      }
      return n;
    }
    if (!s[len]) return -1;
    s += len + 1;
  }
}

/* Compares the module's tables with the core's: the exact sections must be
 * equal, and every code of the lists bound by name is looked up in the
 * module's. Fills sl->map and sl->bound; false with sl->reason written. */
static bool bind_tables(backend_slot *sl, const char *tables, const ag_backend *be, const char *what) {
  const char *core = AG_BACKEND_TABLES;
  sl->bound = false;
  if (!tables) {
    snprintf(sl->reason, sizeof sl->reason,
             "%s: backend ABI %u.%u without its op tables (tables is NULL: AG_BACKEND_HEADER fills it)", what,
             be->abi_major, be->abi_minor);
    return false;
  }
  if (strnlen(tables, TABLES_MAX) == TABLES_MAX) {
    snprintf(sl->reason, sizeof sl->reason, "%s: op tables of %d bytes or more (malformed)", what, TABLES_MAX);
    return false;
  }
  if (strcmp(tables, core) == 0) return true;
  char diff[96];
  snprintf(diff, sizeof diff, "the module's op tables %016llx, anygrad's %016llx",
           (unsigned long long)ag_tables_hash(tables), (unsigned long long)ag_tables_hash(core));
  tok *mt = malloc(2 * LIST_MAX * sizeof *mt), *ct = mt + LIST_MAX;
  if (!mt) {
    snprintf(sl->reason, sizeof sl->reason, "%s: out of host memory comparing op tables", what);
    return false;
  }
  bool ok = true, moved = false;
  for (size_t k = 0; ok && k < sizeof k_exact / sizeof k_exact[0]; k++) {
    int nm = section(tables, k_exact[k], mt), nc = section(core, k_exact[k], ct);
    if (nm < 0) {
      snprintf(sl->reason, sizeof sl->reason, "%s: %s: no '%s' section of at most %d entries in the module's", what,
               diff, k_exact[k], LIST_MAX);
      ok = false;
    }
    for (int i = 0; ok && (i < nm || i < nc); i++) {
      if (i < nm && i < nc && tok_eq(mt[i], ct[i])) continue;
      tok m = i < nm ? mt[i] : (tok){"(none)", 6}, c = i < nc ? ct[i] : (tok){"(none)", 6};
      snprintf(sl->reason, sizeof sl->reason,
               "%s: %s differ: %s entry %d is '%.*s' in the module, '%.*s' in anygrad (rebuild the module "
               "against anygrad %u.%u's headers)",
               what, diff, k_exact[k], i, m.n, m.p, c.n, c.p, AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR);
      ok = false;
    }
  }
  for (int l = 0; ok && l < L_COUNT; l++) {
    int nm = section(tables, k_list_name[l], mt), nc = section(core, k_list_name[l], ct);
    if (nm < 0 || nc != k_list_len[l]) {
      snprintf(sl->reason, sizeof sl->reason, "%s: %s: no '%s' section of at most %d entries in the module's%s",
               what, diff, k_list_name[l], LIST_MAX, nc != k_list_len[l] ? " (nor in anygrad's: a bug)" : "");
      ok = false;
      break;
    }
    /* by name: a code the module's tables lack maps to -1 (unsupported) */
    for (int i = 0; i < nc; i++) {
      int j = 0;
      while (j < nm && !tok_eq(mt[j], ct[i])) j++;
      sl->map[k_list_base[l] + i] = (int16_t)(j < nm ? j : -1);
      moved |= j != i;
    }
  }
  free(mt);
  sl->bound = ok && moved;
  return ok;
}

/* The module's kernel op and sub for the core's; false when its tables
 * lack either. */
static bool to_module(const backend_slot *sl, int op, int sub, int *out_op, int *out_sub) {
  if (op < 0 || op >= AG_KOP_COUNT || sl->map[op] < 0) return false;
  *out_op = sl->map[op];
  *out_sub = sub;
  int l = k_kop_sub[op];
  if (l == L_VAR) return true;
  if (sub < 0 || sub >= k_list_len[l]) return false;
  *out_sub = sl->map[k_list_base[l] + sub];
  return *out_sub >= 0;
}

static bool bound_supports(const backend_slot *sl, int dev, ag_kop op, int sub, ag_dtype dt) {
  int mop, msub;
  return to_module(sl, op, sub, &mop, &msub) && sl->mod_supports(dev, (ag_kop)mop, msub, dt);
}

static ag_status bound_launch(const backend_slot *sl, ag_bstream *s, const ag_kernel_call *c) {
  int mop, msub;
  if (!to_module(sl, c->op, c->sub, &mop, &msub))
    return ag_error_set(AG_ERR_UNSUPPORTED,
                        "%s: kernel op %d (sub %d) is not in the op tables backend %s was built against",
                        c->name ? c->name : "launch", (int)c->op, c->sub, sl->name);
  ag_kernel_call m = *c;
  m.op = (ag_kop)mop;
  m.sub = msub;
  return sl->mod_launch(s, &m);
}

/* The error word names the module's kernel op: the core's code for it. */
static ag_status bound_kernel_error(const backend_slot *sl, ag_bstream *s, ag_kernel_error *out) {
  ag_status st = sl->mod_kernel_error(s, out);
  if (st == AG_OK && out->code) {
    int32_t k = 0;
    while (k < AG_KOP_COUNT && sl->map[k] != out->kop) k++;
    out->kop = k < AG_KOP_COUNT ? k : -1;
  }
  return st;
}

/* Entries of the vtable are plain function pointers with no context, so
 * each slot has its own three trampolines. */
#define BOUND(k)                                                                                      \
  static bool bound_supports_##k(int dev, ag_kop op, int sub, ag_dtype dt) {                          \
    return bound_supports(&g_reg.slot[k], dev, op, sub, dt);                                          \
  }                                                                                                   \
  static ag_status bound_launch_##k(ag_bstream *s, const ag_kernel_call *c) {                         \
    return bound_launch(&g_reg.slot[k], s, c);                                                        \
  }                                                                                                   \
  static ag_status bound_kernel_error_##k(ag_bstream *s, ag_kernel_error *out) {                      \
    return bound_kernel_error(&g_reg.slot[k], s, out);                                                \
  }
BOUND(0) BOUND(1) BOUND(2) BOUND(3) BOUND(4) BOUND(5) BOUND(6) BOUND(7)
BOUND(8) BOUND(9) BOUND(10) BOUND(11) BOUND(12) BOUND(13) BOUND(14) BOUND(15)
BOUND(16) BOUND(17) BOUND(18) BOUND(19) BOUND(20) BOUND(21) BOUND(22) BOUND(23)
BOUND(24) BOUND(25) BOUND(26) BOUND(27) BOUND(28) BOUND(29) BOUND(30) BOUND(31)
#undef BOUND
#define BOUND(k) {bound_supports_##k, bound_launch_##k, bound_kernel_error_##k},
static const struct {
  bool (*supports)(int dev, ag_kop op, int sub, ag_dtype dtype);
  ag_status (*launch)(ag_bstream *s, const ag_kernel_call *call);
  ag_status (*kernel_error)(ag_bstream *s, ag_kernel_error *out);
} k_bound[] = {BOUND(0) BOUND(1) BOUND(2) BOUND(3) BOUND(4) BOUND(5) BOUND(6) BOUND(7)
               BOUND(8) BOUND(9) BOUND(10) BOUND(11) BOUND(12) BOUND(13) BOUND(14) BOUND(15)
               BOUND(16) BOUND(17) BOUND(18) BOUND(19) BOUND(20) BOUND(21) BOUND(22) BOUND(23)
               BOUND(24) BOUND(25) BOUND(26) BOUND(27) BOUND(28) BOUND(29) BOUND(30) BOUND(31)};
#undef BOUND
_Static_assert(sizeof k_bound / sizeof k_bound[0] == AG_MAX_BACKENDS, "one set of trampolines per slot");

/* ---- loading: the ABI check ---- */

/* Accepts be for sl (what: the module file, for messages): the version
 * check, the op tables and the copy into sl->vt; false with sl->reason
 * written. */
static bool accept_table(backend_slot *sl, const ag_backend *be, const char *what) {
  if (!be) {
    snprintf(sl->reason, sizeof sl->reason, "%s: %s returned NULL", what, AG_BACKEND_MODULE_SYMBOL);
    return false;
  }
  /* Before 4.0 the first word was the exact-match version (1-3). */
  if (be->struct_size < offsetof(ag_backend, name)) {
    snprintf(sl->reason, sizeof sl->reason,
             "%s: backend ABI %u, anygrad's is %u.%u (a module of ABI %u.x is needed; rebuild it)", what,
             be->struct_size, AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR, AG_BACKEND_ABI_MAJOR);
    return false;
  }
  if (be->abi_major != AG_BACKEND_ABI_MAJOR) {
    snprintf(sl->reason, sizeof sl->reason,
             "%s: backend ABI %u.%u, anygrad's is %u.%u (another major version: rebuild the module)", what,
             be->abi_major, be->abi_minor, AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR);
    return false;
  }
  if (be->struct_size < AG_BACKEND_STRUCT_SIZE_5_0) {
    snprintf(sl->reason, sizeof sl->reason,
             "%s: backend ABI %u.%u with a %u-byte table, anygrad %u.%u needs at least the %zu bytes of %u.0", what,
             be->abi_major, be->abi_minor, be->struct_size, AG_BACKEND_ABI_MAJOR, AG_BACKEND_ABI_MINOR,
             (size_t)AG_BACKEND_STRUCT_SIZE_5_0, AG_BACKEND_ABI_MAJOR);
    return false;
  }
  /* Entries beyond the module's table read as absent (zero). */
  ag_backend vt;
  memset(&vt, 0, sizeof vt);
  memcpy(&vt, be, be->struct_size < sizeof vt ? be->struct_size : sizeof vt);
  if (!vt.name || strcmp(vt.name, sl->name) != 0) {
    snprintf(sl->reason, sizeof sl->reason, "%s: the module calls itself '%s', not '%s'", what,
             vt.name ? vt.name : "(NULL)", sl->name);
    return false;
  }
  for (size_t i = 0; i < sizeof k_required / sizeof k_required[0]; i++) {
    void *fp;
    memcpy(&fp, (const char *)&vt + k_required[i].off, sizeof fp);
    if (!fp) {
      snprintf(sl->reason, sizeof sl->reason, "%s: backend ABI %u.%u: the required entry %s is NULL", what,
               be->abi_major, be->abi_minor, k_required[i].name);
      return false;
    }
  }
  if (!bind_tables(sl, vt.tables, be, what)) return false;
  if (sl->bound) {
    const int k = (int)(sl - g_reg.slot);
    sl->mod_supports = vt.supports;
    sl->mod_launch = vt.launch;
    sl->mod_kernel_error = vt.take_kernel_error;
    vt.supports = k_bound[k].supports;
    vt.launch = k_bound[k].launch;
    vt.take_kernel_error = k_bound[k].kernel_error;
    /* portable numerics needs the module's own codes for every op it
     * claims: a module bound by name to other tables refuses the mode */
    vt.portable_check = NULL;
    vt.supports_portable = NULL;
  }
  sl->vt = vt;
  return true;
}

static void load(backend_slot *sl) {
  if (sl->builtin) {
    sl->ok = accept_table(sl, sl->builtin(), "built-in");
    return;
  }
  if (!backend_enabled(sl->name)) {
    snprintf(sl->reason, sizeof sl->reason, "disabled by AG_BACKENDS");
    return;
  }
  char file[64];
  snprintf(file, sizeof file, "libanygrad-%s.so", sl->name);
  char err[440] = "";
  void *h = module_open(file, err, sizeof err, sl->path, sizeof sl->path);
  if (!h) {
    snprintf(sl->reason, sizeof sl->reason, "%s %s", file, err);
    return;
  }
  ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL);
  if (!get) {
    snprintf(sl->reason, sizeof sl->reason, "%.440s: no %s symbol", sl->path, AG_BACKEND_MODULE_SYMBOL);
    dlclose(h);
    return;
  }
  if (!accept_table(sl, get(), sl->path)) {
    dlclose(h);
    return;
  }
  sl->dl = h;
  sl->ok = true;
}

/* Counts the devices; a backend with none is unavailable with the reason. */
static void start(backend_slot *sl) {
  if (!sl->ok) return;
  int n = 0;
  char reason[400] = "";
  ag_status st = sl->vt.init(&n, reason, sizeof reason);
  if (st != AG_OK || n <= 0) {
    snprintf(sl->reason, sizeof sl->reason, "%s: %s", sl->name,
             reason[0] ? reason : (st != AG_OK ? ag_last_error() : "no devices"));
    sl->count = 0;
    sl->ok = false;
    ag_error_clear();
    return;
  }
  sl->count = n > AG_MAX_DEVICES ? AG_MAX_DEVICES : n;
}

/* Each backend loads and starts on its first use, so a CPU-only program
 * never pays for starting GPU runtimes (about 0.6 s for the CUDA, HIP and
 * OpenCL modules). */
static backend_slot *ensure(int kind, int stage) {
  backend_slot *sl = &g_reg.slot[kind];
  atomic_int *flag = stage == STAGE_STARTED ? &sl->started : &sl->loaded;
  if (atomic_load_explicit(flag, memory_order_acquire)) return sl;
  pthread_mutex_lock(&sl->mu);
  if (!atomic_load_explicit(&sl->loaded, memory_order_relaxed)) {
    load(sl);
    atomic_store_explicit(&sl->loaded, 1, memory_order_release);
  }
  if (stage == STAGE_STARTED && !atomic_load_explicit(&sl->started, memory_order_relaxed)) {
    start(sl);
    atomic_store_explicit(&sl->started, 1, memory_order_release);
  }
  pthread_mutex_unlock(&sl->mu);
  return sl;
}

/* A started slot, or NULL when kind is not registered. */
static backend_slot *started_slot(int kind) {
  return kind >= 0 && kind < kinds() ? ensure(kind, STAGE_STARTED) : NULL;
}

bool ag_backend_available(ag_backend_kind kind, const char **out_reason) {
  backend_slot *sl = started_slot((int)kind);
  if (!sl) {
    if (out_reason) *out_reason = "unknown backend";
    return false;
  }
  if (out_reason) *out_reason = sl->ok ? "" : sl->reason;
  return sl->ok;
}

int ag_backend_device_count(ag_backend_kind kind) {
  backend_slot *sl = started_slot((int)kind);
  return sl && sl->ok ? sl->count : 0;
}

ag_status ag_backend_info_get(ag_backend_kind kind, ag_backend_info *out_info) {
  if (!out_info) return ag_error_set(AG_ERR_INVALID, "ag_backend_info_get: NULL out_info");
  if ((int)kind < 0 || (int)kind >= kinds())
    return ag_error_set(AG_ERR_INVALID, "ag_backend_info_get: no backend of kind %d", (int)kind);
  backend_slot *sl = ensure((int)kind, STAGE_LOADED);
  memset(out_info, 0, sizeof *out_info);
  out_info->name = sl->name;
  out_info->path = sl->path;
  out_info->description = "";
  out_info->collective = "";
  /* a table that loaded but failed to start still has its properties */
  if (!sl->vt.name)
    return ag_error_set(AG_ERR_UNAVAILABLE, "backend %s is unavailable: %s", sl->name, sl->reason);
  const ag_backend *be = &sl->vt;
  out_info->abi_major = be->abi_major;
  out_info->abi_minor = be->abi_minor;
  out_info->description = be->description ? be->description : "";
  out_info->host_memory = be->flags & AG_BACKEND_F_HOST_MEMORY;
  out_info->addressable = be->flags & AG_BACKEND_F_ADDRESSABLE;
  out_info->dlpack_device = be->dlpack_device;
  out_info->priority = be->priority;
  out_info->collective = be->collective ? be->collective : "";
  return AG_OK;
}

ag_status ag__backend_by_dlpack(int dlpack_device, ag_backend_kind *out_kind) {
  int c = ag_backend_count();
  for (int k = 0; k < c; k++) {
    backend_slot *sl = ensure(k, STAGE_LOADED);
    if (sl->vt.name && sl->vt.dlpack_device == dlpack_device) {
      *out_kind = (ag_backend_kind)k;
      return AG_OK;
    }
  }
  return AG_ERR_UNAVAILABLE;
}

/* ---- device states ---- */

ag_devstate *ag__devstate(ag_device d) {
  if (AG_UNLIKELY(d.backend < 0 || d.backend >= AG_MAX_BACKENDS)) {
    ag_error_set(AG_ERR_DEVICE, "invalid device (backend %d)", d.backend);
    return NULL;
  }
  backend_slot *sl = &g_reg.slot[d.backend];
  if (AG_LIKELY(d.index >= 0 && d.index < AG_MAX_DEVICES)) {
    ag_devstate *ds = __atomic_load_n(&sl->dev[d.index], __ATOMIC_ACQUIRE);
    if (AG_LIKELY(ds != NULL)) return ds;
  }
  if (!started_slot(d.backend)) {
    ag_error_set(AG_ERR_DEVICE, "invalid device (no backend of kind %d)", d.backend);
    return NULL;
  }
  if (!sl->ok) {
    ag_error_set(AG_ERR_UNAVAILABLE, "backend %s is unavailable: %s", sl->name, sl->reason);
    return NULL;
  }
  if (d.index < 0 || d.index >= sl->count) {
    ag_error_set(AG_ERR_DEVICE, "device %s:%d does not exist (%d device%s)", sl->name, d.index, sl->count,
                 sl->count == 1 ? "" : "s");
    return NULL;
  }
  if (backends_env_check() != AG_OK) return NULL;
  pthread_mutex_lock(&g_reg.lock);
  ag_devstate *ds = sl->dev[d.index];
  if (!ds) {
    ds = calloc(1, sizeof *ds);
    ag_stream *s = calloc(1, sizeof *s);
    ag_bstream *bs = NULL;
    if (!ds || !s || sl->vt.stream_create(d.index, &bs) != AG_OK) {
      free(ds);
      free(s);
      pthread_mutex_unlock(&g_reg.lock);
      if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_OOM, "out of host memory");
      return NULL;
    }
    ds->dev = d;
    ds->be = &sl->vt;
    ds->ord = d.index;
    /* a name of at most NAME_MAX_LEN and an ordinal: fits */
    if (snprintf(ds->label, sizeof ds->label, "%s:%d", sl->name, d.index) >= (int)sizeof ds->label)
      ds->label[sizeof ds->label - 1] = '\0';
    s->ds = ds;
    s->bs = bs;
    s->is_default = true;
    s->id = 0;
    ds->default_stream = s;
    pthread_mutex_init(&ds->lock, NULL);
    ds->streams = s;
    ds->next_stream_id = 1;
    bool ok = ag__env_check() == AG_OK;
    if (ok && ag__memory_hooks.allocator_create) {
      ds->alloc = ag__memory_hooks.allocator_create(ds);
      ok = ds->alloc != NULL;
    }
    if (!ok) {
      sl->vt.stream_destroy(bs);
      free(s);
      free(ds);
      pthread_mutex_unlock(&g_reg.lock);
      return NULL;
    }
    __atomic_store_n(&sl->dev[d.index], ds, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_reg.lock);
  return ds;
}

ag_stream *ag__current_stream(ag_devstate *ds) {
  ag_stream *s = tl_current[ds->dev.backend][ds->ord];
  return s ? s : ds->default_stream;
}

ag_stream *ag_stream_current(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  return ds ? ag__current_stream(ds) : NULL;
}

ag_stream *ag_stream_set_current(ag_device d, ag_stream *s) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  if (s && s->ds != ds) {
    ag_error_set(AG_ERR_DEVICE, "ag_stream_set_current: stream belongs to %s, not %s",
                 s->ds->label, ds->label);
    return NULL;
  }
  ag_stream *prev = ag__current_stream(ds);
  tl_current[d.backend][d.index] = (s && !s->is_default) ? s : NULL;
  return prev;
}

/* ---- device strings ---- */

ag_status ag_device_parse(const char *s, ag_device *out_device) {
  if (!s || !out_device)
    return ag_error_set(AG_ERR_INVALID, "ag_device_parse: NULL argument");
  char es[256];
  ag_escape(s, es, sizeof es); /* the text as typed, safe to print */
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  int64_t idx = 0;
  bool ok = valid_name(s, n), too_big = false;
  if (ok && colon) {
    /* the strict parser: decimal digits only (no sign, blank or hex); a
     * well-formed index past int64 is out of range, not saturated */
    const char *t = colon + 1;
    ok = ag_parse_i64(t, 0, INT64_MAX, &idx);
    too_big = !ok && *t && strspn(t, "0123456789") == strlen(t);
  }
  if (!ok && !too_big)
    return ag_error_set(AG_ERR_INVALID,
                        "ag_device_parse: '%s' is not a device (expected <backend> or <backend>:N, "
                        "e.g. cpu, cuda:0, opencl:1)", es);
  char name[NAME_MAX_LEN + 1];
  memcpy(name, s, n);
  name[n] = 0;
  ag_backend_kind kind;
  if (ag_backend_find(name, &kind) != AG_OK) {
    char why[400];
    snprintf(why, sizeof why, "%s", ag_last_error() + strlen("ag_backend_find: "));
    return ag_error_set(AG_ERR_INVALID, "ag_device_parse: '%s' is not a device: %s", es, why);
  }
  backend_slot *sl = started_slot((int)kind);
  if (!sl->ok)
    return ag_error_set(AG_ERR_UNAVAILABLE, "ag_device_parse: backend %s is unavailable: %s", sl->name,
                        sl->reason);
  if (too_big || idx >= sl->count)
    return ag_error_set(AG_ERR_DEVICE, "ag_device_parse: %s has %d device%s, no index %s (out of range)", sl->name,
                        sl->count, sl->count == 1 ? "" : "s", colon ? es + n + 1 : "0");
  out_device->backend = (int16_t)kind;
  out_device->index = (int16_t)idx;
  return AG_OK;
}

char *ag_device_str(ag_device d, char *buf, size_t len) {
  if (buf && len) snprintf(buf, len, "%s:%d", ag_backend_name((ag_backend_kind)d.backend), d.index);
  return buf;
}

bool ag_device_eq(ag_device a, ag_device b) {
  return a.backend == b.backend && a.index == b.index;
}

ag_device ag_device_best(void) {
  ag_device best = AG_CPU;
  int32_t best_p = INT32_MIN;
  int c = ag_backend_count();
  for (int k = 0; k < c; k++) {
    /* a backend that is never chosen (the emulator) is not even started */
    backend_slot *sl = ensure(k, STAGE_LOADED);
    if (!sl->vt.name || sl->vt.priority < 0) continue;
    sl = ensure(k, STAGE_STARTED);
    if (!sl->ok) continue;
    for (int i = 0; i < sl->count; i++) {
      int32_t p = sl->vt.device_priority ? sl->vt.device_priority(i) : sl->vt.priority;
      if (p >= 0 && p > best_p) {
        best_p = p;
        best = (ag_device){(int16_t)k, (int16_t)i};
      }
    }
  }
  return best;
}

ag_status ag_device_props_get(ag_device d, ag_device_props *out_props) {
  if (!out_props) return ag_error_set(AG_ERR_INVALID, "ag_device_props_get: NULL out_props");
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  memset(out_props, 0, sizeof *out_props);
  return ds->be->device_props(ds->ord, out_props);
}

bool ag_device_supports(ag_device d, int op, int sub, ag_dtype dt) {
  if (op < 0 || op >= AG_KOP_COUNT || sub < 0 || (int)dt < 0 || (int)dt >= AG_DTYPE_COUNT) return false;
  ag_devstate *ds = ag__devstate(d);
  return ds && ag__supports(ds, (ag_kop)op, sub, dt);
}

ag_status ag_device_mem_info(ag_device d, size_t *out_free, size_t *out_total) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  size_t f = 0, t = 0;
  ag_status st = ds->be->mem_info(ds->ord, &f, &t);
  if (out_free) *out_free = f;
  if (out_total) *out_total = t;
  return st;
}

ag_status ag_device_synchronize(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  return ag__sync_device(ds, "ag_device_synchronize");
}
