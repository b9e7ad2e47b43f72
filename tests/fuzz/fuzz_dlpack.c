/* libFuzzer harness of the zero-copy entry points: the input describes a
 * DLPack tensor (ndim, dtype, shape, strides, byte_offset) over a fixed
 * 4 KiB buffer, given to ag_from_dlpack and (shape, strides) to
 * ag_from_blob. An accepted tensor must lie inside the buffer it was given
 * (the harness passes layouts whose size it knows), and its DLPack export
 * must describe the same layout. Nothing overflows or wraps on the way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "anygrad/dlpack.h"

static _Alignas(64) unsigned char g_buf[4096];

static void no_delete(DLManagedTensor *m) { (void)m; }

/* Take n bytes of the input (zeros once it is used up). */
static void take(const uint8_t **p, size_t *left, void *dst, size_t n) {
  memset(dst, 0, n);
  size_t k = n < *left ? n : *left;
  memcpy(dst, *p, k);
  *p += k;
  *left -= k;
}

/* Bytes from the first element to one past the last (strides >= 0), or -1
 * when the layout is empty or larger than the buffer: computed here in
 * wide arithmetic, independently of the library. */
static __int128 extent(int ndim, const int64_t *shape, const int64_t *strides, unsigned es) {
  __int128 last = 0, contig = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] <= 0) return -1;
    int64_t s = strides ? strides[i] : (int64_t)contig;
    if (s < 0) return -1;
    last += (__int128)(shape[i] - 1) * s;
    contig *= shape[i];
    if (contig > ((__int128)1 << 80)) contig = (__int128)1 << 80;
  }
  return (last + 1) * es;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *p = data;
  size_t left = size;
  uint8_t hdr[5];
  take(&p, &left, hdr, sizeof hdr);
  int ndim = (int8_t)hdr[0];
  if (ndim > 12) ndim = 12;
  int64_t shape[12], strides[12];
  int n = ndim > 0 ? ndim : 0;
  take(&p, &left, shape, sizeof(int64_t) * (size_t)n);
  take(&p, &left, strides, sizeof(int64_t) * (size_t)n);
  uint64_t offset = 0;
  take(&p, &left, &offset, sizeof offset);
  bool with_strides = hdr[3] & 1;
  static const struct { uint8_t code, bits; } dts[] = {{kDLFloat, 32}, {kDLFloat, 16}, {kDLBfloat, 16},
                                                       {kDLInt, 32},   {kDLInt, 64},   {kDLUInt, 8},
                                                       {kDLBool, 8},   {kDLFloat, 64}, {kDLInt, 7}};
  int which = hdr[1] % (sizeof dts / sizeof *dts);

  DLManagedTensor m;
  memset(&m, 0, sizeof m);
  m.dl_tensor.data = g_buf;
  m.dl_tensor.device.device_type = hdr[4] & 1 ? kDLCUDA : kDLCPU;
  m.dl_tensor.ndim = ndim;
  m.dl_tensor.dtype.code = dts[which].code;
  m.dl_tensor.dtype.bits = dts[which].bits;
  m.dl_tensor.dtype.lanes = (uint16_t)(hdr[2] % 3 == 2 ? 2 : 1);
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = with_strides ? strides : NULL;
  m.dl_tensor.byte_offset = offset;
  m.deleter = no_delete;
  ag_tensor *t = ag_from_dlpack(&m);
  if (t) {
    unsigned es = dts[which].bits / 8;
    __int128 ext = extent(ndim, shape, with_strides ? strides : NULL, es ? es : 1);
    /* Accepted and non-empty: offset + extent fit in the address space. */
    if (ext > 0 && (__int128)(uintptr_t)g_buf + offset + ext > (__int128)UINTPTR_MAX) abort();
    DLManagedTensor *out = NULL;
    if (ag_to_dlpack(t, &out) == AG_OK) {
      if (out->dl_tensor.ndim != ndim) abort();
      for (int i = 0; i < ndim; i++)
        if (out->dl_tensor.shape[i] != shape[i]) abort();
      out->deleter(out);
    }
    ag_tensor_release(t);
  }

  ag_dtype dt = (ag_dtype)(hdr[1] % AG_DTYPE_COUNT);
  t = ag_from_blob(AG_CPU, dt, ndim, shape, with_strides ? strides : NULL, g_buf, NULL, NULL);
  if (t) {
    if (ag_tensor_ndim(t) != ndim) abort();
    ag_tensor_release(t);
  }
  return 0;
}
