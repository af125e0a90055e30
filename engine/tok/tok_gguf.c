/* engine/tok/tok_gguf.c: a tokenizer from a GGUF file's tokenizer.ggml.*
 * metadata. Until the GGUF reader of engine/import is available to this
 * package, a GGUF source is refused with a clear error.
 */
#include "engine/tok/tok_internal.h"

int tok_load_gguf(const char *path, spill_tok **out, spill_err *e);

int tok_load_gguf(const char *path, spill_tok **out, spill_err *e) {
  *out = NULL;
  return spill_err_set(e, SPILL_E_UNSUPPORTED, "%s: GGUF tokenizers are not supported yet", path);
}
