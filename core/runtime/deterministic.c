/* The process-wide deterministic-mode switch (device.h): one atomic read by
 * every launch, initialised from AG_DETERMINISTIC on first use. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/device.h"

#include "hidden.h"

static atomic_int g_det = -1; /* -1: not read from the environment yet */

bool ag_get_deterministic(void) {
  int d = atomic_load_explicit(&g_det, memory_order_relaxed);
  if (AG_LIKELY(d >= 0)) return d != 0;
  const char *e = getenv("AG_DETERMINISTIC");
  /* Anything else than 0/1/on/off/true/false stops the first device open
   * (ag__env_check); here it counts as off. */
  d = e && (!strcmp(e, "1") || !strcmp(e, "on") || !strcmp(e, "true"));
  int expect = -1;
  atomic_compare_exchange_strong(&g_det, &expect, d);
  return atomic_load(&g_det) != 0;
}

void ag_set_deterministic(bool on) { atomic_store(&g_det, on ? 1 : 0); }
