/* CPU scaled-dot-product attention (AG_K_SDPA, AG_K_SDPA_BWD), flash style:
 * a query tile streams over key tiles with an online softmax, so memory is
 * O(tile) per thread and no T x S matrix exists. f32/f16/bf16 compute in
 * f32, f64 in f64. Threaded by the host pool over (batch, head, query
 * tile); the backward runs dq over the same items and dk/dv over (batch, kv
 * head, key tile), so every output row has one writer (no atomics, results
 * repeat bit for bit). cpu_k_sdpa and cpu_k_sdpa_bwd, dispatched from
 * cpu_kernels.c. */
#if defined(__GNUC__) && !defined(__clang__)
/* As cpu_rows.c: -O3's vectoriser, no trapping math (no kernel reads the
 * floating-point exception flags). */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/threads.h"
#include "cpu_backend.h"
#include "cpu_tile.h"
#include "cpu_vmath.h"


/* One attention call, forward or backward: its operands (out and lse
 * written by the forward; dout, and dq, dk, dv and the forward's out from
 * the multi list, in the backward), the Philox seed and offset of its
 * dropout. */
typedef struct sdpa_ctx {
  const ag_koperand *q, *k, *v, *mask, *out, *lse, *dout; /* mask NULL: none */
  const ag_kmulti_entry *dq, *dk, *dv, *fwd_out;
  uint64_t seed, offset;
  int64_t B, H, Hkv, G, T, S, D, Dv;
  int64_t bq, bk; /* query and key tile sizes (sdpa_tiles) */
  double scale, p;
  bool causal;
  atomic_int oom;
} sdpa_ctx;

#define R float
#define FN(n) n##_f32
#define LOADR load_f
#define STORER store_f
#define EXPR vexpf
#define GEMMOK(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc) \
  ag__cpu_sgemm_small(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (acc) ? 1.0f : 0.0f, C, ldc)
#include "cpu_attention.inc"
#undef R
#undef FN
#undef LOADR
#undef STORER
#undef EXPR
#undef GEMMOK

#define R double
#define FN(n) n##_f64
#define LOADR load_d
#define STORER store_d
#define EXPR exp
#define GEMMOK(...) false
#include "cpu_attention.inc"
#undef R
#undef FN
#undef LOADR
#undef STORER
#undef EXPR
#undef GEMMOK

/* Query and key tile sizes, chosen by the query length: the score tiles
 * (bq x bk, at most 32 KiB in f32) and the tiles of q, k and v stay in L2
 * for head sizes up to 128. Measured at 1 thread (B1 H8 D64 causal,
 * process CPU time, bench/attention_bench --cpu-time): up to T = 256
 * square 64 tiles were fastest (a causal 128 computes 3 of 4 tiles;
 * 128 x 128 tiles took 15-35% longer there, 32 x 32 no less), from T = 512
 * 64 queries against 128 keys (64 x 64 took 8% longer at T = 1024). The
 * tile products go through ag__cpu_sgemm_small. */
static void sdpa_tiles(sdpa_ctx *x) {
  x->bq = 64;
  x->bk = x->T <= 256 ? 64 : 128;
}

/* The sizes of q [B, H, T, D], k [B, Hkv, S, D] and v [B, Hkv, S, Dv]
 * into x. */
static void sdpa_shapes(sdpa_ctx *x) {
  x->B = x->q->shape[0];
  x->H = x->q->shape[1];
  x->T = x->q->shape[2];
  x->D = x->q->shape[3];
  x->Hkv = x->k->shape[1];
  x->S = x->k->shape[2];
  x->Dv = x->v->shape[3];
  x->G = x->Hkv ? x->H / x->Hkv : 1;
  atomic_init(&x->oom, 0);
  sdpa_tiles(x);
}

/* work in multiply-adds, for the pool's split threshold */
static int64_t sdpa_work(const sdpa_ctx *x) { return x->B * x->H * x->T * x->S * (x->D + x->Dv); }

static ag_status sdpa_status(sdpa_ctx *x, const ag_kernel_call *c) {
  if (atomic_load(&x->oom))
    return ag_error_set(AG_ERR_OOM, "%s: no host memory for attention tiles", c->name ? c->name : "attention");
  return AG_OK;
}

ag_status cpu_k_sdpa(ag_kernel_error *err, const ag_k_sdpa *a) {
  (void)err;
  sdpa_ctx x = {.q = a->q, .k = a->k, .v = a->v, .mask = a->mask, .out = a->out, .lse = a->lse,
                .seed = a->call->seed, .offset = a->call->offset, .scale = a->scale, .p = a->dropout_p,
                .causal = a->causal != 0};
  sdpa_shapes(&x);
  const int64_t nqt = (x.T + x.bq - 1) / x.bq;
  ag__cpu_par_for(x.B * x.H * nqt, sdpa_work(&x), x.q->dtype == AG_F64 ? fwd_range_f64 : fwd_range_f32, &x);
  return sdpa_status(&x, a->call);
}

ag_status cpu_k_sdpa_bwd(ag_kernel_error *err, const ag_k_sdpa_bwd *a) {
  (void)err;
  if (!a->multi || a->multi->count < a->mgroup)
    return ag_error_set(AG_ERR_INTERNAL, "%s: dq, dk, dv and out not given", a->call->name ? a->call->name : "attention");
  sdpa_ctx x = {.q = a->q, .k = a->k, .v = a->v, .mask = a->mask, .lse = a->lse, .dout = a->dout,
                .dq = &AGK_MULTI(a, 0, dq), .dk = &AGK_MULTI(a, 0, dk), .dv = &AGK_MULTI(a, 0, dv),
                .fwd_out = &AGK_MULTI(a, 0, out), .seed = a->call->seed, .offset = a->call->offset,
                .scale = a->scale, .p = a->dropout_p, .causal = a->causal != 0};
  sdpa_shapes(&x);
  const bool dbl = x.q->dtype == AG_F64;
  const int64_t nqt = (x.T + x.bq - 1) / x.bq, nkt = (x.S + x.bk - 1) / x.bk, work = sdpa_work(&x);
  /* One pass over (b, kv head) items where they keep every thread busy
   * (recomputing the scores once instead of twice), else dq over query
   * tiles and dk, dv over key tiles, which split finer. */
  const int64_t items = x.B * x.Hkv, nt = ag_get_num_threads();
  if (nt <= 1 || items >= 2 * nt || items % nt == 0) {
    ag__cpu_par_for(items, 2 * work, dbl ? bwd1_range_f64 : bwd1_range_f32, &x);
    return sdpa_status(&x, a->call);
  }
  ag__cpu_par_for(x.B * x.H * nqt, 2 * work, dbl ? dq_range_f64 : dq_range_f32, &x);
  ag__cpu_par_for(x.B * x.Hkv * nkt, 2 * work, dbl ? dkv_range_f64 : dkv_range_f32, &x);
  return sdpa_status(&x, a->call);
}
