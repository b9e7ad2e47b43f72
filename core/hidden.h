/* Symbol visibility and branch hints shared by the core, the built-in CPU
 * backend and the core services it uses. Never installed. */
#ifndef AG_CORE_HIDDEN_H
#define AG_CORE_HIDDEN_H

#define AG_HIDDEN __attribute__((visibility("hidden")))
#define AG_LIKELY(x) __builtin_expect(!!(x), 1)
#define AG_UNLIKELY(x) __builtin_expect(!!(x), 0)

#endif
