/* Output of `anygrad check`: the JSON document, the accuracy table, and the
 * self-contained HTML accuracy page (docs/conformance.md). The page generator
 * takes the JSON document, so any command that produces cells of the same
 * form can publish the same page. */
#ifndef AG_TOOLS_CONFORMANCE_HTML_H
#define AG_TOOLS_CONFORMANCE_HTML_H

#include <stdbool.h>
#include <stdio.h>

#include "conformance.h"

/* One op x device x dtype cell. Strings are borrowed. */
typedef struct ag_check_cell {
  const char *op;
  const char *device;
  ag_dtype dtype;
  ag_conf_result result;
  bool has_acc;
  ag_conf_stats shapes, adversarial;
} ag_check_cell;

/* A whole run; every pointer borrowed. failures is NULL-terminated. */
typedef struct ag_check_summary {
  uint64_t seed;
  int threads;
  bool accuracy;
  int nskipped;
  const char **skipped, **skipped_reason;
  const ag_check_cell *cells;
  int ncells;
  int pass, fail, unsupported;
  const char **failures;
  /* kernel ops a device runs that no row launched (coverage: computed,
   * only when every row ran): device label and kernel-op name each */
  bool coverage;
  int nuncovered;
  const char **uncovered_device, **uncovered_kop;
} ag_check_summary;

/* The `anygrad check --json` document (one object and a newline) on f. */
void ag_check_json(FILE *f, const ag_check_summary *s);

/* The accuracy cells as a text table on f. */
void ag_check_accuracy_table(FILE *f, const ag_check_cell *cells, int ncells);

/* Write the accuracy page for a JSON document with a "cells" array whose
 * entries have "op", "device", "dtype", "result" and "accuracy" (the form of
 * ag_check_json) to path. title is shown as the heading. Returns 0, or -1
 * with a message in err (err_len bytes) when the file cannot be written. */
int ag_acc_html_write(const char *path, const char *title, const char *json_doc, char *err, size_t err_len);

/* ag_check_json then ag_acc_html_write, titled "anygrad accuracy". */
int ag_check_html_write(const char *path, const ag_check_summary *s, char *err, size_t err_len);

/* The page of `anygrad compare --report` (docs/compare.md): json_doc is the
 * document `anygrad compare --json` writes; the page draws the loss and the
 * divergence of every device per step and, when present, the bisection
 * table. Writes to f (owned by the caller); the caller checks ferror(f). */
void ag_compare_html_put(FILE *f, const char *json_doc);

#endif
