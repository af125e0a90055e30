/* engine/tok/tok_json.c: a single-pass JSON scanner for the big parts of a
 * tokenizer.json (model.vocab: 150k string keys, model.merges: 150k pairs).
 *
 * Building a cJSON tree of those 300k nodes (a malloc per node and per
 * string) was most of the load time; tok_hf.c instead walks the document
 * once with this scanner, reads vocab and merges straight into its tables,
 * and hands every other (small) member to cJSON. The scanner validates what
 * it skips (RFC 8259 grammar, nesting depth <= 1000 as cJSON's), decodes
 * string escapes as cJSON does (\uXXXX with surrogate pairs to UTF-8; a lone
 * surrogate is an error) and never reads past the given length.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tok/tok_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define TJ_MAX_DEPTH 1000

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t tj_ws_run(const char *s, size_t i, size_t n) {
#if defined(__SSE2__)
  const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'),
                tab = _mm_set1_epi8('\t');
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, sp), _mm_cmpeq_epi8(v, nl)),
                             _mm_or_si128(_mm_cmpeq_epi8(v, cr), _mm_cmpeq_epi8(v, tab)));
    unsigned m = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFFu;
    if (m) return i + (size_t)__builtin_ctz(m);
  }
#endif
  while (i < n && is_ws(s[i])) i++;
  return i;
}

/* The first '"', '\\' or control byte (< 0x20, which RFC 8259 and Python's
 * json refuse unescaped inside a string) in s[i..n), or n. */
static size_t string_run(const char *s, size_t i, size_t n) {
#if defined(__SSE2__)
  const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), c1f = _mm_set1_epi8(0x1F);
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i ctl = _mm_cmpeq_epi8(_mm_max_epu8(v, c1f), c1f); /* v <= 0x1F, unsigned */
    unsigned m = (unsigned)_mm_movemask_epi8(
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, q), _mm_cmpeq_epi8(v, bs)), ctl));
    if (m) return i + (size_t)__builtin_ctz(m);
  }
#endif
  while (i < n && s[i] != '"' && s[i] != '\\' && (unsigned char)s[i] >= 0x20) i++;
  return i;
}

int tj_fail(tok_json *j, const char *what) {
  return spill_err_set(j->e, SPILL_E_FORMAT, "%s: bad JSON at byte %zu (%s)", j->what, j->i, what);
}

int tj_expect(tok_json *j, char c) {
  if (tj_peek(j) != (unsigned char)c) {
    char what[16] = "expected 'x'";
    what[10] = c;
    return tj_fail(j, what);
  }
  j->i++;
  return SPILL_OK;
}

static int hex4(const char *p, uint32_t *v) {
  uint32_t r = 0;
  for (int k = 0; k < 4; k++) {
    char c = p[k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    r = r << 4 | (uint32_t)d;
  }
  *v = r;
  return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | cp >> 6);
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18);
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* One escape at s[i] == '\\'; writes its bytes to *o. Returns the escape's
 * length in the input, or 0 if it is malformed. */
static size_t unescape(const char *s, size_t i, size_t n, char *o, size_t *olen) {
  if (i + 1 >= n) return 0;
  char c = s[i + 1];
  const char *simple = strchr("\"\\/bfnrt", c);
  if (c && simple) {
    static const char out[] = "\"\\/\b\f\n\r\t";
    *o = out[simple - "\"\\/bfnrt"];
    *olen = 1;
    return 2;
  }
  uint32_t cp, lo;
  if (c != 'u' || i + 6 > n || hex4(s + i + 2, &cp)) return 0;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return 0; /* lone low surrogate */
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    if (i + 12 > n || s[i + 6] != '\\' || s[i + 7] != 'u' || hex4(s + i + 8, &lo) ||
        lo < 0xDC00 || lo > 0xDFFF)
      return 0;
    *olen = put_utf8(o, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
    return 12;
  }
  *olen = put_utf8(o, cp);
  return 6;
}

int tj_string(tok_json *j, char *out, size_t *len) {
  SPILL_TRY(tj_expect(j, '"'));
  const char *s = j->s;
  size_t i = j->i, n = j->n, o = 0;
  for (;;) {
    size_t run = string_run(s, i, n);
    if (out) memcpy(out + o, s + i, run - i);
    o += run - i;
    i = run;
    if (i >= n) { j->i = i; return tj_fail(j, "unterminated string"); }
    if (s[i] == '"') break;
    if ((unsigned char)s[i] < 0x20) { j->i = i; return tj_fail(j, "a raw control byte inside a string"); }
    char tmp[4];
    size_t ol = 0, used = unescape(s, i, n, out ? out + o : tmp, &ol);
    if (!used) { j->i = i; return tj_fail(j, "bad escape"); }
    i += used;
    o += ol;
  }
  j->i = i + 1;
  if (len) *len = o;
  return SPILL_OK;
}

/* Number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(tok_json *j, int *integral) {
  const char *s = j->s;
  size_t i = j->i, n = j->n, d;
  *integral = 1;
  if (i < n && s[i] == '-') i++;
  for (d = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
  if (i == d || (s[d] == '0' && i - d > 1)) { j->i = i; return tj_fail(j, "bad number"); }
  if (i < n && s[i] == '.') {
    *integral = 0;
    for (d = ++i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
    if (i == d) { j->i = i; return tj_fail(j, "bad number"); }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    *integral = 0;
    i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    for (d = i; i < n && s[i] >= '0' && s[i] <= '9'; i++) {}
    if (i == d) { j->i = i; return tj_fail(j, "bad number"); }
  }
  j->i = i;
  return SPILL_OK;
}

int tj_number(tok_json *j, double *v) {
  tj_ws(j);
  size_t start = j->i;
  { /* the common case, one pass: a small id, not followed by '.', 'e' or 'E' */
    const char *s = j->s;
    size_t i = start, n = j->n;
    uint64_t r = 0;
    while (i < n && i - start < 15 && s[i] >= '0' && s[i] <= '9') r = r * 10 + (uint64_t)(s[i++] - '0');
    if (i > start && (s[start] != '0' || i - start == 1) &&
        (i == n || (s[i] != '.' && s[i] != 'e' && s[i] != 'E' && (s[i] < '0' || s[i] > '9')))) {
      j->i = i;
      *v = (double)r;
      return SPILL_OK;
    }
  }
  int integral;
  SPILL_TRY(skip_number(j, &integral));
  const char *s = j->s + start;
  size_t len = j->i - start;
  if (integral && len <= 15 && s[0] != '-') { /* the common case: a small id */
    double r = 0;
    for (size_t k = 0; k < len; k++) r = r * 10 + (s[k] - '0');
    *v = r;
    return SPILL_OK;
  }
  char buf[64];
  if (len >= sizeof buf) return tj_fail(j, "number too long");
  memcpy(buf, s, len);
  buf[len] = '\0';
  *v = strtod(buf, NULL);
  return SPILL_OK;
}

static int skip_value(tok_json *j, int depth) {
  if (depth > TJ_MAX_DEPTH) return tj_fail(j, "nested too deeply");
  int c = tj_peek(j);
  if (c == '"') return tj_string(j, NULL, NULL);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->i++;
    if (tj_peek(j) == close) { j->i++; return SPILL_OK; }
    for (;;) {
      if (c == '{') {
        SPILL_TRY(tj_string(j, NULL, NULL));
        SPILL_TRY(tj_expect(j, ':'));
      }
      SPILL_TRY(skip_value(j, depth + 1));
      int d = tj_peek(j);
      j->i++;
      if (d == close) return SPILL_OK;
      if (d != ',') { j->i--; return tj_fail(j, "expected ',' or a closing bracket"); }
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    int integral;
    return skip_number(j, &integral);
  }
  static const char *const lit[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t l = strlen(lit[k]);
    if (j->i + l <= j->n && !memcmp(j->s + j->i, lit[k], l)) {
      j->i += l;
      return SPILL_OK;
    }
  }
  return tj_fail(j, "expected a value");
}

int tj_skip(tok_json *j) { return skip_value(j, 1); }

int tj_next(tok_json *j, int *first, char close) {
  int c = tj_peek(j);
  if (*first) {
    *first = 0;
    if (c == (unsigned char)close) { j->i++; return 0; }
    return 1;
  }
  if (c == (unsigned char)close) { j->i++; return 0; }
  if (c != ',') return tj_fail(j, "expected ',' or a closing bracket");
  j->i++;
  return 1;
}
