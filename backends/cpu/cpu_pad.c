/* CPU kernels of AG_K_PAD and AG_K_PAD_BWD over x [b, h, w] and the padded
 * [b, ho, wo] (top, left before; bottom, right from the shapes). Reflect
 * mirrors without repeating the edge (pad < size, checked by the core).
 * The backward sums, for each dx element, the dy elements that read it:
 * rows then columns in ascending order, in f32 (f64 for f64), the order of
 * the GPU kernels, so results are the same bits. */
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_tile.h"

/* The source of padded position p (before pads in front, n the size). */
static int64_t pad_src(int64_t p, int64_t before, int64_t n, bool reflect) {
  int64_t r = p - before;
  if (!reflect) return r >= 0 && r < n ? r : -1;
  if (r < 0) r = -r;
  if (r >= n) r = 2 * (n - 1) - r;
  return r;
}

/* The padded positions that read source i, ascending (at most 3). */
static int pad_pre(int64_t i, int64_t before, int64_t n, int64_t no, bool reflect, int64_t *out) {
  int k = 0;
  if (reflect && i >= 1 && i <= before) out[k++] = before - i;
  out[k++] = before + i;
  if (reflect && i <= n - 2 && before + 2 * (n - 1) - i < no) out[k++] = before + 2 * (n - 1) - i;
  return k;
}

ag_status cpu_k_pad(ag_kernel_error *err, const ag_k_pad *a) {
  (void)err;
  const ag_dtype dt = a->out->dtype;
  const int64_t B = a->x->shape[0], H = a->x->shape[1], W = a->x->shape[2];
  const int64_t Ho = a->out->shape[1], Wo = a->out->shape[2];
  const bool refl = a->variant == AG_KV_PAD_REFLECT;
  const size_t es = ag__cpu_dtsize(dt);
  double *row = malloc((size_t)(W + Wo + 1) * sizeof(double));
  if (!row) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "pad");
  double *orow = row + W;
  for (int64_t b = 0; b < B; b++)
    for (int64_t y = 0; y < Ho; y++) {
      int64_t sy = pad_src(y, a->top, H, refl);
      if (sy >= 0) load_d(dt, ag__cpu_ptr(a->x) + (size_t)((b * H + sy) * W) * es, 1, W, row);
      for (int64_t x = 0; x < Wo; x++) {
        int64_t sx = pad_src(x, a->left, W, refl);
        orow[x] = sy >= 0 && sx >= 0 ? row[sx] : a->value;
      }
      store_d(dt, ag__cpu_ptr(a->out) + (size_t)((b * Ho + y) * Wo) * es, 1, Wo, orow);
    }
  free(row);
  return AG_OK;
}

ag_status cpu_k_pad_bwd(ag_kernel_error *err, const ag_k_pad_bwd *a) {
  (void)err;
  const ag_dtype dt = a->dx->dtype;
  const int64_t B = a->dx->shape[0], H = a->dx->shape[1], W = a->dx->shape[2];
  const int64_t Ho = a->dy->shape[1], Wo = a->dy->shape[2];
  const bool refl = a->variant == AG_KV_PAD_REFLECT, wide = dt == AG_F64;
  const size_t es = ag__cpu_dtsize(dt);
  double *rows = malloc((size_t)(3 * Wo + W + 1) * sizeof(double));
  if (!rows) return ag_error_set(AG_ERR_OOM, "%s: no memory for a row", a->call->name ? a->call->name : "pad");
  double *orow = rows + 3 * Wo;
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < H; i++) {
      int64_t ys[3], xs[3];
      int ny = pad_pre(i, a->top, H, Ho, refl, ys);
      for (int q = 0; q < ny; q++) load_d(dt, ag__cpu_ptr(a->dy) + (size_t)((b * Ho + ys[q]) * Wo) * es, 1, Wo, rows + q * Wo);
      for (int64_t j = 0; j < W; j++) {
        int nx = pad_pre(j, a->left, W, Wo, refl, xs);
        double accd = 0;
        float accf = 0;
        for (int q = 0; q < ny; q++)
          for (int r = 0; r < nx; r++) {
            double v = rows[q * Wo + xs[r]];
            if (wide) accd += v;
            else accf += (float)v;
          }
        orow[j] = wide ? accd : (double)accf;
      }
      store_d(dt, ag__cpu_ptr(a->dx) + (size_t)((b * H + i) * W) * es, 1, W, orow);
    }
  free(rows);
  return AG_OK;
}
