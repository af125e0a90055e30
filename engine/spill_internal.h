/* engine/spill_internal.h: what the top-level files of libspill share and no
 * client sees. */
#ifndef SPILL_INTERNAL_H
#define SPILL_INTERNAL_H

#include "engine/spill.h"

/* The tokenizer a model directory carries (tokenizer.json / tiktoken.model
 * copied from an HF checkpoint, tokenizer.gguf written from a GGUF; never
 * another *.gguf a user put there), loaded as the engine loads it, with its
 * ids checked against the model's `vocab`. *out = NULL and SPILL_OK when the
 * directory holds none (the engine then keeps the byte tokenizer). On
 * success *out is the caller's (spill_tok_free). The message names the file. */
int spill_model_tokenizer(const char *model_dir, int vocab, spill_tok **out, spill_err *e);

#endif
