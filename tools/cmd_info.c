/* `anygrad info`: every backend (loaded, or unavailable with its reason),
 * each device's properties and memory, and the communication libraries
 * (in-process, MPI, NCCL, RCCL); as text or JSON. */
#include <stdio.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "cli.h"

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

/* A module's description, wrapped at 100 columns under its line. */
static void print_wrapped(const char *s) {
  while (*s) {
    int n = (int)strlen(s);
    if (n > 92) {
      n = 92;
      while (n > 0 && s[n] != ' ') n--;
      if (n == 0) n = 92;
    }
    printf("        %.*s\n", n, s);
    s += n;
    while (*s == ' ') s++;
  }
}

static void text_report(void) {
  printf("anygrad %s\n\n", ANYGRAD_VERSION_STRING);
  int nk = ag_backend_count();
  for (int k = 0; k < nk; k++) {
    const char *reason = NULL;
    bool ok = ag_backend_available((ag_backend_kind)k, &reason);
    if (!ok) {
      printf("%-7s unavailable: %s\n", ag_backend_name((ag_backend_kind)k), reason);
      continue;
    }
    int n = ag_backend_device_count((ag_backend_kind)k);
    printf("%-7s %d device%s\n", ag_backend_name((ag_backend_kind)k), n, n == 1 ? "" : "s");
    ag_backend_info bi;
    if (ag_backend_info_get((ag_backend_kind)k, &bi) == AG_OK) {
      if (bi.path[0]) printf("        module %s (ABI %u.%u)\n", bi.path, bi.abi_major, bi.abi_minor);
      if (bi.description[0]) print_wrapped(bi.description);
    }
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
  printf("\nhost threads: %d\n", ag_get_num_threads());
  printf("best device: %s\n", ag_device_str(ag_device_best(), best, sizeof best));
  printf("\ncommunication libraries (docs/distributed.md):\n");
  for (int k = 0; k < AG_DIST_KIND_COUNT; k++) {
    char why[512];
    bool ok = ag_dist_available((ag_dist_kind)k, why, sizeof why);
    printf("  %-7s %s%s%s\n", ag_dist_kind_name((ag_dist_kind)k), ok ? "" : "unavailable (", why, ok ? "" : ")");
  }
}

static const char *tf(bool b) { return b ? "true" : "false"; }

static void json_report(void) {
  printf("{\"version\": ");
  ag_cli_json_str(stdout, ANYGRAD_VERSION_STRING);
  printf(", \"backends\": [");
  int nk = ag_backend_count();
  for (int k = 0; k < nk; k++) {
    const char *reason = NULL;
    bool ok = ag_backend_available((ag_backend_kind)k, &reason);
    printf("%s\n  {\"name\": ", k ? "," : "");
    ag_cli_json_str(stdout, ag_backend_name((ag_backend_kind)k));
    printf(", \"available\": %s", tf(ok));
    ag_backend_info bi;
    if (ag_backend_info_get((ag_backend_kind)k, &bi) == AG_OK) {
      printf(", \"module\": ");
      ag_cli_json_str(stdout, bi.path);
      printf(", \"abi\": \"%u.%u\", \"host_memory\": %s, \"addressable\": %s, \"dlpack_device\": %d, "
             "\"priority\": %d, \"collective\": ",
             bi.abi_major, bi.abi_minor, tf(bi.host_memory), tf(bi.addressable), bi.dlpack_device, bi.priority);
      ag_cli_json_str(stdout, bi.collective);
      printf(", \"description\": ");
      ag_cli_json_str(stdout, bi.description);
    }
    ag_error_clear();
    if (!ok) {
      printf(", \"reason\": ");
      ag_cli_json_str(stdout, reason);
      printf(", \"devices\": []}");
      continue;
    }
    printf(", \"devices\": [");
    int n = ag_backend_device_count((ag_backend_kind)k);
    for (int d = 0; d < n; d++) {
      ag_device dev = {(int16_t)k, (int16_t)d};
      ag_device_props p;
      char label[32];
      ag_device_str(dev, label, sizeof label);
      printf("%s\n    {\"device\": ", d ? "," : "");
      ag_cli_json_str(stdout, label);
      if (ag_device_props_get(dev, &p) != AG_OK) {
        printf(", \"error\": ");
        ag_cli_json_str(stdout, ag_last_error());
        printf("}");
        continue;
      }
      size_t f = 0, t = 0;
      ag_device_mem_info(dev, &f, &t);
      printf(", \"name\": ");
      ag_cli_json_str(stdout, p.name);
      printf(", \"vendor\": ");
      ag_cli_json_str(stdout, p.vendor);
      printf(", \"arch\": ");
      ag_cli_json_str(stdout, p.arch);
      printf(", \"compute_units\": %d, \"total_memory\": %zu, \"free_memory\": %zu, \"unified_memory\": %s, "
             "\"native_f16\": %s, \"native_bf16\": %s, \"virtual_memory\": %s}",
             p.compute_units, t, f, tf(p.unified_memory), tf(p.native_f16), tf(p.native_bf16),
             tf(p.virtual_memory));
    }
    printf("%s]}", n ? "\n  " : "");
  }
  char best[32];
  printf("\n], \"cpu_threads\": %d, \"best_device\": ", ag_get_num_threads());
  ag_cli_json_str(stdout, ag_device_str(ag_device_best(), best, sizeof best));
  printf(", \"communication\": [");
  for (int k = 0; k < AG_DIST_KIND_COUNT; k++) {
    char why[512];
    bool ok = ag_dist_available((ag_dist_kind)k, why, sizeof why);
    printf("%s\n  {\"name\": ", k ? "," : "");
    ag_cli_json_str(stdout, ag_dist_kind_name((ag_dist_kind)k));
    printf(", \"available\": %s, \"%s\": ", tf(ok), ok ? "description" : "reason");
    ag_cli_json_str(stdout, why);
    printf("}");
  }
  printf("\n]}\n");
}

enum { O_JSON = 256, O_VERSION, O_HELP };
static const struct option k_opts[] = {{"json", no_argument, NULL, O_JSON},
                                       {"version", no_argument, NULL, O_VERSION},
                                       {"help", no_argument, NULL, O_HELP},
                                       {NULL, 0, NULL, 0}};

int ag_cmd_info(int argc, char **argv) {
  bool json = false;
  for (int c = ag_cli_next("info", argc, argv, k_opts, true); c != -1;
       c = ag_cli_next("info", argc, argv, k_opts, false)) {
    if (c == '?') return AG_EXIT_USAGE;
    if (c == O_HELP) {
      printf("usage: anygrad info [--json] [--version]\n\n"
             "Lists every backend, loaded or unavailable with its reason,\n"
             "and each device's properties and memory.\n"
             "  --json     the same as one JSON object on stdout\n"
             "  --version  print the anygrad version and exit\n" AG_CLI_EXIT_HELP);
      return AG_EXIT_OK;
    }
    if (c == O_VERSION) {
      printf("anygrad %s\n", ANYGRAD_VERSION_STRING);
      return AG_EXIT_OK;
    }
    if (c == O_JSON) json = true;
  }
  if (json)
    json_report();
  else
    text_report();
  return fflush(stdout) == 0 ? AG_EXIT_OK : AG_EXIT_RUNTIME;
}
