/* Diagnostics: host-synchronization accounting and sync-debug mode. */
#ifndef ANYGRAD_DIAG_H
#define ANYGRAD_DIAG_H

#include <stdint.h>

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ag_sync_debug {
  AG_SYNC_DEBUG_OFF = 0,
  AG_SYNC_DEBUG_WARN = 1,  /* print each syncing call once to stderr */
  AG_SYNC_DEBUG_ERROR = 2, /* refuse the sync: the call returns AG_ERR_SYNC */
} ag_sync_debug;

/* Process-wide mode; initial value from AG_SYNC_DEBUG=off|warn|error. */
AG_API void ag_set_sync_debug(ag_sync_debug mode);
AG_API ag_sync_debug ag_get_sync_debug(void);

/* Host<->device synchronizations performed by anygrad in this process
 * (item, to-host copies, explicit synchronizes, allocator retries). */
AG_API uint64_t ag_sync_count(void);

#ifdef __cplusplus
}
#endif
#endif
