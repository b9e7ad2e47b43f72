/* Zero-copy interop (anygrad/interop.h): a tensor's memory for the caller's
 * own kernels, tensors over caller-owned memory, and DLPack export/import.
 * Validation lives here; storage over foreign memory is ag__tensor_wrap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "anygrad/interop.h"
#include "runtime/devstate.h"
#include "tensor/tensor_internal.h"

/* Whether a segment base plus an offset is an address (not an OpenCL cl_mem):
 * the backend says so (AG_BACKEND_F_ADDRESSABLE). */
static bool pointer_addressable(ag_devstate *ds) { return (ds->be->flags & AG_BACKEND_F_ADDRESSABLE) != 0; }

ag_status ag_tensor_memory_get(const ag_tensor *t, ag_tensor_memory *out_mem) {
  if (!t || !out_mem) return ag_error_set(AG_ERR_INVALID, "ag_tensor_memory_get: NULL argument");
  if (ag__bad_tensor(t, "ag_tensor_memory_get")) return ag_last_status();
  ag_devstate *ds = ag__ds(t);
  size_t off = t->st->offset + (size_t)t->offset * ag_dtype_size(t->dtype);
  out_mem->handle = t->st->base;
  out_mem->byte_offset = off;
  out_mem->nbytes = t->st->nbytes;
  out_mem->ptr = pointer_addressable(ds) ? (char *)t->st->base + off : NULL;
  out_mem->stream = ag__current_stream(ds);
  return AG_OK;
}

void *ag_tensor_data_ptr(const ag_tensor *t) {
  if (!t) {
    ag_error_set(AG_ERR_INVALID, "ag_tensor_data_ptr: NULL tensor");
    return NULL;
  }
  if (ag__bad_tensor(t, "ag_tensor_data_ptr")) return NULL;
  if (!pointer_addressable(ag__ds(t))) {
    ag_error_set(AG_ERR_UNSUPPORTED,
                 "ag_tensor_data_ptr: %s memory is a buffer handle (an OpenCL cl_mem), not an address; "
                 "use ag_tensor_memory_get for the handle and byte offset",
                 ag__devlabel(t));
    return NULL;
  }
  ag_tensor_memory m;
  ag_tensor_memory_get(t, &m);
  return m.ptr;
}

/* Bytes from the first element to one past the last one a layout reaches
 * (all strides >= 0); false on overflow. Every step is checked: the last
 * element may sit at INT64_MAX, where one past it overflowed. */
static bool layout_span(const char *fn, ag_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                        size_t *out_bytes) {
  bool empty = false;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) empty = true;
    if (strides && strides[i] < 0) {
      ag_error_set(AG_ERR_INVALID, "%s: negative stride %lld in dim %d is not supported", fn,
                   (long long)strides[i], i);
      return false;
    }
  }
  if (empty) {
    *out_bytes = 0;
    return true;
  }
  int64_t contig[AG_MAX_DIMS];
  if (!strides) {
    ag__contiguous_strides(ndim, shape, contig);
    strides = contig;
  }
  int64_t last = 0, step, bytes;
  bool over = false;
  for (int i = 0; i < ndim && !over; i++)
    over = __builtin_mul_overflow(shape[i] - 1, strides[i], &step) || __builtin_add_overflow(last, step, &last);
  if (over || __builtin_add_overflow(last, 1, &bytes) ||
      __builtin_mul_overflow(bytes, (int64_t)ag_dtype_size(dt), &bytes)) {
    char b[2 * AG_MAX_DIMS * 21 + 32] = "";
    size_t k = 0;
    for (int j = 0; j < 2 * ndim; j++)
      k += (size_t)snprintf(b + k, sizeof b - k, "%s%lld", j == 0 ? "" : j == ndim ? "] strides [" : ",",
                            (long long)(j < ndim ? shape[j] : strides[j - ndim]));
    ag_error_set(AG_ERR_INVALID, "%s: a stride layout of %s, shape [%s], overflows 64-bit byte offsets", fn,
                 ag_dtype_name(dt), b);
    return false;
  }
  *out_bytes = (size_t)bytes;
  return true;
}

static bool check_layout(const char *fn, ag_dtype dt, int ndim, const int64_t *shape) {
  if ((unsigned)dt >= AG_DTYPE_COUNT) {
    ag_error_set(AG_ERR_DTYPE, "%s: invalid dtype %d", fn, (int)dt);
    return false;
  }
  if (ndim < 0 || ndim > AG_MAX_DIMS || (ndim > 0 && !shape)) {
    ag_error_set(AG_ERR_SHAPE, "%s: ndim %d out of range [0, %d]", fn, ndim, AG_MAX_DIMS);
    return false;
  }
  /* Sizes first, overflow-checked, before any stride is derived from them. */
  return ag__shape_check(fn, ndim, shape, dt, NULL);
}

/* Whether [p, p + n) is mapped memory of this process (host memory only):
 * mincore answers ENOMEM for a page that is not mapped. */
static bool host_range_mapped(uintptr_t p, size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  if (pg <= 0 || !n) return true;
  uintptr_t first = p & ~((uintptr_t)pg - 1), last = (p + n - 1) & ~((uintptr_t)pg - 1);
  unsigned char v;
  return mincore((void *)first, (size_t)pg, &v) == 0 && mincore((void *)last, (size_t)pg, &v) == 0;
}

/* Whether d's memory is host memory the process addresses directly (the
 * registry's properties; the cpu backend's today). */
static bool host_addressable(ag_device d) {
  ag_backend_info bi;
  return ag_backend_info_get(d.backend, &bi) == AG_OK && bi.host_memory && bi.addressable;
}

static ag_tensor *wrap(const char *fn, ag_device d, ag_dtype dt, int ndim, const int64_t *shape,
                       const int64_t *strides, void *data, size_t byte_offset, ag_deleter_fn deleter,
                       void *ctx) {
  if (!check_layout(fn, dt, ndim, shape)) return NULL;
  size_t span;
  if (!layout_span(fn, dt, ndim, shape, strides, &span)) return NULL;
  if (!data && span) {
    ag_error_set(AG_ERR_INVALID, "%s: NULL data for a non-empty tensor", fn);
    return NULL;
  }
  /* The offset may neither wrap the address space (an offset of 2^64-32
   * would alias memory before data) nor reach past what offsets can say. */
  uintptr_t end;
  if (byte_offset > (size_t)INT64_MAX || span > (size_t)INT64_MAX - byte_offset ||
      __builtin_add_overflow((uintptr_t)data, (uintptr_t)(byte_offset + span), &end)) {
    ag_error_set(AG_ERR_INVALID, "%s: byte_offset %zu with a %zu-byte layout wraps the address space", fn,
                 byte_offset, span);
    return NULL;
  }
  /* Host memory can be checked: the first and last byte the tensor reaches
   * must be mapped (an offset of 2^62 would fault at the first read). */
  if (span && host_addressable(d) && !host_range_mapped((uintptr_t)data + byte_offset, span)) {
    ag_error_set(AG_ERR_INVALID,
                 "%s: byte_offset %zu with a %zu-byte layout reaches memory that is not mapped in this process", fn,
                 byte_offset, span);
    return NULL;
  }
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return NULL;
  ag_tensor *t = ag__tensor_wrap(ds, dt, ndim, shape, strides, data, byte_offset, byte_offset + span,
                                 deleter, ctx);
  if (!t) {
    char msg[512]; /* copied first: the message is formatted into the same buffer */
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    ag_error_set(ag_last_status(), "%s: %s", fn, msg);
  }
  return t;
}

ag_tensor *ag_from_blob(ag_device d, ag_dtype dt, int ndim, const int64_t *shape, const int64_t *strides,
                        void *data, ag_deleter_fn deleter, void *ctx) {
  return wrap("ag_from_blob", d, dt, ndim, shape, strides, data, 0, deleter, ctx);
}

/* ---- DLPack ---- */

static bool dl_from_dtype(ag_dtype dt, DLDataType *out) {
  switch (dt) {
    case AG_F32: *out = (DLDataType){kDLFloat, 32, 1}; return true;
    case AG_F16: *out = (DLDataType){kDLFloat, 16, 1}; return true;
    case AG_BF16: *out = (DLDataType){kDLBfloat, 16, 1}; return true;
    case AG_F64: *out = (DLDataType){kDLFloat, 64, 1}; return true;
    case AG_I32: *out = (DLDataType){kDLInt, 32, 1}; return true;
    case AG_I64: *out = (DLDataType){kDLInt, 64, 1}; return true;
    case AG_U8: *out = (DLDataType){kDLUInt, 8, 1}; return true;
    case AG_BOOL: *out = (DLDataType){kDLBool, 8, 1}; return true;
    default: return false;
  }
}

static const char *dl_code_name(uint8_t code) {
  switch (code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLOpaqueHandle: return "opaque";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    default: return "unknown";
  }
}

static bool dl_to_dtype(const char *fn, DLDataType t, ag_dtype *out) {
  if (t.lanes != 1) {
    ag_error_set(AG_ERR_DTYPE, "%s: DLPack dtype %s%u with %u lanes: anygrad has no vector dtypes", fn,
                 dl_code_name(t.code), t.bits, t.lanes);
    return false;
  }
  for (int d = 0; d < AG_DTYPE_COUNT; d++) {
    DLDataType c;
    if (dl_from_dtype((ag_dtype)d, &c) && c.code == t.code && c.bits == t.bits) {
      *out = (ag_dtype)d;
      return true;
    }
  }
  ag_error_set(AG_ERR_DTYPE, "%s: DLPack dtype %s%u is not an anygrad dtype (f32, f16, bf16, f64, i32, i64, u8, bool)", fn,
               dl_code_name(t.code), t.bits);
  return false;
}

/* The DLPack device type is what the backend reports (ag_backend
 * .dlpack_device); kDLCPU always has device id 0. */
static bool dl_from_device(ag_devstate *ds, DLDevice *out) {
  int32_t t = ds->be->dlpack_device;
  if (t <= 0) return false;
  *out = (DLDevice){(DLDeviceType)t, t == kDLCPU ? 0 : ds->dev.index};
  return true;
}

static bool dl_to_device(const char *fn, DLDevice dv, ag_device *out) {
  int type = dv.device_type, id = dv.device_id;
  /* Host memory of every kind (pinned, managed) is host memory to anygrad. */
  if (type == kDLCUDAHost || type == kDLROCMHost || type == kDLCUDAManaged) type = kDLCPU;
  if (type == kDLCPU) id = 0;
  ag_backend_kind kind;
  if (ag__backend_by_dlpack(type, &kind) != AG_OK) {
    ag_error_set(AG_ERR_UNSUPPORTED, "%s: DLPack device type %d has no anygrad backend", fn, (int)dv.device_type);
    return false;
  }
  ag_backend_info info;
  if (ag_backend_info_get(kind, &info) != AG_OK) return false;
  if (!info.addressable) {
    ag_error_set(AG_ERR_UNSUPPORTED,
                 "%s: a %s DLPack tensor cannot be imported (its memory is a handle of the producer's context, "
                 "e.g. an OpenCL cl_mem; anygrad's %s device has its own)", fn, info.name, info.name);
    return false;
  }
  *out = (ag_device){(int16_t)kind, (int16_t)id};
  return true;
}

/* What an export keeps alive: a private reference to the storage and the
 * shape/strides arrays the DLTensor points at. */
typedef struct dl_export {
  ag_tensor *ref;
  int64_t shape[AG_MAX_DIMS];
  int64_t strides[AG_MAX_DIMS];
  union {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } m;
} dl_export;

static void dl_export_free(dl_export *e) {
  ag_tensor_release(e->ref);
  free(e);
}
static void dl_delete_legacy(DLManagedTensor *self) {
  if (self) dl_export_free((dl_export *)self->manager_ctx);
}
static void dl_delete_versioned(DLManagedTensorVersioned *self) {
  if (self) dl_export_free((dl_export *)self->manager_ctx);
}

static dl_export *dl_export_new(const char *fn, ag_tensor *t, DLTensor *proto) {
  if (ag__bad_tensor(t, fn)) return NULL;
  ag_devstate *ds = ag__ds(t);
  DLDataType dt;
  DLDevice dev;
  if (!dl_from_dtype(t->dtype, &dt) || !dl_from_device(ds, &dev)) {
    ag_error_set(AG_ERR_DTYPE, "%s: %s on %s has no DLPack form", fn, ag_dtype_name(t->dtype), ds->label);
    return NULL;
  }
  /* The consumer reads the memory as soon as it has it. */
  if (ag__sync_stream(ag__current_stream(ds), fn) != AG_OK) return NULL;
  dl_export *e = calloc(1, sizeof *e);
  if (!e) {
    ag_error_set(AG_ERR_OOM, "%s: out of host memory", fn);
    return NULL;
  }
  e->ref = ag__private_ref(t);
  if (!e->ref) {
    free(e);
    return NULL;
  }
  for (int i = 0; i < t->ndim; i++) {
    e->shape[i] = t->shape[i];
    e->strides[i] = t->strides[i];
  }
  size_t off = t->st->offset + (size_t)t->offset * ag_dtype_size(t->dtype);
  proto->device = dev;
  proto->ndim = t->ndim;
  proto->dtype = dt;
  proto->shape = e->shape;
  proto->strides = e->strides;
  if (pointer_addressable(ds)) {
    proto->data = (char *)t->st->base + off;
    proto->byte_offset = 0;
  } else { /* OpenCL: the cl_mem handle plus the element's offset */
    proto->data = t->st->base;
    proto->byte_offset = off;
  }
  return e;
}

ag_status ag_to_dlpack(ag_tensor *t, DLManagedTensor **out_managed) {
  if (!out_managed) return ag_error_set(AG_ERR_INVALID, "ag_to_dlpack: NULL output");
  *out_managed = NULL;
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl_export *e = dl_export_new("ag_to_dlpack", t, &dl);
  if (!e) return ag_last_status();
  e->m.legacy.dl_tensor = dl;
  e->m.legacy.manager_ctx = e;
  e->m.legacy.deleter = dl_delete_legacy;
  *out_managed = &e->m.legacy;
  return AG_OK;
}

ag_status ag_to_dlpack_versioned(ag_tensor *t, DLManagedTensorVersioned **out_managed) {
  if (!out_managed) return ag_error_set(AG_ERR_INVALID, "ag_to_dlpack_versioned: NULL output");
  *out_managed = NULL;
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl_export *e = dl_export_new("ag_to_dlpack_versioned", t, &dl);
  if (!e) return ag_last_status();
  e->m.versioned.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  e->m.versioned.flags = 0;
  e->m.versioned.dl_tensor = dl;
  e->m.versioned.manager_ctx = e;
  e->m.versioned.deleter = dl_delete_versioned;
  *out_managed = &e->m.versioned;
  return AG_OK;
}

static void dl_free_legacy(void *data, void *ctx) {
  DLManagedTensor *m = ctx;
  if (m->deleter) m->deleter(m);
}
static void dl_free_versioned(void *data, void *ctx) {
  DLManagedTensorVersioned *m = ctx;
  if (m->deleter) m->deleter(m);
}

static ag_tensor *dl_import(const char *fn, const DLTensor *dl, ag_deleter_fn del, void *ctx) {
  ag_dtype dt;
  ag_device d;
  if (!dl_to_dtype(fn, dl->dtype, &dt) || !dl_to_device(fn, dl->device, &d)) return NULL;
  if (dl->ndim < 0 || dl->ndim > AG_MAX_DIMS) {
    ag_error_set(AG_ERR_SHAPE, "%s: ndim %d out of range [0, %d]", fn, dl->ndim, AG_MAX_DIMS);
    return NULL;
  }
  /* A pointer-addressable tensor starts at data + byte_offset; keep data as
   * the base so the deleter's view of the memory stays the producer's. */
  return wrap(fn, d, dt, dl->ndim, dl->shape, dl->strides, dl->data, (size_t)dl->byte_offset, del, ctx);
}

ag_tensor *ag_from_dlpack(DLManagedTensor *managed) {
  if (!managed) {
    ag_error_set(AG_ERR_INVALID, "ag_from_dlpack: NULL tensor");
    return NULL;
  }
  return dl_import("ag_from_dlpack", &managed->dl_tensor, dl_free_legacy, managed);
}

ag_tensor *ag_from_dlpack_versioned(DLManagedTensorVersioned *managed) {
  const char *fn = "ag_from_dlpack_versioned";
  if (!managed) {
    ag_error_set(AG_ERR_INVALID, "%s: NULL tensor", fn);
    return NULL;
  }
  if (managed->version.major != DLPACK_MAJOR_VERSION) {
    ag_error_set(AG_ERR_UNSUPPORTED, "%s: DLPack major version %u, anygrad reads %u", fn,
                 managed->version.major, DLPACK_MAJOR_VERSION);
    return NULL;
  }
  if (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) {
    ag_error_set(AG_ERR_UNSUPPORTED, "%s: the tensor is read-only and anygrad tensors are writable", fn);
    return NULL;
  }
  return dl_import(fn, &managed->dl_tensor, dl_free_versioned, managed);
}
