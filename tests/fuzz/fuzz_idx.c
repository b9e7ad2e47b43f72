/* libFuzzer harness of the IDX reader (plain and gzip): every input is read
 * by ag_idx_read, and a file it accepts must hold exactly the bytes its
 * header describes. */
#include <stdint.h>
#include <stdlib.h>

#include "anygrad/anygrad.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ag_idx idx;
  if (ag_idx_read(fuzz_file(data, size), &idx) != AG_OK) return 0;
  int64_t numel = 1;
  for (int d = 0; d < idx.ndim; d++) numel *= idx.dims[d];
  if (numel != idx.numel || !idx.data) abort();
  unsigned sum = 0;
  for (int64_t i = 0; i < idx.numel; i++) sum += idx.data[i]; /* every byte is there (ASan checks) */
  ag_idx_free(&idx);
  if (sum == 0xffffffffu) abort(); /* never: keeps the reads */
  return 0;
}
