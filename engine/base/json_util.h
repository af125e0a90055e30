/* engine/base/json_util.h: the one JSON reading layer and the one JSON
 * string escaper.
 *
 * Reading: every JSON text from outside (HF configs, manifests, server
 * requests, traces, experiment configs, results rows, tokenizer files) is
 * parsed by spill_json_parse, which refuses what readers would disagree on
 * (docs/RELIABILITY.md, "JSON from outside"): a repeated key (cJSON keeps the
 * first, Python and transformers the last), a NUL (raw, or \u0000 inside a
 * string, which would cut a C string: "max_tokens\u0000zz" read as
 * "max_tokens"), invalid UTF-8 and bytes after the value. Then typed, bounded
 * field reads with errors that name the JSON path
 * ("manifest.layers[3].record_bytes: expected integer"): a wrong type, a
 * missing key or an out-of-range value is a SPILL_E_FORMAT / SPILL_E_CONFIG
 * error, never a crash. `path` is the path of the object holding the key;
 * `code` is the status to report.
 * Writing: spill_json_escape / spill_json_quote / spill_json_print always
 * produce valid UTF-8 (an invalid byte becomes U+FFFD).
 * Public: re-exported by engine/spill.h. Depends on status.h and cJSON. */
#ifndef SPILL_BASE_JSON_UTIL_H
#define SPILL_BASE_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* Parses text[0..len) into *out (free with cJSON_Delete). Refused with
 * `code`, the message prefixed "SRC: " (src may be NULL):
 *   "byte N: invalid UTF-8", "byte N: NUL byte",
 *   "byte N: \u0000 (NUL) inside a string",
 *   "not valid JSON (line L, near byte N)" (no line in one-line text),
 *   "trailing bytes after the JSON value at byte N",
 *   "a.b[2].c: duplicate key" (the JSON path of the repeated key),
 *   "nested deeper than 1000 levels".
 * So every string and key of an accepted tree is a NUL-free C string of
 * valid UTF-8. Checking keys is linear in the text (hashing for big
 * objects). Thread-safe. */
int spill_json_parse(const char *text, size_t len, const char *src, int code,
                     struct cJSON **out, spill_err *e);

/* The checks spill_json_parse makes on its tree (a repeated key named by its
 * JSON path, nesting deeper than 1000 levels), for a tree built another way
 * (tokenizer.json's scanner assembles one from its members). Refused with
 * `code`, prefixed "SRC: " (src may be NULL). */
int spill_json_check_tree(const struct cJSON *tree, const char *src, int code, spill_err *e);

/* spill_json_parse of a NUL-terminated text for readers that treat an
 * unreadable file as absent (our own env.json, a child's result line):
 * the tree, or NULL for anything spill_json_parse refuses. */
struct cJSON *spill_json_parse_quiet(const char *text);

/* Writes s[0..n) as the body of a JSON string (no quotes) into dst (cap
 * bytes, always NUL-terminated when cap > 0): '"', '\\' and control bytes
 * escaped, valid UTF-8 copied, each byte of an invalid sequence replaced by
 * U+FFFD. Returns the length the whole escape needs (without the NUL), like
 * snprintf: the output is complete when the result < cap. */
size_t spill_json_escape(char *dst, size_t cap, const char *s, size_t n);
/* The same between double quotes in a malloc'd string the caller frees with
 * free(); NULL when out of memory. */
char *spill_json_quote(const char *s, size_t n);
/* cJSON_Print (formatted != 0) or cJSON_PrintUnformatted of j, with any
 * invalid UTF-8 in its strings replaced by U+FFFD: the one way a JSON tree
 * is written. malloc'd; free with free(); NULL when out of memory. */
char *spill_json_print(const struct cJSON *j, int formatted);

/* Integers: the JSON number must be integral and within [lo, hi] (doubles
 * represent integers exactly up to 2^53, which bounds hi). */
int spill_json_int(const struct cJSON *obj, const char *key, const char *path, int64_t lo,
                   int64_t hi, int64_t *out, int code, spill_err *e);
/* Optional integer: absent key leaves *out = dflt. */
int spill_json_int_opt(const struct cJSON *obj, const char *key, const char *path, int64_t lo,
                       int64_t hi, int64_t dflt, int64_t *out, int code, spill_err *e);
/* Finite number within [lo, hi]. */
int spill_json_num(const struct cJSON *obj, const char *key, const char *path, double lo,
                   double hi, double *out, int code, spill_err *e);
int spill_json_num_opt(const struct cJSON *obj, const char *key, const char *path, double lo,
                       double hi, double dflt, double *out, int code, spill_err *e);
int spill_json_bool_opt(const struct cJSON *obj, const char *key, const char *path, int dflt,
                        int *out, int code, spill_err *e);
/* String: *out points into the cJSON tree (valid while it lives); length must
 * be in [1, max_len]. */
int spill_json_str(const struct cJSON *obj, const char *key, const char *path, size_t max_len,
                   const char **out, int code, spill_err *e);
int spill_json_str_opt(const struct cJSON *obj, const char *key, const char *path,
                       size_t max_len, const char *dflt, const char **out, int code,
                       spill_err *e);
/* Object / array members (must exist and have that type). */
int spill_json_obj(const struct cJSON *obj, const char *key, const char *path,
                   const struct cJSON **out, int code, spill_err *e);
int spill_json_arr(const struct cJSON *obj, const char *key, const char *path,
                   const struct cJSON **out, int *n_out, int code, spill_err *e);
/* Rejects members of obj whose name is not in allowed (NULL-terminated). */
int spill_json_only_keys(const struct cJSON *obj, const char *path, const char *const *allowed,
                         int code, spill_err *e);

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (RFC 3629: no
 * overlongs, surrogates or code points past U+10FFFF), or n when all is. */
size_t spill_json_utf8_check(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
