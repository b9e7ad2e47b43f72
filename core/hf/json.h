/* A small strict JSON reader and the writing helpers of the Hugging Face
 * layout (core/hf/pretrained.c, docs/export.md). The only JSON reader of
 * anygrad's core besides the safetensors header parser (which reads its own
 * fixed shape in place).
 *
 * Strict RFC 8259: one value, surrounded by whitespace only; objects,
 * arrays, strings with every escape (\uXXXX surrogate pairs joined, a lone
 * surrogate refused), numbers in JSON's grammar, true, false, null. Refused
 * with AG_ERR_CORRUPT naming the file and the byte offset: a raw control
 * character or invalid UTF-8 in a string, a trailing comma, a comment, a
 * NUL byte, nesting deeper than AGJ_MAX_DEPTH, a number that is not finite
 * as a double, anything after the value. Bounds: the caller passes the
 * text (read with a size limit); the nodes are at most one per input byte,
 * the strings at most the input's size, so no input makes it allocate
 * more than a fixed multiple of its length. Duplicate keys are found by
 * agj_get (AG_ERR_CORRUPT), which the callers use for every key they read.
 *
 * Nodes are indices into the document (0 is the root); -1 is "none". */
#ifndef ANYGRAD_CORE_HF_JSON_H
#define ANYGRAD_CORE_HF_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "anygrad/status.h"
#include "hidden.h"

#define AGJ_MAX_DEPTH 64

typedef enum agj_type { AGJ_NULL, AGJ_BOOL, AGJ_NUM, AGJ_STR, AGJ_ARR, AGJ_OBJ } agj_type;

typedef struct agj agj;

/* Parse text[0..n) (no terminating NUL needed); `what` names the source in
 * errors (a path). *out is owned by the caller (agj_free). Errors:
 * AG_ERR_INVALID (NULL argument), AG_ERR_CORRUPT (see above), AG_ERR_OOM. */
AG_HIDDEN ag_status agj_parse(const char *text, size_t n, const char *what, agj **out);
AG_HIDDEN void agj_free(agj *d);

AG_HIDDEN agj_type agj_type_of(const agj *d, int node);
/* Members of an array or object: count, first, next (-1 after the last). */
AG_HIDDEN int agj_count(const agj *d, int node);
AG_HIDDEN int agj_first(const agj *d, int node);
AG_HIDDEN int agj_next(const agj *d, int node);
/* The key of an object member (NUL-terminated; *len may be NULL). */
AG_HIDDEN const char *agj_key(const agj *d, int node, size_t *len);
/* A string's bytes (NUL-terminated, may hold NUL: *len tells). */
AG_HIDDEN const char *agj_str(const agj *d, int node, size_t *len);
AG_HIDDEN double agj_num(const agj *d, int node);
AG_HIDDEN bool agj_bool(const agj *d, int node);

/* The member of object `obj` named key: AG_OK with *out = -1 when absent
 * (or obj is not an object); AG_ERR_CORRUPT when the key occurs twice
 * (the message names it and `what`). */
AG_HIDDEN ag_status agj_get(const agj *d, int obj, const char *key, int *out);

/* Writing: a JSON string of s[0..n) (quotes, \" \\ and control characters
 * escaped; bytes >= 0x80 copied, so s must be UTF-8); a double in the
 * shortest form that reads back to the same value ("1e-05", "10000.0"). */
AG_HIDDEN void agj_put_str(FILE *f, const char *s, size_t n);
AG_HIDDEN void agj_put_num(FILE *f, double v);

#endif
