/* server/reply_channels.c: the XTML and harmony reply splitters
 * (reply_channels.h).
 *
 * A small state machine over the text not yet decided (pend): optional
 * literals (the message and channel openers a model may repeat) are taken
 * when pend starts with them, skipped when it cannot; inside a channel,
 * the earliest of the channel's closing markers ends it, and a tail of pend
 * that is a proper prefix of one of them is held back. So pend never holds
 * more than the longest marker, and any split of the input into pushes
 * gives the same output (reply_channels_test).
 */
#define _GNU_SOURCE /* memmem */
#include "server/reply_channels.h"

#include <stdlib.h>
#include <string.h>

static const char MSG_START[] = "<|open|>message role=\"assistant\"<|sep|>";
static const char THINK_START[] = "<|open|>think<|sep|>";
static const char THINK_END[] = "<|close|>think<|sep|>";
static const char RESP_START[] = "<|open|>response<|sep|>";
static const char RESP_END[] = "<|close|>response<|sep|>";
static const char TOOLS_START[] = "<|open|>tools<|sep|>";
static const char MSG_END[] = "<|close|>message<|sep|>";
static const char EOM[] = "<|end_of_msg|>";

static const char H_START[] = "<|start|>assistant";
static const char H_CHANNEL[] = "<|channel|>";
static const char H_MESSAGE[] = "<|message|>";
static const char H_END[] = "<|end|>";
static const char H_RETURN[] = "<|return|>";
static const char H_CALL[] = "<|call|>";
#define H_HEADER_MAX 512 /* a header longer than this is not one: plain text */

static const char *const XTML_MARKERS[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
static const char *const HARMONY_MARKERS[] = {"<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                                              "<|return|>", "<|call|>", "<|constrain|>"};

enum {
  S_MSG_START, S_THINK_START, S_REASON, S_RESP_START, S_CONTENT, S_TRAILER,
  S_H_NEXT, S_H_HEAD, S_H_REASON, S_H_FINAL, S_H_PREAMBLE
};

size_t spill_srv_channels_markers(int start, const char *const **texts) {
  if (start == SPILL_SRV_CH_HARMONY) {
    *texts = HARMONY_MARKERS;
    return sizeof HARMONY_MARKERS / sizeof *HARMONY_MARKERS;
  }
  if (start == SPILL_SRV_CH_REASONING || start == SPILL_SRV_CH_CONTENT) {
    *texts = XTML_MARKERS;
    return sizeof XTML_MARKERS / sizeof *XTML_MARKERS;
  }
  *texts = NULL;
  return 0;
}

int spill_srv_channels_turn_ends(int start, const char *p, size_t n) {
  return start == SPILL_SRV_CH_HARMONY && n == strlen(H_CALL) && !memcmp(p, H_CALL, n);
}

static int ends_with(const char *s, size_t n, const char *suf) {
  size_t k = strlen(suf);
  return n >= k && !memcmp(s + n - k, suf, k);
}

int spill_srv_channels_detect(const char *prompt, size_t len) {
  if (!prompt) return SPILL_SRV_CH_OFF;
  if (ends_with(prompt, len, THINK_START)) return SPILL_SRV_CH_REASONING;
  if (ends_with(prompt, len, RESP_START)) return SPILL_SRV_CH_CONTENT;
  if (ends_with(prompt, len, H_START)) return SPILL_SRV_CH_HARMONY;
  return SPILL_SRV_CH_OFF;
}

void spill_srv_channels_init(spill_srv_channels *c, int start) {
  memset(c, 0, sizeof *c);
  c->state = start == SPILL_SRV_CH_CONTENT ? S_RESP_START
             : start == SPILL_SRV_CH_HARMONY ? S_H_HEAD
                                             : S_MSG_START;
}

void spill_srv_channels_free(spill_srv_channels *c) {
  if (!c) return;
  free(c->pend);
  free(c->out[0]);
  free(c->out[1]);
  memset(c, 0, sizeof *c);
}

static int grow(char **b, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 64;
  while (nc < need) nc *= 2;
  char *p = realloc(*b, nc);
  if (!p) return -1;
  *b = p;
  *cap = nc;
  return 0;
}

static int emit(spill_srv_channels *c, int ch, const char *p, size_t n) {
  if (grow(&c->out[ch], &c->cap[ch], c->len[ch] + n + 1)) return c->oom = -1;
  memcpy(c->out[ch] + c->len[ch], p, n);
  c->len[ch] += n;
  c->out[ch][c->len[ch]] = 0;
  return 0;
}

static void consume(spill_srv_channels *c, size_t n) {
  memmove(c->pend, c->pend + n, c->n_pend - n);
  c->n_pend -= n;
}

/* An optional literal: 1 = decided (taken or not), 0 = wait for more text. */
static int optional_literal(spill_srv_channels *c, const char *lit, int next, int final) {
  size_t k = strlen(lit), m = c->n_pend < k ? c->n_pend : k;
  if (memcmp(c->pend, lit, m) != 0) { c->state = next; return 1; }
  if (m == k) { consume(c, k); c->state = next; return 1; }
  if (final) { c->state = next; return 1; }
  return 0;
}

/* Inside channel ch until one of ends[] (next state nexts[]): 1 = a marker
 * ended the channel, 0 = all that can be decided is emitted. */
static int in_channel(spill_srv_channels *c, int ch, const char *const *ends, const int *nexts,
                      int n_ends, int final) {
  size_t best = c->n_pend;
  int which = -1;
  for (int i = 0; i < n_ends; i++) {
    const char *at = memmem(c->pend, c->n_pend, ends[i], strlen(ends[i]));
    if (at && (size_t)(at - c->pend) < best) { best = (size_t)(at - c->pend); which = i; }
  }
  if (which >= 0) {
    if (emit(c, ch, c->pend, best)) return 0;
    consume(c, best + strlen(ends[which]));
    c->state = nexts[which];
    return 1;
  }
  size_t keep = 0; /* the longest tail of pend that begins some marker */
  for (int i = 0; i < n_ends && !final; i++) {
    size_t k = strlen(ends[i]);
    for (size_t t = k - 1 < c->n_pend ? k - 1 : c->n_pend; t > keep; t--)
      if (!memcmp(c->pend + c->n_pend - t, ends[i], t)) { keep = t; break; }
  }
  if (emit(c, ch, c->pend, c->n_pend - keep)) return 0;
  consume(c, c->n_pend - keep);
  return 0;
}

/* A harmony message header, up to <|message|>: 1 = decided, 0 = wait. */
static int harmony_header(spill_srv_channels *c, int final) {
  size_t k = strlen(H_CHANNEL), m = c->n_pend < k ? c->n_pend : k;
  int looks = !memcmp(c->pend, H_CHANNEL, m) || (c->n_pend >= 1 && c->pend[0] == ' ');
  if (!looks) { c->state = S_H_FINAL; return 1; } /* no header: plain text */
  /* a header is one only when <|message|> begins within H_HEADER_MAX bytes;
   * searching no further than that keeps the decision the same however the
   * text was pushed (whole, a long header is not decided by how much came) */
  const size_t km = strlen(H_MESSAGE), window = H_HEADER_MAX + km;
  const char *msg = memmem(c->pend, c->n_pend < window ? c->n_pend : window, H_MESSAGE, km);
  if (!msg) {
    if (!final && c->n_pend < window) return 0;
    c->state = S_H_FINAL; /* never a header: the text is content */
    return 1;
  }
  size_t hl = (size_t)(msg - c->pend);
  /* the channel is the last one named (gpt-oss-20b sometimes writes a stray
   * `<|channel|>commentary to=assistant` first, as llama.cpp's parser notes) */
  const char *ch = NULL;
  for (const char *q = c->pend; (q = memmem(q, hl - (size_t)(q - c->pend), H_CHANNEL, k)); q += k) ch = q;
  const char *name = ch ? ch + k : "";
  size_t nl = ch ? hl - (size_t)(name - c->pend) : 0;
  size_t w = 0;
  while (w < nl && name[w] != ' ' && name[w] != '<') w++;
  /* a recipient other than the assistant itself makes the message a tool call */
  int to = 0;
  for (const char *q = c->pend; !to && (q = memmem(q, hl - (size_t)(q - c->pend), " to=", 4)); q += 4) {
    size_t left = hl - (size_t)(q + 4 - c->pend);
    to = !(left >= 9 && !memcmp(q + 4, "assistant", 9) &&
           (left == 9 || q[13] == ' ' || q[13] == '<'));
  }
  if (to) c->state = S_TRAILER; /* a tool call: not the reply's text */
  else if (w == 8 && !memcmp(name, "analysis", 8)) c->state = S_H_REASON;
  else if (w == 10 && !memcmp(name, "commentary", 10)) c->state = S_H_PREAMBLE;
  else c->state = S_H_FINAL;
  consume(c, hl + strlen(H_MESSAGE));
  return 1;
}

static void run(spill_srv_channels *c, int final) {
  /* the end-of-message token ends the reply wherever it comes (it is the
   * model's end of turn, never text) */
  static const char *const reason_ends[] = {THINK_END, RESP_START, MSG_END, EOM};
  static const int reason_next[] = {S_RESP_START, S_CONTENT, S_TRAILER, S_TRAILER};
  static const char *const content_ends[] = {RESP_END, TOOLS_START, MSG_END, EOM};
  static const int content_next[] = {S_TRAILER, S_TRAILER, S_TRAILER, S_TRAILER};
  static const char *const h_ends[] = {H_END, H_RETURN, H_CALL, H_START};
  static const int h_reason_next[] = {S_H_NEXT, S_TRAILER, S_TRAILER, S_H_HEAD};
  static const int h_final_next[] = {S_TRAILER, S_TRAILER, S_TRAILER, S_TRAILER};
  for (int more = 1; more && !c->oom;) {
    switch (c->state) {
      case S_MSG_START: more = optional_literal(c, MSG_START, S_THINK_START, final); break;
      case S_THINK_START: more = optional_literal(c, THINK_START, S_REASON, final); break;
      case S_RESP_START: more = optional_literal(c, RESP_START, S_CONTENT, final); break;
      case S_REASON: more = in_channel(c, 0, reason_ends, reason_next, 4, final); break;
      case S_CONTENT: more = in_channel(c, 1, content_ends, content_next, 4, final); break;
      case S_H_NEXT: more = optional_literal(c, H_START, S_H_HEAD, final); break;
      case S_H_HEAD: more = harmony_header(c, final); break;
      case S_H_REASON: more = in_channel(c, 0, h_ends, h_reason_next, 4, final); break;
      case S_H_FINAL: more = in_channel(c, 1, h_ends, h_final_next, 4, final); break;
      case S_H_PREAMBLE: more = in_channel(c, 1, h_ends, h_reason_next, 4, final); break;
      default: c->n_pend = 0; more = 0; break; /* the trailer is not returned */
    }
  }
}

int spill_srv_channels_push(spill_srv_channels *c, const char *p, size_t n) {
  if (c->oom) return -1;
  if (grow(&c->pend, &c->cap_pend, c->n_pend + n + 1)) return c->oom = -1;
  memcpy(c->pend + c->n_pend, p, n);
  c->n_pend += n;
  run(c, 0);
  return c->oom;
}

int spill_srv_channels_finish(spill_srv_channels *c) {
  /* a reply of no text was never pushed: pend must still be a buffer (the
   * mem* calls of run() take no NULL, even for 0 bytes) */
  if (!c->oom && grow(&c->pend, &c->cap_pend, c->n_pend + 1)) return c->oom = -1;
  if (!c->oom) run(c, 1);
  return c->oom;
}

size_t spill_srv_channels_take(spill_srv_channels *c, int ch, const char **p) {
  size_t n = c->len[ch] - c->sent[ch];
  *p = c->out[ch] ? c->out[ch] + c->sent[ch] : "";
  c->sent[ch] = c->len[ch];
  return n;
}
