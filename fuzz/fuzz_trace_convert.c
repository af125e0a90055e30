/* fuzz/fuzz_trace_convert.c: libFuzzer target for the router-trace
 * converters (spill_trace_convert, research/trace/trace_convert.c) and the
 * JSONL writer on what they accept.
 *
 * Byte 0 chooses the source format (low 3 bits modulo the count: bmoe-csv,
 * hf-router-json, sorted-ids-txt, vllm-routed-json, llama-moe-csv,
 * flashmoe-bin), the drop policy (bit 3) and, from the high nibble h, the
 * layers per pass of sorted-ids-txt (h + 1), the top-k of llama-moe-csv
 * (h, 0 = inferred) or the hidden floats of flashmoe-bin (h); the rest is
 * the source file, not NUL-terminated. A converted
 * trace must satisfy the invariants of router_trace.h (checked here) and
 * its JSONL text must read back to the same ids.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  spill_trace_convert_opts o;
  memset(&o, 0, sizeof o);
  spill_trace_source src = (spill_trace_source)((data[0] & 7) % SPILL_TRACE_SRC_COUNT);
  o.incomplete = (data[0] & 8) ? SPILL_TRACE_DROP_LAYERS : SPILL_TRACE_DROP_TOKENS;
  const uint32_t h = (uint32_t)(data[0] >> 4);
  o.n_layers = src == SPILL_TRACE_SRC_SORTED_IDS_TXT ? h + 1 : 0;
  o.top_k = src == SPILL_TRACE_SRC_LLAMA_MOE_CSV ? h : 0;
  o.hidden = src == SPILL_TRACE_SRC_FLASHMOE_BIN ? h : 0;
  size_t len = size - 1;
  char *buf = malloc(len ? len : 1); /* exact size: ASan catches overreads */
  if (!buf) return 0;
  memcpy(buf, data + 1, len);
  const char *in[1] = {buf};
  const char *names[1] = {"fuzz.in"};
  spill_trace t;
  spill_err e = {0};
  if (spill_trace_convert(src, in, &len, names, 1, &o, &t, &e) == SPILL_OK) {
    if (t.n_tokens == 0 || t.n_layers == 0 || t.top_k == 0) abort();
    for (uint32_t k = 0; k < t.n_tokens; k++)
      for (uint32_t l = 0; l < t.n_layers; l++) {
        const uint32_t *ids = spill_trace_ids(&t, k, l);
        for (uint32_t i = 0; i < t.top_k; i++) {
          if (ids[i] >= t.n_experts) abort();
          for (uint32_t j = 0; j < i; j++)
            if (ids[i] == ids[j]) abort();
        }
      }
    char *text;
    size_t tl;
    if (spill_trace_format_jsonl(&t, &text, &tl, &e) == SPILL_OK) {
      spill_trace r;
      if (spill_trace_parse(text, tl, NULL, &r, &e) != SPILL_OK) abort();
      if (r.n_tokens != t.n_tokens || r.n_layers != t.n_layers || r.top_k != t.top_k ||
          memcmp(r.ids, t.ids, (size_t)t.n_tokens * t.n_layers * t.top_k * sizeof(uint32_t)))
        abort();
      spill_trace_free(&r);
      free(text);
    }
    spill_trace_free(&t);
  }
  free(buf);
  return 0;
}
