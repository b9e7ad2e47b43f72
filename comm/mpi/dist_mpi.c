/* The MPI group module (libanygrad-mpi.so): one rank per process over a
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come
 * back as statuses. libanygrad never links libmpi; this module does, and the
 * core loads it on demand. Collectives are non-blocking MPI calls polled with
 * MPI_Test until they finish or the deadline passes, so a peer that died or
 * never calls gives a timeout here instead of a hang. Buffers are the core's
 * pinned host staging, or device addresses when the library reports CUDA
 * support (MPIX_Query_cuda_support, looked up at run time). */
#define _GNU_SOURCE
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* vectorise reduce_local: scalar, the ring ran at 0.6x MPI_Allreduce */
#endif
#include <dlfcn.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/checks.h"
#include "anygrad/dlpack.h"
#include "anygrad/status.h"
#include "dist/dist_internal.h"

struct ag_dist_impl {
  MPI_Comm comm;
  MPI_Comm p2p; /* small all-reduces' point-to-point messages (own tag space) */
  int rank, size;
  bool device_buffers; /* run() gets device addresses (CUDA-aware MPI) */
  bool own_allreduce;  /* all-reduce by own point-to-point algorithms (else MPI_Iallreduce) */
  void *tmp;     /* receive buffer of the small all-reduce; one collective runs at a time */
  size_t tmp_cap;
  int64_t timeout_ms;
  pthread_mutex_t mu;
  ag_status broken_st;
  char broken_msg[512];
};

/* Module state: who initialized MPI, how many groups are open, whether MPI
 * calls from several threads must be serialized. Guarded by g_mu. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_we_initialized;
static int g_open_groups;
static bool g_any_broken;
static bool g_serialize; /* MPI_THREAD_SERIALIZED only: one MPI call at a time */
static pthread_mutex_t g_call_mu = PTHREAD_MUTEX_INITIALIZER;

/* All-reduces up to this many bytes run by recursive doubling, larger ones
 * as a ring (AG_DIST_MPI_ALLREDUCE=mpi: MPI_Iallreduce for all). */
#define AG_MPI_SMALL_ALLREDUCE (64 * 1024)

static const char *const k_coll_names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter",
                                           "barrier"};

static ag_status mpi_error(int rc, const char *what) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
  return ag_error_set(AG_ERR_BACKEND, "%s: %s", what, s);
}

static void lock_calls(void) {
  if (g_serialize) pthread_mutex_lock(&g_call_mu);
}
static void unlock_calls(void) {
  if (g_serialize) pthread_mutex_unlock(&g_call_mu);
}

static bool cuda_aware(void) {
  int (*q)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support");
  return q && q() == 1;
}

static bool mpi_probe(char *why, size_t n) {
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  /* callable before MPI_Init */
  if (MPI_Get_library_version(ver, &len) != MPI_SUCCESS) snprintf(ver, sizeof ver, "MPI (version unknown)");
  char *nl = strpbrk(ver, "\n,");
  if (nl) *nl = 0;
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  if (why && n)
    snprintf(why, n, "%s (MPI %d.%d, device-aware: %s)", ver, major, minor,
             dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support") ? (cuda_aware() ? "cuda" : "no") : "unknown");
  return true;
}

static ag_status mpi_create(ag_dist_create_args *a, ag_dist_impl **out, ag_dist_caps *caps) {
  ag_status st = AG_OK;
  const char *ar = getenv("AG_DIST_MPI_ALLREDUCE");
  if (ar && *ar && strcmp(ar, "auto") != 0 && strcmp(ar, "mpi") != 0)
  {
    char shown[64]; /* escaped: no raw control sequences in the message */
    return ag_error_set(AG_ERR_INVALID, "ag_group_create_mpi: AG_DIST_MPI_ALLREDUCE='%s' is not auto or mpi",
                        ag_escape(ar, shown, sizeof shown));
  }
  bool own_allreduce = !(ar && !strcmp(ar, "mpi"));
  pthread_mutex_lock(&g_mu);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) {
    pthread_mutex_unlock(&g_mu);
    return ag_error_set(AG_ERR_STATE, "ag_group_create_mpi: MPI was already finalized");
  }
  int provided = MPI_THREAD_SINGLE;
  if (!inited) {
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_unlock(&g_mu);
      return mpi_error(rc, "ag_group_create_mpi: MPI_Init_thread");
    }
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    pthread_mutex_unlock(&g_mu);
    return ag_error_set(AG_ERR_UNAVAILABLE,
                        "ag_group_create_mpi: MPI provides thread level %d; anygrad calls MPI from its "
                        "communication thread and needs MPI_THREAD_SERIALIZED or MULTIPLE (initialize MPI with "
                        "MPI_Init_thread, or let anygrad initialize it)",
                        provided);
  }
  g_serialize = provided < MPI_THREAD_MULTIPLE;
  ag_dist_impl *im = calloc(1, sizeof *im);
  if (!im) {
    pthread_mutex_unlock(&g_mu);
    return ag_error_set(AG_ERR_OOM, "ag_group_create_mpi: out of host memory");
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &im->comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(im->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(im->comm, &im->p2p); /* inherits MPI_ERRORS_RETURN */
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(im->comm, &im->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(im->comm, &im->size);
  if (rc != MPI_SUCCESS) {
    st = mpi_error(rc, "ag_group_create_mpi: MPI_Comm_dup");
    free(im);
    pthread_mutex_unlock(&g_mu);
    return st;
  }
  g_open_groups++;
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_init(&im->mu, NULL);
  im->timeout_ms = a->timeout_ms;
  a->rank = im->rank;
  a->size = im->size;
  im->device_buffers = a->dev_dlpack == kDLCUDA && cuda_aware();
  im->own_allreduce = own_allreduce;
  *caps = (ag_dist_caps){.device_buffers = im->device_buffers, .native_avg = false, .native_half = false};
  *out = im;
  return AG_OK;
}

static void mark_broken(ag_dist_impl *im, ag_status st, const char *msg) {
  pthread_mutex_lock(&im->mu);
  if (im->broken_st == AG_OK) {
    im->broken_st = st;
    snprintf(im->broken_msg, sizeof im->broken_msg, "%s", msg);
  }
  pthread_mutex_unlock(&im->mu);
  pthread_mutex_lock(&g_mu);
  g_any_broken = true;
  pthread_mutex_unlock(&g_mu);
}

/* Poll requests until all finished or the deadline passed. Spins while the
 * messages are likely to land soon (latency matters for small buckets), then
 * yields (ranks may share cores), then sleeps 50 us: a long wait costs no
 * CPU. A timeout or an MPI error marks the group broken: the requests cannot
 * be cancelled. */
static ag_status wait_requests(ag_dist_impl *im, MPI_Request *reqs, int n, int64_t start, int64_t deadline_ns,
                               const char *what) {
  for (long iter = 0;; iter++) {
    int done = 0;
    lock_calls();
    int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
    unlock_calls();
    if (rc != MPI_SUCCESS) {
      ag_status st = mpi_error(rc, what);
      mark_broken(im, st, ag_last_error());
      return st;
    }
    if (done) return AG_OK;
    int64_t now = ag__dist_now_ns();
    if (now >= deadline_ns) {
      ag_status st = ag_error_set(AG_ERR_TIMEOUT,
                                  "%s timed out after %lld ms: a peer process died or never called it "
                                  "(AG_DIST_TIMEOUT_MS sets the limit)",
                                  what, (long long)((now - start) / 1000000));
      mark_broken(im, st, ag_last_error());
      return st;
    }
    if (now - start > 5000000) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    } else if (iter > 200) {
      sched_yield();
    }
  }
}

/* dst = dst op src over n elements (f32, f64, i32; f16/bf16 arrive widened). */
#define AG_MPI_REDUCE(T)                                       \
  do {                                                         \
    T *d = dst;                                                \
    const T *s = src;                                          \
    if (op == AG_DIST_MAX)                                     \
      for (size_t i = 0; i < n; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; \
    else if (op == AG_DIST_MIN)                                \
      for (size_t i = 0; i < n; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; \
    else                                                       \
      for (size_t i = 0; i < n; i++) d[i] += s[i];             \
  } while (0)

static void reduce_local(ag_dtype dt, ag_dist_reduce op, void *dst, const void *src, size_t n) {
  if (dt == AG_F64) {
    AG_MPI_REDUCE(double);
  } else if (dt == AG_I32) {
    /* integer sums wrap (two's complement) as MPI_SUM on MPI_INT does in practice */
    if (op == AG_DIST_SUM) {
      uint32_t *d = dst;
      const uint32_t *s = src;
      for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else {
      AG_MPI_REDUCE(int32_t);
    }
  } else {
    AG_MPI_REDUCE(float);
  }
}
#undef AG_MPI_REDUCE

/* Post a receive of rn elements from `from` into rbuf and a send of sn
 * elements from sbuf to `to` (MPI_PROC_NULL for a side not wanted: it
 * completes at once), then wait for both within the deadline. */
static ag_status sendrecv(ag_dist_impl *im, MPI_Datatype dt, void *rbuf, size_t rn, int from, const void *sbuf,
                          size_t sn, int to, int tag, int64_t start, int64_t deadline_ns, const char *what) {
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  lock_calls();
  int rc = MPI_Irecv(rbuf, (int)rn, dt, from, tag, im->p2p, &r[0]);
  if (rc == MPI_SUCCESS) rc = MPI_Isend(sbuf, (int)sn, dt, to, tag, im->p2p, &r[1]);
  unlock_calls();
  if (rc != MPI_SUCCESS) {
    ag_status st = mpi_error(rc, what);
    mark_broken(im, st, ag_last_error());
    return st;
  }
  return wait_requests(im, r, 2, start, deadline_ns, what);
}

/* Messages of more than AG_MPI_EAGER_BYTES and up to AG_MPI_CHUNKED_MAX
 * bytes travel as pieces of at most AG_MPI_EAGER_BYTES: Open MPI's
 * shared-memory transport sends a message under its 4 KiB eager limit at
 * once and a larger one by a rendezvous and a kernel copy
 * (process_vm_readv), which costs 2-4x as much for a 4 KiB message as two
 * eager pieces do; larger messages gain nothing from it. Both sides cut a
 * message the same way (a function of its size), and MPI keeps the
 * messages of one source and tag in order. */
#define AG_MPI_EAGER_BYTES 4000
#define AG_MPI_CHUNKED_MAX (16 * 1024)
#define AG_MPI_MAX_PIECES (AG_MPI_CHUNKED_MAX / AG_MPI_EAGER_BYTES + 1)

/* sendrecv of n elements of es bytes each way with one peer, in pieces. */
static ag_status sendrecv_pieces(ag_dist_impl *im, MPI_Datatype dt, size_t es, void *rbuf, const void *sbuf,
                                 size_t n, int peer, int tag, int64_t start, int64_t deadline_ns,
                                 const char *what) {
  if (n * es <= AG_MPI_EAGER_BYTES || n * es > AG_MPI_CHUNKED_MAX)
    return sendrecv(im, dt, rbuf, n, peer, sbuf, n, peer, tag, start, deadline_ns, what);
  size_t per = AG_MPI_EAGER_BYTES / es;
  MPI_Request r[2 * AG_MPI_MAX_PIECES];
  int nr = 0, rc = MPI_SUCCESS;
  lock_calls();
  for (size_t off = 0; rc == MPI_SUCCESS && off < n; off += per) {
    size_t len = n - off < per ? n - off : per;
    rc = MPI_Irecv((char *)rbuf + off * es, (int)len, dt, peer, tag, im->p2p, &r[nr++]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend((const char *)sbuf + off * es, (int)len, dt, peer, tag, im->p2p, &r[nr++]);
  }
  unlock_calls();
  if (rc != MPI_SUCCESS) {
    ag_status st = mpi_error(rc, what);
    mark_broken(im, st, ag_last_error());
    return st;
  }
  return wait_requests(im, r, nr, start, deadline_ns, what);
}

/* im->tmp holds at least `bytes` from any offset within a page (tmp_like).
 * Scratch: the contents are not kept. */
static ag_status tmp_reserve(ag_dist_impl *im, size_t bytes, const char *what) {
  if (bytes + 4096 <= im->tmp_cap) return AG_OK;
  void *t = NULL;
  if (posix_memalign(&t, 4096, bytes + 4096) != 0)
    return ag_error_set(AG_ERR_OOM, "%s: out of host memory (%zu bytes)", what, bytes);
  free(im->tmp);
  im->tmp = t;
  im->tmp_cap = bytes + 4096;
  return AG_OK;
}

/* A receive buffer in im->tmp at the same offset within its page as
 * `like`, where the sender's data most likely sits too (peers allocate
 * alike): the kernel's single-copy transfer (process_vm_readv) then copies
 * whole pages onto whole pages instead of splitting every page in two. */
static char *tmp_like(ag_dist_impl *im, const void *like) {
  return (char *)im->tmp + ((uintptr_t)like & 4095u);
}

/* Small all-reduces by recursive doubling over point-to-point messages, as
 * the blocking MPI_Allreduce of Open MPI and MPICH does for short vectors:
 * the non-blocking MPI_Iallreduce (libnbc's schedules) costs 2-3x more per
 * call there, and anygrad cannot use the blocking call (it would wait forever
 * on a dead peer). log2(size) exchanges of the whole buffer; with a size that
 * is not a power of two the first 2*rem ranks pair up first (the even one
 * hands its data to the odd one and gets the result back at the end). Every
 * rank ends with the same bits: the operations are commutative. */
static ag_status small_all_reduce(ag_dist_impl *im, const ag_coll *c, MPI_Datatype dt, int64_t start,
                                  int64_t deadline_ns, const char *what) {
  ag_status st = tmp_reserve(im, c->count * ag_dtype_size(c->dtype), what);
  if (st != AG_OK) return st;
  char *tmp = tmp_like(im, c->buf); /* after tmp_reserve: it may move */
  int rank = im->rank, size = im->size, pof2 = 1;
  while (pof2 * 2 <= size) pof2 *= 2;
  int rem = size - pof2, newrank;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      st = sendrecv(im, dt, NULL, 0, MPI_PROC_NULL, c->buf, c->count, rank + 1, 2, start, deadline_ns, what);
      if (st != AG_OK) return st;
      newrank = -1;
    } else {
      st = sendrecv(im, dt, tmp, c->count, rank - 1, NULL, 0, MPI_PROC_NULL, 2, start,
                    deadline_ns, what);
      if (st != AG_OK) return st;
      reduce_local(c->dtype, c->op, c->buf, tmp, c->count);
      newrank = rank / 2;
    }
  } else {
    newrank = rank - rem;
  }
  if (newrank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      int nd = newrank ^ mask;
      int peer = nd < rem ? nd * 2 + 1 : nd + rem;
      st = sendrecv_pieces(im, dt, ag_dtype_size(c->dtype), tmp, c->buf, c->count, peer, 1, start,
                           deadline_ns, what);
      if (st != AG_OK) return st;
      reduce_local(c->dtype, c->op, c->buf, tmp, c->count);
    }
  }
  if (rank < 2 * rem) /* the odd one of a pair hands the result back */
    st = rank % 2
             ? sendrecv(im, dt, NULL, 0, MPI_PROC_NULL, c->buf, c->count, rank - 1, 2, start, deadline_ns, what)
             : sendrecv(im, dt, c->buf, c->count, rank + 1, NULL, 0, MPI_PROC_NULL, 2, start, deadline_ns, what);
  return st;
}

/* Large all-reduces as a ring: reduce-scatter then all-gather of size
 * chunks, each step sending one chunk to the right neighbour and receiving
 * one from the left (size-1 steps each). Every rank sends and receives
 * 2 (size-1)/size of the buffer and reduces (size-1)/size of it: the
 * bandwidth-optimal schedule of MPI_Allreduce's ring algorithm. Each chunk
 * is reduced along one path and then copied, so every rank ends with the
 * same bits. */
static ag_status ring_all_reduce(ag_dist_impl *im, const ag_coll *c, MPI_Datatype dt, int64_t start,
                                 int64_t deadline_ns, const char *what) {
  const int p = im->size, rank = im->rank, right = (rank + 1) % p, left = (rank + p - 1) % p;
  const size_t es = ag_dtype_size(c->dtype), chunk_max = (c->count + (size_t)p - 1) / (size_t)p;
  ag_status st = tmp_reserve(im, chunk_max * es, what);
  if (st != AG_OK) return st;
  char *buf = c->buf;
#define CH_OFF(k) ((size_t)(k) * c->count / (size_t)p)
#define CH_LEN(k) (CH_OFF((k) + 1) - CH_OFF(k))
  for (int phase = 0; phase < 2; phase++) {
    for (int s = 0; s < p - 1; s++) {
      /* reduce-scatter: send the partial of chunk rank-s, receive rank-s-1 and
       * add to it; all-gather: pass on the finished chunk rank+1-s. */
      int send = phase == 0 ? (rank - s + 2 * p) % p : (rank + 1 - s + 2 * p) % p;
      int recv = (send + p - 1) % p;
      void *into = phase == 0 ? tmp_like(im, buf + CH_OFF(recv) * es) : buf + CH_OFF(recv) * es;
      st = sendrecv(im, dt, into, CH_LEN(recv), left, buf + CH_OFF(send) * es, CH_LEN(send), right, 3, start,
                    deadline_ns, what);
      if (st != AG_OK) return st;
      if (phase == 0) reduce_local(c->dtype, c->op, buf + CH_OFF(recv) * es, into, CH_LEN(recv));
    }
  }
#undef CH_OFF
#undef CH_LEN
  return AG_OK;
}

/* "MPI group rank R: KIND #SEQ", the name errors give a collective, built
 * without printf (it is built on every call, and snprintf cost about a
 * tenth of a 4 KiB all-reduce). */
static char *put_u(char *p, unsigned long long v) {
  char d[24];
  int n = 0;
  do d[n++] = (char)('0' + v % 10); while ((v /= 10) && n < 24);
  while (n) *p++ = d[--n];
  return p;
}

static void call_name(char *out /* 96 bytes */, int rank, const ag_coll *c) {
  static const char head[] = "MPI group rank ";
  char *p = out;
  memcpy(p, head, sizeof head - 1);
  p = put_u(p + sizeof head - 1, (unsigned long long)(rank < 0 ? 0 : rank));
  *p++ = ':';
  *p++ = ' ';
  const char *k = k_coll_names[c->kind];
  size_t kl = strlen(k);
  memcpy(p, k, kl);
  p += kl;
  *p++ = ' ';
  *p++ = '#';
  p = put_u(p, (unsigned long long)c->seq);
  *p = 0;
}

static ag_status mpi_run(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  MPI_Datatype dt;
  switch (c->dtype) {
    case AG_F32: dt = MPI_FLOAT; break;
    case AG_F64: dt = MPI_DOUBLE; break;
    case AG_I32: dt = MPI_INT; break;
    default: return ag_error_set(AG_ERR_DTYPE, "MPI group: dtype %d reaches MPI unconverted", (int)c->dtype);
  }
  MPI_Op op = c->op == AG_DIST_MAX ? MPI_MAX : c->op == AG_DIST_MIN ? MPI_MIN : MPI_SUM;
  if (c->count > (size_t)INT_MAX / (c->kind == AG_COLL_ALL_GATHER ? (size_t)im->size : 1))
    return ag_error_set(AG_ERR_UNSUPPORTED, "MPI group: %zu elements exceed MPI's int count", c->count);
  int n = (int)c->count;
  char what[96];
  call_name(what, im->rank, c);
  int64_t start = ag__dist_now_ns();
  /* host buffers only: with a device-aware MPI, buf may be device memory */
  if (c->kind == AG_COLL_ALL_REDUCE && !im->device_buffers && im->own_allreduce) {
    if (c->count * ag_dtype_size(c->dtype) <= AG_MPI_SMALL_ALLREDUCE || c->count < (size_t)im->size)
      return small_all_reduce(im, c, dt, start, deadline_ns, what);
    return ring_all_reduce(im, c, dt, start, deadline_ns, what);
  }
  MPI_Request req = MPI_REQUEST_NULL;
  int rc;
  lock_calls();
  switch (c->kind) {
    case AG_COLL_ALL_REDUCE: rc = MPI_Iallreduce(MPI_IN_PLACE, c->buf, n, dt, op, im->comm, &req); break;
    case AG_COLL_BROADCAST: rc = MPI_Ibcast(c->buf, n, dt, c->root, im->comm, &req); break;
    case AG_COLL_ALL_GATHER: rc = MPI_Iallgather(c->buf, n, dt, c->out, n, dt, im->comm, &req); break;
    case AG_COLL_REDUCE_SCATTER: rc = MPI_Ireduce_scatter_block(c->buf, c->out, n, dt, op, im->comm, &req); break;
    default: rc = MPI_Ibarrier(im->comm, &req); break;
  }
  unlock_calls();
  if (rc != MPI_SUCCESS) return mpi_error(rc, what);
  return wait_requests(im, &req, 1, start, deadline_ns, what);
}

static void mpi_abort(ag_dist_impl *im, ag_status st, const char *why) {
  mark_broken(im, st, why ? why : "MPI group aborted");
}

static ag_status mpi_broken(ag_dist_impl *im, char *msg, size_t n) {
  pthread_mutex_lock(&im->mu);
  ag_status st = im->broken_st;
  if (st != AG_OK && msg) snprintf(msg, n, "%s", im->broken_msg);
  pthread_mutex_unlock(&im->mu);
  return st;
}

static void mpi_destroy(ag_dist_impl *im) {
  if (!im) return;
  bool broken = im->broken_st != AG_OK;
  pthread_mutex_lock(&g_mu);
  /* A broken communicator may have a collective that never ends; freeing
   * or finalizing could wait on the dead peer. It is left to process exit. */
  if (!broken) {
    MPI_Comm_free(&im->p2p);
    MPI_Comm_free(&im->comm);
  }
  g_open_groups--;
  if (g_open_groups == 0 && g_we_initialized && !g_any_broken) {
    MPI_Finalize();
    g_we_initialized = false;
  }
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_destroy(&im->mu);
  free(im->tmp);
  free(im);
}

static const ag_dist_module k_mpi = {
    .abi = AG_DIST_MODULE_ABI,
    .name = "mpi",
    .probe = mpi_probe,
    .get_id = NULL,
    .create = mpi_create,
    .run = mpi_run,
    .abort = mpi_abort,
    .broken = mpi_broken,
    .destroy = mpi_destroy,
};

__attribute__((visibility("default"))) const ag_dist_module *ag_dist_module_get(int kind) {
  return kind == AG_DIST_MPI ? &k_mpi : NULL;
}
