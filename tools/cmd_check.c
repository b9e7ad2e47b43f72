/* `anygrad check`: the conformance engine on every available backend, printed
 * as a support matrix (op x backend x dtype) with the first failure of each
 * cell underneath. Exits 1 on any failure, so CI can run it directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "anygrad/anygrad.h"
#include "anygrad/optrace.h"
#include "check_bitwise.h"
#include "cli.h"
#include "conformance.h"
#include "conformance_html.h"

static void check_usage(void) {
  char bl[128];
  printf(
      "usage: anygrad check [--backend B[,B...]] [--ops a,b,...] [--dtype d[,d...]] [--seed S]\n"
      "                     [--forward | --grad] [--verbose] [--json] [--threads N] [--version]\n"
      "                     [--accuracy] [--report FILE.html] [--dump-inputs DIR] [--coverage]\n"
      "                     [--numerics MODE] [--bitwise] [DEVICE...]\n\n"
      "Runs every op x dtype x shape case against a double-precision host reference.\n"
      "  --backend  BACKEND[:N], backends: %s (default: every backend;\n"
      "             absent ones are listed as skipped; a named one that is absent is an error);\n"
      "             devices may also be named after the options (DEVICE...)\n"
      "  --ops      op names (default: all): %s",
      ag_cli_backend_list(bl, sizeof bl), ag_conf_op_name(0));
  for (int i = 1; i < ag_conf_op_count(); i++) printf("%s%s", i % 10 ? "," : ",\n             ", ag_conf_op_name(i));
  printf(
      "\n  --dtype    f32,f16,bf16,i32,f64,i64,bool,u8 (default: all)\n"
      "  --seed     input seed, decimal or 0x hex (default 0x%llx); printed so a failure can be\n"
      "             reproduced\n"
      "  --forward  only the forward ops; --grad only the gradient checks (grad_<op>: backward\n"
      "             against central finite differences on the same device, f32 and f64)\n"
      "  --verbose  one line per case\n"
      "  --json     one JSON object on stdout instead of the table\n"
      "  --accuracy also measure each cell's error distribution against the double reference:\n"
      "             median, 99th percentile and max ULPs of floating outputs, exact-match rate of\n"
      "             integer and bool ones, on the shape cases and on adversarial inputs\n"
      "             (subnormals, large values, ill-conditioned points, NaN, inf, signed zeros);\n"
      "             forward ops only unless --ops names others\n"
      "  --report FILE.html  write the accuracy matrix as a self-contained HTML page\n"
      "             (implies --accuracy)\n"
      "  --dump-inputs DIR  write input, reference and output of the elementwise, sum, mean and\n"
      "             softmax cases to DIR (an existing directory; implies --accuracy)\n"
      "  --coverage fail (exit 1) when a device runs a kernel op (anygrad/kops.h) for a checked\n"
      "             dtype that no row launched; the list is printed after every full run\n"
      "  --version  print the anygrad version and exit\n"
      "  --bitwise  with --numerics portable: run every row on each device (default: every device\n"
      "             present) and on the CPU, and compare every output and gradient bit for bit\n"
      "             with the CPU's (NaN equals NaN; signed zeros differ); the CPU is compared with\n"
      "             itself at another thread count. Cells: same, DIFF, unsup (refused in portable\n"
      "             mode: never a pass or a failure), FAIL. Exit 1 when a cell differs or fails\n"
      "             (docs/numerics.md, \"Proving it\")\n" AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP
      "Cells: pass, FAIL, unsup (the backend reports AG_ERR_UNSUPPORTED), - (not an op of that\n"
      "dtype). After a full run, the kernel ops (anygrad/kops.h) each device runs that no row\n"
      "launched are listed. Exit status: 0 all pass, 1 a cell fails, a requested backend is\n"
      "unavailable or (--coverage) a kernel op has no row, 2 usage error.\n",
      (unsigned long long)AG_CONF_DEFAULT_SEED);
}


typedef struct col {
  ag_device dev;
  char label[24];
  bool skipped;
  char reason[256];
} col;

int ag_cmd_check(int argc, char **argv) {
  char *backends = NULL, *ops = NULL, *dtypes = NULL;
  uint64_t seed = AG_CONF_DEFAULT_SEED;
  bool verbose = false, json = false, accuracy = false, coverage = false;
  const char *report = NULL, *dump_dir = NULL;
  int mode = 0; /* 0 all, 1 forward only, 2 gradients only */
  bool bitwise = false, numerics_given = false;
  char *posdev[16];
  int nposdev = 0;
  enum { O_BACKEND = 256, O_OPS, O_DTYPE, O_SEED, O_VERBOSE, O_FORWARD, O_GRAD, O_JSON, O_VERSION, O_HELP, O_ACCURACY, O_REPORT,
         O_DUMP, O_COVERAGE, O_BITWISE };
  static const struct option opts[] = {
      {"backend", required_argument, NULL, O_BACKEND}, {"ops", required_argument, NULL, O_OPS},
      {"dtype", required_argument, NULL, O_DTYPE},     {"seed", required_argument, NULL, O_SEED},
      {"verbose", no_argument, NULL, O_VERBOSE},       {"forward", no_argument, NULL, O_FORWARD},
      {"grad", no_argument, NULL, O_GRAD},             {"json", no_argument, NULL, O_JSON},
      {"version", no_argument, NULL, O_VERSION},       {"help", no_argument, NULL, O_HELP},
      {"accuracy", no_argument, NULL, O_ACCURACY},     {"report", required_argument, NULL, O_REPORT},
      {"dump-inputs", required_argument, NULL, O_DUMP}, {"coverage", no_argument, NULL, O_COVERAGE},
      {"bitwise", no_argument, NULL, O_BITWISE},       AG_CLI_NUMERICS_OPT,
      AG_CLI_THREADS_OPT,                              {NULL, 0, NULL, 0}};
  for (int c = ag_cli_next_pos("check", argc, argv, opts, true); c != -1;
       c = ag_cli_next_pos("check", argc, argv, opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_HELP: check_usage(); return AG_EXIT_OK;
      case O_VERSION: printf("anygrad %s\n", ANYGRAD_VERSION_STRING); return AG_EXIT_OK;
      case O_BACKEND: backends = (char *)v; break;
      case O_OPS: ops = (char *)v; break;
      case O_DTYPE: dtypes = (char *)v; break;
      case O_SEED:
        if (!ag_cli_u64("check", "seed", v, &seed)) return AG_EXIT_USAGE;
        break;
      case O_VERBOSE: verbose = true; break;
      case O_FORWARD: mode = 1; break;
      case O_GRAD: mode = 2; break;
      case O_JSON: json = true; break;
      case O_ACCURACY: accuracy = true; break;
      case O_REPORT: report = v, accuracy = true; break;
      case O_DUMP: dump_dir = v, accuracy = true; break;
      case O_COVERAGE: coverage = true; break;
      case O_BITWISE: bitwise = true; break;
      case AG_CLI_POSITIONAL:
        if (nposdev == 16) {
          fprintf(stderr, "anygrad check: at most 16 devices\n");
          return AG_EXIT_USAGE;
        }
        posdev[nposdev++] = (char *)v;
        break;
      case AG_CLI_THREADS:
        if (!ag_cli_threads("check", v)) return AG_EXIT_USAGE;
        break;
      case AG_CLI_NUMERICS:
        if (!ag_cli_numerics("check", v)) return AG_EXIT_USAGE;
        numerics_given = true;
        break;
      default: return AG_EXIT_USAGE;
    }
  }

  if ((report && !*report) || (dump_dir && !*dump_dir)) {
    fprintf(stderr, "anygrad check: --report and --dump-inputs must not be empty\n");
    return AG_EXIT_USAGE;
  }
  struct stat dst;
  if (dump_dir && (stat(dump_dir, &dst) != 0 || !S_ISDIR(dst.st_mode))) {
    fprintf(stderr, "anygrad check: --dump-inputs %s: not an existing directory\n", dump_dir);
    return AG_EXIT_USAGE;
  }
  /* Outputs are checked before the run (a FIFO is not waited on, a device
   * node is not written, an unwritable place is found now, not after it). */
  if (report && ag_output_check(report, "--report output") != AG_OK) {
    fprintf(stderr, "anygrad check: %s\n", ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  if (dump_dir) {
    char probe[4096];
    int len = snprintf(probe, sizeof probe, "%s/anygrad-check.bin", dump_dir);
    if (len < 0 || (size_t)len >= sizeof probe || ag_output_check(probe, "--dump-inputs file") != AG_OK) {
      fprintf(stderr, "anygrad check: --dump-inputs %s: %s\n", dump_dir,
              len < 0 || (size_t)len >= sizeof probe ? "the path is too long" : ag_last_error());
      return AG_EXIT_RUNTIME;
    }
  }
  /* Kernel-op coverage needs every row: a subset leaves ops unlaunched. */
  if (coverage && (ops || mode != 0 || accuracy)) {
    fprintf(stderr, "anygrad check: --coverage runs every row: not with --ops, --forward, --grad or --accuracy\n");
    return AG_EXIT_USAGE;
  }
  if (bitwise && accuracy) {
    fprintf(stderr, "anygrad check: --bitwise compares bits: not with --accuracy, --report or --dump-inputs\n");
    return AG_EXIT_USAGE;
  }
  /* The mode is named, never taken by default: the portable one is proven,
   * the default one only measured (it promises accuracy, not bits). */
  const char *env_mode = getenv("AG_NUMERICS");
  if (bitwise && !numerics_given && !(env_mode && *env_mode)) {
    fprintf(stderr, "anygrad check: --bitwise needs the mode named: --numerics portable (or AG_NUMERICS=portable); "
                    "--numerics default measures how far the default mode is from bitwise\n");
    return AG_EXIT_USAGE;
  }
  const bool full = !ops && mode == 0 && !accuracy;
  /* the gradient rows compare with finite differences, not the reference */
  if (accuracy && mode == 0) mode = 1;

  /* columns: requested or every backend kind (device 0) */
  col cols[16];
  int ncol = 0;
  char bbuf[256], *bl[32];
  int ndevs = backends ? ag_cli_list("check", "backend", backends, bbuf, sizeof bbuf, bl, 16) : 0;
  if (ndevs < 0) return AG_EXIT_USAGE;
  for (int i = 0; i < nposdev; i++) bl[ndevs++] = posdev[i];
  if (ndevs > 16) {
    fprintf(stderr, "anygrad check: at most 16 devices, got %d\n", ndevs);
    return AG_EXIT_USAGE;
  }
  if (ndevs) {
    /* A backend asked for by name must run: absent is an error, not an
     * empty table. */
    for (int i = 0; i < ndevs; i++) {
      col *c = &cols[ncol++];
      memset(c, 0, sizeof *c);
      snprintf(c->label, sizeof c->label, "%s", bl[i]);
      int rc = ag_cli_device("check", bl[i], &c->dev);
      if (rc != AG_EXIT_OK) return rc;
    }
  } else {
    int nk = ag_backend_count();
    for (int k = 0; k < nk && ncol < (int)(sizeof cols / sizeof cols[0]); k++) {
      col *c = &cols[ncol++];
      memset(c, 0, sizeof *c);
      const char *why = NULL;
      c->dev = (ag_device){(int16_t)k, 0};
      c->skipped = !ag_backend_available((ag_backend_kind)k, &why);
      snprintf(c->reason, sizeof c->reason, "%s", why ? why : "unavailable");
    }
  }
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) ag_device_str(cols[i].dev, cols[i].label, sizeof cols[i].label);
    else if (!backends) snprintf(cols[i].label, sizeof cols[i].label, "%s", ag_backend_name((ag_backend_kind)cols[i].dev.backend));

  /* every row fits: the table has about 215 (it used to stop at 128, so
   * the last rows, most of the gradient checks, never ran) */
  enum { MAX_ROWS = 1024 };
  static int opsel[MAX_ROWS];
  int nops = 0;
  if (ag_conf_op_count() > MAX_ROWS) {
    fprintf(stderr, "anygrad check: %d rows, more than the %d this command holds\n", ag_conf_op_count(), MAX_ROWS);
    return AG_EXIT_RUNTIME;
  }
  if (ops) {
    static char obuf[16384];
    static char *ol[MAX_ROWS];
    int n = ag_cli_list("check", "ops", ops, obuf, sizeof obuf, ol, MAX_ROWS);
    if (n < 0) return AG_EXIT_USAGE;
    for (int i = 0; i < n; i++) {
      int o = ag_conf_op_find(ol[i]);
      if (o < 0) {
        fprintf(stderr, "anygrad check: unknown op '%s' (see --help)\n", ol[i]);
        return AG_EXIT_USAGE;
      }
      opsel[nops++] = o;
    }
  } else {
    for (int i = 0; i < ag_conf_op_count(); i++) {
      bool grad = !strncmp(ag_conf_op_name(i), "grad_", 5);
      if (mode == 0 || (mode == 2) == grad) opsel[nops++] = i;
    }
  }
  ag_dtype dts[AG_DTYPE_COUNT];
  int ndt = 0;
  if (dtypes) {
    char dbuf[128], *dl[AG_DTYPE_COUNT];
    int n = ag_cli_list("check", "dtype", dtypes, dbuf, sizeof dbuf, dl, AG_DTYPE_COUNT);
    if (n < 0) return AG_EXIT_USAGE;
    for (int i = 0; i < n && ndt < AG_DTYPE_COUNT; i++)
      if (ag_dtype_parse(dl[i], &dts[ndt]) == AG_OK) ndt++;
      else {
        fprintf(stderr, "anygrad check: %s\n", ag_last_error());
        return AG_EXIT_USAGE;
      }
  } else {
    for (int i = 0; i < AG_DTYPE_COUNT; i++) dts[ndt++] = (ag_dtype)i;
  }

  if (bitwise) {
    ag_device devs[16];
    for (int i = 0; i < ncol; i++) devs[i] = cols[i].dev;
    ag_bitwise_opts bo = {.devices = devs, .ndevices = ncol, .all_devices = ndevs == 0, .rows = opsel, .nrows = nops,
                          .dts = dts, .ndt = ndt, .seed = seed, .json = json, .verbose = verbose, .max_diffs = 10,
                          .full = full, .coverage = coverage};
    return ag_check_bitwise(&bo);
  }

  /* With --json the JSON object is the only thing on stdout. */
  FILE *tbl = json ? fopen("/dev/null", "w") : stdout;
  if (!tbl) {
    fprintf(stderr, "anygrad check: cannot open /dev/null\n");
    return AG_EXIT_RUNTIME;
  }
  bool keep = json || accuracy;
  ag_check_cell *cells = keep ? calloc((size_t)(nops * ncol * ndt + 1), sizeof *cells) : NULL;
  int ncells = 0;
  if (keep && !cells) {
    fclose(tbl);
    fprintf(stderr, "anygrad check: out of host memory\n");
    return AG_EXIT_RUNTIME;
  }
  fprintf(tbl, "anygrad check: seed 0x%llx (reproduce with --seed 0x%llx), %d CPU threads\n", (unsigned long long)seed,
         (unsigned long long)seed, ag_get_num_threads());
  for (int i = 0; i < ncol; i++)
    if (cols[i].skipped) fprintf(tbl, "  %s: skipped (%s)\n", cols[i].label, cols[i].reason);
  fprintf(tbl, "\n%-19s", "op");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) {
      fprintf(tbl, " | %-*s", ndt * 6 - 1, cols[i].label);
    }
  fprintf(tbl, "\n%-19s", "");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) {
      fprintf(tbl, " |");
      for (int d = 0; d < ndt; d++) fprintf(tbl, " %-5s", ag_dtype_name(dts[d]));
    }
  fprintf(tbl, "\n");

  int fails = 0, passes = 0, unsup = 0;
  size_t fcap = 4096, flen = 0;
  char *flog = malloc(fcap);
  if (flog) flog[0] = 0;
  ag_conf_acc acc = {.dump_dir = dump_dir};
  /* launches per kernel op of each column, tallied around every run */
  const int nk = ag_conf_kop_count();
  int64_t *kcount = calloc((size_t)(ncol * nk + 1), sizeof *kcount);
  if (!kcount) {
    free(cells);
    free(flog);
    if (tbl != stdout) fclose(tbl);
    fprintf(stderr, "anygrad check: out of host memory\n");
    return AG_EXIT_RUNTIME;
  }
  for (int oi = 0; oi < nops; oi++) {
    fprintf(tbl, "%-19s", ag_conf_op_name(opsel[oi]));
    fflush(stdout);
    for (int i = 0; i < ncol; i++) {
      if (cols[i].skipped) continue;
      fprintf(tbl, " |");
      for (int d = 0; d < ndt; d++) {
        char msg[1024];
        bool tally = ag_optrace_tally_begin(cols[i].dev, kcount + (size_t)i * (size_t)nk, nk) == AG_OK;
        ag_conf_result r = ag_conf_run_acc(opsel[oi], dts[d], cols[i].dev, seed, verbose ? stderr : NULL, msg,
                                           sizeof msg, accuracy ? &acc : NULL);
        if (tally) ag_optrace_tally_end();
        ag_error_clear();
        if (acc.dump_error[0]) { /* a file of --dump-inputs could not be written: stop */
          fprintf(stderr, "anygrad check: %s\n", acc.dump_error);
          ag_conf_acc_free(&acc);
          free(kcount);
          free(cells);
          free(flog);
          if (tbl != stdout) fclose(tbl);
          return AG_EXIT_RUNTIME;
        }
        fprintf(tbl, " %-5s", ag_conf_result_name(r));
        if (cells) {
          ag_check_cell *ce = &cells[ncells++];
          *ce = (ag_check_cell){.op = ag_conf_op_name(opsel[oi]), .device = cols[i].label, .dtype = dts[d], .result = r};
          if (accuracy) {
            ce->has_acc = true;
            ce->shapes = ag_conf_dist_stats(&acc.shapes);
            ce->adversarial = ag_conf_dist_stats(&acc.adversarial);
          }
        }
        ag_conf_acc_free(&acc);
        fflush(stdout);
        passes += r == AG_CONF_PASS;
        unsup += r == AG_CONF_UNSUPPORTED;
        if (r == AG_CONF_FAIL) {
          fails++;
          size_t need = strlen(msg) + 8;
          if (flog && flen + need >= fcap) {
            char *nf = realloc(flog, fcap = 2 * fcap + need);
            if (!nf) {
              free(flog);
              flog = NULL;
            } else flog = nf;
          }
          if (flog) flen += (size_t)sprintf(flog + flen, "  %s\n", msg);
        }
      }
    }
    fprintf(tbl, "\n");
  }
  fprintf(tbl, "\n%d pass, %d fail, %d unsupported\n", passes, fails, unsup);
  if (fails && flog) fprintf(tbl, "\nfailures:\n%s", flog);
  if (accuracy) ag_check_accuracy_table(tbl, cells, ncells);

  /* Kernel ops a device runs in a checked dtype that no row launched. */
  const char *unc_dev[512], *unc_kop[512];
  int nunc = 0;
  for (int i = 0; full && i < ncol; i++) {
    if (cols[i].skipped) continue;
    int ndev = 0, nrun = 0;
    char line[2048];
    size_t len = 0;
    line[0] = 0;
    for (int k = 0; k < nk; k++) {
      char dl[64];
      size_t dlen = 0;
      dl[0] = 0;
      for (int d = 0; d < ndt; d++)
        if (ag_conf_kop_supported(cols[i].dev, k, dts[d]))
          dlen += (size_t)snprintf(dl + dlen, sizeof dl - dlen, "%s%s", dlen ? " " : "", ag_dtype_name(dts[d]));
      ag_error_clear();
      if (!dlen) continue;
      nrun++;
      if (kcount[(size_t)i * (size_t)nk + (size_t)k]) continue;
      ndev++;
      if (nunc < (int)(sizeof unc_kop / sizeof *unc_kop)) {
        unc_dev[nunc] = cols[i].label;
        unc_kop[nunc++] = ag_conf_kop_name(k);
      }
      if (len < sizeof line)
        len += (size_t)snprintf(line + len, sizeof line - len, "\n  %s (%s)", ag_conf_kop_name(k), dl);
    }
    if (ndev)
      fprintf(tbl, "\n%s runs %d kernel op%s that no row launched:%s\n", cols[i].label, ndev, ndev == 1 ? "" : "s",
              line);
    else
      fprintf(tbl, "\n%s: every kernel op it runs (%d of %d) was launched by a row\n", cols[i].label, nrun, nk);
  }

  /* the failure lines as a NULL-terminated array for the JSON writer */
  const char *flines[4096];
  int nfl = 0;
  for (char *line = flog; line && *line && nfl < 4095;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    flines[nfl++] = line + strspn(line, " ");
    line = nl ? nl + 1 : line + strlen(line);
  }
  flines[nfl] = NULL;
  const char *skl[16], *skr[16];
  int nsk = 0;
  for (int i = 0; i < ncol; i++)
    if (cols[i].skipped) skl[nsk] = cols[i].label, skr[nsk++] = cols[i].reason;
  ag_check_summary sum = {.seed = seed, .threads = ag_get_num_threads(), .accuracy = accuracy, .nskipped = nsk,
                          .skipped = skl, .skipped_reason = skr, .cells = cells, .ncells = ncells,
                          .pass = passes, .fail = fails, .unsupported = unsup, .failures = flines,
                          .coverage = full, .nuncovered = nunc, .uncovered_device = unc_dev,
                          .uncovered_kop = unc_kop};
  if (json) ag_check_json(stdout, &sum);
  int rc = fails || (coverage && nunc) ? AG_EXIT_RUNTIME : AG_EXIT_OK;
  if (report) {
    char err[256];
    if (ag_check_html_write(report, &sum, err, sizeof err) != 0) {
      fprintf(stderr, "anygrad check: %s\n", err);
      rc = AG_EXIT_RUNTIME;
    } else {
      fprintf(json ? stderr : stdout, "anygrad check: wrote %s (open in a browser)\n", report);
    }
  }
  free(kcount);
  free(cells);
  free(flog);
  if (tbl != stdout) fclose(tbl);
  return rc;
}
