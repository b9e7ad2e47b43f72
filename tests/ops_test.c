/* Every op x dtype of the conformance engine on the CPU backend (where every
 * contract dtype must be implemented) and on opencl:0 when this machine has
 * one (where AG_ERR_UNSUPPORTED is allowed, failures are not). One cmocka
 * test per op so a failure names it; AG_CONF_SEED=<n> changes the inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "anygrad/anygrad.h"
#include "conformance.h"

static uint64_t g_seed = AG_CONF_DEFAULT_SEED;

typedef struct opcase {
  int op;
  ag_device dev;
  bool strict; /* unsupported counts as failure */
} opcase;

static void run_op(void **state) {
  const opcase *oc = *state;
  int bad = 0;
  for (int dt = 0; dt < AG_DTYPE_COUNT; dt++) {
    char msg[1024];
    ag_conf_result r = ag_conf_run(oc->op, (ag_dtype)dt, oc->dev, g_seed, NULL, msg, sizeof msg);
    if (r == AG_CONF_FAIL || (oc->strict && r == AG_CONF_UNSUPPORTED)) {
      print_error("%s: %s\n", ag_conf_result_name(r), msg);
      bad++;
    }
  }
  assert_int_equal(bad, 0);
}

static int run_group(const char *name, ag_device dev, bool strict) {
  int n = ag_conf_op_count();
  struct CMUnitTest *tests = calloc((size_t)n, sizeof *tests);
  opcase *cases = calloc((size_t)n, sizeof *cases);
  if (!tests || !cases) return 1;
  for (int i = 0; i < n; i++) {
    cases[i] = (opcase){i, dev, strict};
    tests[i].name = ag_conf_op_name(i);
    tests[i].test_func = run_op;
    tests[i].initial_state = &cases[i];
  }
  int rc = _cmocka_run_group_tests(name, tests, (size_t)n, NULL, NULL);
  free(tests);
  free(cases);
  return rc;
}

int main(int argc, char **argv) {
  const char *s = getenv("AG_CONF_SEED");
  if (s && *s) g_seed = strtoull(s, NULL, 0);
  printf("conformance seed 0x%llx\n", (unsigned long long)g_seed);
  bool want_cpu = argc < 2 || strcmp(argv[1], "opencl") != 0;
  bool want_cl = argc < 2 || strcmp(argv[1], "cpu") != 0;
  int rc = 0;
  if (want_cpu) rc |= run_group("ops_cpu", AG_CPU, true);
  if (want_cl) {
    const char *why = NULL;
    if (ag_backend_available(AG_BACKEND_OPENCL, &why)) {
      ag_device d;
      if (ag_device_parse("opencl:0", &d) == AG_OK) rc |= run_group("ops_opencl", d, false);
      else rc = 1;
    } else {
      printf("opencl: skipped (%s)\n", why ? why : "unavailable");
      if (!want_cpu) return 77; /* CTest SKIP_RETURN_CODE */
    }
  }
  return rc ? 1 : 0;
}
