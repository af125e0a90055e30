/* harness/gnuplot_text.c: gnuplot string expressions for untrusted text
 * (gnuplot_text.h). Everything written goes through put(), which never lets
 * a byte end the line or the literal; the literal is closed whatever
 * happens, so a cut string cannot leave the script inside one.
 * A quote is written as a concatenation, 'a'."'".'b', not as gnuplot's ''
 * escape: gnuplot 5.4 ends the string at the second of two doubled quotes in
 * a row ('a''''b' reads as a' followed by the token b; seen while writing
 * //harness:gnuplot_text_test). */
#include "harness/gnuplot_text.h"

#include <string.h>

static int is_ctl(unsigned char c) { return c < 0x20 || c == 0x7f; }

/* Appends the quoted body of s to out[*o..cap) (cap leaves room for the
 * closing quote and NUL). label: control bytes as '?', cut on a UTF-8
 * boundary when full; else a control byte is -1, no room -2. */
static int put(char *out, size_t *o, size_t cap, const char *s, int label) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    if (is_ctl(c)) {
      if (!label) return -1;
      c = '?';
    }
    static const char q[] = "'.\"'\".'"; /* close, "'", reopen */
    size_t need = c == '\'' ? sizeof q - 1 : 1;
    if (*o + need > cap) {
      if (!label) return -2;
      /* the cut falls inside a UTF-8 sequence: drop its written part */
      if ((c & 0xC0) == 0x80) {
        while (*o > 1 && ((unsigned char)out[*o - 1] & 0xC0) == 0x80) (*o)--;
        if (*o > 1 && ((unsigned char)out[*o - 1] & 0xC0) == 0xC0) (*o)--;
      }
      return 0;
    }
    if (c == '\'') {
      memcpy(out + *o, q, sizeof q - 1);
      *o += sizeof q - 1;
    } else {
      out[(*o)++] = (char)c;
    }
  }
  return 0;
}

int spill_gp_path(char *out, size_t n, const char *path) {
  if (n < 3) return -2;
  size_t o = 0;
  out[o++] = '\'';
  int rc = path && *path ? 0 : -1;
  if (!rc && path[0] != '/') rc = put(out, &o, n - 2, "./", 0);
  if (!rc) rc = put(out, &o, n - 2, path, 0);
  if (rc) o = 1;
  out[o++] = '\'';
  out[o] = 0;
  return rc;
}

const char *spill_gp_label(char *out, size_t n, const char *s) {
  if (n < 3) {
    if (n) out[0] = 0;
    return out;
  }
  size_t o = 0;
  out[o++] = '\'';
  put(out, &o, n - 2, s ? s : "", 1);
  out[o++] = '\'';
  out[o] = 0;
  return out;
}
