/* fuzz/fuzz_server_request.c: libFuzzer target for the HTTP server's
 * request parser (server/request_parse.c) and the generated-text pipeline
 * (server/completion_text.c) and the XTML / harmony reply splitter (server/reply_channels.c).
 *
 * Input: byte 0 picks the endpoint (even: chat, odd: completions), the rest
 * is the request body, as untrusted as any HTTP body. Any bytes must give a
 * checked request or a 400/500 error with a message (its param and message
 * valid UTF-8, though they echo unknown keys), never a crash. A
 * request that parses must be internally consistent (messages or prompt
 * present, stop sequences non-empty and at most 4); its chat rendering is
 * built, and its prompt bytes are fed through the text pipeline as if they
 * were generated tokens: the output must be valid UTF-8 and contain none of
 * the stop sequences; that text split into think channel and response
 * (both starting states) gives the same two strings fed whole and in 3-byte
 * pieces, both valid UTF-8. Violations abort().
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat_prompt.h"
#include "server/completion_text.h"
#include "server/reply_channels.h"
#include "server/request_parse.h"

static int valid_utf8(const unsigned char *p, size_t n);

/* The splitter over s[0..n) whole and in 3-byte pieces: the same output. */
static void check_channels(const char *s, size_t n) {
  for (int start = SPILL_SRV_CH_REASONING; start <= SPILL_SRV_CH_HARMONY; start++) {
    spill_srv_channels a, b;
    spill_srv_channels_init(&a, start);
    spill_srv_channels_init(&b, start);
    if (spill_srv_channels_push(&a, s, n) || spill_srv_channels_finish(&a)) abort();
    for (size_t i = 0; i < n; i += 3)
      if (spill_srv_channels_push(&b, s + i, n - i < 3 ? n - i : 3)) abort();
    if (spill_srv_channels_finish(&b)) abort();
    for (int ch = 0; ch < 2; ch++) {
      if (a.len[ch] != b.len[ch] || (a.len[ch] && memcmp(a.out[ch], b.out[ch], a.len[ch]))) abort();
      if (a.len[ch] && !valid_utf8((const unsigned char *)a.out[ch], a.len[ch])) abort();
    }
    spill_srv_channels_free(&a);
    spill_srv_channels_free(&b);
  }
}

static int valid_utf8(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i++];
    int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
                                                      : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (k < 0 || i + (size_t)k > n) return 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (int j = 0; j < k; j++, i++) {
      if (p[i] < lo || p[i] > hi) return 0;
      lo = 0x80;
      hi = 0xBF;
    }
  }
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  spill_srv_kind kind = data[0] & 1 ? SPILL_SRV_COMPLETION : SPILL_SRV_CHAT;
  spill_srv_request r;
  spill_srv_error e;
  int rc = spill_srv_request_parse(kind, (const char *)data + 1, size - 1, &r, &e);
  if (rc) {
    if ((e.http_status != 400 && e.http_status != 500) || !e.message[0]) abort();
    /* the error echoes client-chosen keys: still valid UTF-8, NUL-terminated */
    if (!memchr(e.param, 0, sizeof e.param) || !memchr(e.message, 0, sizeof e.message)) abort();
    if (!valid_utf8((const unsigned char *)e.param, strlen(e.param))) abort();
    if (!valid_utf8((const unsigned char *)e.message, strlen(e.message))) abort();
    spill_srv_request_free(&r);
    return 0;
  }
  if (!r.model || r.n_stop < 0 || r.n_stop > SPILL_SRV_MAX_STOP) abort();
  if (kind == SPILL_SRV_CHAT && (r.n_messages < 1 || !r.messages)) abort();
  if (kind == SPILL_SRV_COMPLETION && !r.prompt) abort();
  for (int i = 0; i < r.n_stop; i++)
    if (!r.stop[i] || !r.stop[i][0]) abort();
  char *text = kind == SPILL_SRV_CHAT ? spill_srv_chat_fallback(r.messages, r.n_messages) : NULL;
  const char *src = kind == SPILL_SRV_CHAT ? text : r.prompt;
  if (src) {
    spill_srv_text t;
    spill_srv_text_init(&t, (const char *const *)r.stop, r.n_stop);
    size_t n = strlen(src), got = 0;
    char *out = malloc(n * 3 + 8);
    for (size_t i = 0; out && i < n; i += 3) {
      size_t k = n - i < 3 ? n - i : 3; /* 3-byte "tokens" */
      if (spill_srv_text_push(&t, src + i, k) < 0) break;
      const char *p;
      size_t m = spill_srv_text_take(&t, &p);
      memcpy(out + got, p, m);
      got += m;
    }
    if (out) {
      spill_srv_text_finish(&t);
      const char *p;
      size_t m = spill_srv_text_take(&t, &p);
      memcpy(out + got, p, m);
      got += m;
      if (got != t.len || memcmp(out, t.buf ? t.buf : "", got) != 0) abort();
      if (!valid_utf8((const unsigned char *)out, got)) abort();
      out[got] = 0;
      for (int i = 0; i < r.n_stop; i++)
        if (strstr(out, r.stop[i])) abort();
      check_channels(out, got);
    }
    free(out);
    spill_srv_text_free(&t);
  }
  free(text);
  spill_srv_request_free(&r);
  return 0;
}
