/* idx reader (include/anygrad/idx.h): zlib's gz* interface inflates gzip
 * files and passes plain files through, so one path reads both. Every size
 * from the header is checked before anything is allocated. */
#include "anygrad/idx.h"

#include <stdlib.h>
#include <string.h>

#ifdef AG_HAVE_ZLIB
#include <zlib.h>
#endif

/* Refuse headers that would allocate more than this (the largest real idx
 * file, MNIST-8M, is under 7 GB; a corrupt header usually asks for far more). */
#define IDX_MAX_BYTES ((int64_t)1 << 34)

#ifdef AG_HAVE_ZLIB
/* Read up to n bytes; returns the count read, or -1 with an error set for a
 * damaged gzip stream. A short count is a truncated file. */
static int64_t gz_read_all(gzFile f, const char *path, void *dst, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    int64_t want = n - got;
    if (want > (1 << 30)) want = 1 << 30;
    int r = gzread(f, (char *)dst + got, (unsigned)want);
    if (r > 0) {
      got += r;
      continue;
    }
    /* zlib reports a gzip stream cut short as Z_BUF_ERROR, after handing
     * out what it could inflate; a plain file's end is just r == 0. */
    int zerr = Z_OK;
    const char *msg = gzerror(f, &zerr);
    if (zerr == Z_BUF_ERROR) {
      ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated: the gzip stream ends early", path);
      return -1;
    }
    if (r < 0 || zerr != Z_OK) {
      ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: damaged gzip stream (%s)", path, msg);
      return -1;
    }
    break;
  }
  return got;
}
#endif

ag_status ag_idx_read(const char *path, ag_idx *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!path || !out) return ag_error_set(AG_ERR_INVALID, "ag_idx_read: path and out must not be NULL");
#ifndef AG_HAVE_ZLIB
  return ag_error_set(AG_ERR_UNAVAILABLE, "ag_idx_read: %s: anygrad was built without zlib", path);
#else
  gzFile f = gzopen(path, "rb");
  if (!f) return ag_error_set(AG_ERR_IO, "ag_idx_read: cannot open %s", path);
  ag_status st = AG_OK;
  uint8_t *data = NULL;
  uint8_t head[4];
  int64_t got = gz_read_all(f, path, head, 4);
  if (got < 0) {
    st = AG_ERR_CORRUPT;
    goto done;
  }
  if (got < 4) {
    st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated: %lld of 4 header bytes", path,
                      (long long)got);
    goto done;
  }
  uint32_t magic = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
  if (head[0] != 0 || head[1] != 0) {
    st = ag_error_set(AG_ERR_CORRUPT,
                      "ag_idx_read: %s: wrong magic 0x%08x (an idx file starts 0x0000TTNN)", path,
                      (unsigned)magic);
    goto done;
  }
  if (head[2] != 0x08) {
    st = ag_error_set(AG_ERR_UNSUPPORTED,
                      "ag_idx_read: %s: element type 0x%02x not supported (only 0x08, unsigned byte)",
                      path, head[2]);
    goto done;
  }
  int nd = head[3];
  if (nd < 1 || nd > AG_IDX_MAX_DIMS) {
    st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: %d dims (expected 1..%d)", path, nd,
                      AG_IDX_MAX_DIMS);
    goto done;
  }
  uint8_t dimb[4 * AG_IDX_MAX_DIMS];
  got = gz_read_all(f, path, dimb, 4 * nd);
  if (got < 0) {
    st = AG_ERR_CORRUPT;
    goto done;
  }
  if (got < 4 * nd) {
    st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated in the header (%d dims)", path, nd);
    goto done;
  }
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) {
    const uint8_t *b = dimb + 4 * d;
    int64_t v = (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
    if (v == 0) {
      st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: dim %d has size 0", path, d);
      goto done;
    }
    if (numel > IDX_MAX_BYTES / v) {
      st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: header sizes exceed %lld bytes", path,
                        (long long)IDX_MAX_BYTES);
      goto done;
    }
    numel *= v;
    out->dims[d] = v;
  }
  data = malloc((size_t)numel);
  if (!data) {
    st = ag_error_set(AG_ERR_OOM, "ag_idx_read: %s: cannot allocate %lld bytes", path, (long long)numel);
    goto done;
  }
  got = gz_read_all(f, path, data, numel);
  if (got < 0) {
    st = AG_ERR_CORRUPT;
    goto done;
  }
  if (got < numel) {
    st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated: header says %lld data bytes, file has %lld",
                      path, (long long)numel, (long long)got);
    goto done;
  }
  uint8_t extra;
  got = gz_read_all(f, path, &extra, 1);
  if (got != 0) {
    if (got > 0)
      st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: bytes after the %lld the header describes", path,
                        (long long)numel);
    else
      st = AG_ERR_CORRUPT;
    goto done;
  }
  out->ndim = nd;
  out->numel = numel;
  out->data = data;
  data = NULL;
done:
  gzclose(f);
  free(data);
  if (st != AG_OK) memset(out, 0, sizeof *out);
  return st;
#endif
}

void ag_idx_free(ag_idx *idx) {
  if (!idx) return;
  free(idx->data);
  memset(idx, 0, sizeof *idx);
}

ag_status ag_image_set_load(const char *images_path, const char *labels_path, ag_image_set *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!images_path || !labels_path || !out)
    return ag_error_set(AG_ERR_INVALID, "ag_image_set_load: paths and out must not be NULL");
  ag_idx im, lb;
  ag_status st = ag_idx_read(images_path, &im);
  if (st != AG_OK) return st;
  st = ag_idx_read(labels_path, &lb);
  if (st != AG_OK) {
    ag_idx_free(&im);
    return st;
  }
  if (im.ndim != 3)
    st = ag_error_set(AG_ERR_CORRUPT, "ag_image_set_load: %s: images must be 3-D [N, H, W], file has %d dims",
                      images_path, im.ndim);
  else if (lb.ndim != 1)
    st = ag_error_set(AG_ERR_CORRUPT, "ag_image_set_load: %s: labels must be 1-D [N], file has %d dims",
                      labels_path, lb.ndim);
  else if (im.dims[0] != lb.dims[0])
    st = ag_error_set(AG_ERR_CORRUPT, "ag_image_set_load: %s has %lld images but %s has %lld labels",
                      images_path, (long long)im.dims[0], labels_path, (long long)lb.dims[0]);
  if (st != AG_OK) {
    ag_idx_free(&im);
    ag_idx_free(&lb);
    return st;
  }
  int maxl = 0;
  for (int64_t i = 0; i < lb.numel; i++)
    if (lb.data[i] > maxl) maxl = lb.data[i];
  out->count = im.dims[0];
  out->height = im.dims[1];
  out->width = im.dims[2];
  out->pixels = im.data;
  out->labels = lb.data;
  out->num_classes = maxl + 1;
  return AG_OK;
}

void ag_image_set_free(ag_image_set *s) {
  if (!s) return;
  free(s->pixels);
  free(s->labels);
  memset(s, 0, sizeof *s);
}
