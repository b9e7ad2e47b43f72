/* The caching allocator's statistics and what reports them: counters and peaks,
 * the text summary, the JSON snapshot with its trace ring, and the snapshot of
 * the segments at the peak (docs/allocator.md). */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/alloc_pool.h"

static const char *const k_trace_names[] = {"alloc", "free", "free_requested", "free_completed",
                                            "segment_alloc", "segment_free", "segment_map",
                                            "segment_unmap", "oom",          "empty_cache"};

/* ---- statistics ---- */

static void stats_fill(ag_allocator *a, ag_memory_stats *o) {
  memset(o, 0, sizeof *o);
  const alloc_stats *s = &a->st;
  memcpy(o->allocation, s->allocation, sizeof o->allocation);
  memcpy(o->segment, s->segment, sizeof o->segment);
  memcpy(o->active, s->active, sizeof o->active);
  memcpy(o->inactive_split, s->inactive_split, sizeof o->inactive_split);
  memcpy(o->allocated_bytes, s->allocated_bytes, sizeof o->allocated_bytes);
  memcpy(o->reserved_bytes, s->reserved_bytes, sizeof o->reserved_bytes);
  memcpy(o->active_bytes, s->active_bytes, sizeof o->active_bytes);
  memcpy(o->inactive_split_bytes, s->inactive_split_bytes, sizeof o->inactive_split_bytes);
  memcpy(o->requested_bytes, s->requested_bytes, sizeof o->requested_bytes);
  memcpy(o->category_bytes, s->category_bytes, sizeof o->category_bytes);
  o->oversize_allocations = s->oversize_allocations;
  o->oversize_segments = s->oversize_segments;
  o->num_alloc_retries = s->num_alloc_retries;
  o->num_ooms = s->num_ooms;
  o->num_syncs_all_streams = s->num_syncs_all_streams;
  o->num_device_alloc = s->num_device_alloc;
  o->num_device_free = s->num_device_free;
  o->num_pending_events = (int64_t)a->n_pend;
  o->max_split_size = a->cfg.max_split == SIZE_MAX ? -1 : (int64_t)a->cfg.max_split;
  o->cap_bytes = (int64_t)a->cap;
  o->largest_free_block = (int64_t)ag__alloc_largest_free(a);
  o->caching = a->cfg.caching;
  o->expandable_segments = a->cfg.expandable && a->vm_ok;
}

void ag__alloc_stats(ag_allocator *a, ag_memory_stats *o) {
  alock_lock(&a->mu);
  stats_fill(a, o);
  alock_unlock(&a->mu);
}

static void peak_reset(ag_mem_stat *s, size_t n) {
  for (size_t i = 0; i < n; i++) s[i].peak = s[i].current;
}

void ag__alloc_reset_peak(ag_allocator *a) {
  alock_lock(&a->mu);
  alloc_stats *s = &a->st;
  /* alloc_stats is a run of ag_mem_stat followed by counters. */
  peak_reset((ag_mem_stat *)s, offsetof(alloc_stats, num_alloc_retries) / sizeof(ag_mem_stat));
  a->pk_bytes = -1; /* the next high is a new peak; the last snapshot stays until then */
  a->pk_target = 0;
  alock_unlock(&a->mu);
}

/* ---- text summary ---- */

typedef struct {
  char *p;
  size_t left;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->left <= 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p, b->left, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t w = (size_t)n < b->left ? (size_t)n : b->left - 1;
  b->p += w;
  b->left -= w;
}

/* A free-form row padded to the table's width. */
__attribute__((format(printf, 2, 3))) static void sb_row(sbuf *b, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  sb_printf(b, "| %-84s |\n", line);
}

static void sum_row_bytes(sbuf *b, const char *name, const ag_mem_stat *s) {
  static const char *const sub[] = {"", "  from small pool", "  from large pool"};
  for (int p = 0; p < AG_POOL_COUNT; p++) {
    char c[32], pk[32], al[32], fr[32];
    ag__alloc_fmt_bytes(c, sizeof c, (double)s[p].current);
    ag__alloc_fmt_bytes(pk, sizeof pk, (double)s[p].peak);
    ag__alloc_fmt_bytes(al, sizeof al, (double)s[p].allocated);
    ag__alloc_fmt_bytes(fr, sizeof fr, (double)s[p].freed);
    sb_printf(b, "| %-26s | %12s | %12s | %12s | %12s |\n", p ? sub[p] : name, c, pk, al, fr);
  }
}

static void sum_row_count(sbuf *b, const char *name, const ag_mem_stat *s, int n) {
  static const char *const sub[] = {"", "  from small pool", "  from large pool"};
  for (int p = 0; p < n; p++)
    sb_printf(b, "| %-26s | %12" PRId64 " | %12" PRId64 " | %12" PRId64 " | %12" PRId64 " |\n",
              p ? sub[p] : name, s[p].current, s[p].peak, s[p].allocated, s[p].freed);
}

void ag__alloc_summary(ag_allocator *a, char *buf, size_t len) {
  if (!buf || !len) return;
  buf[0] = 0;
  ag_memory_stats s;
  ag__alloc_stats(a, &s);
  sbuf b = {buf, len};
  const char *rule =
      "|============================================================================="
      "=========|\n";
  sb_printf(&b, "%s", rule);
  sb_row(&b, "anygrad memory summary: %s", a->ds->label);
  char ms[32] = "unlimited", cap[32] = "none";
  if (s.max_split_size >= 0) ag__alloc_fmt_bytes(ms, sizeof ms, (double)s.max_split_size);
  if (s.cap_bytes) ag__alloc_fmt_bytes(cap, sizeof cap, (double)s.cap_bytes);
  sb_row(&b, "caching: %s  expandable segments: %s  max_split_size: %s  cap: %s",
         s.caching ? "on" : "off", s.expandable_segments ? "on" : "off", ms, cap);
  sb_printf(&b, "%s| %-26s | %12s | %12s | %12s | %12s |\n%s", rule, "Metric", "Cur Usage",
            "Peak Usage", "Tot Alloc", "Tot Freed", rule);
  sum_row_bytes(&b, "Allocated memory", s.allocated_bytes);
  sum_row_bytes(&b, "Active memory", s.active_bytes);
  sum_row_bytes(&b, "Requested memory", s.requested_bytes);
  sum_row_bytes(&b, "Reserved memory", s.reserved_bytes);
  sum_row_bytes(&b, "Non-releasable memory", s.inactive_split_bytes);
  sb_printf(&b, "%s", rule);
  sum_row_count(&b, "Allocations", s.allocation, AG_POOL_COUNT);
  sum_row_count(&b, "Active allocs", s.active, AG_POOL_COUNT);
  sum_row_count(&b, "Reserved segments", s.segment, AG_POOL_COUNT);
  sum_row_count(&b, "Non-releasable allocs", s.inactive_split, AG_POOL_COUNT);
  sb_printf(&b, "%s", rule);
  sum_row_count(&b, "Oversize allocations", &s.oversize_allocations, 1);
  sum_row_count(&b, "Oversize segments", &s.oversize_segments, 1);
  sb_printf(&b, "%s| %-26s | %12s | %12s | %12s | %12s |\n%s", rule, "Allocated by category",
            "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed", rule);
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++) {
    char name[40];
    snprintf(name, sizeof name, "  %s", ag_mem_category_name((ag_mem_category)c));
    ag_mem_stat one[1] = {s.category_bytes[c]};
    char cu[32], pk[32], al[32], fr[32];
    ag__alloc_fmt_bytes(cu, sizeof cu, (double)one[0].current);
    ag__alloc_fmt_bytes(pk, sizeof pk, (double)one[0].peak);
    ag__alloc_fmt_bytes(al, sizeof al, (double)one[0].allocated);
    ag__alloc_fmt_bytes(fr, sizeof fr, (double)one[0].freed);
    sb_printf(&b, "| %-26s | %12s | %12s | %12s | %12s |\n", name, cu, pk, al, fr);
  }
  char lf[32];
  ag__alloc_fmt_bytes(lf, sizeof lf, (double)s.largest_free_block);
  sb_printf(&b, "%s", rule);
  sb_row(&b, "retries: %" PRId64 "  OOMs: %" PRId64 "  allocator syncs: %" PRId64
             "  largest free block: %s",
         s.num_alloc_retries, s.num_ooms, s.num_syncs_all_streams, lf);
  sb_row(&b, "raw allocs: %" PRId64 "  raw frees: %" PRId64 "  pending events: %" PRId64,
         s.num_device_alloc, s.num_device_free, s.num_pending_events);
  sb_printf(&b, "%s", rule);
}

/* ---- JSON snapshot ---- */

static void json_stat(FILE *f, const char *name, const ag_mem_stat *s, int n, bool comma) {
  static const char *const pools[] = {"all", "small_pool", "large_pool"};
  fprintf(f, "\"%s\":{", name);
  for (int p = 0; p < n; p++)
    fprintf(f, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 ",\"allocated\":%" PRId64
               ",\"freed\":%" PRId64 "}",
            p ? "," : "", n == 1 ? "all" : pools[p], s[p].current, s[p].peak, s[p].allocated,
            s[p].freed);
  fprintf(f, "}%s\n", comma ? "," : "");
}

/* The JSON snapshot, with a->mu held; without the trace ring its
 * "trace" is empty. */
static void snapshot_write(ag_allocator *a, FILE *f, bool with_trace) {
  ag_memory_stats s;
  stats_fill(a, &s);
  fprintf(f, "{\"device\":\"%s\",\n\"config\":{\"caching\":%s,\"expandable_segments\":%s,"
             "\"expandable_supported\":%s,\"max_split_size\":%" PRId64
             ",\"roundup_power2_divisions\":%d,\"cap_bytes\":%zu,\"trace_max_entries\":%zu},\n",
          a->ds->label, a->cfg.caching ? "true" : "false", a->cfg.expandable ? "true" : "false",
          a->vm_ok ? "true" : "false", s.max_split_size, a->cfg.rp2_div, a->cap, a->ring_cap);
  fprintf(f, "\"stats\":{\n");
  json_stat(f, "allocation", s.allocation, AG_POOL_COUNT, true);
  json_stat(f, "segment", s.segment, AG_POOL_COUNT, true);
  json_stat(f, "active", s.active, AG_POOL_COUNT, true);
  json_stat(f, "inactive_split", s.inactive_split, AG_POOL_COUNT, true);
  json_stat(f, "allocated_bytes", s.allocated_bytes, AG_POOL_COUNT, true);
  json_stat(f, "reserved_bytes", s.reserved_bytes, AG_POOL_COUNT, true);
  json_stat(f, "active_bytes", s.active_bytes, AG_POOL_COUNT, true);
  json_stat(f, "inactive_split_bytes", s.inactive_split_bytes, AG_POOL_COUNT, true);
  json_stat(f, "requested_bytes", s.requested_bytes, AG_POOL_COUNT, true);
  json_stat(f, "oversize_allocations", &s.oversize_allocations, 1, true);
  json_stat(f, "oversize_segments", &s.oversize_segments, 1, true);
  fprintf(f, "\"category_bytes\":{");
  for (int c = 0; c < AG_MEM_CATEGORY_COUNT; c++)
    fprintf(f, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 "}", c ? "," : "",
            ag_mem_category_name((ag_mem_category)c), s.category_bytes[c].current,
            s.category_bytes[c].peak);
  fprintf(f, "},\n\"num_alloc_retries\":%" PRId64 ",\"num_ooms\":%" PRId64
             ",\"num_syncs_all_streams\":%" PRId64 ",\"num_device_alloc\":%" PRId64
             ",\"num_device_free\":%" PRId64 ",\"largest_free_block\":%" PRId64 "},\n",
          s.num_alloc_retries, s.num_ooms, s.num_syncs_all_streams, s.num_device_alloc,
          s.num_device_free, s.largest_free_block);
  static const char *const states[] = {"inactive", "active_allocated", "active_pending_free"};
  fprintf(f, "\"segments\":[");
  for (seg *sg = a->segs; sg; sg = sg->next) {
    fprintf(f, "%s\n{\"id\":%" PRIu64 ",\"address\":\"%p\",\"total_size\":%zu,\"reserved_size\":%zu,"
               "\"stream\":%u,\"pool\":\"%s\",\"expandable\":%s,\"blocks\":[",
            sg == a->segs ? "" : ",", sg->id, sg->base, sg->size,
            sg->expandable ? sg->reserved : sg->size, sg->sid,
            sg->pool == POOL_SMALL ? "small" : "large", sg->expandable ? "true" : "false");
    for (ag_block *b = sg->first; b; b = b->next)
      fprintf(f, "%s{\"offset\":%zu,\"size\":%zu,\"requested_size\":%zu,\"stream\":%u,"
                 "\"category\":\"%s\",\"state\":\"%s\"}",
              b == sg->first ? "" : ",", b->offset, b->size,
              b->state == B_FREE ? (size_t)0 : b->requested, b->sid,
              ag_mem_category_name((ag_mem_category)b->category), states[b->state]);
    fprintf(f, "]}");
  }
  fprintf(f, "],\n\"trace\":[");
  if (!with_trace) {
    fprintf(f, "]}\n");
    return;
  }
  /* Map recorded stamps to nanoseconds of CLOCK_MONOTONIC. */
  uint64_t st1 = stamp(), ns1 = now_ns();
  double per = st1 > a->stamp0 ? (double)(ns1 - a->ns0) / (double)(st1 - a->stamp0) : 1.0;
  if (!AG_STAMP_IS_TSC) per = 1.0;
  size_t start = (a->ring_head + a->ring_cap - a->ring_n) % (a->ring_cap ? a->ring_cap : 1);
  for (size_t k = 0; k < a->ring_n; k++) {
    const trace_ev *e = &a->ring[(start + k) % a->ring_cap];
    fprintf(f, "%s\n{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"action\":\"%s\",\"segment\":%" PRIu64
               ",\"offset\":%zu,\"size\":%zu,\"stream\":%u,\"category\":\"%s\"}",
            k ? "," : "", e->seq,
            AG_STAMP_IS_TSC ? a->ns0 + (uint64_t)((double)(int64_t)(e->t_ns - a->stamp0) * per)
                            : e->t_ns,
            k_trace_names[e->action], e->seg_id, e->offset, e->size,
            e->stream, ag_mem_category_name((ag_mem_category)e->category));
  }
  fprintf(f, "]}\n");
}

ag_status ag__alloc_snapshot(ag_allocator *a, FILE *f) {
  alock_lock(&a->mu);
  snapshot_write(a, f, true);
  alock_unlock(&a->mu);
  return ferror(f) ? ag_error_set(AG_ERR_IO, "memory snapshot: write error") : AG_OK;
}

/* ---- segments at the peak ---- */

/* With a->mu held, after an allocation (grew: it reserved memory). The
 * common case costs two comparisons; a snapshot is taken a bounded number
 * of times: each 1/16 rise of the peak, each reservation at a new high, and
 * once per ag__alloc_peak_arm. */
AG_HIDDEN void ag__alloc_peak_check(ag_allocator *a, bool grew) {
  int64_t cur = a->st.allocated_bytes[AG_POOL_ALL].current;
  bool high = cur >= a->st.allocated_bytes[AG_POOL_ALL].peak;
  bool take = (a->pk_target > 0 && cur >= a->pk_target) ||
              (high && (a->pk_bytes < 0 || grew || cur - a->pk_bytes >= a->pk_bytes / 16));
  if (!take) return;
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return; /* out of host memory: the last snapshot stays */
  snapshot_write(a, m, false);
  bool bad = ferror(m) != 0;
  if (fclose(m) != 0 || bad || !buf) {
    free(buf);
    return;
  }
  free(a->pk_buf);
  a->pk_buf = buf;
  a->pk_bytes = cur;
  a->pk_target = 0;
  a->pk_gen++;
}

void ag__alloc_peak_capture(ag_allocator *a, bool on) {
  alock_lock(&a->mu);
  if (on && a->pk_users++ == 0) {
    a->pk_bytes = -1;
    a->pk_target = 0;
  } else if (!on && a->pk_users > 0 && --a->pk_users == 0) {
    free(a->pk_buf);
    a->pk_buf = NULL;
  }
  alock_unlock(&a->mu);
}

char *ag__alloc_peak_snapshot(ag_allocator *a, uint64_t *seen, int64_t *out_bytes) {
  char *r = NULL;
  alock_lock(&a->mu);
  if (a->pk_buf && a->pk_gen != *seen) {
    r = strdup(a->pk_buf);
    if (r) {
      *seen = a->pk_gen;
      *out_bytes = a->pk_bytes;
    }
  }
  alock_unlock(&a->mu);
  return r;
}

void ag__alloc_peak_arm(ag_allocator *a) {
  alock_lock(&a->mu);
  int64_t peak = a->st.allocated_bytes[AG_POOL_ALL].peak;
  if (a->pk_users && a->pk_bytes >= 0 && a->pk_bytes < peak) a->pk_target = peak;
  alock_unlock(&a->mu);
}
