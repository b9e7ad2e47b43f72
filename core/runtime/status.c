/* Status names and the thread-local error message. Each thread keeps the
 * message of its most recent failure; ops given NULL inputs leave it alone so
 * the first failure of a chain is what the caller reads. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "anygrad/status.h"
#include "anygrad/version.h"

static _Thread_local char tl_msg[1024];
static _Thread_local ag_status tl_status;

const char *ag_status_name(ag_status s) {
  switch (s) {
    case AG_OK: return "AG_OK";
    case AG_ERR_INVALID: return "AG_ERR_INVALID";
    case AG_ERR_SHAPE: return "AG_ERR_SHAPE";
    case AG_ERR_DTYPE: return "AG_ERR_DTYPE";
    case AG_ERR_DEVICE: return "AG_ERR_DEVICE";
    case AG_ERR_UNAVAILABLE: return "AG_ERR_UNAVAILABLE";
    case AG_ERR_UNSUPPORTED: return "AG_ERR_UNSUPPORTED";
    case AG_ERR_OOM: return "AG_ERR_OOM";
    case AG_ERR_INDEX: return "AG_ERR_INDEX";
    case AG_ERR_BACKEND: return "AG_ERR_BACKEND";
    case AG_ERR_IO: return "AG_ERR_IO";
    case AG_ERR_CORRUPT: return "AG_ERR_CORRUPT";
    case AG_ERR_STATE: return "AG_ERR_STATE";
    case AG_ERR_SYNC: return "AG_ERR_SYNC";
    case AG_ERR_INTERNAL: return "AG_ERR_INTERNAL";
    case AG_ERR_TIMEOUT: return "AG_ERR_TIMEOUT";
    case AG_ERR_ABORTED: return "AG_ERR_ABORTED";
  }
  return "AG_ERR_?";
}

const char *ag_last_error(void) { return tl_msg; }
ag_status ag_last_status(void) { return tl_status; }

void ag_error_clear(void) {
  tl_msg[0] = 0;
  tl_status = AG_OK;
}

ag_status ag_error_set(ag_status s, const char *fmt, ...) {
  /* Formatted aside, then copied: callers may pass ag_last_error() itself
   * as an argument ("%s: %s", fn, ag_last_error()), which must not be read
   * while it is overwritten. */
  char tmp[sizeof tl_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  memcpy(tl_msg, tmp, sizeof tl_msg);
  tl_status = s;
  return s;
}

int ag_version(int *out_major, int *out_minor, int *out_patch) {
  if (out_major) *out_major = AG_VERSION_MAJOR;
  if (out_minor) *out_minor = AG_VERSION_MINOR;
  if (out_patch) *out_patch = AG_VERSION_PATCH;
  return AG_VERSION_NUMBER;
}

const char *ag_version_string(void) { return AG_VERSION_STRING; }
