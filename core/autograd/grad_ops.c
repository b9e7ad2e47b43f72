/* Backward formulas, one per recorded op. Built from public ops, and from
 * the dedicated backward kernels of backend.h through ag__launch so every
 * backend runs them. Broadcast gradients are summed back to input shapes. */
#include <math.h>
#include <string.h>

#include "autograd/grad_internal.h"

#define NEED(i) (n->e[(i)].fn || n->e[(i)].leaf)

static ag_status fail(void) {
  ag_status st = ag_last_status();
  return st != AG_OK ? st : ag_error_set(AG_ERR_INTERNAL, "ag_backward: an op failed without a message");
}

/* Sum g over the dims that broadcasting added or expanded, giving `shape`. */
static ag_tensor *reduce_to(ag_tensor *g, int ndim, const int64_t *shape) {
  if (!g) return NULL;
  int lead = g->ndim - ndim, dims[AG_MAX_DIMS], nd = 0;
  if (lead < 0) {
    ag_error_set(AG_ERR_INTERNAL, "ag_backward: gradient has fewer dims than its input");
    return NULL;
  }
  for (int i = 0; i < g->ndim; i++)
    if (i < lead || (shape[i - lead] == 1 && g->shape[i] != 1)) dims[nd++] = i;
  if (nd == 0 && lead == 0) return ag__alias(g);
  ag_tensor *s = nd ? ag_sum(g, nd, dims, true) : ag__alias(g);
  ag_tensor *r = ag_reshape(s, ndim, shape);
  ag_tensor_release(s);
  return r;
}

static ag_tensor *reduce_edge(ag_tensor *g, const ag_edge *e) {
  ag_tensor *r = reduce_to(g, e->ndim, e->shape);
  if (r && r->dtype != e->dtype) {
    ag_tensor *c = ag_cast(r, e->dtype);
    ag_tensor_release(r);
    r = c;
  }
  return r;
}

/* out = f(a, b) for a backward sub-op of AG_K_BINARY, in the shape of g:
 * a unary op's AG_B_<ID>_BWD (a = upstream grad g, b = the saved value) or
 * a binary op's partial derivative (a, b the forward's inputs, broadcast). */
static ag_tensor *binary_bwd(int sub, ag_tensor *g, ag_tensor *a, ag_tensor *b, double s0, double s1) {
  ag_tensor *out = ag__tensor_new(ag__ds(g), g->dtype, g->ndim, g->shape);
  if (!out) return NULL;
  ag_kernel_call c;
  ag__kcall_init(&c, AG_K_BINARY, sub, "ag_backward", 3, (ag_tensor *[]){out, NULL, NULL});
  c.s[0] = s0;
  c.s[1] = s1;
  ag__broadcast_operand(&c.o[1], a, g->ndim, g->shape);
  ag__broadcast_operand(&c.o[2], b, g->ndim, g->shape);
  if (out->numel && ag__launch(ag__ds(g), &c) != AG_OK) {
    ag_tensor_release(out);
    return NULL;
  }
  return out;
}

static int norm_dim(int d, int ndim) { return d < 0 ? d + ndim : d; }

/* Shape of a reduction's output with its reduced dims kept as 1. */
static void keep_shape(const ag_node *n, const ag_edge *in, int64_t *ks) {
  memcpy(ks, in->shape, sizeof(int64_t) * AG_MAX_DIMS);
  if (n->p.n_dims == 0) {
    for (int i = 0; i < in->ndim; i++) ks[i] = 1;
  } else {
    for (int k = 0; k < n->p.n_dims; k++) ks[norm_dim(n->p.dims[k], in->ndim)] = 1;
  }
}

static ag_tensor *scalar_like(ag_tensor *g, double v) {
  return ag_full(ag_tensor_device(g), g->dtype, 0, NULL, v);
}

/* Move dim to the end and make contiguous (for row-wise kernels). */
static ag_tensor *last_dim_contig(ag_tensor *t, int dim) {
  if (dim == t->ndim - 1) return ag_contiguous(t);
  ag_tensor *tr = ag_transpose(t, dim, t->ndim - 1);
  ag_tensor *c = ag_contiguous(tr);
  ag_tensor_release(tr);
  return c;
}

static ag_status softmax_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *y = n->out_val;
  int dim = y->ndim ? norm_dim((int)n->p.i[0], y->ndim) : 0;
  if (y->ndim == 0) {
    /* softmax of a scalar is 1 (log: 0): the gradient is zero. */
    gin[0] = ag_zeros_like(g);
    return gin[0] ? AG_OK : fail();
  }
  ag_tensor *yc = last_dim_contig(y, dim), *gc = last_dim_contig(g, dim);
  ag_tensor *dx = yc ? ag_empty_like(yc) : NULL;
  ag_status st = (yc && gc && dx) ? AG_OK : fail();
  if (st == AG_OK && dx->numel) {
    int64_t cols = yc->shape[yc->ndim - 1];
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SOFTMAX_BWD, n->op == AG_G_LOG_SOFTMAX, "ag_softmax backward", 3,
                   (ag_tensor *[]){dx, gc, yc});
    c.i[0] = dx->numel / cols;
    c.i[1] = cols;
    st = ag__launch(ag__ds(dx), &c);
  }
  if (st == AG_OK) {
    gin[0] = dim == y->ndim - 1 ? ag__alias(dx) : ag_transpose(dx, dim, y->ndim - 1);
    if (!gin[0]) st = fail();
  }
  ag_tensor_release(yc);
  ag_tensor_release(gc);
  ag_tensor_release(dx);
  return st;
}

static ag_status cross_entropy_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *logits = n->e[0].val, *targets = n->e[1].val;
  int red = (int)n->p.i[0];
  int32_t ignore = (int32_t)n->p.i[1];
  int64_t C = logits->shape[logits->ndim - 1];
  int64_t N = logits->ndim == 2 ? logits->shape[0] : 1;
  int64_t s2[2] = {N, C}, s1[1] = {N};
  /* ag_cross_entropy saves its device-side count of non-ignored targets for
   * the mean reduction, so the backward never counts them again. */
  if (red == AG_REDUCTION_MEAN && (n->n_saved < 3 || !n->saved[2]))
    return ag_error_set(AG_ERR_INTERNAL, "ag_cross_entropy backward: target count not saved");
  ag_tensor *lc = ag_contiguous(logits), *l2 = ag_reshape(lc, 2, s2);
  ag_tensor *tc = ag__index_operand(ag__ds(logits), AG_K_CROSS_ENTROPY_BWD, logits->dtype, targets);
  ag_tensor *t1 = tc ? ag_reshape(tc, 1, s1) : NULL;
  /* Per-row upstream gradients and the count in f32, f64 for f64 logits
   * (as the forward's per-row losses). */
  ag_dtype rdt = logits->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *g32 = ag_cast(g, rdt), *rows = NULL;
  if (red == AG_REDUCTION_NONE) {
    rows = ag_reshape(g32, 1, s1);
  } else {
    ag_tensor *scale = NULL;
    if (red == AG_REDUCTION_MEAN) {
      /* the forward's device-side count of non-ignored targets */
      ag_tensor *cnt = ag_cast(n->saved[2], rdt);
      scale = cnt ? ag_div(g32, cnt) : NULL;
      ag_tensor_release(cnt);
    } else {
      scale = ag__alias(g32);
    }
    int64_t one = 1;
    ag_tensor *s1d = ag_reshape(scale, 1, &one);
    rows = ag_expand(s1d, 1, s1);
    ag_tensor_release(s1d);
    ag_tensor_release(scale);
  }
  ag_tensor *dl = l2 ? ag_empty_like(l2) : NULL;
  ag_status st = (l2 && t1 && rows && dl) ? AG_OK : fail();
  if (st == AG_OK && dl->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_CROSS_ENTROPY_BWD, 0, "ag_cross_entropy backward", 4,
                   (ag_tensor *[]){dl, l2, t1, rows});
    c.i[0] = N;
    c.i[1] = C;
    c.i[2] = ignore;
    st = ag__launch(ag__ds(dl), &c);
  }
  if (st == AG_OK) {
    gin[0] = ag_reshape(dl, logits->ndim, logits->shape);
    if (!gin[0]) st = fail();
  }
  ag_tensor *rel[] = {lc, l2, tc, t1, g32, rows, dl};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}

static ag_status layer_norm_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *x = n->e[0].val, *w = n->e[1].val;
  /* saved: contiguous x, mean, rstd (as ag_layer_norm records them) */
  ag_tensor *mean = n->n_saved >= 3 ? n->saved[1] : NULL, *rstd = n->n_saved >= 3 ? n->saved[2] : NULL;
  if (!mean || !rstd) return ag_error_set(AG_ERR_INTERNAL, "ag_layer_norm backward: mean/rstd not saved");
  int64_t D = x->shape[x->ndim - 1], N = D ? x->numel / D : 0;
  int64_t s2[2] = {N, D}, sd[1] = {D};
  ag_device dev = ag_tensor_device(x);
  ag_tensor *xc = ag_contiguous(x), *x2 = ag_reshape(xc, 2, s2);
  ag_tensor *gc = ag_contiguous(g), *g2 = ag_reshape(gc, 2, s2);
  ag_tensor *wc = w ? ag_contiguous(w) : NULL;
  ag_tensor *dx = x2 ? ag_empty_like(x2) : NULL;
  bool want_wb = (n->n_in > 1 && NEED(1)) || (n->n_in > 2 && NEED(2));
  /* dw/db in the statistics' dtype: f32, f64 for f64 x. */
  ag_dtype sdt = x->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *dw = want_wb ? ag_empty(dev, sdt, 1, sd) : NULL;
  ag_tensor *db = want_wb ? ag_empty(dev, sdt, 1, sd) : NULL;
  ag_status st = (x2 && g2 && dx && (!w || wc) && (!want_wb || (dw && db))) ? AG_OK : fail();
  if (st == AG_OK && dx->numel) {
    ag_kmulti m;
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_LAYERNORM_BWD, 0, "ag_layer_norm backward", 6,
                   (ag_tensor *[]){dx, g2, x2, mean, rstd, wc});
    c.i[0] = N;
    c.i[1] = D;
    if (want_wb) {
      m.count = 0;
      ag__kmulti_set(&m, 0, dw);
      ag__kmulti_set(&m, 1, db);
      c.multi = &m;
    }
    st = ag__launch(ag__ds(dx), &c);
  }
  if (st == AG_OK && NEED(0)) gin[0] = ag_reshape(dx, x->ndim, x->shape);
  if (st == AG_OK && n->n_in > 1 && NEED(1)) gin[1] = reduce_edge(dw, &n->e[1]);
  if (st == AG_OK && n->n_in > 2 && NEED(2)) gin[2] = reduce_edge(db, &n->e[2]);
  if (st == AG_OK)
    for (int i = 0; i < n->n_in && i < 3; i++)
      if (NEED(i) && !gin[i]) st = fail();
  ag_tensor *rel[] = {xc, x2, gc, g2, wc, dx, dw, db};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}

static ag_status rms_norm_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *w = n->n_in > 1 ? n->e[1].val : NULL;
  /* saved: contiguous x [N, D], rstd [N] (as ag_rms_norm records them) */
  ag_tensor *x2 = n->n_saved >= 2 ? n->saved[0] : NULL, *rstd = n->n_saved >= 2 ? n->saved[1] : NULL;
  if (!x2 || !rstd) return ag_error_set(AG_ERR_INTERNAL, "ag_rms_norm backward: x/rstd not saved");
  int64_t N = x2->shape[0], D = x2->shape[1];
  int64_t s2[2] = {N, D}, sd[1] = {D};
  ag_tensor *gc = ag_contiguous(g), *g2 = ag_reshape(gc, 2, s2);
  ag_tensor *wc = w ? ag_contiguous(w) : NULL;
  ag_tensor *dx = ag_empty_like(x2);
  bool want_w = n->n_in > 1 && NEED(1);
  /* dw in the statistics' dtype: f32, f64 for f64 x */
  ag_tensor *dw = want_w ? ag_empty(ag_tensor_device(x2), x2->dtype == AG_F64 ? AG_F64 : AG_F32, 1, sd) : NULL;
  ag_status st = (g2 && dx && (!w || wc) && (!want_w || dw)) ? AG_OK : fail();
  if (st == AG_OK && N && D) {
    ag_kmulti m;
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_RMSNORM_BWD, 0, "ag_rms_norm backward", 5,
                   (ag_tensor *[]){dx, g2, x2, rstd, wc});
    c.i[0] = N;
    c.i[1] = D;
    if (want_w) {
      m.count = 0;
      ag__kmulti_set(&m, 0, dw);
      c.multi = &m;
    }
    st = ag__launch(ag__ds(dx), &c);
  } else if (st == AG_OK && want_w) {
    st = ag_fill_(dw, 0);
  }
  if (st == AG_OK && NEED(0)) gin[0] = ag_reshape(dx, n->e[0].ndim, n->e[0].shape);
  if (st == AG_OK && want_w) gin[1] = reduce_edge(dw, &n->e[1]);
  if (st == AG_OK)
    for (int i = 0; i < n->n_in && i < 2; i++)
      if (NEED(i) && !gin[i]) st = fail();
  ag_tensor *rel[] = {gc, g2, wc, dx, dw};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}

/* var: g * 2 (x - mean) / den; std: g * (x - mean) / (den * std), 0 where
 * std is 0 (as torch). den = max(0, N - correction). */
static ag_status var_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (!NEED(0)) return AG_OK;
  ag_tensor *x = n->e[0].val;
  const ag_gparams *p = &n->p;
  bool sq = p->i[0] == 1;
  ag_tensor *sd = sq && n->n_saved >= 1 ? n->saved[0] : NULL;
  if (!x || (sq && !sd)) return ag_error_set(AG_ERR_INTERNAL, "ag_var backward: inputs not saved");
  ag_tensor *m = ag_mean(x, p->n_dims, p->n_dims ? p->dims : NULL, true);
  ag_tensor *d = m ? ag_sub(x, m) : NULL;
  ag_tensor *gk = ag_reshape(g, p->ndim, p->shape);
  ag_tensor *q = NULL, *z = NULL, *mask = NULL, *qm = NULL, *t = NULL;
  if (!sq) {
    q = gk ? ag_mul_scalar(gk, 2.0 / p->s[0]) : NULL;
    qm = q ? ag__alias(q) : NULL;
  } else {
    q = gk ? ag_div(gk, sd) : NULL;
    z = ag_full(ag_tensor_device(sd), sd->dtype, 0, NULL, 0);
    mask = z ? ag_eq(sd, z) : NULL;
    t = q && mask ? ag_masked_fill(q, mask, 0) : NULL;
    qm = t ? ag_mul_scalar(t, 1.0 / p->s[0]) : NULL;
  }
  gin[0] = d && qm ? ag_mul(d, qm) : NULL;
  ag_tensor *rel[] = {m, d, gk, q, z, mask, qm, t};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return gin[0] ? AG_OK : fail();
}

/* logsumexp: g * exp(x - out), out saved in the keepdim shape (torch's
 * formula: a line of -inf gives NaN there, as in torch). */
static ag_status logsumexp_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (!NEED(0)) return AG_OK;
  ag_tensor *x = n->e[0].val, *y = n->n_saved >= 1 ? n->saved[0] : NULL;
  if (!x || !y) return ag_error_set(AG_ERR_INTERNAL, "ag_logsumexp backward: inputs not saved");
  ag_tensor *gk = ag_reshape(g, n->p.ndim, n->p.shape);
  ag_tensor *d = ag_sub(x, y), *e = d ? ag_exp(d) : NULL;
  gin[0] = e && gk ? ag_mul(e, gk) : NULL;
  ag_tensor_release(gk);
  ag_tensor_release(d);
  ag_tensor_release(e);
  return gin[0] ? AG_OK : fail();
}

/* Vector norms (torch's formulas): L1 g * sign(x); L2 g * x / norm, 0
 * where the norm is 0; inf g / count * sign(x) at the entries whose |x|
 * equals the norm (or is NaN), count their number along the dims. */
static ag_status norm_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  if (!NEED(0)) return AG_OK;
  ag_tensor *x = n->e[0].val, *y = n->n_saved >= 1 ? n->saved[0] : NULL;
  if (!x || !y) return ag_error_set(AG_ERR_INTERNAL, "ag_norm backward: inputs not saved");
  const ag_gparams *p = &n->p;
  ag_tensor *gk = ag_reshape(g, p->ndim, p->shape);
  ag_tensor *t[8] = {0};
  if (p->i[0] == AG_KV_NORM_L1) {
    t[0] = ag_sign(x);
    gin[0] = t[0] && gk ? ag_mul(t[0], gk) : NULL;
  } else if (p->i[0] == AG_KV_NORM_L2) {
    t[0] = gk ? ag_div(gk, y) : NULL;
    t[1] = ag_full(ag_tensor_device(y), y->dtype, 0, NULL, 0);
    t[2] = t[1] ? ag_eq(y, t[1]) : NULL;
    t[3] = t[0] && t[2] ? ag_masked_fill(t[0], t[2], 0) : NULL;
    gin[0] = t[3] ? ag_mul(x, t[3]) : NULL;
  } else {
    t[0] = ag_abs(x);
    t[1] = t[0] ? ag_eq(t[0], y) : NULL;
    t[2] = t[0] ? ag_ne(t[0], t[0]) : NULL; /* NaN */
    t[3] = t[1] ? ag_cast(t[1], x->dtype) : NULL;
    t[4] = t[2] ? ag_cast(t[2], x->dtype) : NULL;
    t[5] = t[3] && t[4] ? ag_maximum(t[3], t[4]) : NULL;
    t[6] = t[5] ? ag_sum(t[5], p->n_dims, p->n_dims ? p->dims : NULL, true) : NULL;
    t[7] = t[6] && gk ? ag_div(gk, t[6]) : NULL;
    ag_tensor *sg = ag_sign(x), *m = sg && t[5] ? ag_mul(sg, t[5]) : NULL;
    gin[0] = m && t[7] ? ag_mul(m, t[7]) : NULL;
    ag_tensor_release(sg);
    ag_tensor_release(m);
  }
  ag_tensor_release(gk);
  for (int i = 0; i < 8; i++) ag_tensor_release(t[i]);
  return gin[0] ? AG_OK : fail();
}

static ag_status embedding_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  const ag_edge *te = &n->e[0];
  ag_tensor *idx = n->e[1].val;
  int64_t V = te->shape[0], D = te->shape[1], N = idx->numel;
  int64_t s2[2] = {N, D}, s1[1] = {N};
  ag_tensor *ic = ag__index_operand(ag__ds(g), AG_K_EMBEDDING_BWD, te->dtype, idx);
  ag_tensor *i1 = ic ? ag_reshape(ic, 1, s1) : NULL;
  ag_tensor *gc = ag_contiguous(g), *g2 = ag_reshape(gc, 2, s2);
  int64_t vs[2] = {V, D};
  /* Accumulated in f32 (half tables too), f64 for an f64 table. */
  ag_dtype adt = te->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *dt = ag_zeros(te->dev, adt, 2, vs);
  ag_status st = (i1 && g2 && dt) ? AG_OK : fail();
  if (st == AG_OK && N && D) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_EMBEDDING_BWD, 0, "ag_embedding backward", 3,
                   (ag_tensor *[]){dt, g2, i1});
    c.i[0] = N;
    c.i[1] = D;
    c.i[2] = V;
    st = ag__launch(ag__ds(dt), &c);
  }
  if (st == AG_OK) {
    gin[0] = ag_cast(dt, te->dtype);
    if (!gin[0]) st = fail();
  }
  ag_tensor *rel[] = {ic, i1, gc, g2, dt};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  return st;
}

static ag_status matmul_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *a = n->e[0].val, *b = n->e[1].val;
  bool a1 = a->ndim == 1, b1 = b->ndim == 1;
  ag_tensor *A = a1 ? ag_unsqueeze(a, 0) : ag__alias(a);
  ag_tensor *B = b1 ? ag_unsqueeze(b, 1) : ag__alias(b);
  ag_tensor *G = ag__alias(g), *t;
  if (b1 && G) {
    t = ag_unsqueeze(G, G->ndim);
    ag_tensor_release(G);
    G = t;
  }
  if (a1 && G) {
    t = ag_unsqueeze(G, G->ndim - 1);
    ag_tensor_release(G);
    G = t;
  }
  ag_status st = (A && B && G) ? AG_OK : fail();
  if (st == AG_OK && n->n_in == 3 && NEED(2) && !(gin[2] = reduce_edge(g, &n->e[2]))) st = fail(); /* folded bias */
  if (st == AG_OK && NEED(0)) {
    ag_tensor *bt = ag_transpose(B, B->ndim - 1, B->ndim - 2);
    ag_tensor *da = ag_matmul(G, bt);
    ag_tensor *r = reduce_to(da, A->ndim, A->shape);
    gin[0] = r ? ag_reshape(r, a->ndim, a->shape) : NULL;
    ag_tensor_release(bt);
    ag_tensor_release(da);
    ag_tensor_release(r);
    if (!gin[0]) st = fail();
  }
  if (st == AG_OK && NEED(1) && B->ndim == 2) {
    /* A 2-D right operand (a Linear weight) shared across a batch: fold the
     * batch into the rows, one GEMM with no batched temporary to reduce. And
     * produce the gradient in B's own layout: for a transposed weight view
     * (x @ W^T) compute (G^T A)^T, so the gradient reaching W is contiguous
     * and accumulates without a transposing copy. */
    int64_t K = A->shape[A->ndim - 1], N = G->shape[G->ndim - 1], rows = 1;
    for (int i = 0; i < A->ndim - 1; i++) rows *= A->shape[i]; /* not -1: K or N may be 0 */
    int64_t sa[2] = {rows, K}, sg[2] = {rows, N};
    ag_tensor *A2 = ag_reshape(A, 2, sa), *G2 = ag_reshape(G, 2, sg), *db = NULL;
    if (A2 && G2 && B->strides[0] == 1 && B->shape[0] > 1) {
      ag_tensor *gt = ag_transpose(G2, 0, 1);
      ag_tensor *dbt = gt ? ag_matmul(gt, A2) : NULL;
      db = dbt ? ag_transpose(dbt, 0, 1) : NULL;
      ag_tensor_release(gt);
      ag_tensor_release(dbt);
    } else if (A2 && G2) {
      ag_tensor *at = ag_transpose(A2, 0, 1);
      db = at ? ag_matmul(at, G2) : NULL;
      ag_tensor_release(at);
    }
    ag_tensor_release(A2);
    ag_tensor_release(G2);
    gin[1] = db ? ag_reshape(db, b->ndim, b->shape) : NULL;
    ag_tensor_release(db);
    if (!gin[1]) st = fail();
  } else if (st == AG_OK && NEED(1)) {
    ag_tensor *at = ag_transpose(A, A->ndim - 1, A->ndim - 2);
    ag_tensor *db = ag_matmul(at, G);
    ag_tensor *r = reduce_to(db, B->ndim, B->shape);
    gin[1] = r ? ag_reshape(r, b->ndim, b->shape) : NULL;
    ag_tensor_release(at);
    ag_tensor_release(db);
    ag_tensor_release(r);
    if (!gin[1]) st = fail();
  }
  ag_tensor_release(A);
  ag_tensor_release(B);
  ag_tensor_release(G);
  return st;
}

static ag_status reduce_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  const ag_edge *in = &n->e[0];
  int64_t ks[AG_MAX_DIMS];
  keep_shape(n, in, ks);
  ag_tensor *gk = ag_reshape(g, in->ndim, ks), *r = NULL;
  if (n->op == AG_G_SUM || n->op == AG_G_MEAN) {
    if (n->op == AG_G_MEAN && gk) {
      int64_t in_numel = 1, kept = 1;
      for (int i = 0; i < in->ndim; i++) {
        in_numel *= in->shape[i];
        kept *= ks[i];
      }
      ag_tensor *s = ag_mul_scalar(gk, kept ? (double)kept / (double)in_numel : 0.0);
      ag_tensor_release(gk);
      gk = s;
    }
    ag_tensor *e = gk ? ag_expand(gk, in->ndim, in->shape) : NULL;
    r = e ? ag_contiguous(e) : NULL;
    ag_tensor_release(e);
  } else {
    /* max/min: the gradient is shared equally by every element that
     * attains the extremum. */
    ag_tensor *x = in->val, *yk = ag_reshape(n->out_val, in->ndim, ks);
    ag_tensor *eqm = ag_eq(x, yk), *mask = eqm ? ag_cast(eqm, gk ? gk->dtype : x->dtype) : NULL;
    ag_tensor_release(eqm);
    ag_tensor *cnt = ag_sum(mask, n->p.n_dims, n->p.dims, true);
    ag_tensor *share = ag_div(gk, cnt);
    r = ag_mul(mask, share);
    ag_tensor_release(yk);
    ag_tensor_release(mask);
    ag_tensor_release(cnt);
    ag_tensor_release(share);
  }
  ag_tensor_release(gk);
  gin[0] = r;
  return r ? AG_OK : fail();
}

static ag_status slice_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  const ag_edge *in = &n->e[0];
  ag_tensor *z = ag_zeros(in->dev, g->dtype, in->ndim, in->shape);
  ag_tensor *v = z ? ag_slice(z, (int)n->p.i[0], n->p.i[1], n->p.i[2], n->p.i[3]) : NULL;
  ag_status st = v ? ag_copy_(v, g) : fail();
  ag_tensor_release(v);
  if (st != AG_OK) {
    ag_tensor_release(z);
    return st;
  }
  gin[0] = z;
  return AG_OK;
}

static ag_status concat_bwd(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  int dim = norm_dim((int)n->p.i[0], g->ndim);
  int64_t off = 0;
  for (int k = 0; k < n->n_in; k++) {
    if (!n->e[k].present) continue;
    int64_t sz = n->e[k].shape[dim];
    if (NEED(k)) {
      gin[k] = ag_slice(g, dim, off, off + sz, 1);
      if (!gin[k]) return fail();
    }
    off += sz;
  }
  return AG_OK;
}

/* Unary formulas: each returns the input gradient (before reduction). A
 * table op's is its generated backward kernel, reading what it saved. */
static ag_tensor *unary_bwd(ag_node *n, ag_tensor *g) {
  if (n->op == AG_G_DROPOUT) return ag_mul(g, n->saved[0]);
  const ag_unary_info *u = n->op == AG_G_UNARY ? ag_unary_info_of((int)n->p.i[0]) : NULL;
  int sub = u ? ag_unary_bwd_op((int)n->p.i[0]) : -1;
  if (sub < 0) {
    ag_error_set(AG_ERR_INTERNAL, "ag_backward: no formula for %s", ag__node_name(n));
    return NULL;
  }
  ag_tensor *v = u->save == AG_SAVE_X ? n->e[0].val : u->save == AG_SAVE_Y ? n->out_val : g;
  return binary_bwd(sub, g, g, v, n->p.s[0], n->p.s[1]);
}

/* g * d(a op b)/d(input k) for a table binary op whose gradient is
 * generated (AG_G_BINARY), before reduction to the input's shape. */
static ag_tensor *partial_bwd(ag_node *n, ag_tensor *g, int k) {
  int sub = ag_binary_part_op((int)n->p.i[0], k);
  if (sub < 0) {
    ag_error_set(AG_ERR_INTERNAL, "ag_backward: no formula for %s", ag__node_name(n));
    return NULL;
  }
  ag_tensor *d = binary_bwd(sub, g, n->e[0].val, n->e[1].val, n->p.s[0], n->p.s[1]);
  ag_tensor *r = d ? ag_mul(g, d) : NULL;
  ag_tensor_release(d);
  return r;
}

ag_status ag__node_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_tensor *a = n->n_in > 0 ? n->e[0].val : NULL, *b = n->n_in > 1 ? n->e[1].val : NULL;
  ag_tensor *t = NULL, *u = NULL, *m = NULL;
  switch (n->op) {
    case AG_G_ADD: case AG_G_SUB:
      if (NEED(0)) gin[0] = reduce_edge(g, &n->e[0]);
      if (NEED(1)) {
        t = n->op == AG_G_SUB ? ag_neg(g) : ag__alias(g);
        gin[1] = reduce_edge(t, &n->e[1]);
      }
      break;
    case AG_G_MUL:
      if (NEED(0)) gin[0] = reduce_edge(t = ag_mul(g, b), &n->e[0]);
      if (NEED(1)) gin[1] = reduce_edge(u = ag_mul(g, a), &n->e[1]);
      break;
    case AG_G_DIV:
      if (NEED(0)) gin[0] = reduce_edge(t = ag_div(g, b), &n->e[0]);
      if (NEED(1)) { /* -g*a/b^2 */
        ag_tensor *ga = ag_mul(g, a), *bb = ag_mul(b, b), *q = ag_div(ga, bb);
        u = ag_neg(q);
        ag_tensor_release(ga);
        ag_tensor_release(bb);
        ag_tensor_release(q);
        gin[1] = reduce_edge(u, &n->e[1]);
      }
      break;
    case AG_G_BINARY:
      if (NEED(0)) gin[0] = reduce_edge(t = partial_bwd(n, g, 0), &n->e[0]);
      if (NEED(1)) gin[1] = reduce_edge(u = partial_bwd(n, g, 1), &n->e[1]);
      break;
    case AG_G_WHERE: {
      ag_tensor *z = scalar_like(g, 0.0);
      if (n->n_in > 1 && NEED(1)) gin[1] = reduce_edge(t = ag_where(a, g, z), &n->e[1]);
      if (n->n_in > 2 && NEED(2)) gin[2] = reduce_edge(u = ag_where(a, z, g), &n->e[2]);
      ag_tensor_release(z);
      break;
    }
    case AG_G_SUM: case AG_G_MEAN: case AG_G_MAX: case AG_G_MIN:
      return reduce_bwd(n, g, gin);
    case AG_G_MATMUL: return matmul_bwd(n, g, gin);
    case AG_G_SOFTMAX: case AG_G_LOG_SOFTMAX: return softmax_bwd(n, g, gin);
    case AG_G_CROSS_ENTROPY: return NEED(0) ? cross_entropy_bwd(n, g, gin) : AG_OK;
    case AG_G_MSE: {
      int red = (int)n->p.i[0];
      ag_tensor *d = ag_sub(a, b);
      int64_t numel = ag_tensor_numel(d); /* the broadcast shape's */
      m = ag_mul_scalar(d, red == AG_REDUCTION_MEAN ? 2.0 / (double)(numel ? numel : 1) : 2.0);
      ag_tensor_release(d);
      t = ag_mul(m, g);
      if (NEED(0)) gin[0] = reduce_edge(t, &n->e[0]);
      if (NEED(1)) gin[1] = reduce_edge(u = ag_neg(t), &n->e[1]);
      break;
    }
    case AG_G_LAYER_NORM: return layer_norm_bwd(n, g, gin);
    case AG_G_RMS_NORM: return rms_norm_bwd(n, g, gin);
    case AG_G_VAR: return var_bwd(n, g, gin);
    case AG_G_LOGSUMEXP: return logsumexp_bwd(n, g, gin);
    case AG_G_NORM: return norm_bwd(n, g, gin);
    case AG_G_GATHER:
      if (NEED(0)) {
        ag_tensor *dx = ag__gather_backward(g, n->e[1].val, (int)n->p.i[0], n->p.i[1] != 0, n->e[0].ndim,
                                            n->e[0].shape, n->e[0].dtype);
        gin[0] = dx ? reduce_edge(dx, &n->e[0]) : NULL;
        ag_tensor_release(dx);
      }
      break;
    case AG_G_PAD:
      if (NEED(0)) {
        ag_tensor *dx = ag__pad_backward(g, n->e[0].ndim, n->e[0].shape, (int)n->p.i[0], n->p.i[1], n->p.i[2],
                                         (int)n->p.i[3]);
        gin[0] = dx ? reduce_edge(dx, &n->e[0]) : NULL;
        ag_tensor_release(dx);
      }
      break;
    case AG_G_SCATTER_ADD:
      if (NEED(0)) gin[0] = reduce_edge(g, &n->e[0]);
      if (NEED(2)) {
        ag_tensor *ds = ag__scatter_add_src_grad(g, n->e[1].val, (int)n->p.i[0], n->p.i[1] != 0, n->p.s[0],
                                                 n->e[2].ndim, n->e[2].shape);
        gin[2] = ds ? reduce_edge(ds, &n->e[2]) : NULL;
        ag_tensor_release(ds);
      }
      break;
    case AG_G_CUMSUM: gin[0] = ag__cumsum(g, (int)n->p.i[0], n->p.i[1] == 0); break;
    case AG_G_CONV2D: return ag__conv2d_backward(n, g, gin);
    case AG_G_POOL2D: return ag__pool2d_backward(n, g, gin);
    case AG_G_BATCH_NORM: return ag__batch_norm_backward(n, g, gin);
    case AG_G_SDPA: return ag__sdpa_backward(n, g, gin);
    case AG_G_GROUP_NORM: return ag__group_norm_backward(n, g, gin);
    case AG_G_INTERPOLATE: return ag__interpolate_backward(n, g, gin);
    case AG_G_EMBEDDING: return NEED(0) ? embedding_bwd(n, g, gin) : AG_OK;
    case AG_G_CONCAT: return concat_bwd(n, g, gin);
    case AG_G_VIEW: gin[0] = ag_reshape(g, n->e[0].ndim, n->e[0].shape); break;
    case AG_G_PERMUTE: {
      int inv[AG_MAX_DIMS];
      for (int i = 0; i < n->p.n_dims; i++) inv[n->p.dims[i]] = i;
      gin[0] = ag_permute(g, inv);
      break;
    }
    case AG_G_SLICE: return slice_bwd(n, g, gin);
    case AG_G_EXPAND: gin[0] = reduce_edge(g, &n->e[0]); break;
    case AG_G_CAST: gin[0] = ag_cast(g, n->e[0].dtype); break;
    case AG_G_TO_DEVICE: gin[0] = ag_to_device(g, n->e[0].dev); break;
    default:
      if (NEED(0)) gin[0] = reduce_edge(t = unary_bwd(n, g), &n->e[0]);
      break;
  }
  ag_tensor_release(t);
  ag_tensor_release(u);
  ag_tensor_release(m);
  for (int i = 0; i < n->n_in; i++)
    if (NEED(i) && !gin[i] && n->op != AG_G_WHERE) return fail();
  if (n->op == AG_G_WHERE)
    for (int i = 1; i < n->n_in; i++)
      if (NEED(i) && !gin[i]) return fail();
  return AG_OK;
}
