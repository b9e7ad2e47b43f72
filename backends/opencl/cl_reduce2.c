/* OpenCL launches of the typed kernel ops of reduce2.cl (logsumexp, vector
 * norms, one_hot): each reads its decoded arguments (kargs.h) and sets the
 * kernel's arguments in order. Called from cl_launch.c with the stream's
 * lock held and its kernels created. */
#include "cl_internal.h"

/* Kernel arguments in order; the first failure is kept. */
typedef struct r2_args {
  ag_bstream *s;
  clb_kernel which;
  cl_uint n;
  cl_int err;
} r2_args;

static void r2_arg(r2_args *a, size_t bytes, const void *v) {
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->s->k[a->which], a->n, bytes, v);
  a->n++;
}
static void r2_buf(r2_args *a, const ag_koperand *o) {
  cl_mem m = (cl_mem)o->base;
  cl_ulong off = o->offset;
  r2_arg(a, sizeof m, &m);
  r2_arg(a, sizeof off, &off);
}
static void r2_int(r2_args *a, cl_int v) { r2_arg(a, sizeof v, &v); }
static void r2_long(r2_args *a, cl_long v) { r2_arg(a, sizeof v, &v); }

/* A 1-D launch of `items` work-items in the kernel's preferred groups. */
static ag_status r2_run(r2_args *a, const char *what, size_t items) {
  if (a->err != CL_SUCCESS) return clb_error(a->err, what);
  size_t local = a->s->kwg[a->which], global = (items + local - 1) / local * local;
  if (!global) return AG_OK;
  cl_int err = clEnqueueNDRangeKernel(a->s->q, a->s->k[a->which], 1, NULL, &global, &local, 0, NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, what);
}

/* A work-group per line: `lines` groups of a power of two of work-items
 * covering r, at most the kernel's limit (at least 32 where it allows). */
static ag_status r2_run_rows(r2_args *a, const char *what, int64_t lines, int64_t r) {
  if (a->err != CL_SUCCESS) return clb_error(a->err, what);
  size_t lim = a->s->kwg[a->which], local = 1;
  while (local < (size_t)r && local < lim) local *= 2;
  if (local < 32 && lim >= 32) local = 32;
  size_t global = (size_t)lines * local;
  if (!global) return AG_OK;
  cl_int err = clEnqueueNDRangeKernel(a->s->q, a->s->k[a->which], 1, NULL, &global, &local, 0, NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, what);
}

/* A work-group of 256 per line (the portable kernels' S). */
static ag_status r2_run_groups256(r2_args *a, const char *what, int64_t lines) {
  if (a->err != CL_SUCCESS) return clb_error(a->err, what);
  size_t local = 256, global = (size_t)lines * 256;
  if (!global) return AG_OK;
  cl_int err = clEnqueueNDRangeKernel(a->s->q, a->s->k[a->which], 1, NULL, &global, &local, 0, NULL, NULL);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, what);
}

/* Contiguous lines of the half and single types go a work-group each; f64
 * lines and strided ones a work-item each. */
static bool r2_rows(ag_dtype dt, int64_t r, int64_t inner) { return dt != AG_F64 && inner == 1 && r > 0; }

ag_status cl_k_logsumexp(ag_bstream *s, const ag_k_logsumexp *a) {
  if (!a->outer || !a->inner) return AG_OK;
  if (s->portable) { /* portable.cl: a group of 256 per line (S) */
    r2_args k = {s, CLK_LOGSUMEXP, 0, CL_SUCCESS};
    r2_buf(&k, a->out);
    r2_buf(&k, a->x);
    r2_int(&k, a->dtype);
    r2_long(&k, a->outer);
    r2_long(&k, a->r);
    r2_long(&k, a->inner);
    return r2_run_groups256(&k, "ag_logsumexp", a->outer * a->inner);
  }
  if (r2_rows(a->dtype, a->r, a->inner)) {
    r2_args k = {s, CLK_LOGSUMEXP_ROWS, 0, CL_SUCCESS};
    r2_buf(&k, a->out);
    r2_buf(&k, a->x);
    r2_int(&k, a->dtype);
    r2_long(&k, a->r);
    return r2_run_rows(&k, "ag_logsumexp_rows", a->outer, a->r);
  }
  r2_args k = {s, CLK_LOGSUMEXP, 0, CL_SUCCESS};
  r2_buf(&k, a->out);
  r2_buf(&k, a->x);
  r2_int(&k, a->dtype);
  r2_long(&k, a->outer);
  r2_long(&k, a->r);
  r2_long(&k, a->inner);
  return r2_run(&k, "ag_logsumexp", (size_t)(a->outer * a->inner));
}

ag_status cl_k_norm(ag_bstream *s, const ag_k_norm *a) {
  if (!a->outer || !a->inner) return AG_OK;
  if (s->portable) { /* portable.cl: a group of 256 per line (S) */
    r2_args k = {s, CLK_NORM, 0, CL_SUCCESS};
    r2_buf(&k, a->out);
    r2_buf(&k, a->x);
    r2_int(&k, a->dtype);
    r2_long(&k, a->outer);
    r2_long(&k, a->r);
    r2_long(&k, a->inner);
    r2_int(&k, a->variant);
    return r2_run_groups256(&k, "ag_norm", a->outer * a->inner);
  }
  if (r2_rows(a->dtype, a->r, a->inner)) {
    r2_args k = {s, CLK_NORM_ROWS, 0, CL_SUCCESS};
    r2_buf(&k, a->out);
    r2_buf(&k, a->x);
    r2_int(&k, a->dtype);
    r2_long(&k, a->r);
    r2_int(&k, a->variant);
    return r2_run_rows(&k, "ag_norm_rows", a->outer, a->r);
  }
  r2_args k = {s, CLK_NORM, 0, CL_SUCCESS};
  r2_buf(&k, a->out);
  r2_buf(&k, a->x);
  r2_int(&k, a->dtype);
  r2_long(&k, a->outer);
  r2_long(&k, a->r);
  r2_long(&k, a->inner);
  r2_int(&k, a->variant);
  return r2_run(&k, "ag_norm", (size_t)(a->outer * a->inner));
}

ag_status cl_k_one_hot(ag_bstream *s, const ag_k_one_hot *a) {
  if (a->out->dtype != AG_I64)
    return ag_error_set(AG_ERR_UNSUPPORTED, "opencl: one_hot writes i64, not %s", ag_dtype_name(a->out->dtype));
  if (!a->n || !a->classes) return AG_OK;
  r2_args k = {s, CLK_ONE_HOT, 0, CL_SUCCESS};
  r2_buf(&k, a->out);
  r2_buf(&k, a->index);
  r2_int(&k, a->index->dtype);
  r2_long(&k, a->n);
  r2_long(&k, a->classes);
  r2_arg(&k, sizeof s->err, &s->err);
  s->err_armed = true;
  return r2_run(&k, "ag_one_hot", (size_t)(a->n * a->classes));
}
