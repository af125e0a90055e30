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

/* ---- the reading layer ------------------------------------------------------- */

/* The path of a node, kept as a chain of frames on the stack and spelt out
 * only for an error message. */
typedef struct jpath {
  const struct jpath *up;
  const char *key; /* object member name, or NULL for an array element */
  int index;
} jpath;

static size_t jpath_put(const jpath *p, char *buf, size_t cap) {
  if (!p) return 0;
  size_t n = jpath_put(p->up, buf, cap);
  int k = p->key ? snprintf(buf + n, cap - n, "%s%s", n ? "." : "", p->key)
                 : snprintf(buf + n, cap - n, "[%d]", p->index);
  n += k < 0 ? 0 : (size_t)k;
  return n < cap ? n : cap - 1;
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The first member of obj whose name repeats an earlier one, or NULL;
 * *oom on allocation failure. Small objects compare pairs; big ones (a
 * tokenizer's vocabulary: 150k keys) hash. */
static const cJSON *first_dup(const cJSON *obj, int *oom) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  if (n <= 16) {
    for (const cJSON *c = obj->child; c; c = c->next)
      for (const cJSON *d = obj->child; d != c; d = d->next)
        if (c->string && d->string && !strcmp(c->string, d->string)) return c;
    return NULL;
  }
  size_t cap = 32;
  while (cap < 2 * n) cap <<= 1;
  const char **tab = calloc(cap, sizeof *tab);
  if (!tab) {
    *oom = 1;
    return NULL;
  }
  const cJSON *dup = NULL;
  for (const cJSON *c = obj->child; c && !dup; c = c->next) {
    if (!c->string) continue;
    size_t i = (size_t)fnv1a(c->string) & (cap - 1);
    while (tab[i] && strcmp(tab[i], c->string)) i = (i + 1) & (cap - 1);
    if (tab[i]) dup = c;
    else tab[i] = c->string;
  }
  free(tab);
  return dup;
}

#define JSON_MAX_DEPTH 1000 /* cJSON's own nesting limit */

static int check_tree(const cJSON *node, const jpath *at, int depth, int code, spill_err *e) {
  if (depth > JSON_MAX_DEPTH)
    return spill_err_set(e, code, "nested deeper than %d levels", JSON_MAX_DEPTH);
  if (cJSON_IsObject(node)) {
    int oom = 0;
    const cJSON *d = first_dup(node, &oom);
    SPILL_FAIL_IF(e, oom, SPILL_E_NOMEM, "out of memory checking keys");
    if (d) {
      char p[256];
      jpath here = {at, d->string, 0};
      jpath_put(&here, p, sizeof p);
      return spill_err_set(e, code, "%s: duplicate key", p);
    }
  }
  int i = 0;
  for (const cJSON *c = node->child; c; c = c->next, i++) {
    if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
    jpath here = {at, cJSON_IsObject(node) ? (c->string ? c->string : "?") : NULL, i};
    SPILL_TRY(check_tree(c, &here, depth + 1, code, e));
  }
  return SPILL_OK;
}

/* The offset of the first NUL in text: a raw byte anywhere, or a \u0000
 * escape inside a string (cJSON decodes it into the C string, which then
 * ends there). *in_str says which. Returns len when there is none. */
static size_t find_nul(const char *t, size_t len, int *in_str) {
  int str = 0;
  for (size_t i = 0; i < len; i++) {
    char c = t[i];
    if (c == '\0') {
      *in_str = 0;
      return i;
    }
    if (!str) {
      if (c == '"') str = 1;
      continue;
    }
    if (c == '"') {
      str = 0;
    } else if (c == '\\' && i + 1 < len) {
      if (t[i + 1] == 'u' && i + 5 < len && !memcmp(t + i + 2, "0000", 4)) {
        *in_str = 1;
        return i;
      }
      i++; /* the escaped character (a '"' or '\\' does not end the string) */
    }
  }
  return len;
}

static int parse_checked(const char *text, size_t len, int code, cJSON **out, spill_err *e) {
  size_t bad = spill_json_utf8_check(text, len);
  int in_str = 0;
  size_t nul = find_nul(text, len, &in_str);
  if (nul < bad) {
    SPILL_FAIL_IF(e, in_str, code, "byte %zu: \\u0000 (NUL) inside a string", nul);
    return spill_err_set(e, code, "byte %zu: NUL byte", nul);
  }
  SPILL_FAIL_IF(e, bad < len, code, "byte %zu: invalid UTF-8", bad);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    long line = 1;
    for (size_t i = 0; i < off; i++) line += text[i] == '\n';
    if (!memchr(text, '\n', len)) /* one line (a request, a trace row) */
      return spill_err_set(e, code, "not valid JSON (near byte %zu)", off);
    return spill_err_set(e, code, "not valid JSON (line %ld, near byte %zu)", line, off);
  }
  while (end && end < text + len &&
         (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
    end++;
  int rc = SPILL_OK;
  if (end && end < text + len)
    rc = spill_err_set(e, code, "trailing bytes after the JSON value at byte %ld",
                       (long)(end - text));
  if (rc == SPILL_OK) rc = check_tree(root, NULL, 0, code, e);
  if (rc < 0) {
    cJSON_Delete(root);
    return rc;
  }
  *out = root;
  return SPILL_OK;
}

int spill_json_parse(const char *text, size_t len, const char *src, int code, cJSON **out,
                     spill_err *e) {
  if (out) *out = NULL;
  SPILL_FAIL_IF(e, !text || !out, SPILL_E_INVALID_ARG, "%s%sno JSON text", src ? src : "",
                src ? ": " : "");
  int rc = parse_checked(text, len, code, out, e);
  if (rc < 0 && src) spill_err_prefix(e, "%s", src);
  return rc;
}

int spill_json_check_tree(const cJSON *tree, const char *src, int code, spill_err *e) {
  SPILL_FAIL_IF(e, !tree, SPILL_E_INVALID_ARG, "%s%sno JSON tree", src ? src : "", src ? ": " : "");
  int rc = check_tree(tree, NULL, 0, code, e);
  if (rc < 0 && src) spill_err_prefix(e, "%s", src);
  return rc;
}

cJSON *spill_json_parse_quiet(const char *text) {
  cJSON *j = NULL;
  spill_err ig = {0};
  if (!text || spill_json_parse(text, strlen(text), NULL, SPILL_E_FORMAT, &j, &ig) < 0) return NULL;
  return j;
}

/* ---- the one escaper --------------------------------------------------------- */

/* Bytes of the valid UTF-8 character at s (n > 0 bytes left), 0 if invalid. */
static size_t utf8_len(const char *s, size_t n) {
  unsigned c = (unsigned char)s[0];
  size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (k == 0 || k > n) return 0;
  return spill_json_utf8_check(s, k) == k ? k : 0;
}

size_t spill_json_escape(char *dst, size_t cap, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
#define PUT(ch)                       \
  do {                                \
    if (o + 1 < cap) dst[o] = (ch);   \
    o++;                              \
  } while (0)
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) {
      size_t k = utf8_len(s + i, n - i);
      if (k == 0) { /* an invalid byte: U+FFFD */
        PUT((char)0xEF);
        PUT((char)0xBF);
        PUT((char)0xBD);
        i++;
        continue;
      }
      for (size_t j = 0; j < k; j++) PUT(s[i + j]);
      i += k;
      continue;
    }
    if (c == '"' || c == '\\') {
      PUT('\\');
      PUT((char)c);
    } else if (c < 0x20) { /* \u00XX for every control byte, as RFC 8259 allows */
      PUT('\\');
      PUT('u');
      PUT('0');
      PUT('0');
      PUT(hex[c >> 4]);
      PUT(hex[c & 15]);
    } else {
      PUT((char)c);
    }
    i++;
  }
#undef PUT
  if (cap) dst[o < cap ? o : cap - 1] = '\0';
  return o;
}

char *spill_json_quote(const char *s, size_t n) {
  size_t need = spill_json_escape(NULL, 0, s, n);
  char *q = malloc(need + 3);
  if (!q) return NULL;
  q[0] = '"';
  spill_json_escape(q + 1, need + 1, s, n);
  q[need + 1] = '"';
  q[need + 2] = '\0';
  return q;
}

char *spill_json_print(const cJSON *j, int formatted) {
  char *t = formatted ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
  if (!t) return NULL;
  size_t n = strlen(t);
  /* cJSON escapes control bytes and copies bytes >= 0x80 as they are; the
   * only invalid UTF-8 in its output is inside strings, where U+FFFD is a
   * valid replacement */
  size_t bad = spill_json_utf8_check(t, n), extra = 0;
  for (size_t i = bad; i < n;) {
    size_t ok = spill_json_utf8_check(t + i, n - i);
    if (ok == 0) extra += 2, i++;
    else i += ok;
  }
  char *out = malloc(n + extra + 1);
  if (!out) {
    cJSON_free(t);
    return NULL;
  }
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t ok = spill_json_utf8_check(t + i, n - i);
    if (ok == 0) {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
    } else {
      memcpy(out + o, t + i, ok);
      o += ok;
      i += ok;
    }
  }
  out[o] = '\0';
  cJSON_free(t);
  return out;
}
