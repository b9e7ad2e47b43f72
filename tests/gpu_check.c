/* gpu_check: every kernel of a GPU backend module against the CPU backend's
 * kernels (the oracle), through the vtable, on device 0. Cases stress what
 * the public-API conformance suite reaches less: vector-load tails, strided
 * and broadcast operands, split reductions, both GEMM layouts, the error
 * word, and the multi-tensor optimizer kernels. Prints one line per case and
 * a summary; exit status 0 when all pass, 2 when the backend is unavailable.
 * usage: gpu_check <module.so> [filter] [--device=N] [--skip=S1,S2]; the filter is one or
 * more substrings of case names separated by commas (a case runs when its
 * name contains any of them); module "cpu" checks the harness itself (CPU
 * against CPU: every case must pass). */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/backend.h"
#include "op_ref.h"

/* The CPU backend's kernel runner (hidden in the shared library, reachable
 * through the static one). */
ag_status ag__cpu_run(const ag_kernel_call *c, ag_kernel_error *err);
const ag_backend *ag__cpu_backend(void);

static const ag_backend *B;
static ag_bstream *S;
static int DEV; /* device ordinal under test */
static const char *filter;
static int n_pass, n_fail, n_skip;
static const char *(*mod_last_error)(void);

enum { MAXB = 24 };
typedef struct buf {
  ag_dtype dt;
  int64_t n;       /* elements of storage */
  bool out;        /* compared after the run */
  bool exact;
  double tol;      /* NMSE bound; 0: dtype default */
  ag_dtype cdt;    /* dtype of the CPU reference copy (f32 for f16/bf16
                      operands of ops the CPU runs only in f32/f64) */
  void *host, *cpu, *gpu_back;
  void *dev;
} buf;

typedef struct tcase {
  char name[160];
  ag_kernel_call c;
  int ob[AG_KMAX_OPERANDS]; /* buffer of each operand, -1: NULL base */
  ag_kmulti m;
  int mb[64];
  int nm;
  buf b[MAXB];
  int nb;
  bool want_error; /* the case must set the kernel error word */
  bool repeat;     /* run a second time on the device: outputs must be bitwise equal */
} tcase;

static size_t dsz(ag_dtype dt) {
  return dt == AG_F16 || dt == AG_BF16 ? 2 : dt == AG_F64 || dt == AG_I64 ? 8 : dt == AG_U8 || dt == AG_BOOL ? 1 : 4;
}
static const char *dname(ag_dtype dt) {
  static const char *const n[] = {"f32", "f16", "bf16", "i32", "f64", "i64", "bool", "u8"};
  return n[dt];
}
static bool isint(ag_dtype dt) { return dt == AG_I32 || dt == AG_I64 || dt == AG_U8 || dt == AG_BOOL; }

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1p-53;
}

static double getv(ag_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case AG_F32: return ((const float *)p)[i];
    case AG_F16: return ag_f16_to_f32(((const uint16_t *)p)[i]);
    case AG_BF16: return ag_bf16_to_f32(((const uint16_t *)p)[i]);
    case AG_I32: return ((const int32_t *)p)[i];
    case AG_I64: return (double)((const int64_t *)p)[i];
    case AG_U8:
    case AG_BOOL: return ((const uint8_t *)p)[i];
    default: return ((const double *)p)[i];
  }
}
static void setv(ag_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
    case AG_F32: ((float *)p)[i] = (float)v; break;
    case AG_F16: ((uint16_t *)p)[i] = ag_f32_to_f16((float)v); break;
    case AG_BF16: ((uint16_t *)p)[i] = ag_f32_to_bf16((float)v); break;
    case AG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case AG_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case AG_U8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
    case AG_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: ((double *)p)[i] = v;
  }
}

/* A new buffer of n elements filled uniformly in [lo, hi) (integers for the
 * integer dtypes; u8 keeps the low byte, bool is v != 0). */
static int nb(tcase *t, ag_dtype dt, int64_t n, double lo, double hi) {
  buf *b = &t->b[t->nb];
  memset(b, 0, sizeof *b);
  b->dt = dt;
  b->n = n;
  b->host = calloc((size_t)(n > 0 ? n : 1), dsz(dt));
  for (int64_t i = 0; i < n; i++) {
    double v = lo + (hi - lo) * urand();
    setv(dt, b->host, i, isint(dt) ? floor(v) : v);
  }
  return t->nb++;
}
static int nbout(tcase *t, ag_dtype dt, int64_t n, bool exact) {
  int k = nb(t, dt, n, -1, 1);
  t->b[k].out = true;
  t->b[k].exact = exact;
  return k;
}

/* operand k: buffer bi viewed with ndim/shape and contiguous strides */
static void opnd(tcase *t, int k, int bi, int ndim, const int64_t *shape) {
  ag_koperand *o = &t->c.o[k];
  memset(o, 0, sizeof *o);
  t->ob[k] = bi;
  if (bi >= 0) o->dtype = t->b[bi].dt;
  o->ndim = ndim;
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    o->shape[d] = shape[d];
    o->strides[d] = st;
    st *= shape[d];
  }
  if (k + 1 > t->c.n_operands) t->c.n_operands = k + 1;
}

static tcase *newcase(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static tcase *newcase(const char *fmt, ...) {
  static tcase t;
  for (int i = 0; i < t.nb; i++) free(t.b[i].host);
  memset(&t, 0, sizeof t);
  t.c.struct_size = (uint32_t)sizeof t.c;
  for (int k = 0; k < AG_KMAX_OPERANDS; k++) t.ob[k] = -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t.name, sizeof t.name, fmt, ap);
  va_end(ap);
  return &t;
}

static double tol_of(const buf *b) {
  if (b->tol > 0) return b->tol;
  return b->dt == AG_F32 ? 1e-8 : b->dt == AG_F16 ? 1e-5 : 1e-4;
}

static void report(tcase *t, bool ok, const char *why) {
  if (ok) n_pass++;
  else n_fail++;
  printf("%-4s %s%s%s\n", ok ? "ok" : "FAIL", t->name, why[0] ? ": " : "", why);
}

/* Does name contain one of list's comma-separated substrings? */
static bool contains_any(const char *name, const char *list) {
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    for (const char *q = name; len && *q; q++)
      if (strncmp(q, p, len) == 0) return true;
    if (!comma) break;
    p = comma + 1;
  }
  return false;
}
/* --skip=: cases left out (the checking mode's slowest, grid-limit ones) */
static const char *skip;
static bool selected(const char *name) {
  if (skip && contains_any(name, skip)) return false;
  return !filter || contains_any(name, filter);
}

static void run(tcase *t) {
  if (!selected(t->name)) {
    for (int i = 0; i < t->nb; i++) free(t->b[i].host), t->b[i].host = NULL;
    t->nb = 0;
    return;
  }
  ag_dtype dt = t->c.op == AG_K_UNARY && t->c.sub == AG_U_COPY ? t->c.o[1].dtype : t->c.o[0].dtype;
  if (t->c.op == AG_K_CROSS_ENTROPY || t->c.op == AG_K_EMBEDDING_BWD) dt = t->c.o[1].dtype;
  if (t->c.op == AG_K_REDUCE || t->c.op == AG_K_BINARY) dt = t->c.o[1].dtype; /* comparisons: the inputs' */
  if (t->c.op >= AG_K_ADAMW && t->c.op <= AG_K_SUMSQ) dt = t->nm ? t->b[t->mb[0]].dt : AG_F32;
  if (!B->supports(DEV, t->c.op, t->c.sub, dt)) {
    n_skip++;
    printf("skip %s (not supported)\n", t->name);
    return;
  }
  char why[512] = "";
  bool ok = true;
  ag_status st = AG_OK;
  /* CPU reference on copies */
  ag_kernel_call cc = t->c, gc = t->c;
  ag_kmulti *cm = NULL, *gm = NULL;
  /* vision ops in f16/bf16: the CPU reference runs in f32 on the exactly
   * widened inputs; the device result is compared after its own rounding */
  const bool widen = t->c.op >= AG_K_CONV2D && t->c.op <= AG_K_POOL2D_BWD && (dt == AG_F16 || dt == AG_BF16);
  for (int i = 0; i < t->nb; i++) {
    size_t by = (size_t)(t->b[i].n > 0 ? t->b[i].n : 1) * dsz(t->b[i].dt);
    t->b[i].cdt = widen && t->b[i].dt == dt ? AG_F32 : t->b[i].dt;
    t->b[i].cpu = malloc((size_t)(t->b[i].n > 0 ? t->b[i].n : 1) * dsz(t->b[i].cdt));
    t->b[i].gpu_back = malloc(by);
    if (t->b[i].cdt == t->b[i].dt) memcpy(t->b[i].cpu, t->b[i].host, by);
    else
      for (int64_t j = 0; j < t->b[i].n; j++) setv(t->b[i].cdt, t->b[i].cpu, j, getv(t->b[i].dt, t->b[i].host, j));
    t->b[i].dev = NULL;
    if ((st = B->segment_alloc(DEV, by, &t->b[i].dev)) != AG_OK ||
        (st = B->copy_h2d(S, t->b[i].dev, 0, t->b[i].host, by, false)) != AG_OK) {
      snprintf(why, sizeof why, "setup: %s", mod_last_error ? mod_last_error() : "");
      ok = false;
      goto done;
    }
  }
  for (int k = 0; k < AG_KMAX_OPERANDS; k++) {
    cc.o[k].base = t->ob[k] >= 0 ? t->b[t->ob[k]].cpu : NULL;
    gc.o[k].base = t->ob[k] >= 0 ? t->b[t->ob[k]].dev : NULL;
    cc.o[k].offset = gc.o[k].offset = 0;
    if (t->ob[k] >= 0) cc.o[k].dtype = t->b[t->ob[k]].cdt;
  }
  if (t->nm) {
    cm = calloc(1, sizeof *cm);
    gm = calloc(1, sizeof *gm);
    *cm = t->m;
    *gm = t->m;
    for (int k = 0; k < t->nm; k++) {
      cm->t[k].base = t->mb[k] >= 0 ? t->b[t->mb[k]].cpu : NULL;
      gm->t[k].base = t->mb[k] >= 0 ? t->b[t->mb[k]].dev : NULL;
      cm->t[k].offset = gm->t[k].offset = 0;
    }
    cm->count = gm->count = t->nm;
    cc.multi = cm;
    gc.multi = gm;
  }
  ag_kernel_error ce = {0}, ge = {0};
  if ((st = ag__cpu_run(&cc, &ce)) != AG_OK) {
    snprintf(why, sizeof why, "cpu reference failed (%d)", (int)st);
    ok = false;
    goto done;
  }
  if ((st = B->launch(S, &gc)) != AG_OK || (st = B->stream_synchronize(S)) != AG_OK ||
      (st = B->take_kernel_error(S, &ge)) != AG_OK) {
    snprintf(why, sizeof why, "launch: %s", mod_last_error ? mod_last_error() : "?");
    ok = false;
    goto done;
  }
  if (t->want_error || ce.code || ge.code) {
    if (ge.code != ce.code || ge.kop != ce.kop || ge.limit != ce.limit || (t->want_error && !ge.code)) {
      snprintf(why, sizeof why, "error word: gpu code %d kop %d index %lld limit %lld, cpu code %d kop %d limit %lld",
               ge.code, ge.kop, (long long)ge.index, (long long)ge.limit, ce.code, ce.kop, (long long)ce.limit);
      ok = false;
    }
  }
  for (int i = 0; i < t->nb && ok; i++) {
    buf *b = &t->b[i];
    size_t by = (size_t)(b->n > 0 ? b->n : 1) * dsz(b->dt);
    if ((st = B->copy_d2h(S, b->gpu_back, b->dev, 0, by)) != AG_OK || (st = B->stream_synchronize(S)) != AG_OK) {
      snprintf(why, sizeof why, "copy back: %s", mod_last_error ? mod_last_error() : "?");
      ok = false;
      break;
    }
    if (!b->out) continue;
    double num = 0, den = 0, worst = 0;
    int64_t bad = -1;
    for (int64_t j = 0; j < b->n; j++) {
      double g = getv(b->dt, b->gpu_back, j), c = getv(b->cdt, b->cpu, j);
      if (isnan(c) != isnan(g) || (isinf(c) && c != g) || (b->exact && !isnan(c) && c != g)) {
        bad = j;
        break;
      }
      if (isnan(c) || isinf(c)) continue;
      num += (g - c) * (g - c);
      den += c * c;
      if (fabs(g - c) > worst) worst = fabs(g - c);
    }
    double nmse = den > 0 ? num / den : num;
    if (bad >= 0) {
      snprintf(why, sizeof why, "buffer %d element %lld: gpu %.9g cpu %.9g", i, (long long)bad,
               getv(b->dt, b->gpu_back, bad), getv(b->cdt, b->cpu, bad));
      ok = false;
    } else if (!b->exact && nmse > tol_of(b)) {
      snprintf(why, sizeof why, "buffer %d NMSE %.3g > %.3g (max abs diff %.3g)", i, nmse, tol_of(b), worst);
      ok = false;
    }
  }
  if (ok && t->repeat) { /* from the same inputs again: bit for bit */
    for (int i = 0; i < t->nb && ok; i++) {
      size_t by = (size_t)(t->b[i].n > 0 ? t->b[i].n : 1) * dsz(t->b[i].dt);
      if ((st = B->copy_h2d(S, t->b[i].dev, 0, t->b[i].host, by, false)) != AG_OK) ok = false;
    }
    if (!ok || (st = B->launch(S, &gc)) != AG_OK || (st = B->stream_synchronize(S)) != AG_OK ||
        (st = B->take_kernel_error(S, &ge)) != AG_OK) {
      snprintf(why, sizeof why, "second run: %s", mod_last_error ? mod_last_error() : "?");
      ok = false;
      goto done;
    }
    for (int i = 0; i < t->nb && ok; i++) {
      buf *b = &t->b[i];
      if (!b->out) continue;
      size_t by = (size_t)(b->n > 0 ? b->n : 1) * dsz(b->dt);
      void *again = malloc(by);
      if (!again || B->copy_d2h(S, again, b->dev, 0, by) != AG_OK || B->stream_synchronize(S) != AG_OK) {
        snprintf(why, sizeof why, "second copy back failed");
        ok = false;
      } else if (memcmp(again, b->gpu_back, by) != 0) {
        snprintf(why, sizeof why, "buffer %d differs between two runs", i);
        ok = false;
      }
      free(again);
    }
  }
done:
  report(t, ok, why);
  for (int i = 0; i < t->nb; i++) {
    if (t->b[i].dev) B->segment_free(DEV, t->b[i].dev);
    free(t->b[i].cpu);
    free(t->b[i].gpu_back);
    free(t->b[i].host);
    t->b[i].host = NULL;
  }
  t->nb = 0;
  free(cm);
  free(gm);
}

static const ag_dtype FL[3] = {AG_F32, AG_F16, AG_BF16};
/* every dtype the GPU kernels hold */
static const ag_dtype EW[7] = {AG_F32, AG_F16, AG_BF16, AG_I32, AG_I64, AG_U8, AG_BOOL};

/* ---- cases ---- */

static void cases_elementwise(void) {
  for (int di = 0; di < 7; di++) {
    ag_dtype dt = EW[di];
    for (int u = 0; u < AG_UNARY_COUNT; u++) {
      /* integer dtypes run the table's INT entries only */
      const ag_unary_info *ui = ag_unary_info_of(u);
      if (isint(dt) && ui->ints != AG_OPT_INT) continue;
      for (int tr = 0; tr < 2; tr++) {
        tcase *t = newcase("unary %s %s %s", ui->name, dname(dt), tr ? "transposed [37,1001]" : "contig [1001,37]");
        int64_t sh[2] = {1001, 37}, tsh[2] = {37, 1001};
        int a = nb(t, dt, 1001 * 37, -3, 3);
        if (!isint(dt)) /* the op's domain from the table */
          for (int64_t i = 0; i < 1001 * 37; i++) setv(dt, t->b[a].host, i, ag_ref_draw(ag_ref_unary_dom(u, 0), urand(), urand()));
        int o = nbout(t, dt, 1001 * 37, isint(dt) || u == AG_U_COPY || u == AG_U_NEG || u == AG_U_ABS);
        t->c.op = AG_K_UNARY;
        t->c.sub = u;
        ag_ref_unary_scalars(u, &t->c.s[0], &t->c.s[1]);
        if (isint(dt)) t->c.s[0] = 3, t->c.s[1] = -7, t->c.i[0] = 3, t->c.i[1] = -7; /* AFFINE reads i[] */
        t->c.name = "unary";
        if (!tr) {
          opnd(t, 0, o, 2, sh);
          opnd(t, 1, a, 2, sh);
        } else {
          opnd(t, 0, o, 2, tsh);
          opnd(t, 1, a, 2, tsh);
          t->c.o[1].strides[0] = 1;
          t->c.o[1].strides[1] = 37;
        }
        run(t);
      }
    }
    for (int dj = 0; dj < 7; dj++) {
      ag_dtype to = EW[dj];
      if (to == dt) continue;
      tcase *t = newcase("cast %s->%s [4099]", dname(dt), dname(to));
      int64_t sh[1] = {4099};
      /* i64 beyond 2^53 and i32 beyond 2^24: integer casts keep every bit */
      int a = nb(t, dt, 4099, dt == AG_I64 ? -9e18 : dt == AG_I32 ? -2e9 : -300, dt == AG_I64 ? 9e18 : dt == AG_I32 ? 2e9 : 300);
      int o = nbout(t, to, 4099, true);
      t->c.op = AG_K_UNARY;
      t->c.sub = AG_U_COPY;
      opnd(t, 0, o, 1, sh);
      opnd(t, 1, a, 1, sh);
      run(t);
    }
    for (int bo = 0; bo < AG_BINARY_COUNT; bo++) {
      const ag_binary_info *bi = ag_binary_info_of(bo);
      bool cmp = bi->compare;
      if (isint(dt) && bi->ints != AG_OPT_INT) continue;
      for (int bc = 0; bc < 2; bc++) {
        /* (abs backward left out: for a NaN gradient at x == 0 the CPU
         * gives 0, the GPU NaN*sign(0) = NaN like torch) */
        bool fl = !isint(dt) && bo != AG_B_ABS_BWD;
        tcase *t = newcase("binary %s %s %s%s", bi->name, dname(dt), bc ? "broadcast [513,257]+[257]" : "contig [513,257]",
                           fl ? " with NaN" : "");
        int64_t sh[2] = {513, 257};
        int a = nb(t, dt, 513 * 257, -3, 3);
        int b = nb(t, dt, bc ? 257 : 513 * 257, -3, 3);
        if (!isint(dt)) { /* the operands' domains from the table */
          for (int64_t i = 0; i < t->b[a].n; i++) setv(dt, t->b[a].host, i, ag_ref_draw(ag_ref_binary_dom(bo, 0), urand(), urand()));
          for (int64_t i = 0; i < t->b[b].n; i++) setv(dt, t->b[b].host, i, ag_ref_draw(ag_ref_binary_dom(bo, 1), urand(), urand()));
        }
        /* NaN in either operand, sometimes in both: every op propagates it
         * as the CPU does (maximum/minimum propagate it like torch.maximum) */
        if (fl) {
          for (int64_t i = 3; i < 513 * 257; i += 101) setv(dt, t->b[a].host, i, NAN);
          for (int64_t i = 5; i < t->b[b].n; i += 89) setv(dt, t->b[b].host, i, NAN);
        }
        bool ex = isint(dt) || bo == AG_B_MAX || bo == AG_B_MIN || cmp;
        int o = nbout(t, cmp ? AG_BOOL : dt, 513 * 257, ex); /* comparisons write bool */
        t->c.op = AG_K_BINARY;
        t->c.sub = bo;
        ag_ref_binary_scalars(bo, &t->c.s[0], &t->c.s[1]);
        if (bo == AG_B_ADD) t->c.s[0] = isint(dt) ? 2 : 0.75;
        opnd(t, 0, o, 2, sh);
        opnd(t, 1, a, 2, sh);
        opnd(t, 2, b, 2, sh);
        if (bc) t->c.o[2].strides[0] = 0;
        run(t);
      }
    }
    {
      /* the old float condition, and bool (a comparison's result) */
      ag_dtype cdt = di % 2 ? AG_BOOL : AG_F32;
      tcase *t = newcase("where %s [300,70] cond %s [300,1], b [70]", dname(dt), dname(cdt));
      int64_t sh[2] = {300, 70};
      int cnd = nb(t, cdt, 300, 0, 2);
      for (int i = 0; i < 300; i++) setv(cdt, t->b[cnd].host, i, floor(getv(cdt, t->b[cnd].host, i)));
      int a = nb(t, dt, 300 * 70, -5, 5), b = nb(t, dt, 70, -5, 5), o = nbout(t, dt, 300 * 70, true);
      t->c.op = AG_K_WHERE;
      opnd(t, 0, o, 2, sh);
      opnd(t, 1, cnd, 2, sh);
      opnd(t, 2, a, 2, sh);
      opnd(t, 3, b, 2, sh);
      t->c.o[1].strides[0] = 1; /* cond [300, 1] broadcast along dim 1 */
      t->c.o[1].strides[1] = 0;
      t->c.o[3].strides[0] = 0;
      run(t);
    }
    {
      tcase *t = newcase("fill %s strided [100,50] step 2", dname(dt));
      int64_t sh[2] = {100, 50};
      int o = nbout(t, dt, 100 * 100, true);
      t->c.op = AG_K_FILL;
      t->c.s[0] = -2.75;
      opnd(t, 0, o, 2, sh);
      t->c.o[0].strides[0] = 100;
      t->c.o[0].strides[1] = 2;
      run(t);
      t = newcase("fill %s contig [10001]", dname(dt));
      int64_t sh1[1] = {10001};
      o = nbout(t, dt, 10001, true);
      t->c.op = AG_K_FILL;
      t->c.s[0] = 3.3;
      opnd(t, 0, o, 1, sh1);
      run(t);
      t = newcase("arange %s [5000]", dname(dt));
      int64_t sh2[1] = {5000};
      o = nbout(t, dt, 5000, true);
      t->c.op = AG_K_ARANGE;
      t->c.s[0] = -10;
      t->c.s[1] = isint(dt) ? 3 : 0.25;
      opnd(t, 0, o, 1, sh2);
      run(t);
    }
  }
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (int nrm = 0; nrm < 2; nrm++) {
      tcase *t = newcase("%s %s [100003] seed/offset", nrm ? "randn" : "rand", dname(dt));
      int64_t sh[1] = {100003};
      int o = nbout(t, dt, 100003, !nrm);
      if (nrm) t->b[o].tol = 1e-9; /* log/cos may differ by an ulp */
      t->c.op = nrm ? AG_K_RAND_NORMAL : AG_K_RAND_UNIFORM;
      t->c.s[0] = nrm ? 0.5 : -1;
      t->c.s[1] = nrm ? 2 : 3;
      t->c.seed = 0x1234567890abcdefull;
      t->c.offset = 77;
      opnd(t, 0, o, 1, sh);
      run(t);
    }
    tcase *t = newcase("dropout %s p=0.3 [65539]", dname(dt));
    int64_t sh[1] = {65539};
    int x = nb(t, dt, 65539, -2, 2), o = nbout(t, dt, 65539, dt == AG_F32), m = nbout(t, dt, 65539, true);
    t->c.op = AG_K_DROPOUT;
    t->c.s[0] = 0.3;
    t->c.seed = 42;
    t->c.offset = 5;
    opnd(t, 0, o, 1, sh);
    opnd(t, 1, x, 1, sh);
    opnd(t, 2, m, 1, sh);
    run(t);
  }
}

static void cases_reduce(void) {
  static const int64_t shapes[][3] = {{1, 1 << 20, 1}, {300, 999, 1}, {7, 513, 65}, {1, 70000, 3}, {4096, 8, 1},
                                      {2, 3, 4097}};
  for (int di = 0; di < 7; di++) {
    ag_dtype dt = EW[di];
    for (int r = 0; r < AG_REDUCE_COUNT; r++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (r == AG_R_SUM && (dt == AG_U8 || dt == AG_BOOL)) continue; /* summed as i64 by the core */
        const int64_t *sh = shapes[s];
        tcase *t = newcase("reduce %d %s [%lld,%lld,%lld]", r, dname(dt), (long long)sh[0], (long long)sh[1],
                           (long long)sh[2]);
        int64_t in[3] = {sh[0], sh[1], sh[2]}, out[2] = {sh[0], sh[2]};
        double lo = dt == AG_U8 ? 0 : dt == AG_BOOL ? 0 : isint(dt) ? -50 : -2, hi = dt == AG_BOOL ? 2 : isint(dt) ? 50 : 2;
        int x = nb(t, dt, sh[0] * sh[1] * sh[2], lo, hi);
        ag_dtype odt = r == AG_R_ARGMAX ? AG_I32 : dt;
        /* sums of 1M halves round differently in f32 vs f64: compare in NMSE */
        int o = nbout(t, odt, sh[0] * sh[2], r != AG_R_SUM || isint(dt));
        if (r == AG_R_SUM) t->b[o].tol = dt == AG_F32 ? 1e-10 : dt == AG_F16 ? 1e-5 : 1e-4; /* one ulp of a single output */
        t->c.op = AG_K_REDUCE;
        t->c.sub = r;
        t->c.s[0] = r == AG_R_SUM && !isint(dt) ? 0.5 : 1;
        t->c.i[0] = sh[0];
        t->c.i[1] = sh[1];
        t->c.i[2] = sh[2];
        opnd(t, 0, o, 2, out);
        opnd(t, 1, x, 3, in);
        run(t);
      }
  }
}

/* NaN, -inf, ties and empty rows: max/min propagate NaN, argmax takes the
 * first NaN, else the first maximum, and 0 for a row of -inf or an empty
 * row (the CPU backend's rules, as torch.argmax); every reduction path:
 * rows (inner == 1, one and several blocks per row), columns, split. */
static void cases_reduce_nan(void) {
  static const int64_t shapes[][3] = {{64, 999, 1}, {3, 100000, 1}, {7, 513, 65}, {1, 70000, 3}, {5, 0, 1},
                                      {2, 0, 3}};
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (int r = 0; r < AG_REDUCE_COUNT; r++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t *sh = shapes[s];
        tcase *t = newcase("reduce %d %s [%lld,%lld,%lld] NaN, -inf, ties, empty rows", r, dname(dt),
                           (long long)sh[0], (long long)sh[1], (long long)sh[2]);
        int64_t in[3] = {sh[0], sh[1], sh[2]}, out[2] = {sh[0], sh[2]};
        int64_t O = sh[0], R = sh[1], I = sh[2];
        int x = nb(t, dt, O * R * I, -2, 2);
        for (int64_t o = 0; o < O; o++)
          for (int64_t j = 0; j < I; j++) {
            int kind = (int)((o * I + j) % 6);
            for (int64_t k = 0; k < R; k++) {
              int64_t e = (o * R + k) * I + j;
              double v = getv(dt, t->b[x].host, e);
              if (kind == 1 && (k == R / 3 || k == R / 2)) v = NAN;   /* two NaN, first wins */
              if (kind == 2) v = NAN;                                    /* all NaN */
              if (kind == 3) v = -INFINITY;                              /* all -inf */
              if (kind == 4) v = k % 7 == 2 ? 3 : v;                     /* ties of the maximum */
              if (kind == 5 && k == R - 1) v = NAN;                      /* NaN last */
              setv(dt, t->b[x].host, e, v);
            }
          }
        ag_dtype odt = r == AG_R_ARGMAX ? AG_I32 : dt;
        int o = nbout(t, odt, O * I, r != AG_R_SUM);
        if (r == AG_R_SUM) t->b[o].tol = dt == AG_F32 ? 1e-10 : dt == AG_F16 ? 1e-5 : 1e-4;
        t->c.op = AG_K_REDUCE;
        t->c.sub = r;
        t->c.s[0] = 1;
        t->c.i[0] = O;
        t->c.i[1] = R;
        t->c.i[2] = I;
        opnd(t, 0, o, 2, out);
        opnd(t, 1, x, 3, in);
        run(t);
      }
  }
  /* i32 sums beyond the i32 range saturate as on the CPU */
  for (int neg = 0; neg < 2; neg++) {
    tcase *t = newcase("reduce 0 i32 [6,1000,1] sum %s the i32 range (saturates)", neg ? "below" : "above");
    int64_t in[3] = {6, 1000, 1}, out[2] = {6, 1};
    int x = nb(t, AG_I32, 6000, neg ? -2147483000.0 : 1e9, neg ? -1e9 : 2147483000.0);
    int o = nbout(t, AG_I32, 6, true);
    t->c.op = AG_K_REDUCE;
    t->c.sub = AG_R_SUM;
    t->c.s[0] = 1;
    t->c.i[0] = 6;
    t->c.i[1] = 1000;
    t->c.i[2] = 1;
    opnd(t, 0, o, 2, out);
    opnd(t, 1, x, 3, in);
    run(t);
  }
}

/* Work beyond a bounded grid (grid-stride loops): 67,108,865 rows of two
 * elements exceed HIP's 2^32 work-items with one 64-thread block per row;
 * the other cases are small but larger than the grid the launchers choose
 * on the emulator (4 units), so every loop runs more than once. */
static void cases_grid_stride(void) {
  {
    int64_t O = 67108865, R = 1, in[3] = {O, R, 1}, out[2] = {O, 1};
    tcase *t = newcase("reduce 1 f16 [67108865,1,1] (rows beyond HIP's 2^32 work-items)");
    int x = nb(t, AG_F16, 0, 0, 0), o = nb(t, AG_F16, 0, 0, 0);
    /* filled by bit pattern (finite halves in (-2, 2)): random fills of
     * 134M elements would dominate the run */
    for (int k = 0; k < 2; k++) {
      buf *b = &t->b[k == 0 ? x : o];
      b->n = k == 0 ? O * R : O;
      free(b->host);
      b->host = malloc((size_t)b->n * 2);
      uint16_t *h = (uint16_t *)b->host;
      for (int64_t i = 0; i < b->n; i++) h[i] = (uint16_t)(((uint32_t)i * 2654435761u >> 9) & 0xbbffu);
    }
    t->b[o].out = true;
    t->b[o].exact = true;
    t->c.op = AG_K_REDUCE;
    t->c.sub = AG_R_MAX;
    t->c.s[0] = 1;
    t->c.i[0] = O;
    t->c.i[1] = R;
    t->c.i[2] = 1;
    opnd(t, 0, o, 2, out);
    opnd(t, 1, x, 3, in);
    run(t);
  }
  {
    tcase *t = newcase("arange f32 [70001] (beyond the grid)");
    int64_t sh[1] = {70001};
    int o = nbout(t, AG_F32, 70001, true);
    t->c.op = AG_K_ARANGE;
    t->c.s[0] = -10;
    t->c.s[1] = 0.25;
    opnd(t, 0, o, 1, sh);
    run(t);
  }
  for (int nrm = 0; nrm < 2; nrm++) {
    tcase *t = newcase("%s f32 [600001] (beyond the grid)", nrm ? "randn" : "rand");
    int64_t sh[1] = {600001};
    int o = nbout(t, AG_F32, 600001, !nrm);
    if (nrm) t->b[o].tol = 1e-9;
    t->c.op = nrm ? AG_K_RAND_NORMAL : AG_K_RAND_UNIFORM;
    t->c.s[0] = 0;
    t->c.s[1] = 1;
    t->c.seed = 7;
    t->c.offset = 3;
    opnd(t, 0, o, 1, sh);
    run(t);
  }
  {
    tcase *t = newcase("dropout f32 p=0.5 [600001] (beyond the grid)");
    int64_t sh[1] = {600001};
    int x = nb(t, AG_F32, 600001, -2, 2), o = nbout(t, AG_F32, 600001, true), m = nbout(t, AG_F32, 600001, true);
    t->c.op = AG_K_DROPOUT;
    t->c.s[0] = 0.5;
    t->c.seed = 9;
    opnd(t, 0, o, 1, sh);
    opnd(t, 1, x, 1, sh);
    opnd(t, 2, m, 1, sh);
    run(t);
  }
  {
    tcase *t = newcase("sgd momentum 2 tensors, 2.2M elements (chunks beyond the grid)");
    static const int64_t sz[2] = {2200001, 1234};
    for (int k = 0; k < 2; k++) {
      int p = nbout(t, AG_F32, sz[k], false), g = nb(t, AG_F32, sz[k], -1, 1), m = nbout(t, AG_F32, sz[k], false);
      int ids[3] = {p, g, m};
      for (int j = 0; j < 3; j++) {
        t->mb[t->nm] = ids[j];
        t->m.t[t->nm].dtype = AG_F32;
        t->m.t[t->nm].numel = sz[k];
        t->nm++;
      }
    }
    t->c.op = AG_K_SGD;
    t->c.s[0] = 0.1; t->c.s[1] = 0.9; t->c.s[2] = 0; t->c.s[3] = 1e-4;
    t->c.n_operands = 2;
    run(t);
  }
}

static void cases_matmul(void) {
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (int lay = 0; lay < 4; lay++) {
      int64_t Bn = 3, M = 65, K = 130, N = 47;
      tcase *t = newcase("matmul %s [3,65,130]@[3,130,47] A %s B %s%s", dname(dt), lay & 1 ? "col" : "row",
                         lay & 2 ? "col" : "row", lay == 3 ? " B batch-broadcast, beta 0.5" : "");
      int64_t as[3] = {Bn, M, K}, bs[3] = {Bn, K, N}, os[3] = {Bn, M, N};
      int a = nb(t, dt, Bn * M * K, -1, 1), b = nb(t, dt, Bn * K * N, -1, 1), o = nbout(t, dt, Bn * M * N, false);
      if (dt == AG_F32) t->b[o].tol = 1e-7; /* TF32 stays off unless AG_ALLOW_TF32=1 */
      t->c.op = AG_K_MATMUL;
      t->c.s[0] = 1.5;
      t->c.s[1] = lay == 3 ? 0.5 : 0;
      opnd(t, 0, o, 3, os);
      opnd(t, 1, a, 3, as);
      opnd(t, 2, b, 3, bs);
      if (lay & 1) { /* A stored [B, K, M] */
        t->c.o[1].strides[1] = 1;
        t->c.o[1].strides[2] = M;
      }
      if (lay & 2) { /* B stored [B, N, K] */
        t->c.o[2].strides[1] = 1;
        t->c.o[2].strides[2] = K;
      }
      if (lay == 3) t->c.o[2].strides[0] = 0;
      run(t);
    }
  }
}

/* Shapes beyond the 65,535 of gridDim.y/z: a batch of 65,536 tiny
 * matrices and M = 4,194,305 rows (the fallback GEMM is meant for shapes
 * cuBLAS cannot take). */
static void cases_matmul_big(void) {
  {
    int64_t Bn = 65536, M = 3, K = 5, N = 2;
    tcase *t = newcase("matmul f32 batch 65536 [65536,3,5]@[65536,5,2] (grid beyond 65535 in y/z)");
    int64_t as[3] = {Bn, M, K}, bs[3] = {Bn, K, N}, os[3] = {Bn, M, N};
    int a = nb(t, AG_F32, Bn * M * K, -1, 1), b = nb(t, AG_F32, Bn * K * N, -1, 1), o = nbout(t, AG_F32, Bn * M * N, false);
    t->b[o].tol = 1e-7;
    t->c.op = AG_K_MATMUL;
    t->c.s[0] = 1;
    opnd(t, 0, o, 3, os);
    opnd(t, 1, a, 3, as);
    opnd(t, 2, b, 3, bs);
    run(t);
  }
  {
    int64_t M = 4194305, K = 1, N = 1;
    tcase *t = newcase("matmul f16 M=4194305 [4194305,1]@[1,1] (grid beyond 65535 in y/z)");
    int64_t as[2] = {M, K}, bs[2] = {K, N}, os[2] = {M, N};
    int a = nb(t, AG_F16, M * K, -1, 1), b = nb(t, AG_F16, K * N, -1, 1), o = nbout(t, AG_F16, M * N, false);
    t->c.op = AG_K_MATMUL;
    t->c.s[0] = 1;
    opnd(t, 0, o, 2, os);
    opnd(t, 1, a, 2, as);
    opnd(t, 2, b, 2, bs);
    run(t);
  }
}

static void cases_rows(void) {
  /* [2000, 7] and [70, 1500]: more rows than the grid on the emulator */
  static const int64_t shapes[][2] = {{300, 77}, {64, 5000}, {3, 1}, {2000, 7}, {70, 1500}};
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int64_t R = shapes[s][0], C = shapes[s][1], sh[2] = {R, C}, sr[1] = {R}, sc[1] = {C};
      for (int lg = 0; lg < 2; lg++) {
        tcase *t = newcase("%s %s [%lld,%lld]", lg ? "log_softmax" : "softmax", dname(dt), (long long)R, (long long)C);
        int x = nb(t, dt, R * C, -4, 4), o = nbout(t, dt, R * C, false);
        t->c.op = AG_K_SOFTMAX;
        t->c.sub = lg;
        t->c.i[0] = R;
        t->c.i[1] = C;
        opnd(t, 0, o, 2, sh);
        opnd(t, 1, x, 2, sh);
        run(t);
        t = newcase("%s_bwd %s [%lld,%lld]", lg ? "log_softmax" : "softmax", dname(dt), (long long)R, (long long)C);
        int dx = nbout(t, dt, R * C, false), dy = nb(t, dt, R * C, -1, 1), y = nb(t, dt, R * C, lg ? -5 : 0, lg ? 0 : 1);
        t->c.op = AG_K_SOFTMAX_BWD;
        t->c.sub = lg;
        t->c.i[0] = R;
        t->c.i[1] = C;
        opnd(t, 0, dx, 2, sh);
        opnd(t, 1, dy, 2, sh);
        opnd(t, 2, y, 2, sh);
        run(t);
      }
      for (int bad = 0; bad < 4; bad++) {
        /* 2, 3: i64 targets (sub 1), beyond the i32 range when bad */
        ag_dtype tdt = bad >= 2 ? AG_I64 : AG_I32;
        tcase *t = newcase("cross_entropy %s [%lld,%lld]%s%s", dname(dt), (long long)R, (long long)C,
                           bad % 2 ? " one target out of range" : " with ignore_index", bad >= 2 ? " i64 targets" : "");
        int l = nb(t, dt, R * C, -4, 4), tg = nb(t, tdt, R, 0, (double)C), o = nbout(t, AG_F32, R, false);
        setv(tdt, t->b[tg].host, 0, -100);
        if (bad % 2) setv(tdt, t->b[tg].host, R - 1, bad >= 2 ? 4294967296.0 + 1 : C + 3);
        t->want_error = bad % 2;
        t->c.sub = bad >= 2;
        t->c.op = AG_K_CROSS_ENTROPY;
        t->c.i[0] = R;
        t->c.i[1] = C;
        t->c.i[2] = -100;
        opnd(t, 0, o, 1, sr);
        opnd(t, 1, l, 2, sh);
        opnd(t, 2, tg, 1, sr);
        run(t);
      }
      for (int gs = 0; gs < 2; gs++) {
        ag_dtype tdt = gs ? AG_I64 : AG_I32;
        tcase *t = newcase("cross_entropy_bwd %s [%lld,%lld] grad stride %d %s targets", dname(dt), (long long)R,
                           (long long)C, gs, dname(tdt));
        int dl = nbout(t, dt, R * C, false), l = nb(t, dt, R * C, -4, 4), tg = nb(t, tdt, R, 0, (double)C);
        int g = nb(t, AG_F32, R, 0.5, 1.5);
        setv(tdt, t->b[tg].host, 0, -100);
        t->c.sub = gs;
        t->c.op = AG_K_CROSS_ENTROPY_BWD;
        t->c.i[0] = R;
        t->c.i[1] = C;
        t->c.i[2] = -100;
        opnd(t, 0, dl, 2, sh);
        opnd(t, 1, l, 2, sh);
        opnd(t, 2, tg, 1, sr);
        opnd(t, 3, g, 1, sr);
        t->c.o[3].strides[0] = gs;
        run(t);
      }
      for (int wb = 0; wb < 2; wb++) {
        tcase *t = newcase("layer_norm %s [%lld,%lld]%s", dname(dt), (long long)R, (long long)C, wb ? " w,b" : "");
        int x = nb(t, dt, R * C, -3, 5), w = wb ? nb(t, dt, C, 0.5, 1.5) : -1, b = wb ? nb(t, dt, C, -1, 1) : -1;
        int y = nbout(t, dt, R * C, false), mu = nbout(t, AG_F32, R, false), rs = nbout(t, AG_F32, R, false);
        t->c.op = AG_K_LAYERNORM;
        t->c.i[0] = R;
        t->c.i[1] = C;
        t->c.s[0] = 1e-5;
        opnd(t, 0, y, 2, sh);
        opnd(t, 1, x, 2, sh);
        opnd(t, 2, w, 1, sc);
        opnd(t, 3, b, 1, sc);
        opnd(t, 4, mu, 1, sr);
        opnd(t, 5, rs, 1, sr);
        if (!wb) t->c.o[2].dtype = t->c.o[3].dtype = dt;
        run(t);
        t = newcase("layer_norm_bwd %s [%lld,%lld]%s", dname(dt), (long long)R, (long long)C, wb ? " w" : "");
        int dx = nbout(t, dt, R * C, false), dy = nb(t, dt, R * C, -1, 1);
        x = nb(t, dt, R * C, -3, 5);
        mu = nb(t, AG_F32, R, 0.5, 1.5);
        rs = nb(t, AG_F32, R, 0.3, 1.0);
        w = wb ? nb(t, dt, C, 0.5, 1.5) : -1;
        int dw = nbout(t, AG_F32, C, false), db = nbout(t, AG_F32, C, false);
        t->b[dw].tol = t->b[db].tol = 1e-8;
        t->c.op = AG_K_LAYERNORM_BWD;
        t->c.i[0] = R;
        t->c.i[1] = C;
        opnd(t, 0, dx, 2, sh);
        opnd(t, 1, dy, 2, sh);
        opnd(t, 2, x, 2, sh);
        opnd(t, 3, mu, 1, sr);
        opnd(t, 4, rs, 1, sr);
        opnd(t, 5, w, 1, sc);
        if (!wb) t->c.o[5].dtype = dt;
        t->nm = 2;
        t->mb[0] = dw;
        t->mb[1] = db;
        t->m.t[0].dtype = t->m.t[1].dtype = AG_F32;
        t->m.t[0].numel = t->m.t[1].numel = C;
        run(t);
      }
      for (int wb = 0; wb < 2; wb++) {
        tcase *t = newcase("rms_norm %s [%lld,%lld]%s", dname(dt), (long long)R, (long long)C, wb ? " w" : "");
        int x = nb(t, dt, R * C, -3, 5), w = wb ? nb(t, dt, C, 0.5, 1.5) : -1;
        int y = nbout(t, dt, R * C, false), rs = nbout(t, AG_F32, R, false);
        t->c.op = AG_K_RMSNORM;
        t->c.i[0] = R;
        t->c.i[1] = C;
        t->c.s[0] = 1e-5;
        opnd(t, 0, y, 2, sh);
        opnd(t, 1, x, 2, sh);
        opnd(t, 2, w, 1, sc);
        opnd(t, 3, rs, 1, sr);
        if (!wb) t->c.o[2].dtype = dt;
        run(t);
        t = newcase("rms_norm_bwd %s [%lld,%lld]%s", dname(dt), (long long)R, (long long)C, wb ? " w" : "");
        int dx = nbout(t, dt, R * C, false), dy = nb(t, dt, R * C, -1, 1);
        x = nb(t, dt, R * C, -3, 5);
        rs = nb(t, AG_F32, R, 0.3, 1.0);
        w = wb ? nb(t, dt, C, 0.5, 1.5) : -1;
        int dw = nbout(t, AG_F32, C, false);
        t->b[dw].tol = 1e-8;
        t->c.op = AG_K_RMSNORM_BWD;
        t->c.i[0] = R;
        t->c.i[1] = C;
        opnd(t, 0, dx, 2, sh);
        opnd(t, 1, dy, 2, sh);
        opnd(t, 2, x, 2, sh);
        opnd(t, 3, rs, 1, sr);
        opnd(t, 4, w, 1, sc);
        if (!wb) t->c.o[4].dtype = dt;
        t->nm = 1;
        t->mb[0] = dw;
        t->m.t[0].dtype = AG_F32;
        t->m.t[0].numel = C;
        run(t);
      }
    }
  }
}

static void cases_embedding(void) {
  for (int di = 0; di < 7; di++) {
    ag_dtype dt = EW[di];
    for (int bad = 0; bad < 4; bad++) {
      /* 2, 3: i64 indices (sub 1), one beyond the i32 range when bad */
      ag_dtype idt = bad >= 2 ? AG_I64 : AG_I32;
      int64_t N = 333, D = 67, V = 50, os[2] = {N, D}, ts[2] = {V, D}, is[1] = {N};
      tcase *t = newcase("embedding %s N=333 D=67 V=50%s%s", dname(dt), bad % 2 ? " one index out of range" : "",
                         bad >= 2 ? " i64 indices" : "");
      int o = nbout(t, dt, N * D, true), tab = nb(t, dt, V * D, -2, 2), ix = nb(t, idt, N, 0, (double)V);
      if (bad % 2) setv(idt, t->b[ix].host, 7, bad >= 2 ? 4294967296.0 + 2 : -1);
      t->want_error = bad % 2;
      t->c.sub = bad >= 2;
      t->c.op = AG_K_EMBEDDING;
      t->c.i[0] = N;
      t->c.i[1] = D;
      t->c.i[2] = V;
      opnd(t, 0, o, 2, os);
      opnd(t, 1, tab, 2, ts);
      opnd(t, 2, ix, 1, is);
      run(t);
    }
    if (isint(dt)) continue;
    int64_t N = 4000, D = 96, V = 37, os[2] = {N, D}, ts[2] = {V, D}, is[1] = {N};
    ag_dtype idt = di == 1 ? AG_I64 : AG_I32;
    tcase *t = newcase("embedding_bwd %s N=4000 D=96 V=37 (+= into f32) %s indices", dname(dt), dname(idt));
    int dt_ = nb(t, AG_F32, V * D, -1, 1), dout = nb(t, dt, N * D, -1, 1), ix = nb(t, idt, N, 0, (double)V);
    t->c.sub = idt == AG_I64;
    t->b[dt_].out = true;
    t->b[dt_].tol = 1e-10;
    t->c.op = AG_K_EMBEDDING_BWD;
    t->c.i[0] = N;
    t->c.i[1] = D;
    t->c.i[2] = V;
    opnd(t, 0, dt_, 2, ts);
    opnd(t, 1, dout, 2, os);
    opnd(t, 2, ix, 1, is);
    run(t);
  }
}

/* conv2d forward, input and weight gradients (implicit GEMM on the GPU):
 * strides, padding, dilation, groups, bias, 1x1, more than one 64-row tile,
 * k tails, and a weight gradient long enough to be split. */
static void cases_conv(void) {
  static const struct {
    int64_t x[4], w[4];
    int st[2], pad[2], dil[2], groups, bias;
  } k[] = {
      {{2, 4, 7, 6}, {6, 2, 3, 3}, {2, 1}, {1, 2}, {2, 1}, 2, 1},
      {{3, 3, 9, 9}, {5, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 1},
      {{2, 8, 5, 5}, {16, 8, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, 0},
      {{2, 5, 6, 6}, {70, 5, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, 1},
      {{8, 3, 20, 20}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, 0},
      {{2, 6, 11, 10}, {6, 1, 5, 3}, {3, 2}, {2, 1}, {1, 2}, 6, 1},
  };
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (size_t q = 0; q < sizeof k / sizeof *k; q++) {
      const int64_t *xs = k[q].x, *ws = k[q].w;
      int64_t Ho = (xs[2] + 2 * k[q].pad[0] - k[q].dil[0] * (ws[2] - 1) - 1) / k[q].st[0] + 1;
      int64_t Wo = (xs[3] + 2 * k[q].pad[1] - k[q].dil[1] * (ws[3] - 1) - 1) / k[q].st[1] + 1;
      int64_t ys[4] = {xs[0], ws[0], Ho, Wo}, bs[1] = {ws[0]};
      int64_t nx = xs[0] * xs[1] * xs[2] * xs[3], nw = ws[0] * ws[1] * ws[2] * ws[3], ny = ys[0] * ys[1] * Ho * Wo;
      for (int op = AG_K_CONV2D; op <= AG_K_CONV2D_BWD_WEIGHT; op++) {
        tcase *t = newcase("conv2d %s %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%d,%d p%d,%d d%d,%d g%d%s",
                           op == AG_K_CONV2D ? "fwd" : op == AG_K_CONV2D_BWD_INPUT ? "bwd_input" : "bwd_weight",
                           dname(dt), (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3],
                           (long long)ws[0], (long long)ws[1], (long long)ws[2], (long long)ws[3], k[q].st[0],
                           k[q].st[1], k[q].pad[0], k[q].pad[1], k[q].dil[0], k[q].dil[1], k[q].groups,
                           k[q].bias && op == AG_K_CONV2D ? " bias" : "");
        t->c.op = (ag_kop)op;
        t->c.name = "conv2d";
        t->c.s[0] = k[q].st[0], t->c.s[1] = k[q].st[1], t->c.s[2] = k[q].pad[0], t->c.s[3] = k[q].pad[1];
        t->c.s[4] = k[q].dil[0], t->c.s[5] = k[q].dil[1], t->c.s[6] = k[q].groups;
        if (op == AG_K_CONV2D) {
          int y = nbout(t, dt, ny, false), x = nb(t, dt, nx, -1, 1), w = nb(t, dt, nw, -1, 1);
          opnd(t, 0, y, 4, ys);
          opnd(t, 1, x, 4, xs);
          opnd(t, 2, w, 4, ws);
          opnd(t, 3, k[q].bias ? nb(t, dt, ws[0], -1, 1) : -1, 1, bs);
        } else if (op == AG_K_CONV2D_BWD_INPUT) {
          int dx = nbout(t, dt, nx, false), dy = nb(t, dt, ny, -1, 1), w = nb(t, dt, nw, -1, 1);
          opnd(t, 0, dx, 4, xs);
          opnd(t, 1, dy, 4, ys);
          opnd(t, 2, w, 4, ws);
        } else {
          int dw = nbout(t, dt, nw, false), dy = nb(t, dt, ny, -1, 1), x = nb(t, dt, nx, -1, 1);
          opnd(t, 0, dw, 4, ws);
          opnd(t, 1, dy, 4, ys);
          opnd(t, 2, x, 4, xs);
        }
        run(t);
      }
    }
  }
}

/* max (indices exact, ties, NaN and -inf), avg with and without padding in
 * the divisor, adaptive avg; forward and backward. */
static void cases_pool(void) {
  static const struct {
    int op;
    int64_t x[4];
    int kern[2], st[2], pad[2], count_pad;
    int64_t out[2]; /* adaptive output size */
    const char *what;
  } k[] = {
      {AG_P_MAX, {2, 3, 7, 8}, {3, 2}, {2, 2}, {1, 1}, 0, {0, 0}, "max 3x2 s2 p1"},
      {AG_P_MAX, {4, 8, 28, 28}, {2, 2}, {2, 2}, {0, 0}, 0, {0, 0}, "max 2x2 s2, ties"},
      {AG_P_MAX, {2, 2, 9, 9}, {3, 3}, {1, 1}, {1, 1}, 0, {0, 0}, "max 3x3 s1 p1 overlapping, NaN and -inf"},
      {AG_P_AVG, {2, 3, 7, 8}, {3, 3}, {2, 2}, {1, 1}, 1, {0, 0}, "avg 3x3 s2 p1 count_pad"},
      {AG_P_AVG, {2, 3, 7, 8}, {3, 3}, {2, 2}, {1, 1}, 0, {0, 0}, "avg 3x3 s2 p1"},
      {AG_P_ADAPTIVE_AVG, {2, 3, 7, 9}, {0, 0}, {0, 0}, {0, 0}, 0, {3, 4}, "adaptive 3x4"},
      {AG_P_ADAPTIVE_AVG, {2, 2, 13, 11}, {0, 0}, {0, 0}, {0, 0}, 0, {5, 7}, "adaptive 5x7"},
  };
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    for (size_t q = 0; q < sizeof k / sizeof *k; q++) {
      const int64_t *xs = k[q].x;
      int64_t Ho = k[q].out[0], Wo = k[q].out[1];
      if (k[q].op != AG_P_ADAPTIVE_AVG) {
        Ho = (xs[2] + 2 * k[q].pad[0] - k[q].kern[0]) / k[q].st[0] + 1;
        Wo = (xs[3] + 2 * k[q].pad[1] - k[q].kern[1]) / k[q].st[1] + 1;
      }
      int64_t ys[4] = {xs[0], xs[1], Ho, Wo}, nx = xs[0] * xs[1] * xs[2] * xs[3], ny = xs[0] * xs[1] * Ho * Wo;
      for (int bwd = 0; bwd < 2; bwd++) {
        tcase *t = newcase("pool2d %s %s %s [%lld,%lld,%lld,%lld]", bwd ? "bwd" : "fwd", k[q].what, dname(dt),
                           (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)xs[3]);
        t->c.op = bwd ? AG_K_POOL2D_BWD : AG_K_POOL2D;
        t->c.sub = k[q].op;
        t->c.name = "pool2d";
        t->c.s[0] = k[q].st[0], t->c.s[1] = k[q].st[1], t->c.s[2] = k[q].pad[0], t->c.s[3] = k[q].pad[1];
        t->c.s[4] = k[q].kern[0], t->c.s[5] = k[q].kern[1], t->c.s[6] = k[q].count_pad;
        /* the input (forward) or the one the saved indices come from */
        int x = nb(t, dt, nx, -1, 1);
        if (q == 1) /* few distinct values: ties decide by the first index */
          for (int64_t j = 0; j < nx; j++) setv(dt, t->b[x].host, j, floor(getv(dt, t->b[x].host, j) * 2));
        if (q == 2)
          for (int64_t j = 0; j < nx; j += 7) setv(dt, t->b[x].host, j, (j / 7) % 3 ? -INFINITY : NAN);
        if (!bwd) {
          int y = nbout(t, dt, ny, k[q].op == AG_P_MAX);
          opnd(t, 0, y, 4, ys);
          opnd(t, 1, x, 4, xs);
          if (k[q].op == AG_P_MAX) opnd(t, 2, nbout(t, AG_I32, ny, true), 4, ys);
        } else {
          int dx = nbout(t, dt, nx, false), dy = nb(t, dt, ny, -1, 1);
          opnd(t, 0, dx, 4, xs);
          opnd(t, 1, dy, 4, ys);
          if (k[q].op == AG_P_MAX) { /* indices of the CPU forward on x */
            int ix = nb(t, AG_I32, ny, 0, 1);
            opnd(t, 2, ix, 4, ys);
            ag_kernel_call f = t->c;
            float *xf = malloc(sizeof(float) * (size_t)nx), *yf = malloc(sizeof(float) * (size_t)ny);
            for (int64_t j = 0; j < nx; j++) xf[j] = (float)getv(dt, t->b[x].host, j);
            f.op = AG_K_POOL2D;
            f.o[0] = t->c.o[1];
            f.o[0].base = yf;
            f.o[0].dtype = AG_F32;
            f.o[1] = t->c.o[0];
            f.o[1].base = xf;
            f.o[1].dtype = AG_F32;
            f.o[2].base = t->b[ix].host;
            ag_kernel_error fe = {0};
            if (ag__cpu_run(&f, &fe) != AG_OK) fprintf(stderr, "gpu_check: pool indices: cpu forward failed\n");
            free(xf);
            free(yf);
          }
        }
        run(t);
      }
    }
  }
}

/* Batch norm statistics (mean and centred variance; sums against b - mu)
 * and the per-channel affine map, f32. Inputs sit around 3 (one case
 * around 100), where E[a^2] - mean^2 would cancel: the statistics are held
 * to an NMSE far below what that loses. Shapes: tiny, odd, CNN-like, long
 * reductions split over blocks (chunks aligned and not aligned with the
 * planes), HW = 1, and more work items than the grid. Each statistics case
 * runs twice: bitwise equal. */
static void cases_bn(void) {
  static const struct {
    int64_t N, C, HW;
    double centre;
  } k[] = {
      {2, 3, 5, 3}, {3, 7, 33, 3}, {32, 16, 784, 3}, {64, 2, 4096, 3}, {100, 5, 1, 3}, {5, 3, 7777, 100},
      {40, 600, 3, 3}, /* more channels (and elements) than the emulator's grid: grid-stride loops */
  };
  for (size_t q = 0; q < sizeof k / sizeof *k; q++) {
    const int64_t N = k[q].N, C = k[q].C, HW = k[q].HW, n = N * C * HW;
    const int64_t xs[3] = {N, C, HW}, ss[2] = {2, C}, cs[2] = {4, C}, ms[1] = {C};
    const double lo = k[q].centre - 1, hi = k[q].centre + 1;
    for (int sub = 0; sub < 2; sub++) {
      tcase *t = newcase("bn_stats sub %d f32 [%lld,%lld,%lld] around %g", sub, (long long)N, (long long)C,
                         (long long)HW, k[q].centre);
      int o = nbout(t, AG_F32, 2 * C, false), a = nb(t, AG_F32, n, lo, hi);
      t->b[o].tol = 1e-12;
      t->repeat = true;
      t->c.op = AG_K_BN_STATS;
      t->c.sub = sub;
      t->c.name = "bn_stats";
      t->c.i[0] = N, t->c.i[1] = C, t->c.i[2] = HW;
      opnd(t, 0, o, 2, ss);
      opnd(t, 1, a, 3, xs);
      if (sub == 1) {
        opnd(t, 2, nb(t, AG_F32, n, lo, hi), 3, xs);
        opnd(t, 3, nb(t, AG_F32, C, k[q].centre - 0.5, k[q].centre + 0.5), 1, ms);
      }
      run(t);
      t = newcase("bn_apply sub %d f32 [%lld,%lld,%lld]", sub, (long long)N, (long long)C, (long long)HW);
      int y = nbout(t, AG_F32, n, false);
      a = nb(t, AG_F32, n, lo, hi);
      t->c.op = AG_K_BN_APPLY;
      t->c.sub = sub;
      t->c.name = "bn_apply";
      t->c.i[0] = N, t->c.i[1] = C, t->c.i[2] = HW;
      opnd(t, 0, y, 3, xs);
      opnd(t, 1, a, 3, xs);
      opnd(t, 2, nb(t, AG_F32, 4 * C, -2, 2), 2, cs);
      if (sub == 1) opnd(t, 3, nb(t, AG_F32, n, lo, hi), 3, xs);
      run(t);
    }
  }
}

/* Deterministic mode (AG_KF_DETERMINISTIC): the ops that use float atomics
 * otherwise run twice with bitwise equal results; embedding backward adds in
 * the CPU's order, so it also equals the CPU bit for bit. */
static void cases_deterministic(void) {
  for (int di = 0; di < 3; di++) {
    ag_dtype dt = FL[di];
    int64_t N = 4000, D = 96, V = 37, os[2] = {N, D}, ts[2] = {V, D}, is[1] = {N};
    tcase *t = newcase("embedding_bwd %s N=4000 D=96 V=37 deterministic (equals the CPU bitwise, twice)", dname(dt));
    int dt_ = nb(t, AG_F32, V * D, -1, 1), dout = nb(t, dt, N * D, -1, 1), ix = nb(t, AG_I32, N, 0, (double)V);
    t->b[dt_].out = true;
    t->b[dt_].exact = true;
    t->repeat = true;
    t->c.op = AG_K_EMBEDDING_BWD;
    t->c.flags = AG_KF_DETERMINISTIC;
    t->c.i[0] = N;
    t->c.i[1] = D;
    t->c.i[2] = V;
    opnd(t, 0, dt_, 2, ts);
    opnd(t, 1, dout, 2, os);
    opnd(t, 2, ix, 1, is);
    run(t);
  }
  static const int64_t lns[][2] = {{4000, 96}, {64, 3000}}; /* dw/db: 11 chunks; one chunk */
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof lns / sizeof lns[0]; s++) {
      ag_dtype dt = FL[di];
      int64_t R = lns[s][0], C = lns[s][1], sh[2] = {R, C}, sr[1] = {R}, sc[1] = {C};
      tcase *t = newcase("layer_norm_bwd %s [%lld,%lld] w deterministic (twice)", dname(dt), (long long)R, (long long)C);
      int dx = nbout(t, dt, R * C, false), dy = nb(t, dt, R * C, -1, 1), x = nb(t, dt, R * C, -3, 5);
      int mu = nb(t, AG_F32, R, 0.5, 1.5), rs = nb(t, AG_F32, R, 0.3, 1.0), w = nb(t, dt, C, 0.5, 1.5);
      int dw = nbout(t, AG_F32, C, false), db = nbout(t, AG_F32, C, false);
      t->b[dw].tol = t->b[db].tol = 1e-8;
      t->repeat = true;
      t->c.op = AG_K_LAYERNORM_BWD;
      t->c.flags = AG_KF_DETERMINISTIC;
      t->c.i[0] = R;
      t->c.i[1] = C;
      opnd(t, 0, dx, 2, sh);
      opnd(t, 1, dy, 2, sh);
      opnd(t, 2, x, 2, sh);
      opnd(t, 3, mu, 1, sr);
      opnd(t, 4, rs, 1, sr);
      opnd(t, 5, w, 1, sc);
      t->nm = 2;
      t->mb[0] = dw;
      t->mb[1] = db;
      t->m.t[0].dtype = t->m.t[1].dtype = AG_F32;
      t->m.t[0].numel = t->m.t[1].numel = C;
      run(t);
    }
  /* var/std: rows (inner 1, short and long), columns, and N - correction <= 0 */
  static const int64_t vs[][4] = {{300, 77, 1, 1}, {5, 5000, 1, 1}, {7, 33, 19, 0}, {1, 70000, 1, 1}, {6, 1, 3, 1}, {4, 3, 1, 5}};
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof vs / sizeof vs[0]; s++)
      for (int sq = 0; sq < 2; sq++) {
        ag_dtype dt = FL[di];
        int64_t O = vs[s][0], R = vs[s][1], In = vs[s][2], xs[3] = {O, R, In}, ys[2] = {O, In};
        tcase *t = newcase("%s %s [%lld,%lld,%lld] correction %lld", sq ? "std" : "var", dname(dt), (long long)O,
                           (long long)R, (long long)In, (long long)vs[s][3]);
        int x = nb(t, dt, O * R * In, -3, 5), y = nbout(t, dt, O * In, false);
        t->c.op = AG_K_VAR;
        t->c.sub = sq;
        t->c.i[0] = O;
        t->c.i[1] = R;
        t->c.i[2] = In;
        t->c.s[0] = (double)vs[s][3];
        opnd(t, 0, y, 2, ys);
        opnd(t, 1, x, 3, xs);
        run(t);
      }
  /* gather / index_select (sel: 1-d index, strides 0,1,0) and the
   * scatter-add backward, i32 and i64 indices */
  static const int64_t gs[][5] = {{3, 40, 7, 9, 0}, {1, 300, 64, 50, 1}, {20, 6, 1, 11, 0}, {5, 9, 4, 3, 1}};
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof gs / sizeof gs[0]; s++)
      for (int i64 = 0; i64 < 2; i64++)
        for (int bwd = 0; bwd < 2; bwd++) {
          ag_dtype dt = FL[di], it = i64 ? AG_I64 : AG_I32;
          int64_t O = gs[s][0], K = gs[s][1], In = gs[s][2], X = gs[s][3];
          bool sel = gs[s][4] != 0;
          int64_t xs[3] = {O, X, In}, ys[3] = {O, K, In};
          tcase *t = newcase("%s%s %s [%lld,%lld,%lld] from %lld, %s index", sel ? "index_select" : "gather",
                             bwd ? "_bwd" : "", dname(dt), (long long)O, (long long)K, (long long)In, (long long)X,
                             dname(it));
          int ix = nb(t, it, sel ? K : O * K * In, 0, (double)X);
          int a = bwd ? nbout(t, AG_F32, O * X * In, false) : nbout(t, dt, O * K * In, true);
          int b = bwd ? nb(t, dt, O * K * In, -1, 1) : nb(t, dt, O * X * In, -3, 3);
          if (bwd) t->b[a].tol = 1e-8;
          t->c.op = bwd ? AG_K_GATHER_BWD : AG_K_GATHER;
          t->c.sub = i64;
          t->c.i[0] = O;
          t->c.i[1] = K;
          t->c.i[2] = In;
          t->c.i[3] = X;
          opnd(t, 0, a, 3, bwd ? xs : ys);
          opnd(t, 1, b, 3, bwd ? ys : xs);
          opnd(t, 2, ix, 3, ys);
          if (sel) {
            t->c.o[2].strides[0] = 0;
            t->c.o[2].strides[1] = 1;
            t->c.o[2].strides[2] = 0;
          }
          run(t);
        }
  /* topk, largest and smallest, along rows and columns */
  static const int64_t tk[][4] = {{30, 50, 1, 7}, {4, 33, 9, 33}, {2, 2000, 1, 16}, {3, 5, 2, 0}};
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof tk / sizeof tk[0]; s++)
      for (int sm = 0; sm < 2; sm++) {
        ag_dtype dt = FL[di];
        int64_t O = tk[s][0], R = tk[s][1], In = tk[s][2], K = tk[s][3], xs[3] = {O, R, In}, ys[3] = {O, K, In};
        tcase *t = newcase("topk %s %s [%lld,%lld,%lld] k %lld", sm ? "smallest" : "largest", dname(dt),
                           (long long)O, (long long)R, (long long)In, (long long)K);
        int x = nb(t, dt, O * R * In, -3, 3), v = nbout(t, dt, O * K * In, true);
        int ix = nbout(t, AG_I64, O * K * In, true);
        t->c.op = AG_K_TOPK;
        t->c.sub = sm;
        t->c.i[0] = O;
        t->c.i[1] = R;
        t->c.i[2] = In;
        t->c.i[3] = K;
        opnd(t, 0, v, 3, ys);
        opnd(t, 1, x, 3, xs);
        opnd(t, 2, ix, 3, ys);
        run(t);
      }
  /* cumsum: forward and reverse, along rows, columns and a long line */
  static const int64_t cs[][3] = {{300, 77, 1}, {7, 33, 19}, {1, 70000, 1}, {4, 1, 5}};
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof cs / sizeof cs[0]; s++)
      for (int rev = 0; rev < 2; rev++) {
        ag_dtype dt = FL[di];
        int64_t O = cs[s][0], R = cs[s][1], In = cs[s][2], xs[3] = {O, R, In};
        tcase *t = newcase("cumsum%s %s [%lld,%lld,%lld]", rev ? " reverse" : "", dname(dt), (long long)O,
                           (long long)R, (long long)In);
        int x = nb(t, dt, O * R * In, -1, 1), y = nbout(t, dt, O * R * In, false);
        t->c.op = AG_K_CUMSUM;
        t->c.sub = rev;
        t->c.i[0] = O;
        t->c.i[1] = R;
        t->c.i[2] = In;
        opnd(t, 0, y, 3, xs);
        opnd(t, 1, x, 3, xs);
        run(t);
      }
  for (int di = 0; di < 3; di++)
    for (size_t s = 0; s < sizeof lns / sizeof lns[0]; s++) {
      ag_dtype dt = FL[di];
      int64_t R = lns[s][0], C = lns[s][1], sh[2] = {R, C}, sr[1] = {R}, sc[1] = {C};
      tcase *t = newcase("rms_norm_bwd %s [%lld,%lld] w deterministic (twice)", dname(dt), (long long)R, (long long)C);
      int dx = nbout(t, dt, R * C, false), dy = nb(t, dt, R * C, -1, 1), x = nb(t, dt, R * C, -3, 5);
      int rs = nb(t, AG_F32, R, 0.3, 1.0), w = nb(t, dt, C, 0.5, 1.5);
      int dw = nbout(t, AG_F32, C, false);
      t->b[dw].tol = 1e-8;
      t->repeat = true;
      t->c.op = AG_K_RMSNORM_BWD;
      t->c.flags = AG_KF_DETERMINISTIC;
      t->c.i[0] = R;
      t->c.i[1] = C;
      opnd(t, 0, dx, 2, sh);
      opnd(t, 1, dy, 2, sh);
      opnd(t, 2, x, 2, sh);
      opnd(t, 3, rs, 1, sr);
      opnd(t, 4, w, 1, sc);
      t->nm = 1;
      t->mb[0] = dw;
      t->m.t[0].dtype = AG_F32;
      t->m.t[0].numel = C;
      run(t);
    }
  {
    static const int64_t sizes[] = {2200001, 70001, 5};
    tcase *t = newcase("sumsq f32+f16+bf16 2.3M elements deterministic (twice)");
    for (int k = 0; k < 3; k++) {
      int x = nb(t, FL[k], sizes[k], -2, 2);
      t->mb[t->nm] = x;
      t->m.t[t->nm].dtype = FL[k];
      t->m.t[t->nm].numel = sizes[k];
      t->nm++;
    }
    int64_t one[1] = {1};
    int o = nbout(t, AG_F32, 1, false);
    t->b[o].tol = 1e-10;
    t->repeat = true;
    t->c.op = AG_K_SUMSQ;
    t->c.flags = AG_KF_DETERMINISTIC;
    opnd(t, 0, o, 0, one);
    run(t);
  }
}

static void cases_multi(void) {
  static const int64_t sizes[] = {1000, 70001, 5, 16384 * 3};
  const int ns = 4;
  for (int skipstep = 0; skipstep < 2; skipstep++) {
    tcase *t = newcase("adamw 4 tensors, grad scale%s", skipstep ? ", found_inf set (no update)" : "");
    for (int k = 0; k < ns; k++) {
      int p = nbout(t, AG_F32, sizes[k], false), g = nb(t, AG_F32, sizes[k], -1, 1);
      int m = nbout(t, AG_F32, sizes[k], false), v = nbout(t, AG_F32, sizes[k], false);
      for (int64_t i = 0; i < sizes[k]; i++) ((float *)t->b[v].host)[i] = fabsf(((float *)t->b[v].host)[i]);
      int ids[4] = {p, g, m, v};
      for (int j = 0; j < 4; j++) {
        t->mb[t->nm] = ids[j];
        t->m.t[t->nm].dtype = AG_F32;
        t->m.t[t->nm].numel = sizes[k];
        t->nm++;
      }
    }
    int64_t one[1] = {1};
    int sc = nb(t, AG_F32, 1, 0.5, 0.5), fi = nb(t, AG_F32, 1, skipstep, skipstep);
    t->c.op = AG_K_ADAMW;
    double b1 = 0.9, b2 = 0.999;
    t->c.s[0] = 1e-3; t->c.s[1] = b1; t->c.s[2] = b2; t->c.s[3] = 1e-8; t->c.s[4] = 0.01;
    t->c.s[5] = 1 - pow(b1, 3); t->c.s[6] = 1 - pow(b2, 3);
    opnd(t, 0, sc, 0, one);
    opnd(t, 1, fi, 0, one);
    run(t);
  }
  for (int var = 0; var < 3; var++) {
    tcase *t = newcase("sgd %s", var == 0 ? "momentum first step" : var == 1 ? "momentum nesterov" : "no momentum buffer");
    for (int k = 0; k < ns; k++) {
      int p = nbout(t, AG_F32, sizes[k], false), g = nb(t, AG_F32, sizes[k], -1, 1);
      int m = var == 2 ? -1 : nbout(t, AG_F32, sizes[k], false);
      int ids[3] = {p, g, m};
      for (int j = 0; j < 3; j++) {
        t->mb[t->nm] = ids[j];
        t->m.t[t->nm].dtype = AG_F32;
        t->m.t[t->nm].numel = sizes[k];
        t->nm++;
      }
    }
    t->c.op = AG_K_SGD;
    t->c.s[0] = 0.1; t->c.s[1] = var == 2 ? 0 : 0.9; t->c.s[2] = 0.1; t->c.s[3] = 1e-4;
    t->c.s[4] = var == 1; t->c.s[5] = var == 0;
    t->c.n_operands = 2; /* o0, o1 absent */
    run(t);
  }
  for (int bad = 0; bad < 2; bad++) {
    tcase *t = newcase("nonfinite_check f32+f16+bf16 unscale%s", bad ? ", one inf" : "");
    for (int k = 0; k < 3; k++) {
      int x = nbout(t, FL[k], sizes[k + 1 > 2 ? 1 : k + 1], FL[k] != AG_F32);
      t->mb[t->nm] = x;
      t->m.t[t->nm].dtype = FL[k];
      t->m.t[t->nm].numel = t->b[x].n;
      t->nm++;
      if (bad && k == 1) setv(FL[k], t->b[x].host, 3, INFINITY);
    }
    int64_t one[1] = {1};
    int flag = nbout(t, AG_F32, 1, true), inv = nb(t, AG_F32, 1, 0.25, 0.25);
    setv(AG_F32, t->b[flag].host, 0, 0);
    t->c.op = AG_K_NONFINITE_CHECK;
    opnd(t, 0, flag, 0, one);
    opnd(t, 1, inv, 0, one);
    run(t);
  }
  {
    tcase *t = newcase("sumsq f32+f16+bf16");
    for (int k = 0; k < 3; k++) {
      int x = nb(t, FL[k], sizes[k], -2, 2);
      t->mb[t->nm] = x;
      t->m.t[t->nm].dtype = FL[k];
      t->m.t[t->nm].numel = sizes[k];
      t->nm++;
    }
    int64_t one[1] = {1};
    int o = nbout(t, AG_F32, 1, false);
    t->b[o].tol = 1e-10;
    t->c.op = AG_K_SUMSQ;
    opnd(t, 0, o, 0, one);
    run(t);
  }
}

/* Fused attention (AG_K_SDPA, AG_K_SDPA_BWD): grouped-query heads, a
 * broadcast mask, causal, dropout, lengths that are not multiples of the
 * kernels' tiles, heads of up to 64 and (wide) of up to 128, which the GPU
 * kernels build separately; the backward from a given out and log-sum-exp. */
static void cases_sdpa_shape(bool wide) {
  const ag_dtype dts[3] = {AG_F32, AG_F16, AG_BF16};
  const int64_t B = wide ? 1 : 2, H = wide ? 2 : 4, Hkv = wide ? 1 : 2, T = wide ? 33 : 37, S = wide ? 40 : 45;
  const int64_t D = wide ? 128 : 16, Dv = wide ? 96 : 8;
  const int64_t qs[4] = {B, H, T, D}, ks[4] = {B, Hkv, S, D}, vs[4] = {B, Hkv, S, Dv}, os[4] = {B, H, T, Dv};
  const int64_t ls[3] = {B, H, T}, ms[4] = {1, 1, T, S};
  for (int di = 0; di < 3; di++)
    for (int var = 0; var < 3; var++) {
      if (wide && var == 1) continue; /* the plain causal case: the narrow shape has it */
      const ag_dtype dt = dts[di];
      const bool causal = var != 0, mask = var != 1;
      const double p = var == 2 ? 0.2 : 0;
      for (int bwd = 0; bwd < 2; bwd++) {
        tcase *t = newcase("sdpa%s %s B%lld H%lld/%lld T%lld S%lld D%lld/%lld%s%s%s", bwd ? "_bwd" : "", dname(dt),
                           (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)S, (long long)D,
                           (long long)Dv, causal ? " causal" : "", mask ? " mask" : "", p > 0 ? " dropout" : "");
        int q = nb(t, dt, B * H * T * D, -1, 1), k = nb(t, dt, B * Hkv * S * D, -1, 1);
        int v = nb(t, dt, B * Hkv * S * Dv, -1, 1), m = mask ? nb(t, dt, T * S, -1, 0) : -1;
        t->c.op = bwd ? AG_K_SDPA_BWD : AG_K_SDPA;
        t->c.s[0] = 0.25;
        t->c.s[1] = p;
        t->c.i[0] = causal;
        t->c.seed = 77;
        t->c.offset = 5;
        if (!bwd) {
          int o = nbout(t, dt, B * H * T * Dv, false), l = nbout(t, AG_F32, B * H * T, false);
          opnd(t, 0, o, 4, os);
          opnd(t, 5, l, 3, ls);
        } else {
          int go = nb(t, dt, B * H * T * Dv, -1, 1), l = nb(t, AG_F32, B * H * T, 3, 5);
          int out = nb(t, dt, B * H * T * Dv, -0.5, 0.5);
          int dq = nbout(t, dt, B * H * T * D, false), dk = nbout(t, dt, B * Hkv * S * D, false);
          int dv = nbout(t, dt, B * Hkv * S * Dv, false);
          opnd(t, 0, go, 4, os);
          opnd(t, 5, l, 3, ls);
          t->nm = 4;
          t->mb[0] = dq;
          t->mb[1] = dk;
          t->mb[2] = dv;
          t->mb[3] = out;
          t->m.t[0].numel = B * H * T * D;
          t->m.t[1].numel = B * Hkv * S * D;
          t->m.t[2].numel = B * Hkv * S * Dv;
          t->m.t[3].numel = B * H * T * Dv;
          for (int j = 0; j < 4; j++) t->m.t[j].dtype = dt;
        }
        opnd(t, 1, q, 4, qs);
        opnd(t, 2, k, 4, ks);
        opnd(t, 3, v, 4, vs);
        opnd(t, 4, m, 4, ms);
        if (mask) t->c.o[4].strides[0] = t->c.o[4].strides[1] = 0; /* broadcast over batch and heads */
        else t->c.o[4].dtype = dt;
        run(t);
      }
    }
}
static void cases_sdpa(void) {
  cases_sdpa_shape(false);
  cases_sdpa_shape(true);
}

int main(int argc, char **argv) {
  int na = 0;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--device=", 9) == 0) {
      char *end;
      long d = strtol(argv[i] + 9, &end, 10);
      if (*end || end == argv[i] + 9 || d < 0 || d >= AG_MAX_DEVICES) {
        fprintf(stderr, "gpu_check: bad %s\n", argv[i]);
        return 1;
      }
      DEV = (int)d;
    } else if (strncmp(argv[i], "--skip=", 7) == 0) {
      skip = argv[i] + 7;
    } else {
      argv[++na] = argv[i];
    }
  }
  argc = na + 1;
  if (argc < 2) {
    fprintf(stderr, "usage: gpu_check <libanygrad-cuda.so|libanygrad-hip.so|libanygrad-gpuemu.so> [filter] "
                    "[--device=N] [--skip=S1,S2]\n");
    return 1;
  }
  filter = argc > 2 ? argv[2] : NULL;
  void *h = strcmp(argv[1], "cpu") == 0 ? dlopen(NULL, RTLD_NOW) : dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("gpu_check: unavailable: %s\n", dlerror());
    return 2;
  }
  ag_backend_module_get_fn get = (ag_backend_module_get_fn)dlsym(h, AG_BACKEND_MODULE_SYMBOL);
  *(void **)&mod_last_error = dlsym(h, "ag_last_error");
  B = strcmp(argv[1], "cpu") == 0 ? ag__cpu_backend() : get ? get() : NULL;
  char reason[256] = "";
  int n = 0;
  if (!B || B->init(&n, reason, sizeof reason) != AG_OK || n <= DEV) {
    printf("gpu_check: %s unavailable: %s\n", B ? B->name : argv[1], reason);
    return 2;
  }
  ag_device_props p;
  B->device_props(DEV, &p);
  printf("gpu_check: %s:%d %s (%s, %d units, %.1f GiB)%s\n", B->name, DEV, p.name, p.arch, p.compute_units,
         (double)p.total_memory / (1 << 30), getenv("AG_GPU_GEMM") ? " AG_GPU_GEMM set" : "");
  if (B->stream_create(DEV, &S) != AG_OK) {
    printf("gpu_check: stream_create failed: %s\n", mod_last_error ? mod_last_error() : "");
    return 1;
  }
  cases_elementwise();
  /* the families after the op table's cases draw from a fixed point of the
   * generator, so their inputs do not move when the table gains entries */
  rng = 0x2545F4914F6CDD1Dull;
  cases_reduce();
  cases_reduce_nan();
  cases_grid_stride();
  cases_matmul();
  cases_matmul_big();
  cases_rows();
  cases_embedding();
  cases_multi();
  cases_deterministic();
  cases_conv();
  cases_pool();
  cases_sdpa();
  cases_bn();
  B->stream_destroy(S);
  printf("gpu_check: %d passed, %d failed, %d skipped\n", n_pass, n_fail, n_skip);
  return n_fail ? 1 : 0;
}
