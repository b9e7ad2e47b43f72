/* CPU kernel of AG_K_SCATTER_ADD: out [o, xlen, in] += src [o, k, in] at the
 * index along xlen. Each (o, i) line of out is loaded into the compute type
 * (f32; f64 for f64), the contributions are added in order of k and the
 * line is stored once: each element sums its own contributions in the
 * order the GPU kernels use, so the results are the same bits. */
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_tile.h"

/* Index (o, k, i) of the 3-d index operand, strides in elements. */
static int64_t sidx(const ag_koperand *ix, int64_t o, int64_t k, int64_t i) {
  return idx_at(ix, o * ix->strides[0] + k * ix->strides[1] + i * ix->strides[2]);
}

ag_status cpu_k_scatter_add(ag_kernel_error *err, const ag_k_scatter_add *a) {
  const int64_t O = a->o, K = a->k, In = a->in, X = a->xlen;
  const ag_dtype dt = a->out->dtype;
  const size_t es = ag__cpu_dtsize(dt);
  const bool wide = dt == AG_F64;
  if (O * In == 0 || X == 0) return AG_OK;
  void *line = malloc((size_t)(X + 1) * (wide ? sizeof(double) : sizeof(float)));
  if (!line)
    return ag_error_set(AG_ERR_OOM, "%s: no memory for a line of %lld", a->call->name ? a->call->name : "scatter_add",
                        (long long)X);
  double *ld = line;
  float *lf = line;
  char *out = ag__cpu_ptr(a->out);
  const char *src = ag__cpu_ptr(a->src);
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < In; i++) {
      char *col = out + (size_t)(o * X * In + i) * es;
      if (wide) load_d(dt, col, In, X, ld);
      else load_f(dt, col, In, X, lf);
      for (int64_t k = 0; k < K; k++) {
        int64_t j = sidx(a->index, o, k, i);
        if (j < 0 || j >= X) {
          kerr(err, AG_K_SCATTER_ADD, j, X);
          continue;
        }
        const char *s = src + (size_t)((o * K + k) * In + i) * es;
        if (wide) {
          double v;
          load_d(dt, s, 1, 1, &v);
          ld[j] += v;
        } else {
          float v;
          load_f(dt, s, 1, 1, &v);
          lf[j] += v;
        }
      }
      if (wide) store_d(dt, col, In, X, ld);
      else store_f(dt, col, In, X, lf);
    }
  free(line);
  return AG_OK;
}
