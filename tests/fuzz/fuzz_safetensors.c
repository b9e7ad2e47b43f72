/* libFuzzer harness of the safetensors reader: every input is opened as a
 * file, and when it validates, every tensor is read as stored and converted
 * to f32 and i64 (ag_safetensors_get/_get_as). A crash, a sanitizer report
 * or a leak is a finding; a refusal is the expected outcome. */
#include <stdint.h>

#include "anygrad/anygrad.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ag_safetensors *f = NULL;
  if (ag_safetensors_open(fuzz_file(data, size), &f) != AG_OK) return 0;
  int n = ag_safetensors_count(f);
  for (int i = 0; i < n && i < 64; i++) {
    const char *name = ag_safetensors_name(f, i);
    (void)ag_safetensors_dtype(f, i);
    ag_tensor_release(ag_safetensors_get(f, name, AG_CPU));
    ag_tensor_release(ag_safetensors_get_as(f, name, AG_CPU, AG_F32));
    ag_tensor_release(ag_safetensors_get_as(f, name, AG_CPU, AG_I64));
  }
  (void)ag_safetensors_meta(f, "format");
  ag_safetensors_close(f);
  return 0;
}
