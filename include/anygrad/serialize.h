/* Checkpoints in the safetensors format: an 8-byte little-endian header
 * length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the raw little-endian data. Files are readable by the Python
 * safetensors / PyTorch ecosystem. Saving is atomic (temp file, fsync,
 * rename); loading validates everything before any tensor is created. */
#ifndef ANYGRAD_SERIALIZE_H
#define ANYGRAD_SERIALIZE_H

#include "anygrad/nn.h"
#include "anygrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write the tensors of l (names as keys) and optional string metadata
 * (n_meta key/value pairs, may be 0) to path. Reads tensors to the host (a
 * host sync). The previous file at path survives any failure: data goes to
 * a new "<path>.tmp.<pid>.<random>" (created with O_EXCL|O_NOFOLLOW), is
 * fsync'ed, then renamed over path, and the directory is fsync'ed. Temp
 * files of earlier saves of path whose process is no longer alive (killed
 * mid-save; pids as this host's PID namespace sees them) are removed first.
 * An existing path that is not a regular file (device node, FIFO,
 * directory) is refused, never replaced. Errors: AG_ERR_INVALID (NULL,
 * duplicate or empty names, a name or value with a control character),
 * AG_ERR_IO (with errno text). */
AG_API ag_status ag_safetensors_save(const char *path, const ag_param_list *l, int n_meta,
                                     const char *const *meta_keys, const char *const *meta_values);

typedef struct ag_safetensors ag_safetensors;

/* Open and validate a file: header length within the file, JSON syntax,
 * dtypes of the format (F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL
 * F8_E4M3 F8_E5M2; a tensor anygrad cannot hold does not fail the file),
 * shapes, byte ranges equal to numel*dtype size, in bounds, non-overlapping
 * and covering the data section; metadata keys unique; no control
 * characters in tensor names or metadata keys; a regular file (a FIFO or
 * device is refused without blocking). Names are checked unique with a
 * hash index (a header of a million names opens in well under a second). The file
 * stays open: opening reads the header, and each get reads one tensor with
 * pread (names in error messages are escaped). A file truncated or
 * rewritten after the open makes the next get fail with AG_ERR_CORRUPT
 * ("changed since it was opened"), never a signal. Owned by the caller:
 * ag_safetensors_close.
 * Errors: AG_ERR_IO (cannot open/read, not a regular file), AG_ERR_CORRUPT
 * naming the problem ("ckpt.safetensors: truncated: header says 9000 data
 * bytes, file has 120"). */
AG_API ag_status ag_safetensors_open(const char *path, ag_safetensors **out);
AG_API void ag_safetensors_close(ag_safetensors *f);

/* Number of tensors in the file (0 for NULL). Never fails. */
AG_API int ag_safetensors_count(const ag_safetensors *f);
/* Borrowed; NULL when i is out of range. */
AG_API const char *ag_safetensors_name(const ag_safetensors *f, int i);
/* Metadata value for key, borrowed, or NULL. */
AG_API const char *ag_safetensors_meta(const ag_safetensors *f, const char *key);

/* The format's dtype name of tensor i ("I64", "BOOL", "F8_E4M3", ...).
 * Borrowed; NULL when i is out of range. */
AG_API const char *ag_safetensors_dtype(const ag_safetensors *f, int i);

/* Index of the tensor called name (for ag_safetensors_dtype and
 * ag_safetensors_shape), found through the name index; -1 when there is
 * none or f or name is NULL. Never fails. */
AG_API int ag_safetensors_find(const ag_safetensors *f, const char *name);

/* The shape of tensor i as the header gives it, without reading its data:
 * the number of dimensions (0 for a scalar), the sizes copied to
 * out_shape[0..ndim) (room for AG_MAX_DIMS; may be NULL). -1 when i is out
 * of range. Never fails otherwise. */
AG_API int ag_safetensors_shape(const ag_safetensors *f, int i, int64_t *out_shape);

/* A new tensor on device d with the stored contents, owned by the caller
 * (or the open scope; tensor.h); f may be closed afterwards. NULL with
 * AG_ERR_INVALID when there is no such name, AG_ERR_DTYPE naming the
 * tensor and its dtype when anygrad cannot hold it (I16, I8, U16-U64,
 * F8...), or the creation errors (AG_ERR_DEVICE, AG_ERR_OOM, ...).
 * F64 F32 F16 BF16 I64 I32 U8 BOOL load as they are. */
AG_API ag_tensor *ag_safetensors_get(const ag_safetensors *f, const char *name, ag_device d);

/* The same, converted to dtype `as`: integers and BOOL (as 0/1) to i32,
 * i64 or u8 (AG_ERR_INVALID naming the element when a value is outside the
 * target's range), to bool (x != 0) or to a float type; floats to float
 * types (to an integer type is refused: AG_ERR_DTYPE). F8 tensors are
 * refused (AG_ERR_DTYPE). Same dtype: as ag_safetensors_get. The result
 * is owned by the caller, and the other errors are, as ag_safetensors_get's. */
AG_API ag_tensor *ag_safetensors_get_as(const ag_safetensors *f, const char *name, ag_device d,
                                        ag_dtype as);

/* Copy every tensor of l from the file (names must all be present with equal
 * dtype and shape; extra tensors in the file are ignored). Nothing is
 * copied unless all match. Errors: AG_ERR_CORRUPT naming the first missing
 * tensor; AG_ERR_SHAPE for a tensor whose shape differs from l's (checked
 * first), AG_ERR_DTYPE for one whose dtype differs, each naming the tensor
 * with the file's and the model's dtype and shape; an error from the copy
 * (AG_ERR_OOM, AG_ERR_DEVICE). Caller keeps ownership of f and l. */
AG_API ag_status ag_safetensors_load_into(const ag_safetensors *f, const ag_param_list *l);

#ifdef __cplusplus
}
#endif
#endif
