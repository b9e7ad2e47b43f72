/* Philox4x32-10 (Salmon et al., SC'11; Random123), the counter-based
 * generator every backend uses, and the exact mapping from its bits to
 * random tensor elements, which GPU and OpenCL kernels must reproduce.
 *
 * Mapping (seed s, offset o, element i of a contiguous tensor; key = (lo32(s),
 * hi32(s)); block b means ag_philox4x32(b, s) with counter (lo32(b), hi32(b), 0, 0)):
 *   uniform:  r = block(o + i/4)[i%4];  u = (float)(r >> 8) * 2^-24   in [0, 1)
 *             value = u * (high - low) + low, computed in f32 (f64 for f64
 *             tensors), then rounded to the tensor's dtype.
 *   normal:   b = block(o + i/2);  a = b[2*(i%2)], c = b[2*(i%2)+1]
 *             u1 = (float)((a >> 8) + 1) * 2^-24   in (0, 1]  (log never sees 0)
 *             u2 = (float)(c >> 8) * 2^-24         in [0, 1)
 *             n  = sqrtf(-2 * logf(u1)) * cosf(2*pi*u2)   (f32; f64 uses double
 *             log/cos/sqrt on the same u1, u2), value = n * std + mean.
 *   dropout:  keep element i when uniform u(i) (as above, before scaling) >= p.
 * A kernel that draws for n elements advances the generator by ceil(n/4)
 * (uniform, dropout) or ceil(n/2) (normal) blocks. */
#include "tensor/half.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ag__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

void ag_philox4x32(uint64_t counter, uint64_t seed, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  ag__philox4x32_10(ctr, key, out);
}
