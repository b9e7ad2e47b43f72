/* Files as the core writes them (core/io/files.c; the public half, the
 * checks every reader and writer shares, is anygrad/checks.h): temp files
 * renamed over their target, and the up-front check of an output path.
 * Never installed. */
#ifndef AG_CORE_FILES_H
#define AG_CORE_FILES_H

#include <stddef.h>

#include "anygrad/status.h"

#include "hidden.h"

/* Remove "<path>.tmp.<pid>.*" files left by writers of path whose process
 * is gone. */
AG_HIDDEN void ag__temp_remove_stale(const char *path);
/* Create a new "<path>.tmp.<pid>.<random>" (O_EXCL|O_NOFOLLOW) into tmp;
 * the descriptor, or -1 with errno. */
AG_HIDDEN int ag__temp_create(const char *path, char *tmp, size_t len);
/* fsync the directory holding path (best effort: makes a rename durable). */
AG_HIDDEN void ag__dir_fsync(const char *path);
/* AG_ERR_IO when path exists and is not a regular file. */
AG_HIDDEN ag_status ag__output_target_ok(const char *path, const char *what);

#endif
