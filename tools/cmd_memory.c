/* `anygrad memory`: the caching allocator's summary for a device, optionally
 * after a short variable-shape workload (so a fresh process has something to
 * show) and with a JSON snapshot written for offline inspection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "cli.h"

static void usage(void) {
  char bl[128];
  printf("usage: anygrad memory [--device D] [--conf STR] [--exercise] [--json PATH] [--threads N]\n\n"
         "Prints the caching allocator's statistics for a device (default: the best one).\n"
         "  --device D   BACKEND[:N], backends: %s\n"
         "  --conf STR   allocator configuration, AG_ALLOC_CONF syntax\n"
         "               (e.g. expandable_segments:1,max_split_size_mb:128)\n"
         "  --exercise   first run a short workload of tensors whose sizes change\n"
         "               step to step, keeping some alive, so the summary shows\n"
         "               caching, splitting and per-category bytes\n"
         "  --json PATH  also write a JSON snapshot (segments, blocks, event trace)\n" AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP
             AG_CLI_EXIT_HELP,
         ag_cli_backend_list(bl, sizeof bl));
}

/* Tensors of changing sizes; a quarter are kept, tagged as parameters. */
static int exercise(ag_device d, ag_tensor **kept, int *n_kept) {
  for (int step = 0; step < 8; step++) {
    ag_mem_category_push(AG_MEM_ACTIVATIONS);
    ag_scope_begin();
    for (int i = 0; i < 12; i++) {
      int64_t shape[] = {(int64_t)(1 + (step * 7 + i * 13) % 29) * 16384};
      ag_tensor *t = ag_zeros(d, AG_F32, 1, shape);
      if (!t) {
        ag_scope_end();
        ag_mem_category_pop();
        return 1;
      }
    }
    ag_scope_end();
    ag_mem_category_pop();
    ag_mem_category_push(AG_MEM_PARAMETERS);
    int64_t pshape[] = {(int64_t)(step + 1) * 65536};
    ag_tensor *p = ag_zeros(d, AG_F32, 1, pshape);
    ag_mem_category_pop();
    if (!p) return 1;
    kept[(*n_kept)++] = p;
  }
  return 0;
}

int ag_cmd_memory(int argc, char **argv) {
  const char *dev_s = NULL, *conf = NULL, *json = NULL;
  bool ex = false;
  enum { O_DEVICE = 256, O_CONF, O_JSON, O_EXERCISE, O_HELP };
  static const struct option opts[] = {{"device", required_argument, NULL, O_DEVICE},
                                       {"conf", required_argument, NULL, O_CONF},
                                       {"json", required_argument, NULL, O_JSON},
                                       {"exercise", no_argument, NULL, O_EXERCISE},
                                       {"help", no_argument, NULL, O_HELP},
                                       AG_CLI_THREADS_OPT,
                                       AG_CLI_NUMERICS_OPT,
                                       {NULL, 0, NULL, 0}};
  for (int c = ag_cli_next("memory", argc, argv, opts, true); c != -1;
       c = ag_cli_next("memory", argc, argv, opts, false)) {
    switch (c) {
      case O_HELP: usage(); return AG_EXIT_OK;
      case O_DEVICE: dev_s = ag_cli_arg(); break;
      case O_CONF: conf = ag_cli_arg(); break;
      case O_JSON: json = ag_cli_arg(); break;
      case O_EXERCISE: ex = true; break;
      case AG_CLI_THREADS:
        if (!ag_cli_threads("memory", ag_cli_arg())) return AG_EXIT_USAGE;
        break;
      case AG_CLI_NUMERICS:
        if (!ag_cli_numerics("memory", ag_cli_arg())) return AG_EXIT_USAGE;
        break;
      default: return AG_EXIT_USAGE;
    }
  }
  ag_device d = ag_device_best();
  if (dev_s) {
    int rc = ag_cli_device("memory", dev_s, &d);
    if (rc != AG_EXIT_OK) return rc;
  }
  if (conf && ag_alloc_configure(d, conf) != AG_OK) {
    fprintf(stderr, "anygrad memory: %s\n", ag_last_error());
    return ag_last_status() == AG_ERR_INVALID ? AG_EXIT_USAGE : AG_EXIT_RUNTIME;
  }
  ag_tensor *kept[16];
  int n_kept = 0, rc = 0;
  if (ex && exercise(d, kept, &n_kept) != 0) {
    fprintf(stderr, "anygrad memory: workload failed: %s\n", ag_last_error());
    rc = 1;
  }
  size_t len = 64 * 1024;
  char *buf = malloc(len);
  if (!buf || ag_memory_summary(d, buf, len) != AG_OK) {
    fprintf(stderr, "anygrad memory: %s\n", buf ? ag_last_error() : "out of host memory");
    free(buf);
    return 1;
  }
  fputs(buf, stdout);
  printf("CPU threads: %d\n", ag_get_num_threads());
  free(buf);
  if (json) {
    if (ag_memory_snapshot_json(d, json) != AG_OK) {
      fprintf(stderr, "anygrad memory: %s\n", ag_last_error());
      rc = 1;
    } else {
      printf("snapshot written to %s\n", json);
    }
  }
  for (int i = 0; i < n_kept; i++) ag_tensor_release(kept[i]);
  return rc;
}
