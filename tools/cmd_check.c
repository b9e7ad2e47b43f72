/* `anygrad check`: the conformance engine on every available backend, printed
 * as a support matrix (op x backend x dtype) with the first failure of each
 * cell underneath. Exits 1 on any failure, so CI can run it directly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "conformance.h"

static void check_usage(void) {
  printf(
      "usage: anygrad check [--backend B[,B...]] [--ops a,b,...] [--dtype d[,d...]] [--seed S]\n"
      "                     [--forward | --grad] [--verbose]\n\n"
      "Runs every op x dtype x shape case against a double-precision host reference.\n"
      "  --backend  cpu, opencl, opencl:1, cuda, hip (default: every backend; absent ones are\n"
      "             listed as skipped)\n"
      "  --ops      op names (default: all): %s",
      ag_conf_op_name(0));
  for (int i = 1; i < ag_conf_op_count(); i++) printf("%s%s", i % 10 ? "," : ",\n             ", ag_conf_op_name(i));
  printf(
      "\n  --dtype    f32,f16,bf16,i32,f64 (default: all)\n"
      "  --seed     input seed, decimal or 0x hex (default 0x%llx); printed so a failure can be\n"
      "             reproduced\n"
      "  --forward  only the forward ops; --grad only the gradient checks (grad_<op>: backward\n"
      "             against central finite differences on the same device, f32 and f64)\n"
      "  --verbose  one line per case\n"
      "Cells: pass, FAIL, unsup (the backend reports AG_ERR_UNSUPPORTED), - (not an op of that\n"
      "dtype). Exit status 1 when any cell fails, 2 on a usage error.\n",
      (unsigned long long)AG_CONF_DEFAULT_SEED);
}

/* Split a comma list into at most max entries of buf (modified in place). */
static int split(char *s, char **out, int max) {
  int n = 0;
  for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
  return n;
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
  bool verbose = false;
  int mode = 0; /* 0 all, 1 forward only, 2 gradients only */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      check_usage();
      return 0;
    } else if (!strcmp(a, "--backend") && has) backends = argv[++i];
    else if (!strcmp(a, "--ops") && has) ops = argv[++i];
    else if (!strcmp(a, "--dtype") && has) dtypes = argv[++i];
    else if (!strcmp(a, "--seed") && has) seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) verbose = true;
    else if (!strcmp(a, "--forward")) mode = 1;
    else if (!strcmp(a, "--grad")) mode = 2;
    else {
      fprintf(stderr, "anygrad check: unknown or incomplete option '%s'\n", a);
      check_usage();
      return 2;
    }
  }

  /* columns: requested or every backend kind (device 0) */
  col cols[16];
  int ncol = 0;
  char bbuf[256], *bl[16];
  if (backends) {
    snprintf(bbuf, sizeof bbuf, "%s", backends);
    int n = split(bbuf, bl, 16);
    for (int i = 0; i < n; i++) {
      col *c = &cols[ncol++];
      memset(c, 0, sizeof *c);
      snprintf(c->label, sizeof c->label, "%s", bl[i]);
      ag_status st = ag_device_parse(bl[i], &c->dev);
      if (st == AG_ERR_UNAVAILABLE || st == AG_ERR_DEVICE) {
        c->skipped = true;
        snprintf(c->reason, sizeof c->reason, "%s", ag_last_error());
      } else if (st != AG_OK) {
        fprintf(stderr, "anygrad check: %s\n", ag_last_error());
        return 2;
      }
    }
  } else {
    for (int k = 0; k < AG_BACKEND_COUNT; k++) {
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

  int opsel[128], nops = 0;
  if (ops) {
    char obuf[1024], *ol[128];
    snprintf(obuf, sizeof obuf, "%s", ops);
    int n = split(obuf, ol, 128);
    for (int i = 0; i < n; i++) {
      int o = ag_conf_op_find(ol[i]);
      if (o < 0) {
        fprintf(stderr, "anygrad check: unknown op '%s' (see --help)\n", ol[i]);
        return 2;
      }
      opsel[nops++] = o;
    }
  } else {
    for (int i = 0; i < ag_conf_op_count() && nops < 128; i++) {
      bool grad = !strncmp(ag_conf_op_name(i), "grad_", 5);
      if (mode == 0 || (mode == 2) == grad) opsel[nops++] = i;
    }
  }
  ag_dtype dts[AG_DTYPE_COUNT];
  int ndt = 0;
  if (dtypes) {
    char dbuf[128], *dl[8];
    snprintf(dbuf, sizeof dbuf, "%s", dtypes);
    int n = split(dbuf, dl, 8);
    for (int i = 0; i < n && ndt < AG_DTYPE_COUNT; i++)
      if (ag_dtype_parse(dl[i], &dts[ndt]) == AG_OK) ndt++;
      else {
        fprintf(stderr, "anygrad check: %s\n", ag_last_error());
        return 2;
      }
  } else {
    for (int i = 0; i < AG_DTYPE_COUNT; i++) dts[ndt++] = (ag_dtype)i;
  }

  printf("anygrad check: seed 0x%llx (reproduce with --seed 0x%llx)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  for (int i = 0; i < ncol; i++)
    if (cols[i].skipped) printf("  %s: skipped (%s)\n", cols[i].label, cols[i].reason);
  printf("\n%-19s", "op");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) {
      printf(" | %-*s", ndt * 6 - 1, cols[i].label);
    }
  printf("\n%-19s", "");
  for (int i = 0; i < ncol; i++)
    if (!cols[i].skipped) {
      printf(" |");
      for (int d = 0; d < ndt; d++) printf(" %-5s", ag_dtype_name(dts[d]));
    }
  printf("\n");

  int fails = 0, passes = 0, unsup = 0;
  size_t fcap = 4096, flen = 0;
  char *flog = malloc(fcap);
  if (flog) flog[0] = 0;
  for (int oi = 0; oi < nops; oi++) {
    printf("%-19s", ag_conf_op_name(opsel[oi]));
    fflush(stdout);
    for (int i = 0; i < ncol; i++) {
      if (cols[i].skipped) continue;
      printf(" |");
      for (int d = 0; d < ndt; d++) {
        char msg[1024];
        ag_conf_result r = ag_conf_run(opsel[oi], dts[d], cols[i].dev, seed, verbose ? stderr : NULL,
                                       msg, sizeof msg);
        printf(" %-5s", ag_conf_result_name(r));
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
    printf("\n");
  }
  printf("\n%d pass, %d fail, %d unsupported\n", passes, fails, unsup);
  if (fails && flog) printf("\nfailures:\n%s", flog);
  free(flog);
  return fails ? 1 : 0;
}
