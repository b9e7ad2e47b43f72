/* The launch hooks behind op traces (anygrad/optrace.h) and the test-only
 * fault injection (AG_FAULT, docs/design/core.md). ag__launch tests one
 * relaxed atomic; only when it is nonzero does a launch go through
 * ag__launch_hooked. Never installed. */
#ifndef AG_CORE_OPTRACE_H
#define AG_CORE_OPTRACE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "anygrad/backend.h"
#include "runtime/devstate.h"

#include "hidden.h"

/* Recording traces plus one while AG_FAULT is active. Thread-safe. */
AG_HIDDEN extern atomic_int ag__launch_hooks;

static inline bool ag__hooks_on(void) {
  return AG_UNLIKELY(atomic_load_explicit(&ag__launch_hooks, memory_order_relaxed) != 0);
}

/* The backend launch of c on s with the hooks: the thread's trace records
 * it, AG_FAULT may alter its output. Returns the launch's status. */
AG_HIDDEN ag_status ag__launch_hooked(ag_devstate *ds, ag_stream *s, ag_kernel_call *c);

/* The autograd node whose backward runs next on this thread (NULL: none). */
AG_HIDDEN void ag__optrace_node(const char *name, int index);

/* Parse AG_FAULT once (runtime/env.c reads it) and enable the hook when it
 * is set. AG_ERR_INVALID naming the value when it is not op:device:kind. */
AG_HIDDEN ag_status ag__fault_init(void);

#endif
