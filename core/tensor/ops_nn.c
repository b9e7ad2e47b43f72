/* The ops front end for matmul/linear, softmax, losses, layer/RMS norms,
 * embedding, concat and dropout, and the autocast wrappers of the row-wise
 * ops. */
#include <math.h>
#include <string.h>

#include "anygrad/autograd.h"
#include "tensor/ops_internal.h"
#include "tensor/record.h"
#include "tensor/autocast.h"

/* ---------------- matmul ---------------- */

/* Make the last two dims usable by a GEMM: row-major (col stride 1) or
 * column-major (row stride 1); size-1 dims get canonical strides. */
static bool gemm_layout(ag_koperand *o) {
  int r = o->ndim - 2, c = o->ndim - 1;
  int64_t R = o->shape[r], C = o->shape[c];
  if (C == 1) o->strides[c] = 1;
  if (R == 1) o->strides[r] = (o->strides[c] == 1) ? (C > 0 ? C : 1) : 1;
  if (o->strides[c] == 1 && o->strides[r] >= (C > 1 ? C : 1)) return true;
  if (o->strides[r] == 1 && o->strides[c] >= (R > 1 ? R : 1)) return true;
  return false;
}

/* Collapse the batch dims of an operand (already broadcast to the common
 * batch shape) into [B, R, C]; false if they cannot share one stride. */
static bool collapse_batch(ag_koperand *o, int64_t B) {
  int nb = o->ndim - 2;
  int64_t stride = 0;
  bool any = false;
  for (int i = nb - 1; i >= 0; i--) {
    if (o->shape[i] == 1) continue;
    if (!any) {
      stride = o->strides[i];
      any = true;
      continue;
    }
    /* the next outer dim must continue the same progression */
    int64_t inner_span = 1;
    for (int j = i + 1; j < nb; j++) inner_span *= o->shape[j];
    if (o->strides[i] != stride * inner_span) return false;
  }
  int64_t R = o->shape[nb], C = o->shape[nb + 1], rs = o->strides[nb], cs = o->strides[nb + 1];
  o->ndim = 3;
  o->shape[0] = B;
  o->strides[0] = any ? stride : 0;
  o->shape[1] = R;
  o->strides[1] = rs;
  o->shape[2] = C;
  o->strides[2] = cs;
  return true;
}

/* a @ b, or with bias (the caller checked: 1-D [N], a's dtype and device)
 * a @ b + bias: the bias is broadcast into the output and the GEMM runs
 * with beta = 1, so BLAS neither zeroes the output first (its beta = 0
 * pass) nor does a separate add pass read it again. */
static ag_tensor *matmul_core(ag_tensor *a, ag_tensor *b, ag_tensor *bias) {
  static const char name[] = "ag_matmul";
  ag_tensor *in[3] = {a, b, bias};
  if (ag__null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (a->dtype != b->dtype || !ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs two floating tensors of one dtype, got %s and %s", name,
                 ag_dtype_name(a->dtype), ag_dtype_name(b->dtype));
    return NULL;
  }
  if (a->ndim == 0 || b->ndim == 0) {
    ag_error_set(AG_ERR_SHAPE, "%s: both arguments need at least one dim", name);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_MATMUL, 0, a->dtype, name)) return NULL;
  /* Promote 1-D operands: a [K] -> [1, K], b [K] -> [K, 1]. */
  int64_t as[AG_MAX_DIMS], ast[AG_MAX_DIMS], bs[AG_MAX_DIMS], bst[AG_MAX_DIMS];
  int and_ = a->ndim, bnd = b->ndim;
  memcpy(as, a->shape, sizeof as);
  memcpy(ast, a->strides, sizeof ast);
  memcpy(bs, b->shape, sizeof bs);
  memcpy(bst, b->strides, sizeof bst);
  if (and_ == 1) {
    as[1] = as[0];
    ast[1] = ast[0];
    as[0] = 1;
    ast[0] = as[1];
    and_ = 2;
  }
  if (bnd == 1) {
    bs[1] = 1;
    bst[1] = 1;
    bnd = 2;
  }
  int64_t M = as[and_ - 2], K = as[and_ - 1], K2 = bs[bnd - 2], N = bs[bnd - 1];
  if (K != K2) {
    char x[96], y[96];
    ag_error_set(AG_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied (%lld != %lld)", name,
                 ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y), (long long)K, (long long)K2);
    return NULL;
  }
  /* Broadcast batch dims. */
  int nba = and_ - 2, nbb = bnd - 2, nb = nba > nbb ? nba : nbb;
  if (nb + 2 > AG_MAX_DIMS) {
    ag_error_set(AG_ERR_SHAPE, "%s: too many dims", name);
    return NULL;
  }
  int64_t batch[AG_MAX_DIMS];
  int64_t B = 1;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - nba), ib = i - (nb - nbb);
    int64_t sa = ia >= 0 ? as[ia] : 1, sb = ib >= 0 ? bs[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: batch dims of %s and %s cannot be broadcast", name,
                   ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y));
      return NULL;
    }
    batch[i] = sa == 1 ? sb : sa;
    if (__builtin_mul_overflow(B, batch[i], &B)) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: broadcast batch of %s and %s is too large (overflows int64)", name,
                   ag_tensor_describe(a, x, sizeof x), ag_tensor_describe(b, y, sizeof y));
      return NULL;
    }
  }
  /* Operands [batch..., R, C] with zero strides on broadcast dims. */
  ag_koperand oa, ob;
  ag_tensor *ca = NULL, *cb = NULL;
  ag_status st = AG_OK;
  for (int pass = 0; pass < 2 && st == AG_OK; pass++) {
    ag_tensor *t = pass ? b : a;
    ag_koperand *o = pass ? &ob : &oa;
    int64_t *ts = pass ? bs : as, *tst = pass ? bst : ast;
    int tnd = pass ? bnd : and_, tnb = tnd - 2;
    for (int attempt = 0; attempt < 2; attempt++) {
      const ag_tensor *src = attempt ? (pass ? cb : ca) : t;
      o->base = src->st->base;
      o->offset = src->st->offset + (size_t)src->offset * ag_dtype_size(src->dtype);
      o->dtype = src->dtype;
      o->ndim = nb + 2;
      if (attempt) { /* contiguous copy: recompute strides for the promoted shape */
        ag__contiguous_strides(tnd, ts, tst);
      }
      for (int i = 0; i < nb; i++) {
        int j = i - (nb - tnb);
        o->shape[i] = batch[i];
        o->strides[i] = (j >= 0 && ts[j] == batch[i] && batch[i] != 1) ? tst[j] : 0;
      }
      o->shape[nb] = ts[tnd - 2];
      o->strides[nb] = tst[tnd - 2];
      o->shape[nb + 1] = ts[tnd - 1];
      o->strides[nb + 1] = tst[tnd - 1];
      if (collapse_batch(o, B) && gemm_layout(o)) break;
      if (attempt) {
        st = ag_error_set(AG_ERR_INTERNAL, "%s: no GEMM layout for a contiguous operand", name);
        break;
      }
      /* Materialise the operand broadcast to the full batch shape: a
       * contiguous [batch..., R, C] always has a GEMM layout. */
      int64_t full[AG_MAX_DIMS];
      memcpy(full, batch, sizeof(int64_t) * (size_t)nb);
      full[nb] = ts[tnd - 2];
      full[nb + 1] = ts[tnd - 1];
      ag_no_grad_begin();
      ag_tensor *v = ag_reshape(t, tnd, ts);
      ag_tensor *e = v ? ag_expand(v, nb + 2, full) : NULL;
      ag_tensor *c = e ? ag_contiguous(e) : NULL;
      ag_tensor_release(e);
      ag_tensor_release(v);
      ag_grad_mode_end();
      if (!c) {
        st = ag_last_status();
        break;
      }
      tnd = nb + 2;
      tnb = nb;
      memcpy(ts, full, sizeof(int64_t) * (size_t)tnd);
      if (pass) cb = c;
      else ca = c;
    }
  }
  ag_tensor *out = NULL;
  if (st == AG_OK) {
    int64_t oshape[AG_MAX_DIMS];
    int ond = 0;
    for (int i = 0; i < nb; i++) oshape[ond++] = batch[i];
    if (a->ndim > 1) oshape[ond++] = M;
    if (b->ndim > 1) oshape[ond++] = N;
    out = ag__tensor_new(ds, a->dtype, ond, oshape);
    if (!out) st = ag_last_status();
  }
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_MATMUL, 0, name, 3, NULL);
    c.o[0].base = out->st->base;
    c.o[0].offset = out->st->offset;
    c.o[0].dtype = out->dtype;
    c.o[0].ndim = 3;
    c.o[0].shape[0] = B;
    c.o[0].shape[1] = M;
    c.o[0].shape[2] = N;
    c.o[0].strides[0] = M * N;
    c.o[0].strides[1] = N;
    c.o[0].strides[2] = 1;
    c.o[1] = oa;
    c.o[2] = ob;
    /* One GEMM instead of a batch loop when b is shared and a's rows are
     * evenly spaced across the batch (the Linear-layer case). */
    if (B > 1 && ob.strides[0] == 0 && oa.strides[2] == 1 && oa.strides[0] == M * oa.strides[1]) {
      c.o[1].shape[0] = 1;
      c.o[1].shape[1] = B * M;
      c.o[0].shape[0] = 1;
      c.o[0].shape[1] = B * M;
      c.o[2].shape[0] = 1;
    }
    c.s[0] = 1.0;
    c.s[1] = 0.0;
    if (bias) {
      ag_no_grad_begin();
      st = ag_copy_(out, bias);
      ag_grad_mode_end();
      c.s[1] = 1.0;
    }
    /* An inner dimension of 0 is an empty sum: zeros (plus the bias), as
     * torch and NumPy give. No GEMM runs: BLAS libraries (oneDNN's sgemm)
     * return without writing C when K is 0. */
    if (st == AG_OK && K == 0 && !bias) st = ag_fill_(out, 0.0);
    else if (st == AG_OK && K > 0) st = ag__launch(ds, &c);
  }
  ag_tensor_release(ca);
  ag_tensor_release(cb);
  if (st != AG_OK) return ag__op_finish(out, st);
  return ag__op_record(out, AG_G_MATMUL, bias ? 3 : 2, in, 2, in, NULL);
}

static ag_tensor *matmul_impl(ag_tensor *a, ag_tensor *b) { return matmul_core(a, b, NULL); }

ag_tensor *ag__linear_addmm(ag_tensor *x, ag_tensor *wt, ag_tensor *bias) {
  if (!x || !wt || !bias || AC_ON() || bias->ndim != 1 || wt->ndim != 2 || x->ndim < 1 ||
      bias->dtype != x->dtype || (x->dtype != AG_F32 && x->dtype != AG_F64) || bias->shape[0] != wt->shape[1] ||
      ag__ds(bias) != ag__ds(x)) {
    ag_tensor *y = ag_matmul(x, wt), *r = y && bias ? ag_add(y, bias) : y;
    if (r != y) ag_tensor_release(y);
    return r;
  }
  return matmul_core(x, wt, bias);
}

ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b) {
  if (!AC_ON() || !a || !b) return matmul_impl(a, b);
  ag_tensor *ts[2] = {a, b};
  ag__ac_args ac;
  if (!ag__ac_begin(AC_LOW, 2, ts, &ac)) return NULL;
  return ag__ac_end(&ac, matmul_impl(ts[0], ts[1]));
}

/* ---------------- softmax and losses ---------------- */

static ag_tensor *softmax_core(const char *name, int variant, ag_gop gop, ag_tensor *a, int dim) {
  if (ag__null_args(name, 1, &a)) return NULL;
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  int nd = a->ndim ? a->ndim : 1;
  int d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, a->ndim);
    return NULL;
  }
  ag_devstate *ds = ag__ds(a);
  if (!ag__supported(ds, AG_K_SOFTMAX, variant, a->dtype, name)) return NULL;
  bool last = a->ndim == 0 || d == a->ndim - 1;
  ag_tensor *src = last ? ag__raw_contiguous(a) : NULL;
  if (!last) {
    ag_tensor *t = ag__raw_transpose(a, d, -1);
    src = t ? ag__raw_contiguous(t) : NULL;
    ag_tensor_release(t);
  }
  if (!src) return NULL;
  ag_tensor *y = ag__tensor_new(ds, a->dtype, src->ndim, src->shape);
  ag_status st = y ? AG_OK : ag_last_status();
  int64_t cols = a->ndim ? src->shape[src->ndim - 1] : 1;
  if (st == AG_OK && y->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_SOFTMAX, variant, name, 2, (ag_tensor *[]){y, src});
    c.i[0] = y->numel / cols;
    c.i[1] = cols;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(src);
  if (st != AG_OK) return ag__op_finish(y, st);
  ag_tensor *out = y;
  if (!last) {
    ag_tensor *t = ag__raw_transpose(y, d, -1);
    out = t ? ag__raw_contiguous(t) : NULL;
    ag_tensor_release(t);
    ag_tensor_release(y);
    if (!out) return NULL;
  }
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  return ag__op_record(out, gop, 1, &a, 1, &out, &p);
}

static ag_tensor *softmax_impl(const char *name, int variant, ag_gop gop, ag_tensor *a, int dim) {
  if (!AC_ON() || !a) return softmax_core(name, variant, gop, a, dim);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &a, &ac)) return NULL;
  return ag__ac_end(&ac, softmax_core(name, variant, gop, a, dim));
}

ag_tensor *ag_softmax(ag_tensor *a, int dim) { return softmax_impl("ag_softmax", 0, AG_G_SOFTMAX, a, dim); }
ag_tensor *ag_log_softmax(ag_tensor *a, int dim) {
  return softmax_impl("ag_log_softmax", 1, AG_G_LOG_SOFTMAX, a, dim);
}

/* Contiguous index operand (embedding indices, cross-entropy targets): i64
 * stays i64 where the backend reads it (supports(op, 1, dt)), else it is
 * clamped into the i32 range and cast to i32 here, so an index beyond the
 * i32 range is still out of range and reported (as the clamped value),
 * never wrapped into range. */
ag_tensor *ag__index_operand(ag_devstate *ds, ag_kop op, ag_dtype dt, ag_tensor *idx) {
  if (idx->dtype != AG_I64 || ag__supports(ds, op, 1, dt)) return ag__raw_contiguous(idx);
  ag_no_grad_begin();
  ag_device d = ag_tensor_device(idx);
  ag_tensor *hi = ag_full(d, AG_I64, 0, NULL, 2147483647.0), *lo = ag_full(d, AG_I64, 0, NULL, -2147483648.0);
  ag_tensor *a = hi ? ag_minimum(idx, hi) : NULL, *b = a && lo ? ag_maximum(a, lo) : NULL;
  ag_tensor *r = b ? ag_cast(b, AG_I32) : NULL;
  ag_tensor *rel[] = {hi, lo, a, b};
  for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) ag_tensor_release(rel[i]);
  ag_grad_mode_end();
  return r;
}

/* Scalar f32 count of targets != ignore, computed on the device. */
static ag_tensor *count_valid(ag_tensor *targets, int32_t ignore_index, ag_dtype dt) {
  ag_tensor *ig = ag_full(ag_tensor_device(targets), targets->dtype, 0, NULL, ignore_index);
  ag_tensor *eq = ag_eq(targets, ig);
  ag_tensor *n_ig = ag_sum(eq, 0, NULL, false);
  ag_tensor *f = ag_cast(n_ig, dt);
  ag_tensor *cnt = ag_rsub_scalar(f, (double)targets->numel);
  ag_tensor_release(ig);
  ag_tensor_release(eq);
  ag_tensor_release(n_ig);
  ag_tensor_release(f);
  return cnt;
}

static ag_tensor *cross_entropy_impl(ag_tensor *logits, ag_tensor *targets, ag_reduction reduction,
                                     int32_t ignore_index) {
  static const char name[] = "ag_cross_entropy";
  ag_tensor *in[2] = {logits, targets};
  if (ag__null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (!ag_dtype_is_float(logits->dtype) || (targets->dtype != AG_I32 && targets->dtype != AG_I64)) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs floating logits and i64 or i32 targets, got %s and %s", name,
                 ag_dtype_name(logits->dtype), ag_dtype_name(targets->dtype));
    return NULL;
  }
  if ((unsigned)reduction > AG_REDUCTION_NONE) {
    ag_error_set(AG_ERR_INVALID, "%s: invalid reduction %d", name, (int)reduction);
    return NULL;
  }
  int64_t N, C;
  bool kdim = logits->ndim >= 3 && targets->ndim == logits->ndim - 1 && targets->shape[0] == logits->shape[0];
  for (int i = 1; kdim && i < targets->ndim; i++) kdim = targets->shape[i] == logits->shape[i + 1];
  if (kdim) {
    /* PyTorch's K-dimensional form: logits [N, C, d1..dk], targets [N,
     * d1..dk]. The class dim moves last and the rest flatten to rows; the
     * composition (permute, reshape) is recorded, so gradients flow back in
     * the input's layout. Reduction none gives targets' shape. */
    int perm[AG_MAX_DIMS];
    perm[0] = 0;
    for (int i = 2; i < logits->ndim; i++) perm[i - 1] = i;
    perm[logits->ndim - 1] = 1;
    int64_t rows = 1, s2[2], s1[1];
    for (int i = 0; i < targets->ndim; i++) rows *= targets->shape[i];
    s2[0] = rows;
    s2[1] = logits->shape[1];
    s1[0] = rows;
    ag_tensor *pl = ag_permute(logits, perm);
    ag_tensor *fl = pl ? ag_reshape(pl, 2, s2) : NULL;
    ag_tensor *ft = fl ? ag_reshape(targets, 1, s1) : NULL;
    ag_tensor *r = ft ? cross_entropy_impl(fl, ft, reduction, ignore_index) : NULL;
    ag_tensor_release(pl);
    ag_tensor_release(fl);
    ag_tensor_release(ft);
    if (r && reduction == AG_REDUCTION_NONE) {
      ag_tensor *r2 = ag_reshape(r, targets->ndim, targets->shape);
      ag_tensor_release(r);
      r = r2;
    }
    return r;
  }
  if (logits->ndim == 2 && targets->ndim == 1 && targets->shape[0] == logits->shape[0]) {
    N = logits->shape[0];
    C = logits->shape[1];
  } else if (logits->ndim == 1 && targets->ndim == 0) {
    N = 1;
    C = logits->shape[0];
  } else {
    char x[96], y[96];
    ag_error_set(AG_ERR_SHAPE, "%s: logits %s and targets %s: expected [N, C] and [N], [C] and [], or [N, C, d1..dk] and [N, d1..dk]", name,
                 ag_tensor_describe(logits, x, sizeof x), ag_tensor_describe(targets, y, sizeof y));
    return NULL;
  }
  if (!ag__supported(ds, AG_K_CROSS_ENTROPY, 0, logits->dtype, name)) return NULL;
  ag_no_grad_begin();
  int64_t s2[2] = {N, C}, s1[1] = {N};
  ag_tensor *lc0 = ag__raw_contiguous(logits), *tc0 = ag__index_operand(ds, AG_K_CROSS_ENTROPY, logits->dtype, targets);
  ag_tensor *lc = lc0 ? ag_reshape(lc0, 2, s2) : NULL, *tc = tc0 ? ag_reshape(tc0, 1, s1) : NULL;
  ag_tensor_release(lc0);
  ag_tensor_release(tc0);
  /* per-row losses in f32 (f64 for f64 logits, the gradient-check dtype) */
  ag_dtype rdt = logits->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *rows = (lc && tc) ? ag__tensor_new(ds, rdt, 1, s1) : NULL;
  ag_status st = rows ? AG_OK : ag_last_status();
  if (st == AG_OK && N) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_CROSS_ENTROPY, 0, name, 3, (ag_tensor *[]){rows, lc, tc});
    c.i[0] = N;
    c.i[1] = C;
    c.i[2] = ignore_index;
    st = ag__launch(ds, &c);
  }
  ag_tensor *out = NULL, *cnt = NULL;
  if (st == AG_OK) {
    if (reduction == AG_REDUCTION_NONE) {
      out = logits->ndim == 1 ? ag_reshape(rows, 0, NULL) : ag__alias(rows);
    } else {
      ag_tensor *sum = ag_sum(rows, 0, NULL, false);
      if (reduction == AG_REDUCTION_SUM) {
        out = sum;
      } else {
        cnt = count_valid(tc, ignore_index, rdt);
        out = (sum && cnt) ? ag_div(sum, cnt) : NULL;
        ag_tensor_release(sum);
      }
    }
    if (out && out->dtype != logits->dtype) {
      ag_tensor *o2 = ag_cast(out, logits->dtype);
      ag_tensor_release(out);
      out = o2;
    }
    if (!out) st = ag_last_status();
  }
  ag_grad_mode_end();
  ag_tensor_release(rows);
  if (st == AG_OK) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = reduction;
    p.i[1] = ignore_index;
    ag_tensor *sv[3] = {lc, tc, cnt};
    out = ag__op_record(out, AG_G_CROSS_ENTROPY, 2, in, cnt ? 3 : 2, sv, &p);
  }
  ag_tensor_release(lc);
  ag_tensor_release(tc);
  ag_tensor_release(cnt);
  return st == AG_OK ? out : ag__op_finish(out, st);
}

static ag_tensor *mse_impl(ag_tensor *a, ag_tensor *b, ag_reduction reduction) {
  static const char name[] = "ag_mse_loss";
  ag_tensor *in[2] = {a, b};
  if (ag__null_args(name, 2, in)) return NULL;
  if (!ag__same_device(name, 2, in)) return NULL;
  /* the shapes broadcast, as in PyTorch ([4,1] against [4] is [4,4], which
   * PyTorch warns about); the reduction runs over the broadcast result */
  int bnd;
  int64_t bshape[AG_MAX_DIMS];
  if (!ag__broadcast_shapes(name, 2, in, &bnd, bshape)) return NULL;
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if ((unsigned)reduction > AG_REDUCTION_NONE) {
    ag_error_set(AG_ERR_INVALID, "%s: invalid reduction %d", name, (int)reduction);
    return NULL;
  }
  ag_no_grad_begin();
  ag_tensor *diff = ag_sub(a, b);
  ag_tensor *sq = ag_mul(diff, diff);
  ag_tensor *out = reduction == AG_REDUCTION_NONE ? ag__alias(sq)
                   : reduction == AG_REDUCTION_SUM ? ag_sum(sq, 0, NULL, false)
                                                   : ag_mean(sq, 0, NULL, false);
  ag_grad_mode_end();
  ag_tensor_release(sq);
  if (out) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.i[0] = reduction;
    out = ag__op_record(out, AG_G_MSE, 2, in, 1, &diff, &p);
  }
  ag_tensor_release(diff);
  return out;
}

/* Layer norm, or with rms the RMS norm (no mean, no bias): rows over the
 * last dim, statistics in f32 (f64 for f64 x: f64 is the gradient-check
 * dtype and its backward must not see rounded statistics). */
static ag_tensor *norm_impl(bool rms, ag_tensor *x, ag_tensor *weight, ag_tensor *bias, double eps) {
  const char *name = rms ? "ag_rms_norm" : "ag_layer_norm";
  if (ag__null_args(name, 1, &x)) return NULL;
  const int n_in = rms ? 2 : 3;
  ag_tensor *in[3] = {x, weight, bias};
  ag_devstate *ds = ag__same_device(name, n_in, in);
  if (!ds) return NULL;
  if (!ag_dtype_is_float(x->dtype) || x->ndim == 0) {
    ag_error_set(AG_ERR_DTYPE, "%s: needs a floating tensor with at least one dim", name);
    return NULL;
  }
  int64_t D = x->shape[x->ndim - 1], N = D ? x->numel / D : 0;
  for (int i = 1; i < n_in; i++) {
    ag_tensor *w = in[i];
    if (!w) continue;
    if (w->dtype != x->dtype || w->ndim != 1 || w->shape[0] != D) {
      char b1[96], b2[96];
      ag_error_set(AG_ERR_SHAPE, "%s: %s %s must be %s[%lld] for input %s", name, i == 1 ? "weight" : "bias",
                   ag_tensor_describe(w, b1, sizeof b1), ag_dtype_name(x->dtype), (long long)D,
                   ag_tensor_describe(x, b2, sizeof b2));
      return NULL;
    }
  }
  if (!(eps >= 0) || isinf(eps)) { /* inf gives all zeros; 0 is PyTorch's too */
    ag_error_set(AG_ERR_INVALID, "%s: eps must be finite and >= 0, got %g", name, eps);
    return NULL;
  }
  const ag_kop kop = rms ? AG_K_RMSNORM : AG_K_LAYERNORM;
  if (!ag__supported(ds, kop, 0, x->dtype, name)) return NULL;
  int64_t s2[2] = {N, D}, s1[1] = {N};
  ag_tensor *xc0 = ag__raw_contiguous(x);
  ag_tensor *xc = xc0 ? ag__raw_view(xc0, 2, s2) : NULL;
  ag_tensor_release(xc0);
  ag_tensor *wc = weight ? ag__raw_contiguous(weight) : NULL;
  ag_tensor *bc = !rms && bias ? ag__raw_contiguous(bias) : NULL;
  ag_tensor *y = xc ? ag__tensor_new(ds, x->dtype, x->ndim, x->shape) : NULL;
  ag_dtype sdt = x->dtype == AG_F64 ? AG_F64 : AG_F32;
  ag_tensor *mean = y && !rms ? ag__tensor_new(ds, sdt, 1, s1) : NULL;
  ag_tensor *rstd = y && (rms || mean) ? ag__tensor_new(ds, sdt, 1, s1) : NULL;
  ag_status st = (rstd && (!weight || wc) && (rms || !bias || bc)) ? AG_OK : ag_last_status();
  if (st == AG_OK && N && D) {
    ag_kernel_call c;
    if (rms) ag__kcall_init(&c, kop, 0, name, 4, (ag_tensor *[]){y, xc, wc, rstd});
    else ag__kcall_init(&c, kop, 0, name, 6, (ag_tensor *[]){y, xc, wc, bc, mean, rstd});
    c.o[0].ndim = 2;
    c.o[0].shape[0] = N;
    c.o[0].shape[1] = D;
    c.o[0].strides[0] = D;
    c.o[0].strides[1] = 1;
    c.i[0] = N;
    c.i[1] = D;
    c.s[0] = eps;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(wc);
  ag_tensor_release(bc);
  if (st == AG_OK) {
    ag_gparams p;
    memset(&p, 0, sizeof p);
    p.s[0] = eps;
    ag_tensor *sv[3] = {xc, rms ? rstd : mean, rstd};
    y = ag__op_record(y, rms ? AG_G_RMS_NORM : AG_G_LAYER_NORM, n_in, in, rms ? 2 : 3, sv, &p);
  } else {
    ag_tensor_release(y);
    y = NULL;
  }
  ag_tensor_release(xc);
  ag_tensor_release(mean);
  ag_tensor_release(rstd);
  return y;
}

ag_tensor *ag_embedding(ag_tensor *table, ag_tensor *indices) {
  static const char name[] = "ag_embedding";
  ag_tensor *in[2] = {table, indices};
  if (ag__null_args(name, 2, in)) return NULL;
  ag_devstate *ds = ag__same_device(name, 2, in);
  if (!ds) return NULL;
  if (indices->dtype != AG_I32 && indices->dtype != AG_I64) {
    ag_error_set(AG_ERR_DTYPE, "%s: indices must be i64 or i32, got %s", name, ag_dtype_name(indices->dtype));
    return NULL;
  }
  if (table->ndim != 2 || indices->ndim + 1 > AG_MAX_DIMS) {
    char x[96];
    ag_error_set(AG_ERR_SHAPE, "%s: table %s must be 2-d [V, D]", name, ag_tensor_describe(table, x, sizeof x));
    return NULL;
  }
  if (!ag__supported(ds, AG_K_EMBEDDING, 0, table->dtype, name)) return NULL;
  int64_t V = table->shape[0], D = table->shape[1], N = indices->numel;
  int64_t oshape[AG_MAX_DIMS];
  memcpy(oshape, indices->shape, sizeof(int64_t) * (size_t)indices->ndim);
  oshape[indices->ndim] = D;
  ag_tensor *tc = ag__raw_contiguous(table), *ic = ag__index_operand(ds, AG_K_EMBEDDING, table->dtype, indices);
  ag_tensor *out = (tc && ic) ? ag__tensor_new(ds, table->dtype, indices->ndim + 1, oshape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && N && D) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_EMBEDDING, 0, name, 3, (ag_tensor *[]){out, tc, ic});
    c.o[0].ndim = 2;
    c.o[0].shape[0] = N;
    c.o[0].shape[1] = D;
    c.o[0].strides[0] = D;
    c.o[0].strides[1] = 1;
    c.o[2].ndim = 1;
    c.o[2].shape[0] = N;
    c.o[2].strides[0] = 1;
    c.i[0] = N;
    c.i[1] = D;
    c.i[2] = V;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(tc);
  if (st == AG_OK) out = ag__op_record(out, AG_G_EMBEDDING, 2, in, 1, &ic, NULL);
  else out = ag__op_finish(out, st);
  ag_tensor_release(ic);
  return out;
}

static ag_tensor *concat_impl(int n, ag_tensor *const *ts, int dim) {
  static const char name[] = "ag_concat";
  if (n <= 0 || !ts) {
    ag_error_set(AG_ERR_INVALID, "%s: needs at least one tensor", name);
    return NULL;
  }
  if (ag__null_args(name, n, ts)) return NULL;
  ag_devstate *ds = ag__same_device(name, n, ts);
  if (!ds) return NULL;
  const ag_tensor *t0 = ts[0];
  int d = dim < 0 ? dim + t0->ndim : dim;
  if (d < 0 || d >= t0->ndim) {
    ag_error_set(AG_ERR_SHAPE, "%s: dim %d out of range for a %d-d tensor", name, dim, t0->ndim);
    return NULL;
  }
  int64_t shape[AG_MAX_DIMS];
  memcpy(shape, t0->shape, sizeof shape);
  shape[d] = 0;
  for (int k = 0; k < n; k++) {
    const ag_tensor *t = ts[k];
    bool ok = t->dtype == t0->dtype && t->ndim == t0->ndim;
    for (int i = 0; ok && i < t0->ndim; i++)
      if (i != d && t->shape[i] != t0->shape[i]) ok = false;
    if (!ok) {
      char x[96], y[96];
      ag_error_set(AG_ERR_SHAPE, "%s: %s and %s differ outside dim %d", name, ag_tensor_describe(t0, x, sizeof x),
                   ag_tensor_describe(t, y, sizeof y), d);
      return NULL;
    }
    if (__builtin_add_overflow(shape[d], t->shape[d], &shape[d])) {
      ag_error_set(AG_ERR_SHAPE, "%s: the sizes along dim %d add up past int64", name, d);
      return NULL;
    }
  }
  ag_tensor *out = ag__tensor_new(ds, t0->dtype, t0->ndim, shape);
  if (!out) return NULL;
  int64_t at = 0;
  ag_status st = AG_OK;
  for (int k = 0; k < n && st == AG_OK; k++) {
    ag_tensor *t = ts[k];
    if (t->numel) {
      int64_t vs[AG_MAX_DIMS];
      memcpy(vs, out->shape, sizeof vs);
      vs[d] = t->shape[d];
      ag_tensor *dst = ag__tensor_view(out, out->ndim, vs, out->strides, at * out->strides[d]);
      st = dst ? ag_copy_(dst, t) : ag_last_status();
      ag_tensor_release(dst);
    }
    at += t->shape[d];
  }
  if (st != AG_OK) return ag__op_finish(out, st);
  ag_gparams p;
  memset(&p, 0, sizeof p);
  p.i[0] = d;
  return ag__op_record(out, AG_G_CONCAT, n, ts, 0, NULL, &p);
}

ag_tensor *ag_dropout(ag_tensor *a, double p, bool train, ag_generator *g) {
  static const char name[] = "ag_dropout";
  if (ag__null_args(name, 1, &a)) return NULL;
  if (!(p >= 0 && p < 1)) {
    ag_error_set(AG_ERR_INVALID, "%s: p must be in [0, 1), got %g", name, p);
    return NULL;
  }
  if (!ag_dtype_is_float(a->dtype)) {
    ag_error_set(AG_ERR_DTYPE, "%s: dtype %s is not a floating type", name, ag_dtype_name(a->dtype));
    return NULL;
  }
  if (!train || p == 0) return ag__alias(a);
  ag_devstate *ds = ag__ds(a);
  if (!ag__supported(ds, AG_K_DROPOUT, 0, a->dtype, name)) return NULL;
  ag_tensor *src = ag__raw_contiguous(a);
  ag_tensor *out = src ? ag__tensor_new(ds, a->dtype, a->ndim, a->shape) : NULL;
  ag_tensor *mask = out ? ag__tensor_new(ds, a->dtype, a->ndim, a->shape) : NULL;
  ag_status st = mask ? AG_OK : ag_last_status();
  if (st == AG_OK && a->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_DROPOUT, 0, name, 3, (ag_tensor *[]){out, src, mask});
    c.s[0] = p;
    ag__generator_take(g, ((uint64_t)a->numel + 3) / 4, &c.seed, &c.offset);
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(src);
  if (st == AG_OK) {
    ag_gparams gp;
    memset(&gp, 0, sizeof gp);
    gp.s[0] = p;
    out = ag__op_record(out, AG_G_DROPOUT, 1, &a, 1, &mask, &gp);
  } else {
    out = ag__op_finish(out, st);
  }
  ag_tensor_release(mask);
  return out;
}

/* ---------------- autocast wrappers of the row-wise ops ---------------- */

ag_tensor *ag_cross_entropy(ag_tensor *logits, ag_tensor *targets, ag_reduction reduction, int32_t ignore_index) {
  if (!AC_ON() || !logits) return cross_entropy_impl(logits, targets, reduction, ignore_index);
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 1, &logits, &ac)) return NULL;
  return ag__ac_end(&ac, cross_entropy_impl(logits, targets, reduction, ignore_index));
}

ag_tensor *ag_mse_loss(ag_tensor *a, ag_tensor *b, ag_reduction reduction) {
  if (!AC_ON() || !a || !b) return mse_impl(a, b, reduction);
  ag_tensor *ts[2] = {a, b};
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 2, ts, &ac)) return NULL;
  return ag__ac_end(&ac, mse_impl(ts[0], ts[1], reduction));
}

ag_tensor *ag_layer_norm(ag_tensor *x, ag_tensor *weight, ag_tensor *bias, double eps) {
  if (!AC_ON() || !x) return norm_impl(false, x, weight, bias, eps);
  ag_tensor *ts[3] = {x, weight, bias};
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 3, ts, &ac)) return NULL;
  return ag__ac_end(&ac, norm_impl(false, ts[0], ts[1], ts[2], eps));
}

ag_tensor *ag_rms_norm(ag_tensor *x, ag_tensor *weight, double eps) {
  if (!AC_ON() || !x) return norm_impl(true, x, weight, NULL, eps);
  ag_tensor *ts[2] = {x, weight};
  ag__ac_args ac;
  if (!ag__ac_begin(AC_F32, 2, ts, &ac)) return NULL;
  return ag__ac_end(&ac, norm_impl(true, ts[0], ts[1], NULL, eps));
}

ag_tensor *ag_concat(int n, ag_tensor *const *ts, int dim) {
  if (!AC_ON() || n <= 0 || n > 8 || !ts) return concat_impl(n, ts, dim);
  ag_tensor *c[8];
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return concat_impl(n, ts, dim);
    c[i] = ts[i];
  }
  ag__ac_args ac;
  if (!ag__ac_begin(AC_WIDEST, n, c, &ac)) return NULL;
  return ag__ac_end(&ac, concat_impl(n, c, dim));
}

ag_tensor *ag_one_hot(ag_tensor *index, int64_t num_classes) {
  static const char name[] = "ag_one_hot";
  if (ag__null_args(name, 1, &index)) return NULL;
  ag_devstate *ds = ag__ds(index);
  if (index->dtype != AG_I64 && index->dtype != AG_I32) {
    ag_error_set(AG_ERR_DTYPE, "%s: index must be i64 or i32, got %s", name, ag_dtype_name(index->dtype));
    return NULL;
  }
  if (index->ndim + 1 > AG_MAX_DIMS) {
    ag_error_set(AG_ERR_SHAPE, "%s: a %d-d index leaves no dim for the classes (at most %d dims)", name,
                 index->ndim, AG_MAX_DIMS);
    return NULL;
  }
  if (!ag__supported(ds, AG_K_ONE_HOT, 0, index->dtype, name)) return NULL;
  if (num_classes < 0) {
    if (index->numel == 0) {
      ag_error_set(AG_ERR_SHAPE, "%s: cannot infer the number of classes of an empty index", name);
      return NULL;
    }
    /* torch's rule: the largest index + 1, read to the host */
    ag_tensor *m = ag_max(index, 0, NULL, false);
    ag_item_value iv;
    ag_status st = m ? ag_item_scalar(m, &iv) : ag_last_status();
    ag_tensor_release(m);
    if (st != AG_OK) return NULL;
    if (iv.i < 0) {
      ag_error_set(AG_ERR_INDEX, "%s: index %lld out of range (class values must be non-negative)", name,
                   (long long)iv.i);
      return NULL;
    }
    num_classes = iv.i + 1;
  }
  if (num_classes == 0 && index->numel) {
    /* no kernel runs for an empty result: every index is out of range */
    ag_error_set(AG_ERR_INDEX, "%s: %lld indices out of range [0, 0) (num_classes 0)", name,
                 (long long)index->numel);
    return NULL;
  }
  int64_t n = index->numel, oshape[AG_MAX_DIMS];
  memcpy(oshape, index->shape, sizeof(int64_t) * (size_t)index->ndim);
  oshape[index->ndim] = num_classes;
  ag_tensor *ic = ag__raw_contiguous(index);
  ag_tensor *out = ic ? ag__tensor_new(ds, AG_I64, index->ndim + 1, oshape) : NULL;
  ag_status st = out ? AG_OK : ag_last_status();
  if (st == AG_OK && out->numel) {
    ag_kernel_call c;
    ag__kcall_init(&c, AG_K_ONE_HOT, 0, name, 2, (ag_tensor *[]){out, ic});
    c.i[0] = n;
    c.i[1] = num_classes;
    st = ag__launch(ds, &c);
  }
  ag_tensor_release(ic);
  return ag__op_finish(out, st);
}
