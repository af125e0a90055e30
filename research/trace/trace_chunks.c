/* research/trace/trace_chunks.c: what a verify chunk of k consecutive
 * tokens asks of storage (issue 31 item 3's cost side, docs/MODEL.md
 * "Drafts"). A chunk loads the union of its tokens' experts once per layer;
 * k single-token steps without a cache load k x top_k per layer. The ratio
 * of the two, with the tokens a chunk generates, gives the expert bytes per
 * generated token of drafting at any acceptance, from recorded routing
 * alone (no model): spill trace chunks. Chunks are consecutive,
 * non-overlapping, inside the token window; a trace of several sequences
 * is taken as one (the converted files are one sequence each but for the
 * gpt-oss-20b set, which is read per file). */
#include <stdlib.h>
#include <string.h>

#include "research/trace/trace_analysis.h"

int spill_trace_chunk_union(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end, int k,
                            spill_trace_chunk_stats *out, spill_err *e) {
  memset(out, 0, sizeof *out);
  if (tok_end == 0) tok_end = t->n_tokens;
  SPILL_FAIL_IF(e, k < 1 || k > 64, SPILL_E_INVALID_ARG, "chunks: k %d outside [1, 64]", k);
  SPILL_FAIL_IF(e, tok_begin >= tok_end || tok_end > t->n_tokens, SPILL_E_INVALID_ARG,
                "chunks: window [%u, %u) outside the trace's %u tokens", tok_begin, tok_end,
                t->n_tokens);
  uint32_t *stamp = calloc(t->n_experts ? t->n_experts : 1, sizeof *stamp);
  SPILL_FAIL_IF(e, !stamp, SPILL_E_NOMEM, "chunks: out of memory");
  uint32_t epoch = 0;
  uint64_t distinct = 0;
  out->k = k;
  for (uint32_t c = tok_begin; c + (uint32_t)k <= tok_end; c += (uint32_t)k) {
    out->chunks++;
    for (uint32_t l = 0; l < t->n_layers; l++) {
      epoch++;
      for (int j = 0; j < k; j++) {
        const uint32_t *ids = spill_trace_ids(t, c + (uint32_t)j, l);
        for (uint32_t i = 0; i < t->top_k; i++)
          if (ids[i] < t->n_experts && stamp[ids[i]] != epoch) {
            stamp[ids[i]] = epoch;
            distinct++;
          }
      }
    }
  }
  free(stamp);
  const double layers = (double)out->chunks * (double)t->n_layers;
  out->union_per_layer = layers > 0 ? (double)distinct / layers : 0;
  out->ratio = layers > 0 ? out->union_per_layer / ((double)k * (double)t->top_k) : 0;
  return SPILL_OK;
}
