/* engine/model/tokenizer.c: the byte tokenizer of synthetic models
 * (docs/MODEL.md "Tokens"). Token t < 256 is byte t; BOS (when the arch has
 * one) is prepended on request; ids >= 256 decode to nothing.
 */
#include <string.h>

#include "engine/model/tokenizer.h"

int spill_tokenizer_encode(const spill_arch *a, const char *text, size_t len, int add_bos,
                           int *out, int cap, int *n_out, spill_err *e) {
  SPILL_FAIL_IF(e, !a || (!text && len) || !n_out || (cap > 0 && !out), SPILL_E_INVALID_ARG,
                "tokenizer: NULL argument");
  SPILL_FAIL_IF(e, a->vocab_size < 256, SPILL_E_INVALID_ARG,
                "tokenizer: vocab %d is smaller than the 256 byte tokens", a->vocab_size);
  const int bos = add_bos && a->bos_id >= 0;
  SPILL_FAIL_IF(e, len > (size_t)(1 << 30) || (size_t)cap < len + (size_t)bos, SPILL_E_RANGE,
                "tokenizer: %zu tokens do not fit in %d", len + (size_t)bos, cap);
  int n = 0;
  if (bos) out[n++] = a->bos_id;
  for (size_t i = 0; i < len; i++) out[n++] = (unsigned char)text[i];
  *n_out = n;
  return SPILL_OK;
}

int spill_tokenizer_decode_token(const spill_arch *a, int token, char *buf) {
  (void)a;
  if (token < 0 || token >= 256) return 0;
  buf[0] = (char)token;
  return 1;
}

size_t spill_tokenizer_decode(const spill_arch *a, const int *tokens, int n, char *buf,
                              size_t cap) {
  size_t need = 0;
  for (int i = 0; i < n; i++) {
    char c;
    if (spill_tokenizer_decode_token(a, tokens[i], &c)) {
      if (buf && need + 1 < cap) buf[need] = c;
      need++;
    }
  }
  if (buf && cap > 0) buf[need < cap ? need : cap - 1] = '\0';
  return need;
}
