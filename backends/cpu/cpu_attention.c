/* CPU scaled-dot-product attention (AG_K_SDPA, AG_K_SDPA_BWD), flash style:
 * a query tile streams over key tiles with an online softmax, so memory is
 * O(tile) per thread and no T x S matrix exists. f32/f16/bf16 compute in
 * f32, f64 in f64. Threaded by the host pool over (batch, head, query
 * tile); the backward runs dq over the same items and dk/dv over (batch, kv
 * head, key tile), so every output row has one writer (no atomics, results
 * repeat bit for bit). Dispatched from cpu_kernels.c. */
#if defined(__GNUC__) && !defined(__clang__)
/* As cpu_rows.c: -O3's vectoriser, no trapping math (no kernel reads the
 * floating-point exception flags). */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_tile.h"
#include "cpu_vmath.h"

/* Query and key tile sizes: a 64 x 128 score tile (32 KiB in f32) and
 * the tiles of q, k and v stay in L2 for head sizes up to 128, and the
 * tile products are large enough for the GEMM engine to run near its
 * peak (at 32 x 64 its call overhead showed). */
#define BQ 64
#define BK 128

typedef struct sdpa_ctx {
  const ag_kernel_call *c;
  int64_t B, H, Hkv, G, T, S, D, Dv;
  double scale, p;
  bool causal;
  const ag_koperand *mask; /* NULL: none */
  atomic_int oom;
} sdpa_ctx;

#define R float
#define FN(n) n##_f32
#define LOADR load_f
#define STORER store_f
#define EXPR vexpf
#define GEMMOK(ta, tb, M, N, K, A, lda, B, ldb, acc, C, ldc) \
  ag__cpu_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (acc) ? 1.0f : 0.0f, C, ldc)
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

ag_status ag__cpu_attention(const ag_kernel_call *c) {
  const ag_koperand *q = &c->o[1], *k = &c->o[2], *v = &c->o[3];
  sdpa_ctx x = {.c = c,
                .B = q->shape[0],
                .H = q->shape[1],
                .T = q->shape[2],
                .D = q->shape[3],
                .Hkv = k->shape[1],
                .S = k->shape[2],
                .Dv = v->shape[3],
                .scale = c->s[0],
                .p = c->s[1],
                .causal = c->i[0] != 0,
                .mask = c->n_operands > 4 && c->o[4].base ? &c->o[4] : NULL};
  atomic_init(&x.oom, 0);
  x.G = x.Hkv ? x.H / x.Hkv : 1;
  const bool dbl = q->dtype == AG_F64;
  const int64_t nqt = (x.T + BQ - 1) / BQ, nkt = (x.S + BK - 1) / BK;
  /* work in multiply-adds, for the pool's split threshold */
  const int64_t work = x.B * x.H * x.T * x.S * (x.D + x.Dv);
  if (c->op == AG_K_SDPA) {
    ag__cpu_par_for(x.B * x.H * nqt, work, dbl ? fwd_range_f64 : fwd_range_f32, &x);
  } else {
    if (!c->multi || c->multi->count < 4)
      return ag_error_set(AG_ERR_INTERNAL, "%s: dq, dk, dv and out not given", c->name ? c->name : "attention");
    ag__cpu_par_for(x.B * x.H * nqt, 2 * work, dbl ? dq_range_f64 : dq_range_f32, &x);
    ag__cpu_par_for(x.B * x.Hkv * nkt, 2 * work, dbl ? dkv_range_f64 : dkv_range_f32, &x);
  }
  if (atomic_load(&x.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no host memory for attention tiles", c->name ? c->name : "attention");
  return AG_OK;
}
