/* fuzz/fuzz_gguf.c: libFuzzer target for the GGUF parser (metadata, tensor
 * infos, alignment; spill_gguf_parse_mem, engine/import/gguf.c).
 *
 * The input is a whole GGUF file. Whatever the bytes, the parser returns a
 * status (never crashes, over-allocates past the input's size, reads out of
 * bounds, leaks); on success every tensor must lie aligned inside the file
 * and every metadata entry must be reachable through the public getters and
 * dequantisable tensors must dequantise (checked here), then it is freed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/import/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  spill_gguf g;
  spill_err e = {0};
  if (spill_gguf_parse_mem(data, size, "fuzz.gguf", &g, &e) == SPILL_OK) {
    for (int i = 0; i < spill_gguf_n_kv(&g); i++) {
      const spill_gguf_kv *kv = spill_gguf_kv_at(&g, i);
      if (!kv || spill_gguf_find_kv(&g, kv->key) != kv) abort();
      uint64_t u;
      double d;
      (void)spill_gguf_get_u64(&g, kv->key, &u, &e);
      (void)spill_gguf_get_f64(&g, kv->key, &d, &e);
      if (kv->n > 0 && kv->elem != SPILL_GGUF_STRING) (void)spill_gguf_arr_f64(kv, kv->n - 1, &d, &e);
    }
    float buf[256];
    for (int i = 0; i < g.n_tensors; i++) {
      const spill_src_tensor *t = &g.t[i];
      if (t->begin > size || t->bytes > size - t->begin || t->begin % g.alignment) abort();
      if (spill_gguf_find(&g, t->name) != t) abort();
      const spill_src_traits *tr = spill_src_dtype_traits(t->dtype);
      if (t->dtype != SPILL_SRC_OTHER && t->bytes >= tr->block_bytes)
        if (spill_src_dequant(t->dtype, data + t->begin, tr->block_elems, buf, &e) != SPILL_OK)
          abort();
    }
    spill_gguf_close(&g);
  }
  return 0;
}
