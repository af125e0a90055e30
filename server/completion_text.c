/* server/completion_text.c: token bytes -> UTF-8 text -> stop sequences
 * (completion_text.h).
 *
 * The decoder is the WHATWG Encoding Standard's UTF-8 decoder (section
 * "UTF-8 decoder"), run incrementally: state carries across pushes, a byte
 * outside the expected range emits U+FFFD and is processed again as a fresh
 * start, and the end of the stream with a sequence pending emits one U+FFFD.
 * Stop matching looks only where a match can start: at or after the
 * previous end minus the longest stop sequence, so a long generation costs
 * O(new bytes x stop length) per push.
 */
#include "server/completion_text.h"

#include <stdlib.h>
#include <string.h>

void spill_srv_text_init(spill_srv_text *t, const char *const *stop, int n_stop) {
  memset(t, 0, sizeof *t);
  t->lower = 0x80;
  t->upper = 0xBF;
  t->stop = stop;
  t->n_stop = n_stop;
}

void spill_srv_text_free(spill_srv_text *t) {
  if (!t) return;
  free(t->buf);
  memset(t, 0, sizeof *t);
}

static int put(spill_srv_text *t, const char *s, size_t n) {
  if (t->len + n + 1 > t->cap) {
    size_t c = t->cap ? t->cap : 256;
    while (c < t->len + n + 1) c *= 2;
    char *b = realloc(t->buf, c);
    if (!b) return -1;
    t->buf = b;
    t->cap = c;
  }
  memcpy(t->buf + t->len, s, n);
  t->len += n;
  t->buf[t->len] = 0;
  return 0;
}

static int put_cp(spill_srv_text *t, uint32_t cp) {
  char b[4];
  size_t n;
  if (cp < 0x80) {
    b[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | (cp >> 6));
    b[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | (cp >> 12));
    b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return put(t, b, n);
}

static int decode_byte(spill_srv_text *t, unsigned char c) {
  for (;;) {
    if (t->needed == 0) {
      if (c <= 0x7F) return put_cp(t, c);
      if (c >= 0xC2 && c <= 0xDF) {
        t->needed = 1;
        t->cp = c & 0x1F;
      } else if (c >= 0xE0 && c <= 0xEF) {
        if (c == 0xE0) t->lower = 0xA0;
        if (c == 0xED) t->upper = 0x9F;
        t->needed = 2;
        t->cp = c & 0xF;
      } else if (c >= 0xF0 && c <= 0xF4) {
        if (c == 0xF0) t->lower = 0x90;
        if (c == 0xF4) t->upper = 0x8F;
        t->needed = 3;
        t->cp = c & 0x7;
      } else {
        return put_cp(t, 0xFFFD);
      }
      return 0;
    }
    if (c < t->lower || c > t->upper) {
      t->cp = 0;
      t->needed = t->seen = 0;
      t->lower = 0x80;
      t->upper = 0xBF;
      if (put_cp(t, 0xFFFD)) return -1;
      continue; /* the byte starts afresh */
    }
    t->lower = 0x80;
    t->upper = 0xBF;
    t->cp = (t->cp << 6) | (c & 0x3F);
    if (++t->seen == t->needed) {
      uint32_t cp = t->cp;
      t->cp = 0;
      t->needed = t->seen = 0;
      return put_cp(t, cp);
    }
    return 0;
  }
}

static size_t max_stop(const spill_srv_text *t) {
  size_t m = 0;
  for (int i = 0; i < t->n_stop; i++) {
    size_t n = strlen(t->stop[i]);
    if (n > m) m = n;
  }
  return m;
}

/* Earliest match of any stop sequence starting at or after `from`. */
static int find_stop(spill_srv_text *t, size_t from) {
  size_t best = (size_t)-1;
  for (int i = 0; i < t->n_stop; i++) {
    size_t n = strlen(t->stop[i]);
    if (n == 0 || n > t->len) continue;
    for (size_t s = from; s + n <= t->len && s < best; s++)
      if (!memcmp(t->buf + s, t->stop[i], n)) {
        best = s;
        break;
      }
  }
  if (best == (size_t)-1) return 0;
  t->len = best;
  t->buf[t->len] = 0;
  if (t->released > t->len) t->released = t->len; /* cannot happen: held back */
  t->stopped = 1;
  return 1;
}

int spill_srv_text_push(spill_srv_text *t, const char *bytes, size_t n) {
  if (t->stopped || t->finished) return t->stopped;
  size_t before = t->len;
  for (size_t i = 0; i < n; i++)
    if (decode_byte(t, (unsigned char)bytes[i])) return -1;
  if (t->n_stop == 0 || t->len == before) return 0;
  size_t m = max_stop(t);
  size_t from = before >= m ? before - m + 1 : 0;
  if (from < t->released) from = t->released;
  return find_stop(t, from);
}

int spill_srv_text_finish(spill_srv_text *t) {
  if (t->finished) return 0;
  if (!t->stopped && t->needed) {
    t->needed = t->seen = 0;
    t->cp = 0;
    size_t before = t->len;
    if (put_cp(t, 0xFFFD)) return -1;
    size_t m = max_stop(t);
    if (t->n_stop) find_stop(t, before >= m ? before - m + 1 : 0);
  }
  t->finished = 1;
  return 0;
}

/* Length of the longest suffix of buf that is a proper prefix of some stop
 * sequence (that text may still become a match). */
static size_t held_back(const spill_srv_text *t) {
  size_t h = 0;
  for (int i = 0; i < t->n_stop; i++) {
    size_t n = strlen(t->stop[i]);
    if (n == 0) continue;
    for (size_t k = n - 1; k > h; k--)
      if (k <= t->len && !memcmp(t->buf + t->len - k, t->stop[i], k)) {
        h = k;
        break;
      }
  }
  return h;
}

size_t spill_srv_text_take(spill_srv_text *t, const char **p) {
  size_t end = t->len;
  if (!t->finished && !t->stopped) {
    size_t h = held_back(t);
    end = t->len - h;
  }
  if (end <= t->released) {
    *p = t->buf ? t->buf + t->len : "";
    return 0;
  }
  *p = t->buf + t->released;
  size_t n = end - t->released;
  t->released = end;
  return n;
}
