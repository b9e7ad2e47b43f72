/* The process-wide numerics mode (device.h, docs/numerics.md): one atomic
 * read by every launch, initialised from AG_NUMERICS on first use, and the
 * per-device check of portable mode, made once per device. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/device.h"
#include "runtime/devstate.h"

#include "hidden.h"

static atomic_int g_numerics = -1; /* -1: not read from the environment yet */

ag_status ag_numerics_parse(const char *s, ag_numerics *out) {
  if (!s || !out) return ag_error_set(AG_ERR_INVALID, "ag_numerics_parse: NULL argument");
  if (!strcmp(s, "default")) *out = AG_NUMERICS_DEFAULT;
  else if (!strcmp(s, "portable")) *out = AG_NUMERICS_PORTABLE;
  else {
    char b[64];
    return ag_error_set(AG_ERR_INVALID, "numerics '%s' is not default or portable", ag_escape(s, b, sizeof b));
  }
  return AG_OK;
}

const char *ag_numerics_name(ag_numerics mode) {
  switch (mode) {
    case AG_NUMERICS_DEFAULT: return "default";
    case AG_NUMERICS_PORTABLE: return "portable";
  }
  return "?";
}

ag_numerics ag_get_numerics(void) {
  int m = atomic_load_explicit(&g_numerics, memory_order_relaxed);
  if (AG_LIKELY(m >= 0)) return (ag_numerics)m;
  /* A value other than default/portable stops the first device open
   * (ag__env_check); here it counts as the default. */
  const char *e = getenv("AG_NUMERICS");
  m = e && !strcmp(e, "portable") ? AG_NUMERICS_PORTABLE : AG_NUMERICS_DEFAULT;
  int expect = -1;
  atomic_compare_exchange_strong(&g_numerics, &expect, m);
  return (ag_numerics)atomic_load(&g_numerics);
}

ag_status ag_set_numerics(ag_numerics mode) {
  if (mode != AG_NUMERICS_DEFAULT && mode != AG_NUMERICS_PORTABLE)
    return ag_error_set(AG_ERR_INVALID, "ag_set_numerics: mode %d is not AG_NUMERICS_DEFAULT or AG_NUMERICS_PORTABLE",
                        (int)mode);
  atomic_store(&g_numerics, (int)mode);
  return AG_OK;
}

ag_status ag__env_numerics_check(void) {
  const char *e = getenv("AG_NUMERICS");
  ag_numerics m;
  if (e && *e && ag_numerics_parse(e, &m) != AG_OK) {
    char b[64];
    return ag_error_set(AG_ERR_INVALID, "AG_NUMERICS='%s' is not default or portable", ag_escape(e, b, sizeof b));
  }
  return AG_OK;
}

/* The backend's verdict, once per device: the first caller asks, later ones
 * read the cached answer (a refusal repeats its message). */
ag_status ag__portable_open(ag_devstate *ds) {
  int st = atomic_load_explicit(&ds->portable_state, memory_order_acquire);
  if (st == 1) return AG_OK;
  if (st == 0) {
    ag_status r;
    if (!ds->be->portable_check || !ds->be->supports_portable)
      r = ag_error_set(AG_ERR_UNSUPPORTED,
                       "%s: backend %s has no portable numerics (a module before backend ABI 5.2, or one bound to "
                       "other op tables)",
                       ds->label, ds->be->name);
    else
      r = ds->be->portable_check(ds->ord);
    pthread_mutex_lock(&ds->lock);
    if (atomic_load(&ds->portable_state) == 0) {
      if (r != AG_OK) snprintf(ds->portable_reason, sizeof ds->portable_reason, "%s", ag_last_error());
      atomic_store_explicit(&ds->portable_state, r == AG_OK ? 1 : -1, memory_order_release);
    }
    pthread_mutex_unlock(&ds->lock);
    st = atomic_load_explicit(&ds->portable_state, memory_order_acquire);
    if (st == 1) return AG_OK;
  }
  return ag_error_set(AG_ERR_UNSUPPORTED, "%s refuses portable numerics: %s", ds->label, ds->portable_reason);
}

ag_status ag_device_numerics_check(ag_device d, ag_numerics mode) {
  if (mode != AG_NUMERICS_DEFAULT && mode != AG_NUMERICS_PORTABLE)
    return ag_error_set(AG_ERR_INVALID, "ag_device_numerics_check: mode %d is not a numerics mode", (int)mode);
  ag_devstate *ds = ag__devstate(d);
  if (!ds) return ag_last_status();
  return mode == AG_NUMERICS_DEFAULT ? AG_OK : ag__portable_open(ds);
}
