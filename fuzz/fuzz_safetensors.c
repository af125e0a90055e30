/* fuzz/fuzz_safetensors.c: libFuzzer target for the safetensors header
 * parser (spill_st_parse_header, engine/import/safetensors.c).
 *
 * The input is the start of a safetensors file of the same size. Whatever
 * the bytes, the parser returns a status (never crashes, reads out of
 * bounds, leaks or hits undefined behaviour); on success every tensor must
 * lie inside the file, hold exactly its dtype's size and not overlap the
 * next one (checked here: the parser's promises), then it is freed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/import/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  spill_st_list l;
  spill_err e = {0};
  if (spill_st_parse_header(data, size, size, 0, "fuzz.safetensors", &l, &e) == SPILL_OK) {
    for (int i = 0; i < l.n; i++) {
      const spill_src_tensor *t = &l.t[i];
      if (t->begin > size || t->bytes > size - t->begin) abort();
      if (i > 0 && l.t[i - 1].begin + l.t[i - 1].bytes > t->begin) abort();
      if (t->dtype != SPILL_SRC_OTHER) {
        uint64_t want;
        if (spill_src_bytes(t->dtype, spill_src_numel(t), &want, &e) != SPILL_OK ||
            want != t->bytes)
          abort();
      }
    }
    spill_st_list_free(&l);
  }
  return 0;
}
