/* Execution of one emulated kernel launch: blocks run one after another on
 * the calling OS thread, and a block's threads are cooperative fibers that
 * switch only at __syncthreads and warp shuffles. A hand-written x86-64
 * context switch keeps a switch to a few instructions (ucontext elsewhere).
 * Divergent barriers and shuffles are reported as errors, never hangs. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "emu_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define AGEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AGEMU_ASAN 1
#endif
#endif
#ifdef AGEMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define AGEMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AGEMU_TSAN 1
#endif
#endif
#ifdef AGEMU_TSAN
/* ThreadSanitizer follows each fiber as its own thread of execution. A
 * switch does not synchronise (flag 1): the block's real orderings are
 * acquire/release edges - the block's start and completion, each barrier
 * over the block and each shuffle over its warp - so TSan reports accesses
 * of two threads of a block with no barrier between them. The scheduler's
 * bookkeeping is not shown to it (an ignore region on the scheduler's side:
 * what a fiber writes there only that fiber and the scheduler touch). */
extern "C" void *__tsan_get_current_fiber(void);
extern "C" void *__tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void *fiber);
extern "C" void __tsan_switch_to_fiber(void *fiber, unsigned flags);
extern "C" void __tsan_acquire(void *addr);
extern "C" void __tsan_release(void *addr);
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#define AGEMU_TSAN_NO_SYNC 1u
#define TSAN_ONLY(x) x
/* A finished fiber never returns from agemu_fiber_main (nor from its last
 * to_sched): uninstrumented, they leave no frame on the pooled TSan fiber's
 * shadow stack, which would otherwise grow by one per reuse until TSan
 * aborts. */
#define AGEMU_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define TSAN_ONLY(x)
#define AGEMU_NO_TSAN
#endif

#if defined(__x86_64__)
/* agemu_switch(from, to): save the callee-saved registers on the current
 * stack, store its pointer in *from, load to, restore and return there. */
extern "C" void agemu_switch(void **from, void *to);
asm(".text\n"
    ".p2align 4\n"
    ".globl agemu_switch\n"
    ".hidden agemu_switch\n"
    ".type agemu_switch,@function\n"
    "agemu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size agemu_switch, .-agemu_switch\n"
    ".section .note.GNU-stack,\"\",@progbits\n"
    ".text\n");
#define AGEMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace agemu {

__thread builtins *tl_cur;

namespace {

enum tstate { T_RUN, T_BAR, T_SHFL, T_DONE };

struct ethread {
  builtins b;        /* first: tl_cur points here */
  void *sp;          /* saved stack pointer while switched out */
#ifndef AGEMU_ASM_SWITCH
  ucontext_t uc;
#endif
  char *stack;       /* usable stack [stack, stack + stack_size) */
  void *tsan_fiber;
  size_t stack_size;
  void *asan_fake;
  int linear, state;
  const char *file;  /* where it waits */
  int line;
  int kind, arg, width;
  uint64_t mask, value, result;
};

struct eblock {
  std::vector<ethread> t;
  const std::function<void()> *body;
  void *sched_sp;
#ifndef AGEMU_ASM_SWITCH
  ucontext_t sched_uc;
#endif
  const void *sched_stack;
  size_t sched_stack_size;
  void *sched_fake;
  void *sched_tsan;
  ethread *cur;
  int nthreads, warp;
  bool strict;
  void *ck; /* the checker's launch, or NULL */
  uint32_t bar_count;          /* barriers passed by the running block */
  std::vector<uint32_t> shfl_count; /* shuffles completed, per warp */
  /* TSan's synchronisation objects (addresses only): block start and
   * completion, barriers by parity, each warp's shuffles by parity */
  char sync_start, sync_done, sync_bar[2];
  std::vector<char> sync_warp;
  std::string err;
};

thread_local eblock *tl_block;

/* Fiber stacks are kept per OS thread and reused across launches; each has a
 * guard page below it so an overflow faults instead of corrupting memory. */
struct stack_pool {
  std::vector<char *> free_list;
  size_t size = 0;
  ~stack_pool() {
    long pg = sysconf(_SC_PAGESIZE);
    for (char *s : free_list) munmap(s - pg, size + pg);
  }
};
thread_local stack_pool tl_stacks;

size_t stack_bytes() {
#ifdef AGEMU_ASAN
  return 256 << 10;
#else
  return 64 << 10;
#endif
}

char *stack_get() {
  stack_pool &p = tl_stacks;
  if (!p.size) p.size = stack_bytes();
  if (!p.free_list.empty()) {
    char *s = p.free_list.back();
    p.free_list.pop_back();
    return s;
  }
  long pg = sysconf(_SC_PAGESIZE);
  void *m = mmap(NULL, p.size + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return NULL;
  mprotect(m, pg, PROT_NONE);
  return (char *)m + pg;
}
void stack_put(char *s) { tl_stacks.free_list.push_back(s); }

#ifdef AGEMU_TSAN
/* TSan fibers are costly to create: pooled per OS thread like the stacks. */
struct tsan_pool {
  std::vector<void *> free_list;
  ~tsan_pool() {
    for (void *f : free_list) __tsan_destroy_fiber(f);
  }
};
thread_local tsan_pool tl_tsan;
void *tsan_get() {
  if (tl_tsan.free_list.empty()) return __tsan_create_fiber(0);
  void *f = tl_tsan.free_list.back();
  tl_tsan.free_list.pop_back();
  return f;
}
void tsan_put(void *f) { tl_tsan.free_list.push_back(f); }
#endif

AGEMU_NO_TSAN void to_sched(ethread *t, bool exiting) {
  eblock *b = tl_block;
#ifdef AGEMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? NULL : &t->asan_fake, b->sched_stack, b->sched_stack_size);
#endif
#ifdef AGEMU_TSAN
  __tsan_switch_to_fiber(b->sched_tsan, AGEMU_TSAN_NO_SYNC);
#endif
#ifdef AGEMU_ASM_SWITCH
  agemu_switch(&t->sp, b->sched_sp);
#else
  swapcontext(&t->uc, &b->sched_uc);
#endif
#ifdef AGEMU_ASAN
  __sanitizer_finish_switch_fiber(t->asan_fake, NULL, NULL);
#endif
  (void)exiting;
}

AGEMU_NO_TSAN void agemu_fiber_main(void) {
  eblock *b = tl_block;
  ethread *t = b->cur;
#ifdef AGEMU_ASAN
  __sanitizer_finish_switch_fiber(NULL, &b->sched_stack, &b->sched_stack_size);
#endif
  TSAN_ONLY(__tsan_acquire(&b->sync_start));
  (*b->body)();
  t->state = T_DONE;
  TSAN_ONLY(__tsan_release(&b->sync_done));
  to_sched(t, true);
  abort(); /* a finished fiber is never resumed */
}

void resume(eblock *b, ethread *t) {
  b->cur = t;
  tl_cur = &t->b;
#ifdef AGEMU_CHECK
  if (b->ck) chk::set_thread(b->ck, t->linear, t->stack, t->stack_size);
#endif
#ifdef AGEMU_ASAN
  __sanitizer_start_switch_fiber(&b->sched_fake, t->stack, t->stack_size);
#endif
#ifdef AGEMU_TSAN
  __tsan_switch_to_fiber(t->tsan_fiber, AGEMU_TSAN_NO_SYNC);
#endif
#ifdef AGEMU_ASM_SWITCH
  agemu_switch(&b->sched_sp, t->sp);
#else
  swapcontext(&b->sched_uc, &t->uc);
#endif
#ifdef AGEMU_ASAN
  __sanitizer_finish_switch_fiber(b->sched_fake, NULL, NULL);
#endif
}

void fiber_init(eblock *b, ethread *t) {
#ifdef AGEMU_ASM_SWITCH
  /* The first switch pops six zero registers and returns into
   * agemu_fiber_main with the stack aligned as after a call. */
  uintptr_t top = ((uintptr_t)t->stack + t->stack_size) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = NULL;                         /* agemu_fiber_main's return address */
  *--sp = (void *)&agemu_fiber_main;    /* agemu_switch returns here */
  for (int i = 0; i < 6; i++) *--sp = NULL;
  t->sp = sp;
  (void)b;
#else
  getcontext(&t->uc);
  t->uc.uc_stack.ss_sp = t->stack;
  t->uc.uc_stack.ss_size = t->stack_size;
  t->uc.uc_link = NULL;
  makecontext(&t->uc, (void (*)(void))agemu_fiber_main, 0);
  (void)b;
#endif
}

std::string ranges(const eblock *b, int state) {
  std::string s;
  int n = 0;
  for (int i = 0; i < b->nthreads;) {
    if (b->t[i].state != state) { i++; continue; }
    int j = i;
    while (j + 1 < b->nthreads && b->t[j + 1].state == state) j++;
    char buf[48];
    if (j > i) snprintf(buf, sizeof buf, "%s%d-%d", n ? "," : "", i, j);
    else snprintf(buf, sizeof buf, "%s%d", n ? "," : "", i);
    s += buf;
    n++;
    i = j + 1;
  }
  return s.empty() ? "none" : s;
}

void fail(eblock *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(eblock *b, const char *fmt, ...) {
  if (!b->err.empty()) return;
  char buf[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  b->err = buf;
}

/* Lane that lane L reads for one shuffle, or -1 for "its own value". */
int shfl_src(int kind, int lane, int arg, int width) {
  int seg = lane / width * width, src;
  switch (kind) {
    case SHFL_XOR:
      src = lane ^ arg;
      return src >= seg + width ? -1 : src;
    case SHFL_DOWN:
      src = lane + arg;
      return src >= seg + width ? -1 : src;
    case SHFL_UP:
      src = lane - arg;
      return src < seg ? -1 : src;
    default:
      return seg + ((arg % width) + width) % width;
  }
}

/* Complete the shuffles of warps whose live lanes all wait at one. Returns
 * true when some lane can run again; sets b->err on divergent use. */
bool resolve_shuffles(eblock *b) {
  bool progressed = false;
  int W = b->warp;
  for (int w0 = 0; w0 < b->nthreads; w0 += W) {
    int w1 = w0 + W < b->nthreads ? w0 + W : b->nthreads;
    ethread *first = NULL;
    for (int i = w0; i < w1; i++)
      if (b->t[i].state == T_SHFL) { first = &b->t[i]; break; }
    if (!first) continue;
    uint64_t full = W == 64 ? ~0ull : ((1ull << W) - 1);
    uint64_t mask = first->mask ? first->mask & full : full;
    for (int i = w0; i < w1; i++) {
      ethread *t = &b->t[i];
      int lane = i - w0;
      bool named = (mask >> lane) & 1;
      if (t->state == T_SHFL) {
        uint64_t m = t->mask ? t->mask & full : full;
        if (t->kind != first->kind || t->width != first->width || m != mask || t->file != first->file ||
            t->line != first->line) {
          fail(b, "divergent warp shuffle: lanes of warp %d wait at different shuffles (%s:%d and %s:%d)",
               w0 / W, first->file, first->line, t->file, t->line);
          return false;
        }
        if (!named) {
          fail(b, "warp shuffle at %s:%d: lane %d is not named in its own mask 0x%llx", t->file, t->line, lane,
               (unsigned long long)mask);
          return false;
        }
      } else if (named && t->state == T_BAR) {
        fail(b, "divergent warp shuffle at %s:%d: lanes %d.. of warp %d wait at it while lane %d waits at "
                "__syncthreads (%s:%d)",
             first->file, first->line, (int)(first - &b->t[w0]), w0 / W, lane, t->file, t->line);
        return false;
      }
    }
    int width = first->width;
    if (width <= 0 || width > W || (width & (width - 1))) {
      fail(b, "warp shuffle at %s:%d: width %d is not a power of two up to the warp size %d", first->file,
           first->line, width, W);
      return false;
    }
    for (int i = w0; i < w1; i++) {
      ethread *t = &b->t[i];
      if (t->state != T_SHFL) continue;
      int lane = i - w0, src = shfl_src(t->kind, lane, t->arg, width);
      if (src < 0 || src == lane) {
        t->result = t->value;
      } else if (w0 + src < w1 && b->t[w0 + src].state == T_SHFL) {
        t->result = b->t[w0 + src].value;
      } else {
        if (b->strict) {
          fail(b, "warp shuffle at %s:%d: lane %d of warp %d reads lane %d, which has exited or is not in the mask",
               t->file, t->line, lane, w0 / W, src);
          return false;
        }
        t->result = t->value; /* undefined on a device */
      }
    }
    for (int i = w0; i < w1; i++)
      if (b->t[i].state == T_SHFL) b->t[i].state = T_RUN;
    b->shfl_count[w0 / W]++;
#ifdef AGEMU_CHECK
    if (b->ck) chk::warp_sync(b->ck, w0 / W);
#endif
    progressed = true;
  }
  return progressed;
}

bool resolve_barrier(eblock *b) {
  ethread *first = NULL;
  for (int i = 0; i < b->nthreads; i++) {
    ethread *t = &b->t[i];
    if (t->state == T_DONE) continue;
    if (t->state != T_BAR) return false;
    if (!first) first = t;
    else if (t->file != first->file || t->line != first->line) {
      fail(b, "divergent __syncthreads: thread %d waits at %s:%d, thread %d at %s:%d", first->linear, first->file,
           first->line, t->linear, t->file, t->line);
      return false;
    }
  }
  if (!first) return false;
  for (int i = 0; i < b->nthreads; i++)
    if (b->t[i].state == T_BAR) b->t[i].state = T_RUN;
  b->bar_count++;
#ifdef AGEMU_CHECK
  if (b->ck) chk::barrier(b->ck);
#endif
  return true;
}

void wait_here(int state, const char *file, int line) {
  eblock *b = tl_block;
  if (!b) {
    fprintf(stderr, "gpuemu: %s:%d: barrier or shuffle outside a kernel\n", file, line);
    abort();
  }
  ethread *t = b->cur;
#ifdef AGEMU_TSAN
  /* this thread's accesses so far happen before every access after the
   * barrier (the whole block) or the shuffle (its warp) */
  char *sync = state == T_BAR ? &b->sync_bar[b->bar_count & 1]
                              : &b->sync_warp[2 * (t->linear / b->warp) + (b->shfl_count[t->linear / b->warp] & 1)];
  __tsan_release(sync);
  /* and before the block's completion, even when an error abandons it here */
  __tsan_release(&b->sync_done);
#endif
  t->state = state;
  t->file = file;
  t->line = line;
  to_sched(t, false);
  TSAN_ONLY(__tsan_ignore_thread_begin()); /* every fiber writes tl_cur */
  tl_cur = &t->b;
  TSAN_ONLY(__tsan_ignore_thread_end());
  TSAN_ONLY(__tsan_acquire(sync));
}

/* splitmix64: the schedules' generator (small, and a fixed function of
 * the seed on every platform). */
uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
void shuffle(std::vector<int> &v, uint64_t *rng) {
  for (size_t i = v.size(); i > 1; i--) {
    size_t j = (size_t)(next_rand(rng) % i);
    int x = v[i - 1];
    v[i - 1] = v[j];
    v[j] = x;
  }
}
uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* The order in which a launch's blocks run: forward, reverse, or a random
 * permutation (shuffled up to 2^20 blocks; above that an affine map
 * k -> (a k + c) mod n with a coprime to n, which needs no memory). */
struct block_order {
  uint64_t n, a = 1, c = 0;
  int sched;
  std::vector<uint32_t> perm;
  block_order(const launch_desc &d, uint64_t *rng) : sched(d.sched) {
    n = (uint64_t)d.grid.x * d.grid.y * d.grid.z;
    if (sched != SCHED_RANDOM) return;
    if (n <= (1u << 20)) {
      perm.resize(n);
      for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
      for (uint64_t i = n; i > 1; i--) {
        uint64_t j = next_rand(rng) % i;
        uint32_t x = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = x;
      }
    } else {
      do a = next_rand(rng) % n | 1;
      while (gcd64(a, n) != 1);
      c = next_rand(rng) % n;
    }
  }
  uint64_t at(uint64_t k) const {
    if (sched == SCHED_FORWARD) return k;
    if (sched == SCHED_REVERSE) return n - 1 - k;
    if (!perm.empty()) return perm[k];
    return (uint64_t)(((unsigned __int128)a * k + c) % n);
  }
};

} // namespace

void syncthreads(const char *file, int line) { wait_here(T_BAR, file, line); }

uint64_t shfl(uint64_t v, int kind, int arg, int width, uint64_t mask, const char *file, int line) {
  eblock *b = tl_block;
  ethread *t = b ? b->cur : NULL;
  if (t) {
    t->kind = kind;
    t->arg = arg;
    t->width = width;
    t->mask = mask;
    t->value = v;
  }
  wait_here(T_SHFL, file, line);
  return t->result;
}

/* Run every block of one launch. Returns "" or what went wrong. */
namespace {
std::string run_grid_impl(const launch_desc &d, const std::function<void()> &body) {
  eblock b;
  b.body = &body;
  b.nthreads = (int)(d.block.x * d.block.y * d.block.z);
  b.warp = d.warp;
  b.strict = d.strict;
  b.ck = NULL;
  b.t.resize(b.nthreads);
  b.sync_warp.resize(2 * (size_t)((b.nthreads + b.warp - 1) / b.warp));
#ifdef AGEMU_TSAN
  b.sched_tsan = __tsan_get_current_fiber();
  for (int i = 0; i < b.nthreads; i++) b.t[i].tsan_fiber = tsan_get();
#endif
  eblock *saved_block = tl_block;
  builtins *saved_cur = tl_cur;
  tl_block = &b;
  for (int i = 0; i < b.nthreads; i++) {
    b.t[i].stack = stack_get();
    b.t[i].stack_size = tl_stacks.size;
    if (!b.t[i].stack) {
      for (int j = 0; j < i; j++) stack_put(b.t[j].stack);
#ifdef AGEMU_TSAN
      for (int j = 0; j < b.nthreads; j++) tsan_put(b.t[j].tsan_fiber);
#endif
      tl_block = saved_block;
      tl_cur = saved_cur;
      return "out of host memory for fiber stacks";
    }
  }
  std::string err;
  uint64_t rng = d.seed;
  std::vector<int> order(b.nthreads);
  for (int i = 0; i < b.nthreads; i++) order[i] = d.sched == SCHED_REVERSE ? b.nthreads - 1 - i : i;
  block_order bo(d, &rng);
#ifdef AGEMU_CHECK
  if (d.chk) b.ck = chk::launch_begin(d);
#endif
  for (uint64_t k = 0; k < bo.n && err.empty(); k++) {
    uint64_t lin = bo.at(k);
    unsigned bx = (unsigned)(lin % d.grid.x), by = (unsigned)(lin / d.grid.x % d.grid.y),
             bz = (unsigned)(lin / ((uint64_t)d.grid.x * d.grid.y));
    for (int i = 0; i < b.nthreads; i++) {
      ethread &t = b.t[i];
      t.b.thread_idx.x = i % d.block.x;
      t.b.thread_idx.y = i / d.block.x % d.block.y;
      t.b.thread_idx.z = i / (d.block.x * d.block.y);
      t.b.block_idx.x = bx;
      t.b.block_idx.y = by;
      t.b.block_idx.z = bz;
      t.b.block_dim = d.block;
      t.b.grid_dim = d.grid;
      t.b.warp = d.warp;
      t.linear = i;
      t.state = T_RUN;
      t.asan_fake = NULL;
      fiber_init(&b, &t);
    }
    b.bar_count = 0;
    b.shfl_count.assign((size_t)((b.nthreads + b.warp - 1) / b.warp), 0);
    /* blocks run one after another on this thread: TSan sees each start
     * after the previous block's completion (so one block's shared memory
     * reused by the next is no race; races between blocks are the
     * checker's, AG_GPUEMU_CHECK=1) */
    TSAN_ONLY(__tsan_release(&b.sync_start));
#ifdef AGEMU_CHECK
    if (b.ck) chk::block_begin(b.ck, lin, b.nthreads);
#endif
    for (;;) {
      bool any = false, live = false;
      if (d.sched == SCHED_RANDOM) shuffle(order, &rng);
      for (int k2 = 0; k2 < b.nthreads; k2++) {
        int i = order[k2];
        if (b.t[i].state == T_RUN) {
          resume(&b, &b.t[i]);
          any = true;
        }
        if (b.t[i].state != T_DONE) live = true;
      }
      if (!live) break;
      if (any) continue;
      if (resolve_shuffles(&b) || (b.err.empty() && resolve_barrier(&b))) continue;
      if (b.err.empty())
        fail(&b, "block cannot make progress: threads %s wait at __syncthreads, %s at a warp shuffle",
             ranges(&b, T_BAR).c_str(), ranges(&b, T_SHFL).c_str());
      break;
    }
    TSAN_ONLY(__tsan_acquire(&b.sync_done));
#ifdef AGEMU_CHECK
    if (b.ck && b.err.empty()) b.err = chk::block_error(b.ck);
#endif
    if (!b.err.empty()) {
      char where[96];
      snprintf(where, sizeof where, "block (%u,%u,%u) of grid (%u,%u,%u): ", bx, by, bz, d.grid.x, d.grid.y,
               d.grid.z);
      err = where + b.err;
    }
  }
#ifdef AGEMU_CHECK
  if (b.ck) {
    std::string ce = chk::launch_end(b.ck);
    if (err.empty() && !ce.empty()) err = ce;
  }
#endif
  for (int i = 0; i < b.nthreads; i++) stack_put(b.t[i].stack);
#ifdef AGEMU_TSAN
  for (int i = 0; i < b.nthreads; i++) tsan_put(b.t[i].tsan_fiber);
#endif
  tl_block = saved_block;
  tl_cur = saved_cur;
  return err;
}
} // namespace

std::string run_grid(const launch_desc &d, const std::function<void()> &body) {
  /* the scheduler's bookkeeping, its destruction included, is not shown to
   * TSan (see the top) */
  TSAN_ONLY(__tsan_ignore_thread_begin());
  std::string err = run_grid_impl(d, body);
  TSAN_ONLY(__tsan_ignore_thread_end());
  return err;
}

} // namespace agemu
