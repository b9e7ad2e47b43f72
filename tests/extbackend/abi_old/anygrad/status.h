/* anygrad status codes and the thread-local error message.
 * Every fallible call returns an ag_status (AG_OK == 0) or NULL and leaves a
 * message saying what failed and where. */
#ifndef ANYGRAD_STATUS_H
#define ANYGRAD_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* AG_API marks the public functions: exported while the library itself is
 * built (AG_BUILDING_LIBRARY), imported by its users, and nothing at all
 * for a static library (define AG_STATIC, as the CMake package and
 * anygrad.pc do for it). Compilers without GNU attributes get plain
 * declarations. */
#if defined(_WIN32)
#if defined(AG_STATIC)
#define AG_API
#elif defined(AG_BUILDING_LIBRARY)
#define AG_API __declspec(dllexport)
#else
#define AG_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define AG_API __attribute__((visibility("default")))
#else
#define AG_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define AG_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define AG_PRINTF_LIKE(fmt, args)
#endif

typedef enum ag_status {
  AG_OK = 0,
  AG_ERR_INVALID = 1,      /* bad argument: NULL, bad value, bad string */
  AG_ERR_SHAPE = 2,        /* shapes cannot be combined */
  AG_ERR_DTYPE = 3,        /* dtype not allowed for this op */
  AG_ERR_DEVICE = 4,       /* tensors on different devices, bad ordinal */
  AG_ERR_UNAVAILABLE = 5,  /* backend or device absent on this machine */
  AG_ERR_UNSUPPORTED = 6,  /* op x dtype not implemented by the backend */
  AG_ERR_OOM = 7,          /* device or host memory exhausted */
  AG_ERR_INDEX = 8,        /* index or target out of range */
  AG_ERR_BACKEND = 9,      /* the vendor runtime reported an error */
  AG_ERR_IO = 10,          /* file could not be read or written */
  AG_ERR_CORRUPT = 11,     /* file contents are malformed or truncated */
  AG_ERR_STATE = 12,       /* call not valid in the current state */
  AG_ERR_SYNC = 13,        /* host sync forbidden by sync-debug mode */
  AG_ERR_INTERNAL = 14,    /* a bug in anygrad */
  AG_ERR_TIMEOUT = 15,     /* a wait ran past its timeout (a peer never arrived) */
  AG_ERR_ABORTED = 16,     /* a communication group was aborted (a peer failed) */
} ag_status;

/* Short constant name of a status ("AG_ERR_OOM"). Never NULL. */
AG_API const char *ag_status_name(ag_status s);

/* The message of the most recent error on this thread, or "" if none since
 * the last ag_error_clear(). Borrowed: valid until the next anygrad call on
 * this thread that fails or clears. An op given a NULL input returns NULL
 * without replacing the message, so a chain of ops can be checked once at its
 * end and still report the first failure. */
AG_API const char *ag_last_error(void);

/* Status of the most recent error on this thread (AG_OK if none since clear). */
AG_API ag_status ag_last_status(void);

/* Forget the recorded error on this thread. */
AG_API void ag_error_clear(void);

/* Record an error (printf-style message, truncated at 1023 bytes) on this
 * thread and return `s`. Used by the core and by backends; user code may use it
 * in its own callbacks (loader workers) so the message reaches the caller. */
AG_API ag_status ag_error_set(ag_status s, const char *fmt, ...)
    AG_PRINTF_LIKE(2, 3);

#ifdef __cplusplus
}
#endif
#endif
