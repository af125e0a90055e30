/* engine/base/json_util.h: typed, bounded reads of cJSON fields with errors
 * that name the JSON path ("manifest.layers[3].record_bytes: expected
 * integer"), plus atomic file writing.
 *
 * Every reader of untrusted JSON (manifests, experiment configs, traces) goes
 * through these so that a wrong type, a missing key or an out-of-range value
 * is a SPILL_E_FORMAT / SPILL_E_CONFIG error, never a crash. `path` is the
 * path of the object holding the key; `code` is the status to report. */
#ifndef SPILL_BASE_JSON_UTIL_H
#define SPILL_BASE_JSON_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

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

/* Reads a whole file (at most max_bytes) into a NUL-terminated malloc'd buffer
 * the caller frees with free(). */
int spill_read_file(const char *file, size_t max_bytes, char **out, size_t *len_out,
                    spill_err *e);
/* Writes data to file atomically: a temp file in the same directory, fsync,
 * rename. On failure the old file (if any) is intact and the temp removed. */
int spill_write_file_atomic(const char *file, const void *data, size_t len, spill_err *e);

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (RFC 3629: no
 * overlongs, surrogates or code points past U+10FFFF), or n when all is. */
size_t spill_json_utf8_check(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
