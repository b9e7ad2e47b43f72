/* `anygrad check` output: JSON document, accuracy table and the HTML page.
 * The page is one file with its data in a JSON script element and the
 * drawing code inline: nothing is fetched when it is opened. */
#include "conformance_html.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "cli.h"

static void json_i64_or_null(FILE *f, int64_t v) {
  if (v < 0) fputs("null", f);
  else fprintf(f, "%lld", (long long)v);
}

static void json_dist(FILE *f, const ag_conf_stats *d) {
  fprintf(f, "{\"n\": %lld, \"median\": ", (long long)d->n);
  json_i64_or_null(f, d->median);
  fputs(", \"p99\": ", f);
  json_i64_or_null(f, d->p99);
  fputs(", \"max\": ", f);
  json_i64_or_null(f, d->max);
  fprintf(f, ", \"nan_mismatch\": %lld, \"exact_n\": %lld, \"exact_match\": %lld, \"exact_rate\": ",
          (long long)d->nan_mismatch, (long long)d->exact_n, (long long)d->exact_match);
  if (d->exact_n > 0) fprintf(f, "%.6f", (double)d->exact_match / (double)d->exact_n);
  else fputs("null", f);
  fputs("}", f);
}

void ag_check_json(FILE *f, const ag_check_summary *s) {
  fprintf(f, "{\"version\": ");
  ag_cli_json_str(f, ANYGRAD_VERSION_STRING);
  fprintf(f, ", \"seed\": %llu, \"threads\": %d, \"accuracy\": %s, \"skipped\": [", (unsigned long long)s->seed,
          s->threads, s->accuracy ? "true" : "false");
  for (int i = 0; i < s->nskipped; i++) {
    fprintf(f, "%s{\"backend\": ", i ? ", " : "");
    ag_cli_json_str(f, s->skipped[i]);
    fprintf(f, ", \"reason\": ");
    ag_cli_json_str(f, s->skipped_reason[i]);
    fprintf(f, "}");
  }
  fprintf(f, "],\n \"cells\": [");
  for (int i = 0; i < s->ncells; i++) {
    const ag_check_cell *c = &s->cells[i];
    fprintf(f, "%s\n  {\"op\": ", i ? "," : "");
    ag_cli_json_str(f, c->op);
    fprintf(f, ", \"device\": ");
    ag_cli_json_str(f, c->device);
    fprintf(f, ", \"dtype\": ");
    ag_cli_json_str(f, ag_dtype_name(c->dtype));
    fprintf(f, ", \"result\": ");
    ag_cli_json_str(f, ag_conf_result_name(c->result));
    if (c->has_acc) {
      fputs(", \"accuracy\": {\"shapes\": ", f);
      json_dist(f, &c->shapes);
      fputs(", \"adversarial\": ", f);
      json_dist(f, &c->adversarial);
      fputs("}", f);
    }
    fprintf(f, "}");
  }
  fprintf(f, "\n ],\n \"pass\": %d, \"fail\": %d, \"unsupported\": %d, \"failures\": [", s->pass, s->fail,
          s->unsupported);
  for (int k = 0; s->failures && s->failures[k]; k++) {
    fprintf(f, "%s", k ? ", " : "");
    ag_cli_json_str(f, s->failures[k]);
  }
  fprintf(f, "]");
  if (s->coverage) {
    fprintf(f, ",\n \"kernel_ops_without_rows\": [");
    for (int k = 0; k < s->nuncovered; k++) {
      fprintf(f, "%s{\"device\": ", k ? ", " : "");
      ag_cli_json_str(f, s->uncovered_device[k]);
      fprintf(f, ", \"kernel_op\": ");
      ag_cli_json_str(f, s->uncovered_kop[k]);
      fprintf(f, "}");
    }
    fprintf(f, "]");
  }
  fprintf(f, "}\n");
}

static void ulp_str(char *b, size_t n, int64_t v) {
  if (v < 0) snprintf(b, n, "-");
  else if (v == INT64_MAX) snprintf(b, n, "NaN");
  else if (v >= 100000) snprintf(b, n, "%.1e", (double)v);
  else snprintf(b, n, "%lld", (long long)v);
}

void ag_check_accuracy_table(FILE *f, const ag_check_cell *cells, int ncells) {
  fprintf(f, "\naccuracy (ULPs against the double reference rounded to the dtype; NaN: a NaN where a number was\n"
             "due or the reverse; exact: share of integer/bool elements equal to the reference)\n\n");
  fprintf(f, "%-19s %-5s %-10s | %8s %6s %6s %8s | %6s %6s %8s %4s | %s\n", "op", "dtype", "device", "n", "median",
          "p99", "max", "adv n", "p99", "max", "NaN", "exact");
  for (int i = 0; i < ncells; i++) {
    const ag_check_cell *c = &cells[i];
    if (!c->has_acc || (c->shapes.n == 0 && c->shapes.exact_n == 0 && c->adversarial.n == 0)) continue;
    char m[16], p[16], x[16], ap[16], ax[16], ex[16];
    ulp_str(m, sizeof m, c->shapes.median);
    ulp_str(p, sizeof p, c->shapes.p99);
    ulp_str(x, sizeof x, c->shapes.max);
    ulp_str(ap, sizeof ap, c->adversarial.p99);
    ulp_str(ax, sizeof ax, c->adversarial.max);
    if (c->shapes.exact_n) snprintf(ex, sizeof ex, "%.4f", (double)c->shapes.exact_match / (double)c->shapes.exact_n);
    else snprintf(ex, sizeof ex, "-");
    fprintf(f, "%-19s %-5s %-10s | %8lld %6s %6s %8s | %6lld %6s %8s %4lld | %s\n", c->op, ag_dtype_name(c->dtype),
            c->device, (long long)c->shapes.n, m, p, x, (long long)c->adversarial.n, ap, ax,
            (long long)c->adversarial.nan_mismatch, ex);
  }
}

static const char k_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>@TITLE@</title>\n<style>\n"
    "body{font:14px/1.4 system-ui,sans-serif;margin:0 24px 40px;color:#1d232a;background:#fff}\n"
    "h1{font-size:22px;margin:18px 0 4px}\n"
    "h2{font-size:16px;margin:26px 0 6px;border-bottom:1px solid #d8dde3;padding-bottom:3px}\n"
    ".sub{color:#5a6570;margin:0 0 10px}\n"
    ".note{color:#5a6570;font-size:12px;margin:4px 0}\n"
    "table.m{border-collapse:collapse;font-size:12px}\n"
    "table.m td,table.m th{padding:1px 4px;border:1px solid #e3e7eb;text-align:center;min-width:34px}\n"
    "table.m th{color:#5a6570;font-weight:600;background:#f5f7f9}\n"
    "table.m td.op{text-align:left;font-family:ui-monospace,monospace;background:#fff}\n"
    "table.m td.c{font-variant-numeric:tabular-nums;cursor:default}\n"
    "table.m td.fail{outline:2px solid #b00020;outline-offset:-2px}\n"
    ".legend span{display:inline-block;margin-right:14px;font-size:12px}\n"
    ".legend i{display:inline-block;width:14px;height:10px;margin-right:4px;vertical-align:-1px;border:1px solid #ccc}\n"
    "#tip{position:fixed;display:none;background:#fff;border:1px solid #9aa5b1;box-shadow:0 2px 6px rgba(0,0,0,.2);"
    "padding:6px 8px;font-size:12px;pointer-events:none;z-index:10}\n"
    "#tip table td{padding:0 8px 0 0;text-align:right}#tip table td:first-child{text-align:left;color:#5a6570}\n"
    ".err{color:#b00020;font-weight:600}\n"
    "</style>\n</head>\n<body>\n<h1>@TITLE@</h1>\n<p class=\"sub\" id=\"subtitle\"></p>\n"
    "<p class=\"note\">Error of each backend against a double-precision reference rounded to the output dtype, "
    "in units in the last place (ULPs) of that dtype. Cells show the largest error; hover for the distribution. "
    "Integer and bool outputs show the share of elements equal to the reference. A red outline: the cell fails "
    "its tolerance in <code>anygrad check</code>.</p>\n"
    "<div class=\"legend\" id=\"legend\"></div>\n"
    "<h2>Shape cases</h2>\n<div id=\"shapes\"></div>\n"
    "<h2>Adversarial inputs</h2>\n<p class=\"note\">Subnormals, the largest values, ill-conditioned points, NaN, "
    "infinities and signed zeros. NaN: a NaN where a number was due, or a number where NaN was due.</p>\n"
    "<div id=\"adversarial\"></div>\n<div id=\"tip\"></div>\n"
    "<script id=\"agdata\" type=\"application/json\">";

static const char k_tail[] =
    "</script>\n<script>\n'use strict';\n(function () {\n"
    "  var BANDS = [[0, '#1b7837', '#fff', '0'], [1, '#7fbf7b', '#000', '1'], [4, '#d9f0d3', '#000', '2-4'],\n"
    "               [16, '#fee08b', '#000', '5-16'], [256, '#fdae61', '#000', '17-256'],\n"
    "               [Infinity, '#d73027', '#fff', '>256']];\n"
    "  var NANC = ['#67001f', '#fff'], NONE = '#eceff1';\n"
    "  var BIG = 9.2e18;\n"
    "  var cells = 0;\n"
    "  function fmt(v) {\n"
    "    if (v === null || v === undefined) return '-';\n"
    "    if (v >= BIG) return 'NaN';\n"
    "    if (v >= 100000) return v.toExponential(1);\n"
    "    return String(v);\n"
    "  }\n"
    "  function colour(d) {\n"
    "    if (!d) return null;\n"
    "    if (d.n > 0) {\n"
    "      if (d.max >= BIG) return {bg: NANC[0], fg: NANC[1], text: 'NaN'};\n"
    "      for (var i = 0; i < BANDS.length; i++)\n"
    "        if (d.max <= BANDS[i][0]) return {bg: BANDS[i][1], fg: BANDS[i][2], text: fmt(d.max)};\n"
    "    }\n"
    "    if (d.exact_n > 0) {\n"
    "      var r = d.exact_match / d.exact_n;\n"
    "      return r === 1 ? {bg: BANDS[0][1], fg: BANDS[0][2], text: '='}\n"
    "                     : {bg: BANDS[5][1], fg: BANDS[5][2], text: (100 * r).toFixed(1) + '%'};\n"
    "    }\n"
    "    return null;\n"
    "  }\n"
    "  function el(tag, attrs, text) {\n"
    "    var e = document.createElement(tag);\n"
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "    if (text !== undefined) e.textContent = text;\n"
    "    return e;\n"
    "  }\n"
    "  function distRows(name, d) {\n"
    "    if (!d) return '';\n"
    "    var s = '<tr><td colspan=2><b>' + name + '</b></td></tr>';\n"
    "    if (d.n > 0)\n"
    "      s += '<tr><td>elements</td><td>' + d.n + '</td></tr><tr><td>median ULPs</td><td>' + fmt(d.median) +\n"
    "           '</td></tr><tr><td>p99 ULPs</td><td>' + fmt(d.p99) + '</td></tr><tr><td>max ULPs</td><td>' +\n"
    "           fmt(d.max) + '</td></tr>' + (d.nan_mismatch ? '<tr><td>NaN mismatches</td><td>' + d.nan_mismatch +\n"
    "           '</td></tr>' : '');\n"
    "    if (d.exact_n > 0)\n"
    "      s += '<tr><td>exact</td><td>' + d.exact_match + ' / ' + d.exact_n + '</td></tr>';\n"
    "    if (!(d.n > 0) && !(d.exact_n > 0)) s += '<tr><td>no elements</td><td></td></tr>';\n"
    "    return s;\n"
    "  }\n"
    "  function matrix(host, data, part) {\n"
    "    var devs = [], dts = [], ops = [], by = {};\n"
    "    data.cells.forEach(function (c) {\n"
    "      if (devs.indexOf(c.device) < 0) devs.push(c.device);\n"
    "      if (dts.indexOf(c.dtype) < 0) dts.push(c.dtype);\n"
    "      if (ops.indexOf(c.op) < 0) ops.push(c.op);\n"
    "      by[c.op + '|' + c.device + '|' + c.dtype] = c;\n"
    "    });\n"
    "    var colsFor = {};\n"
    "    devs.forEach(function (dv) {\n"
    "      colsFor[dv] = dts.filter(function (t) {\n"
    "        return ops.some(function (o) { var c = by[o + '|' + dv + '|' + t]; return c && c.result !== '-'; });\n"
    "      });\n"
    "    });\n"
    "    var t = el('table', {'class': 'm', 'data-part': part});\n"
    "    var r1 = el('tr'), r2 = el('tr');\n"
    "    r1.appendChild(el('th', {rowspan: 2}, 'op'));\n"
    "    devs.forEach(function (dv) {\n"
    "      if (!colsFor[dv].length) return;\n"
    "      r1.appendChild(el('th', {colspan: colsFor[dv].length}, dv));\n"
    "      colsFor[dv].forEach(function (d) { r2.appendChild(el('th', {}, d)); });\n"
    "    });\n"
    "    t.appendChild(r1); t.appendChild(r2);\n"
    "    var drawn = 0;\n"
    "    ops.forEach(function (o) {\n"
    "      var tr = el('tr');\n"
    "      tr.appendChild(el('td', {'class': 'op'}, o));\n"
    "      var any = false;\n"
    "      devs.forEach(function (dv) {\n"
    "        colsFor[dv].forEach(function (d) {\n"
    "          var c = by[o + '|' + dv + '|' + d];\n"
    "          var td = el('td', {'class': 'c'});\n"
    "          var acc = c && c.accuracy ? c.accuracy[part] : null;\n"
    "          var col = colour(acc);\n"
    "          if (!c || c.result === '-') { td.textContent = ''; }\n"
    "          else if (c.result === 'unsup') { td.textContent = 'unsup'; td.style.background = NONE; td.style.color = '#78848f'; }\n"
    "          else if (col) { td.textContent = col.text; td.style.background = col.bg; td.style.color = col.fg; any = true; drawn++; }\n"
    "          else { td.textContent = '\\u00b7'; }\n"
    "          if (c && c.result === 'FAIL') td.className += ' fail';\n"
    "          if (c && c.result !== '-') {\n"
    "            td.setAttribute('data-cell', o + ' ' + d + ' ' + dv);\n"
    "            td.addEventListener('mousemove', function (ev) { tip(ev, c); });\n"
    "            td.addEventListener('mouseleave', function () { document.getElementById('tip').style.display = 'none'; });\n"
    "          }\n"
    "          tr.appendChild(td);\n"
    "        });\n"
    "      });\n"
    "      if (any) t.appendChild(tr);\n"
    "    });\n"
    "    host.appendChild(t);\n"
    "    t.setAttribute('data-drawn', drawn + ' cells');\n"
    "    cells += drawn;\n"
    "  }\n"
    "  function tip(ev, c) {\n"
    "    var d = document.getElementById('tip');\n"
    "    var a = c.accuracy || {};\n"
    "    d.innerHTML = '<b>' + c.op + '</b> ' + c.dtype + ' on ' + c.device + ' (' + c.result + ')<table>' +\n"
    "                  distRows('shape cases', a.shapes) + distRows('adversarial inputs', a.adversarial) + '</table>';\n"
    "    d.style.display = 'block';\n"
    "    var x = ev.clientX + 14, y = ev.clientY + 14;\n"
    "    if (x + d.offsetWidth > window.innerWidth) x = ev.clientX - d.offsetWidth - 8;\n"
    "    if (y + d.offsetHeight > window.innerHeight) y = ev.clientY - d.offsetHeight - 8;\n"
    "    d.style.left = x + 'px'; d.style.top = y + 'px';\n"
    "  }\n"
    "  try {\n"
    "    var data = JSON.parse(document.getElementById('agdata').textContent);\n"
    "    if (!Array.isArray(data.cells)) throw new Error('no cells array in the data');\n"
    "    var sub = [];\n"
    "    if (data.version) sub.push('anygrad ' + data.version);\n"
    "    if (data.seed !== undefined) sub.push('seed 0x' + Number(data.seed).toString(16));\n"
    "    if (data.threads) sub.push(data.threads + ' CPU threads');\n"
    "    (data.skipped || []).forEach(function (s) { sub.push(s.backend + ' skipped (' + s.reason + ')'); });\n"
    "    document.getElementById('subtitle').textContent = sub.join(' \\u00b7 ');\n"
    "    var lg = document.getElementById('legend');\n"
    "    lg.appendChild(el('span', {}, 'max ULPs:'));\n"
    "    BANDS.forEach(function (b) {\n"
    "      var s = el('span'); var i = el('i'); i.style.background = b[1]; s.appendChild(i);\n"
    "      s.appendChild(document.createTextNode(b[3])); lg.appendChild(s);\n"
    "    });\n"
    "    var s = el('span'); var i = el('i'); i.style.background = NANC[0]; s.appendChild(i);\n"
    "    s.appendChild(document.createTextNode('NaN mismatch')); lg.appendChild(s);\n"
    "    s = el('span', {}, '= : integer or bool output, all exact'); lg.appendChild(s);\n"
    "    matrix(document.getElementById('shapes'), data, 'shapes');\n"
    "    matrix(document.getElementById('adversarial'), data, 'adversarial');\n"
    "    if (!cells) throw new Error('no cell has accuracy data (run with --accuracy)');\n"
    "    document.body.setAttribute('data-report-status', 'ok ' + cells + ' cells');\n"
    "  } catch (e) {\n"
    "    document.body.setAttribute('data-report-status', 'error: ' + e.message);\n"
    "    var p = el('p', {'class': 'err'}, 'This page could not be drawn: ' + e.message);\n"
    "    document.body.insertBefore(p, document.body.firstChild);\n"
    "    console.error('accuracy page: ' + e.message);\n"
    "  }\n"
    "})();\n</script>\n</body>\n</html>\n";

/* Text with @TITLE@ replaced by the HTML-escaped title. */
static void put_templ(FILE *f, const char *t, const char *title) {
  for (const char *p = t; *p;) {
    const char *m = strstr(p, "@TITLE@");
    size_t n = m ? (size_t)(m - p) : strlen(p);
    fwrite(p, 1, n, f);
    if (!m) break;
    for (const char *q = title; *q; q++) {
      if (*q == '<') fputs("&lt;", f);
      else if (*q == '>') fputs("&gt;", f);
      else if (*q == '&') fputs("&amp;", f);
      else fputc(*q, f);
    }
    p = m + 7;
  }
}

int ag_acc_html_write(const char *path, const char *title, const char *json_doc, char *err, size_t err_len) {
  /* the page replaces path only once complete: a symlink is replaced, not
   * written through, and a failed write leaves the previous page */
  ag_output *out = NULL;
  ag_status st = ag_output_open(path, "report", &out);
  if (st == AG_OK) {
    FILE *f = ag_output_file(out);
    put_templ(f, k_head, title);
    /* inside a script element "</" would end it early */
    for (const char *p = json_doc; *p; p++) {
      if (p[0] == '<' && p[1] == '/') fputs("<\\", f);
      else fputc(*p, f);
    }
    put_templ(f, k_tail, title);
    st = ag_output_commit(out); /* a write error seen on the stream fails here */
  }
  if (st != AG_OK) {
    snprintf(err, err_len, "%s", ag_last_error());
    return -1;
  }
  return 0;
}

int ag_check_html_write(const char *path, const ag_check_summary *s, char *err, size_t err_len) {
  char *doc = NULL;
  size_t n = 0;
  FILE *t = open_memstream(&doc, &n);
  if (!t) {
    snprintf(err, err_len, "out of host memory");
    return -1;
  }
  ag_check_json(t, s);
  bool bad = ferror(t) != 0;
  if (fclose(t) != 0 || bad) {
    free(doc);
    snprintf(err, err_len, "out of host memory");
    return -1;
  }
  int rc = ag_acc_html_write(path, "anygrad accuracy", doc, err, err_len);
  free(doc);
  return rc;
}

/* ---------------- the page of `anygrad compare --report` ---------------- */

/* The per-step curves (inline SVG) and the bisection table, drawn from the
 * compare JSON document; every string reaches the page as text nodes. */
static const char k_cmp_head[] =
    "<!DOCTYPE html>\n"
    "<html lang=\"en\">\n"
    "<head>\n"
    "<meta charset=\"utf-8\">\n"
    "<title>anygrad compare</title>\n"
    "<style>\n"
    "body{font:14px/1.4 system-ui,sans-serif;margin:0 24px 40px;color:#1d232a;background:#fff}\n"
    "h1{font-size:22px;margin:18px 0 4px}\n"
    "h2{font-size:16px;margin:26px 0 6px;border-bottom:1px solid #d8dde3;padding-bottom:3px}\n"
    "h3{font-size:14px;margin:16px 0 4px}\n"
    ".sub{color:#5a6570;margin:0 0 10px}\n"
    ".note{color:#5a6570;font-size:12px;margin:4px 0}\n"
    ".verdict{font-weight:600;margin:6px 0}\n"
    ".verdict.bad{color:#b00020}.verdict.good{color:#1b7837}\n"
    "table.t{border-collapse:collapse;font-size:12px}\n"
    "table.t td,table.t th{padding:2px 6px;border:1px solid #e3e7eb;text-align:right;white-space:nowrap}\n"
    "table.t th{color:#5a6570;font-weight:600;background:#f5f7f9}\n"
    "table.t td.l{text-align:left;font-family:ui-monospace,monospace;white-space:normal;max-width:300px;"
    "overflow-wrap:anywhere}\n"
    "table.t tr.top td{background:#fde0dd;font-weight:600}\n"
    ".charts{display:flex;flex-wrap:wrap;gap:18px}\n"
    "svg.chart{border:1px solid #e3e7eb;background:#fff}\n"
    "svg.chart text{font:11px system-ui,sans-serif;fill:#5a6570}\n"
    ".legend span{display:inline-block;margin-right:14px;font-size:12px}\n"
    ".legend i{display:inline-block;width:18px;height:3px;margin-right:4px;vertical-align:3px}\n"
    ".err{color:#b00020;font-weight:600}\n"
    "</style>\n"
    "</head>\n"
    "<body>\n"
    "<h1>anygrad compare</h1>\n"
    "<p class=\"sub\" id=\"subtitle\"></p>\n"
    "<p class=\"verdict\" id=\"verdict\"></p>\n"
    "<table class=\"t\" id=\"summary\"></table>\n"
    "<h2>Divergence per step</h2>\n"
    "<p class=\"note\">Left: the training loss of each device. Right: the relative difference from the reference,\n"
    "|loss<sub>ref</sub> - loss| / |loss<sub>ref</sub>| (solid) and the largest relative L2 distance of a parameter\n"
    "tensor (dashed), on a log scale; the grey dashed lines are the tolerances. A difference of exactly 0 is drawn on\n"
    "the bottom edge.</p>\n"
    "<div class=\"legend\" id=\"legend\"></div>\n"
    "<div class=\"charts\" id=\"charts\"></div>\n"
    "<div id=\"bisect\"></div>\n"
    "<script id=\"agdata\" type=\"application/json\">";

static const char k_cmp_tail[] =
    "</script>\n"
    "<script>\n"
    "'use strict';\n"
    "(function () {\n"
    "  var COLS = ['#1d232a', '#d62728', '#1f77b4', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#e377c2'];\n"
    "  var NS = 'http://www.w3.org/2000/svg';\n"
    "  function el(tag, attrs, text) {\n"
    "    var e = document.createElement(tag);\n"
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "    if (text !== undefined && text !== null) e.textContent = String(text);\n"
    "    return e;\n"
    "  }\n"
    "  function sv(tag, attrs, text) {\n"
    "    var e = document.createElementNS(NS, tag);\n"
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "    if (text !== undefined) e.textContent = String(text);\n"
    "    return e;\n"
    "  }\n"
    "  function num(v, d) {\n"
    "    if (v === null || v === undefined) return '-';\n"
    "    if (v === 0) return '0';\n"
    "    var a = Math.abs(v);\n"
    "    return a >= 1e4 || a < 1e-3 ? v.toExponential(2) : v.toFixed(d === undefined ? 6 : d);\n"
    "  }\n"
    "  function row(t, cells, head, cls) {\n"
    "    var tr = el('tr', cls ? {'class': cls} : {});\n"
    "    cells.forEach(function (c, i) {\n"
    "      var td = el(head ? 'th' : 'td', {}, c);\n"
    "      if (!head && typeof c === 'string' && i < 6 && isNaN(Number(c))) td.className = 'l';\n"
    "      tr.appendChild(td);\n"
    "    });\n"
    "    t.appendChild(tr);\n"
    "  }\n"
    "  function ticks(lo, hi, n) {\n"
    "    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n || 1)));\n"
    "    [1, 2, 5, 10].some(function (m) { if ((hi - lo) / (step * m) <= n) { step *= m; return true; } return false; });\n"
    "    var out = [];\n"
    "    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);\n"
    "    return out;\n"
    "  }\n"
    "  /* series: [{name, colour, dash, pts: [[x, y]]}]; log: y on a log10 scale */\n"
    "  function chart(title, series, log, hlines, xmax) {\n"
    "    var W = 520, H = 300, L = 64, R = 12, T = 24, B = 36;\n"
    "    var s = sv('svg', {'class': 'chart', width: W, height: H, viewBox: '0 0 ' + W + ' ' + H, 'data-title': title});\n"
    "    s.appendChild(sv('text', {x: L, y: 15, style: 'font-weight:600;fill:#1d232a'}, title));\n"
    "    var ys = [];\n"
    "    series.forEach(function (z) { z.pts.forEach(function (p) { if (p[1] !== null && isFinite(p[1]) && (!log || p[1] > 0)) ys.push(p[1]); }); });\n"
    "    (hlines || []).forEach(function (h) { if (!log || h.y > 0) ys.push(h.y); });\n"
    "    var lo = ys.length ? Math.min.apply(null, ys) : 0, hi = ys.length ? Math.max.apply(null, ys) : 1;\n"
    "    if (log) {\n"
    "      lo = Math.floor(Math.log10(lo > 0 ? lo : 1e-9)); hi = Math.ceil(Math.log10(hi > 0 ? hi : 1));\n"
    "      if (hi <= lo) hi = lo + 1;\n"
    "    } else {\n"
    "      var pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1; lo -= pad; hi += pad;\n"
    "    }\n"
    "    var fy = function (v) {\n"
    "      var t = log ? (v > 0 ? Math.log10(v) : lo) : v;\n"
    "      t = Math.max(lo, Math.min(hi, t));\n"
    "      return T + (H - T - B) * (1 - (t - lo) / (hi - lo));\n"
    "    };\n"
    "    var fx = function (x) { return L + (W - L - R) * (xmax > 1 ? (x - 1) / (xmax - 1) : 0.5); };\n"
    "    s.appendChild(sv('rect', {x: L, y: T, width: W - L - R, height: H - T - B, fill: 'none', stroke: '#c9d0d6'}));\n"
    "    var yt = log ? [] : ticks(lo, hi, 5);\n"
    "    if (log) for (var e = lo; e <= hi; e += Math.max(1, Math.ceil((hi - lo) / 6))) yt.push(e);\n"
    "    yt.forEach(function (t) {\n"
    "      var y = log ? fy(Math.pow(10, t)) : fy(t);\n"
    "      s.appendChild(sv('line', {x1: L, x2: W - R, y1: y, y2: y, stroke: '#eef1f4'}));\n"
    "      s.appendChild(sv('text', {x: L - 4, y: y + 4, 'text-anchor': 'end'}, log ? '1e' + t : num(t, 3)));\n"
    "    });\n"
    "    ticks(1, Math.max(xmax, 2), 6).forEach(function (t) {\n"
    "      if (t < 1 || t > xmax || t !== Math.round(t)) return;\n"
    "      s.appendChild(sv('text', {x: fx(t), y: H - B + 14, 'text-anchor': 'middle'}, t));\n"
    "    });\n"
    "    s.appendChild(sv('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle'}, 'step'));\n"
    "    (hlines || []).forEach(function (h) {\n"
    "      if (log && !(h.y > 0)) return;\n"
    "      var y = fy(h.y);\n"
    "      s.appendChild(sv('line', {x1: L, x2: W - R, y1: y, y2: y, stroke: '#9aa5b1', 'stroke-dasharray': '2 3'}));\n"
    "      s.appendChild(sv('text', {x: W - R - 2, y: y - 3, 'text-anchor': 'end'}, h.name));\n"
    "    });\n"
    "    var drawn = 0;\n"
    "    series.forEach(function (z) {\n"
    "      var d = '', pen = false;\n"
    "      z.pts.forEach(function (p) {\n"
    "        if (p[1] === null || !isFinite(p[1])) { pen = false; return; }\n"
    "        d += (pen ? 'L' : 'M') + fx(p[0]).toFixed(1) + ' ' + fy(p[1]).toFixed(1);\n"
    "        pen = true;\n"
    "      });\n"
    "      if (!d) return;\n"
    "      var a = {d: d, fill: 'none', stroke: z.colour, 'stroke-width': 1.6, 'data-series': z.name};\n"
    "      if (z.dash) a['stroke-dasharray'] = '5 3';\n"
    "      s.appendChild(sv('path', a));\n"
    "      if (z.pts.length === 1) s.appendChild(sv('circle', {cx: fx(z.pts[0][0]), cy: fy(z.pts[0][1]), r: 3, fill: z.colour}));\n"
    "      drawn++;\n"
    "    });\n"
    "    s.setAttribute('data-drawn', String(drawn));\n"
    "    return s;\n"
    "  }\n"
    "  try {\n"
    "    var data = JSON.parse(document.getElementById('agdata').textContent);\n"
    "    if (!Array.isArray(data.per_step) || !Array.isArray(data.devices)) throw new Error('no per_step or devices in the data');\n"
    "    var devs = data.devices.map(function (d) { return d.device; });\n"
    "    var sub = [data.model + ' model', data.parameters + ' parameters', 'seed ' + data.seed,\n"
    "               data.steps + ' steps of batch ' + data.batch, 'tolerance ' + data.tolerance + ' (loss ' + data.loss_tolerance + ')',\n"
    "               'reference ' + data.reference];\n"
    "    document.getElementById('subtitle').textContent = sub.join(' \\u00b7 ');\n"
    "    var v = document.getElementById('verdict');\n"
    "    if (data.diverged) {\n"
    "      v.className = 'verdict bad';\n"
    "      v.textContent = 'DIVERGED: ' + data.devices.filter(function (d) { return d.first_exceed_step; })\n"
    "        .map(function (d) { return d.device + ' first over tolerance at step ' + d.first_exceed_step; }).join('; ');\n"
    "    } else {\n"
    "      v.className = 'verdict good';\n"
    "      v.textContent = 'within tolerance at every step run (' + data.per_step.length + ')';\n"
    "    }\n"
    "    var st = document.getElementById('summary');\n"
    "    row(st, ['device', 'first loss', 'final loss', 'max dloss', 'max dparam', 'parameter', 'first > tol', 'ms/step'], true);\n"
    "    data.devices.forEach(function (d, i) {\n"
    "      row(st, [d.device + (i ? '' : ' (reference)'), num(d.first_loss), num(d.final_loss), i ? num(d.max_loss_divergence, 3) : '-',\n"
    "               i ? num(d.max_param_divergence, 3) : '-', i && d.worst_param ? d.worst_param : '-',\n"
    "               d.first_exceed_step ? 'step ' + d.first_exceed_step : '-', num(d.mean_step_ms, 2)]);\n"
    "    });\n"
    "    var lg = document.getElementById('legend');\n"
    "    devs.forEach(function (n, i) {\n"
    "      var s = el('span'), b = el('i'); b.style.background = COLS[i % COLS.length]; s.appendChild(b);\n"
    "      s.appendChild(document.createTextNode(n)); lg.appendChild(s);\n"
    "    });\n"
    "    var steps = data.per_step.length, xmax = steps ? data.per_step[steps - 1].step : 1;\n"
    "    var loss = devs.map(function (n, i) {\n"
    "      return {name: 'loss ' + n, colour: COLS[i % COLS.length], dash: i > 0,\n"
    "              pts: data.per_step.map(function (p) { return [p.step, p.loss[i]]; })};\n"
    "    });\n"
    "    var div = [];\n"
    "    devs.forEach(function (n, i) {\n"
    "      if (!i) return;\n"
    "      div.push({name: 'dloss ' + n, colour: COLS[i % COLS.length],\n"
    "                pts: data.per_step.map(function (p) { return [p.step, p.loss_divergence[i]]; })});\n"
    "      div.push({name: 'dparam ' + n, colour: COLS[i % COLS.length], dash: true,\n"
    "                pts: data.per_step.filter(function (p) { return p.param_divergence[i] !== null; })\n"
    "                         .map(function (p) { return [p.step, p.param_divergence[i]]; })});\n"
    "    });\n"
    "    var ch = document.getElementById('charts');\n"
    "    ch.appendChild(chart('loss per device', loss, false, [], xmax));\n"
    "    ch.appendChild(chart('relative difference from ' + data.reference, div, true,\n"
    "                         [{name: 'loss tol', y: data.loss_tolerance}, {name: 'param tol', y: data.tolerance}], xmax));\n"
    "    var nb = 0, bx = document.getElementById('bisect');\n"
    "    if (data.bisect) {\n"
    "      bx.appendChild(el('h2', {}, 'Bisection of step ' + data.bisect.step));\n"
    "      bx.appendChild(el('p', {'class': 'note'}, 'Every launch of the reference ' + data.bisect.reference +\n"
    "        ' re-run on the device from the reference\\'s inputs: \"added\" is the error that op adds by itself; \"own\" is the ' +\n"
    "        'same launch in the device\\'s own run, with the error of every op before it. Worst first; relative error is ' +\n"
    "        'max |ref - dev| / max |ref| over the outputs, ULPs in the output dtype.'));\n"
    "      data.bisect.devices.forEach(function (d) {\n"
    "        bx.appendChild(el('h3', {}, d.device + ' against ' + data.bisect.reference + ': ' + d.launches + ' launches' +\n"
    "                          (d.unmatched ? ' (' + d.unmatched + ' without a counterpart in its own run)' : '')));\n"
    "        var t = el('table', {'class': 't', 'data-device': d.device});\n"
    "        row(t, ['rank', 'op', 'kernel', 'where', 'dtype', 'shapes (out <- in)', 'added', 'ULPs', 'own', 'ULPs'], true);\n"
    "        var ops = d.ops.slice(0, 30);\n"
    "        ops.forEach(function (o) {\n"
    "          row(t, [String(o.rank), o.op, o.kernel, o.where, o.dtype, o.shapes, num(o.added_rel, 3),\n"
    "                  o.added_ulp === null ? 'NaN' : String(o.added_ulp), o.own_rel === null ? '-' : num(o.own_rel, 3),\n"
    "                  o.own_ulp === null ? (o.own_rel === null ? '-' : 'NaN') : String(o.own_ulp)], false,\n"
    "              o.rank === 1 && (o.added_rel > 0 || o.added_ulp > 0) ? 'top' : '');\n"
    "          nb++;\n"
    "        });\n"
    "        bx.appendChild(t);\n"
    "        if (d.ops.length > ops.length) bx.appendChild(el('p', {'class': 'note'}, (d.ops.length - ops.length) + ' more launches in the JSON (--json)'));\n"
    "      });\n"
    "    } else if (data.bisect === null) {\n"
    "      bx.appendChild(el('h2', {}, 'Bisection'));\n"
    "      bx.appendChild(el('p', {'class': 'note'}, 'No step went over tolerance: nothing to bisect (--bisect-step N names a step).'));\n"
    "    }\n"
    "    document.body.setAttribute('data-report-status', 'ok ' + steps + ' steps ' + nb + ' ops');\n"
    "  } catch (e) {\n"
    "    document.body.setAttribute('data-report-status', 'error: ' + e.message);\n"
    "    var p = el('p', {'class': 'err'}, 'This page could not be drawn: ' + e.message);\n"
    "    document.body.insertBefore(p, document.body.firstChild);\n"
    "    console.error('compare page: ' + e.message);\n"
    "  }\n"
    "})();\n"
    "</script>\n"
    "</body>\n"
    "</html>\n";

void ag_compare_html_put(FILE *f, const char *json_doc) {
  fputs(k_cmp_head, f);
  /* '<' occurs only inside JSON strings, where \u003c means the same; so
   * nothing in the data can end the script element or open a tag. */
  for (const char *p = json_doc; *p; p++) {
    if (*p == '<') fputs("\\u003c", f);
    else fputc(*p, f);
  }
  fputs(k_cmp_tail, f);
}
