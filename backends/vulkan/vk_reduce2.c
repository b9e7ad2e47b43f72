/* Vulkan launches of the typed kernel ops of reduce2.comp (logsumexp,
 * vector norms, one_hot): each reads its decoded arguments (kargs.h) and
 * fills the argument block by the names the shader gives its fields. */
#include "vk_internal.h"

/* The device address of an operand (its segment's address + offset). */
static uint64_t r2_addr(const ag_koperand *o) { return o->base ? ((const vkb_mem *)o->base)->addr + o->offset : 0; }

/* An invocation walks `trips` steps in order: refused past the driver's
 * loop limit (lavapipe stops a loop after 65535 back-edges). */
static ag_status r2_loop_ok(ag_bstream *s, const char *name, int64_t trips) {
  if (trips <= s->d->loop_limit) return AG_OK;
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "%s: a line of %lld sequential steps exceeds the loop limit of the Vulkan driver %s on "
                      "vulkan:%d (%lld iterations per invocation)",
                      name ? name : "vulkan", (long long)trips, s->d->driver, s->dev, (long long)s->d->loop_limit);
}

/* A work-group per line (the _ROWS shaders): lines over the grid's x and
 * y, each invocation walking r / VKB_WG steps per pass (`passes`). */
static ag_status r2_rows(ag_bstream *s, const char *name, vkb_shader sh, const vkb_args *a, int64_t lines, int64_t r,
                         int passes) {
  ag_status st = r2_loop_ok(s, name, passes * ((r + VKB_WG - 1) / VKB_WG) + 64);
  if (st != AG_OK) return st;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = (uint64_t)lines < maxx ? (uint64_t)lines : maxx, gy = ((uint64_t)lines + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld lines exceed the device's dispatch limits", (long long)lines);
  return vkb_dispatch(s, sh, 0, a, (uint32_t)gx, (uint32_t)gy, 1);
}

/* Lines go to a work-group each when they are contiguous or long (the
 * invocation-per-line shaders would walk them alone). */
static bool r2_use_rows(int64_t r, int64_t inner) { return r > 0 && (inner == 1 || r > 4096); }

/* The [outer, r, inner] lines of a reduction: y, x, sizes, dtype. */
static vkb_args r2_line_args(const ag_koperand *y, const ag_koperand *x, int64_t outer, int64_t r, int64_t inner,
                             ag_dtype dt) {
  vkb_args a = {0};
  a.p[0] = r2_addr(y);  /* Y_ADDR */
  a.p[1] = r2_addr(x);  /* X_ADDR */
  a.n[0] = outer;       /* OUTER */
  a.n[1] = r;           /* RLEN */
  a.n[2] = inner;       /* INNER */
  a.k[0] = (int32_t)dt; /* DT */
  return a;
}

ag_status vk_k_logsumexp(ag_bstream *s, const ag_k_logsumexp *a) {
  if (!a->outer || !a->inner) return AG_OK;
  if (a->call->flags & AG_KF_PORTABLE) return vkb_portable_lse(s, a);
  if (a->r > (a->dtype == AG_F64 ? 4096 : 2 * VKB_TREE_CHUNK)) { /* long lines: tree passes (vk_tree.c) */
    uint64_t scratch;
    ag_status st = vkb_scratch(s, vkb_tree_lse_scratch(a->outer * a->inner, a->r), &scratch);
    if (st != AG_OK) return st;
    return vkb_tree_lse(s, scratch, r2_addr(a->out), r2_addr(a->x), a->dtype, a->outer, a->r, a->inner);
  }
  vkb_args v = r2_line_args(a->out, a->x, a->outer, a->r, a->inner, a->dtype);
  if (r2_use_rows(a->r, a->inner))
    return r2_rows(s, a->call->name, a->dtype == AG_F64 ? VKS_LOGSUMEXP_ROWS_D : VKS_LOGSUMEXP_ROWS, &v, a->outer * a->inner, a->r, 2);
  ag_status st = r2_loop_ok(s, a->call->name, 2 * a->r);
  if (st != AG_OK) return st;
  return vkb_dispatch1(s, a->dtype == AG_F64 ? VKS_LOGSUMEXP_D : VKS_LOGSUMEXP, 0, &v, a->outer * a->inner);
}

ag_status vk_k_norm(ag_bstream *s, const ag_k_norm *a) {
  if (!a->outer || !a->inner) return AG_OK;
  if (a->call->flags & AG_KF_PORTABLE) return vkb_portable_norm(s, a);
  vkb_args v = r2_line_args(a->out, a->x, a->outer, a->r, a->inner, a->dtype);
  v.k[6] = a->variant; /* VARIANT */
  if (r2_use_rows(a->r, a->inner))
    return r2_rows(s, a->call->name, a->dtype == AG_F64 ? VKS_NORM_ROWS_D : VKS_NORM_ROWS, &v, a->outer * a->inner, a->r, 2);
  ag_status st = r2_loop_ok(s, a->call->name, 2 * a->r);
  if (st != AG_OK) return st;
  return vkb_dispatch1(s, a->dtype == AG_F64 ? VKS_NORM_D : VKS_NORM, 0, &v, a->outer * a->inner);
}

ag_status vk_k_one_hot(ag_bstream *s, const ag_k_one_hot *a) {
  if (a->out->dtype != AG_I64)
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: one_hot writes i64, not %s", ag_dtype_name(a->out->dtype));
  if (!a->n || !a->classes) return AG_OK;
  vkb_args v = {0};
  v.p[0] = r2_addr(a->out);        /* Y_ADDR */
  v.p[1] = r2_addr(a->index);      /* INDEX_ADDR */
  v.p[7] = s->err.addr;            /* ERR_ADDR */
  v.n[0] = a->n;                   /* N_ROWS */
  v.n[1] = a->classes;             /* CLASSES */
  v.k[3] = (int32_t)a->index->dtype; /* INDEX_DT */
  s->err_armed = true;
  return vkb_dispatch1(s, VKS_ONE_HOT, 0, &v, a->n * a->classes);
}
