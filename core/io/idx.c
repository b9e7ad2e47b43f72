/* idx reader (include/anygrad/idx.h): plain files, or one gzip member
 * inflated with zlib's inflate (not gz*: that accepts a stream cut before
 * its trailer). The gzip trailer's CRC-32 and length are checked, and
 * nothing may follow it. Every size from the header is checked before
 * anything is allocated; only regular files are opened. */
#include "anygrad/idx.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anygrad/checks.h"

#ifdef AG_HAVE_ZLIB
#include <zlib.h>
#endif

/* Refuse headers that would allocate more than this (the largest real idx
 * file, MNIST-8M, is under 7 GB; a corrupt header usually asks for far more). */
#define IDX_MAX_BYTES ((int64_t)1 << 34)

#ifdef AG_HAVE_ZLIB
#define IN_CHUNK 65536

/* A byte source: the file as it is, or its gzip member inflated. */
typedef struct src {
  int fd;
  const char *path;
  bool gz, z_live, z_end, eof;
  z_stream z;
  unsigned char in[IN_CHUNK];
  size_t in_pos, in_len; /* plain files: buffered bytes not yet handed out */
} src;

/* Refill the input buffer; false at the end of the file (or an error, set). */
static int refill(src *s) {
  for (;;) {
    ssize_t r = read(s->fd, s->in, sizeof s->in);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      ag_error_set(AG_ERR_IO, "ag_idx_read: %s: read error: %s", s->path, strerror(errno));
      return -1;
    }
    s->in_pos = 0;
    s->in_len = (size_t)r;
    if (r == 0) s->eof = true;
    return r > 0;
  }
}

/* Up to n bytes; the count (short only at the end of the data), or -1 with
 * the error set. */
static int64_t src_read(src *s, void *dst, int64_t n) {
  unsigned char *out = dst;
  int64_t got = 0;
  while (got < n) {
    if (!s->gz) {
      if (s->in_pos == s->in_len) {
        int r = refill(s);
        if (r < 0) return -1;
        if (r == 0) break;
      }
      size_t k = s->in_len - s->in_pos;
      if ((int64_t)k > n - got) k = (size_t)(n - got);
      memcpy(out + got, s->in + s->in_pos, k);
      s->in_pos += k;
      got += (int64_t)k;
      continue;
    }
    if (s->z_end) break;
    if (s->z.avail_in == 0) {
      int r = refill(s);
      if (r < 0) return -1;
      if (r == 0) {
        ag_error_set(AG_ERR_CORRUPT,
                     "ag_idx_read: %s: truncated: the gzip stream ends before its end-of-stream trailer", s->path);
        return -1;
      }
      s->z.next_in = s->in;
      s->z.avail_in = (uInt)s->in_len;
    }
    int64_t want = n - got;
    if (want > (1 << 30)) want = 1 << 30;
    s->z.next_out = out + got;
    s->z.avail_out = (uInt)want;
    int zr = inflate(&s->z, Z_NO_FLUSH);
    got += want - (int64_t)s->z.avail_out;
    if (zr == Z_STREAM_END) {
      s->z_end = true; /* inflate has checked the trailer's CRC-32 and length */
    } else if (zr == Z_DATA_ERROR) {
      ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: damaged gzip stream (%s)", s->path,
                   s->z.msg ? s->z.msg : "data error");
      return -1;
    } else if (zr == Z_MEM_ERROR) {
      ag_error_set(AG_ERR_OOM, "ag_idx_read: %s: out of host memory inflating", s->path);
      return -1;
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
      ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: damaged gzip stream (zlib error %d)", s->path, zr);
      return -1;
    }
  }
  return got;
}

/* After the data: for gzip, the stream must have ended (trailer checked)
 * with nothing after it; for plain files, nothing after the data. */
static ag_status src_finish(src *s, int64_t numel) {
  if (s->gz && !s->z_end) {
    /* The data is complete; what remains must be exactly the end of the
     * stream (inflate then checks the trailer). */
    unsigned char extra;
    int64_t got = src_read(s, &extra, 1);
    if (got < 0) return ag_last_status();
    if (got > 0)
      return ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: bytes after the %lld the header describes", s->path,
                          (long long)numel);
  }
  bool trailing = false;
  if (s->gz) {
    trailing = s->z.avail_in > 0;
    if (!trailing) {
      int r = refill(s);
      if (r < 0) return ag_last_status();
      trailing = r > 0;
    }
    if (trailing)
      return ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: trailing bytes after the gzip stream", s->path);
    return AG_OK;
  }
  unsigned char extra;
  int64_t got = src_read(s, &extra, 1);
  if (got < 0) return ag_last_status();
  if (got > 0)
    return ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: bytes after the %lld the header describes", s->path,
                        (long long)numel);
  return AG_OK;
}

/* Exactly n bytes or an error naming `what`. */
static ag_status read_exact(src *s, void *dst, int64_t n, const char *what) {
  int64_t got = src_read(s, dst, n);
  if (got < 0) return ag_last_status();
  if (got < n)
    return ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated: %s (%lld of %lld bytes)", s->path, what,
                        (long long)got, (long long)n);
  return AG_OK;
}
#endif

ag_status ag_idx_read(const char *path, ag_idx *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!path || !out) return ag_error_set(AG_ERR_INVALID, "ag_idx_read: path and out must not be NULL");
#ifndef AG_HAVE_ZLIB
  return ag_error_set(AG_ERR_UNAVAILABLE, "ag_idx_read: %s: anygrad was built without zlib", path);
#else
  src *s = calloc(1, sizeof *s);
  if (!s) return ag_error_set(AG_ERR_OOM, "ag_idx_read: out of host memory");
  s->path = path;
  uint8_t *data = NULL;
  uint64_t file_size = 0;
  ag_status st = ag_file_open_read(path, "idx file", 0, &s->fd, &file_size);
  if (st != AG_OK) {
    char msg[512]; /* copied first: the message is formatted into the same buffer */
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    ag_error_set(st, "ag_idx_read: %s", msg);
    free(s);
    return st;
  }
  /* gzip or plain: the first two bytes say. */
  unsigned char magic2[2];
  ssize_t pr;
  do pr = pread(s->fd, magic2, 2, 0);
  while (pr < 0 && errno == EINTR);
  if (pr == 2 && magic2[0] == 0x1f && magic2[1] == 0x8b) {
    s->gz = true;
    if (inflateInit2(&s->z, 15 + 16) != Z_OK) {
      st = ag_error_set(AG_ERR_OOM, "ag_idx_read: %s: cannot start zlib", path);
      goto done;
    }
    s->z_live = true;
  }
  uint8_t head[4];
  st = read_exact(s, head, 4, "the 4 header bytes");
  if (st != AG_OK) goto done;
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
  int64_t got = src_read(s, dimb, 4 * nd);
  if (got < 0) {
    st = ag_last_status();
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
  /* What the file can hold at most, so a header cannot make the reader
   * allocate more than the file could fill: its own bytes, or for gzip
   * deflate's largest expansion (1032:1). */
  uint64_t room = s->gz ? file_size * 1032 + 1024 : file_size - (uint64_t)(4 + 4 * nd);
  if ((uint64_t)numel > room) {
    st = ag_error_set(AG_ERR_CORRUPT,
                      "ag_idx_read: %s: truncated: header says %lld data bytes, file has %s%llu", path,
                      (long long)numel, s->gz ? "room for at most " : "", (unsigned long long)room);
    goto done;
  }
  data = malloc((size_t)numel);
  if (!data) {
    st = ag_error_set(AG_ERR_OOM, "ag_idx_read: %s: cannot allocate %lld bytes", path, (long long)numel);
    goto done;
  }
  got = src_read(s, data, numel);
  if (got < 0) {
    st = ag_last_status();
    goto done;
  }
  if (got < numel) {
    st = ag_error_set(AG_ERR_CORRUPT, "ag_idx_read: %s: truncated: header says %lld data bytes, file has %lld",
                      path, (long long)numel, (long long)got);
    goto done;
  }
  st = src_finish(s, numel);
  if (st != AG_OK) goto done;
  out->ndim = nd;
  out->numel = numel;
  out->data = data;
  data = NULL;
done:
  if (s->z_live) inflateEnd(&s->z);
  close(s->fd);
  free(s);
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
