/* engine/tok/tok_text.c: the text passes before BPE: UTF-8 repair, NFC,
 * the regex pre-tokenizer splits, and GPT-2's byte <-> code point map.
 *
 * - UTF-8 repair follows the WHATWG decoder (maximal subpart -> one U+FFFD),
 *   which is what TextDecoder, Python's errors="replace" and Rust's
 *   from_utf8_lossy do, so everything downstream sees valid UTF-8.
 * - NFC is utf8proc's (Debian libutf8proc), not a hand-written table.
 * - Splits use PCRE2 (JIT when available). The patterns in tokenizer.json
 *   are written for Oniguruma / JS; the one construct whose meaning differs
 *   is \s, so it is rewritten to the explicit ECMAScript whitespace set (the
 *   set of the JS reference tokenizers we test against; it differs from
 *   Unicode White_Space only in U+FEFF (in) and U+0085 (out)). Without
 *   PCRE2_UCP, \d and \w stay ASCII as in JS.
 * - "Isolated" split semantics: the matches and the gaps between them are
 *   both pieces, in order; empty matches produce nothing.
 */
#include <stdlib.h>
#include <string.h>

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <utf8proc.h>

#include "engine/tok/tok_internal.h"

int tok_utf8_repair(const char *s, size_t len, char **out, size_t *out_len, spill_err *e) {
  const unsigned char *p = (const unsigned char *)s;
  /* fast scan: find the first invalid position */
  size_t i = 0, first_bad = len;
  while (i < len) {
    unsigned b = p[i];
    if (b < 0x80) { i++; continue; }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else { first_bad = i; break; }
    size_t k = 1;
    for (; k <= need; k++) {
      if (i + k >= len) break;
      unsigned c = p[i + k];
      if (c < lo || c > hi) break;
      lo = 0x80; hi = 0xBF;
    }
    if (k <= need) { first_bad = i; break; }
    i += need + 1;
  }
  *out = NULL;
  *out_len = len;
  if (first_bad == len) return SPILL_OK;
  /* worst case: every byte becomes 3 bytes of U+FFFD */
  char *o = malloc(len * 3 + 1);
  if (!o) return spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory for UTF-8 repair");
  memcpy(o, s, first_bad);
  size_t n = first_bad;
  i = first_bad;
  while (i < len) {
    unsigned b = p[i];
    if (b < 0x80) { o[n++] = (char)b; i++; continue; }
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else { memcpy(o + n, "\xEF\xBF\xBD", 3); n += 3; i++; continue; }
    size_t k = 1;
    for (; k <= need; k++) {
      if (i + k >= len) break;
      unsigned c = p[i + k];
      if (c < lo || c > hi) break;
      lo = 0x80; hi = 0xBF;
    }
    if (k <= need) { /* maximal subpart i..i+k-1 -> one U+FFFD, resume at i+k */
      memcpy(o + n, "\xEF\xBF\xBD", 3); n += 3; i += k; continue;
    }
    memcpy(o + n, p + i, need + 1);
    n += need + 1;
    i += need + 1;
  }
  o[n] = '\0';
  *out = o;
  *out_len = n;
  return SPILL_OK;
}

int tok_nfc(const char *s, size_t len, char **out, size_t *out_len, spill_err *e) {
  *out = NULL;
  *out_len = len;
  size_t i = 0;
  while (i < len && (unsigned char)s[i] < 0x80) i++;
  if (i == len) return SPILL_OK; /* ASCII is its own NFC */
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst,
                                    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (r < 0) {
    free(dst);
    return spill_err_set(e, r == UTF8PROC_ERROR_NOMEM ? SPILL_E_NOMEM : SPILL_E_INTERNAL,
                         "tokenizer: NFC: %s", utf8proc_errmsg(r));
  }
  if ((size_t)r == len && memcmp(dst, s, len) == 0) {
    free(dst);
    return SPILL_OK;
  }
  *out = (char *)dst;
  *out_len = (size_t)r;
  return SPILL_OK;
}

/* ---- regex splits -------------------------------------------------------- */

#define JS_SPACE                                                                         \
  "\\x{09}-\\x{0d}\\x{20}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
  "\\x{205f}\\x{3000}\\x{feff}"

/* Rewrites \s / \S to the explicit ECMAScript whitespace set. */
static char *rewrite_space(const char *p, spill_err *e) {
  size_t n = strlen(p), cap = n * 1 + 64, o = 0;
  size_t per = sizeof(JS_SPACE) + 4;
  size_t count = 0;
  for (size_t i = 0; i + 1 < n; i++)
    if (p[i] == '\\') { if (p[i + 1] == 's' || p[i + 1] == 'S') count++; i++; }
  cap += count * per;
  char *r = malloc(cap);
  if (!r) { spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory for a regex"); return NULL; }
  int in_class = 0;
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < n) {
      char d = p[i + 1];
      if (d == 's' || d == 'S') {
        if (in_class && d == 'S') {
          free(r);
          spill_err_set(e, SPILL_E_UNSUPPORTED, "tokenizer: regex: \\S inside a class");
          return NULL;
        }
        const char *ins = in_class ? JS_SPACE : (d == 's' ? "[" JS_SPACE "]" : "[^" JS_SPACE "]");
        size_t k = strlen(ins);
        memcpy(r + o, ins, k);
        o += k;
        i++;
        continue;
      }
      r[o++] = c;
      r[o++] = d;
      i++;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = 1;
      r[o++] = c;
      if (i + 1 < n && p[i + 1] == '^') r[o++] = p[++i];
      if (i + 1 < n && p[i + 1] == ']') r[o++] = p[++i]; /* literal ] first */
      continue;
    }
    if (c == ']' && in_class) in_class = 0;
    r[o++] = c;
  }
  r[o] = '\0';
  return r;
}

int tok_add_split(spill_tok *t, const char *pattern, spill_err *e) {
  SPILL_FAIL_IF(e, t->n_splits >= TOK_MAX_SPLITS, SPILL_E_UNSUPPORTED,
                "tokenizer: more than %d split pre-tokenizers", TOK_MAX_SPLITS);
  char *pat = rewrite_space(pattern, e);
  if (!pat) return e ? e->code : SPILL_E_NOMEM;
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code *code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err,
                                   &erroff, NULL);
  free(pat);
  if (!code) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof msg);
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "tokenizer: split regex at %zu: %s",
                         (size_t)erroff, (const char *)msg);
  }
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
  t->split_code[t->n_splits++] = code;
  return SPILL_OK;
}

void tok_free_splits(spill_tok *t) {
  for (int i = 0; i < t->n_splits; i++) pcre2_code_free((pcre2_code *)t->split_code[i]);
  t->n_splits = 0;
}

static int utf8_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

static int split_level(const spill_tok *t, int level, pcre2_match_data *md, const char *s,
                       size_t len, size_t off, tok_piece_fn fn, void *ctx, spill_err *e) {
  if (len == 0) return SPILL_OK;
  if (level >= t->n_splits) return fn(ctx, s, len, off);
  const pcre2_code *code = (const pcre2_code *)t->split_code[level];
  size_t pos = 0, prev = 0;
  while (pos <= len) {
    int rc = pcre2_match(code, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[160];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return spill_err_set(e, SPILL_E_INTERNAL, "tokenizer: regex match: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* empty match: JS advances one code point */
      if (ms >= len) break;
      pos = ms + (size_t)utf8_len((unsigned char)s[ms]);
      continue;
    }
    if (ms > prev) SPILL_TRY(split_level(t, level + 1, md, s + prev, ms - prev, off + prev, fn, ctx, e));
    SPILL_TRY(split_level(t, level + 1, md, s + ms, me - ms, off + ms, fn, ctx, e));
    prev = pos = me;
  }
  if (prev < len) SPILL_TRY(split_level(t, level + 1, md, s + prev, len - prev, off + prev, fn, ctx, e));
  return SPILL_OK;
}

int tok_split(const spill_tok *t, const char *s, size_t len, size_t off, tok_piece_fn fn,
              void *ctx, spill_err *e) {
  if (t->n_splits == 0) return len ? fn(ctx, s, len, off) : SPILL_OK;
  pcre2_match_data *md = pcre2_match_data_create(4, NULL);
  if (!md) return spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory for regex match data");
  int rc = split_level(t, 0, md, s, len, off, fn, ctx, e);
  pcre2_match_data_free(md);
  return rc;
}

/* ---- GPT-2 byte map -------------------------------------------------------- */

static int printable_byte(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(unsigned b) {
  if (printable_byte(b)) return b;
  unsigned n = 0;
  for (unsigned c = 0; c < b; c++) n += !printable_byte(c);
  return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
  if (cp < 256) return printable_byte(cp) ? (int)cp : -1;
  if (cp >= 256 + 68) return -1; /* 68 non-printable bytes */
  unsigned n = cp - 256;
  for (unsigned c = 0; c < 256; c++)
    if (!printable_byte(c)) {
      if (n == 0) return (int)c;
      n--;
    }
  return -1;
}

/* The byte of each 2-byte code point U+0080..U+017F under GPT-2's map, -1
 * where none (generated from printable_byte: U+0100 + n is the n-th
 * unprintable byte; TokByteMapTest checks it against tok_cp_to_byte). */
static const int16_t UNMAP2[256] = {
      -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
      -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
      -1,  161,  162,  163,  164,  165,  166,  167,  168,  169,  170,  171,  172,   -1,  174,  175,
     176,  177,  178,  179,  180,  181,  182,  183,  184,  185,  186,  187,  188,  189,  190,  191,
     192,  193,  194,  195,  196,  197,  198,  199,  200,  201,  202,  203,  204,  205,  206,  207,
     208,  209,  210,  211,  212,  213,  214,  215,  216,  217,  218,  219,  220,  221,  222,  223,
     224,  225,  226,  227,  228,  229,  230,  231,  232,  233,  234,  235,  236,  237,  238,  239,
     240,  241,  242,  243,  244,  245,  246,  247,  248,  249,  250,  251,  252,  253,  254,  255,
       0,    1,    2,    3,    4,    5,    6,    7,    8,    9,   10,   11,   12,   13,   14,   15,
      16,   17,   18,   19,   20,   21,   22,   23,   24,   25,   26,   27,   28,   29,   30,   31,
      32,  127,  128,  129,  130,  131,  132,  133,  134,  135,  136,  137,  138,  139,  140,  141,
     142,  143,  144,  145,  146,  147,  148,  149,  150,  151,  152,  153,  154,  155,  156,  157,
     158,  159,  160,  173,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
      -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
      -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
      -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,   -1,
};

long tok_unmap_bytelevel(const char *s, size_t len, char *out) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, o = 0;
  while (i < len) {
    unsigned b = p[i];
    if (b - 0x21u < 0x5Eu) { /* printable ASCII maps to itself */
      out[o++] = (char)b;
      i++;
      continue;
    }
    /* a 2-byte sequence (C0-C5: the map's code points are all below U+0180) */
    if (b - 0xC0u > 5u || i + 1 >= len) return -1;
    unsigned cp = ((b & 0x1F) << 6) | (p[i + 1] & 0x3F);
    int v = cp < 0x80 ? (cp - 0x21u < 0x5Eu ? (int)cp : -1) : UNMAP2[cp - 0x80];
    if (v < 0) return -1;
    out[o++] = (char)v;
    i += 2;
  }
  return (long)o;
}
