/* engine/base/json_util.c: bounded field access over cJSON and atomic writes.
 * Error messages always carry "<path>.<key>: <reason>". */
#define _POSIX_C_SOURCE 200809L
#include "engine/base/json_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const cJSON *member(const cJSON *obj, const char *key) {
  if (!obj || !cJSON_IsObject(obj)) return NULL;
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

int spill_json_int(const cJSON *obj, const char *key, const char *path, int64_t lo, int64_t hi,
                   int64_t *out, int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  SPILL_FAIL_IF(e, !it, code, "%s.%s: missing key", path, key);
  SPILL_FAIL_IF(e, !cJSON_IsNumber(it), code, "%s.%s: expected integer", path, key);
  double v = it->valuedouble;
  SPILL_FAIL_IF(e, !isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0, code,
                "%s.%s: expected integer", path, key);
  SPILL_FAIL_IF(e, v < (double)lo || v > (double)hi, code,
                "%s.%s: %.0f out of range [%lld, %lld]", path, key, v, (long long)lo,
                (long long)hi);
  *out = (int64_t)v;
  return SPILL_OK;
}

int spill_json_int_opt(const cJSON *obj, const char *key, const char *path, int64_t lo,
                       int64_t hi, int64_t dflt, int64_t *out, int code, spill_err *e) {
  if (!member(obj, key)) {
    *out = dflt;
    return SPILL_OK;
  }
  return spill_json_int(obj, key, path, lo, hi, out, code, e);
}

int spill_json_num(const cJSON *obj, const char *key, const char *path, double lo, double hi,
                   double *out, int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  SPILL_FAIL_IF(e, !it, code, "%s.%s: missing key", path, key);
  SPILL_FAIL_IF(e, !cJSON_IsNumber(it), code, "%s.%s: expected number", path, key);
  double v = it->valuedouble;
  SPILL_FAIL_IF(e, !isfinite(v), code, "%s.%s: expected a finite number", path, key);
  SPILL_FAIL_IF(e, v < lo || v > hi, code, "%s.%s: %g out of range [%g, %g]", path, key, v, lo,
                hi);
  *out = v;
  return SPILL_OK;
}

int spill_json_num_opt(const cJSON *obj, const char *key, const char *path, double lo,
                       double hi, double dflt, double *out, int code, spill_err *e) {
  if (!member(obj, key)) {
    *out = dflt;
    return SPILL_OK;
  }
  return spill_json_num(obj, key, path, lo, hi, out, code, e);
}

int spill_json_bool_opt(const cJSON *obj, const char *key, const char *path, int dflt, int *out,
                        int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  if (!it) {
    *out = dflt;
    return SPILL_OK;
  }
  SPILL_FAIL_IF(e, !cJSON_IsBool(it), code, "%s.%s: expected true or false", path, key);
  *out = cJSON_IsTrue(it) ? 1 : 0;
  return SPILL_OK;
}

int spill_json_str(const cJSON *obj, const char *key, const char *path, size_t max_len,
                   const char **out, int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  SPILL_FAIL_IF(e, !it, code, "%s.%s: missing key", path, key);
  SPILL_FAIL_IF(e, !cJSON_IsString(it) || !it->valuestring, code, "%s.%s: expected string",
                path, key);
  size_t n = strlen(it->valuestring);
  SPILL_FAIL_IF(e, n == 0 || n > max_len, code, "%s.%s: string length %zu not in [1, %zu]",
                path, key, n, max_len);
  *out = it->valuestring;
  return SPILL_OK;
}

int spill_json_str_opt(const cJSON *obj, const char *key, const char *path, size_t max_len,
                       const char *dflt, const char **out, int code, spill_err *e) {
  if (!member(obj, key)) {
    *out = dflt;
    return SPILL_OK;
  }
  return spill_json_str(obj, key, path, max_len, out, code, e);
}

int spill_json_obj(const cJSON *obj, const char *key, const char *path, const cJSON **out,
                   int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  SPILL_FAIL_IF(e, !it, code, "%s.%s: missing key", path, key);
  SPILL_FAIL_IF(e, !cJSON_IsObject(it), code, "%s.%s: expected object", path, key);
  *out = it;
  return SPILL_OK;
}

int spill_json_arr(const cJSON *obj, const char *key, const char *path, const cJSON **out,
                   int *n_out, int code, spill_err *e) {
  const cJSON *it = member(obj, key);
  SPILL_FAIL_IF(e, !it, code, "%s.%s: missing key", path, key);
  SPILL_FAIL_IF(e, !cJSON_IsArray(it), code, "%s.%s: expected array", path, key);
  *out = it;
  if (n_out) *n_out = cJSON_GetArraySize(it);
  return SPILL_OK;
}

int spill_json_only_keys(const cJSON *obj, const char *path, const char *const *allowed,
                         int code, spill_err *e) {
  SPILL_FAIL_IF(e, !obj || !cJSON_IsObject(obj), code, "%s: expected object", path);
  for (const cJSON *it = obj->child; it; it = it->next) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      if (it->string && strcmp(it->string, *a) == 0) ok = 1;
    SPILL_FAIL_IF(e, !ok, code, "%s.%s: unknown key", path, it->string ? it->string : "?");
  }
  return SPILL_OK;
}

int spill_read_file(const char *file, size_t max_bytes, char **out, size_t *len_out,
                    spill_err *e) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  SPILL_FAIL_IF(e, fd < 0, SPILL_E_IO, "%s: cannot open: %s", file, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: not a regular file", file);
  }
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: %lld bytes exceeds the limit of %zu", file,
                         (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return spill_err_set(e, SPILL_E_NOMEM, "%s: cannot allocate %zu bytes", file, n + 1);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int err = errno;
      free(buf);
      close(fd);
      return spill_err_set(e, SPILL_E_IO, "%s: read failed at byte %zu: %s", file, got,
                           r == 0 ? "unexpected end of file" : strerror(err));
    }
    got += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  *out = buf;
  if (len_out) *len_out = n;
  return SPILL_OK;
}

int spill_write_file_atomic(const char *file, const void *data, size_t len, spill_err *e) {
  size_t flen = strlen(file);
  char *tmp = malloc(flen + 32);
  SPILL_FAIL_IF(e, !tmp, SPILL_E_NOMEM, "%s: out of memory", file);
  snprintf(tmp, flen + 32, "%s.tmp.%ld", file, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    free(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: cannot create temp file: %s", file, strerror(err));
  }
  const char *p = data;
  size_t left = len;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp);
      free(tmp);
      return spill_err_set(e, SPILL_E_IO, "%s: write failed: %s", file, strerror(err));
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(tmp);
    free(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: fsync/close failed: %s", file, strerror(err));
  }
  if (rename(tmp, file) != 0) {
    int err = errno;
    unlink(tmp);
    free(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: rename failed: %s", file, strerror(err));
  }
  free(tmp);
  return SPILL_OK;
}

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (RFC 3629:
 * no overlongs, surrogates or code points past U+10FFFF), or n. */
size_t spill_json_utf8_check(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = u[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int k;
    unsigned cp, min;
    if ((c & 0xE0) == 0xC0) k = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) k = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) k = 3, cp = c & 0x07, min = 0x10000;
    else return i;
    if (n - i <= (size_t)k) return i;
    for (int j = 1; j <= k; j++) {
      if ((u[i + j] & 0xC0) != 0x80) return i;
      cp = cp << 6 | (u[i + j] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += (size_t)k + 1;
  }
  return n;
}
