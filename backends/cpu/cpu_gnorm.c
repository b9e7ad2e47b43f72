/* CPU group norm (AG_K_GROUP_NORM, AG_K_GROUP_NORM_BWD): the reference of
 * the other backends, in double for every dtype. A (sample, group) block of
 * x [N, C, HW] is contiguous (C/groups channels of HW); blocks are split
 * across the host pool, and the weight and bias gradients across channels,
 * each summed over samples then positions in order: deterministic. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_portable.h"
#include "cpu_tile.h"


static char *at(const ag_koperand *o, int64_t i) { return ag__cpu_ptr(o) + (size_t)i * ag__cpu_dtsize(o->dtype); }

static double scalar(const ag_koperand *o, int64_t i) {
  double v;
  load_d(o->dtype, at(o, i), 1, 1, &v);
  return v;
}

typedef struct gn_job {
  const void *a; /* the decoded call */
  int64_t cpg, hw, groups;
  atomic_bool oom;
} gn_job;

static ag_status no_memory(const char *name) {
  return ag_error_set(AG_ERR_OOM, "%s: no memory for group norm scratch", name ? name : "group_norm");
}

/* Blocks [lo, hi) of the N*groups (sample, group) blocks. */
static void gn_fwd_blocks(void *ctx, int64_t lo, int64_t hi) {
  gn_job *j = ctx;
  const ag_k_group_norm *a = j->a;
  const int64_t M = j->cpg * j->hw;
  double *v = malloc((size_t)M * sizeof(double) + 2 * (size_t)j->cpg * sizeof(double));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  double *w = v + M, *b = w + j->cpg;
  for (int64_t blk = lo; blk < hi; blk++) {
    const int64_t c0 = blk % j->groups * j->cpg;
    load_d(a->x->dtype, at(a->x, blk * M), 1, M, v);
    double mean = 0, var = 0;
    for (int64_t k = 0; k < M; k++) mean += v[k];
    mean /= (double)M;
    for (int64_t k = 0; k < M; k++) var += (v[k] - mean) * (v[k] - mean);
    const double rstd = 1 / sqrt(var / (double)M + a->eps);
    for (int64_t k = 0; k < j->cpg; k++) w[k] = a->weight ? scalar(a->weight, c0 + k) : 1;
    for (int64_t k = 0; k < j->cpg; k++) b[k] = a->bias ? scalar(a->bias, c0 + k) : 0;
    for (int64_t k = 0; k < M; k++) v[k] = (v[k] - mean) * rstd * w[k / j->hw] + b[k / j->hw];
    store_d(a->y->dtype, at(a->y, blk * M), 1, M, v);
    if (a->mean) store_d(a->mean->dtype, at(a->mean, blk), 1, 1, &mean);
    if (a->rstd) store_d(a->rstd->dtype, at(a->rstd, blk), 1, 1, &rstd);
  }
  free(v);
}

ag_status cpu_k_group_norm(ag_kernel_error *err, const ag_k_group_norm *a) {
  (void)err; /* no index operands */
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_group_norm(a);
  gn_job j = {a, a->c / a->groups, a->hw, a->groups, false};
  ag__cpu_par_for(a->n * a->groups, a->n * a->c * a->hw * 4, gn_fwd_blocks, &j);
  return atomic_load(&j.oom) ? no_memory(a->call->name) : AG_OK;
}

/* dx of blocks [lo, hi): rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * g = dy * w. */
static void gn_bwd_blocks(void *ctx, int64_t lo, int64_t hi) {
  gn_job *j = ctx;
  const ag_k_group_norm_bwd *a = j->a;
  const int64_t M = j->cpg * j->hw;
  double *g = malloc(2 * (size_t)M * sizeof(double) + (size_t)j->cpg * sizeof(double));
  if (!g) {
    atomic_store(&j->oom, true);
    return;
  }
  double *x = g + M, *w = x + M;
  for (int64_t blk = lo; blk < hi; blk++) {
    const int64_t c0 = blk % j->groups * j->cpg;
    const double mean = scalar(a->mean, blk), rstd = scalar(a->rstd, blk);
    load_d(a->dy->dtype, at(a->dy, blk * M), 1, M, g);
    load_d(a->x->dtype, at(a->x, blk * M), 1, M, x);
    for (int64_t k = 0; k < j->cpg; k++) w[k] = a->weight ? scalar(a->weight, c0 + k) : 1;
    double sg = 0, sgx = 0;
    for (int64_t k = 0; k < M; k++) {
      g[k] *= w[k / j->hw];
      x[k] = (x[k] - mean) * rstd;
      sg += g[k];
      sgx += g[k] * x[k];
    }
    sg /= (double)M;
    sgx /= (double)M;
    for (int64_t k = 0; k < M; k++) g[k] = rstd * (g[k] - sg - x[k] * sgx);
    store_d(a->dx->dtype, at(a->dx, blk * M), 1, M, g);
  }
  free(g);
}

/* dweight, dbias of channels [lo, hi), over samples then positions. */
static void gn_bwd_channels(void *ctx, int64_t lo, int64_t hi) {
  gn_job *j = ctx;
  const ag_k_group_norm_bwd *a = j->a;
  const int64_t C = a->c, HW = j->hw;
  double *v = malloc(2 * (size_t)HW * sizeof(double));
  if (!v) {
    atomic_store(&j->oom, true);
    return;
  }
  double *dy = v, *x = v + HW;
  const ag_kmulti_entry *dw = &AGK_MULTI(a, 0, dw), *db = &AGK_MULTI(a, 0, db);
  const ag_dtype tdw = dw->dtype, tdb = db->dtype;
  char *pdw = dw->base ? (char *)dw->base + dw->offset : NULL;
  char *pdb = db->base ? (char *)db->base + db->offset : NULL;
  for (int64_t c = lo; c < hi; c++) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < a->n; n++) {
      const int64_t blk = n * j->groups + c / j->cpg, row = n * C + c;
      const double mean = scalar(a->mean, blk), rstd = scalar(a->rstd, blk);
      load_d(a->dy->dtype, at(a->dy, row * HW), 1, HW, dy);
      load_d(a->x->dtype, at(a->x, row * HW), 1, HW, x);
      for (int64_t k = 0; k < HW; k++) {
        sw += dy[k] * (x[k] - mean) * rstd;
        sb += dy[k];
      }
    }
    if (pdw) store_d(tdw, pdw + (size_t)c * ag__cpu_dtsize(tdw), 1, 1, &sw);
    if (pdb) store_d(tdb, pdb + (size_t)c * ag__cpu_dtsize(tdb), 1, 1, &sb);
  }
  free(v);
}

ag_status cpu_k_group_norm_bwd(ag_kernel_error *err, const ag_k_group_norm_bwd *a) {
  (void)err; /* no index operands */
  if (a->call->flags & AG_KF_PORTABLE) return ag__cpu_p_group_norm_bwd(a);
  gn_job j = {a, a->c / a->groups, a->hw, a->groups, false};
  const int64_t work = a->n * a->c * a->hw * 6;
  ag__cpu_par_for(a->n * a->groups, work, gn_bwd_blocks, &j);
  if (!atomic_load(&j.oom) && AGK_MULTI_GROUPS(a) > 0) ag__cpu_par_for(a->c, work, gn_bwd_channels, &j);
  return atomic_load(&j.oom) ? no_memory(a->call->name) : AG_OK;
}
