/* `anygrad launch`: an elastic launcher for `anygrad train --dist mpi`
 * (docs/distributed.md, "Elastic runs"). Each attempt is one mpirun over the
 * hosts that answer a probe, one rank per host; the launcher watches mpirun
 * and the ranks' heartbeat files, and when the job fails it probes the hosts
 * again and restarts from the last checkpoint with those that answer
 * (hosts that answer again rejoin), as long as at least --min-hosts do. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

#define MAX_HOSTS 64
#define MAX_ARGS 512
#define MAX_ATTEMPTS 1025

static void usage(void) {
  printf(
      "usage: anygrad launch --hosts H1,H2,... [options] -- COMMAND [ARGS...]\n"
      "Run COMMAND (anygrad train --dist mpi ...) with mpirun, one rank per live host, and keep it\n"
      "running when hosts fail: when the job fails, the hosts are probed, and if at least\n"
      "--min-hosts answer the job restarts from the last checkpoint with them (a host that answers\n"
      "again rejoins at the next restart). The global --batch of the command is kept: each rank's\n"
      "share grows, and the run equals one device's (docs/distributed.md, \"Elastic runs\").\n\n"
      "  --hosts H1,H2,...    the hosts, one rank each (a name may repeat: several ranks there)\n"
      "  --agent CMD          the remote-shell agent: `CMD HOST true` probes HOST (exit 0: alive)\n"
      "                       and mpirun starts its daemons with it (--mca plm_rsh_agent CMD);\n"
      "                       CMD is split at spaces. Default: mpirun's own (ssh), and hosts\n"
      "                       probed with `ssh -o BatchMode=yes HOST true`, except localhost\n"
      "                       and this host's name, which always count as alive\n"
      "  --min-hosts K        fewest hosts to (re)start with (default 1)\n"
      "  --max-restarts R     restarts before giving up (default 3; 0..1024)\n"
      "  --checkpoint PATH    the checkpoint the command writes (default: its --out); a restart\n"
      "                       resumes from it once this job has written it (a file there from\n"
      "                       before is not used), else runs the command as given\n"
      "  --run-dir DIR        heartbeat files and the checkpoints restarts resumed from\n"
      "                       (DIR/restartK.safetensors); default PATH.launch\n"
      "  --mpirun PATH        the MPI launcher, Open MPI's (default mpirun); it is given\n"
      "                       --mca odls_base_sigkill_timeout 0, so the ranks of a failed job are\n"
      "                       killed at once rather than after a second's grace\n"
      "  --mpirun-arg ARG     one more argument for mpirun, before the command (repeatable)\n"
      "  --probe-timeout S    seconds a probe may take before its host counts as lost (default 10)\n"
      "  --stall-timeout S    end an attempt whose heartbeats stopped for S seconds before the\n"
      "                       run's end, once the first has come (a host whose link is down;\n"
      "                       default 0: wait for mpirun)\n"
      "  --json PATH          write the attempts, restarts and their timings as JSON\n\n"
      "To each attempt's command the launcher appends `--heartbeat DIR/heartbeat` (each rank\n"
      "rewrites DIR/heartbeat.RANK after every step) and, when restarting from a checkpoint,\n"
      "`--resume DIR/restartK.safetensors` (a hard link to the checkpoint as it was then). Each\n"
      "event is printed with its time; at the end, for every restart: the time from the failed\n"
      "attempt's last heartbeat to the failure's detection and to training again, and the steps\n"
      "lost.\n"
      "The heartbeat and checkpoint paths must be on storage every host sees.\n"
      "Exit status: 0 the job finished, 1 it could not (fewer than --min-hosts hosts, more than\n"
      "--max-restarts failures, a usage error of the command), 2 usage error.\n");
}

enum { O_HOSTS = 256, O_AGENT, O_MIN_HOSTS, O_MAX_RESTARTS, O_CHECKPOINT, O_RUN_DIR, O_MPIRUN, O_PROBE_TIMEOUT,
       O_STALL_TIMEOUT, O_JSON, O_MPIRUN_ARG, O_HELP };

static const struct option k_opts[] = {
    {"hosts", required_argument, NULL, O_HOSTS},
    {"agent", required_argument, NULL, O_AGENT},
    {"min-hosts", required_argument, NULL, O_MIN_HOSTS},
    {"max-restarts", required_argument, NULL, O_MAX_RESTARTS},
    {"checkpoint", required_argument, NULL, O_CHECKPOINT},
    {"run-dir", required_argument, NULL, O_RUN_DIR},
    {"mpirun", required_argument, NULL, O_MPIRUN},
    {"mpirun-arg", required_argument, NULL, O_MPIRUN_ARG},
    {"probe-timeout", required_argument, NULL, O_PROBE_TIMEOUT},
    {"stall-timeout", required_argument, NULL, O_STALL_TIMEOUT},
    {"json", required_argument, NULL, O_JSON},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0}};

typedef struct launch_opts {
  char host_buf[4096];
  char *hosts[MAX_HOSTS];
  int n_hosts;
  char agent_buf[1024];
  char *agent[32]; /* NULL-terminated words of --agent, or agent[0] NULL */
  const char *agent_str;
  int min_hosts, max_restarts;
  const char *checkpoint, *run_dir_opt, *mpirun, *json;
  double probe_timeout, stall_timeout;
  char *mpirun_args[64]; /* --mpirun-arg, in order */
  int n_mpirun_args;
  char **cmd; /* the command, argv-style */
  int n_cmd;
  char run_dir[4096];
} launch_opts;

/* One attempt (one mpirun) and, when it failed, the restart that followed. */
typedef struct attempt {
  int n_hosts;
  int host_idx[MAX_HOSTS];
  double start, training, last_beat, detected, end; /* CLOCK_REALTIME seconds; 0: not (yet) */
  long long resume_step, last_step;                 /* -1: from the start; the highest heartbeat step */
  char resume[4200];                                /* the snapshot resumed from, or "" */
  int exit_code, signal; /* mpirun's: exit status, or the signal that ended it */
  int stalled;           /* ended by --stall-timeout */
  int lost[MAX_HOSTS], n_lost, rejoined[MAX_HOSTS], n_rejoined; /* at the probe after it failed */
} attempt;

/* Process-wide: set by SIGINT/SIGTERM, read by the watch loop (the CLI's
 * only signal handler; the library installs none). */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double g_t0; /* the launcher's start, for the printed times (set once in ag_cmd_launch) */

static void event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void event(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("anygrad launch: [%8.3f s] ", wall_s() - g_t0);
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
}

/* The value of `--out` in the command (--out X or --out=X), or NULL. */
static const char *command_out(char **cmd, int n) {
  const char *v = NULL;
  for (int i = 0; i < n; i++) {
    if (!strcmp(cmd[i], "--out") && i + 1 < n) v = cmd[++i];
    else if (!strncmp(cmd[i], "--out=", 6)) v = cmd[i] + 6;
  }
  return v;
}

static int parse(int argc, char **argv, launch_opts *o) {
  const char *C = "launch";
  memset(o, 0, sizeof *o);
  o->min_hosts = 1;
  o->max_restarts = 3;
  o->mpirun = "mpirun";
  o->probe_timeout = 10;
  /* The command follows "--": options are parsed before it only. */
  int dd = -1;
  for (int i = 1; i < argc && dd < 0; i++)
    if (!strcmp(argv[i], "--")) dd = i;
  int n_opt = dd < 0 ? argc : dd;
  const char *hosts = NULL;
  bool ok = true;
  for (int c = ag_cli_next(C, n_opt, argv, k_opts, true); ok && c != -1;
       c = ag_cli_next(C, n_opt, argv, k_opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_HELP: usage(); return AG_EXIT_OK;
      case O_HOSTS: hosts = v; break;
      case O_AGENT: o->agent_str = v; break;
      case O_MIN_HOSTS: ok = ag_cli_int(C, "min-hosts", v, 1, MAX_HOSTS, &o->min_hosts); break;
      case O_MAX_RESTARTS: ok = ag_cli_int(C, "max-restarts", v, 0, MAX_ATTEMPTS - 1, &o->max_restarts); break;
      case O_CHECKPOINT: o->checkpoint = v; break;
      case O_RUN_DIR: o->run_dir_opt = v; break;
      case O_MPIRUN: o->mpirun = v; break;
      case O_MPIRUN_ARG:
        if (o->n_mpirun_args == 64) {
          fprintf(stderr, "anygrad launch: at most 64 --mpirun-arg\n");
          ok = false;
        } else {
          o->mpirun_args[o->n_mpirun_args++] = (char *)v;
        }
        break;
      case O_PROBE_TIMEOUT: ok = ag_cli_f64(C, "probe-timeout", v, 0.01, 3600, &o->probe_timeout); break;
      case O_STALL_TIMEOUT: ok = ag_cli_f64(C, "stall-timeout", v, 0, 1e6, &o->stall_timeout); break;
      case O_JSON: o->json = v; break;
      default: ok = false; break; /* '?': reported */
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  if (!hosts) {
    fprintf(stderr, "anygrad launch: --hosts is required (see --help)\n");
    return AG_EXIT_USAGE;
  }
  o->n_hosts = ag_cli_list(C, "hosts", hosts, o->host_buf, sizeof o->host_buf, o->hosts, MAX_HOSTS);
  if (o->n_hosts < 0) return AG_EXIT_USAGE;
  if (o->min_hosts > o->n_hosts) {
    fprintf(stderr, "anygrad launch: --min-hosts %d is more than the %d hosts of --hosts\n", o->min_hosts,
            o->n_hosts);
    return AG_EXIT_USAGE;
  }
  if (dd < 0 || dd + 1 >= argc) {
    fprintf(stderr, "anygrad launch: no command: put it after '--' (anygrad launch --hosts ... -- anygrad train "
                    "--dist mpi ...)\n");
    return AG_EXIT_USAGE;
  }
  o->cmd = argv + dd + 1;
  o->n_cmd = argc - dd - 1;
  if (o->n_cmd > MAX_ARGS - 96) {
    fprintf(stderr, "anygrad launch: the command has more than %d words\n", MAX_ARGS - 96);
    return AG_EXIT_USAGE;
  }
  for (int i = 0; i < o->n_cmd; i++)
    if (!strcmp(o->cmd[i], "--zero") || !strncmp(o->cmd[i], "--zero=", 7)) {
      /* The shards "<out>.rank<r>" are written after the model file: a
       * snapshot taken between the two would pair them across steps. */
      fprintf(stderr, "anygrad launch: a sharded optimizer (--zero) is not restartable by the launcher yet: run "
                      "the command without --zero\n");
      return AG_EXIT_USAGE;
    }
  if (o->agent_str) {
    if (strlen(o->agent_str) >= sizeof o->agent_buf) {
      fprintf(stderr, "anygrad launch: --agent is too long\n");
      return AG_EXIT_USAGE;
    }
    strcpy(o->agent_buf, o->agent_str);
    int n = 0;
    for (char *p = strtok(o->agent_buf, " "); p && n < 31; p = strtok(NULL, " ")) o->agent[n++] = p;
    o->agent[n] = NULL;
    if (!n) {
      fprintf(stderr, "anygrad launch: --agent must name a command\n");
      return AG_EXIT_USAGE;
    }
  }
  if (!o->checkpoint) o->checkpoint = command_out(o->cmd, o->n_cmd);
  if (!o->checkpoint || !*o->checkpoint) {
    fprintf(stderr, "anygrad launch: no checkpoint to restart from: give --checkpoint PATH or an --out in the "
                    "command (with --save-every N)\n");
    return AG_EXIT_USAGE;
  }
  int n = o->run_dir_opt ? snprintf(o->run_dir, sizeof o->run_dir, "%s", o->run_dir_opt)
                         : snprintf(o->run_dir, sizeof o->run_dir, "%s.launch", o->checkpoint);
  if (n <= 0 || (size_t)n >= sizeof o->run_dir - 64) {
    fprintf(stderr, "anygrad launch: --run-dir is empty or too long\n");
    return AG_EXIT_USAGE;
  }
  return -1;
}

/* ---- processes ---- */

/* Start argv in its own process group (so the whole tree can be ended),
 * output to /dev/null when quiet. Returns the pid, or -1 with errno set. */
static pid_t spawn(char **argv, bool quiet) {
  posix_spawnattr_t at;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&at, 0);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  int e = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (e) {
    errno = e;
    return -1;
  }
  return pid;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* End a process group: SIGTERM, then SIGKILL after 2 s; reaps pid. */
static int end_group(pid_t pid) {
  int status = 0;
  kill(-pid, SIGTERM);
  for (int i = 0; i < 200; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      kill(-pid, SIGKILL); /* anything it left in the group */
      return status;
    }
    sleep_ms(10);
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

static bool is_local(const char *h) {
  char me[256] = "";
  gethostname(me, sizeof me - 1);
  return !strcmp(h, "localhost") || !strcmp(h, "127.0.0.1") || !strcmp(h, "::1") || !strcmp(h, me);
}

/* Probe every host at once; alive[i] says which answered within the
 * timeout. Returns false if a probe could not be started at all. */
static bool probe(const launch_opts *o, bool *alive) {
  pid_t pids[MAX_HOSTS];
  for (int i = 0; i < o->n_hosts; i++) {
    alive[i] = false;
    pids[i] = 0;
    char *argv[40];
    int n = 0;
    if (o->agent[0]) {
      for (int k = 0; o->agent[k]; k++) argv[n++] = o->agent[k];
    } else {
      if (is_local(o->hosts[i])) {
        alive[i] = true;
        continue;
      }
      argv[n++] = "ssh";
      argv[n++] = "-o";
      argv[n++] = "BatchMode=yes";
    }
    argv[n++] = o->hosts[i];
    argv[n++] = "true";
    argv[n] = NULL;
    pids[i] = spawn(argv, true);
    if (pids[i] < 0) {
      fprintf(stderr, "anygrad launch: cannot run the probe '%s': %s\n", argv[0], strerror(errno));
      for (int k = 0; k < i; k++)
        if (pids[k] > 0) end_group(pids[k]);
      return false;
    }
  }
  double t_end = wall_s() + o->probe_timeout;
  for (;;) {
    bool pending = false;
    for (int i = 0; i < o->n_hosts; i++) {
      if (pids[i] <= 0) continue;
      int status;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        alive[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        pids[i] = 0;
      } else {
        pending = true;
      }
    }
    if (!pending) return true;
    if (wall_s() > t_end) {
      for (int i = 0; i < o->n_hosts; i++)
        if (pids[i] > 0) end_group(pids[i]); /* timed out: lost */
      return true;
    }
    sleep_ms(10);
  }
}

/* ---- heartbeats and checkpoints ---- */

typedef struct beat {
  long pid;
  int rank;
  long long step;
  char state[16];
  double time;
} beat;

static bool read_beat(const char *path, beat *b) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  int n = fscanf(f, "anygrad-heartbeat pid %ld rank %d step %lld state %15s time %lf", &b->pid, &b->rank, &b->step,
                 b->state, &b->time);
  fclose(f);
  return n == 5;
}

/* The "step" of a checkpoint's metadata, or -1. */
static long long ckpt_step(const char *path) {
  ag_safetensors *f = NULL;
  if (ag_safetensors_open(path, &f) != AG_OK) {
    ag_error_clear();
    return -1;
  }
  const char *v = ag_safetensors_meta(f, "step");
  int64_t s = -1;
  if (!v || !ag_parse_i64(v, 0, INT64_MAX, &s)) s = -1;
  ag_safetensors_close(f);
  return s;
}

/* Keep the checkpoint as it is now under dst: a hard link (the writer
 * replaces the file by rename, so the link keeps this version), or a copy
 * where links are not possible. */
static bool snapshot(const char *src, const char *dst) {
  unlink(dst);
  if (link(src, dst) == 0) return true;
  FILE *in = fopen(src, "rb");
  if (!in) return false;
  FILE *out = fopen(dst, "wb");
  bool ok = out != NULL;
  char buf[1 << 16];
  size_t n;
  while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
  ok = ok && !ferror(in);
  if (out && fclose(out) != 0) ok = false;
  fclose(in);
  if (!ok) unlink(dst);
  return ok;
}

static void hosts_str(const launch_opts *o, const int *idx, int n, char *buf, size_t len) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < n && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? "," : "", o->hosts[idx[i]]);
}

/* ---- one attempt ---- */

/* Run mpirun for attempt a and watch it until it ends. Returns false if it
 * could not be started. */
static bool run_attempt(const launch_opts *o, attempt *a, int number) {
  char hb[4200], hostlist[4096];
  snprintf(hb, sizeof hb, "%s/heartbeat", o->run_dir);
  hosts_str(o, a->host_idx, a->n_hosts, hostlist, sizeof hostlist);
  for (int r = 0; r < MAX_HOSTS; r++) { /* the previous attempt's */
    char p[4300];
    snprintf(p, sizeof p, "%s.%d", hb, r);
    unlink(p);
  }
  char np[16];
  snprintf(np, sizeof np, "%d", a->n_hosts);
  char *argv[MAX_ARGS];
  int n = 0;
  argv[n++] = (char *)o->mpirun;
  argv[n++] = "-np";
  argv[n++] = np;
  argv[n++] = "--host";
  argv[n++] = hostlist;
  if (o->agent_str) {
    argv[n++] = "--mca";
    argv[n++] = "plm_rsh_agent";
    argv[n++] = (char *)o->agent_str;
  }
  /* A failed job's ranks go at once: nothing of theirs needs a grace
   * period (checkpoints are replaced atomically). */
  argv[n++] = "--mca";
  argv[n++] = "odls_base_sigkill_timeout";
  argv[n++] = "0";
  for (int i = 0; i < o->n_mpirun_args; i++) argv[n++] = o->mpirun_args[i];
  for (int i = 0; i < o->n_cmd; i++) argv[n++] = o->cmd[i];
  argv[n++] = "--heartbeat";
  argv[n++] = hb;
  if (a->resume[0]) {
    argv[n++] = "--resume";
    argv[n++] = a->resume;
  }
  argv[n] = NULL;
  a->start = wall_s();
  a->last_step = a->resume_step < 0 ? 0 : a->resume_step;
  /* The stall clock is this host's: when a newer heartbeat was first seen
   * (the heartbeats' own times come from the ranks' hosts' clocks). */
  double newest = 0, newest_seen = 0;
  if (a->resume[0])
    event("attempt %d: %d host%s (%s), resuming from step %lld (%s)", number, a->n_hosts, a->n_hosts == 1 ? "" : "s",
          hostlist, a->resume_step, a->resume);
  else
    event("attempt %d: %d host%s (%s), from the start", number, a->n_hosts, a->n_hosts == 1 ? "" : "s", hostlist);
  pid_t pid = spawn(argv, false);
  if (pid < 0) {
    fprintf(stderr, "anygrad launch: cannot run '%s': %s\n", o->mpirun, strerror(errno));
    return false;
  }
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    /* heartbeats: the first step done in this attempt, the last step seen */
    bool all_end = true, any = false;
    for (int k = 0; k < a->n_hosts; k++) {
      char p[4300];
      snprintf(p, sizeof p, "%s.%d", hb, k);
      beat b;
      if (!read_beat(p, &b)) {
        all_end = false;
        continue;
      }
      any = true;
      if (strcmp(b.state, "end")) all_end = false;
      if (b.time > a->last_beat) a->last_beat = b.time;
      if (b.time > newest) {
        newest = b.time;
        newest_seen = wall_s();
      }
      if (b.step > a->last_step) a->last_step = b.step;
      if (!a->training && b.step > (a->resume_step < 0 ? 0 : a->resume_step)) {
        a->training = b.time;
        event("attempt %d: training (step %lld done on rank %d)", number, b.step, b.rank);
      }
    }
    if (g_stop) {
      event("attempt %d: signal %d: ending mpirun", number, (int)g_stop);
      status = end_group(pid);
      break;
    }
    if (o->stall_timeout > 0 && any && !all_end && wall_s() - newest_seen > o->stall_timeout) {
      event("attempt %d: no heartbeat for %.1f s (step %lld): ending mpirun", number, o->stall_timeout, a->last_step);
      a->stalled = 1;
      a->detected = wall_s();
      status = end_group(pid);
      break;
    }
    sleep_ms(20);
  }
  a->end = wall_s();
  if (!a->detected) a->detected = a->end;
  a->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  a->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  kill(-pid, SIGKILL); /* nothing of the attempt outlives it */
  /* the last heartbeats, written after the loop's last read */
  for (int k = 0; k < a->n_hosts; k++) {
    char p[4300];
    snprintf(p, sizeof p, "%s.%d", hb, k);
    beat b;
    if (!read_beat(p, &b)) continue;
    if (b.time > a->last_beat) a->last_beat = b.time;
    if (b.step > a->last_step) a->last_step = b.step;
    if (!a->training && b.step > (a->resume_step < 0 ? 0 : a->resume_step)) a->training = b.time;
  }
  return true;
}

/* ---- the report ---- */

static void json_num(FILE *f, const char *k, double v, bool comma) {
  if (v > 0)
    fprintf(f, "\"%s\": %.6f%s", k, v, comma ? ", " : "");
  else
    fprintf(f, "\"%s\": null%s", k, comma ? ", " : "");
}

static void json_hosts(FILE *f, const launch_opts *o, const int *idx, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputs(", ", f);
    ag_cli_json_str(f, o->hosts[idx[i]]);
  }
  fputc(']', f);
}

static bool write_json(const launch_opts *o, const attempt *at, int n, int rc, const char *message) {
  FILE *f = fopen(o->json, "w");
  if (!f) {
    fprintf(stderr, "anygrad launch: cannot write --json %s: %s\n", o->json, strerror(errno));
    return false;
  }
  fprintf(f, "{\"result\": \"%s\", \"message\": ", rc == AG_EXIT_OK ? "ok" : "error");
  ag_cli_json_str(f, message);
  fprintf(f, ", \"start\": %.6f, \"attempts\": [\n", g_t0);
  for (int i = 0; i < n; i++) {
    const attempt *a = &at[i];
    fprintf(f, "  {\"hosts\": ");
    json_hosts(f, o, a->host_idx, a->n_hosts);
    fprintf(f, ", \"resume_step\": %lld, \"resume\": ", a->resume_step);
    if (a->resume[0]) ag_cli_json_str(f, a->resume);
    else fputs("null", f);
    fputs(", ", f);
    json_num(f, "start", a->start, true);
    json_num(f, "training", a->training, true);
    json_num(f, "last_heartbeat", a->last_beat, true);
    json_num(f, "detected", a->detected, true);
    json_num(f, "end", a->end, true);
    fprintf(f, "\"last_step\": %lld, \"exit_code\": %d, \"signal\": %d, \"stalled\": %s, \"lost\": ", a->last_step,
            a->exit_code, a->signal, a->stalled ? "true" : "false");
    json_hosts(f, o, a->lost, a->n_lost);
    fputs(", \"rejoined\": ", f);
    json_hosts(f, o, a->rejoined, a->n_rejoined);
    fprintf(f, "}%s\n", i + 1 < n ? "," : "");
  }
  fputs("], \"restarts\": [\n", f);
  for (int i = 0; i + 1 < n; i++) {
    const attempt *a = &at[i], *b = &at[i + 1];
    fprintf(f, "  {\"lost\": ");
    json_hosts(f, o, a->lost, a->n_lost);
    fprintf(f, ", \"hosts_after\": %d, \"from_step\": %lld, \"last_step\": %lld, \"steps_lost\": %lld, ", b->n_hosts,
            b->resume_step < 0 ? 0 : b->resume_step, a->last_step,
            a->last_step - (b->resume_step < 0 ? 0 : b->resume_step));
    json_num(f, "last_progress", a->last_beat, true);
    json_num(f, "detected", a->detected, true);
    json_num(f, "training_again", b->training, true);
    if (a->last_beat > 0 && b->training > 0)
      fprintf(f, "\"seconds_to_training\": %.3f}", b->training - a->last_beat);
    else
      fputs("\"seconds_to_training\": null}", f);
    fprintf(f, "%s\n", i + 2 < n ? "," : "");
  }
  fputs("]}\n", f);
  if (fclose(f) != 0) {
    fprintf(stderr, "anygrad launch: cannot write --json %s\n", o->json);
    return false;
  }
  return true;
}

static void summary(const launch_opts *o, const attempt *at, int n) {
  printf("anygrad launch: %d attempt%s, %d restart%s\n", n, n == 1 ? "" : "s", n - 1, n == 2 ? "" : "s");
  for (int i = 0; i + 1 < n; i++) {
    const attempt *a = &at[i], *b = &at[i + 1];
    char lost[1024] = "none";
    if (a->n_lost) hosts_str(o, a->lost, a->n_lost, lost, sizeof lost);
    long long from = b->resume_step < 0 ? 0 : b->resume_step;
    printf("  restart %d: hosts lost %s; %d -> %d hosts; resumed at step %lld, the last step reached was %lld "
           "(%lld steps lost)\n", i + 1, lost, a->n_hosts, b->n_hosts, from, a->last_step, a->last_step - from);
    if (a->last_beat > 0)
      printf("             from the last heartbeat: failure detected after %.3f s, training again after %s%.3f s\n",
             a->detected - a->last_beat, b->training > 0 ? "" : "(never) ",
             b->training > 0 ? b->training - a->last_beat : 0.0);
  }
  fflush(stdout);
}

int ag_cmd_launch(int argc, char **argv) {
  launch_opts *o = calloc(1, sizeof *o);
  attempt *at = calloc(MAX_ATTEMPTS, sizeof *at);
  if (!o || !at) {
    free(o);
    free(at);
    fprintf(stderr, "anygrad launch: out of host memory\n");
    return AG_EXIT_RUNTIME;
  }
  int rc = parse(argc, argv, o);
  if (rc >= 0) {
    free(o);
    free(at);
    return rc;
  }
  g_t0 = wall_s();
  if (mkdir(o->run_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "anygrad launch: cannot create --run-dir %s: %s\n", o->run_dir, strerror(errno));
    free(o);
    free(at);
    return AG_EXIT_RUNTIME;
  }
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  bool alive[MAX_HOSTS] = {0}, was_alive[MAX_HOSTS];
  char message[512] = "";
  int n = 0;
  rc = AG_EXIT_RUNTIME;
  bool ok = probe(o, alive);
  for (int i = 0; ok && i < o->n_hosts; i++)
    if (!alive[i]) event("host %s does not answer the probe", o->hosts[i]);
  /* A file already at the checkpoint path belongs to an earlier run: a
   * restart resumes only from one this job wrote (each save renames a new
   * file over the path, so its inode or time changes). */
  struct stat st0;
  bool had_ckpt = stat(o->checkpoint, &st0) == 0;
  long long resume_step = -1;
  char resume[4200] = "";
  while (ok) {
    attempt *a = &at[n];
    for (int i = 0; i < o->n_hosts; i++)
      if (alive[i]) a->host_idx[a->n_hosts++] = i;
    if (a->n_hosts < o->min_hosts) {
      snprintf(message, sizeof message, "%d host%s answer%s, fewer than --min-hosts %d: stopping", a->n_hosts,
               a->n_hosts == 1 ? "" : "s", a->n_hosts == 1 ? "s" : "", o->min_hosts);
      break;
    }
    a->resume_step = resume_step;
    snprintf(a->resume, sizeof a->resume, "%s", resume);
    n++;
    if (!run_attempt(o, a, n)) {
      snprintf(message, sizeof message, "mpirun could not be started");
      break;
    }
    if (g_stop) {
      snprintf(message, sizeof message, "stopped by signal %d", (int)g_stop);
      break;
    }
    if (!a->stalled && a->signal == 0 && a->exit_code == 0) {
      event("attempt %d: the job finished (step %lld)", n, a->last_step);
      rc = AG_EXIT_OK;
      snprintf(message, sizeof message, "finished");
      break;
    }
    if (a->signal)
      event("attempt %d: mpirun ended by signal %d at step %lld", n, a->signal, a->last_step);
    else
      event("attempt %d: failed (mpirun exit %d) at step %lld", n, a->exit_code, a->last_step);
    memcpy(was_alive, alive, sizeof alive);
    if (!probe(o, alive)) {
      snprintf(message, sizeof message, "the probe could not be run");
      break;
    }
    for (int i = 0; i < o->n_hosts; i++) {
      if (was_alive[i] && !alive[i]) a->lost[a->n_lost++] = i;
      if (!was_alive[i] && alive[i]) a->rejoined[a->n_rejoined++] = i;
    }
    char lost[1024] = "none", back[1024] = "none";
    if (a->n_lost) hosts_str(o, a->lost, a->n_lost, lost, sizeof lost);
    if (a->n_rejoined) hosts_str(o, a->rejoined, a->n_rejoined, back, sizeof back);
    event("probe: hosts lost: %s; rejoining: %s", lost, back);
    /* Every host answers and the command said its arguments are wrong: a
     * restart would fail the same way. */
    if (!a->n_lost && !a->stalled && a->exit_code == AG_EXIT_USAGE &&
        a->last_step <= (resume_step < 0 ? 0 : resume_step)) {
      snprintf(message, sizeof message,
               "the command failed with a usage error (exit 2) on live hosts: not restarting");
      break;
    }
    if (n > o->max_restarts) {
      snprintf(message, sizeof message, "%d failures, more than --max-restarts %d: stopping", n, o->max_restarts);
      break;
    }
    char snap[4200];
    snprintf(snap, sizeof snap, "%s/restart%d.safetensors", o->run_dir, n);
    struct stat st1;
    bool fresh = stat(o->checkpoint, &st1) == 0 &&
                 (!had_ckpt || st1.st_ino != st0.st_ino || st1.st_dev != st0.st_dev ||
                  st1.st_mtim.tv_sec != st0.st_mtim.tv_sec || st1.st_mtim.tv_nsec != st0.st_mtim.tv_nsec);
    if (fresh) {
      if (!snapshot(o->checkpoint, snap)) {
        snprintf(message, sizeof message, "cannot keep the checkpoint %.200s as %.200s: %s", o->checkpoint, snap,
                 strerror(errno));
        break;
      }
      resume_step = ckpt_step(snap);
      if (resume_step < 0) {
        snprintf(message, sizeof message, "the checkpoint %.200s has no readable step: cannot resume from it",
                 o->checkpoint);
        break;
      }
      snprintf(resume, sizeof resume, "%s", snap);
    } else {
      event("no checkpoint at %s from this job yet: the restart runs the command as given", o->checkpoint);
      resume_step = -1;
      resume[0] = 0;
    }
  }
  if (rc != AG_EXIT_OK) fprintf(stderr, "anygrad launch: %s\n", message[0] ? message : "failed");
  summary(o, at, n);
  if (o->json && !write_json(o, at, n, rc, message) && rc == AG_EXIT_OK) rc = AG_EXIT_RUNTIME;
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  free(o);
  free(at);
  return rc;
}
