/* The caching allocator's settings and public API: memory categories, the
 * AG_ALLOC_CONF parser, and the ag_memory_* wrappers that look up a device
 * and act on its allocator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "memory/alloc_pool.h"

/* ---- memory categories (thread-local) ---- */

static _Thread_local ag_mem_category tl_cat[CAT_DEPTH];
static _Thread_local int tl_depth;

const char *ag_mem_category_name(ag_mem_category c) {
  static const char *const names[] = {"other",       "parameters", "gradients", "optimizer",
                                      "activations", "workspace",  "staging"};
  return (c >= 0 && c < AG_MEM_CATEGORY_COUNT) ? names[c] : "?";
}

void ag_mem_category_push(ag_mem_category c) {
  if (c < 0 || c >= AG_MEM_CATEGORY_COUNT) c = AG_MEM_OTHER;
  /* Pushes beyond the depth are counted but not stored, so pops still pair. */
  if (tl_depth < CAT_DEPTH) tl_cat[tl_depth] = c;
  tl_depth++;
}

void ag_mem_category_pop(void) {
  if (tl_depth > 0) tl_depth--;
}

ag_mem_category ag_mem_category_current(void) {
  if (tl_depth == 0) return AG_MEM_OTHER;
  return tl_cat[(tl_depth < CAT_DEPTH ? tl_depth : CAT_DEPTH) - 1];
}

/* ---- configuration ---- */

AG_HIDDEN void ag__alloc_conf_default(alloc_conf *c) {
  memset(c, 0, sizeof *c);
  c->max_split = SIZE_MAX;
  c->caching = true;
  c->trace_entries = K_TRACE_DEFAULT;
}

static bool parse_bool(const char *v, bool *out) {
  if (!strcmp(v, "1") || !strcmp(v, "True") || !strcmp(v, "true")) return *out = true, true;
  if (!strcmp(v, "0") || !strcmp(v, "False") || !strcmp(v, "false")) return *out = false, true;
  return false;
}

/* A decimal integer, the whole string (the strict parser of every AG_*
 * number: no sign, blank or overflow). */
static bool parse_u64(const char *v, uint64_t *out) {
  int64_t x;
  if (!ag_parse_i64(v, 0, INT64_MAX, &x) || v[0] == '-') return false;
  *out = (uint64_t)x;
  return true;
}

/* Parse PyTorch's "key:value,key:value" into c (which holds the starting
 * values); all or nothing. */
AG_HIDDEN ag_status ag__alloc_conf_parse(const char *s, alloc_conf *c, const char *who) {
  alloc_conf n = *c;
  char buf[512], vb[64]; /* values in messages are escaped: no raw control sequences */
  if (strlen(s) >= sizeof buf) return ag_error_set(AG_ERR_INVALID, "%s: string too long", who);
  strcpy(buf, s);
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ') item++;
    char *end = item + strlen(item);
    while (end > item && end[-1] == ' ') *--end = 0;
    if (!*item) continue;
    char *colon = strchr(item, ':');
    if (!colon)
      return ag_error_set(AG_ERR_INVALID, "%s: '%s' is not key:value", who, ag_escape(item, vb, sizeof vb));
    *colon = 0;
    const char *k = item, *v = colon + 1;
    while (*v == ' ') v++;
    uint64_t u;
    bool b;
    if (!strcmp(k, "max_split_size_mb")) {
      if (!parse_u64(v, &u) || u <= 20 || u > ((uint64_t)1 << 40))
        return ag_error_set(AG_ERR_INVALID,
                            "%s: max_split_size_mb must be an integer > 20 (MiB), got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.max_split = (size_t)u << 20;
    } else if (!strcmp(k, "roundup_power2_divisions")) {
      if (!parse_u64(v, &u) || u < 1 || u > 64 || (u & (u - 1)))
        return ag_error_set(AG_ERR_INVALID,
                            "%s: roundup_power2_divisions must be a power of two in 1..64, got '%s'"
                            " (the per-interval list form is not supported)",
                            who, ag_escape(v, vb, sizeof vb));
      n.rp2_div = (int)u;
    } else if (!strcmp(k, "expandable_segments")) {
      if (!parse_bool(v, &b))
        return ag_error_set(AG_ERR_INVALID, "%s: expandable_segments must be 0/1/True/False, got '%s'",
                            who, ag_escape(v, vb, sizeof vb));
      n.expandable = b;
    } else if (!strcmp(k, "caching")) {
      if (!parse_bool(v, &b))
        return ag_error_set(AG_ERR_INVALID, "%s: caching must be 0/1, got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.caching = b;
    } else if (!strcmp(k, "trace_max_entries")) {
      if (!parse_u64(v, &u) || u > (1u << 24))
        return ag_error_set(AG_ERR_INVALID, "%s: trace_max_entries must be 0..16777216, got '%s'",
                            who, ag_escape(v, vb, sizeof vb));
      if (u && !AG_ALLOC_TRACE)
        return ag_error_set(AG_ERR_UNSUPPORTED,
                            "%s: trace_max_entries %s: this build has no allocator event ring (built with "
                            "AG_ALLOC_TRACE=OFF)", who, ag_escape(v, vb, sizeof vb));
      n.trace_entries = (size_t)u;
    } else if (!strcmp(k, "memory_fraction")) {
      double f;
      if (!ag_parse_f64(v, 0.0, 1.0, &f))
        return ag_error_set(AG_ERR_INVALID, "%s: memory_fraction must be in [0, 1], got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.fraction = f;
      n.has_fraction = true;
      n.has_cap = false;
    } else if (!strcmp(k, "memory_cap_mb")) {
      if (!parse_u64(v, &u) || u > ((uint64_t)1 << 40))
        return ag_error_set(AG_ERR_INVALID, "%s: memory_cap_mb must be an integer, got '%s'", who, ag_escape(v, vb, sizeof vb));
      n.cap_bytes = (size_t)u << 20;
      n.has_cap = true;
      n.has_fraction = false;
    } else {
      return ag_error_set(AG_ERR_INVALID,
                          "%s: unknown key '%s' (known: max_split_size_mb, roundup_power2_divisions, "
                          "expandable_segments, caching, memory_fraction, memory_cap_mb, "
                          "trace_max_entries)",
                          who, ag_escape(k, vb, sizeof vb));
    }
  }
  *c = n;
  return AG_OK;
}

/* ---- public API: look up the device, then act on its allocator ---- */

static ag_allocator *dev_alloc(ag_device d) {
  ag_devstate *ds = ag__devstate(d);
  return ds ? ds->alloc : NULL;
}

ag_status ag_memory_stats_get(ag_device d, ag_memory_stats *out_stats) {
  if (!out_stats) return ag_error_set(AG_ERR_INVALID, "ag_memory_stats_get: NULL out_stats");
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_stats(a, out_stats);
  return AG_OK;
}

ag_status ag_memory_reset_peak(ag_device d) {
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_reset_peak(a);
  return AG_OK;
}

ag_status ag_memory_empty_cache(ag_device d) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_empty_cache(a) : ag_last_status();
}

ag_status ag_memory_set_cap(ag_device d, size_t bytes) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_set_cap(a, bytes) : ag_last_status();
}

ag_status ag_memory_set_fraction(ag_device d, double fraction) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_set_fraction(a, fraction) : ag_last_status();
}

ag_status ag_alloc_configure(ag_device d, const char *conf) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_configure(a, conf) : ag_last_status();
}

ag_status ag_memory_summary(ag_device d, char *buf, size_t len) {
  if (!buf || !len) return ag_error_set(AG_ERR_INVALID, "ag_memory_summary: empty buffer");
  buf[0] = 0;
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag__alloc_summary(a, buf, len);
  return AG_OK;
}

ag_status ag_memory_snapshot_json(ag_device d, const char *path) {
  if (!path) return ag_error_set(AG_ERR_INVALID, "ag_memory_snapshot_json: NULL path");
  ag_allocator *a = dev_alloc(d);
  if (!a) return ag_last_status();
  ag_output *o = NULL;
  ag_status st = ag_output_open(path, "allocator snapshot", &o);
  if (st == AG_OK) st = ag__alloc_snapshot(a, ag_output_file(o));
  if (st == AG_OK) st = ag_output_commit(o);
  else ag_output_abort(o);
  if (st != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    st = ag_error_set(st, "ag_memory_snapshot_json: %s", msg);
  }
  return st;
}

ag_status ag_alloc_inject_failure(ag_device d, int nth, int count) {
  ag_allocator *a = dev_alloc(d);
  return a ? ag__alloc_inject(a, nth, count) : ag_last_status();
}
