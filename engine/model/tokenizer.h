/* engine/model/tokenizer.h: the byte tokenizer of synthetic models
 * (docs/MODEL.md, "Tokens"): token t < 256 is byte t, bos_id (>= 0) is
 * prepended on request, other ids >= 256 decode to nothing. Pure functions,
 * thread-safe. Depends on engine/base and the arch struct of engine/format.
 */
#ifndef SPILL_MODEL_TOKENIZER_H
#define SPILL_MODEL_TOKENIZER_H

#include <stddef.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the tokens of text[0..len) into out (capacity cap), with BOS first
 * when add_bos and a->bos_id >= 0; *n_out gets the count. Fails with
 * SPILL_E_RANGE (and writes nothing beyond cap) if cap is too small, and
 * SPILL_E_INVALID_ARG if vocab_size < 256. */
int spill_tokenizer_encode(const spill_arch *a, const char *text, size_t len, int add_bos,
                           int *out, int cap, int *n_out, spill_err *e);
/* Bytes of one token: writes 0 or 1 byte into buf, returns the count. */
int spill_tokenizer_decode_token(const spill_arch *a, int token, char *buf);
/* Decodes n tokens into buf (capacity cap, NUL-terminated when cap > 0);
 * returns the number of bytes the full text needs (excluding NUL), like
 * snprintf, so truncation is detectable. */
size_t spill_tokenizer_decode(const spill_arch *a, const int *tokens, int n, char *buf,
                              size_t cap);

#ifdef __cplusplus
}
#endif
#endif
