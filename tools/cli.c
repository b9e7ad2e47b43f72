/* Shared option handling of the anygrad subcommands (see cli.h). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_arg;

const char *ag_cli_arg(void) { return g_arg; }

static int next_opt(const char *cmd, int argc, char **argv, const struct option *opts, bool restart,
                    const char *optstring) {
  if (restart) {
    optind = 0; /* glibc: 0 re-initialises the scan */
    opterr = 0;
  }
  g_arg = NULL;
  /* '+': stop at the first positional argument (reported below);
   * ':': a missing value is ':' rather than '?'. */
  int idx = -1;
  int c = getopt_long(argc, argv, optstring, opts, &idx);
  if (c == 1) { /* '-': a positional argument, in order */
    g_arg = optarg;
    return AG_CLI_POSITIONAL;
  }
  if (c == 'h') /* -h is --help everywhere */
    for (const struct option *o = opts; o->name; o++)
      if (!strcmp(o->name, "help")) return o->val;
  if (c == -1) {
    if (optind < argc) {
      fprintf(stderr, "anygrad %s: unexpected argument '%s' (see --help)\n", cmd, argv[optind]);
      return '?';
    }
    return -1;
  }
  if (c == '?') {
    fprintf(stderr, "anygrad %s: unknown option '%s' (see --help)\n", cmd, argv[optind - 1]);
    return '?';
  }
  if (c == ':') {
    fprintf(stderr, "anygrad %s: option '%s' needs a value (see --help)\n", cmd, argv[optind - 1]);
    return '?';
  }
  /* "--steps --out x": getopt takes "--out" as the value of --steps; a
   * value that is itself one of the options means the value is missing.
   * An explicit "--prompt=--steps" is always the value: getopt then points
   * optarg into the option's own argument, past the '='. */
  bool attached = optarg && optind > 0 && optarg != argv[optind - 1];
  if (optarg && !attached && idx >= 0 && !strncmp(optarg, "--", 2)) {
    size_t n = strcspn(optarg + 2, "=");
    for (const struct option *o = opts; o->name; o++)
      if (strlen(o->name) == n && !strncmp(o->name, optarg + 2, n)) {
        fprintf(stderr, "anygrad %s: option '--%s' needs a value (see --help)\n", cmd, opts[idx].name);
        return '?';
      }
  }
  g_arg = optarg;
  return c;
}

int ag_cli_next(const char *cmd, int argc, char **argv, const struct option *opts, bool restart) {
  return next_opt(cmd, argc, argv, opts, restart, "+:h");
}

int ag_cli_next_pos(const char *cmd, int argc, char **argv, const struct option *opts, bool restart) {
  return next_opt(cmd, argc, argv, opts, restart, "-:h");
}

static bool bad(const char *cmd, const char *opt, const char *what, const char *v) {
  fprintf(stderr, "anygrad %s: --%s expects %s, got '%s'\n", cmd, opt, what, v ? v : "");
  return false;
}

bool ag_cli_i64(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char what[96];
  snprintf(what, sizeof what, "an integer in %lld..%lld", (long long)lo, (long long)hi);
  int64_t x;
  if (!ag_parse_i64(v, lo, hi, &x)) return bad(cmd, opt, what, v);
  *out = x;
  return true;
}

bool ag_cli_threads(const char *cmd, const char *v) {
  int n;
  if (!ag_cli_int(cmd, "threads", v, 1, 256, &n)) return false;
  if (ag_set_num_threads(n) != AG_OK) {
    fprintf(stderr, "anygrad %s: %s\n", cmd, ag_last_error());
    return false;
  }
  return true;
}

bool ag_cli_numerics(const char *cmd, const char *v) {
  ag_numerics m;
  if (ag_numerics_parse(v, &m) != AG_OK) {
    ag_error_clear();
    return bad(cmd, "numerics", "default or portable", v);
  }
  if (ag_set_numerics(m) != AG_OK) {
    fprintf(stderr, "anygrad %s: %s\n", cmd, ag_last_error());
    return false;
  }
  return true;
}

bool ag_cli_int(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out) {
  int64_t x;
  if (!ag_cli_i64(cmd, opt, v, lo, hi, &x)) return false;
  *out = (int)x;
  return true;
}

bool ag_cli_u64(const char *cmd, const char *opt, const char *v, uint64_t *out) {
  uint64_t x;
  if (!ag_parse_u64(v, &x)) return bad(cmd, opt, "an unsigned 64-bit integer (decimal or 0x hex)", v);
  *out = x;
  return true;
}

bool ag_cli_f64(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out) {
  char what[96];
  snprintf(what, sizeof what, "a finite decimal number in %g..%g", lo, hi);
  double x;
  if (!ag_parse_f64(v, lo, hi, &x)) return bad(cmd, opt, what, v);
  *out = x;
  return true;
}

int ag_cli_list(const char *cmd, const char *opt, const char *v, char *buf, size_t len, char **items, int max) {
  if (!v || !*v) {
    fprintf(stderr, "anygrad %s: --%s needs a comma-separated list, got ''\n", cmd, opt);
    return -1;
  }
  if (strlen(v) >= len) {
    fprintf(stderr, "anygrad %s: --%s list is too long\n", cmd, opt);
    return -1;
  }
  memcpy(buf, v, strlen(v) + 1);
  int n = 0;
  for (char *p = buf;; n++) {
    char *comma = strchr(p, ',');
    if (comma) *comma = 0;
    if (!*p) {
      fprintf(stderr, "anygrad %s: --%s has an empty item in '%s'\n", cmd, opt, v);
      return -1;
    }
    if (n == max) {
      fprintf(stderr, "anygrad %s: --%s takes at most %d items, got '%s'\n", cmd, opt, max, v);
      return -1;
    }
    items[n] = p;
    if (!comma) return n + 1;
    p = comma + 1;
  }
}

bool ag_cli_int_list(const char *cmd, const char *opt, const char *v, int n, int lo, int hi, int *out) {
  char buf[256], *items[16];
  int got = n <= 16 ? ag_cli_list(cmd, opt, v, buf, sizeof buf, items, 16) : -1;
  if (got < 0) return false;
  if (got != n) {
    fprintf(stderr, "anygrad %s: --%s expects %d comma-separated integers in %d..%d, got '%s'\n", cmd, opt, n, lo,
            hi, v);
    return false;
  }
  for (int i = 0; i < n; i++) {
    int64_t x;
    if (!ag_parse_i64(items[i], lo, hi, &x)) {
      fprintf(stderr, "anygrad %s: --%s expects %d comma-separated integers in %d..%d, got '%s'\n", cmd, opt, n,
              lo, hi, v);
      return false;
    }
    out[i] = (int)x;
  }
  return true;
}

bool ag_cli_bool(const char *cmd, const char *opt, const char *v, bool *out) {
  static const char *const on[] = {"on", "yes", "true", "1"}, *const off[] = {"off", "no", "false", "0"};
  for (int i = 0; v && i < 4; i++) {
    if (!strcmp(v, on[i]) || !strcmp(v, off[i])) {
      *out = !strcmp(v, on[i]);
      return true;
    }
  }
  return bad(cmd, opt, "on or off", v);
}

int ag_cli_device(const char *cmd, const char *s, ag_device *out) {
  ag_status st = ag_device_parse(s, out);
  if (st == AG_OK) return AG_EXIT_OK;
  fprintf(stderr, "anygrad %s: %s\n", cmd, ag_last_error());
  return st == AG_ERR_UNAVAILABLE || st == AG_ERR_DEVICE ? AG_EXIT_RUNTIME : AG_EXIT_USAGE;
}

static bool is_file(const ag_cli_file *f) { return f->path && *f->path && strcmp(f->path, "-"); }

static bool clash(const char *cmd, const ag_cli_file *out, const ag_cli_file *other) {
  if (!is_file(out) || !is_file(other) || !ag_file_same(out->path, other->path)) return false;
  char a[512], b[512];
  fprintf(stderr, "anygrad %s: %s '%s' is the same file as %s '%s'; refusing to overwrite it\n", cmd, out->opt,
          ag_escape(out->path, a, sizeof a), other->opt, ag_escape(other->path, b, sizeof b));
  return true;
}

bool ag_cli_outputs_distinct(const char *cmd, const ag_cli_file *inputs, int n_inputs, const ag_cli_file *outputs,
                             int n_outputs) {
  for (int i = 0; i < n_outputs; i++) {
    for (int j = 0; j < n_inputs; j++)
      if (clash(cmd, &outputs[i], &inputs[j])) return false;
    for (int j = i + 1; j < n_outputs; j++)
      if (clash(cmd, &outputs[j], &outputs[i])) return false;
  }
  return true;
}

const char *ag_cli_backend_list(char *buf, size_t len) {
  size_t n = 0;
  if (len) buf[0] = 0;
  int nk = ag_backend_count();
  for (int k = 0; k < nk && n < len; k++)
    n += (size_t)snprintf(buf + n, len - n, "%s%s", k ? ", " : "", ag_backend_name((ag_backend_kind)k));
  return buf;
}

void ag_cli_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}
