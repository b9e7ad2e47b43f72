/* CPU kernel of AG_K_SORT: each line of x [o, r, in] along r is read into
 * (value, position) pairs and sorted by torch's stable order (NaN above
 * every number, equal keys by position), the pairs giving the values and
 * the i64 indices. Lines are independent: split across the host pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"
#include "cpu_tile.h"

typedef struct sort_item {
  double v;
  int64_t i;
} sort_item;

/* Ascending order; descending flips the keys but never the positions. */
static int sort_cmp_key(const sort_item *a, const sort_item *b) {
  bool an = isnan(a->v), bn = isnan(b->v);
  if (an != bn) return an ? 1 : -1;
  if (!an && a->v != b->v) return a->v < b->v ? -1 : 1;
  return 0;
}
static int sort_cmp_asc(const void *x, const void *y) {
  const sort_item *a = x, *b = y;
  int k = sort_cmp_key(a, b);
  return k ? k : (a->i > b->i) - (a->i < b->i);
}
static int sort_cmp_desc(const void *x, const void *y) {
  const sort_item *a = x, *b = y;
  int k = sort_cmp_key(b, a);
  return k ? k : (a->i > b->i) - (a->i < b->i);
}

typedef struct sort_ctx {
  const ag_k_sort *a;
  int64_t R, In;
  atomic_bool oom;
} sort_ctx;

static void sort_lines(void *p, int64_t lo, int64_t hi) {
  sort_ctx *s = p;
  const ag_k_sort *a = s->a;
  const int64_t R = s->R, In = s->In;
  const size_t ex = ag__cpu_dtsize(a->x->dtype), ev = ag__cpu_dtsize(a->values->dtype);
  double *v = malloc((size_t)R * (sizeof(double) + sizeof(sort_item)));
  if (!v) {
    atomic_store(&s->oom, true);
    return;
  }
  sort_item *it = (sort_item *)(v + R);
  int64_t *ix = (int64_t *)ag__cpu_ptr(a->indices);
  for (int64_t ln = lo; ln < hi; ln++) {
    int64_t o = ln / In, i = ln % In, base = o * R * In + i;
    load_d(a->x->dtype, ag__cpu_ptr(a->x) + (size_t)base * ex, In, R, v);
    for (int64_t j = 0; j < R; j++) it[j] = (sort_item){v[j], j};
    qsort(it, (size_t)R, sizeof *it, a->variant == AG_KV_SORT_DESCENDING ? sort_cmp_desc : sort_cmp_asc);
    for (int64_t j = 0; j < R; j++) {
      v[j] = it[j].v;
      ix[base + j * In] = it[j].i;
    }
    store_d(a->values->dtype, ag__cpu_ptr(a->values) + (size_t)base * ev, In, R, v);
  }
  free(v);
}

ag_status cpu_k_sort(ag_kernel_error *err, const ag_k_sort *a) {
  (void)err;
  sort_ctx s = {a, a->r, a->in, false};
  const int64_t lines = a->o * a->in;
  if (lines == 0 || a->r == 0) return AG_OK;
  ag__cpu_par_for(lines, lines * a->r * 8, sort_lines, &s);
  if (atomic_load(&s.oom))
    return ag_error_set(AG_ERR_OOM, "%s: no memory for a line of %lld", a->call->name ? a->call->name : "sort",
                        (long long)a->r);
  return AG_OK;
}
