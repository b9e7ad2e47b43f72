/* The asynchronous host->device copy (anygrad/loader.h): a pinned source is
 * copied as it is, a pageable one is staged through a block of the pinned
 * pool (core/memory/pinned.c) so the copy stays asynchronous. */
#include <string.h>

#include "anygrad/loader.h"
#include "memory/block.h"
#include "memory/pinned.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"

ag_status ag_copy_from_host_async(ag_tensor *dst, const void *src, size_t bytes, ag_stream *s) {
  if (!dst || !src)
    return ag_error_set(AG_ERR_INVALID, "ag_copy_from_host_async: NULL %s", dst ? "src" : "dst");
  ag_devstate *ds = ag__ds(dst);
  size_t need = (size_t)dst->numel * ag_dtype_size(dst->dtype);
  if (bytes != need)
    return ag_error_set(AG_ERR_INVALID, "ag_copy_from_host_async: %zu bytes for a tensor of %zu", bytes, need);
  if (!ag_tensor_is_contiguous(dst))
    return ag_error_set(AG_ERR_INVALID, "ag_copy_from_host_async: destination is not contiguous");
  if (!s) s = ag__current_stream(ds);
  if (s->ds != ds)
    return ag_error_set(AG_ERR_DEVICE, "ag_copy_from_host_async: tensor on %s, stream on %s", ds->label,
                        s->ds->label);
  ag_status ist = ag__inplace_check(dst, "ag_copy_from_host_async");
  if (ist != AG_OK) return ist;
  if (bytes == 0) return AG_OK;
  size_t off = dst->st->offset + (size_t)dst->offset * ag_dtype_size(dst->dtype);
  ag__block_record_stream(dst->st->block, s);
  ag__version_bump(dst);
  if (ag__pinned_contains(src, bytes)) {
    ag_status st = ds->be->copy_h2d(s->bs, dst->st->base, off, src, bytes, true);
    return st == AG_OK ? ag_pinned_record_stream((void *)src, s) : st;
  }
  /* Pageable: stage through a pinned block so the copy stays asynchronous
   * and the caller may reuse src at once (one host memcpy). */
  void *stage;
  ag_status st = ag_pinned_alloc(ds->dev, bytes, &stage);
  if (st != AG_OK) return st;
  memcpy(stage, src, bytes);
  st = ds->be->copy_h2d(s->bs, dst->st->base, off, stage, bytes, true);
  if (st == AG_OK) st = ag_pinned_record_stream(stage, s);
  if (st != AG_OK) ag__sync_stream(s, "ag_copy_from_host_async (error path)");
  ag_pinned_free(stage);
  ag__pinned_staged_copy(ds->dev);
  return st;
}
