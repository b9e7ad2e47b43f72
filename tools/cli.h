/* Shared option handling of the anygrad subcommands: one getopt_long loop
 * shape for all of them, strict number parsing (whole string, range,
 * finite), and the exit codes every subcommand uses. */
#ifndef ANYGRAD_TOOLS_CLI_H
#define ANYGRAD_TOOLS_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "anygrad/anygrad.h"

/* Exit codes of every subcommand (`anygrad compare` adds 1 = diverged, and
 * `anygrad check` 1 = a failing cell; both are runtime outcomes). */
enum { AG_EXIT_OK = 0, AG_EXIT_RUNTIME = 1, AG_EXIT_USAGE = 2 };

/* One line of the exit-code description printed by every --help. */
#define AG_CLI_EXIT_HELP "Exit status: 0 success, 1 runtime error, 2 usage error.\n"

/* getopt_long over argv (argv[0] is the subcommand name) with long options
 * only (and -h for the option named "help"). Returns the option's val, -1 at the end, or '?' after printing
 * "anygrad <cmd>: unknown option '--x'" or "... needs a value" to stderr.
 * Positional arguments are an error too ('?'). Restarts the scan when
 * called with a new argv (the first call of a parse must pass restart). */
int ag_cli_next(const char *cmd, int argc, char **argv, const struct option *opts, bool restart);

/* ag_cli_next for a command that also takes positional arguments, in any
 * place: each one is returned as AG_CLI_POSITIONAL with the word in
 * ag_cli_arg(). */
#define AG_CLI_POSITIONAL 1
int ag_cli_next_pos(const char *cmd, int argc, char **argv, const struct option *opts, bool restart);

/* The argument of the option ag_cli_next just returned, or NULL. */
const char *ag_cli_arg(void);

/* Strict numbers through the library's parser (ag_parse_i64/u64/f64 of
 * anygrad/checks.h, the one the AG_* environment variables go through too):
 * the whole string, within [lo, hi], no overflow; doubles finite and
 * decimal (hex floats such as 0x1p-3, inf and nan are refused). Print
 * "anygrad <cmd>: --opt expects ..., got 'v'" and return false otherwise.
 * Unsigned values take decimal or 0x hex. */
bool ag_cli_i64(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);
bool ag_cli_int(const char *cmd, const char *opt, const char *v, int lo, int hi, int *out);
bool ag_cli_u64(const char *cmd, const char *opt, const char *v, uint64_t *out);
bool ag_cli_f64(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out);
/* A comma-separated list: v copied into buf (len bytes) and cut at the
 * commas, items pointing into it. Returns the count, or -1 after printing
 * why (empty list or item, too long, more than max items). */
int ag_cli_list(const char *cmd, const char *opt, const char *v, char *buf, size_t len, char **items, int max);
/* Exactly n comma-separated integers in [lo, hi] (n <= 16), each through
 * the strict parser ("4294967297,1" is refused, not wrapped). */
bool ag_cli_int_list(const char *cmd, const char *opt, const char *v, int n, int lo, int hi, int *out);
/* on|off, yes|no, true|false, 1|0. */
bool ag_cli_bool(const char *cmd, const char *opt, const char *v, bool *out);

/* A device string through the core's parser. Returns AG_EXIT_OK, or prints
 * the reason and returns AG_EXIT_USAGE for a malformed string and
 * AG_EXIT_RUNTIME for a backend or device absent on this machine. */
int ag_cli_device(const char *cmd, const char *s, ag_device *out);

/* A file a command reads or writes, named by the option that gives it. */
typedef struct ag_cli_file {
  const char *opt;  /* "--json" */
  const char *path; /* NULL: not given; "-" (stdout) is never a file */
} ag_cli_file;

/* The check every command makes before it runs: no output is the same file
 * (ag_file_same: device and inode, through symbolic and hard links, or the
 * same name for files that do not exist yet) as one of the inputs or as
 * another output. Prints "anygrad <cmd>: --json 'x' is the same file as
 * --words 'y'; refusing to overwrite it" and returns false otherwise (a
 * usage error). */
bool ag_cli_outputs_distinct(const char *cmd, const ag_cli_file *inputs, int n_inputs, const ag_cli_file *outputs,
                             int n_outputs);

/* "cpu, cuda, hip, ..." (every backend the core knows) into buf. */
const char *ag_cli_backend_list(char *buf, size_t len);

/* --threads N, shared by the subcommands that run kernels: the option's
 * table entry, its --help line and its handler (ag_set_num_threads; prints
 * the error and returns false for a value outside 1..256). */
#define AG_CLI_THREADS 0x7f00
#define AG_CLI_THREADS_OPT {"threads", required_argument, NULL, AG_CLI_THREADS}
#define AG_CLI_THREADS_HELP \
  "  --threads N          CPU threads (default: AG_NUM_THREADS, else the CPUs this process may use)\n"
bool ag_cli_threads(const char *cmd, const char *v);

/* --numerics MODE, shared by the same subcommands: the option's table
 * entry, its --help line and its handler (ag_numerics_parse, then
 * ag_set_numerics; prints "anygrad <cmd>: --numerics expects default or
 * portable, got 'x'" and returns false otherwise, a usage error). */
#define AG_CLI_NUMERICS 0x7f01
#define AG_CLI_NUMERICS_OPT {"numerics", required_argument, NULL, AG_CLI_NUMERICS}
#define AG_CLI_NUMERICS_HELP                                                                 \
  "  --numerics MODE      default | portable: the same bits on every backend and device,\n" \
  "                       ops without a portable kernel refused (default: AG_NUMERICS, else\n" \
  "                       default; docs/numerics.md)\n"
bool ag_cli_numerics(const char *cmd, const char *v);

/* `s` as a JSON string literal (quotes, escapes) to f. */
#include <stdio.h>
void ag_cli_json_str(FILE *f, const char *s);

#endif
