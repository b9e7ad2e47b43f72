/* Grad mode, as the ops read it: the thread-local stack of no-grad,
 * inference and enable-grad regions (anygrad/autograd.h), the check every
 * differentiable op makes before recording (ag__grad_needed), and the
 * recorder that the tape (core/autograd/autograd.c) registers. The modes
 * are state of the ops, not of the tape: they live below autograd so that
 * ops and scopes read them without calling up (docs/design/layering.md). */
#include <stdatomic.h>
#include <stdio.h>

#include "anygrad/autograd.h"
#include "runtime/devstate.h"
#include "tensor/autocast.h"
#include "tensor/record.h"
#include "tensor/tensor_internal.h"

/* ---------------- grad modes (thread-local stack) ---------------- */

enum { MODE_NO_GRAD = 1, MODE_INFERENCE = 2, MODE_ENABLE = 3 };
#define MODE_DEPTH 64

static _Thread_local unsigned char tl_modes[MODE_DEPTH];
static _Thread_local int tl_depth;    /* entries used in tl_modes */
static _Thread_local int tl_overflow; /* regions beyond MODE_DEPTH (all no-grad) */
static _Thread_local int tl_inference;
/* Where each region was opened, for ag_scope_end's report of a region left
 * open: the caller's file:line when marked (AG_SYNC_SITES), else its
 * return address. */
static _Thread_local struct {
  const void *addr;
  const char *file;
  int line;
} tl_site[MODE_DEPTH];

static void mode_push(unsigned char m, const void *addr) {
  if (m == MODE_INFERENCE) tl_inference++;
  if (tl_depth < MODE_DEPTH) {
    tl_site[tl_depth].addr = addr;
    tl_site[tl_depth].file = ag__site_marked(&tl_site[tl_depth].line);
    tl_modes[tl_depth++] = m;
  } else {
    tl_overflow++;
  }
}

void ag_no_grad_begin(void) { mode_push(MODE_NO_GRAD, __builtin_return_address(0)); }
void ag_inference_mode_begin(void) { mode_push(MODE_INFERENCE, __builtin_return_address(0)); }
void ag_enable_grad_begin(void) { mode_push(MODE_ENABLE, __builtin_return_address(0)); }

ag_status ag_grad_mode_end(void) {
  if (tl_overflow) {
    tl_overflow--;
    return AG_OK;
  }
  if (!tl_depth) return ag_error_set(AG_ERR_STATE, "ag_grad_mode_end: no grad-mode region is open");
  if (tl_modes[--tl_depth] == MODE_INFERENCE) tl_inference--;
  return AG_OK;
}

int ag__grad_mode_depth(void) { return tl_depth + tl_overflow; }

int ag__grad_mode_unwind(int depth, char *what, size_t len) {
  int closed = 0;
  if (depth < 0) depth = 0;
  if (what && len) what[0] = 0;
  while (tl_depth + tl_overflow > depth) {
    if (what && len && !tl_overflow) {
      /* the last one described is the outermost closed */
      int i = tl_depth - 1;
      static const char *const names[] = {"", "no-grad", "inference", "enable-grad"};
      static const char *const calls[] = {"", "ag_no_grad_begin", "ag_inference_mode_begin",
                                          "ag_enable_grad_begin"};
      char where[200];
      if (tl_site[i].file)
        snprintf(where, sizeof where, "%s:%d", tl_site[i].file, tl_site[i].line);
      else
        ag__describe_address(tl_site[i].addr, where, sizeof where);
      snprintf(what, len, "a %s region (%s called from %s)", names[tl_modes[i]], calls[tl_modes[i]], where);
    }
    ag_grad_mode_end();
    closed++;
  }
  return closed;
}

bool ag_inference_mode(void) { return tl_inference > 0; }

bool ag_grad_enabled(void) {
  if (tl_inference) return false;
  if (tl_overflow) return false;
  return tl_depth == 0 || tl_modes[tl_depth - 1] == MODE_ENABLE;
}

/* NULL gives false without an error; a released tensor sets AG_ERR_STATE. */
bool ag_tensor_requires_grad(const ag_tensor *t) {
  if (AG_LIKELY(t && t->magic == AG__T_LIVE)) return t->requires_grad;
  if (t) ag__tensor_unusable(t, "ag_tensor_requires_grad");
  return false;
}

bool ag__grad_needed(int n, ag_tensor *const *inputs) {
  if (!ag_grad_enabled()) return false;
  for (int i = 0; i < n; i++)
    if (inputs[i] && inputs[i]->requires_grad) return true;
  return false;
}

/* ---------------- the recorder ---------------- */

/* Set once by the tape's constructor; an atomic pointer, so a later set
 * (a test's) is seen whole by every thread. */
static _Atomic(const ag_grad_recorder *) g_recorder;

void ag__grad_recorder_set(const ag_grad_recorder *r) {
  atomic_store_explicit(&g_recorder, r, memory_order_release);
}

static const ag_grad_recorder *recorder(void) {
  return atomic_load_explicit(&g_recorder, memory_order_acquire);
}

ag_status ag__grad_record(ag_tensor *out, ag_gop op, int n_inputs, ag_tensor *const *inputs, int n_saved,
                          ag_tensor *const *saved, const ag_gparams *p) {
  if (!out) return ag_last_status();
  const ag_grad_recorder *r = recorder();
  /* Only the tape sets requires_grad, so an op that needs a node has it. */
  if (AG_UNLIKELY(!r)) return ag_error_set(AG_ERR_INTERNAL, "autograd: no recorder is registered");
  return r->record(out, op, n_inputs, inputs, n_saved, saved, p);
}

void ag__grad_tensor_free(ag_tensor *t) {
  if (!t->grad && !t->grad_fn && !t->hooks) return;
  const ag_grad_recorder *r = recorder();
  if (r) r->tensor_free(t);
}
