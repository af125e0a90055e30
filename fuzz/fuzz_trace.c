/* fuzz/fuzz_trace.c: libFuzzer target for the router-trace parser
 * (spill_trace_parse, engine/trace/trace_read.c) and the statistics and
 * replay that run on what it accepts.
 *
 * Byte 0 chooses opts.n_experts (0 = infer from the ids); the rest is JSONL,
 * not NUL-terminated. A trace that parses must satisfy the invariants of
 * router_trace.h (ids distinct within a layer and < n_experts), checked
 * here; small ones are also summarised and replayed through LRU and Belady.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  spill_trace_read_opts o = {0};
  o.n_experts = data[0] & 0x3f;
  o.name = "fuzz.jsonl";
  /* Exact-size copy so ASan catches reads past len. */
  size_t len = size - 1;
  char *buf = malloc(len ? len : 1);
  if (!buf) return 0;
  memcpy(buf, data + 1, len);
  spill_trace t;
  spill_err e = {0};
  memset(&t, 0, sizeof t);
  if (spill_trace_parse(buf, len, &o, &t, &e) == SPILL_OK) {
    for (uint32_t k = 0; k < t.n_tokens; k++)
      for (uint32_t l = 0; l < t.n_layers; l++) {
        const uint32_t *ids = spill_trace_ids(&t, k, l);
        for (uint32_t i = 0; i < t.top_k; i++) {
          if (ids[i] >= t.n_experts) abort();
          for (uint32_t j = 0; j < i; j++)
            if (ids[i] == ids[j]) abort();
        }
      }
    if ((uint64_t)t.n_layers * t.n_experts <= 4096 && t.n_tokens <= 4096) {
      spill_trace_stats st;
      if (spill_trace_compute_stats(&t, 0, 0, &st, &e) == SPILL_OK) spill_trace_stats_free(&st);
      spill_trace_replay_result r;
      (void)spill_trace_replay(&t, "lru", 4, 1, 0, 0, 0, &r, &e);
      (void)spill_trace_replay(&t, "belady", 4, 1, 0, 0, 0, &r, &e);
      (void)spill_trace_replay(&t, "nextuse", 4, 1, 0, 0, SPILL_TRACE_REPLAY_BATCH, &r, &e);
    }
    spill_trace_free(&t);
  }
  free(buf);
  return 0;
}
