/* `anygrad check --numerics portable --bitwise [devices]`: the proof of the
 * portable mode (docs/numerics.md, "Proving it"). Every conformance row x
 * dtype runs on the CPU (the reference), on the CPU again with another
 * thread count (the reference must not depend on it), and on each device;
 * every tensor a row reads back is compared bit for bit with the
 * reference's. A cell is identical, differs, is refused (the device or the
 * reference has no portable kernel: never a pass, never a failure) or
 * fails (an error where the mode was accepted). */
#include "check_bitwise.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "anygrad/optrace.h"
#include "cli.h"
#include "conformance.h"

enum { C_SAME, C_DIFF, C_REFUSED, C_FAILED, C_UNCHECKED, C_NA };
static const char *const k_cell[] = {"same", "DIFF", "unsup", "FAIL", "noref", "-"};
static const char *const k_cell_json[] = {"identical", "differ", "refused", "failed", "unchecked", "na"};

typedef struct note {
  int row;
  ag_dtype dt;
  char text[640];
  ag_conf_bitdiff d; /* differences: the first element (index -1: structural) */
  ag_dtype bdt;      /* its dtype */
  int64_t elements;  /* differing elements of the cell */
} note;

typedef struct notes {
  note *v;
  int n, cap;
} notes;

typedef struct column {
  ag_device dev;
  char label[32];
  char against[64];
  bool skipped; /* backend absent (default device list only) */
  bool refuses; /* the device refuses portable numerics */
  char reason[512];
  int64_t count[C_NA];
  notes diffs, refused, failed;
  int64_t *kcount; /* launches per kernel op (ag_conf_kop_*) of this column's runs */
  char unproven[2048]; /* kernel ops in its portable list that no row launched */
  int nunproven, nportable;
} column;

static void note_add(notes *ns, int row, ag_dtype dt, const char *text, const ag_conf_bitdiff *d, ag_dtype bdt,
                     int64_t elements) {
  if (ns->n == ns->cap) {
    int cap = ns->cap ? 2 * ns->cap : 64;
    note *v = realloc(ns->v, (size_t)cap * sizeof *v);
    if (!v) return; /* the count is kept; only the description is lost */
    ns->v = v;
    ns->cap = cap;
  }
  note *e = &ns->v[ns->n++];
  e->row = row;
  e->dt = dt;
  size_t len = text ? strlen(text) : 0; /* cut, not refused, when long */
  if (len >= sizeof e->text) len = sizeof e->text - 1;
  if (len) memcpy(e->text, text, len);
  e->text[len] = 0;
  e->d = d ? *d : (ag_conf_bitdiff){.index = -1};
  e->bdt = bdt;
  e->elements = elements;
}

/* The cell of device x's capture against the reference's. */
static int classify(ag_conf_result rx, const char *mx, const ag_conf_capture *cx, ag_conf_result rr,
                    const char *mr, const ag_conf_capture *cr, column *col, int row, ag_dtype dt) {
  char why[640];
  if (rx == AG_CONF_NA) return C_NA;
  if (rx == AG_CONF_UNSUPPORTED) {
    note_add(&col->refused, row, dt, mx, NULL, dt, 0);
    return C_REFUSED;
  }
  if (rr == AG_CONF_UNSUPPORTED) {
    snprintf(why, sizeof why, "the cpu reference refuses: %s", mr);
    note_add(&col->refused, row, dt, why, NULL, dt, 0);
    return C_REFUSED;
  }
  if (rx == AG_CONF_FAIL) {
    note_add(&col->failed, row, dt, mx, NULL, dt, 0);
    return C_FAILED;
  }
  if (rr == AG_CONF_FAIL) return C_UNCHECKED;
  ag_conf_bitdiff d;
  int64_t nd = ag_conf_capture_compare(cx, cr, why, sizeof why, &d);
  if (!nd) return C_SAME;
  note_add(&col->diffs, row, dt, why, &d, d.dt, nd);
  return C_DIFF;
}

static void json_num(FILE *f, double v) {
  if (isnan(v)) fprintf(f, "\"nan\"");
  else if (isinf(v)) fprintf(f, v > 0 ? "\"inf\"" : "\"-inf\"");
  else fprintf(f, "%.17g", v);
}

static void json_notes(FILE *f, const char *key, const notes *ns, bool diff) {
  fprintf(f, ", \"%s\": [", key);
  for (int i = 0; i < ns->n; i++) {
    const note *e = &ns->v[i];
    fprintf(f, "%s{\"op\": ", i ? ", " : "");
    ag_cli_json_str(f, ag_conf_op_name(e->row));
    fprintf(f, ", \"dtype\": \"%s\", \"%s\": ", ag_dtype_name(e->dt), diff ? "where" : "reason");
    ag_cli_json_str(f, e->text);
    if (diff) {
      int w = (int)ag_dtype_size(e->bdt) * 2;
      fprintf(f, ", \"elements\": %" PRId64 ", \"index\": %" PRId64, e->elements, e->d.index);
      if (e->d.index >= 0) {
        fprintf(f, ", \"bits\": \"0x%0*" PRIx64 "\", \"cpu_bits\": \"0x%0*" PRIx64 "\", \"value\": ", w, e->d.a_bits, w,
                e->d.b_bits);
        json_num(f, e->d.a);
        fprintf(f, ", \"cpu_value\": ");
        json_num(f, e->d.b);
        fprintf(f, ", \"ulps\": ");
        if (e->d.ulps == INT64_MAX) fprintf(f, "null");
        else fprintf(f, "%" PRId64, e->d.ulps);
      }
    }
    fprintf(f, "}");
  }
  fprintf(f, "]");
}

/* "add f32 f16 bf16; exp f32; ..." of the refused cells, and up to three
 * reasons: of cells of distinct dtypes first (f64 is refused for one
 * reason everywhere), then of distinct rows. */
static void print_refused(FILE *f, const column *c) {
  const notes *ns = &c->refused;
  if (!ns->n) return;
  fprintf(f, "  refused (%d cell%s, unsupported in portable mode):", ns->n, ns->n == 1 ? "" : "s");
  int col = 80, last = -1;
  for (int i = 0; i < ns->n; i++) {
    const note *e = &ns->v[i];
    char item[64];
    int len = e->row != last ? snprintf(item, sizeof item, "%s %s", ag_conf_op_name(e->row), ag_dtype_name(e->dt))
                             : snprintf(item, sizeof item, " %s", ag_dtype_name(e->dt));
    if (e->row != last && last >= 0) fputc(';', f);
    if (e->row != last && col + len > 100) {
      fprintf(f, "\n   ");
      col = 3;
    }
    if (e->row != last) fputc(' ', f);
    fputs(item, f);
    col += len + 2;
    last = e->row;
  }
  fprintf(f, "\n");
  int shown[3], nshown = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < ns->n && nshown < 3; i++) {
      bool dup = false;
      for (int k = 0; k < nshown; k++)
        dup = dup || shown[k] == i ||
              (pass == 0 ? ns->v[shown[k]].dt == ns->v[i].dt : ns->v[shown[k]].row == ns->v[i].row);
      if (!dup) shown[nshown++] = i;
    }
  for (int k = 0; k < nshown; k++) fprintf(f, "    e.g. %s\n", ns->v[shown[k]].text);
}

int ag_check_bitwise(const ag_bitwise_opts *o) {
  column cols[64];
  int ncol = 0;
  memset(cols, 0, sizeof cols);
  /* column 0: the CPU against itself with another thread count */
  const int threads = ag_get_num_threads(), alt = threads == 1 ? 2 : 1;
  cols[0].dev = AG_CPU;
  snprintf(cols[0].against, sizeof cols[0].against, "cpu:0 with %d thread%s", threads, threads == 1 ? "" : "s");
  ncol = 1;
  if (o->all_devices) {
    int nk = ag_backend_count();
    for (int k = 0; k < nk; k++) {
      const char *why = NULL;
      if (!ag_backend_available((ag_backend_kind)k, &why)) {
        if (ncol == 64) break;
        column *c = &cols[ncol++];
        c->skipped = true;
        snprintf(c->label, sizeof c->label, "%s", ag_backend_name((ag_backend_kind)k));
        snprintf(c->reason, sizeof c->reason, "%s", why ? why : "unavailable");
        continue;
      }
      int nd = ag_backend_device_count((ag_backend_kind)k);
      for (int i = 0; i < nd && ncol < 64; i++) {
        ag_device d = {(int16_t)k, (int16_t)i};
        if (ag_device_eq(d, AG_CPU)) continue;
        cols[ncol++].dev = d;
      }
    }
  } else {
    for (int i = 0; i < o->ndevices && ncol < 64; i++) {
      bool dup = false;
      for (int k = 0; k < ncol; k++) dup = dup || (!cols[k].skipped && ag_device_eq(cols[k].dev, o->devices[i]));
      if (!dup) cols[ncol++].dev = o->devices[i];
    }
  }
  for (int i = 0; i < ncol; i++) {
    column *c = &cols[i];
    if (c->skipped) continue;
    ag_device_str(c->dev, c->label, sizeof c->label);
    if (i) snprintf(c->against, sizeof c->against, "cpu:0");
    else snprintf(c->label, sizeof c->label, "cpu:0 (%d thr)", alt);
    if (ag_device_numerics_check(c->dev, ag_get_numerics()) != AG_OK) {
      c->refuses = true;
      snprintf(c->reason, sizeof c->reason, "%s", ag_last_error());
    }
    ag_error_clear();
  }

  FILE *tbl = o->json ? fopen("/dev/null", "w") : stdout;
  if (!tbl) {
    fprintf(stderr, "anygrad check: cannot open /dev/null\n");
    return AG_EXIT_RUNTIME;
  }
  unsigned char *cells = calloc((size_t)o->nrows * (size_t)o->ndt * (size_t)ncol + 1, 1);
  if (!cells) {
    if (tbl != stdout) fclose(tbl);
    fprintf(stderr, "anygrad check: out of host memory\n");
    return AG_EXIT_RUNTIME;
  }
  fprintf(tbl,
          "anygrad check --bitwise: numerics %s, seed 0x%llx (reproduce with --seed 0x%llx); reference cpu:0 with "
          "%d CPU thread%s, checked against itself with %d\n",
          ag_numerics_name(ag_get_numerics()), (unsigned long long)o->seed, (unsigned long long)o->seed, threads,
          threads == 1 ? "" : "s", alt);
  if (ag_get_numerics() != AG_NUMERICS_PORTABLE)
    fprintf(tbl, "  (numerics %s promises accuracy, not bits: differences are measured here, the portable mode "
                 "is the one proven)\n",
            ag_numerics_name(ag_get_numerics()));
  for (int i = 0; i < ncol; i++) {
    if (cols[i].skipped) fprintf(tbl, "  %s: skipped (%s)\n", cols[i].label, cols[i].reason);
    else if (cols[i].refuses) fprintf(tbl, "  %s: every cell refused (%s)\n", cols[i].label, cols[i].reason);
  }
  /* a column is as wide as its dtypes' cells or its label */
  int pad[64];
  for (int i = 0; i < ncol; i++) {
    int l = (int)strlen(cols[i].label) - (o->ndt * 6 - 1);
    pad[i] = l > 0 ? l : 0;
  }
  fprintf(tbl, "\n%-19s", "op");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) fprintf(tbl, " | %-*s", o->ndt * 6 - 1, cols[i].label);
  fprintf(tbl, "\n%-19s", "");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) {
      fprintf(tbl, " |");
      for (int d = 0; d < o->ndt; d++) fprintf(tbl, " %-5s", ag_dtype_name(o->dts[d]));
      fprintf(tbl, "%*s", pad[i], "");
    }
  fprintf(tbl, "\n");

  const int nk = ag_conf_kop_count();
  for (int i = 0; i < ncol; i++)
    if (!(cols[i].kcount = calloc((size_t)nk, sizeof *cols[i].kcount))) {
      for (int k = 0; k < i; k++) free(cols[k].kcount);
      free(cells);
      if (tbl != stdout) fclose(tbl);
      fprintf(stderr, "anygrad check: out of host memory\n");
      return AG_EXIT_RUNTIME;
    }
  FILE *log = o->verbose ? stderr : NULL;
  for (int r = 0; r < o->nrows; r++) {
    const int row = o->rows[r];
    /* every column's cells of this row, printed once the row is done */
    for (int d = 0; d < o->ndt; d++) {
      const ag_dtype dt = o->dts[d];
      char mr[1024], mx[1024];
      ag_conf_capture ref = {0}, x = {0};
      bool tally = ag_optrace_tally_begin(AG_CPU, cols[0].kcount, nk) == AG_OK;
      ag_conf_result rr = ag_conf_run_capture(row, dt, AG_CPU, o->seed, log, mr, sizeof mr, &ref);
      if (tally) ag_optrace_tally_end();
      for (int i = 0; i < ncol; i++) {
        column *c = &cols[i];
        int cell = C_NA;
        if (c->skipped || rr == AG_CONF_NA) {
          cell = C_NA;
        } else if (c->refuses) {
          note_add(&c->refused, row, dt, c->reason, NULL, dt, 0);
          cell = C_REFUSED;
        } else if (rr == AG_CONF_UNSUPPORTED) {
          /* nothing to compare with: the device is not run */
          char why[1100];
          snprintf(why, sizeof why, "the cpu reference refuses: %s", mr);
          note_add(&c->refused, row, dt, i == 0 ? mr : why, NULL, dt, 0);
          cell = C_REFUSED;
        } else if (i == 0) {
          /* the reference against itself with the other thread count */
          ag_set_num_threads(alt);
          ag_conf_result rx = ag_conf_run_capture(row, dt, AG_CPU, o->seed, log, mx, sizeof mx, &x);
          ag_set_num_threads(threads);
          if (rr == AG_CONF_FAIL) {
            note_add(&c->failed, row, dt, mr, NULL, dt, 0);
            cell = C_FAILED;
          } else {
            cell = classify(rx, mx, &x, rr, mr, &ref, c, row, dt);
          }
        } else {
          tally = ag_optrace_tally_begin(c->dev, c->kcount, nk) == AG_OK;
          ag_conf_result rx = ag_conf_run_capture(row, dt, c->dev, o->seed, log, mx, sizeof mx, &x);
          if (tally) ag_optrace_tally_end();
          cell = classify(rx, mx, &x, rr, mr, &ref, c, row, dt);
        }
        ag_conf_capture_free(&x);
        ag_error_clear();
        cells[((size_t)r * (size_t)o->ndt + (size_t)d) * (size_t)ncol + (size_t)i] = (unsigned char)cell;
        if (cell != C_NA) c->count[cell]++;
      }
      ag_conf_capture_free(&ref);
    }
    fprintf(tbl, "%-19s", ag_conf_op_name(row));
    for (int i = 0; i < ncol; i++) {
      if (cols[i].skipped) continue;
      fprintf(tbl, " |");
      for (int d = 0; d < o->ndt; d++)
        fprintf(tbl, " %-5s", k_cell[cells[((size_t)r * (size_t)o->ndt + (size_t)d) * (size_t)ncol + (size_t)i]]);
      fprintf(tbl, "%*s", pad[i], "");
    }
    fprintf(tbl, "\n");
    fflush(tbl);
  }

  /* After every row: the kernel ops each device lists as portable (in a
   * checked dtype) that no row launched, so unproven. */
  for (int i = 0; o->full && i < ncol; i++) {
    column *c = &cols[i];
    if (c->skipped || c->refuses) continue;
    size_t len = 0;
    for (int k = 0; k < nk; k++) {
      char dl[64];
      size_t dlen = 0;
      dl[0] = 0;
      for (int d = 0; d < o->ndt; d++)
        if (ag_conf_kop_supported(c->dev, k, o->dts[d]))
          dlen += (size_t)snprintf(dl + dlen, sizeof dl - dlen, "%s%s", dlen ? " " : "", ag_dtype_name(o->dts[d]));
      ag_error_clear();
      if (!dlen) continue;
      c->nportable++;
      if (c->kcount[k]) continue;
      c->nunproven++;
      if (len < sizeof c->unproven)
        len += (size_t)snprintf(c->unproven + len, sizeof c->unproven - len, "%s%s (%s)", len ? ", " : "",
                                ag_conf_kop_name(k), dl);
    }
  }

  /* per device: the counts, the first differences, the refused cells */
  int64_t tot[C_NA] = {0};
  bool bad = false, uncovered = false;
  fprintf(tbl, "\n");
  for (int i = 0; i < ncol; i++) {
    column *c = &cols[i];
    if (c->skipped) continue;
    for (int k = 0; k < C_NA; k++) tot[k] += c->count[k];
    bad = bad || c->count[C_DIFF] || c->count[C_FAILED];
    fprintf(tbl, "%s against %s: %" PRId64 " identical, %" PRId64 " differ, %" PRId64 " refused, %" PRId64 " failed",
            i ? c->label : "cpu:0", i ? c->against : c->against, c->count[C_SAME], c->count[C_DIFF],
            c->count[C_REFUSED], c->count[C_FAILED]);
    if (i == 0) fprintf(tbl, " (run with %d thread%s)", alt, alt == 1 ? "" : "s");
    if (c->count[C_UNCHECKED]) fprintf(tbl, ", %" PRId64 " unchecked (the reference failed)", c->count[C_UNCHECKED]);
    fprintf(tbl, "\n");
    if (c->diffs.n) {
      fprintf(tbl, "  differences (%s value vs cpu value):\n", i ? c->label : "other thread count");
      for (int k = 0; k < c->diffs.n && k < o->max_diffs; k++)
        fprintf(tbl, "    %s %s: %s\n", ag_conf_op_name(c->diffs.v[k].row), ag_dtype_name(c->diffs.v[k].dt),
                c->diffs.v[k].text);
      if (c->diffs.n > o->max_diffs)
        fprintf(tbl, "    ... %d more differing cell%s (--json lists them all)\n", c->diffs.n - o->max_diffs,
                c->diffs.n - o->max_diffs == 1 ? "" : "s");
    }
    if (c->failed.n) {
      fprintf(tbl, "  failures:\n");
      for (int k = 0; k < c->failed.n; k++) fprintf(tbl, "    %s\n", c->failed.v[k].text);
    }
    if (c->refuses) fprintf(tbl, "  refused: every cell (%s)\n", c->reason);
    else print_refused(tbl, c);
    if (c->nunproven) {
      uncovered = true;
      fprintf(tbl, "  %d kernel op%s it runs in %s numerics that no row launched (unproven): %s\n", c->nunproven,
              c->nunproven == 1 ? "" : "s", ag_numerics_name(ag_get_numerics()), c->unproven);
    } else if (o->full && c->nportable) {
      fprintf(tbl, "  every kernel op it runs in %s numerics (%d of %d) was launched by a row\n",
              ag_numerics_name(ag_get_numerics()), c->nportable, nk);
    }
  }
  fprintf(tbl, "\n%" PRId64 " identical, %" PRId64 " differ, %" PRId64 " refused, %" PRId64 " failed: %s\n", tot[C_SAME],
          tot[C_DIFF], tot[C_REFUSED], tot[C_FAILED],
          bad ? "NOT bitwise identical"
              : tot[C_SAME] ? "every cell that ran is bitwise identical"
                            : "nothing ran in portable mode (every cell refused)");

  if (o->json) {
    FILE *f = stdout;
    fprintf(f, "{\"mode\": \"bitwise\", \"numerics\": \"%s\", \"seed\": %llu, \"threads\": %d, \"cpu_threads_against\": %d",
            ag_numerics_name(ag_get_numerics()), (unsigned long long)o->seed, threads, alt);
    fprintf(f, ", \"identical\": %" PRId64 ", \"differ\": %" PRId64 ", \"refused\": %" PRId64 ", \"failed\": %" PRId64
               ", \"unchecked\": %" PRId64 ", \"devices\": [",
            tot[C_SAME], tot[C_DIFF], tot[C_REFUSED], tot[C_FAILED], tot[C_UNCHECKED]);
    bool first = true;
    for (int i = 0; i < ncol; i++) {
      column *c = &cols[i];
      fprintf(f, "%s{\"device\": ", first ? "" : ", ");
      first = false;
      ag_cli_json_str(f, c->skipped ? c->label : ag_device_str(c->dev, (char[32]){0}, 32));
      if (c->skipped) {
        fprintf(f, ", \"skipped\": true, \"reason\": ");
        ag_cli_json_str(f, c->reason);
        fprintf(f, "}");
        continue;
      }
      fprintf(f, ", \"against\": ");
      ag_cli_json_str(f, c->against);
      if (i == 0) fprintf(f, ", \"threads\": %d", alt);
      fprintf(f, ", \"portable\": %s", c->refuses ? "false" : "true");
      if (c->refuses) {
        fprintf(f, ", \"reason\": ");
        ag_cli_json_str(f, c->reason);
      }
      for (int k = 0; k < C_NA; k++) fprintf(f, ", \"%s\": %" PRId64, k_cell_json[k], c->count[k]);
      json_notes(f, "differences", &c->diffs, true);
      json_notes(f, "refused_cells", &c->refused, false);
      json_notes(f, "failures", &c->failed, false);
      if (o->full) {
        fprintf(f, ", \"portable_kernel_ops\": %d, \"unproven\": ", c->nportable);
        ag_cli_json_str(f, c->unproven);
      }
      fprintf(f, "}");
    }
    fprintf(f, "], \"cells\": [");
    first = true;
    for (int r = 0; r < o->nrows; r++)
      for (int d = 0; d < o->ndt; d++)
        for (int i = 0; i < ncol; i++) {
          int cell = cells[((size_t)r * (size_t)o->ndt + (size_t)d) * (size_t)ncol + (size_t)i];
          if (cell == C_NA) continue;
          fprintf(f, "%s{\"op\": ", first ? "" : ", ");
          first = false;
          ag_cli_json_str(f, ag_conf_op_name(o->rows[r]));
          fprintf(f, ", \"dtype\": \"%s\", \"device\": ", ag_dtype_name(o->dts[d]));
          ag_cli_json_str(f, ag_device_str(cols[i].dev, (char[32]){0}, 32));
          fprintf(f, ", \"against\": ");
          ag_cli_json_str(f, cols[i].against);
          fprintf(f, ", \"result\": \"%s\"}", k_cell_json[cell]);
        }
    fprintf(f, "]}\n");
  }
  for (int i = 0; i < ncol; i++) {
    free(cols[i].kcount);
    free(cols[i].diffs.v);
    free(cols[i].refused.v);
    free(cols[i].failed.v);
  }
  free(cells);
  if (tbl != stdout) fclose(tbl);
  return bad || (o->coverage && uncovered) ? AG_EXIT_RUNTIME : AG_EXIT_OK;
}
