/* The checking mode (AG_GPUEMU_CHECK=1): the kernel sources of the check
 * module are compiled with ThreadSanitizer's instrumentation, and this file
 * (not instrumented) is the runtime those calls reach. Every load and store
 * of a kernel is classified as shared memory (the __shared__ arrays, found
 * in the module's symbol table), device memory (the address space the
 * emulator gave the device's allocations, redzones and freed blocks
 * included), or host memory the kernel may touch (ignored), and checked
 * against shadow memory as compute-sanitizer's racecheck, initcheck and
 * memcheck would. The first finding of a block becomes the
 * launch's error. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cxxabi.h>
#include <mutex>
#include <string>
#include <vector>

#include "emu_internal.h"

/* A TLS variable of known symbol: its address minus its symbol value is the
 * module's TLS block on the calling thread. */
extern "C" AGEMU_HIDDEN __thread char agemu_tls_anchor;
__thread char agemu_tls_anchor;

namespace agemu {
namespace chk {
namespace {

/* ---- the __shared__ arrays of the module ---- */

struct sh_sym {
  uintptr_t off, size; /* in the module's TLS block */
  bool redzone;
  std::string name;
};
/* A function of the module, to name kernels: their symbols are hidden, so
 * dladdr cannot. */
struct fn_sym {
  uintptr_t addr, size; /* relative to the load base for ET_DYN files */
  std::string mangled;
};
struct sh_table {
  std::vector<sh_sym> syms; /* sorted by off */
  std::vector<fn_sym> fns;  /* sorted by addr */
  bool relative = true;     /* fn addresses are offsets from the load base */
  uintptr_t anchor = 0, lo = 0, hi = 0;
  std::string error;
};
sh_table *g_sh;
std::once_flag g_sh_once;

std::string demangle(const char *s) {
  int status = 0;
  char *d = abi::__cxa_demangle(s, NULL, NULL, &status);
  std::string r = d ? d : s;
  free(d);
  return r;
}

/* Reads the module's own .symtab: the check module is built unstripped. */
void load_symbols(sh_table *t) {
  /* the module's file; the main program (a test linking the emulator)
   * may be named by its invocation only: /proc/self/exe */
  Dl_info info;
  int fd = -1;
  if (dladdr((void *)&load_symbols, &info) && info.dli_fname && *info.dli_fname)
    fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    t->error = "cannot open the module's file";
    return;
  }
  off_t len = lseek(fd, 0, SEEK_END);
  void *m = len > 0 ? mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) {
    t->error = "cannot map the module's file";
    return;
  }
  const char *base = (const char *)m;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  bool found_anchor = false;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64) {
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
      if (sh[i].sh_type != SHT_SYMTAB) continue;
      const Elf64_Sym *sym = (const Elf64_Sym *)(base + sh[i].sh_offset);
      const char *str = base + sh[sh[i].sh_link].sh_offset;
      size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
      t->relative = eh->e_type == ET_DYN;
      for (size_t k = 0; k < n; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_size) {
          t->fns.push_back(fn_sym{sym[k].st_value, sym[k].st_size, str + sym[k].st_name});
          continue;
        }
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_TLS) continue;
        const char *name = str + sym[k].st_name;
        if (!strcmp(name, "agemu_tls_anchor")) {
          t->anchor = sym[k].st_value;
          found_anchor = true;
        } else if (!strncmp(name, "_ZZ", 3) && sym[k].st_size) {
          /* a function's static thread_local: in kernel code, a __shared__
           * array or the redzone declared in front of one */
          sh_sym s;
          s.off = sym[k].st_value;
          s.size = sym[k].st_size;
          s.name = demangle(name);
          s.redzone = s.name.find("agemu_rz_") != std::string::npos;
          t->syms.push_back(s);
        }
      }
    }
  }
  munmap(m, (size_t)len);
  if (!found_anchor) {
    t->syms.clear();
    t->error = "the module has no symbol table (stripped?): shared-memory checks are off";
    return;
  }
  std::sort(t->syms.begin(), t->syms.end(), [](const sh_sym &a, const sh_sym &b) { return a.off < b.off; });
  std::sort(t->fns.begin(), t->fns.end(), [](const fn_sym &a, const fn_sym &b) { return a.addr < b.addr; });
  if (!t->syms.empty()) {
    t->lo = t->syms.front().off;
    t->hi = t->syms.back().off + t->syms.back().size;
  }
}
const sh_table *shared_table() {
  std::call_once(g_sh_once, [] {
    g_sh = new sh_table;
    load_symbols(g_sh);
  });
  return g_sh;
}

/* ---- shadow cells ---- */

/* One byte of shared memory in the running block. gen != the block's
 * generation: nothing wrote it in this block. w, r: last writer and reader
 * (linear thread, -1 none, r == -2 several), each with the barrier epoch and
 * its warp's shuffle count at the access. */
struct scell {
  uint32_t gen, wep, rep, wws, rws;
  int16_t w, r, rwarp;
};
/* One byte of device memory during a launch: writer and reader block
 * (linear + 1; 0 none; reader GMULTI: several). */
struct gcell {
  uint32_t w, r;
};
const uint32_t GMULTI = 0xffffffffu;

/* A range the launch may touch, with its shadow (mapped on demand). */
struct area {
  uintptr_t lo, hi;
  gcell *shadow;
  size_t shadow_bytes;
};

struct launch_ctx {
  std::string kernel;
  const check_info *info;
  std::vector<region> regions; /* device allocations, sorted */
  std::vector<span> spans;     /* their address space, sorted */
  std::vector<area> areas;     /* allowed ranges, sorted, disjoint */
  uintptr_t dev_lo = UINTPTR_MAX, dev_hi = 0;
  int warp;
  /* the calling thread's copy of the shared arrays and their shadow */
  const sh_table *sh;
  uintptr_t tls_base, sh_lo, sh_len;
  scell *shadow;
  uint32_t gen;
  /* fast paths: the area and the shared array last hit, and pages last
   * found to hold no device memory */
  area *hot = NULL;
  const sh_sym *hot_sym = NULL;
  uintptr_t stack_lo = 0, stack_len = 0; /* the running fiber's stack */
  int tid = 0;                           /* and its linear thread index */
  uintptr_t clean[4] = {0, 0, 0, 0};
  unsigned next_clean = 0;
  /* the running block */
  uint32_t block_id; /* linear + 1 */
  uint32_t ep;       /* barriers passed */
  std::vector<uint32_t> wsync;
  std::string err;
};

/* The running launch of this OS thread (NULL: not checking), and the
 * thread's shared-memory shadow, kept across launches. */
__thread launch_ctx *tl_ck;
thread_local std::vector<scell> tl_shadow;
thread_local uint32_t tl_gen;

int cur_tid() {
  const builtins *b = tl_cur;
  return (int)(b->thread_idx.x + b->block_dim.x * (b->thread_idx.y + b->block_dim.y * b->thread_idx.z));
}
std::string tid_str(int linear) {
  const builtins *b = tl_cur;
  char buf[48];
  unsigned x = b->block_dim.x, y = b->block_dim.y;
  snprintf(buf, sizeof buf, "(%u,%u,%u)", linear % x, linear / x % y, linear / (x * y));
  return buf;
}

void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void report(const char *fmt, ...) {
  launch_ctx *c = tl_ck;
  if (!c->err.empty()) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  c->err = buf;
}

/* ---- shared memory ---- */

const sh_sym *sh_find(launch_ctx *c, uintptr_t off) {
  if (c->hot_sym && off - c->hot_sym->off < c->hot_sym->size) return c->hot_sym;
  const std::vector<sh_sym> &v = c->sh->syms;
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].off <= off) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return NULL;
  const sh_sym *s = &v[lo - 1];
  if (off >= s->off + s->size) return NULL;
  c->hot_sym = s;
  return s;
}

/* The array whose end is nearest below off (for an out-of-bounds message). */
const sh_sym *sh_below(const launch_ctx *c, uintptr_t off) {
  const sh_sym *best = NULL;
  for (const sh_sym &s : c->sh->syms)
    if (!s.redzone && s.off <= off) best = &s;
  return best;
}

enum { ACC_READ = 0, ACC_WRITE = 1, ACC_ATOMIC = 2 };
const char *acc_name(int kind) { return kind == ACC_READ ? "read" : kind == ACC_WRITE ? "write" : "atomic"; }

/* True when the earlier access (thread u, epoch e, its warp's shuffle count
 * s) and the current one by t can be concurrent: no barrier between them,
 * and not lanes of one warp with a shuffle between them. */
bool concurrent(const launch_ctx *c, int u, int uwarp, uint32_t e, uint32_t s, int t) {
  if (e != c->ep) return false;
  int tw = t / c->warp;
  if (uwarp == tw && s != c->wsync[tw]) return false;
  return u != t;
}

void shared_access(launch_ctx *c, uintptr_t a, uintptr_t off, size_t n, int kind) {
  const sh_sym *s = sh_find(c, off);
  if (!s) return; /* another TLS variable of the module */
  int t = c->tid;
  if (s->redzone || off + n > s->off + s->size) {
    const sh_sym *arr = s->redzone ? sh_below(c, off) : s;
    if (arr)
      report("memcheck: shared-memory access out of bounds: thread %s %s %zu bytes at %p, %zu bytes past the "
             "start of `%s` (%zu bytes)",
             tid_str(t).c_str(), acc_name(kind), n, (void *)a, (size_t)(off - arr->off), arr->name.c_str(),
             (size_t)arr->size);
    else
      report("memcheck: shared-memory access out of bounds: thread %s %s %zu bytes at %p, outside every "
             "__shared__ array",
             tid_str(t).c_str(), acc_name(kind), n, (void *)a);
    return;
  }
  int tw = t / c->warp;
  uint32_t ws = c->wsync[tw];
  for (size_t i = 0; i < n; i++) {
    scell &x = c->shadow[off - c->sh_lo + i];
    bool fresh = x.gen != c->gen;
    if (kind != ACC_WRITE && fresh) {
      report("initcheck: uninitialised shared-memory read: thread %s %s %zu bytes at %p (`%s` + %zu), which no "
             "thread of this block wrote",
             tid_str(t).c_str(), acc_name(kind), n, (void *)a, s->name.c_str(), (size_t)(off - s->off));
      return;
    }
    if (fresh) {
      x.gen = c->gen;
      x.w = x.r = -1;
    }
    if (kind == ACC_ATOMIC) continue;
    if (x.w >= 0 && concurrent(c, x.w, x.w / c->warp, x.wep, x.wws, t)) {
      report("racecheck: shared-memory data race (%s after write): thread %s %s %zu bytes at %p (`%s` + %zu) "
             "that thread %s wrote with no __syncthreads() between",
             kind == ACC_READ ? "read" : "write", tid_str(t).c_str(), acc_name(kind), n, (void *)a, s->name.c_str(),
             (size_t)(off - s->off), tid_str(x.w).c_str());
      return;
    }
    if (kind == ACC_WRITE) {
      if (x.r != -1 && x.rep == c->ep && (x.r == -2 || x.r != t) && !(x.rwarp == tw && x.rws != ws)) {
        report("racecheck: shared-memory data race (write after read): thread %s writes %zu bytes at %p (`%s` + "
               "%zu) that %s read with no __syncthreads() between",
               tid_str(t).c_str(), n, (void *)a, s->name.c_str(), (size_t)(off - s->off),
               x.r == -2 ? "other threads" : ("thread " + tid_str(x.r)).c_str());
        return;
      }
      x.w = (int16_t)t;
      x.wep = c->ep;
      x.wws = ws;
    } else if (x.r == -1 || x.rep != c->ep) {
      x.r = (int16_t)t;
      x.rep = c->ep;
      x.rwarp = (int16_t)tw;
      x.rws = ws;
    } else {
      if (x.r != t) x.r = -2;
      if (x.rwarp != tw) x.rwarp = -1;
      x.rws = ws;
    }
  }
}

/* ---- device memory ---- */

const region *region_of(const launch_ctx *c, uintptr_t a) {
  const std::vector<region> &v = c->regions;
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].lo <= a) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return NULL;
  const region *r = &v[lo - 1];
  return a < r->hi ? r : NULL;
}
area *area_of(launch_ctx *c, uintptr_t a) {
  std::vector<area> &v = c->areas;
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].lo <= a) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return NULL;
  area *r = &v[lo - 1];
  return a < r->hi ? r : NULL;
}

const span *span_of(const launch_ctx *c, uintptr_t a) {
  const std::vector<span> &v = c->spans;
  size_t lo = 0, hi = v.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (v[mid].lo <= a) lo = mid + 1;
    else hi = mid;
  }
  if (!lo) return NULL;
  const span *r = &v[lo - 1];
  return a < r->hi ? r : NULL;
}

/* An access in the device's address space outside every live allocation:
 * past the end or before the start of one (a redzone), or in one that was
 * freed. */
void outside_live(launch_ctx *c, uintptr_t a, size_t n, int kind, const span *s) {
  char what[256];
  const char *alloc = s->core ? "cached allocator segment" : "device allocation";
  if (s->freed)
    snprintf(what, sizeof what, "inside the device allocation [%p, %p), freed before the launch ran",
             (void *)s->user_lo, (void *)s->user_hi);
  else if (a >= s->user_hi)
    snprintf(what, sizeof what, "%zu bytes past the end of the %s [%p, %p)", (size_t)(a - s->user_hi), alloc,
             (void *)s->user_lo, (void *)s->user_hi);
  else
    snprintf(what, sizeof what, "%zu bytes before the start of the %s [%p, %p)", (size_t)(s->user_lo - a), alloc,
             (void *)s->user_lo, (void *)s->user_hi);
  report("memcheck: invalid global %s of %zu bytes at %p by thread %s: outside every live allocation of gpuemu:%d, "
         "%s",
         acc_name(kind), n, (void *)a, tid_str(cur_tid()).c_str(), c->info->dev, what);
}

void global_oob(launch_ctx *c, uintptr_t a, size_t n, int kind, const region *r) {
  int t = cur_tid();
  /* the operand whose extent is nearest */
  const extent *near = NULL;
  uintptr_t dist = UINTPTR_MAX;
  for (const extent &e : c->info->operands) {
    if (e.lo > r->hi || e.hi < r->lo) continue;
    uintptr_t d = a >= e.hi ? a - e.hi : e.lo > a ? e.lo - a : 0;
    if (d < dist) {
      dist = d;
      near = &e;
    }
  }
  char what[256];
  if (near && a >= near->lo && a < near->hi)
    snprintf(what, sizeof what, "running past the end of operand %d's extent [%p, %p)", near->operand,
             (void *)near->lo, (void *)near->hi);
  else if (near)
    snprintf(what, sizeof what, "%zu bytes %s operand %d's extent [%p, %p)", (size_t)dist,
             a >= near->hi ? "past the end of" : "before", near->operand, (void *)near->lo, (void *)near->hi);
  else
    snprintf(what, sizeof what, "no operand of the launch lies in it");
  report("memcheck: invalid global %s of %zu bytes at %p by thread %s: outside the tensors the launch was "
         "given, %s, inside a %s [%p, %p)",
         acc_name(kind), n, (void *)a, tid_str(t).c_str(), what,
         r->core ? "cached allocator segment" : "device allocation", (void *)r->lo, (void *)r->hi);
}

void area_access(launch_ctx *c, area *ar, uintptr_t a, size_t n, int kind) {
  if (kind == ACC_ATOMIC || !ar->shadow) return;
  uint32_t id = c->block_id;
  gcell *g = ar->shadow + (a - ar->lo);
  for (size_t i = 0; i < n; i++) {
    gcell &x = g[i];
    uint32_t other = 0;
    const char *how = NULL;
    if (x.w && x.w != id) {
      other = x.w;
      how = kind == ACC_READ ? "read after write" : "write after write";
    } else if (kind == ACC_WRITE && x.r && x.r != id) {
      other = x.r;
      how = "write after read";
    }
    if (how) {
      const builtins *b = tl_cur;
      char ob[64];
      if (other == GMULTI) snprintf(ob, sizeof ob, "other blocks");
      else {
        uint32_t o = other - 1, gx = b->grid_dim.x, gy = b->grid_dim.y;
        snprintf(ob, sizeof ob, "block (%u,%u,%u)", o % gx, o / gx % gy, o / (gx * gy));
      }
      report("racecheck: global-memory data race between blocks (%s): thread %s %s %zu bytes at %p that %s "
             "also accessed in this launch, without atomics",
             how, tid_str(cur_tid()).c_str(), acc_name(kind), n, (void *)a, ob);
      return;
    }
    if (kind == ACC_WRITE) x.w = id;
    else if (!x.r) x.r = id;
    else if (x.r != id) x.r = GMULTI;
  }
}

/* Not in the last area hit nor in shared memory. */
void slow_access(launch_ctx *c, uintptr_t a, size_t n, int kind) {
  if (a + n <= c->dev_lo || a >= c->dev_hi) return;
  area *ar = area_of(c, a);
  if (ar && a + n <= ar->hi) {
    c->hot = ar;
    area_access(c, ar, a, n, kind);
    return;
  }
  const region *r = region_of(c, a);
  if (!r) r = region_of(c, a + n - 1);
  if (r) {
    global_oob(c, a, n, kind, r);
    return;
  }
  const span *sp = span_of(c, a);
  if (!sp) sp = span_of(c, a + n - 1);
  if (sp) {
    outside_live(c, a, n, kind, sp);
    return;
  }
  /* not device memory: remember its page when no allocation touches it */
  uintptr_t pg = a >> 12;
  if ((a + n - 1) >> 12 != pg) return;
  uintptr_t lo = pg << 12, hi = lo + 4096;
  const std::vector<region> &v = c->regions;
  auto it = std::lower_bound(v.begin(), v.end(), hi, [](const region &x, uintptr_t h) { return x.lo < h; });
  if (it != v.begin() && std::prev(it)->hi > lo) return;
  const std::vector<span> &w = c->spans;
  auto jt = std::lower_bound(w.begin(), w.end(), hi, [](const span &x, uintptr_t h) { return x.lo < h; });
  if (jt != w.begin() && std::prev(jt)->hi > lo) return;
  c->clean[c->next_clean++ & 3] = pg;
}

inline void access(const void *p, size_t n, int kind) {
  launch_ctx *c = tl_ck;
  if (!c) return;
  uintptr_t a = (uintptr_t)p;
  area *h = c->hot;
  if (h && a - h->lo < h->hi - h->lo && a + n <= h->hi) {
    area_access(c, h, a, n, kind);
    return;
  }
  if (a - c->stack_lo < c->stack_len) return; /* the thread's own locals */
  uintptr_t off = a - c->tls_base;
  if (off - c->sh_lo < c->sh_len) {
    shared_access(c, a, off, n, kind);
    return;
  }
  uintptr_t pg = a >> 12;
  if (pg == c->clean[0] || pg == c->clean[1] || pg == c->clean[2] || pg == c->clean[3]) return;
  slow_access(c, a, n, kind);
}

} // namespace

/* ---- the executor's calls (emu_exec.cc) ---- */

void *launch_begin(const launch_desc &d) {
  launch_ctx *c = new launch_ctx;
  c->info = d.chk.get();
  c->kernel = d.chk->kernel;
  c->warp = d.warp;
  c->sh = shared_table();
  if (!c->sh->error.empty()) c->err = "check mode: " + c->sh->error; /* no silent half-checking */
  c->tls_base = (uintptr_t)&agemu_tls_anchor - c->sh->anchor;
  c->sh_lo = c->sh->lo;
  c->sh_len = c->sh->hi - c->sh->lo;
  if (tl_shadow.size() < c->sh_len) tl_shadow.resize(c->sh_len);
  c->shadow = tl_shadow.data();
  c->regions = d.chk->regions;
  std::sort(c->regions.begin(), c->regions.end(), [](const region &a, const region &b) { return a.lo < b.lo; });
  /* allowed: whole internal allocations, and the operands' extents inside
   * segments; overlapping extents (views, in-place ops) are merged */
  std::vector<extent> ok;
  for (const region &r : c->regions) {
    if (!r.core || !d.chk->have_operands) ok.push_back(extent{r.lo, r.hi, -1});
    if (r.lo < c->dev_lo) c->dev_lo = r.lo;
    if (r.hi > c->dev_hi) c->dev_hi = r.hi;
  }
  c->spans = d.chk->spans;
  std::sort(c->spans.begin(), c->spans.end(), [](const span &a, const span &b) { return a.lo < b.lo; });
  for (const span &s : c->spans) {
    if (s.lo < c->dev_lo) c->dev_lo = s.lo;
    if (s.hi > c->dev_hi) c->dev_hi = s.hi;
  }
  for (const extent &e : d.chk->operands) ok.push_back(e);
  std::sort(ok.begin(), ok.end(), [](const extent &a, const extent &b) { return a.lo < b.lo; });
  for (const extent &e : ok) {
    if (e.hi <= e.lo) continue;
    if (!c->areas.empty() && e.lo <= c->areas.back().hi) {
      if (e.hi > c->areas.back().hi) c->areas.back().hi = e.hi;
      continue;
    }
    c->areas.push_back(area{e.lo, e.hi, NULL, 0});
  }
  for (area &a : c->areas) {
    a.shadow_bytes = (a.hi - a.lo) * sizeof(gcell);
    void *m = mmap(NULL, a.shadow_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      c->err = "check mode: out of address space for shadow memory";
      a.shadow = NULL;
    } else {
      a.shadow = (gcell *)m;
    }
  }
  return c;
}

std::string launch_end(void *ctx) {
  launch_ctx *c = (launch_ctx *)ctx;
  if (tl_ck == c) tl_ck = NULL;
  for (area &a : c->areas)
    if (a.shadow) munmap(a.shadow, a.shadow_bytes);
  std::string e = c->err;
  delete c;
  return e;
}

void block_begin(void *ctx, uint64_t linear, int nthreads) {
  launch_ctx *c = (launch_ctx *)ctx;
  c->block_id = (uint32_t)(linear + 1);
  c->ep = 1;
  c->wsync.assign((size_t)(nthreads + c->warp - 1) / c->warp, 0);
  if (++tl_gen == 0) { /* generations wrapped: forget the old ones */
    std::fill(tl_shadow.begin(), tl_shadow.end(), scell());
    tl_gen = 1;
  }
  c->gen = tl_gen;
  tl_ck = c->err.empty() ? c : NULL;
}
const std::string &block_error(void *ctx) {
  launch_ctx *c = (launch_ctx *)ctx;
  tl_ck = NULL;
  return c->err;
}
void set_thread(void *ctx, int linear, const void *lo, size_t bytes) {
  launch_ctx *c = (launch_ctx *)ctx;
  c->tid = linear;
  c->stack_lo = (uintptr_t)lo;
  c->stack_len = bytes;
}
void barrier(void *ctx) { ((launch_ctx *)ctx)->ep++; }
void warp_sync(void *ctx, int warp) { ((launch_ctx *)ctx)->wsync[warp]++; }
std::string function_name(const void *pc) {
  const sh_table *t = shared_table();
  Dl_info info;
  if (!dladdr(pc, &info)) return "";
  uintptr_t a = (uintptr_t)pc - (t->relative ? (uintptr_t)info.dli_fbase : 0);
  auto it = std::upper_bound(t->fns.begin(), t->fns.end(), a,
                             [](uintptr_t x, const fn_sym &f) { return x < f.addr; });
  if (it == t->fns.begin()) return "";
  --it;
  return a < it->addr + it->size ? demangle(it->mangled.c_str()) : "";
}

} // namespace chk
} // namespace agemu

/* ---- ThreadSanitizer's instrumentation interface, answered by the checker ---- */

using agemu::chk::access;
using agemu::chk::ACC_ATOMIC;
using agemu::chk::ACC_READ;
using agemu::chk::ACC_WRITE;

#define AGEMU_TSAN_API extern "C" AGEMU_HIDDEN
AGEMU_TSAN_API void __tsan_init(void) {}
AGEMU_TSAN_API void __tsan_func_entry(void *pc) { (void)pc; }
AGEMU_TSAN_API void __tsan_func_exit(void) {}
AGEMU_TSAN_API void __tsan_vptr_update(void **vptr, void *v) { (void)vptr; (void)v; }
AGEMU_TSAN_API void __tsan_vptr_read(void **vptr) { (void)vptr; }
AGEMU_TSAN_API void __tsan_read_range(void *p, unsigned long n) { access(p, n, ACC_READ); }
AGEMU_TSAN_API void __tsan_write_range(void *p, unsigned long n) { access(p, n, ACC_WRITE); }
#define AGEMU_RW(n)                                                                                             \
  AGEMU_TSAN_API void __tsan_read##n(void *p) { access(p, n, ACC_READ); }                                      \
  AGEMU_TSAN_API void __tsan_write##n(void *p) { access(p, n, ACC_WRITE); }                                    \
  AGEMU_TSAN_API void __tsan_unaligned_read##n(void *p) { access(p, n, ACC_READ); }                            \
  AGEMU_TSAN_API void __tsan_unaligned_write##n(void *p) { access(p, n, ACC_WRITE); }                          \
  AGEMU_TSAN_API void __tsan_volatile_read##n(void *p) { access(p, n, ACC_READ); }                             \
  AGEMU_TSAN_API void __tsan_volatile_write##n(void *p) { access(p, n, ACC_WRITE); }
AGEMU_RW(1)
AGEMU_RW(2)
AGEMU_RW(4)
AGEMU_RW(8)
AGEMU_RW(16)

/* Atomics: performed for real (streams may run on several OS threads) and
 * checked for bounds, never for races. Memory orders are taken as SEQ_CST. */
#define AGEMU_ATOMIC(bits, T)                                                                                   \
  AGEMU_TSAN_API T __tsan_atomic##bits##_load(const volatile T *a, int mo) {                                    \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                                \
  }                                                                                                             \
  AGEMU_TSAN_API void __tsan_atomic##bits##_store(volatile T *a, T v, int mo) {                                 \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                                   \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_exchange(volatile T *a, T v, int mo) {                                 \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int mo) {                                \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int mo) {                                \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_fetch_and(volatile T *a, T v, int mo) {                                \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_fetch_or(volatile T *a, T v, int mo) {                                 \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                           \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_fetch_xor(volatile T *a, T v, int mo) {                                \
    (void)mo;                                                                                                   \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                          \
  }                                                                                                             \
  AGEMU_TSAN_API int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int fmo) { \
    (void)mo;                                                                                                   \
    (void)fmo;                                                                                                  \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
  }                                                                                                             \
  AGEMU_TSAN_API int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int fmo) {   \
    (void)mo;                                                                                                   \
    (void)fmo;                                                                                                  \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
  }                                                                                                             \
  AGEMU_TSAN_API T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int mo, int fmo) {       \
    (void)mo;                                                                                                   \
    (void)fmo;                                                                                                  \
    access((const void *)a, sizeof(T), ACC_ATOMIC);                                                             \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                           \
    return c;                                                                                                   \
  }
AGEMU_ATOMIC(8, uint8_t)
AGEMU_ATOMIC(16, uint16_t)
AGEMU_ATOMIC(32, uint32_t)
AGEMU_ATOMIC(64, uint64_t)
AGEMU_TSAN_API void __tsan_atomic_thread_fence(int mo) {
  (void)mo;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
AGEMU_TSAN_API void __tsan_atomic_signal_fence(int mo) { (void)mo; }
