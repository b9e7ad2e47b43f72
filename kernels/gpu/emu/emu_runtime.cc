/* The emulated GPU runtime: the gpu* calls of vendor.h over host memory.
 * Two devices: 0 has CUDA's warp (32) and launch limits, 1 HIP's (64).
 * Device memory is aligned host memory filled with 0xff bytes (NaN for
 * floats) so a read of unwritten memory shows (in checking mode each block
 * has a mapping of its own with redzones, kept a while after the free, so
 * the checker knows the device's address space); capacity is capped so OOM
 * paths run. The current device is per thread, as in CUDA. Streams
 * execute work at once (immediate mode), or, with AG_GPUEMU_DEFERRED=1, on
 * one worker thread per stream after an optional delay, so host code that
 * touches memory a queued copy still reads is caught. Kernel execution
 * errors are sticky on the device until a synchronizing call returns them,
 * as a CUDA launch failure is. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cxxabi.h>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "emu_internal.h"
#include "anygrad/checks.h"

#define EMU_NDEV 2
#define EMU_VM_GRAN ((size_t)2 << 20)
/* Check mode: the redzone before and after each gpuMalloc block, and how
 * many freed blocks keep their address space (memory released) so that a
 * late access to one is found. */
#define EMU_REDZONE ((size_t)64 << 10)
#define EMU_QUARANTINE 256

struct agemu_stream {
  int dev;
  bool deferred;
  std::mutex m;
  std::condition_variable cv, idle;
  std::deque<std::function<void()>> q;
  bool busy = false, stop = false;
  std::thread worker;
};

struct agemu_event {
  int dev;
  bool timing;
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0, done = 0;
  int pending = 0; /* queued items that still reference the event */
  double t_ms = 0;
};

namespace {

struct emu_dev {
  int warp;
  bool hip_limits;
  size_t cap;
  std::mutex m;
  size_t used = 0;
  std::map<uintptr_t, size_t> allocs;   /* gpuMalloc blocks */
  std::map<uintptr_t, size_t> reserved; /* VM reservations */
  std::map<uintptr_t, size_t> mapped;   /* VM mappings, one per map call */
  std::set<uintptr_t> segments;         /* allocs that are the core's segments (check mode) */
  std::map<uintptr_t, agemu::span> spans; /* check mode: each gpuMalloc block's mapping, by user_lo */
  std::deque<uintptr_t> quarantine;     /* freed spans, oldest first */
  gpuError_t err = gpuSuccess;          /* sticky execution error */
  std::string detail;
  agemu_stream *null_stream = nullptr;
};

/* The module's one registry: created once (std::call_once), then each
 * device's mutable state is guarded by its own mutex. */
struct emu_state {
  emu_dev dev[EMU_NDEV];
  bool deferred = false, strict = true;
  long delay_us = 0;
  int sms = 4;                 /* AG_GPUEMU_SMS */
  int sched = agemu::SCHED_FORWARD;
  uint64_t seed = 0;           /* AG_GPUEMU_SCHED=random:SEED */
  std::atomic<uint64_t> launches{0}; /* numbers the random schedules' launches */
  bool check = false;          /* AG_GPUEMU_CHECK=1 */
  std::string config_error;    /* a malformed AG_GPUEMU_* knob: the backend is unavailable */
  std::mutex pin_m;
  std::map<uintptr_t, size_t> pinned;
};
emu_state *g_emu;
std::once_flag g_once;

thread_local int tl_dev;
thread_local gpuError_t tl_last = gpuSuccess;
thread_local std::string tl_detail;
/* check mode: the kernel call being launched on this thread */
thread_local std::vector<agemu::extent> tl_call;
thread_local bool tl_call_set;

/* An integer in [lo, hi] through the library's strict parser; anything else
 * is reported (the value escaped) and the default used. */
/* A numeric AG_GPUEMU_* variable; a bad value is kept as the emulator's
 * configuration error (the backend is then unavailable with it). */
long env_long(std::string *err, const char *name, long dflt, long lo, long hi) {
  int64_t x = dflt;
  if (ag_env_i64(name, lo, hi, dflt, &x) != AG_OK) {
    if (err->empty()) *err = std::string("gpuemu: ") + ag_last_error();
    return dflt;
  }
  return (long)x;
}

/* AG_GPUEMU_SMS: a whole decimal number in [1, 4096], nothing else. */
bool parse_sms(const char *v, int *out) {
  if (!v || !*v) return true;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || end == v || errno || x < 1 || x > 4096 || !(*v >= '0' && *v <= '9')) return false;
  *out = (int)x;
  return true;
}
/* AG_GPUEMU_SCHED: forward | reverse | random:SEED (SEED a decimal u64). */
bool parse_sched(const char *v, int *out_kind, uint64_t *out_seed) {
  if (!v || !*v || !strcmp(v, "forward")) return true;
  if (!strcmp(v, "reverse")) {
    *out_kind = agemu::SCHED_REVERSE;
    return true;
  }
  if (strncmp(v, "random:", 7) != 0 || !(v[7] >= '0' && v[7] <= '9')) return false;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v + 7, &end, 10);
  if (*end || errno) return false;
  *out_kind = agemu::SCHED_RANDOM;
  *out_seed = x;
  return true;
}

void init_once() {
  g_emu = new emu_state;
  /* At most 2^24 MiB (16 TiB): the shift to bytes cannot wrap. */
  size_t cap = (size_t)env_long(&g_emu->config_error, "AG_GPUEMU_MEM_MB", 4096, 1, 1L << 24) << 20;
  for (int d = 0; d < EMU_NDEV; d++) {
    g_emu->dev[d].warp = d == 0 ? 32 : 64;
    g_emu->dev[d].hip_limits = d == 1;
    g_emu->dev[d].cap = cap;
  }
  g_emu->deferred = env_long(&g_emu->config_error, "AG_GPUEMU_DEFERRED", 0, 0, 1) != 0;
  g_emu->strict = env_long(&g_emu->config_error, "AG_GPUEMU_STRICT", 1, 0, 1) != 0;
  g_emu->delay_us = env_long(&g_emu->config_error, "AG_GPUEMU_DELAY_US", 0, 0, 10000000);
  /* the values in messages with control characters escaped */
  auto esc = [](const char *x) {
    char b[96];
    return std::string(ag_escape(x, b, sizeof b));
  };
  const char *v = getenv("AG_GPUEMU_SMS");
  if (!parse_sms(v, &g_emu->sms))
    g_emu->config_error = std::string("AG_GPUEMU_SMS=") + esc(v) + " is not a whole number from 1 to 4096";
  v = getenv("AG_GPUEMU_CHECK");
  if (v && *v && strcmp(v, "0") && strcmp(v, "1"))
    g_emu->config_error = std::string("AG_GPUEMU_CHECK=") + esc(v) + " is not 0 or 1";
  g_emu->check = v && !strcmp(v, "1");
  v = getenv("AG_GPUEMU_SCHED");
  if (!parse_sched(v, &g_emu->sched, &g_emu->seed))
    g_emu->config_error = std::string("AG_GPUEMU_SCHED=") + esc(v) + " is not forward, reverse or random:SEED";
}
emu_state *st() {
  std::call_once(g_once, init_once);
  return g_emu;
}
/* A query's "not ready" answer. The HIP flavour models ROCm, which records
 * hipErrorNotReady as the thread's last error like any other failed call
 * (hipGetLastError returns it later); CUDA does not record it. */
gpuError_t not_ready(int dev) {
  if (st()->dev[dev].hip_limits) tl_last = gpuErrorNotReady;
  return gpuErrorNotReady;
}
gpuError_t set_last(gpuError_t e, const std::string &detail) {
  if (e != gpuSuccess) { /* the last error, as cudaGetLastError reports */
    tl_last = e;
    tl_detail = detail;
  }
  return e;
}

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- streams ---- */

void worker_main(agemu_stream *s) {
  long delay = st()->delay_us;
  std::unique_lock<std::mutex> lk(s->m);
  for (;;) {
    s->cv.wait(lk, [s] { return s->stop || !s->q.empty(); });
    if (s->q.empty()) break; /* stop with nothing left */
    std::function<void()> fn = std::move(s->q.front());
    s->q.pop_front();
    s->busy = true;
    lk.unlock();
    if (delay) usleep((useconds_t)delay);
    fn();
    lk.lock();
    s->busy = false;
    if (s->q.empty()) s->idle.notify_all();
  }
}

agemu_stream *stream_new(int dev) {
  agemu_stream *s = new agemu_stream;
  s->dev = dev;
  s->deferred = st()->deferred;
  if (s->deferred) s->worker = std::thread(worker_main, s);
  return s;
}

agemu_stream *resolve(gpuStream_t s) {
  if (s) return s;
  emu_dev &d = st()->dev[tl_dev];
  std::lock_guard<std::mutex> g(d.m);
  if (!d.null_stream) d.null_stream = stream_new(tl_dev);
  return d.null_stream;
}

void enqueue(agemu_stream *s, std::function<void()> fn) {
  if (!s->deferred) {
    fn();
    return;
  }
  std::lock_guard<std::mutex> g(s->m);
  s->q.push_back(std::move(fn));
  s->cv.notify_one();
}

void drain(agemu_stream *s) {
  if (!s->deferred) return;
  std::unique_lock<std::mutex> lk(s->m);
  s->idle.wait(lk, [s] { return s->q.empty() && !s->busy; });
}

/* The device's pending execution error, cleared (returned by a sync). */
gpuError_t take_dev_error(int dev) {
  emu_dev &d = st()->dev[dev];
  std::lock_guard<std::mutex> g(d.m);
  gpuError_t e = d.err;
  if (e != gpuSuccess) {
    tl_detail = d.detail;
    d.err = gpuSuccess;
    d.detail.clear();
    tl_last = e;
  }
  return e;
}
void dev_error(int dev, gpuError_t e, const std::string &detail) {
  emu_dev &d = st()->dev[dev];
  std::lock_guard<std::mutex> g(d.m);
  if (d.err == gpuSuccess) {
    d.err = e;
    d.detail = detail;
  }
  fprintf(stderr, "gpuemu:%d: %s\n", dev, detail.c_str());
}

bool in_map(const std::map<uintptr_t, size_t> &m, uintptr_t p, size_t n) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p >= it->first && p + n <= it->first + it->second;
}
bool is_pinned(const void *p, size_t n) {
  emu_state *e = st();
  std::lock_guard<std::mutex> g(e->pin_m);
  return in_map(e->pinned, (uintptr_t)p, n ? n : 1);
}
/* Device memory of any emulated device, or mapped pinned memory. */
bool is_device(const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  if (!n) n = 1;
  for (int d = 0; d < EMU_NDEV; d++) {
    emu_dev &dv = st()->dev[d];
    std::lock_guard<std::mutex> g(dv.m);
    if (in_map(dv.allocs, a, n) || in_map(dv.mapped, a, n)) return true;
  }
  return is_pinned(p, n);
}

std::string kernel_name(const void *k) {
  Dl_info info;
  char buf[512];
#ifdef AGEMU_CHECK
  /* the kernels' symbols are hidden: the module's symbol table names them */
  std::string fn = agemu::chk::function_name(k);
  if (!fn.empty()) return fn;
#endif
  if (dladdr(k, &info) && info.dli_sname) {
    int status = 0;
    char *dem = abi::__cxa_demangle(info.dli_sname, NULL, NULL, &status);
    std::string r = dem ? dem : info.dli_sname;
    free(dem);
    return r;
  }
  if (dladdr(k, &info) && info.dli_fname) {
    snprintf(buf, sizeof buf, "at %s+0x%lx (addr2line -Cfe %s 0x%lx names it)", info.dli_fname,
             (unsigned long)((uintptr_t)k - (uintptr_t)info.dli_fbase), info.dli_fname,
             (unsigned long)((uintptr_t)k - (uintptr_t)info.dli_fbase));
    return buf;
  }
  snprintf(buf, sizeof buf, "at %p", k);
  return buf;
}

} // namespace

/* ---- errors ---- */

const char *gpuGetErrorName(gpuError_t e) {
  switch (e) {
    case gpuSuccess: return "gpuemuSuccess";
    case gpuErrorInvalidValue: return "gpuemuErrorInvalidValue";
    case gpuErrorMemoryAllocation: return "gpuemuErrorMemoryAllocation";
    case gpuErrorInvalidConfiguration: return "gpuemuErrorInvalidConfiguration";
    case gpuErrorInvalidDevice: return "gpuemuErrorInvalidDevice";
    case gpuErrorNoDevice: return "gpuemuErrorNoDevice";
    case gpuErrorNotReady: return "gpuemuErrorNotReady";
    case gpuErrorLaunchFailure: return "gpuemuErrorLaunchFailure";
    case gpuErrorNotSupported: return "gpuemuErrorNotSupported";
    case gpuErrorInvalidResourceHandle: return "gpuemuErrorInvalidResourceHandle";
    case gpuErrorIllegalState: return "gpuemuErrorIllegalState";
  }
  return "gpuemuErrorUnknown";
}
const char *gpuGetErrorString(gpuError_t e) {
  switch (e) {
    case gpuSuccess: return "no error";
    case gpuErrorInvalidValue: return "invalid argument";
    case gpuErrorMemoryAllocation: return "out of memory";
    case gpuErrorInvalidConfiguration: return "invalid configuration argument";
    case gpuErrorInvalidDevice: return "invalid device ordinal";
    case gpuErrorNoDevice: return "no emulated device";
    case gpuErrorNotReady: return "device not ready";
    case gpuErrorLaunchFailure: return "kernel execution failed";
    case gpuErrorNotSupported: return "operation not supported";
    case gpuErrorInvalidResourceHandle: return "invalid resource handle";
    case gpuErrorIllegalState: return "illegal state";
  }
  return "unknown error";
}
gpuError_t gpuGetLastError(void) {
  gpuError_t e = tl_last;
  tl_last = gpuSuccess;
  return e;
}
gpuError_t gpuPeekAtLastError(void) { return tl_last; }
const char *agemu_error_detail(void) { return tl_detail.c_str(); }
void agemu_error_detail_clear(void) { tl_detail.clear(); }

/* ---- devices ---- */

int agemu_device_count(void) { return EMU_NDEV; }
const char *agemu_device_flavour(int dev) {
  return dev == 0 ? "warp 32, CUDA launch limits" : "warp 64, HIP launch limits";
}
int agemu_deferred(void) { return st()->deferred; }
const char *agemu_config_error(void) { return st()->config_error.c_str(); }
int agemu_checking(void) {
#ifdef AGEMU_CHECK
  return st()->check;
#else
  return 0;
#endif
}
void agemu_check_call(const agemu::extent *ext, int n, bool set) {
  tl_call.assign(ext, ext + n);
  tl_call_set = set;
}
void agemu_check_segment(void *base, bool segment) {
  for (int i = 0; i < EMU_NDEV; i++) {
    emu_dev &d = st()->dev[i];
    std::lock_guard<std::mutex> g(d.m);
    if (!d.allocs.count((uintptr_t)base)) continue;
    if (segment) d.segments.insert((uintptr_t)base);
    else d.segments.erase((uintptr_t)base);
  }
}

gpuError_t gpuGetDeviceCount(int *n) {
  st();
  *n = EMU_NDEV;
  return gpuSuccess;
}
gpuError_t gpuSetDevice(int dev) {
  if (dev < 0 || dev >= EMU_NDEV) return set_last(gpuErrorInvalidDevice, "gpuSetDevice: no such device");
  tl_dev = dev;
  return gpuSuccess;
}
gpuError_t gpuGetDevice(int *dev) {
  *dev = tl_dev;
  return gpuSuccess;
}
gpuError_t gpuGetDeviceProperties(gpuDeviceProp *p, int dev) {
  if (dev < 0 || dev >= EMU_NDEV) return set_last(gpuErrorInvalidDevice, "no such device");
  emu_dev &d = st()->dev[dev];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "anygrad GPU emulator (%s)", agemu_device_flavour(dev));
  p->totalGlobalMem = d.cap;
  p->multiProcessorCount = st()->sms;
  p->major = 0;
  p->minor = 0;
  p->warpSize = d.warp;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = d.hip_limits ? 65536 : 49152;
  return gpuSuccess;
}
gpuError_t gpuMemGetInfo(size_t *free_b, size_t *total_b) {
  emu_dev &d = st()->dev[tl_dev];
  std::lock_guard<std::mutex> g(d.m);
  *total_b = d.cap;
  *free_b = d.cap > d.used ? d.cap - d.used : 0;
  return gpuSuccess;
}
gpuError_t gpuDeviceSynchronize(void) {
  emu_dev &d = st()->dev[tl_dev];
  /* streams are not tracked per device: drain the null stream, and rely on
   * the core synchronizing its own streams */
  if (d.null_stream) drain(d.null_stream);
  return take_dev_error(tl_dev);
}

/* ---- memory ---- */

gpuError_t gpuMalloc(void **p, size_t bytes) {
  emu_dev &d = st()->dev[tl_dev];
  *p = NULL;
  if (!bytes) return gpuSuccess;
  {
    std::lock_guard<std::mutex> g(d.m);
    if (bytes > d.cap - d.used)
      return set_last(gpuErrorMemoryAllocation, "gpuMalloc: emulated device memory exhausted");
    d.used += bytes;
  }
  void *m = NULL;
  agemu::span sp = {0, 0, 0, 0, false, false};
  if (agemu_checking()) {
    /* a mapping of its own with redzones around the block (span) */
    size_t len = (bytes + 4095) / 4096 * 4096 + 2 * EMU_REDZONE;
    void *r = len > bytes ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                          : MAP_FAILED;
    if (r != MAP_FAILED) {
      m = (char *)r + EMU_REDZONE;
      sp = {(uintptr_t)r, (uintptr_t)r + len, (uintptr_t)m, (uintptr_t)m + bytes, false, false};
    }
  } else if (posix_memalign(&m, 256, bytes) != 0) {
    m = NULL;
  }
  if (!m) {
    std::lock_guard<std::mutex> g(d.m);
    d.used -= bytes;
    return set_last(gpuErrorMemoryAllocation, "gpuMalloc: out of host memory");
  }
  memset(m, 0xff, bytes); /* device memory starts as garbage: NaN */
  std::lock_guard<std::mutex> g(d.m);
  d.allocs[(uintptr_t)m] = bytes;
  if (sp.lo) d.spans[sp.user_lo] = sp;
  *p = m;
  return gpuSuccess;
}
gpuError_t gpuFree(void *p) {
  if (!p) return gpuSuccess;
  for (int i = 0; i < EMU_NDEV; i++) {
    emu_dev &d = st()->dev[i];
    std::lock_guard<std::mutex> g(d.m);
    auto it = d.allocs.find((uintptr_t)p);
    if (it == d.allocs.end()) continue;
    d.used -= it->second;
    d.allocs.erase(it);
    d.segments.erase((uintptr_t)p);
    auto sp = d.spans.find((uintptr_t)p);
    if (sp == d.spans.end()) {
      free(p);
      return gpuSuccess;
    }
    /* check mode: the memory goes back, the address space stays a while */
    sp->second.freed = true;
    sp->second.core = false;
    madvise((void *)sp->second.lo, sp->second.hi - sp->second.lo, MADV_DONTNEED);
    d.quarantine.push_back(sp->first);
    if (d.quarantine.size() > EMU_QUARANTINE) {
      auto old = d.spans.find(d.quarantine.front());
      d.quarantine.pop_front();
      munmap((void *)old->second.lo, old->second.hi - old->second.lo);
      d.spans.erase(old);
    }
    return gpuSuccess;
  }
  return set_last(gpuErrorInvalidValue, "gpuFree: not a pointer from gpuMalloc");
}
gpuError_t gpuHostAlloc(void **p, size_t bytes, unsigned flags) {
  (void)flags;
  *p = NULL;
  void *m = NULL;
  if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0)
    return set_last(gpuErrorMemoryAllocation, "gpuHostAlloc: out of host memory");
  emu_state *e = st();
  std::lock_guard<std::mutex> g(e->pin_m);
  e->pinned[(uintptr_t)m] = bytes ? bytes : 1;
  *p = m;
  return gpuSuccess;
}
gpuError_t gpuFreeHost(void *p) {
  if (!p) return gpuSuccess;
  emu_state *e = st();
  std::lock_guard<std::mutex> g(e->pin_m);
  auto it = e->pinned.find((uintptr_t)p);
  if (it == e->pinned.end()) return set_last(gpuErrorInvalidValue, "gpuFreeHost: not a pointer from gpuHostAlloc");
  e->pinned.erase(it);
  free(p);
  return gpuSuccess;
}
gpuError_t gpuHostGetDevicePointer(void **dev, void *host, unsigned flags) {
  (void)flags;
  if (!is_pinned(host, 1)) return set_last(gpuErrorInvalidValue, "gpuHostGetDevicePointer: not pinned memory");
  *dev = host;
  return gpuSuccess;
}

gpuError_t gpuMemcpyAsync(void *dst, const void *src, size_t bytes, int kind, gpuStream_t s) {
  if (!bytes) return gpuSuccess;
  agemu_stream *q = resolve(s);
  bool dev_dst = kind != gpuMemcpyDeviceToHost, dev_src = kind != gpuMemcpyHostToDevice;
  if (kind < gpuMemcpyHostToDevice || kind > gpuMemcpyDeviceToDevice)
    return set_last(gpuErrorInvalidValue, "gpuMemcpyAsync: bad kind");
  if ((dev_dst && !is_device(dst, bytes)) || (dev_src && !is_device(src, bytes)))
    return set_last(gpuErrorInvalidValue, "gpuMemcpyAsync: a device operand is not (wholly) device memory");
  if (kind == gpuMemcpyHostToDevice && q->deferred && !is_pinned(src, bytes)) {
    /* pageable source: staged before returning, as the CUDA runtime does */
    std::shared_ptr<char> tmp((char *)malloc(bytes), free);
    if (!tmp) return set_last(gpuErrorMemoryAllocation, "gpuMemcpyAsync: out of host memory");
    memcpy(tmp.get(), src, bytes);
    enqueue(q, [dst, tmp, bytes] { memcpy(dst, tmp.get(), bytes); });
    return gpuSuccess;
  }
  enqueue(q, [dst, src, bytes] { memcpy(dst, src, bytes); });
  /* to pageable memory the copy is synchronous */
  if (kind == gpuMemcpyDeviceToHost && q->deferred && !is_pinned(dst, bytes)) drain(q);
  return gpuSuccess;
}
gpuError_t gpuMemsetAsync(void *dst, int v, size_t bytes, gpuStream_t s) {
  if (!bytes) return gpuSuccess;
  if (!is_device(dst, bytes)) return set_last(gpuErrorInvalidValue, "gpuMemsetAsync: not device memory");
  enqueue(resolve(s), [dst, v, bytes] { memset(dst, v, bytes); });
  return gpuSuccess;
}

/* ---- streams and events ---- */

gpuError_t gpuStreamCreateWithFlags(gpuStream_t *s, unsigned flags) {
  (void)flags;
  *s = stream_new(tl_dev);
  return gpuSuccess;
}
gpuError_t gpuStreamDestroy(gpuStream_t s) {
  if (!s) return gpuSuccess;
  if (s->deferred) {
    {
      std::lock_guard<std::mutex> g(s->m);
      s->stop = true;
      s->cv.notify_all();
    }
    s->worker.join();
  }
  delete s;
  return gpuSuccess;
}
gpuError_t gpuStreamSynchronize(gpuStream_t s) {
  agemu_stream *q = resolve(s);
  drain(q);
  return take_dev_error(q->dev);
}
gpuError_t gpuStreamQuery(gpuStream_t s) {
  agemu_stream *q = resolve(s);
  if (q->deferred) {
    std::lock_guard<std::mutex> g(q->m);
    if (!q->q.empty() || q->busy) return not_ready(q->dev);
  }
  return take_dev_error(q->dev);
}
gpuError_t gpuEventCreateWithFlags(gpuEvent_t *e, unsigned flags) {
  agemu_event *ev = new agemu_event;
  ev->dev = tl_dev;
  ev->timing = !(flags & gpuEventDisableTiming);
  *e = ev;
  return gpuSuccess;
}
gpuError_t gpuEventDestroy(gpuEvent_t e) {
  if (!e) return gpuSuccess;
  {
    /* queued records and waits still use it: let them finish */
    std::unique_lock<std::mutex> lk(e->m);
    e->cv.wait(lk, [e] { return e->pending == 0; });
  }
  delete e;
  return gpuSuccess;
}
gpuError_t gpuEventRecord(gpuEvent_t e, gpuStream_t s) {
  if (!e) return set_last(gpuErrorInvalidValue, "gpuEventRecord: NULL event");
  agemu_stream *q = resolve(s);
  if (q->dev != e->dev) /* CUDA refuses an event and a stream of two devices */
    return set_last(gpuErrorInvalidResourceHandle, "gpuEventRecord: the event and the stream are of different devices");
  uint64_t gen;
  {
    std::lock_guard<std::mutex> g(e->m);
    gen = ++e->recorded;
    e->pending++;
  }
  enqueue(q, [e, gen] {
    std::lock_guard<std::mutex> g(e->m);
    if (e->done < gen) e->done = gen;
    e->t_ms = now_ms();
    e->pending--;
    e->cv.notify_all();
  });
  return gpuSuccess;
}
gpuError_t gpuStreamWaitEvent(gpuStream_t s, gpuEvent_t e, unsigned flags) {
  (void)flags;
  if (!e) return set_last(gpuErrorInvalidValue, "gpuStreamWaitEvent: NULL event");
  agemu_stream *q = resolve(s);
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(e->m);
    target = e->recorded;
    if (e->done >= target) return gpuSuccess;
    e->pending++;
  }
  enqueue(q, [e, target] {
    std::unique_lock<std::mutex> lk(e->m);
    e->cv.wait(lk, [e, target] { return e->done >= target; });
    e->pending--;
    e->cv.notify_all();
  });
  return gpuSuccess;
}
gpuError_t gpuEventQuery(gpuEvent_t e) {
  {
    std::lock_guard<std::mutex> g(e->m);
    if (e->done < e->recorded) return not_ready(e->dev);
  }
  return take_dev_error(e->dev);
}
gpuError_t gpuEventSynchronize(gpuEvent_t e) {
  {
    std::unique_lock<std::mutex> lk(e->m);
    uint64_t target = e->recorded;
    e->cv.wait(lk, [e, target] { return e->done >= target; });
  }
  return take_dev_error(e->dev);
}
gpuError_t gpuEventElapsedTime(float *ms, gpuEvent_t a, gpuEvent_t b) {
  if (!a->timing || !b->timing) return set_last(gpuErrorInvalidValue, "gpuEventElapsedTime: event without timing");
  std::lock_guard<std::mutex> ga(a->m);
  if (a == b) {
    *ms = 0.f;
    return a->done ? gpuSuccess : not_ready(a->dev);
  }
  std::lock_guard<std::mutex> gb(b->m);
  if (!a->done || !b->done || a->done < a->recorded || b->done < b->recorded) return not_ready(a->dev);
  *ms = (float)(b->t_ms - a->t_ms);
  return gpuSuccess;
}

/* ---- launches ---- */

gpuError_t agemu::launch(gpuStream_t s, dim3 grid, dim3 block, size_t smem, const void *kernel,
                         std::function<void()> body) {
  agemu_stream *q = resolve(s);
  emu_dev &d = st()->dev[q->dev];
  if (q->dev != tl_dev) /* CUDA fails a launch into a stream of another device than the current one */
    return set_last(gpuErrorInvalidResourceHandle,
                    "launch of kernel " + kernel_name(kernel) + " into a stream of device " + std::to_string(q->dev) +
                        " while device " + std::to_string(tl_dev) + " is current");
  unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
  const char *why = NULL;
  char buf[160];
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z) why = "a zero grid or block dimension";
  else if (nt > 1024) why = "more than 1024 threads per block";
  else if (block.x > 1024 || block.y > 1024 || block.z > (d.hip_limits ? 1024u : 64u))
    why = "a block dimension over its limit";
  else if (!d.hip_limits && (grid.x > 0x7fffffffu || grid.y > 65535u || grid.z > 65535u)) {
    snprintf(buf, sizeof buf, "grid (%u,%u,%u) over CUDA's limits (2^31-1, 65535, 65535)", grid.x, grid.y, grid.z);
    why = buf;
  } else if (d.hip_limits && ((unsigned long long)grid.x * block.x > 0xffffffffull ||
                                (unsigned long long)grid.y * block.y > 0xffffffffull ||
                                (unsigned long long)grid.z * block.z > 0xffffffffull)) {
    snprintf(buf, sizeof buf, "grid x block (%llu,%llu,%llu) work-items over HIP's 2^32-1 per dimension",
             (unsigned long long)grid.x * block.x, (unsigned long long)grid.y * block.y,
             (unsigned long long)grid.z * block.z);
    why = buf;
  } else if (smem > (d.hip_limits ? 65536u : 49152u))
    why = "dynamic shared memory over the device's limit";
  if (why) {
    char msg[512];
    snprintf(msg, sizeof msg, "launch of kernel %s with grid (%u,%u,%u), block (%u,%u,%u): %s",
             kernel_name(kernel).c_str(), grid.x, grid.y, grid.z, block.x, block.y, block.z, why);
    return set_last(gpuErrorInvalidConfiguration, msg);
  }
  agemu::launch_desc ld;
  ld.grid = grid;
  ld.block = block;
  ld.warp = d.warp;
  ld.strict = st()->strict;
  ld.sched = st()->sched;
  /* each launch its own stream of the seed's generator: a rerun with the
   * same seed and the same launches repeats the same orders */
  ld.seed = st()->seed + 0x9e3779b97f4a7c15ull * st()->launches.fetch_add(1, std::memory_order_relaxed);
  int dev = q->dev;
  if (agemu_checking()) {
    ld.chk = std::make_shared<agemu::check_info>();
    ld.chk->kernel = kernel_name(kernel);
    ld.chk->dev = q->dev;
    ld.chk->operands = tl_call;
    ld.chk->have_operands = tl_call_set;
  }
  enqueue(q, [ld, body = std::move(body), kernel, dev] {
    if (ld.chk) { /* the allocations as the launch runs */
      emu_dev &dv = st()->dev[dev];
      std::lock_guard<std::mutex> g(dv.m);
      ld.chk->regions.clear();
      for (auto &a : dv.allocs) ld.chk->regions.push_back({a.first, a.first + a.second, dv.segments.count(a.first) > 0});
      for (auto &a : dv.mapped) ld.chk->regions.push_back({a.first, a.first + a.second, true});
      ld.chk->spans.clear();
      for (auto &a : dv.spans) {
        ld.chk->spans.push_back(a.second);
        ld.chk->spans.back().core = dv.segments.count(a.first) > 0;
      }
    }
    std::string e = agemu::run_grid(ld, body);
    if (!e.empty()) dev_error(dev, gpuErrorLaunchFailure, "kernel " + kernel_name(kernel) + ": " + e);
  });
  return gpuSuccess;
}

/* ---- virtual memory ---- */

size_t agemu_vm_granularity(int dev) {
  (void)dev;
  return EMU_VM_GRAN;
}
gpuError_t agemu_vm_reserve(int dev, size_t bytes, void **out_base) {
  emu_dev &d = st()->dev[dev];
  if (!bytes || bytes % EMU_VM_GRAN) return set_last(gpuErrorInvalidValue, "vm_reserve: size not a granule multiple");
  void *m = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return set_last(gpuErrorMemoryAllocation, "vm_reserve: no address space");
  std::lock_guard<std::mutex> g(d.m);
  d.reserved[(uintptr_t)m] = bytes;
  *out_base = m;
  return gpuSuccess;
}
gpuError_t agemu_vm_map(int dev, void *at, size_t bytes) {
  emu_dev &d = st()->dev[dev];
  uintptr_t a = (uintptr_t)at;
  std::lock_guard<std::mutex> g(d.m);
  if (!bytes || bytes % EMU_VM_GRAN || a % EMU_VM_GRAN || !in_map(d.reserved, a, bytes))
    return set_last(gpuErrorInvalidValue, "vm_map: range not granule-aligned inside a reservation");
  auto it = d.mapped.lower_bound(a);
  if ((it != d.mapped.end() && it->first < a + bytes) ||
      (it != d.mapped.begin() && std::prev(it)->first + std::prev(it)->second > a))
    return set_last(gpuErrorInvalidValue, "vm_map: range already mapped");
  if (bytes > d.cap - d.used) return set_last(gpuErrorMemoryAllocation, "vm_map: emulated device memory exhausted");
  if (mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    return set_last(gpuErrorMemoryAllocation, "vm_map: out of host memory");
  memset(at, 0xff, bytes);
  d.used += bytes;
  d.mapped[a] = bytes;
  return gpuSuccess;
}
gpuError_t agemu_vm_unmap(int dev, void *at, size_t bytes) {
  emu_dev &d = st()->dev[dev];
  uintptr_t a = (uintptr_t)at, e = a + bytes;
  std::lock_guard<std::mutex> g(d.m);
  /* [a, e) must be exactly a union of whole mappings */
  auto it = d.mapped.find(a);
  if (it == d.mapped.end()) {
    return set_last(gpuErrorInvalidValue,
                    "vm_unmap: the range does not start at a mapping (part of one physical allocation cannot be "
                    "unmapped)");
  }
  uintptr_t p = a;
  auto j = it;
  while (j != d.mapped.end() && j->first == p && p < e) {
    p += j->second;
    ++j;
  }
  if (p != e)
    return set_last(gpuErrorInvalidValue,
                    "vm_unmap: the range ends inside a mapping (part of one physical allocation cannot be unmapped)");
  for (j = it; j != d.mapped.end() && j->first < e;) {
    d.used -= j->second;
    j = d.mapped.erase(j);
  }
  mmap(at, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return gpuSuccess;
}
gpuError_t agemu_vm_release(int dev, void *base, size_t bytes) {
  emu_dev &d = st()->dev[dev];
  uintptr_t a = (uintptr_t)base;
  std::lock_guard<std::mutex> g(d.m);
  auto it = d.reserved.find(a);
  if (it == d.reserved.end() || it->second != bytes)
    return set_last(gpuErrorInvalidValue, "vm_release: not a reservation");
  auto m = d.mapped.lower_bound(a);
  if (m != d.mapped.end() && m->first < a + bytes)
    return set_last(gpuErrorInvalidValue, "vm_release: the reservation still has mappings");
  d.reserved.erase(it);
  munmap(base, bytes);
  return gpuSuccess;
}
