/* The NCCL/RCCL group module (libanygrad-nccl.so). RCCL keeps NCCL's API,
 * so one source serves both: NCCL with the CUDA runtime for cuda devices,
 * RCCL with the HIP runtime for hip devices. Both libraries are opened at run
 * time with dlopen and the few types used are declared here, so the module
 * builds without vendor headers and reports "unavailable: <reason>" where
 * the libraries or devices are absent. Each collective is handed to NCCL for
 * the group's own stream; on a non-blocking communicator the call may return
 * ncclInProgress before anything is enqueued, so ncclCommGetAsyncError is
 * polled until it is no longer in progress, then the stream until it drained
 * (with a last ncclCommGetAsyncError); a deadline bounds both, and then the
 * communicator is aborted. ncclCommAbort frees the communicator, so it runs
 * where nothing else uses it: on the thread running a collective (which sees
 * the request at its next poll), or at once when no collective is running. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "anygrad/status.h"
#include "dist/dist_internal.h"

/* ---- the NCCL API subset (nccl.h), declared by value ---- */
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[AG_DIST_ID_BYTES]; } ncclUniqueId;
typedef int ncclResult_t; /* 0 success, 7 in progress */
enum { ncclSuccess = 0, ncclInProgress = 7 };
enum { ncclInt32 = 2, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 };
enum { ncclSum = 0, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
typedef void *vstream; /* cudaStream_t / hipStream_t */
enum { RT_NOT_READY = 600 }; /* cudaErrorNotReady, hipErrorNotReady */
/* ncclConfig_t as NCCL 2.14 laid it out (later versions read an older
 * layout by its size and version); only `blocking` is set. */
typedef struct nccl_config {
  size_t size;
  unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
} nccl_config;
#define NCCL_CONFIG_UNDEF_INT (-2147483647 - 1)

typedef struct api {
  bool rccl;
  void *lib, *rt;
  char lib_name[64];
  int version;
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  /* NULL before NCCL 2.14: then the blocking ncclCommInitRank, no deadline */
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, nccl_config *);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*GetErrorString)(ncclResult_t);
  ncclResult_t (*AllReduce)(const void *, void *, size_t, int, int, ncclComm_t, vstream);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, int, int, ncclComm_t, vstream);
  ncclResult_t (*AllGather)(const void *, void *, size_t, int, ncclComm_t, vstream);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, int, int, ncclComm_t, vstream);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  /* the vendor runtime: cuda* or hip*, same shapes; 0 success, 600 not ready */
  int (*GetLastError)(void);
  int (*PeekAtLastError)(void);
  int (*SetDevice)(int);
  int (*GetDeviceCount)(int *);
  int (*StreamCreateWithFlags)(vstream *, unsigned);
  int (*StreamQuery)(vstream);
  int (*StreamDestroy)(vstream);
  int (*Malloc)(void **, size_t);
  int (*Free)(void *);
  const char *(*RtErrorString)(int);
} api;

static api g_api[2]; /* [0] NCCL, [1] RCCL; filled once by probe (the core's pthread_once) */

static void *open_first(const char *const *names, char *err, size_t n) {
  for (int i = 0; names[i]; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    if (i == 0) snprintf(err, n, "%s", dlerror());
  }
  return NULL;
}

#define SYM(h, field, name)                                                    \
  do {                                                                         \
    *(void **)&a->field = dlsym(h, name);                                      \
    if (!a->field) {                                                           \
      snprintf(why, n, "%s: missing symbol %s", a->lib_name, name);           \
      return false;                                                            \
    }                                                                          \
  } while (0)

static bool load_api(api *a, bool rccl, char *why, size_t n) {
  static const char *const nccl_libs[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                                          "/usr/lib/x86_64-linux-gnu/libnccl.so.2", NULL};
  static const char *const rccl_libs[] = {"librccl.so.1", "/opt/rocm/lib/librccl.so.1", NULL};
  static const char *const cudart[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                       "/usr/local/cuda/lib64/libcudart.so", NULL};
  static const char *const hiprt[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
                                      "/opt/rocm/lib/libamdhip64.so", NULL};
  a->rccl = rccl;
  snprintf(a->lib_name, sizeof a->lib_name, "%s", rccl ? "librccl.so.1" : "libnccl.so.2");
  char err[400] = "";
  a->lib = open_first(rccl ? rccl_libs : nccl_libs, err, sizeof err);
  if (!a->lib) {
    snprintf(why, n, "%s", err);
    return false;
  }
  SYM(a->lib, GetVersion, "ncclGetVersion");
  SYM(a->lib, GetUniqueId, "ncclGetUniqueId");
  SYM(a->lib, CommInitRank, "ncclCommInitRank");
  SYM(a->lib, CommAbort, "ncclCommAbort");
  SYM(a->lib, CommDestroy, "ncclCommDestroy");
  SYM(a->lib, CommGetAsyncError, "ncclCommGetAsyncError");
  SYM(a->lib, GetErrorString, "ncclGetErrorString");
  SYM(a->lib, AllReduce, "ncclAllReduce");
  SYM(a->lib, Broadcast, "ncclBroadcast");
  SYM(a->lib, AllGather, "ncclAllGather");
  SYM(a->lib, ReduceScatter, "ncclReduceScatter");
  SYM(a->lib, GroupStart, "ncclGroupStart");
  SYM(a->lib, GroupEnd, "ncclGroupEnd");
  a->GetVersion(&a->version);
  *(void **)&a->CommInitRankConfig = a->version >= 21400 ? dlsym(a->lib, "ncclCommInitRankConfig") : NULL;
  err[0] = 0;
  a->rt = open_first(rccl ? hiprt : cudart, err, sizeof err);
  if (!a->rt) {
    snprintf(why, n, "%s %d.%d.%d found, but its runtime is not: %s", a->lib_name, a->version / 10000,
             a->version / 100 % 100, a->version % 100, err);
    return false;
  }
  const char *p = rccl ? "hip" : "cuda";
  char name[64];
#define RT(field, suffix)                          \
  snprintf(name, sizeof name, "%s%s", p, suffix); \
  SYM(a->rt, field, name)
  RT(SetDevice, "SetDevice");
  RT(GetDeviceCount, "GetDeviceCount");
  RT(StreamCreateWithFlags, "StreamCreateWithFlags");
  RT(StreamQuery, "StreamQuery");
  RT(StreamDestroy, "StreamDestroy");
  RT(Malloc, "Malloc");
  RT(Free, "Free");
  RT(RtErrorString, "GetErrorString");
  RT(GetLastError, "GetLastError");
  RT(PeekAtLastError, "PeekAtLastError");
#undef RT
  if (!rccl) {
    /* without a driver the runtime would blame an "insufficient" driver */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
      snprintf(why, n, "%s %d.%d.%d found, but no NVIDIA driver (libcuda.so.1 is absent)", a->lib_name,
               a->version / 10000, a->version / 100 % 100, a->version % 100);
      return false;
    }
    dlclose(drv);
  }
  int count = 0;
  int rc = a->GetDeviceCount(&count);
  if (rc != 0 || count <= 0) {
    snprintf(why, n, "%s %d.%d.%d found, but %s: %s", a->lib_name, a->version / 10000, a->version / 100 % 100,
             a->version % 100, rccl ? "hipGetDeviceCount" : "cudaGetDeviceCount",
             rc ? a->RtErrorString(rc) : "no devices");
    return false;
  }
  snprintf(why, n, "%s %d.%d.%d, %d device%s", a->lib_name, a->version / 10000, a->version / 100 % 100,
           a->version % 100, count, count == 1 ? "" : "s");
  return true;
}

static bool probe_nccl(char *why, size_t n) { return load_api(&g_api[0], false, why, n); }
static bool probe_rccl(char *why, size_t n) { return load_api(&g_api[1], true, why, n); }

struct ag_dist_impl {
  api *a;
  ncclComm_t comm; /* NULL once aborted; guarded by mu while a run may use it */
  vstream stream;
  void *scratch; /* 4 device bytes for the barrier */
  int rank, size, dev;
  int64_t timeout_ms; /* bounds the polls of an abort or destroy in progress */
  pthread_mutex_t mu;
  bool in_run; /* a collective is using comm: its thread aborts it */
  ag_status broken_st;
  char broken_msg[512];
};

static ag_status nccl_err(api *a, ncclResult_t r, const char *what) {
  return ag_error_set(AG_ERR_BACKEND, "%s: %s: %s", a->rccl ? "RCCL" : "NCCL", what, a->GetErrorString(r));
}

static ag_status get_id_with(api *a, unsigned char *out) {
  ncclUniqueId id;
  ncclResult_t r = a->GetUniqueId(&id);
  if (r != ncclSuccess) return nccl_err(a, r, "ncclGetUniqueId");
  memcpy(out, id.internal, sizeof id.internal);
  return AG_OK;
}
static ag_status get_id_nccl(unsigned char *out) { return get_id_with(&g_api[0], out); }
static ag_status get_id_rccl(unsigned char *out) { return get_id_with(&g_api[1], out); }

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* ncclCommAbort (abort) or ncclCommDestroy of comm. On a non-blocking
 * communicator either may return ncclInProgress: comm then stays valid until
 * ncclCommGetAsyncError says it is no longer in progress, polled here up to
 * the group's timeout. True when released; else why says what failed (comm
 * is then left to NCCL, never used again). */
static bool release_comm(ag_dist_impl *im, ncclComm_t comm, bool abort, char *why, size_t n) {
  api *a = im->a;
  const char *fn = abort ? "ncclCommAbort" : "ncclCommDestroy";
  ncclResult_t r = abort ? a->CommAbort(comm) : a->CommDestroy(comm);
  int64_t deadline = ag__dist_deadline_ns(im->timeout_ms);
  while (r == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = a->CommGetAsyncError(comm, &state);
    if (q != ncclSuccess || state != ncclInProgress) {
      r = q != ncclSuccess ? q : state;
      break;
    }
    if (ag__dist_now_ns() >= deadline) {
      snprintf(why, n, "%s still in progress after %lld ms", fn, (long long)im->timeout_ms);
      return false;
    }
    pause_us(100);
  }
  if (r == ncclSuccess) return true;
  snprintf(why, n, "%s: %s", fn, a->GetErrorString(r));
  return false;
}

/* Whether the stream drained: 1 yes, 0 not yet, -1 an error (*out_rc).
 * HIP records hipErrorNotReady from the query as the thread's last error,
 * where the thread's next launch check (hipGetLastError after a kernel: the
 * cast back of a widened sum, or the caller's own training step for a
 * collective run inline) would find it; cleared as kernels/gpu/runtime.cu
 * does, only that value. CUDA does not record it. */
static int stream_drained(ag_dist_impl *im, int *out_rc) {
  api *a = im->a;
  int rc = a->StreamQuery(im->stream);
  *out_rc = rc;
  if (rc == RT_NOT_READY) {
    if (a->PeekAtLastError() == RT_NOT_READY) (void)a->GetLastError();
    return 0;
  }
  return rc == 0 ? 1 : -1;
}

/* Join the communicator. Nonblocking where NCCL has configs (2.14): the
 * init is polled like a collective and aborted when a peer has not joined
 * within the group's timeout, instead of blocking the creating thread for
 * good. */
static ag_status init_comm(ag_dist_impl *im, ncclUniqueId id, int64_t timeout_ms) {
  api *a = im->a;
  if (!a->CommInitRankConfig) {
    ncclResult_t r = a->CommInitRank(&im->comm, im->size, id, im->rank);
    return r == ncclSuccess ? AG_OK : nccl_err(a, r, "ncclCommInitRank");
  }
  nccl_config cfg = {.size = sizeof cfg, .magic = 0xcafebeef, .version = 21400, .blocking = 0,
                     .cgaClusterSize = NCCL_CONFIG_UNDEF_INT, .minCTAs = NCCL_CONFIG_UNDEF_INT,
                     .maxCTAs = NCCL_CONFIG_UNDEF_INT, .netName = NULL};
  ncclResult_t r = a->CommInitRankConfig(&im->comm, im->size, id, im->rank, &cfg);
  char why[256] = "";
  if (r != ncclSuccess && r != ncclInProgress) {
    ag_status st = nccl_err(a, r, "ncclCommInitRankConfig");
    if (im->comm && !release_comm(im, im->comm, true, why, sizeof why))
      st = ag_error_set(st, "%s (%s)", ag_last_error(), why);
    im->comm = NULL;
    return st;
  }
  int64_t deadline = ag__dist_deadline_ns(im->timeout_ms);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    r = a->CommGetAsyncError(im->comm, &state);
    if (r == ncclSuccess && state == ncclSuccess) return AG_OK;
    ag_status st = AG_OK;
    if (r != ncclSuccess || state != ncclInProgress)
      st = nccl_err(a, r != ncclSuccess ? r : state, "ncclCommInitRankConfig");
    else if (ag__dist_now_ns() >= deadline)
      st = ag_error_set(AG_ERR_TIMEOUT, "%s group rank %d of %d: the communicator was not complete after %lld ms "
                        "(a peer never joined?); aborted", a->rccl ? "RCCL" : "NCCL", im->rank, im->size,
                        (long long)timeout_ms);
    if (st != AG_OK) {
      if (!release_comm(im, im->comm, true, why, sizeof why)) st = ag_error_set(st, "%s (%s)", ag_last_error(), why);
      im->comm = NULL;
      return st;
    }
    pause_us(100);
  }
}

static ag_status create_with(api *a, ag_dist_create_args *args, ag_dist_impl **out, ag_dist_caps *caps) {
  ag_dist_impl *im = calloc(1, sizeof *im);
  if (!im) return ag_error_set(AG_ERR_OOM, "ag_group_create_nccl: out of host memory");
  im->a = a;
  im->rank = args->rank;
  im->size = args->size;
  im->dev = args->dev_index;
  im->timeout_ms = args->timeout_ms > 0 ? args->timeout_ms : 600000;
  pthread_mutex_init(&im->mu, NULL);
  ag_status st = AG_OK;
  int rc = a->SetDevice(im->dev);
  if (rc == 0) rc = a->StreamCreateWithFlags(&im->stream, 1 /* non-blocking */);
  if (rc == 0) rc = a->Malloc(&im->scratch, 4);
  if (rc != 0) {
    st = ag_error_set(AG_ERR_BACKEND, "ag_group_create_nccl: device %d: %s", im->dev, a->RtErrorString(rc));
  } else {
    ncclUniqueId id;
    memcpy(id.internal, args->id, sizeof id.internal);
    st = init_comm(im, id, args->timeout_ms);
  }
  if (st != AG_OK) {
    if (im->scratch) a->Free(im->scratch);
    if (im->stream) a->StreamDestroy(im->stream);
    pthread_mutex_destroy(&im->mu);
    free(im);
    return st;
  }
  *caps = (ag_dist_caps){.device_buffers = true, .native_avg = a->version >= 21000, .native_half = true};
  *out = im;
  return AG_OK;
}
static ag_status create_nccl(ag_dist_create_args *x, ag_dist_impl **o, ag_dist_caps *c) {
  return create_with(&g_api[0], x, o, c);
}
static ag_status create_rccl(ag_dist_create_args *x, ag_dist_impl **o, ag_dist_caps *c) {
  return create_with(&g_api[1], x, o, c);
}

/* Abort wakes every kernel of this communicator, here and (through the
 * failed connections) on the peers, and frees it: the caller is the only
 * user of comm (the running collective's thread, or any thread when none
 * runs). Then the stream is waited for, up to the group's timeout, so that
 * no kernel of the aborted collective still writes its buffers (the
 * caller's, or the group's f32 staging blocks) once the run has returned. A
 * failure is added to the group's message and to why (n > 0). */
static void abort_comm(ag_dist_impl *im, char *why, size_t n) {
  pthread_mutex_lock(&im->mu);
  ncclComm_t comm = im->comm;
  im->comm = NULL;
  pthread_mutex_unlock(&im->mu);
  if (!comm) return;
  char note[256] = "";
  bool ok = release_comm(im, comm, true, note, sizeof note);
  int64_t deadline = ag__dist_deadline_ns(im->timeout_ms);
  int rc = 0, d;
  while (ok && (d = stream_drained(im, &rc)) != 1) {
    if (d < 0) {
      snprintf(note, sizeof note, "after ncclCommAbort, its stream: %s", im->a->RtErrorString(rc));
      ok = false;
    } else if (ag__dist_now_ns() >= deadline) {
      snprintf(note, sizeof note, "its stream was still busy %lld ms after ncclCommAbort: the collective's buffers "
               "may still be written", (long long)im->timeout_ms);
      ok = false;
    } else {
      pause_us(100);
    }
  }
  if (ok) return;
  pthread_mutex_lock(&im->mu);
  size_t len = strlen(im->broken_msg);
  snprintf(im->broken_msg + len, sizeof im->broken_msg - len, " (%s)", note);
  pthread_mutex_unlock(&im->mu);
  if (n) snprintf(why, n, "%s", note);
}

/* Record the first failure. From the running collective's thread (self) the
 * communicator is aborted here; from another thread, here only when no
 * collective runs, else by the running one at its next poll. */
static void mark_broken(ag_dist_impl *im, ag_status st, const char *msg, bool self, char *why, size_t n) {
  pthread_mutex_lock(&im->mu);
  if (im->broken_st == AG_OK) {
    im->broken_st = st;
    snprintf(im->broken_msg, sizeof im->broken_msg, "%s", msg);
  }
  bool here = self || !im->in_run;
  pthread_mutex_unlock(&im->mu);
  if (here) abort_comm(im, why, n);
}

/* The running collective failed with st (message set): break the group and
 * abort here; st is returned, its message extended by an abort's failure. */
static ag_status fail_run(ag_dist_impl *im, ag_status st) {
  char why[256] = "";
  mark_broken(im, st, ag_last_error(), true, why, sizeof why);
  return why[0] ? ag_error_set(st, "%s (%s)", ag_last_error(), why) : st;
}

/* The status of a broken group with its message set, or AG_OK. */
static ag_status broken_status(ag_dist_impl *im) {
  pthread_mutex_lock(&im->mu);
  ag_status st = im->broken_st;
  char msg[sizeof im->broken_msg];
  snprintf(msg, sizeof msg, "%s", im->broken_msg);
  pthread_mutex_unlock(&im->mu);
  return st == AG_OK ? AG_OK : ag_error_set(st, "%s group rank %d: %s", im->a->rccl ? "RCCL" : "NCCL", im->rank, msg);
}

static ag_status nccl_run_comm(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns);

static ag_status nccl_run(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  pthread_mutex_lock(&im->mu);
  bool usable = im->broken_st == AG_OK && im->comm;
  if (usable) im->in_run = true;
  pthread_mutex_unlock(&im->mu);
  if (!usable) return broken_status(im);
  ag_status st = nccl_run_comm(im, c, deadline_ns);
  pthread_mutex_lock(&im->mu);
  im->in_run = false;
  bool abort_now = im->broken_st != AG_OK && im->comm; /* requested while the run ended */
  pthread_mutex_unlock(&im->mu);
  if (abort_now) abort_comm(im, NULL, 0);
  return st;
}

/* Enqueue and poll one collective; im->in_run is set, so comm stays valid
 * until this thread aborts it. */
static ag_status nccl_run_comm(ag_dist_impl *im, const ag_coll *c, int64_t deadline_ns) {
  api *a = im->a;
  int dt;
  switch (c->dtype) {
    case AG_F32: dt = ncclFloat32; break;
    case AG_F64: dt = ncclFloat64; break;
    case AG_F16: dt = ncclFloat16; break;
    case AG_BF16: dt = ncclBfloat16; break;
    case AG_I32: dt = ncclInt32; break;
    default: return ag_error_set(AG_ERR_DTYPE, "NCCL group: dtype %d is not supported", (int)c->dtype);
  }
  int op = c->op == AG_DIST_MAX ? ncclMax : c->op == AG_DIST_MIN ? ncclMin : c->op == AG_DIST_AVG ? ncclAvg : ncclSum;
  int rc = a->SetDevice(im->dev);
  if (rc != 0) return ag_error_set(AG_ERR_BACKEND, "NCCL group: set device %d: %s", im->dev, a->RtErrorString(rc));
  ncclResult_t r;
  switch (c->kind) {
    case AG_COLL_ALL_REDUCE: r = a->AllReduce(c->buf, c->buf, c->count, dt, op, im->comm, im->stream); break;
    case AG_COLL_BROADCAST: r = a->Broadcast(c->buf, c->buf, c->count, dt, c->root, im->comm, im->stream); break;
    case AG_COLL_ALL_GATHER: r = a->AllGather(c->buf, c->out, c->count, dt, im->comm, im->stream); break;
    case AG_COLL_REDUCE_SCATTER: r = a->ReduceScatter(c->buf, c->out, c->count, dt, op, im->comm, im->stream); break;
    default: r = a->AllReduce(im->scratch, im->scratch, 1, ncclInt32, ncclSum, im->comm, im->stream); break;
  }
  if (r != ncclSuccess && r != ncclInProgress) return fail_run(im, nccl_err(a, r, "enqueue"));
  /* ncclSuccess: enqueued on im->stream. ncclInProgress (a non-blocking
   * communicator): maybe not yet; NCCL enqueues it later, from its own
   * thread or within ncclCommGetAsyncError, and says so by no longer
   * reporting ncclInProgress. Until then the stream may be idle without the
   * collective having run, and no other NCCL call may be made. */
  bool enqueued = r == ncclSuccess;
  for (;;) {
    pthread_mutex_lock(&im->mu);
    bool aborted = im->broken_st != AG_OK;
    pthread_mutex_unlock(&im->mu);
    if (aborted) { /* another thread broke the group: abort here, then fail */
      abort_comm(im, NULL, 0);
      return broken_status(im);
    }
    /* the stream first: an error reported after it drained is still seen */
    int drained = 0;
    if (enqueued && (drained = stream_drained(im, &rc)) < 0)
      return fail_run(im, ag_error_set(AG_ERR_BACKEND, "NCCL group rank %d: stream: %s", im->rank,
                                       a->RtErrorString(rc)));
    ncclResult_t ae = ncclSuccess;
    ncclResult_t q = a->CommGetAsyncError(im->comm, &ae);
    if (q != ncclSuccess) return fail_run(im, nccl_err(a, q, "ncclCommGetAsyncError"));
    if (ae != ncclSuccess && ae != ncclInProgress)
      return fail_run(im, nccl_err(a, ae, "asynchronous error (a peer failed?)"));
    if (ae == ncclSuccess) {
      if (drained) return AG_OK;
      if (!enqueued) {
        enqueued = true;
        continue; /* look at the stream at once */
      }
    }
    if (ag__dist_now_ns() >= deadline_ns) {
      if (!enqueued)
        return fail_run(im, ag_error_set(AG_ERR_TIMEOUT, "NCCL group rank %d: collective #%llu timed out while NCCL "
                                         "still had it in progress (never enqueued: a peer died or never called "
                                         "it?); communicator aborted", im->rank, (unsigned long long)c->seq));
      return fail_run(im, ag_error_set(AG_ERR_TIMEOUT, "NCCL group rank %d: collective #%llu timed out (a peer died "
                                       "or never called it); communicator aborted", im->rank,
                                       (unsigned long long)c->seq));
    }
    pause_us(20);
  }
}

static void nccl_abort(ag_dist_impl *im, ag_status st, const char *why) {
  mark_broken(im, st, why ? why : "aborted", false, NULL, 0);
}

static ag_status nccl_broken(ag_dist_impl *im, char *msg, size_t n) {
  pthread_mutex_lock(&im->mu);
  ag_status st = im->broken_st;
  if (st != AG_OK && msg) snprintf(msg, n, "%s", im->broken_msg);
  pthread_mutex_unlock(&im->mu);
  return st;
}

/* Nothing returns a status here: a failed ncclCommDestroy is a warning. */
static void nccl_destroy(ag_dist_impl *im) {
  if (!im) return;
  api *a = im->a;
  char why[256];
  if (im->comm && !release_comm(im, im->comm, false, why, sizeof why)) /* an aborted comm is already released */
    fprintf(stderr, "anygrad: warning: %s group rank %d: %s\n", a->rccl ? "RCCL" : "NCCL", im->rank, why);
  a->Free(im->scratch);
  a->StreamDestroy(im->stream);
  pthread_mutex_destroy(&im->mu);
  free(im);
}

static const ag_dist_module k_nccl = {
    .abi = AG_DIST_MODULE_ABI, .name = "nccl", .probe = probe_nccl, .get_id = get_id_nccl,
    .create = create_nccl, .run = nccl_run, .abort = nccl_abort, .broken = nccl_broken, .destroy = nccl_destroy,
};
static const ag_dist_module k_rccl = {
    .abi = AG_DIST_MODULE_ABI, .name = "rccl", .probe = probe_rccl, .get_id = get_id_rccl,
    .create = create_rccl, .run = nccl_run, .abort = nccl_abort, .broken = nccl_broken, .destroy = nccl_destroy,
};

__attribute__((visibility("default"))) const ag_dist_module *ag_dist_module_get(int kind) {
  return kind == AG_DIST_NCCL ? &k_nccl : kind == AG_DIST_RCCL ? &k_rccl : NULL;
}
