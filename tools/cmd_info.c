/* `anygrad info`: every backend (loaded, or unavailable with its reason),
 * each device's properties and memory. */
#include <stdio.h>
#include <string.h>

#include "anygrad/anygrad.h"

static void human(size_t b, char *buf, size_t len) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) {
    v /= 1024;
    i++;
  }
  snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

int ag_cmd_info(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: anygrad info\n\nLists every backend, loaded or unavailable with its reason,\n"
             "and each device's properties and memory.\n");
      return 0;
    }
    fprintf(stderr, "anygrad info: unknown option '%s'\n", argv[i]);
    return 2;
  }
  printf("anygrad %s\n\n", ANYGRAD_VERSION_STRING);
  for (int k = 0; k < AG_BACKEND_COUNT; k++) {
    const char *reason = NULL;
    bool ok = ag_backend_available((ag_backend_kind)k, &reason);
    if (!ok) {
      printf("%-7s unavailable: %s\n", ag_backend_name((ag_backend_kind)k), reason);
      continue;
    }
    int n = ag_backend_device_count((ag_backend_kind)k);
    printf("%-7s %d device%s\n", ag_backend_name((ag_backend_kind)k), n, n == 1 ? "" : "s");
    if (k == AG_BACKEND_GPUEMU)
      printf("        for testing and debugging: runs the CUDA/HIP kernel source on the CPU with GPU\n"
             "        semantics (barriers, warp shuffles, launch limits); never chosen as best device\n");
    for (int d = 0; d < n; d++) {
      ag_device dev = {(int16_t)k, (int16_t)d};
      ag_device_props p;
      char label[32], tot[32], fr[32];
      ag_device_str(dev, label, sizeof label);
      if (ag_device_props_get(dev, &p) != AG_OK) {
        printf("  %s: %s\n", label, ag_last_error());
        continue;
      }
      size_t f = 0, t = 0;
      ag_device_mem_info(dev, &f, &t);
      human(t, tot, sizeof tot);
      human(f, fr, sizeof fr);
      printf("  %-9s %s\n", label, p.name);
      printf("            vendor %s, arch %s, %d compute units\n", p.vendor, p.arch, p.compute_units);
      printf("            memory %s total, %s free%s\n", tot, fr, p.unified_memory ? " (host memory)" : "");
      printf("            native f16 %s, native bf16 %s, virtual memory %s\n", p.native_f16 ? "yes" : "no",
             p.native_bf16 ? "yes" : "no", p.virtual_memory ? "yes" : "no");
    }
  }
  char best[32];
  printf("\nbest device: %s\n", ag_device_str(ag_device_best(), best, sizeof best));
  return 0;
}
