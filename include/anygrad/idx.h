/* Reading the idx format (the MNIST family of image data sets): a big-endian
 * header (magic 0x000008NN for unsigned bytes, NN dims, then NN u32 sizes)
 * followed by the elements, usually gzip-compressed. Files are inflated with
 * zlib; plain (uncompressed) files are read as they are. See docs/vision.md. */
#ifndef ANYGRAD_IDX_H
#define ANYGRAD_IDX_H

#include <stdint.h>

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AG_IDX_MAX_DIMS 4

/* An idx array of unsigned bytes. */
typedef struct ag_idx {
  int ndim;                      /* 1..AG_IDX_MAX_DIMS */
  int64_t dims[AG_IDX_MAX_DIMS]; /* row-major sizes */
  int64_t numel;                 /* product of dims */
  uint8_t *data;                 /* numel bytes, owned (ag_idx_free) */
} ag_idx;

/* Read the idx file at path (gzip or plain) into *out, which the caller owns
 * afterwards (ag_idx_free). Only the unsigned-byte element type (0x08) is
 * read. Errors (nothing allocated, *out zeroed): AG_ERR_INVALID (NULL
 * argument), AG_ERR_IO (cannot open), AG_ERR_CORRUPT (wrong magic, bad gzip
 * stream, no dims or more than AG_IDX_MAX_DIMS, a zero size, file shorter
 * than its header says - "truncated" - or longer), AG_ERR_UNSUPPORTED (an
 * element type other than unsigned byte), AG_ERR_OOM, AG_ERR_UNAVAILABLE
 * (anygrad built without zlib). */
AG_API ag_status ag_idx_read(const char *path, ag_idx *out);

/* Free what ag_idx_read returned and zero *idx. NULL and zeroed are ignored. */
AG_API void ag_idx_free(ag_idx *idx);

/* A labelled image set: count images of height x width bytes and one label
 * per image. */
typedef struct ag_image_set {
  int64_t count, height, width;
  uint8_t *pixels; /* count*height*width bytes, owned */
  uint8_t *labels; /* count bytes, owned */
  int num_classes; /* 1 + the largest label */
} ag_image_set;

/* Read an image file ([N, H, W]) and its label file ([N]) into *out, owned by
 * the caller (ag_image_set_free). Errors as ag_idx_read, plus AG_ERR_CORRUPT
 * when the images are not 3-D, the labels not 1-D, or the counts differ
 * ("... 60000 images but 59999 labels"); each message names the file. */
AG_API ag_status ag_image_set_load(const char *images_path, const char *labels_path,
                                   ag_image_set *out);

/* Free what ag_image_set_load returned and zero *s. NULL is ignored. */
AG_API void ag_image_set_free(ag_image_set *s);

#ifdef __cplusplus
}
#endif
#endif
