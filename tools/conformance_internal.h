/* What the parts of the conformance engine share: the case context, host
 * buffers and generators, the checks against the references, and the op
 * functions the op table (conformance.c) lists. Not installed. */
#ifndef AG_TOOLS_CONFORMANCE_INTERNAL_H
#define AG_TOOLS_CONFORMANCE_INTERNAL_H

#include "conformance.h"

#include "anygrad/autograd.h"
#include "anygrad/checks.h"
#include "op_ref.h"
#include "ulp.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { L_C, L_T, L_S, L_E }; /* contiguous, transposed, stepped slice, expanded */
enum { G_UNI, G_INT, G_AWAY, G_BOOL, G_SMALLINT, G_FRAC, G_NZINT };
#define EXACT 0.0
#define DEF (-1.0)

typedef struct hbuf {
  int ndim;
  int64_t shape[AG_MAX_DIMS];
  int64_t n;
  double *v;
} hbuf;

typedef struct ctx {
  ag_device dev;
  ag_dtype dt;
  uint64_t seed;
  const char *opname;
  const char *cname;
  bool optional; /* AG_ERR_DTYPE for this dtype means unsupported, not failure */
  int arg;       /* the row's table sub-op (ag_unary_op / ag_binary_op) */
  FILE *log;
  uint64_t rng;
  ag_conf_result res, cres;
  char msg[768];
  char cmsg[512];
  void **mem;
  int nmem, capmem;
  /* accuracy mode (ag_conf_run_acc): where check() records, whether the
   * case is adversarial (recorded, never judged), and the logical input of
   * a case with a torch counterpart plus its parameters as JSON members */
  ag_conf_acc *acc;
  bool adv;
  const hbuf *din;
  char dinfo[160];
  int ncase;
  /* bitwise mode (ag_conf_run_capture): every read-back recorded here;
   * nread numbers the reads of a case */
  ag_conf_capture *cap;
  int nread;
} ctx;

typedef struct guard {
  ag_tensor *a, *b;
} guard;

typedef struct bcase {
  const char *name;
  int na;
  int64_t sa[4];
  int la;
  int nb;
  int64_t sb[4];
  int lb;
} bcase;

#define CONF_HAS_API_A0 1
#define CONF_HAS_API_A1 1
#define CONF_HAS_API_A2 1
#define CONF_HAS_API_AH 0
#define CONF_HAS_API_B 1
#define CONF_HAS_API_BH 0

/* conformance.c: host numbers, the case context, checks and accuracy recording */
double ag__conf_wrap_int(ag_dtype dt, double v);
void ag__conf_int_range(ag_dtype dt, double *lo, double *hi);
double ag__conf_philox_uniform(uint64_t seed, uint64_t off, int64_t i);
void *ag__conf_cx_alloc(ctx *c, size_t bytes);
double ag__conf_urand(ctx *c);
void ag__conf_case_begin(ctx *c, const char *name);
void ag__conf_case_fail(ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ag__conf_case_unsup(ctx *c, const char *what);
void ag__conf_case_end(ctx *c);
void ag__conf_on_null(ctx *c, const char *what);
int64_t ag__conf_prod(int ndim, const int64_t *s);
void ag__conf_cstrides(int ndim, const int64_t *s, int64_t *st);
void ag__conf_unravel(int64_t i, int ndim, const int64_t *s, int64_t *idx);
double ag__conf_gen(ctx *c, ag_dtype dt, int kind, double lo, double hi);
ag_tensor *ag__conf_mk_dt(ctx *c, ag_dtype dt, hbuf **out, int layout, int ndim, const int64_t *shape, int kind,
                          double lo, double hi);
ag_tensor *ag__conf_mk(ctx *c, hbuf **out, int layout, int ndim, const int64_t *shape, int kind, double lo,
                       double hi);
ag_tensor *ag__conf_mk_vals(ctx *c, ag_dtype dt, hbuf **out, int ndim, const int64_t *shape,
                            const double *vals);
double *ag__conf_rd(ctx *c, const ag_tensor *t);
double ag__conf_sentinel(ag_dtype dt);
void ag__conf_guard_begin(ctx *c, guard *g, ag_dtype dt, int64_t n);
void ag__conf_guard_end(ctx *c, guard *g);
void ag__conf_check(ctx *c, ag_tensor *t, int ndim, const int64_t *shape, ag_dtype want_dt, const double *ref,
                    double tol);
int ag__conf_bshape(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out);
int64_t ag__conf_bidx(const hbuf *h, int ondim, const int64_t *oidx);

/* conformance_bitwise.c: record the bytes of a read-back (c->cap set) */
void ag__conf_capture_push(ctx *c, const ag_tensor *t, const void *bytes);

/* conformance_elementwise.c */
ag_tensor *ag__conf_call_binary(int op, ag_tensor *a, ag_tensor *b);
ag_tensor *ag__conf_call_table_unary(int op, ag_tensor *a, double s0, double s1);
/* The adversarial inputs of an elementwise op in dtype dt into v (at most
 * ADV_MAX); returns their count. */
#define ADV_MAX 64
int ag__conf_adv_values(ag_dtype dt, double *v);
void ag__conf_op_table_binary(ctx *c);
void ag__conf_op_table_unary(ctx *c);
void ag__conf_op_add_scalar(ctx *c);
void ag__conf_op_sub_scalar(ctx *c);
void ag__conf_op_rsub_scalar(ctx *c);
void ag__conf_op_mul_scalar(ctx *c);
void ag__conf_op_div_scalar(ctx *c);
void ag__conf_op_pow_exponents(ctx *c);
void ag__conf_op_where(ctx *c);
void ag__conf_op_masked_fill(ctx *c);

/* conformance_reduce.c */
void ag__conf_op_var(ctx *c);
void ag__conf_op_std(ctx *c);
void ag__conf_op_cumsum(ctx *c);
void ag__conf_op_gather(ctx *c);
void ag__conf_op_index_select(ctx *c);
void ag__conf_op_topk(ctx *c);
void ag__conf_op_sum(ctx *c);
void ag__conf_op_mean(ctx *c);
void ag__conf_op_max(ctx *c);
void ag__conf_op_min(ctx *c);
void ag__conf_op_argmax(ctx *c);

/* conformance_reduce2.c */
void ag__conf_op_logsumexp(ctx *c);
void ag__conf_op_norm(ctx *c);
void ag__conf_op_one_hot(ctx *c);
void ag__conf_op_conv1d(ctx *c);

/* conformance_index.c: sort, argsort, scatter_add, index_add, pad; the gradient rows' functions
 * (GA_INDEX rows of conformance_grad.c, by CONF_GI_*) */
enum { CONF_GI_SORT, CONF_GI_SCATTER_ADD, CONF_GI_INDEX_ADD, CONF_GI_PAD_CONSTANT, CONF_GI_PAD_REFLECT };
void ag__conf_op_sort(ctx *c);
void ag__conf_op_argsort(ctx *c);
void ag__conf_op_scatter_add(ctx *c);
void ag__conf_op_index_add(ctx *c);
void ag__conf_op_pad(ctx *c);
ag_tensor *ag__conf_grad_index(int fn, ag_tensor **x);

/* conformance_nn.c */
void ag__conf_op_matmul(ctx *c);
void ag__conf_lines(const hbuf *h, int dim, void (*fn)(const double *, double *, int64_t, int64_t, void *),
                    double *out, void *arg);
void ag__conf_op_softmax(ctx *c);
void ag__conf_op_log_softmax(ctx *c);
void ag__conf_op_cross_entropy(ctx *c);
void ag__conf_op_mse_loss(ctx *c);
void ag__conf_op_layer_norm(ctx *c);
void ag__conf_op_rms_norm(ctx *c);
void ag__conf_op_embedding(ctx *c);
void ag__conf_op_concat(ctx *c);
void ag__conf_op_dropout(ctx *c);
void ag__conf_op_sdpa(ctx *c);
void ag__conf_op_sgd(ctx *c);
void ag__conf_op_adamw(ctx *c);
void ag__conf_op_clip_grad_norm(ctx *c);

/* conformance_tensor.c */
void ag__conf_op_full(ctx *c);
void ag__conf_op_arange(ctx *c);
void ag__conf_op_rand(ctx *c);
void ag__conf_op_randn(ctx *c);
void ag__conf_op_cast(ctx *c);
void ag__conf_op_contiguous(ctx *c);
void ag__conf_op_copy(ctx *c);
void ag__conf_op_to_device(ctx *c);

/* conformance_grad.c */
/* A gradient row: inputs of up to 3 tensors and the op they feed. */
typedef struct gin {
  int ndim;
  int64_t shape[4];
  int kind;
  double lo, hi;
  int constant; /* 0 differentiable; 1 same dtype, not differentiable; 2 i32 */
} gin;

typedef struct gdef {
  const char *name;
  int fn, nin;
  gin in[3];
  int arg; /* GA_UNARY, GA_BINARY: the table's sub-op; else the row's own */
} gdef;
typedef ag_tensor *(*ag__conf_gfn)(const gdef *g, ag_tensor **x);
void ag__conf_op_grad(ctx *c);
/* One "backward vs central differences" case of row g, whose op is f. */
void ag__conf_grad_check(ctx *c, const gdef *g, ag__conf_gfn f);

/* conformance_groupnorm.c */
void ag__conf_op_group_norm(ctx *c);
void ag__conf_op_grad_group_norm(ctx *c);

/* conformance_interp.c */
void ag__conf_op_interpolate(ctx *c);
void ag__conf_op_grad_interpolate(ctx *c);

#endif
