/* Process groups: the public collectives API, argument checks, and the
 * per-rank communication worker that every implementation shares. The
 * worker runs each collective in call order: it waits for the caller's
 * stream (an event), stages device data through pinned host memory when the
 * implementation works on host buffers (widening f16/bf16 for those that
 * cannot reduce them; CPU tensors are used in place), runs the
 * implementation with a deadline, and copies the result back on the rank's
 * communication stream. Implementations on device buffers (NCCL, RCCL) get
 * f16/bf16 sums widened on the device too, so every path sums halves in f32
 * and rounds once. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/loader.h"
#include "dist_internal.h"
#include "memory/block.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"

#define DEFAULT_TIMEOUT_MS 300000

struct ag_work {
  atomic_int refs; /* the caller's and the worker's */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int state;         /* 0 queued, 1 host phase done, results copying on `done` */
  ag_status st;
  char msg[512];
  ag_event *start;   /* recorded on the caller's stream at the call */
  ag_event *done;    /* recorded on the comm stream after the copy back; NULL if none */
  int64_t timeout_ms;
  /* the collective */
  ag_coll_kind kind;
  ag_dist_reduce op;
  int root;
  uint64_t seq;
  ag_tensor *in, *out; /* private references; out may be NULL (in place) */
  struct ag_work *next;
};

struct ag_group {
  ag_dist_kind kind;
  int rank, size;
  ag_device dev;
  ag_devstate *ds;
  int64_t timeout_ms;
  const ag_dist_module *mod;
  ag_dist_impl *im;
  ag_dist_caps caps;
  bool half_f32; /* device buffers: f16/bf16 sums widened to f32 (AG_DIST_HALF_REDUCE) */
  ag_stream *comm;
  uint64_t seq;
  /* worker */
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  ag_work *head, *tail;
  bool busy; /* a collective is running (on the worker or inline) */
  bool stop;
  /* local view of a broken group (the implementation has the shared one) */
  ag_status broken_st;
  char broken_msg[512];
};

/* The group's tensors are host memory the process addresses (the backend's
 * flags; the cpu backend's today): collectives use them in place after a
 * host wait, with no staging copies and no stream events. */
static bool host_direct(const ag_group *g) {
  const uint32_t both = AG_BACKEND_F_HOST_MEMORY | AG_BACKEND_F_ADDRESSABLE;
  return (g->ds->be->flags & both) == both;
}

static const char *const k_kind_names[AG_DIST_KIND_COUNT] = {"inproc", "mpi", "nccl", "rccl"};
static const char *const k_coll_fn[] = {"ag_all_reduce", "ag_broadcast", "ag_all_gather",
                                        "ag_reduce_scatter", "ag_group_barrier"};

const char *ag_dist_kind_name(ag_dist_kind kind) {
  return (kind >= 0 && kind < AG_DIST_KIND_COUNT) ? k_kind_names[kind] : "?";
}

bool ag_dist_available(ag_dist_kind kind, char *why, size_t n) {
  if (why && n) why[0] = 0;
  if (kind == AG_DIST_INPROC) return ag__dist_inproc_module()->probe(why, n);
  if (kind < 0 || kind >= AG_DIST_KIND_COUNT) {
    if (why && n) snprintf(why, n, "unknown communication library %d", (int)kind);
    return false;
  }
  char buf[512];
  const ag_dist_module *m = ag__dist_module(kind, buf, sizeof buf);
  if (why && n) snprintf(why, n, "%s", buf);
  return m != NULL;
}

void ag_group_options_default(ag_group_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

/* The timeout in force: the option, else AG_DIST_TIMEOUT_MS, else 5 min. */
static ag_status resolve_timeout(const char *fn, const ag_group_options *o, int64_t *out) {
  if (o && (o->timeout_ms < 0 || o->timeout_ms > AG_DIST_MAX_TIMEOUT_MS))
    return ag_error_set(AG_ERR_INVALID, "%s: timeout_ms %lld is outside 0..%lld", fn, (long long)o->timeout_ms,
                        (long long)AG_DIST_MAX_TIMEOUT_MS);
  if (o && o->timeout_ms > 0) {
    *out = o->timeout_ms;
    return AG_OK;
  }
  /* The strict parser of every AG_* number: garbage, overflow and values
   * out of range are refused rather than turned into a deadline. */
  ag_status st = ag_env_i64("AG_DIST_TIMEOUT_MS", 1, AG_DIST_MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, out);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(st, "%s: %s (milliseconds)", fn, msg);
  }
  return AG_OK;
}

static void cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}

static struct timespec to_ts(int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  return ts;
}

/* ---- work handles ---- */

static void work_unref(ag_work *w) {
  if (!w || atomic_fetch_sub(&w->refs, 1) != 1) return;
  ag_event_destroy(w->start);
  ag_event_destroy(w->done);
  ag_tensor_release(w->in);
  ag_tensor_release(w->out);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
}

static void work_finish(ag_work *w, ag_status st, const char *msg) {
  /* The tensors are not needed any more: the copy back (if any) is on the
   * comm stream, where record_stream keeps their memory. A caller holding
   * the work handle does not hold them. */
  ag_tensor_release(w->in);
  ag_tensor_release(w->out);
  w->in = w->out = NULL;
  pthread_mutex_lock(&w->mu);
  w->st = st;
  if (st != AG_OK) snprintf(w->msg, sizeof w->msg, "%s", msg);
  w->state = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

/* Wait for the host phase. The worker bounds each collective by the timeout
 * and fails the ones queued behind a failure at once, so this returns within
 * about one timeout; twice the timeout is a safety net that should never
 * fire. */
static ag_status work_wait_host(ag_work *w, const char *fn) {
  int64_t deadline = ag__dist_deadline_ns(2 * w->timeout_ms);
  struct timespec ts = to_ts(deadline);
  pthread_mutex_lock(&w->mu);
  while (w->state == 0) {
    int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (rc == ETIMEDOUT && w->state == 0) {
      pthread_mutex_unlock(&w->mu);
      return ag_error_set(AG_ERR_TIMEOUT, "%s: collective #%llu (%s) did not complete within %lld ms", fn,
                          (unsigned long long)w->seq, k_coll_fn[w->kind], (long long)w->timeout_ms);
    }
    if (rc != 0 && rc != ETIMEDOUT) { /* EINVAL would otherwise spin here holding the mutex */
      pthread_mutex_unlock(&w->mu);
      return ag_error_set(AG_ERR_INTERNAL, "%s: waiting for collective #%llu failed: %s", fn,
                          (unsigned long long)w->seq, strerror(rc));
    }
  }
  ag_status st = w->st;
  if (st != AG_OK) ag_error_set(st, "%s", w->msg);
  pthread_mutex_unlock(&w->mu);
  return st;
}

ag_status ag_work_wait(ag_work *w) {
  if (!w) return ag_error_set(AG_ERR_INVALID, "ag_work_wait: NULL work");
  ag_status st = work_wait_host(w, "ag_work_wait");
  if (st == AG_OK && w->done) st = ag__sync_event(w->done, "ag_work_wait");
  return st;
}

bool ag_work_test(const ag_work *w) {
  if (!w) return false;
  ag_work *m = (ag_work *)w;
  pthread_mutex_lock(&m->mu);
  int state = m->state;
  pthread_mutex_unlock(&m->mu);
  if (state == 0) return false;
  return !m->done || ag_event_query(m->done);
}

ag_status ag_work_stream_wait(ag_work *w, ag_stream *s) {
  if (!w || !s) return ag_error_set(AG_ERR_INVALID, "ag_work_stream_wait: NULL %s", w ? "stream" : "work");
  ag_status st = work_wait_host(w, "ag_work_stream_wait");
  if (st != AG_OK || !w->done) return st;
  if (s->ds == w->done->ds) return ag_stream_wait_event(s, w->done);
  /* Another device: its stream cannot wait on this device's event. */
  return ag__sync_event(w->done, "ag_work_stream_wait");
}

void ag_work_release(ag_work *w) { work_unref(w); }

/* ---- the worker ---- */

static void group_break(ag_group *g, ag_status st, const char *msg) {
  pthread_mutex_lock(&g->mu);
  if (g->broken_st == AG_OK) {
    g->broken_st = st;
    snprintf(g->broken_msg, sizeof g->broken_msg, "%s", msg);
  }
  pthread_mutex_unlock(&g->mu);
  g->mod->abort(g->im, st, msg);
}

/* Byte address of t's first element on its device (host memory for CPU). */
static void tensor_span(const ag_tensor *t, void **base, size_t *off, size_t *bytes) {
  size_t es = ag_dtype_size(t->dtype);
  *base = t->st->base;
  *off = t->st->offset + (size_t)t->offset * es;
  *bytes = (size_t)t->numel * es;
}

/* Device -> pinned host on the comm stream; the caller synchronizes. */
static ag_status stage_down(ag_group *g, const ag_tensor *t, void *host) {
  void *base;
  size_t off, bytes;
  tensor_span(t, &base, &off, &bytes);
  if (!bytes) return AG_OK;
  return g->ds->be->copy_d2h(g->comm->bs, host, base, off, bytes);
}

static ag_status stage_up(ag_group *g, ag_tensor *t, const void *host) {
  void *base;
  size_t off, bytes;
  tensor_span(t, &base, &off, &bytes);
  if (!bytes) return AG_OK;
  return g->ds->be->copy_h2d(g->comm->bs, base, off, host, bytes, true);
}

/* Run one collective through pinned host buffers. */
static ag_status run_host(ag_group *g, ag_work *w, int64_t deadline) {
  if (w->kind == AG_COLL_BARRIER) {
    ag_coll c = {.kind = AG_COLL_BARRIER, .dtype = AG_F32, .op = AG_DIST_SUM, .seq = w->seq};
    return g->mod->run(g->im, &c, deadline);
  }
  ag_tensor *in = w->in, *out = w->out ? w->out : w->in;
  ag_dtype dt = in->dtype;
  size_t es = ag_dtype_size(dt);
  bool widen = ag__dist_wire_dtype(dt) != dt && !g->caps.native_half;
  size_t wes = ag_dtype_size(ag__dist_wire_dtype(dt));
  size_t in_n = (size_t)in->numel, out_n = (size_t)out->numel;
  bool separate_out = w->kind == AG_COLL_ALL_GATHER || w->kind == AG_COLL_REDUCE_SCATTER;
  void *hin = NULL, *hout = NULL, *win = NULL, *wout = NULL;
  ag_status st = AG_OK;
  /* Host-addressable tensors (the cpu's) need no staging: the collective
   * works in place once the caller's queued work on them is done. */
  bool direct = host_direct(g);
  bool need_data = !(w->kind == AG_COLL_BROADCAST && g->rank != w->root) && w->kind != AG_COLL_BARRIER;
  if (direct) {
    /* no start event: run on the caller's thread (submit), which waits for
     * its own stream instead */
    st = w->start ? g->ds->be->event_synchronize(w->start->be)
                  : g->ds->be->stream_synchronize(ag__current_stream(g->ds)->bs);
    if (st != AG_OK) goto done;
    void *base;
    size_t off, bytes;
    tensor_span(in, &base, &off, &bytes);
    hin = (char *)base + off;
    if (separate_out) {
      tensor_span(out, &base, &off, &bytes);
      hout = (char *)base + off;
    }
  } else {
    /* pinned blocks are never 0 bytes */
    if ((st = ag_pinned_alloc(g->dev, in_n * es + 1, &hin)) != AG_OK) goto done;
    if (separate_out && (st = ag_pinned_alloc(g->dev, out_n * es + 1, &hout)) != AG_OK) goto done;
  }
  if (need_data && !direct) {
    if ((st = stage_down(g, in, hin)) != AG_OK) goto done;
    /* The worker's own wait: it blocks no user thread, so it is not a sync
     * the training loop pays for (and sync-debug mode does not refuse it). */
    if ((st = g->ds->be->stream_synchronize(g->comm->bs)) != AG_OK) goto done;
  }
  ag_coll c = {.kind = w->kind, .dtype = dt, .op = w->op, .root = w->root, .buf = hin, .out = hout,
               .count = w->kind == AG_COLL_REDUCE_SCATTER ? out_n : in_n, .seq = w->seq};
  if (widen) {
    win = malloc(in_n * wes + 1);
    wout = separate_out ? malloc(out_n * wes + 1) : NULL;
    if (!win || (separate_out && !wout)) {
      st = ag_error_set(AG_ERR_OOM, "%s: out of host memory widening %s", k_coll_fn[w->kind], ag_dtype_name(dt));
      goto done;
    }
    if (need_data) ag__dist_widen(dt, hin, win, in_n);
    c.dtype = ag__dist_wire_dtype(dt);
    c.buf = win;
    c.out = wout;
  }
  bool avg_here = (c.op == AG_DIST_AVG) && !g->caps.native_avg &&
                  (w->kind == AG_COLL_ALL_REDUCE || w->kind == AG_COLL_REDUCE_SCATTER);
  if (avg_here) c.op = AG_DIST_SUM;
  if ((st = g->mod->run(g->im, &c, deadline)) != AG_OK) goto done;
  void *res = separate_out ? c.out : c.buf;
  if (avg_here) ag__dist_divide(c.dtype, res, separate_out ? out_n : in_n, (double)g->size);
  if (widen) ag__dist_narrow(dt, res, separate_out ? hout : hin, separate_out ? out_n : in_n);
  if (!direct) {
    void *h = separate_out ? hout : hin;
    if ((st = stage_up(g, out, h)) != AG_OK) goto done;
    if ((st = ag_pinned_record_stream(h, g->comm)) != AG_OK) goto done;
  }
done:
  free(win);
  free(wout);
  if (!direct) {
    ag_pinned_free(hin); /* reused only after the copies recorded on it */
    ag_pinned_free(hout);
  }
  return st;
}

/* Whether a collective on device buffers runs f16/bf16 as f32: always for
 * an implementation without native_half (CUDA-aware MPI), as on the host
 * path; else for a sum or average, unless the group keeps halves on the
 * wire (max and min are exact in any dtype, broadcast and all-gather move
 * bytes). */
static bool device_widens(const ag_group *g, const ag_work *w, ag_dtype dt) {
  if (ag__dist_wire_dtype(dt) == dt) return false;
  if (!g->caps.native_half) return true;
  return g->half_f32 && (w->kind == AG_COLL_ALL_REDUCE || w->kind == AG_COLL_REDUCE_SCATTER) &&
         (w->op == AG_DIST_SUM || w->op == AG_DIST_AVG);
}

/* n elements at address p (dtype dt) as a 1-D contiguous operand. */
static ag_koperand flat_operand(void *base, size_t off, ag_dtype dt, size_t n) {
  ag_koperand o;
  memset(&o, 0, sizeof o);
  o.base = base;
  o.offset = off;
  o.dtype = dt;
  o.ndim = 1;
  o.shape[0] = (int64_t)n;
  o.strides[0] = 1;
  return o;
}

/* dst = src with a cast (f16/bf16 <-> f32), n elements, on the comm stream. */
static ag_status cast_on_comm(ag_group *g, ag_koperand dst, ag_koperand src, const char *fn) {
  if (!dst.shape[0]) return AG_OK;
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_UNARY, AG_U_COPY, fn, 2, NULL);
  c.o[0] = dst;
  c.o[1] = src;
  ag_stream *prev = ag_stream_set_current(g->dev, g->comm);
  ag_status st = ag__launch(g->ds, &c);
  ag_stream_set_current(g->dev, prev);
  return st;
}

/* Device buffers: the implementation enqueues on its own stream and returns
 * when the collective completed; the caller's stream is waited for here.
 * An f16/bf16 sum is widened first: cast into f32 blocks of the caching
 * allocator on the comm stream, the collective runs in f32, and the result
 * is cast back on the comm stream (*narrowed: the caller records the done
 * event after it). */
static ag_status run_device(ag_group *g, ag_work *w, int64_t deadline, bool *narrowed) {
  /* the worker's own wait, as in run_host */
  ag_status st = g->ds->be->event_synchronize(w->start->be);
  if (st != AG_OK) return st;
  ag_tensor *in = w->in, *out = w->out ? w->out : w->in;
  void *ib, *ob;
  size_t ioff, ooff, ibytes, obytes;
  tensor_span(in, &ib, &ioff, &ibytes);
  tensor_span(out, &ob, &ooff, &obytes);
  bool separate_out = w->kind == AG_COLL_ALL_GATHER || w->kind == AG_COLL_REDUCE_SCATTER;
  ag_coll c = {.kind = w->kind, .dtype = in->dtype, .op = w->op, .root = w->root,
               .buf = (char *)ib + ioff, .out = separate_out ? (char *)ob + ooff : NULL,
               .count = (size_t)(w->kind == AG_COLL_REDUCE_SCATTER ? out->numel : in->numel), .seq = w->seq};
  bool avg_here = c.op == AG_DIST_AVG && !g->caps.native_avg;
  if (avg_here) return ag_error_set(AG_ERR_UNSUPPORTED, "%s: average not supported by %s", k_coll_fn[w->kind],
                                    g->mod->name);
  if (!device_widens(g, w, in->dtype)) return g->mod->run(g->im, &c, deadline);
  const char *fn = k_coll_fn[w->kind];
  ag_dtype dt = in->dtype, wt = ag__dist_wire_dtype(dt);
  size_t in_n = (size_t)in->numel, out_n = (size_t)out->numel, wes = ag_dtype_size(wt);
  ag_block *bin = NULL, *bout = NULL;
  if ((st = ag__alloc(g->ds, in_n * wes + 1, g->comm, AG_MEM_STAGING, &bin)) != AG_OK) return st;
  if (separate_out && (st = ag__alloc(g->ds, out_n * wes + 1, g->comm, AG_MEM_STAGING, &bout)) != AG_OK) {
    ag__free(bin);
    return st;
  }
  ag_koperand win = flat_operand(ag__block_base(bin), ag__block_offset(bin), wt, in_n);
  ag_koperand wout = bout ? flat_operand(ag__block_base(bout), ag__block_offset(bout), wt, out_n) : win;
  st = cast_on_comm(g, win, flat_operand(ib, ioff, dt, in_n), fn);
  /* the implementation works on its own stream: the widened input first */
  if (st == AG_OK) st = g->ds->be->stream_synchronize(g->comm->bs);
  if (st == AG_OK) {
    c.dtype = wt;
    c.buf = (char *)win.base + win.offset;
    c.out = separate_out ? (char *)wout.base + wout.offset : NULL;
    st = g->mod->run(g->im, &c, deadline);
  }
  if (st == AG_OK) st = cast_on_comm(g, flat_operand(ob, ooff, dt, out_n), wout, fn);
  if (st == AG_OK) *narrowed = true;
  /* reused only in the comm stream's order, after the casts above */
  ag__free(bin);
  if (bout) ag__free(bout);
  return st;
}

/* The rank's device made current on the calling thread (the backend's
 * thread_device; nothing for backends without per-thread state) while an
 * implementation runs there: a CUDA-aware MPI handed device addresses works
 * in the current device's context, which on the communication thread was
 * nobody's choice and on a caller's thread (inline runs) is the caller's.
 * *prev: what to restore with device_unbind. */
static ag_status device_bind(ag_devstate *ds, int *prev) {
  *prev = -1;
  return ds->be->thread_device ? ds->be->thread_device(ds->ord, prev) : AG_OK;
}

static void device_unbind(ag_devstate *ds, int prev) {
  int cur;
  if (ds->be->thread_device && prev >= 0) (void)ds->be->thread_device(prev, &cur);
}

/* Run w's collective: ag_OK, or an error with its text in msg (the
 * group is then broken for every later call). */
static ag_status run_coll(ag_group *g, ag_work *w, char *msg, size_t n) {
  ag_status st = AG_OK;
  pthread_mutex_lock(&g->mu);
  st = g->broken_st;
  if (st != AG_OK) snprintf(msg, n, "%s", g->broken_msg);
  pthread_mutex_unlock(&g->mu);
  if (st == AG_OK && g->mod->broken) st = g->mod->broken(g->im, msg, n);
  if (st != AG_OK) return st == AG_ERR_TIMEOUT ? AG_ERR_TIMEOUT : AG_ERR_ABORTED;
  int64_t deadline = ag__dist_deadline_ns(g->timeout_ms);
  int prev_dev = -1;
  st = device_bind(g->ds, &prev_dev); /* a failure breaks the group below */
  if (st == AG_OK && g->caps.device_buffers && w->kind != AG_COLL_BARRIER) {
    bool narrowed = false;
    st = run_device(g, w, deadline, &narrowed);
    if (st == AG_OK && narrowed) { /* the cast back runs on the comm stream */
      ag_event *e = ag_event_create(g->dev, false);
      if (!e) st = ag_last_status();
      else if ((st = ag_event_record(e, g->comm)) != AG_OK) ag_event_destroy(e);
      else w->done = e;
    }
  } else if (st == AG_OK) {
    /* (CPU tensors are used in place after a host wait instead) */
    if (!host_direct(g)) st = ag_stream_wait_event(g->comm, w->start);
    if (st == AG_OK) st = run_host(g, w, deadline);
    if (st == AG_OK && w->kind != AG_COLL_BARRIER && !host_direct(g)) {
      ag_event *e = ag_event_create(g->dev, false);
      if (!e) st = ag_last_status();
      else if ((st = ag_event_record(e, g->comm)) != AG_OK) ag_event_destroy(e);
      else w->done = e;
    }
  }
  if (st != AG_OK) {
    snprintf(msg, n, "%s", ag_last_error());
    char why[512];
    snprintf(why, sizeof why, "rank %d: %.480s", g->rank, msg);
    group_break(g, st, why);
  }
  device_unbind(g->ds, prev_dev);
  return st;
}

static void run_one(ag_group *g, ag_work *w) {
  char msg[512] = "";
  ag_status st = run_coll(g, w, msg, sizeof msg);
  work_finish(w, st, msg);
}

/* End a run on the calling thread (g->busy was set for it). Wakes the
 * worker only when it has something to do: work queued during the run, or a
 * stop waiting for it to end. A needless wake-up costs two futex calls and a
 * context switch per collective, on a core a peer rank may need. */
static void inline_done(ag_group *g) {
  pthread_mutex_lock(&g->mu);
  g->busy = false;
  if (g->head || g->stop) pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void *worker_main(void *arg) {
  ag_group *g = arg;
  for (;;) {
    pthread_mutex_lock(&g->mu);
    while ((!g->head || g->busy) && !g->stop) pthread_cond_wait(&g->cv, &g->mu);
    while (g->busy) pthread_cond_wait(&g->cv, &g->mu); /* stopping: let an inline run end */
    ag_work *w = g->head;
    if (!w) { /* stop and drained */
      pthread_mutex_unlock(&g->mu);
      return NULL;
    }
    g->head = w->next;
    if (!g->head) g->tail = NULL;
    g->busy = true;
    pthread_mutex_unlock(&g->mu);
    run_one(g, w);
    pthread_mutex_lock(&g->mu);
    g->busy = false;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    work_unref(w);
  }
}

/* ---- queueing ---- */

static ag_status submit(ag_group *g, ag_coll_kind kind, ag_tensor *in, ag_tensor *out, ag_dist_reduce op,
                        int root, ag_work **out_work) {
  const char *fn = k_coll_fn[kind];
  if (out_work) *out_work = NULL;
  ag_status st = AG_OK;
  char msg[600];
  pthread_mutex_lock(&g->mu);
  st = g->broken_st;
  if (st != AG_OK) snprintf(msg, sizeof msg, "%s", g->broken_msg);
  pthread_mutex_unlock(&g->mu);
  if (st == AG_OK && g->mod->broken) st = g->mod->broken(g->im, msg, sizeof msg);
  if (st != AG_OK)
    return ag_error_set(st == AG_ERR_TIMEOUT ? AG_ERR_TIMEOUT : AG_ERR_ABORTED, "%s: group is broken: %s", fn,
                        msg);
  /* Argument checks. A failure here breaks the group too: the peers would
   * otherwise wait a full timeout for a collective this rank never joins. */
  msg[0] = 0;
  if (kind != AG_COLL_BARRIER) {
    ag_tensor *ts[2] = {in, out};
    for (int i = 0; i < 2 && !msg[0]; i++) {
      ag_tensor *t = ts[i];
      if (!t) {
        if (i == 0 || kind == AG_COLL_ALL_GATHER || kind == AG_COLL_REDUCE_SCATTER) {
          st = AG_ERR_INVALID;
          snprintf(msg, sizeof msg, "%s: NULL tensor", fn);
        }
        continue;
      }
      if (t->st->ds != g->ds) {
        st = AG_ERR_DEVICE;
        snprintf(msg, sizeof msg, "%s: tensor on %s, group rank %d on %s", fn, ag__devlabel(t), g->rank,
                 g->ds->label);
      } else if (t->numel > 0 && !ag_tensor_is_contiguous(t)) {
        st = AG_ERR_INVALID;
        snprintf(msg, sizeof msg, "%s: tensor is not contiguous (use ag_contiguous)", fn);
      } else if (!ag__dist_dtype_ok(t->dtype)) {
        st = AG_ERR_DTYPE;
        snprintf(msg, sizeof msg, "%s: dtype %s is not supported", fn, ag_dtype_name(t->dtype));
      }
    }
    if (!msg[0] && (kind == AG_COLL_ALL_REDUCE || kind == AG_COLL_REDUCE_SCATTER)) {
      if (op < AG_DIST_SUM || op > AG_DIST_MIN) {
        st = AG_ERR_INVALID;
        snprintf(msg, sizeof msg, "%s: bad reduce op %d", fn, (int)op);
      } else if (op == AG_DIST_AVG && !ag_dtype_is_float(in->dtype)) {
        st = AG_ERR_DTYPE;
        snprintf(msg, sizeof msg, "%s: average of %s tensors is not defined (use sum)", fn,
                 ag_dtype_name(in->dtype));
      }
    }
    if (!msg[0] && kind == AG_COLL_BROADCAST && (root < 0 || root >= g->size)) {
      st = AG_ERR_INVALID;
      snprintf(msg, sizeof msg, "%s: root %d is not a rank of a group of %d", fn, root, g->size);
    }
    if (!msg[0] && (kind == AG_COLL_ALL_GATHER || kind == AG_COLL_REDUCE_SCATTER)) {
      ag_tensor *big = kind == AG_COLL_ALL_GATHER ? out : in, *small = kind == AG_COLL_ALL_GATHER ? in : out;
      if (in->dtype != out->dtype) {
        st = AG_ERR_DTYPE;
        snprintf(msg, sizeof msg, "%s: in is %s, out is %s", fn, ag_dtype_name(in->dtype), ag_dtype_name(out->dtype));
      } else if (big->numel != small->numel * g->size) {
        st = AG_ERR_SHAPE;
        snprintf(msg, sizeof msg, "%s: %s has %lld elements, needs %d x %lld", fn,
                 kind == AG_COLL_ALL_GATHER ? "out" : "in", (long long)big->numel, g->size, (long long)small->numel);
      } else if (in->st == out->st) {
        st = AG_ERR_INVALID;
        snprintf(msg, sizeof msg, "%s: in and out share storage", fn);
      }
    }
  }
  /* A blocking call on a CPU rank with nothing queued runs on the calling
   * thread with a record on the stack: no handle, event or private tensor
   * references to make and free (the caller holds the tensors until this
   * returns, and on a CPU rank nothing of the call runs afterwards). About
   * half of a one-rank in-process all-reduce's time went to those. */
  if (!msg[0] && !out_work && host_direct(g) && !g->caps.device_buffers) {
    pthread_mutex_lock(&g->mu);
    bool here = !g->head && !g->busy;
    if (here) g->busy = true;
    pthread_mutex_unlock(&g->mu);
    if (here) {
      ag_work w0;
      memset(&w0, 0, sizeof w0);
      w0.kind = kind;
      w0.op = op;
      w0.root = root;
      w0.seq = ++g->seq;
      w0.timeout_ms = g->timeout_ms;
      w0.in = in;
      w0.out = out;
      if (in) ag__version_bump(out ? out : in);
      st = run_coll(g, &w0, msg, sizeof msg);
      inline_done(g);
      return st == AG_OK ? AG_OK : ag_error_set(st, "%s", msg);
    }
  }
  ag_work *w = NULL;
  if (!msg[0]) {
    w = calloc(1, sizeof *w);
    if (!w) {
      st = AG_ERR_OOM;
      snprintf(msg, sizeof msg, "%s: out of host memory", fn);
    }
  }
  if (!msg[0]) {
    atomic_init(&w->refs, 2);
    pthread_mutex_init(&w->mu, NULL);
    cond_init_mono(&w->cv);
    w->timeout_ms = g->timeout_ms;
    w->kind = kind;
    w->op = op;
    w->root = root;
    w->seq = ++g->seq;
    /* Start after what the caller queued so far on its current stream. */
    ag_stream *cur = ag__current_stream(g->ds);
    w->start = ag_event_create(g->dev, false);
    if (!w->start || (st = ag_event_record(w->start, cur)) != AG_OK) {
      st = ag_last_status();
      snprintf(msg, sizeof msg, "%s", ag_last_error());
    }
    if (!msg[0] && in) {
      w->in = ag__private_ref(in);
      if (out) w->out = ag__private_ref(out);
      if (!w->in || (out && !w->out)) {
        st = ag_last_status();
        snprintf(msg, sizeof msg, "%s", ag_last_error());
      } else {
        /* Their memory is used on the comm stream: the allocator must not
         * hand it out again before that work ends. */
        ag_tensor_record_stream(in, g->comm);
        if (out) ag_tensor_record_stream(out, g->comm);
        ag__version_bump(out ? out : in);
      }
    }
  }
  if (msg[0]) {
    if (w) {
      atomic_store(&w->refs, 1);
      work_unref(w);
    }
    group_break(g, st, msg);
    return ag_error_set(st, "%s", msg);
  }
  pthread_mutex_lock(&g->mu);
  /* A blocking call with nothing queued runs on the calling thread: the
   * order is the same and the hand-off to the worker (a thread wake-up,
   * tens of microseconds on a busy machine) is saved. */
  bool run_inline = !out_work && !g->head && !g->busy;
  if (run_inline) {
    g->busy = true;
  } else {
    if (g->tail) g->tail->next = w;
    else g->head = w;
    g->tail = w;
    pthread_cond_signal(&g->cv);
  }
  pthread_mutex_unlock(&g->mu);
  if (run_inline) {
    run_one(g, w);
    inline_done(g);
    atomic_fetch_sub(&w->refs, 1); /* the worker's reference, never taken */
  }
  if (out_work) {
    *out_work = w;
    return AG_OK;
  }
  st = work_wait_host(w, fn);
  if (st == AG_OK && w->done) st = ag_stream_wait_event(ag__current_stream(g->ds), w->done);
  work_unref(w);
  return st;
}

static bool check_group(ag_group *g, const char *fn) {
  if (g) return true;
  ag_error_set(AG_ERR_INVALID, "%s: NULL group", fn);
  return false;
}

ag_status ag_all_reduce(ag_group *g, ag_tensor *t, ag_dist_reduce op, ag_work **out_work) {
  if (!check_group(g, "ag_all_reduce")) return AG_ERR_INVALID;
  return submit(g, AG_COLL_ALL_REDUCE, t, NULL, op, 0, out_work);
}

ag_status ag_broadcast(ag_group *g, ag_tensor *t, int root, ag_work **out_work) {
  if (!check_group(g, "ag_broadcast")) return AG_ERR_INVALID;
  return submit(g, AG_COLL_BROADCAST, t, NULL, AG_DIST_SUM, root, out_work);
}

ag_status ag_all_gather(ag_group *g, ag_tensor *in, ag_tensor *out, ag_work **out_work) {
  if (!check_group(g, "ag_all_gather")) return AG_ERR_INVALID;
  return submit(g, AG_COLL_ALL_GATHER, in, out, AG_DIST_SUM, 0, out_work);
}

ag_status ag_reduce_scatter(ag_group *g, ag_tensor *in, ag_tensor *out, ag_dist_reduce op, ag_work **out_work) {
  if (!check_group(g, "ag_reduce_scatter")) return AG_ERR_INVALID;
  return submit(g, AG_COLL_REDUCE_SCATTER, in, out, op, 0, out_work);
}

ag_status ag_group_barrier(ag_group *g, ag_work **out_work) {
  if (!check_group(g, "ag_group_barrier")) return AG_ERR_INVALID;
  return submit(g, AG_COLL_BARRIER, NULL, NULL, AG_DIST_SUM, 0, out_work);
}

/* ---- groups ---- */

static ag_status group_new(ag_dist_kind kind, ag_device dev, int64_t timeout_ms, const ag_dist_module *mod,
                           ag_group **out) {
  ag_devstate *ds = ag__devstate(dev);
  if (!ds) return ag_last_status();
  ag_group *g = calloc(1, sizeof *g);
  if (!g) return ag_error_set(AG_ERR_OOM, "ag_group_create: out of host memory");
  g->kind = kind;
  g->dev = dev;
  g->ds = ds;
  g->timeout_ms = timeout_ms;
  g->mod = mod;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->comm = ag_stream_create(dev);
  if (!g->comm) {
    ag_status st = ag_last_status();
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
    return st;
  }
  *out = g;
  return AG_OK;
}

static ag_status group_start(ag_group *g) {
  if (pthread_create(&g->thread, NULL, worker_main, g) != 0)
    return ag_error_set(AG_ERR_OOM, "ag_group_create: cannot start the communication thread");
  g->thread_started = true;
  return AG_OK;
}

/* Free a group whose worker is stopped (or never started). */
static void group_free(ag_group *g) {
  if (g->im) g->mod->destroy(g->im);
  ag_stream_destroy(g->comm);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g);
}

ag_status ag_group_create_inproc(int n, const ag_device *devices, const ag_group_options *opts,
                                 ag_group **out_groups) {
  const char *fn = "ag_group_create_inproc";
  if (!devices || !out_groups) return ag_error_set(AG_ERR_INVALID, "%s: NULL %s", fn, devices ? "out_groups" : "devices");
  if (n < 1 || n > AG_DIST_MAX_RANKS)
    return ag_error_set(AG_ERR_INVALID, "%s: %d ranks (1 to %d)", fn, n, AG_DIST_MAX_RANKS);
  int64_t timeout = 0;
  ag_status st = resolve_timeout(fn, opts, &timeout);
  if (st != AG_OK) return st;
  ag_group *gs[AG_DIST_MAX_RANKS] = {0};
  ag_dist_impl *ims[AG_DIST_MAX_RANKS] = {0};
  for (int i = 0; i < n && st == AG_OK; i++) {
    st = group_new(AG_DIST_INPROC, devices[i], timeout, ag__dist_inproc_module(), &gs[i]);
    if (st == AG_OK) {
      gs[i]->rank = i;
      gs[i]->size = n;
      gs[i]->caps = (ag_dist_caps){.device_buffers = false, .native_avg = true, .native_half = true};
    }
  }
  if (st == AG_OK) st = ag__dist_inproc_create_all(n, timeout, ims);
  if (st == AG_OK)
    for (int i = 0; i < n; i++) gs[i]->im = ims[i];
  for (int i = 0; i < n && st == AG_OK; i++) st = group_start(gs[i]);
  if (st != AG_OK) {
    for (int i = 0; i < n; i++) {
      if (!gs[i]) continue;
      if (gs[i]->thread_started) {
        pthread_mutex_lock(&gs[i]->mu);
        gs[i]->stop = true;
        pthread_cond_signal(&gs[i]->cv);
        pthread_mutex_unlock(&gs[i]->mu);
        pthread_join(gs[i]->thread, NULL);
      }
      group_free(gs[i]);
    }
    return st;
  }
  for (int i = 0; i < n; i++) out_groups[i] = gs[i];
  return AG_OK;
}

/* AG_DIST_HALF_REDUCE: f32 (default) or native; AG_ERR_INVALID naming it. */
static ag_status half_reduce_env(bool *out_f32) {
  const char *v = getenv("AG_DIST_HALF_REDUCE");
  *out_f32 = true;
  if (!v || !*v || !strcmp(v, "f32")) return AG_OK;
  if (!strcmp(v, "native")) {
    *out_f32 = false;
    return AG_OK;
  }
  char b[64];
  return ag_error_set(AG_ERR_INVALID, "AG_DIST_HALF_REDUCE='%s' is not f32 or native", ag_escape(v, b, sizeof b));
}

ag_status ag__dist_half_reduce_env_check(void) {
  bool f32;
  return half_reduce_env(&f32);
}

/* Read by group creation, which refuses it too; a typo is also reported at
 * the first device open (runtime/env.c). */
__attribute__((constructor)) static void half_reduce_env_check_install(void) {
  ag__env_check_add(ag__dist_half_reduce_env_check);
}

/* A group over mod's implementation. host_ok: device_buffers as the module
 * declares it, also on a host-memory device (tests). */
static ag_status create_group_with(ag_dist_kind kind, const ag_dist_module *mod, ag_device device, int64_t timeout,
                                   ag_dist_create_args *a, bool host_ok, ag_group **out) {
  bool half_f32 = true;
  ag_status st = half_reduce_env(&half_f32);
  if (st != AG_OK) return st;
  ag_group *g = NULL;
  st = group_new(kind, device, timeout, mod, &g);
  if (st != AG_OK) return st;
  g->half_f32 = half_f32;
  a->dev_backend = device.backend;
  a->dev_index = device.index;
  a->dev_dlpack = g->ds->be->dlpack_device;
  a->timeout_ms = timeout;
  /* the library's set-up (MPI_Init, a communicator) on the rank's device */
  int prev_dev = -1;
  st = device_bind(g->ds, &prev_dev);
  if (st == AG_OK) st = mod->create(a, &g->im, &g->caps);
  device_unbind(g->ds, prev_dev);
  if (st == AG_OK) {
    g->rank = a->rank;
    g->size = a->size;
    /* device addresses only where the device has them, and not for host
     * memory (which the host path uses in place or stages itself) */
    uint32_t f = g->ds->be->flags;
    if (g->caps.device_buffers && (!(f & AG_BACKEND_F_ADDRESSABLE) || ((f & AG_BACKEND_F_HOST_MEMORY) && !host_ok)))
      g->caps.device_buffers = false;
    st = group_start(g);
  }
  if (st != AG_OK) {
    group_free(g);
    return st;
  }
  *out = g;
  return AG_OK;
}

/* A group over a module's implementation (MPI, NCCL, RCCL). */
static ag_status create_module_group(ag_dist_kind kind, ag_device device, int64_t timeout,
                                     ag_dist_create_args *a, ag_group **out) {
  char why[512];
  const ag_dist_module *mod = ag__dist_module(kind, why, sizeof why);
  if (!mod) return ag_error_set(AG_ERR_UNAVAILABLE, "%s is unavailable: %s", k_kind_names[kind], why);
  return create_group_with(kind, mod, device, timeout, a, false, out);
}

ag_status ag__group_create_with_module(const ag_dist_module *mod, ag_device device, int64_t timeout_ms,
                                       ag_dist_create_args *a, ag_group **out_group) {
  if (!mod || !a || !out_group || timeout_ms < 1 || timeout_ms > AG_DIST_MAX_TIMEOUT_MS)
    return ag_error_set(AG_ERR_INVALID, "ag__group_create_with_module: bad argument");
  *out_group = NULL;
  return create_group_with(AG_DIST_MPI, mod, device, timeout_ms, a, true, out_group);
}

ag_status ag_group_create_mpi(ag_device device, const ag_group_options *opts, ag_group **out_group) {
  const char *fn = "ag_group_create_mpi";
  if (!out_group) return ag_error_set(AG_ERR_INVALID, "%s: NULL out_group", fn);
  *out_group = NULL;
  int64_t timeout = 0;
  ag_status st = resolve_timeout(fn, opts, &timeout);
  if (st != AG_OK) return st;
  ag_dist_create_args a = {0};
  return create_module_group(AG_DIST_MPI, device, timeout, &a, out_group);
}

ag_status ag_group_create_nccl(ag_group *bootstrap, ag_device device, const ag_group_options *opts,
                               ag_group **out_group) {
  const char *fn = "ag_group_create_nccl";
  if (!out_group || !bootstrap)
    return ag_error_set(AG_ERR_INVALID, "%s: NULL %s", fn, out_group ? "bootstrap" : "out_group");
  *out_group = NULL;
  /* The device's module names the library that reduces its memory (known
   * once the module is loaded; the device itself starts with the group). */
  ag_backend_info bi;
  if (ag_backend_info_get((ag_backend_kind)device.backend, &bi) != AG_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", ag_last_error());
    return ag_error_set(ag_last_status(), "%s: %s", fn, why);
  }
  ag_dist_kind kind = AG_DIST_KIND_COUNT;
  for (int k = AG_DIST_NCCL; k <= AG_DIST_RCCL; k++)
    if (strcmp(bi.collective, k_kind_names[k]) == 0) kind = (ag_dist_kind)k;
  if (kind == AG_DIST_KIND_COUNT)
    return ag_error_set(AG_ERR_DEVICE, "%s: NCCL needs a cuda device and RCCL a hip device, not %s (whose "
                        "collective library is %s)", fn, bi.name, bi.collective[0] ? bi.collective : "none");
  int64_t timeout = 0;
  ag_status st = resolve_timeout(fn, opts, &timeout);
  if (st != AG_OK) return st;
  char why[512];
  const ag_dist_module *mod = ag__dist_module(kind, why, sizeof why);
  if (!mod) /* before any collective: bootstrap stays usable (a fallback) */
    return ag_error_set(AG_ERR_UNAVAILABLE, "%s: %s is unavailable: %s", fn, k_kind_names[kind], why);
  /* Rank 0 makes the id; the bootstrap group broadcasts it (in its own
   * host memory: any device works for a byte tensor of the id). */
  unsigned char id[AG_DIST_ID_BYTES] = {0};
  if (bootstrap->rank == 0 && (st = mod->get_id(id)) != AG_OK) {
    ag_group_abort(bootstrap, ag_last_error());
    return st;
  }
  int64_t shape[1] = {AG_DIST_ID_BYTES / 4};
  ag_tensor *t = ag_from_host(bootstrap->dev, AG_I32, 1, shape, id);
  if (!t) {
    ag_group_abort(bootstrap, ag_last_error());
    return ag_last_status();
  }
  st = ag_broadcast(bootstrap, t, 0, NULL);
  if (st == AG_OK) st = ag_to_host(t, id, sizeof id);
  ag_tensor_release(t);
  if (st != AG_OK) return st;
  ag_dist_create_args a = {.rank = bootstrap->rank, .size = bootstrap->size};
  memcpy(a.id, id, sizeof id);
  return create_module_group(kind, device, timeout, &a, out_group);
}

void ag_group_destroy(ag_group *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->stop = true;
  pthread_cond_signal(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (g->thread_started) pthread_join(g->thread, NULL);
  /* Copies back may still run on the comm stream: destroying it waits. */
  group_free(g);
}

int ag_group_rank(const ag_group *g) { return g ? g->rank : -1; }
int ag_group_size(const ag_group *g) { return g ? g->size : -1; }
ag_device ag_group_device(const ag_group *g) { return g ? g->dev : AG_CPU; }
ag_dist_kind ag_group_kind(const ag_group *g) { return g ? g->kind : AG_DIST_INPROC; }
int64_t ag_group_timeout_ms(const ag_group *g) { return g ? g->timeout_ms : -1; }

void ag_group_abort(ag_group *g, const char *reason) {
  if (!g) return;
  char msg[512];
  snprintf(msg, sizeof msg, "rank %d aborted the group: %s", g->rank, reason ? reason : "ag_group_abort");
  group_break(g, AG_ERR_ABORTED, msg);
}

ag_status ag_group_status(const ag_group *g) {
  if (!g) return ag_error_set(AG_ERR_INVALID, "ag_group_status: NULL group");
  ag_group *m = (ag_group *)g;
  char msg[512];
  pthread_mutex_lock(&m->mu);
  ag_status st = m->broken_st;
  if (st != AG_OK) snprintf(msg, sizeof msg, "%s", m->broken_msg);
  pthread_mutex_unlock(&m->mu);
  if (st == AG_OK && m->mod->broken) st = m->mod->broken(m->im, msg, sizeof msg);
  if (st != AG_OK) ag_error_set(st, "%s", msg);
  return st;
}
