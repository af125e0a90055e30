/* server/chat_prompt.h: chat messages -> the prompt text the model sees.
 *
 * Role: a model with a chat template renders messages through it (the
 * tokenizer module's Jinja renderer, spill_tok_chat_render; the server does
 * that, server/http_server.c). A model without one (the synthetic nano/mini/twin models: byte
 * tokenizer, no template) gets the documented fallback rendering below,
 * never a made-up "official" template; the server says which one it used
 * (response header X-Spill-Chat-Template, /v1/models). Pure.
 *
 * Fallback (docs/SERVER.md): for each message "<|ROLE|>\n" CONTENT "\n",
 * then "<|assistant|>\n" (the generation prompt).
 */
#ifndef SPILL_SERVER_CHAT_PROMPT_H
#define SPILL_SERVER_CHAT_PROMPT_H

#include "server/request_parse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The fallback rendering of m[0..n) (malloc'ed; caller frees); NULL out of
 * memory. */
char *spill_srv_chat_fallback(const spill_srv_message *m, int n);

#ifdef __cplusplus
}
#endif
#endif
