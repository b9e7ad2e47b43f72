/* Autocast regions: thread-local state, the per-op cast helper used by the
 * ops front end, and the per-region cache of parameter casts. A policy of
 * the ops (they cast their inputs), independent of the tape: it is here,
 * below autograd, so ops and scopes apply it without calling up. */
#include <stdio.h>
#include <stdlib.h>

#include "anygrad/amp.h"
#include "tensor/tensor_internal.h"
#include "tensor/autocast.h"
#include "runtime/devstate.h"

#define MAX_DEPTH 16

typedef struct cast_entry {
  ag_tensor *src; /* borrowed key: parameters outlive the region */
  ag_tensor *cast; /* owned, off any scope */
} cast_entry;

typedef struct ac_state {
  int depth;
  ag_dtype stack[MAX_DEPTH];
  /* where each region was opened (see ag__grad_mode_unwind) */
  const void *addr[MAX_DEPTH];
  const char *file[MAX_DEPTH];
  int line[MAX_DEPTH];
  int suspended; /* > 0 while an op runs its own casts */
  cast_entry *cache;
  int n_cache, cap_cache;
} ac_state;

static _Thread_local ac_state tl_ac;

ag_status ag_autocast_begin(ag_dtype dt) {
  if (dt != AG_F16 && dt != AG_BF16 && dt != AG_F32)
    return ag_error_set(AG_ERR_DTYPE, "ag_autocast_begin: dtype must be f16, bf16 or f32, got %s", ag_dtype_name(dt));
  if (tl_ac.depth >= MAX_DEPTH)
    return ag_error_set(AG_ERR_STATE, "ag_autocast_begin: more than %d nested regions", MAX_DEPTH);
  tl_ac.addr[tl_ac.depth] = __builtin_return_address(0);
  tl_ac.file[tl_ac.depth] = ag__site_marked(&tl_ac.line[tl_ac.depth]);
  tl_ac.stack[tl_ac.depth++] = dt;
  return AG_OK;
}

ag_status ag_autocast_end(void) {
  if (tl_ac.depth == 0) return ag_error_set(AG_ERR_STATE, "ag_autocast_end: no autocast region is open");
  if (--tl_ac.depth == 0) {
    for (int i = 0; i < tl_ac.n_cache; i++) ag_tensor_release(tl_ac.cache[i].cast);
    free(tl_ac.cache);
    tl_ac.cache = NULL;
    tl_ac.n_cache = tl_ac.cap_cache = 0;
  }
  return AG_OK;
}

int ag__autocast_depth(void) { return tl_ac.depth; }

int ag__autocast_unwind(int depth, char *what, size_t len) {
  int closed = 0;
  if (depth < 0) depth = 0;
  if (what && len) what[0] = 0;
  while (tl_ac.depth > depth) {
    int i = tl_ac.depth - 1;
    if (what && len) {
      char where[200];
      if (tl_ac.file[i])
        snprintf(where, sizeof where, "%s:%d", tl_ac.file[i], tl_ac.line[i]);
      else
        ag__describe_address(tl_ac.addr[i], where, sizeof where);
      snprintf(what, len, "an autocast(%s) region (ag_autocast_begin called from %s)",
               ag_dtype_name(tl_ac.stack[i]), where);
    }
    ag_autocast_end();
    closed++;
  }
  return closed;
}

bool ag_autocast_enabled(void) {
  return tl_ac.depth > 0 && tl_ac.stack[tl_ac.depth - 1] != AG_F32 && tl_ac.suspended == 0;
}

ag_dtype ag_autocast_dtype(void) { return ag_autocast_enabled() ? tl_ac.stack[tl_ac.depth - 1] : AG_F32; }

void ag__autocast_suspend(void) { tl_ac.suspended++; }
void ag__autocast_resume(void) { tl_ac.suspended--; }

static bool is_half(ag_dtype d) { return d == AG_F16 || d == AG_BF16; }

ag_tensor *ag__autocast_to(ag_tensor *t, ag_dtype dt) {
  if (!t) return NULL;
  if (t->dtype == dt || !ag_dtype_is_float(t->dtype) || t->dtype == AG_F64) return ag__alias(t);
  /* Parameters are cast once per region: their low-precision copy is reused
   * by every op that reads them (weight tying, several micro-steps). */
  bool param = is_half(dt) && t->requires_grad && t->grad_fn == NULL;
  if (param)
    for (int i = 0; i < tl_ac.n_cache; i++)
      if (tl_ac.cache[i].src == t && tl_ac.cache[i].cast->dtype == dt) return ag__alias(tl_ac.cache[i].cast);
  ag_tensor *c = ag_cast(t, dt);
  if (!c || !param) return c;
  if (tl_ac.n_cache == tl_ac.cap_cache) {
    int cap = tl_ac.cap_cache ? tl_ac.cap_cache * 2 : 32;
    cast_entry *p = realloc(tl_ac.cache, (size_t)cap * sizeof *p);
    if (!p) return c; /* no cache: still correct */
    tl_ac.cache = p;
    tl_ac.cap_cache = cap;
  }
  /* The cache's own reference: an identity view of c, so it carries c's
   * autograd edge, taken out of any scope. */
  ag_tensor *keep = ag__scope_detach(ag__alias(c));
  if (!keep) return c;
  tl_ac.cache[tl_ac.n_cache].src = t;
  tl_ac.cache[tl_ac.n_cache].cast = keep;
  tl_ac.n_cache++;
  return c;
}

ag_dtype ag__autocast_widest(int n, ag_tensor *const *ts) {
  ag_dtype w = (ag_dtype)-1;
  for (int i = 0; i < n; i++) {
    if (!ts[i] || !ag_dtype_is_float(ts[i]->dtype)) continue;
    ag_dtype d = ts[i]->dtype;
    if ((int)w < 0) w = d;
    else if (w != d) w = (w == AG_F64 || d == AG_F64) ? AG_F64 : AG_F32;
  }
  return w;
}
