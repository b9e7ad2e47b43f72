/* Reductions, variance, logsumexp, softmax and its gradient, cumsum and
 * long-K dot products of any length (tree.comp): each pass gives a
 * work-group a chunk of VKB_TREE_CHUNK elements of a row and writes a
 * partial per (row, chunk) to the stream's scratch buffer; the next pass
 * reduces the partials, until one chunk covers a row (cumsum: block sums,
 * their scan, block scans). An invocation takes
 * at most VKB_TREE_CHUNK / VKB_WG steps in a loop, so no row is too long
 * for a driver's loop limit or watchdog, and the trees depend only on the
 * sizes (deterministic). Passes depend on each other, so each waits on a
 * barrier (the stream places one before every further dispatch of a
 * launch); nothing else does. */
#include <string.h>

#include "vk_internal.h"

/* A grid of `groups` work-groups, split over x and y (group_id() in the
 * shader). */
static ag_status tree_grid(ag_bstream *s, vkb_shader sh, int spec, const vkb_args *a, int64_t groups) {
  if (groups <= 0) return AG_OK;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)groups < maxx ? (uint64_t)groups : maxx, gy = ((uint64_t)groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld work-groups exceed the device's dispatch limits",
                        (long long)groups);
  return vkb_dispatch(s, sh, spec, a, (uint32_t)gx, (uint32_t)gy, 1);
}

static int64_t chunks(int64_t r) { return (r + VKB_TREE_CHUNK - 1) / VKB_TREE_CHUNK; }

size_t vkb_tree_scratch(int64_t rows, int64_t r) {
  int64_t g0 = chunks(r), g1 = chunks(g0);
  if (g0 <= 1) return 0;
  /* two ping-pong levels, 8 bytes a value and 8 an index */
  return (size_t)(rows * g0 + rows * g1) * 16u;
}

ag_status vkb_tree_reduce(ag_bstream *s, uint64_t scratch, const vkb_tree_red *t) {
  int64_t rows = t->outer * t->inner, r = t->r;
  if (!rows) return AG_OK;
  int64_t g0 = chunks(r);
  uint64_t lv[2] = {scratch, scratch + (uint64_t)(rows * g0) * 16u};
  size_t cap[2] = {(size_t)(rows * g0), (size_t)(rows * chunks(g0))};
  vkb_shader sh = t->f64   ? VKS_TREE_D
                  : t->i64 ? VKS_TREE_I
                  : s->d->subgroup_arith && t->op != AG_R_ARGMAX ? VKS_TREE_SG
                                                                 : VKS_TREE;
  vkb_args a = {0};
  a.p[0] = t->out;
  a.p[1] = t->x;
  a.k[0] = t->odt;
  a.k[1] = t->xdt;
  a.n[0] = t->outer;
  a.n[1] = r;
  a.n[2] = t->inner;
  a.f[0] = (float)t->scale;
  a.f[1] = (float)t->beta;
  a.k[5] = t->beta != 0.0;
  memcpy(&a.n[46], &t->scale, sizeof t->scale);
  memcpy(&a.n[47], &t->beta, sizeof t->beta);
  if (t->dot) {
    a.k[2] = 2;
    a.p[6] = t->y;
    a.k[3] = t->ydt;
    a.n[14] = t->M;
    a.n[15] = t->N;
    for (int i = 0; i < 3; i++) {
      a.n[8 + i] = t->xs[i];
      a.n[11 + i] = t->ys[i];
    }
  }
  if (t->mean) {
    a.k[4] = 1;
    a.p[7] = t->mean;
  }
  a.k[7] = t->sqrt;
  ag_status st = AG_OK;
  for (int lvl = 0; st == AG_OK; lvl++) {
    int64_t g = chunks(a.n[1]);
    if (g < 1) g = 1;
    a.n[4] = g;
    if (g > 1) { /* values then indices, in the level's half */
      uint64_t base = lv[lvl & 1];
      a.p[4] = base;
      a.p[5] = base + (uint64_t)cap[lvl & 1] * 8u;
    }
    st = tree_grid(s, sh, t->op, &a, rows * g);
    if (g == 1) break;
    /* the next pass reads these partials as rows of g */
    a.k[2] = 1;
    a.k[4] = 0;
    a.p[2] = a.p[4];
    a.p[3] = a.p[5];
    a.n[0] = rows;
    a.n[1] = g;
    a.n[2] = 1;
  }
  return st;
}

ag_status vkb_tree_softmax(ag_bstream *s, uint64_t scratch, uint64_t y, uint64_t x, ag_dtype dt, int variant,
                           int64_t rows, int64_t cols) {
  bool d = dt == AG_F64;
  int64_t g = chunks(cols);
  vkb_args a = {0};
  a.p[0] = y;
  a.p[1] = x;
  a.p[4] = scratch;                                 /* (max, sum) per (row, chunk) */
  a.p[5] = scratch + (uint64_t)(rows * g) * 16u;    /* (max, sum) per row */
  a.k[0] = dt;
  a.k[6] = variant;
  a.n[0] = rows;
  a.n[1] = cols;
  a.n[2] = 1;
  a.n[4] = g;
  ag_status st = tree_grid(s, d ? VKS_SMX_PART_D : VKS_SMX_PART, 0, &a, rows * g);
  if (st == AG_OK) st = tree_grid(s, d ? VKS_SMX_ROW_D : VKS_SMX_ROW, 0, &a, rows);
  if (st == AG_OK) st = tree_grid(s, d ? VKS_SMX_OUT_D : VKS_SMX_OUT, 0, &a, rows * g);
  return st;
}

size_t vkb_tree_softmax_scratch(int64_t rows, int64_t cols) { return (size_t)(rows * chunks(cols) + rows) * 16u; }

size_t vkb_tree_cumsum_scratch(int64_t lines, int64_t r) { return (size_t)(lines * chunks(r)) * 8u; }

ag_status vkb_tree_cumsum(ag_bstream *s, uint64_t scratch, uint64_t y, uint64_t x, ag_dtype dt, int variant,
                          int64_t outer, int64_t r, int64_t inner) {
  bool d = dt == AG_F64;
  int64_t g = chunks(r), lines = outer * inner;
  vkb_args a = {0};
  a.p[0] = y;
  a.p[1] = x;
  a.p[4] = scratch; /* per (line, chunk): its sum, then its prefix */
  a.k[0] = dt;
  a.k[6] = variant;
  a.n[0] = outer;
  a.n[1] = r;
  a.n[2] = inner;
  a.n[4] = g;
  ag_status st = tree_grid(s, d ? VKS_SCAN_PART_D : VKS_SCAN_PART, 0, &a, lines * g);
  if (st == AG_OK) st = tree_grid(s, d ? VKS_SCAN_MID_D : VKS_SCAN_MID, 0, &a, lines);
  if (st == AG_OK) st = tree_grid(s, d ? VKS_SCAN_OUT_D : VKS_SCAN_OUT, 0, &a, lines * g);
  return st;
}

static size_t align256(size_t b) { return (b + 255u) / 256u * 256u; }

size_t vkb_tree_softmax_bwd_scratch(int64_t rows, int64_t cols) {
  return align256((size_t)rows * 8u) + vkb_tree_scratch(rows, cols);
}

ag_status vkb_tree_softmax_bwd(ag_bstream *s, uint64_t scratch, uint64_t dx, uint64_t dy, uint64_t y, ag_dtype dt,
                               int variant, int64_t rows, int64_t cols) {
  bool d = dt == AG_F64;
  /* row sums: of dy (log_softmax), or of dy y as a batch of [1 x cols] @
   * [cols x 1] products */
  vkb_tree_red t = {.out = scratch, .x = dy, .odt = d ? AG_F64 : AG_F32, .xdt = dt, .op = AG_R_SUM,
                    .outer = rows, .r = cols, .inner = 1, .scale = 1.0, .f64 = d};
  if (variant != AG_KV_LOG_SOFTMAX) {
    t.dot = true;
    t.y = y;
    t.ydt = dt;
    t.M = t.N = 1;
    t.xs[0] = t.ys[0] = cols;
    t.xs[2] = t.ys[1] = 1;
  }
  ag_status st = vkb_tree_reduce(s, scratch + align256((size_t)rows * 8u), &t);
  if (st != AG_OK) return st;
  vkb_args a = {0};
  a.p[0] = dx;
  a.p[1] = dy;
  a.p[2] = y;
  a.p[5] = scratch;
  a.k[0] = dt;
  a.k[6] = variant;
  a.n[0] = rows;
  a.n[1] = cols;
  a.n[4] = chunks(cols);
  return tree_grid(s, d ? VKS_SMXB_OUT_D : VKS_SMXB_OUT, 0, &a, rows * a.n[4]);
}

size_t vkb_tree_lse_scratch(int64_t lines, int64_t r) {
  size_t pairs = align256((size_t)(lines * chunks(r) + lines) * 16u);
  size_t red = vkb_tree_scratch(lines, r);
  return pairs + align256((size_t)lines * 8u) + red;
}

ag_status vkb_tree_lse(ag_bstream *s, uint64_t scratch, uint64_t out, uint64_t x, ag_dtype dt, int64_t outer,
                       int64_t r, int64_t inner) {
  bool d = dt == AG_F64;
  int64_t lines = outer * inner, g = chunks(r);
  size_t pairs = align256((size_t)(lines * g + lines) * 16u);
  uint64_t mx = scratch + pairs;
  vkb_tree_red t = {.out = mx, .x = x, .odt = d ? AG_F64 : AG_F32, .xdt = dt, .op = AG_R_MAX,
                    .outer = outer, .r = r, .inner = inner, .scale = 1.0, .f64 = d};
  ag_status st = vkb_tree_reduce(s, mx + align256((size_t)lines * 8u), &t);
  if (st != AG_OK) return st;
  vkb_args a = {0};
  a.p[0] = out;
  a.p[1] = x;
  a.p[4] = scratch;
  a.p[5] = scratch + (uint64_t)(lines * g) * 16u;
  a.p[6] = mx;
  a.k[0] = dt;
  a.n[0] = lines;
  a.n[1] = r;
  a.n[2] = inner;
  a.n[4] = g;
  if ((st = tree_grid(s, d ? VKS_SMX_PART_D : VKS_SMX_PART, 0, &a, lines * g)) != AG_OK) return st;
  if ((st = tree_grid(s, d ? VKS_SMX_ROW_D : VKS_SMX_ROW, 0, &a, lines)) != AG_OK) return st;
  return vkb_dispatch1(s, d ? VKS_LSE_FIN_D : VKS_LSE_FIN, 0, &a, lines);
}
