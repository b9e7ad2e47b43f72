/* The anygrad command line: one binary, one subcommand per task. Each
 * subcommand lives in its own tools/cmd_<name>.c; a subcommand whose file is
 * not part of the build is reported as such. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "anygrad/anygrad.h"
#include "cli.h"

int ag_cmd_info(int argc, char **argv);
int ag_cmd_check(int argc, char **argv) __attribute__((weak));
int ag_cmd_bench(int argc, char **argv) __attribute__((weak));
int ag_cmd_train(int argc, char **argv) __attribute__((weak));
int ag_cmd_compare(int argc, char **argv) __attribute__((weak));
int ag_cmd_memory(int argc, char **argv) __attribute__((weak));
int ag_cmd_report(int argc, char **argv) __attribute__((weak));
int ag_cmd_export(int argc, char **argv) __attribute__((weak));
int ag_cmd_launch(int argc, char **argv) __attribute__((weak));

typedef struct command {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} command;

static void usage(const command *cmds, int n) {
  printf("usage: anygrad <command> [options]\n       anygrad --version\n\ncommands:\n");
  for (int i = 0; i < n; i++)
    if (cmds[i].fn) printf("  %-8s %s\n", cmds[i].name, cmds[i].help);
  printf("\n'anygrad <command> --help' describes a command's options.\n"
         "Exit status of every command: 0 success, 1 runtime error (including a requested backend\n"
         "or device that is unavailable), 2 usage error (unknown option, malformed or out-of-range\n"
         "value). check also exits 1 when a case fails; compare exits 1 when devices diverge and\n"
         "2 on any error (see docs/compare.md).\n");
}

/* A command that failed leaves through _exit once its output is flushed:
 * exit() would run the libraries' exit handlers, and OpenBLAS's
 * (gotoblas_quit) joins its server threads, one of which may be retrying a
 * buffer allocation forever under an address-space limit (ulimit -v), so the
 * process printed its error and never ended. Nothing anygrad keeps needs an
 * exit handler: files are written and closed before a command returns.
 * Success still returns through exit(). Sanitizer builds keep exit() on
 * every path so LeakSanitizer checks the error paths too. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define AG_CLI_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AG_CLI_SANITIZED 1
#endif
static int finish(int rc) {
#ifndef AG_CLI_SANITIZED
  if (rc != AG_EXIT_OK) {
    fflush(NULL); /* every open output stream */
    _exit(rc);
  }
#endif
  return rc;
}

int main(int argc, char **argv) {
  const command cmds[] = {
      {"info", ag_cmd_info, "backends, devices, properties and memory"},
      {"check", ag_cmd_check, "op conformance of each backend against a double-precision reference"},
      {"bench", ag_cmd_bench, "per-op throughput and launch overhead per backend"},
      {"train", ag_cmd_train, "train the character-level language model on the word list"},
      {"compare", ag_cmd_compare, "run one training job on several devices in lockstep"},
      {"memory", ag_cmd_memory, "caching allocator statistics of a device"},
      {"report", ag_cmd_report, "the HTML run report from a saved trace"},
      {"export", ag_cmd_export, "write a model as an ONNX file, or a Llama as GGUF for llama.cpp"},
      {"launch", ag_cmd_launch, "run mpirun training elastically: restart from the checkpoint when hosts fail"},
  };
  int n = (int)(sizeof cmds / sizeof cmds[0]);
  if (argc >= 2 && !strcmp(argv[1], "--version")) {
    printf("anygrad %s\n", ag_version_string());
    return 0;
  }
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(cmds, n);
    return argc < 2 ? AG_EXIT_USAGE : AG_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("anygrad %s\n", ANYGRAD_VERSION_STRING);
    return AG_EXIT_OK;
  }
  for (int i = 0; i < n; i++)
    if (!strcmp(argv[1], cmds[i].name)) {
      if (!cmds[i].fn) {
        fprintf(stderr, "anygrad: '%s' is not part of this build\n", argv[1]);
        return AG_EXIT_USAGE;
      }
      /* A misspelt AG_* variable (an AG_ALLOC_CONF key) is reported here,
       * naming the variable and the key, before any command starts. */
      if (ag_env_check() != AG_OK) {
        fprintf(stderr, "anygrad: %s\n", ag_last_error());
        return finish(AG_EXIT_RUNTIME);
      }
      return finish(cmds[i].fn(argc - 1, argv + 1));
    }
  fprintf(stderr, "anygrad: unknown command '%s'\n\n", argv[1]);
  usage(cmds, n);
  return AG_EXIT_USAGE;
}
