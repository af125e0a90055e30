/* engine/tok/spill_tok.h: real tokenizers and chat templates (public API,
 * re-exported by engine/spill.h).
 *
 * A spill_tok is loaded from a Hugging Face tokenizer.json (byte-level BPE of
 * Qwen2/3, DeepSeek-V3, Llama 3, GPT-NeoX/OLMoE; SentencePiece-style BPE with
 * byte fallback of Llama 2 / Mixtral), a tiktoken rank file, or the
 * tokenizer.ggml.* metadata of a GGUF file (docs/TOKENIZER.md). A loaded
 * tokenizer is immutable: encode/decode on one handle are thread-safe.
 * Text is UTF-8; invalid sequences are replaced by U+FFFD (WHATWG rules)
 * before anything else, as every reference implementation does.
 * Depends on engine/base, cJSON, PCRE2 and utf8proc; never prints.
 */
#ifndef SPILL_TOK_SPILL_TOK_H
#define SPILL_TOK_SPILL_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_tok spill_tok;

/* Loads a tokenizer from path: a checkpoint directory (tokenizer.json, else
 * tiktoken.model, plus tokenizer_config.json when present; else
 * tokenizer.gguf, the file `spill import` writes from a GGUF; else the first
 * *.gguf), a tokenizer.json, a tiktoken rank file, a GGUF file, or a spill
 * container directory holding one of these. On success *out is owned by the caller
 * (spill_tok_free). Errors: SPILL_E_IO (missing file), SPILL_E_FORMAT
 * (malformed), SPILL_E_UNSUPPORTED (a model type or pre-tokenizer we do not
 * implement; the message names it). */
int spill_tok_load(const char *path, spill_tok **out, spill_err *e);
/* The tokenizer file of directory dir, in the order spill_tok_load(dir)
 * takes it: tokenizer.json, tiktoken.model, tokenizer.gguf, then (only with
 * SPILL_TOK_ANY_GGUF) the first other *.gguf in the directory. A model
 * directory passes 0: a *.gguf there may be the model itself. Writes the
 * file's path to path[0..cap) and returns 1; 0 when the directory holds none
 * (path ""); SPILL_E_IO if dir cannot be listed or the path does not fit.
 * spill_tok_load(path) then loads it as spill_tok_load(dir) would
 * (tokenizer_config.json beside a tokenizer.json, Kimi's split pattern for
 * tiktoken.model). */
enum { SPILL_TOK_ANY_GGUF = 1 };
int spill_tok_locate(const char *dir, int flags, char *path, size_t cap, spill_err *e);
/* From memory: a tokenizer.json text and optionally a tokenizer_config.json
 * text (NULL = none; it supplies add_bos_token, bos/eos and the chat
 * template). */
int spill_tok_load_hf(const char *json, size_t len, const char *config_json, size_t config_len,
                      spill_tok **out, spill_err *e);
/* A tiktoken rank file ("base64 rank" lines). pattern = the split regex (PCRE2
 * syntax; NULL = the o200k pattern); specials = "text id" pairs, n_specials
 * of them (may be 0). */
int spill_tok_load_tiktoken(const char *ranks, size_t len, const char *pattern,
                            const char *const *special_text, const int *special_id,
                            int n_specials, spill_tok **out, spill_err *e);
void spill_tok_free(spill_tok *t); /* NULL fine */

/* Built-in split patterns for tiktoken files (PCRE2 syntax). */
extern const char SPILL_TOK_PAT_O200K[];
extern const char SPILL_TOK_PAT_CL100K[];
extern const char SPILL_TOK_PAT_KIMI[]; /* Kimi K2's, its Han class split out */

/* Encode flags. */
enum {
  SPILL_TOK_SPECIAL = 1,  /* parse special tokens in the text (else they are text) */
  SPILL_TOK_ADD_BOS = 2,  /* add the tokenizer's BOS/post-processor tokens */
};

/* A growable id list with the byte offset (start, in the normalised text)
 * of each id. Zero-initialise; reuse across calls; spill_tok_ids_free. */
typedef struct spill_tok_ids {
  int32_t *ids;
  uint32_t *offsets;
  size_t n, cap;
} spill_tok_ids;
void spill_tok_ids_free(spill_tok_ids *v);

/* Appends the ids of text[0..len) to out (out->n is not reset). flags as
 * above. Errors: SPILL_E_NOMEM, SPILL_E_RANGE (text over 1 GiB). */
int spill_tok_encode(const spill_tok *t, const char *text, size_t len, unsigned flags,
                     spill_tok_ids *out, spill_err *e);

/* The normaliser the tokenizer applies (U+FFFD replacement, NFC when the
 * tokenizer has it): what decode(encode(x)) returns. *out is malloc'ed,
 * NUL-terminated; caller frees. */
int spill_tok_normalize(const spill_tok *t, const char *text, size_t len, char **out,
                        size_t *out_len, spill_err *e);

/* Decodes ids into a malloc'ed NUL-terminated byte string (*out, caller
 * frees). skip_special drops special tokens. Unknown ids: SPILL_E_RANGE. */
int spill_tok_decode(const spill_tok *t, const int32_t *ids, size_t n, int skip_special,
                     char **out, size_t *out_len, spill_err *e);

/* The raw bytes of one token (for a piece listing), borrowed; NULL if id is
 * out of range. For SentencePiece vocabularies this is the piece text. */
const char *spill_tok_piece(const spill_tok *t, int32_t id, size_t *len);

/* Streaming decode: feed ids one by one, get only complete UTF-8 characters
 * back (a character split across tokens is held until it completes; bytes
 * that can never complete are released as they are). Zero-initialise. */
typedef struct spill_tok_stream {
  unsigned char pend[8];
  int n_pend;
  int started;
} spill_tok_stream;
/* Writes the bytes ready after id into buf (cap >= 64 + the longest token is
 * always enough; spill_tok_max_piece). Returns the count, or a negative status. */
int spill_tok_stream_push(const spill_tok *t, spill_tok_stream *s, int32_t id, int skip_special,
                          char *buf, size_t cap, spill_err *e);
/* Releases what is still held (an incomplete trailing sequence). */
int spill_tok_stream_flush(spill_tok_stream *s, char *buf, size_t cap);
size_t spill_tok_max_piece(const spill_tok *t);

/* Facts about the tokenizer. */
int spill_tok_vocab_size(const spill_tok *t);   /* max id + 1 */
int32_t spill_tok_bos(const spill_tok *t);      /* -1 if none */
int32_t spill_tok_eos(const spill_tok *t);      /* -1 if none */
int spill_tok_is_special(const spill_tok *t, int32_t id);
/* Token id of an exact token text, or -1. */
int32_t spill_tok_find(const spill_tok *t, const char *text, size_t len);
/* The chat template shipped with the tokenizer (tokenizer_config.json or
 * GGUF tokenizer.chat_template), borrowed; NULL if none. */
const char *spill_tok_chat_template(const spill_tok *t);
/* Kind name: "bpe-bytelevel", "bpe-sentencepiece", "tiktoken". */
const char *spill_tok_kind(const spill_tok *t);

/* ---- Chat templates (engine/tok/chat_template.c) ------------------------ */

typedef struct spill_chat_msg {
  const char *role;    /* "system", "user", "assistant", "tool" */
  const char *content; /* UTF-8 */
} spill_chat_msg;

/* The render budget: chat templates come with downloaded models, so they
 * are untrusted programs. Every render runs under these limits, each failing
 * with its own status and a detail message (docs/RELIABILITY.md):
 *   max_parse_depth  nesting of the template's syntax tree (parentheses,
 *                    blocks, chained operators): SPILL_E_TMPL_PARSE_DEPTH
 *   max_eval_depth   nesting while evaluating (expressions, and nested lists
 *                    and dicts printed, compared, searched with `in` or
 *                    turned to JSON): SPILL_E_TMPL_EVAL_DEPTH
 *   max_steps        evaluation steps (a node evaluated, a loop iteration, an
 *                    allocation, or 1 KiB of string work): SPILL_E_TMPL_STEPS
 *   max_output_bytes bytes of rendered text: SPILL_E_TMPL_OUTPUT
 *   max_memory_bytes bytes the render allocates (its arena; each temporary
 *                    string is bounded by the same figure): SPILL_E_TMPL_MEMORY
 * A field left 0 takes its default (spill_chat_budget_default). A real
 * allocation failure is SPILL_E_NOMEM. Cancellation is cooperative: every
 * SPILL_CHAT_POLL_STEPS steps the render reads *stop_flag and calls
 * cancel(cancel_user); either nonzero stops it with SPILL_E_INTERRUPTED.
 * The callback runs on the rendering thread. */
typedef struct spill_chat_budget {
  int max_parse_depth;
  int max_eval_depth;
  unsigned long long max_steps;
  size_t max_output_bytes;
  size_t max_memory_bytes;
  volatile int *stop_flag;   /* NULL = none; read, never written */
  int (*cancel)(void *user); /* NULL = none */
  void *cancel_user;
} spill_chat_budget;
#define SPILL_CHAT_POLL_STEPS 4096
/* Fills b with the defaults (docs/RELIABILITY.md has the figures). */
void spill_chat_budget_default(spill_chat_budget *b);

/* Renders a Jinja chat template (the subset of docs/TOKENIZER.md, output
 * byte-identical to Python jinja2) over messages with add_generation_prompt,
 * bos_token and eos_token (NULL = ""). *out is malloc'ed, NUL-terminated;
 * caller frees. Errors: SPILL_E_FORMAT (template syntax, with line),
 * SPILL_E_CONFIG (the template raised an exception: message included),
 * SPILL_E_UNSUPPORTED (a Jinja feature outside the subset, named), the
 * budget's SPILL_E_TMPL_* and SPILL_E_INTERRUPTED, SPILL_E_NOMEM. */
int spill_chat_render(const char *tmpl, const spill_chat_msg *msgs, size_t n_msgs,
                      int add_generation_prompt, const char *bos_token, const char *eos_token,
                      char **out, spill_err *e);
/* The tokenizer's own chat template (spill_tok_chat_template) rendered with
 * its BOS/EOS token texts (SPILL_E_UNSUPPORTED if it has no template). The
 * result is meant to be encoded with SPILL_TOK_SPECIAL and without
 * SPILL_TOK_ADD_BOS (templates write BOS themselves), as transformers does. */
int spill_tok_chat_render(const spill_tok *t, const spill_chat_msg *msgs, size_t n_msgs,
                          int add_generation_prompt, char **out, spill_err *e);
/* General form: the template context as a JSON object text (e.g.
 * {"messages": [...], "tools": [...], "add_generation_prompt": true,
 *  "bos_token": "<s>"}); any JSON value becomes a Jinja value. */
int spill_chat_render_json(const char *tmpl, const char *context_json, char **out,
                           spill_err *e);
/* The three calls above under an explicit budget (NULL = the defaults,
 * which the calls above use). */
int spill_chat_render_budget(const char *tmpl, const spill_chat_msg *msgs, size_t n_msgs,
                             int add_generation_prompt, const char *bos_token,
                             const char *eos_token, const spill_chat_budget *budget, char **out,
                             spill_err *e);
int spill_tok_chat_render_budget(const spill_tok *t, const spill_chat_msg *msgs, size_t n_msgs,
                                 int add_generation_prompt, const spill_chat_budget *budget,
                                 char **out, spill_err *e);
int spill_chat_render_json_budget(const char *tmpl, const char *context_json,
                                  const spill_chat_budget *budget, char **out, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
