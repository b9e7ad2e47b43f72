/* The in-process group: ranks are threads of this process (one per device)
 * that meet in a shared rendezvous. Each collective is two barriers around
 * a host phase on the ranks' pinned staging buffers: rank r reduces chunk r
 * of the data across all ranks and writes it back to every rank, so the work
 * is split evenly and every byte is read once per rank. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/tensor.h"
#include "dist_internal.h"

typedef struct shared {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC */
  int size;
  atomic_int refs;
  uint64_t gen;      /* barriers completed */
  int arrived;       /* at the current barrier */
  uint64_t arrivals[AG_DIST_MAX_RANKS]; /* per rank, for "rank 2 never arrived" */
  ag_coll slot[AG_DIST_MAX_RANKS];      /* each rank's current collective */
  ag_status broken_st;
  char broken_msg[512];
} shared;

struct ag_dist_impl {
  shared *sh;
  int rank;
  int64_t timeout_ms;
};

static const char *const k_coll_names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                           "barrier"};

static void break_locked(shared *sh, ag_status st, const char *msg) {
  if (sh->broken_st != AG_OK) return; /* the first failure is the story */
  sh->broken_st = st;
  snprintf(sh->broken_msg, sizeof sh->broken_msg, "%s", msg);
  pthread_cond_broadcast(&sh->cv);
}

static ag_status fail_broken_locked(shared *sh) {
  return ag_error_set(sh->broken_st == AG_ERR_TIMEOUT ? AG_ERR_TIMEOUT : AG_ERR_ABORTED, "%s",
                      sh->broken_msg);
}

/* Wait until every rank has arrived, the group breaks, or the deadline. */
static ag_status barrier_locked(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  shared *sh = im->sh;
  if (sh->broken_st != AG_OK) return fail_broken_locked(sh);
  uint64_t my = sh->gen;
  sh->arrivals[im->rank]++;
  if (++sh->arrived == sh->size) {
    sh->arrived = 0;
    sh->gen++;
    pthread_cond_broadcast(&sh->cv);
    return AG_OK;
  }
  struct timespec ts = {.tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000};
  while (sh->gen == my && sh->broken_st == AG_OK) {
    int rc = pthread_cond_timedwait(&sh->cv, &sh->mu, &ts);
    if (rc != 0 && rc != ETIMEDOUT && sh->gen == my && sh->broken_st == AG_OK) {
      /* EINVAL (a bad deadline) would otherwise spin here holding the mutex */
      char msg[256];
      snprintf(msg, sizeof msg, "in-process group: %s #%llu: waiting on rank %d failed: %s", k_coll_names[c->kind],
               (unsigned long long)c->seq, im->rank, strerror(rc));
      break_locked(sh, AG_ERR_INTERNAL, msg);
      return ag_error_set(AG_ERR_INTERNAL, "%s", msg);
    }
    if (rc == ETIMEDOUT && sh->gen == my && sh->broken_st == AG_OK) {
      char missing[256] = "";
      size_t len = 0;
      for (int r = 0; r < sh->size && len < sizeof missing - 8; r++)
        if (sh->arrivals[r] < sh->arrivals[im->rank])
          len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", r);
      char msg[512];
      snprintf(msg, sizeof msg,
               "in-process group: %s #%llu timed out after %lld ms on rank %d waiting for rank%s %s "
               "(never arrived)",
               k_coll_names[c->kind], (unsigned long long)c->seq, (long long)im->timeout_ms, im->rank,
               strchr(missing, ',') ? "s" : "", missing);
      break_locked(sh, AG_ERR_TIMEOUT, msg);
      return ag_error_set(AG_ERR_TIMEOUT, "%s", msg);
    }
  }
  if (sh->gen != my) return AG_OK; /* passed, even if someone broke it afterwards */
  return fail_broken_locked(sh);
}

/* Every rank checks every slot the same way, so all agree on a mismatch. */
static bool consistent_locked(shared *sh, char *msg, size_t n) {
  const ag_coll *a = &sh->slot[0];
  for (int r = 1; r < sh->size; r++) {
    const ag_coll *b = &sh->slot[r];
    bool same = a->kind == b->kind && (a->kind == AG_COLL_BARRIER ||
                (a->dtype == b->dtype && a->count == b->count &&
                 (a->kind == AG_COLL_BROADCAST ? a->root == b->root : true) &&
                 ((a->kind == AG_COLL_ALL_REDUCE || a->kind == AG_COLL_REDUCE_SCATTER) ? a->op == b->op : true)));
    if (!same) {
      snprintf(msg, n,
               "in-process group: collective #%llu differs between ranks: rank 0 calls %s (%s, %zu elements, "
               "op %d, root %d), rank %d calls %s (%s, %zu elements, op %d, root %d)",
               (unsigned long long)a->seq, k_coll_names[a->kind], ag_dtype_name(a->dtype), a->count, a->op,
               a->root, r, k_coll_names[b->kind], ag_dtype_name(b->dtype), b->count, b->op, b->root);
      return false;
    }
  }
  return true;
}

static ag_status ip_run(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  shared *sh = im->sh;
  int n = sh->size, r = im->rank;
  pthread_mutex_lock(&sh->mu);
  sh->slot[r] = *c;
  ag_status st = barrier_locked(im, c, deadline_ns);
  char msg[512];
  if (st == AG_OK && !consistent_locked(sh, msg, sizeof msg)) {
    break_locked(sh, AG_ERR_INVALID, msg);
    st = ag_error_set(AG_ERR_INVALID, "%s", msg);
  }
  pthread_mutex_unlock(&sh->mu);
  if (st != AG_OK) return st;

  /* The host phase: slots are stable until the closing barrier. */
  size_t es = ag_dtype_size(c->dtype);
  void *bufs[AG_DIST_MAX_RANKS];
  for (int k = 0; k < n; k++) bufs[k] = sh->slot[k].buf;
  switch (c->kind) {
    case AG_COLL_ALL_REDUCE: {
      size_t lo = c->count * (size_t)r / (size_t)n, hi = c->count * (size_t)(r + 1) / (size_t)n;
      if (n > 1) ag__dist_reduce(c->dtype, c->op, n, bufs, n, bufs, lo, hi - lo); /* one rank: as it is */
      break;
    }
    case AG_COLL_BROADCAST:
      if (r != c->root && c->count) memcpy(c->buf, sh->slot[c->root].buf, c->count * es);
      break;
    case AG_COLL_ALL_GATHER:
      for (int k = 0; k < n && c->count; k++) memcpy((char *)c->out + (size_t)k * c->count * es, bufs[k], c->count * es);
      break;
    case AG_COLL_REDUCE_SCATTER: {
      /* out[i] = op over k of in_k[r*count + i]: shift the sources to chunk r */
      void *src[AG_DIST_MAX_RANKS];
      for (int k = 0; k < n; k++) src[k] = (char *)bufs[k] + (size_t)r * c->count * es;
      void *dst = c->out;
      ag__dist_reduce(c->dtype, c->op, n, src, 1, &dst, 0, c->count);
      break;
    }
    case AG_COLL_BARRIER: break;
  }

  pthread_mutex_lock(&sh->mu);
  st = barrier_locked(im, c, deadline_ns);
  pthread_mutex_unlock(&sh->mu);
  return st;
}

static void ip_abort(ag_dist_impl *im, ag_status st, const char *why) {
  pthread_mutex_lock(&im->sh->mu);
  break_locked(im->sh, st, why ? why : "in-process group aborted");
  pthread_mutex_unlock(&im->sh->mu);
}

static ag_status ip_broken(ag_dist_impl *im, char *msg, size_t n) {
  pthread_mutex_lock(&im->sh->mu);
  ag_status st = im->sh->broken_st;
  if (st != AG_OK && msg) snprintf(msg, n, "%s", im->sh->broken_msg);
  pthread_mutex_unlock(&im->sh->mu);
  return st;
}

static void ip_destroy(ag_dist_impl *im) {
  if (!im) return;
  shared *sh = im->sh;
  char msg[128];
  /* A rank that leaves will never arrive again: peers still waiting for it
   * fail now instead of at their timeout. */
  snprintf(msg, sizeof msg, "in-process group: rank %d left the group (ag_group_destroy)", im->rank);
  ip_abort(im, AG_ERR_ABORTED, msg);
  free(im);
  if (atomic_fetch_sub(&sh->refs, 1) == 1) {
    pthread_mutex_destroy(&sh->mu);
    pthread_cond_destroy(&sh->cv);
    free(sh);
  }
}

static bool ip_probe(char *why, size_t n) {
  if (why && n) snprintf(why, n, "in-process (threads, pinned host staging)");
  return true;
}

static ag_status ip_create(ag_dist_create_args *a, ag_dist_impl **out, ag_dist_caps *caps) {
  return ag_error_set(AG_ERR_INTERNAL, "in-process groups are created all at once");
}

ag_status ag__dist_inproc_create_all(int n, int64_t timeout_ms, ag_dist_impl **out) {
  shared *sh = calloc(1, sizeof *sh);
  if (!sh) return ag_error_set(AG_ERR_OOM, "ag_group_create_inproc: out of host memory");
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&sh->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&sh->mu, NULL);
  sh->size = n;
  atomic_init(&sh->refs, n);
  for (int i = 0; i < n; i++) {
    out[i] = calloc(1, sizeof **out);
    if (!out[i]) {
      for (int j = 0; j < i; j++) free(out[j]);
      pthread_mutex_destroy(&sh->mu);
      pthread_cond_destroy(&sh->cv);
      free(sh);
      return ag_error_set(AG_ERR_OOM, "ag_group_create_inproc: out of host memory");
    }
    out[i]->sh = sh;
    out[i]->rank = i;
    out[i]->timeout_ms = timeout_ms;
  }
  return AG_OK;
}

static const ag_dist_module k_inproc = {
    .abi = AG_DIST_MODULE_ABI,
    .name = "inproc",
    .probe = ip_probe,
    .create = ip_create,
    .run = ip_run,
    .abort = ip_abort,
    .broken = ip_broken,
    .destroy = ip_destroy,
};

const ag_dist_module *ag__dist_inproc_module(void) { return &k_inproc; }
