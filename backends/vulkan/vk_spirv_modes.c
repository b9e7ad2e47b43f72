/* Build step after glslc: declares SignedZeroInfNanPreserve for 32-bit
 * floats in a SPIR-V module, and for 64-bit floats where it has Float64
 * (glslang keeps one spirv_execution_mode per mode, so f64.comp cannot
 * declare both widths itself).
 * usage: vk_spirv_modes IN.spv OUT.spv */
#include <stdio.h>
#include <stdlib.h>

#include "vk_spirv.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: vk_spirv_modes IN.spv OUT.spv\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  uint32_t *in = NULL, *out = NULL;
  size_t n = 0, cap = 0, got;
  int rc = 1;
  do {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      uint32_t *t = realloc(in, cap * sizeof *in);
      if (!t) goto done;
      in = t;
    }
    got = fread(in + n, sizeof *in, cap - n, f);
    n += got;
  } while (got > 0);
  if (ferror(f) || !(out = malloc((n + 10) * sizeof *out))) goto done;
  fclose(f);
  f = NULL;
  size_t m = vkb_spirv_float_modes(in, n, true, true, out);
  if (!m) {
    fprintf(stderr, "vk_spirv_modes: %s is not a SPIR-V module with an entry point\n", argv[1]);
    goto done;
  }
  if (!(f = fopen(argv[2], "wb")) || fwrite(out, sizeof *out, m, f) != m) {
    perror(argv[2]);
    goto done;
  }
  rc = fclose(f) == 0 ? 0 : 1;
  f = NULL;
  if (rc) remove(argv[2]);
done:
  if (f) fclose(f);
  free(in);
  free(out);
  return rc;
}
