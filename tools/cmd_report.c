/* `anygrad report`: the HTML run report from a saved Chrome trace (written
 * by `anygrad train --trace` or ag_profiler_write_trace) and, optionally, an
 * allocator snapshot (ag_memory_snapshot_json). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(void) {
  printf("usage: anygrad report TRACE.json [--memory SNAPSHOT.json] [-o|--out REPORT.html]\n"
         "Build the self-contained HTML run report (see docs/report.md) from a trace written by\n"
         "`anygrad train --trace` or ag_profiler_write_trace.\n\n"
         "  --memory PATH   allocator snapshot (ag_memory_snapshot_json) to show instead of the\n"
         "                  trace's own snapshots\n"
         "  -o, --out PATH  the HTML file to write (default report.html)\n\n" AG_CLI_EXIT_HELP);
}

enum { O_MEMORY = 256, O_OUT, O_HELP };

static const struct option k_opts[] = {{"memory", required_argument, NULL, O_MEMORY},
                                       {"out", required_argument, NULL, O_OUT},
                                       {"help", no_argument, NULL, O_HELP},
                                       {NULL, 0, NULL, 0}};

int ag_cmd_report(int argc, char **argv) {
  const char *C = "report", *trace = NULL, *memory = NULL, *out = "report.html";
  /* One positional argument (the trace), anywhere; "-o" is --out. The shared
   * parser stops at positionals, so take it out first. */
  char *args[64];
  int n = 0;
  if (argc > 63) {
    fprintf(stderr, "anygrad report: too many arguments\n");
    return AG_EXIT_USAGE;
  }
  args[n++] = argv[0];
  for (int i = 1; i < argc; i++) {
    bool takes_value = !strcmp(argv[i], "--memory") || !strcmp(argv[i], "--out") || !strcmp(argv[i], "-o");
    if (!strcmp(argv[i], "-o")) {
      args[n++] = "--out";
    } else if (argv[i][0] != '-' || !strcmp(argv[i], "-")) {
      if (trace) {
        fprintf(stderr, "anygrad report: unexpected argument '%s' (one trace file; see --help)\n", argv[i]);
        return AG_EXIT_USAGE;
      }
      trace = argv[i];
      continue;
    } else {
      args[n++] = argv[i];
    }
    if (takes_value && i + 1 < argc) args[n++] = argv[++i];
  }
  args[n] = NULL;
  for (int c = ag_cli_next(C, n, args, k_opts, true); c != -1; c = ag_cli_next(C, n, args, k_opts, false)) {
    if (c == '?') return AG_EXIT_USAGE;
    if (c == O_HELP) {
      usage();
      return AG_EXIT_OK;
    }
    if (c == O_MEMORY) memory = ag_cli_arg();
    if (c == O_OUT) out = ag_cli_arg();
  }
  if (!trace) {
    fprintf(stderr, "anygrad report: no trace file given (see --help)\n");
    return AG_EXIT_USAGE;
  }
  if (!*out || (memory && !*memory)) {
    fprintf(stderr, "anygrad report: --out and --memory must not be empty\n");
    return AG_EXIT_USAGE;
  }
  ag_status st = ag_report_from_trace(trace, memory, out);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad report: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  printf("anygrad report: wrote %s (open in a browser)\n", out);
  return AG_EXIT_OK;
}
