/* A host shuffle of indices by (seed, epoch): Fisher-Yates over a
 * splitmix64 stream with unbiased bounded draws. */
#include "anygrad/nn.h"

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* uniform in [0, n), n >= 1, by rejection (no modulo bias) */
static uint64_t below(uint64_t *s, uint64_t n) {
  uint64_t lim = UINT64_MAX - UINT64_MAX % n, r;
  do r = splitmix(s);
  while (r >= lim);
  return r % n;
}

ag_status ag_shuffle_indices(int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch) {
  if (n < 0 || (n > 0 && !idx))
    return ag_error_set(AG_ERR_INVALID, "ag_shuffle_indices: %s (n %lld)", n < 0 ? "negative n" : "NULL idx",
                        (long long)n);
  uint64_t s = seed ^ (epoch * 0xD1B54A32D192ED03ull);
  splitmix(&s);
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)below(&s, (uint64_t)i + 1);
    int64_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
  return AG_OK;
}
