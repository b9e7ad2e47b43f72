/* anygrad's version: the one place it is written. CMake reads these three
 * macros for project(VERSION), the SONAME, the CMake package and anygrad.pc,
 * so a release bumps this file and nothing else. */
#ifndef ANYGRAD_VERSION_H
#define ANYGRAD_VERSION_H

#include "anygrad/status.h"

#define AG_VERSION_MAJOR 0
#define AG_VERSION_MINOR 2
#define AG_VERSION_PATCH 0

#define AG_VERSION_STR_(x) #x
#define AG_VERSION_STR(x) AG_VERSION_STR_(x)
/* "0.2.0" */
#define AG_VERSION_STRING \
  AG_VERSION_STR(AG_VERSION_MAJOR) "." AG_VERSION_STR(AG_VERSION_MINOR) "." AG_VERSION_STR(AG_VERSION_PATCH)
/* One comparable number: 0.2.0 -> 200, 1.4.13 -> 10413. */
#define AG_VERSION_NUMBER (AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library actually loaded, as AG_VERSION_NUMBER computes it.
 * Compare with AG_VERSION_NUMBER to detect a program compiled against other
 * headers than the library it runs with. Optional outputs may be NULL. */
AG_API int ag_version(int *out_major, int *out_minor, int *out_patch);

/* The loaded library's version string ("0.2.0"). Static storage, never NULL. */
AG_API const char *ag_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
