/* The checks every input path of anygrad makes (docs/reliability.md): one
 * strict number parser for options and environment variables, one way to
 * open a file that is read (regular files only, bounded), and one way to
 * write one (target checked up front, written atomically). The library, the
 * CLI and the example models all use these, so a refusal reads the same
 * wherever it comes from. */
#ifndef ANYGRAD_CHECKS_H
#define ANYGRAD_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "anygrad/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- numbers ---- */

/* A decimal integer in [lo, hi]: the whole string, an optional '-' (no '+',
 * no blank, no hex, no leading or trailing garbage), no overflow. Returns
 * false (out untouched) otherwise. */
AG_API bool ag_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* A non-negative integer: the whole string in decimal, or in hex after "0x";
 * no sign, no blank, no overflow. */
AG_API bool ag_parse_u64(const char *s, uint64_t *out);

/* A finite decimal number in [lo, hi] (exponents allowed: "3e-4"). Hex
 * floats ("0x1p-3"), "inf", "nan" and blanks are refused. */
AG_API bool ag_parse_f64(const char *s, double lo, double hi, double *out);

/* Check every AG_* environment variable the core reads (AG_ALLOC_CONF's
 * keys and values, AG_SYNC_DEBUG, AG_NUM_THREADS, AG_PINNED_CACHE_MB,
 * AG_DIST_TIMEOUT_MS, AG_DETERMINISTIC) without opening a device, so a
 * program can report a typo when it starts rather than at its first
 * tensor. The library makes the same check when a device first opens, and
 * that open then fails with the same error. Returns AG_OK, or
 * AG_ERR_INVALID naming the first bad variable and the bad key or value
 * ("AG_ALLOC_CONF: unknown key 'max_splt_size_mb' (known: ...)"). Reads
 * the environment on every call; thread-safe while nothing sets it. */
AG_API ag_status ag_env_check(void);

/* Environment variable `name` as an integer in [lo, hi]. Unset or empty:
 * *out = dflt and AG_OK. Set to anything else than such a number:
 * AG_ERR_INVALID naming the variable, its value (control characters
 * escaped) and the range; *out = dflt. */
AG_API ag_status ag_env_i64(const char *name, int64_t lo, int64_t hi, int64_t dflt, int64_t *out);

/* The same for a finite number in [lo, hi]. Errors: AG_ERR_INVALID naming
 * the variable, its value and the range; *out = dflt. */
AG_API ag_status ag_env_f64(const char *name, double lo, double hi, double dflt, double *out);

/* `s` for an error message into buf (always NUL-terminated): printable
 * ASCII kept, anything else as \xNN, cut with "..." to fit. Returns buf. */
AG_API const char *ag_escape(const char *s, char *buf, size_t len);

/* ---- files that are read ---- */

/* Open path for reading. The open does not block (a FIFO, a terminal or a
 * device is refused, never waited on), the file must be a regular file of
 * at most max_bytes (0: no limit). On success *out_fd is an O_CLOEXEC
 * descriptor in blocking mode owned by the caller (close it), and
 * *out_size (may be NULL) the file's size. `what` names the file in errors
 * ("trace", "word list"). Errors: AG_ERR_INVALID (NULL), AG_ERR_IO (cannot
 * open, not a regular file, larger than max_bytes). */
AG_API ag_status ag_file_open_read(const char *path, const char *what, uint64_t max_bytes, int *out_fd,
                                   uint64_t *out_size);

/* The whole regular file at path (ag_file_open_read's checks), plus a NUL.
 * *out is owned by the caller (free). A file that grows or shrinks while it
 * is read is an error, not a partial result. Errors: as ag_file_open_read,
 * AG_ERR_OOM. */
AG_API ag_status ag_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **out,
                                  size_t *out_len);

/* ---- files that are written ---- */

/* The up-front check of an output path, before any work is done: an
 * existing path must be a regular file (a device node, FIFO, directory or
 * socket is refused, never opened), and a file can be created in its
 * directory (a probe file is created and removed). Leaves nothing behind.
 * Errors: AG_ERR_INVALID (NULL or empty path), AG_ERR_IO naming `what`. */
AG_API ag_status ag_output_check(const char *path, const char *what);

/* An output file that replaces path only when complete: data goes to a new
 * "<path>.tmp.<pid>.<random>" next to it (O_EXCL|O_NOFOLLOW), and
 * ag_output_commit flushes, fsyncs and renames it over path, then fsyncs the
 * directory. Until then, and after any failure, path keeps its old content
 * (or stays absent): no half-written and no 0-byte file. Temp files of
 * earlier writers of path whose process is gone are removed at open. */
typedef struct ag_output ag_output;

/* Check path (ag_output_check) and create its temp file. *out is owned by
 * the caller: ag_output_commit or ag_output_abort. Errors: as
 * ag_output_check, AG_ERR_OOM. */
AG_API ag_status ag_output_open(const char *path, const char *what, ag_output **out);

/* The stream to write to; borrowed, valid until commit or abort. Never
 * fails for an open o (NULL when o is NULL). */
AG_API FILE *ag_output_file(ag_output *o);

/* Flush, fsync, rename over the target, fsync the directory; frees o in
 * every case. A write error seen on the stream fails the commit. Errors:
 * AG_ERR_IO (the target keeps its old content). */
AG_API ag_status ag_output_commit(ag_output *o);

/* Remove the temp file and free o (NULL: nothing). The target is untouched. */
AG_API void ag_output_abort(ag_output *o);

/* Whether paths a and b name the same file, so that writing one would
 * destroy the other or lose its content: the same device and inode when
 * both exist (through symbolic and hard links), else the same name in the
 * same directory (compared by device and inode: "x" and "./x"), so two
 * outputs that do not exist yet still collide. A path that exists and one
 * that does not are different files. NULL or empty: false. Commands check
 * every output against their inputs and other outputs before they run. */
AG_API bool ag_file_same(const char *a, const char *b);

/* Whether an address-space limit (RLIMIT_AS, `ulimit -v`) leaves less than
 * bytes of address space free, probed with a PROT_NONE mapping of that size
 * (mapped and unmapped at once). Without a limit: false, nothing probed.
 * *out_limit_kib (may be NULL) receives the limit in KiB when one is set.
 * For code that would stall or abort rather than fail under such a limit
 * (a BLAS retrying its buffer, a driver that cannot start its threads). */
AG_API bool ag_address_space_short(size_t bytes, unsigned long long *out_limit_kib);

#ifdef __cplusplus
}
#endif
#endif
