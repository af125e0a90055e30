/* server/reply_channels.h: a chat reply split into its think channel and
 * its response, for models whose chat format is Kimi K3's XTML or gpt-oss's
 * harmony.
 *
 * Role: the rendered prompt of such a model ends with the generation prompt
 * `<|open|>message role="assistant"<|sep|><|open|>think<|sep|>` (thinking,
 * the template's default) or `...<|open|>response<|sep|>` (thinking off),
 * so the model's first token is inside a channel. OpenAI-compatible servers
 * (llama.cpp's server, common/parsers/kimi-k3.cpp) return the think channel
 * as `reasoning_content` and the response as `content`; this splitter reads
 * the generated text (the markers `<|open|>`, `<|close|>`, `<|sep|>`,
 * `<|end_of_msg|>` included as their text) with the same grammar:
 *
 *   [<|open|>message role="assistant"<|sep|>] [<|open|>think<|sep|>]
 *   REASONING up to <|close|>think<|sep|> or <|open|>response<|sep|>
 *   [<|open|>response<|sep|>] CONTENT up to <|close|>response<|sep|>,
 *   <|open|>tools<|sep|> or <|close|>message<|sep|>; the rest (closing
 *   tags, <|end_of_msg|>, a tool-call section) is not returned. The
 *   message closer or <|end_of_msg|> (the model's end of turn) inside the
 *   think channel ends the reply too: it is never text.
 *
 * harmony (gpt-oss; llama.cpp's server, common/parsers/gpt-oss.cpp, returns the
 * analysis channel as `reasoning_content`): the generation prompt ends with
 * `<|start|>assistant`, and the reply is messages
 *   HEADER<|message|>TEXT<|end|> [<|start|>assistant HEADER...]
 * where HEADER is `<|channel|>NAME` with maybe a recipient ` to=...` and a
 * `<|constrain|>` type. analysis: TEXT is reasoning, up to <|end|> (then the
 * next message), <|return|> or <|call|>; final: TEXT is content and ends the
 * reply at <|end|>, <|return|> or <|call|>; a header with a recipient is a
 * tool call and ends the reply's text (not returned, as XTML's tools
 * section; ` to=assistant`, a stray prefix gpt-oss-20b writes, is none);
 * commentary without one (a preamble for the user) is content up
 * to <|end|>. A reply with no header is all content; a header that never
 * reaches <|message|> is released as content at the end.
 *
 * Text that may be the start of a marker is held until it is decided, so
 * feeding the text in any pieces gives the same two strings, and the
 * streamed deltas concatenate to the whole reply's. Pure; no engine, no I/O.
 */
#ifndef SPILL_SERVER_REPLY_CHANNELS_H
#define SPILL_SERVER_REPLY_CHANNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Which channel the reply starts in, from the rendered prompt's end:
 * SPILL_SRV_CH_REASONING after `<|open|>think<|sep|>`, SPILL_SRV_CH_CONTENT
 * after `<|open|>response<|sep|>` (XTML), SPILL_SRV_CH_HARMONY after
 * `<|start|>assistant`, SPILL_SRV_CH_OFF otherwise (no split: the whole
 * reply is content). */
enum {
  SPILL_SRV_CH_OFF = 0,
  SPILL_SRV_CH_REASONING = 1,
  SPILL_SRV_CH_CONTENT = 2,
  SPILL_SRV_CH_HARMONY = 3
};
int spill_srv_channels_detect(const char *prompt, size_t len);
/* The marker texts of the format a start value belongs to (XTML's 4 or
 * harmony's 7; 0 for SPILL_SRV_CH_OFF), *texts borrowed. They are special
 * tokens, which decode to nothing: a caller splits only when the tokenizer
 * has every one of them as a special token, and feeds a marker token as its
 * text (spill_tok_piece). */
size_t spill_srv_channels_markers(int start, const char *const **texts);
/* 1 when the marker text p[0..n) ends the model's turn in the format of
 * start although it is not the tokenizer's EOS: harmony's `<|call|>` (a tool
 * call waits for its result; gpt-oss's generation_config lists it with
 * `<|return|>`, and llama.cpp stops there). The caller stops generating
 * after it, with finish reason "stop". */
int spill_srv_channels_turn_ends(int start, const char *p, size_t n);

typedef struct spill_srv_channels {
  int state;      /* internal (reply_channels.c) */
  char *pend;     /* text not yet decided (a possible marker prefix) */
  size_t n_pend, cap_pend;
  char *out[2];   /* [0] reasoning, [1] content: all of it so far, NUL-terminated */
  size_t len[2], cap[2];
  size_t sent[2]; /* bytes of out[] handed out by spill_srv_channels_take */
  int oom;
} spill_srv_channels;

/* start: SPILL_SRV_CH_REASONING, SPILL_SRV_CH_CONTENT or SPILL_SRV_CH_HARMONY. */
void spill_srv_channels_init(spill_srv_channels *c, int start);
void spill_srv_channels_free(spill_srv_channels *c);
/* Feeds generated text. Returns 0, or -1 out of memory (then sticky). */
int spill_srv_channels_push(spill_srv_channels *c, const char *p, size_t n);
/* End of the reply: held text that never became a marker is released to
 * the channel it was in. */
int spill_srv_channels_finish(spill_srv_channels *c);
/* The text of channel ch (0 reasoning, 1 content) decided since the last
 * take: *p points into the channel's buffer (valid until the next push);
 * returns its length and marks it taken. */
size_t spill_srv_channels_take(spill_srv_channels *c, int ch, const char **p);

#ifdef __cplusplus
}
#endif
#endif
