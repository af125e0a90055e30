/* engine/trace/trace_stats.c: locality statistics of a router trace.
 *
 * Definitions (docs/TRACE.md): a "pair" is a (layer, expert); the pool is
 * n_layers * n_experts pairs. Next-token reuse counts, for every token after
 * the first of the window, the pairs it shares with the previous token,
 * divided by its pair count. Coverage sorts pairs by activation count and
 * reports the fewest that carry 50/80/95% of all activations. Skew per layer
 * is the Gini coefficient of the n_experts use counts (zeros included) and
 * the share of the top ceil(n_experts / 10) experts. Pure computation: one
 * pass over the ids plus a sort of the pool; no output, no global state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trace/router_trace.h"

static int cmp_u64_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : (x > y ? -1 : 0);
}

int spill_trace_compute_stats(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end,
                              spill_trace_stats *out, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out, SPILL_E_INVALID_ARG, "trace stats: NULL argument");
  memset(out, 0, sizeof(*out));
  if (tok_end == 0) tok_end = t->n_tokens;
  SPILL_FAIL_IF(e, tok_begin >= tok_end || tok_end > t->n_tokens, SPILL_E_INVALID_ARG,
                "trace stats: token window [%u, %u) is empty or beyond the %u tokens",
                tok_begin, tok_end, t->n_tokens);
  const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
  const size_t pool = (size_t)L * E;
  uint64_t *count = (uint64_t *)calloc(pool, sizeof(uint64_t));
  uint32_t *last = (uint32_t *)malloc(pool * sizeof(uint32_t));
  spill_trace_layer_stats *ls = (spill_trace_layer_stats *)calloc(L, sizeof(*ls));
  if (!count || !last || !ls) {
    free(count);
    free(last);
    free(ls);
    return spill_err_set(e, SPILL_E_NOMEM, "trace stats: out of memory");
  }
  for (size_t i = 0; i < pool; i++) last[i] = UINT32_MAX;

  uint64_t touched = 0, overlap = 0, reuse_den = 0;
  for (uint32_t tok = tok_begin; tok < tok_end; tok++) {
    uint64_t here = 0, shared = 0;
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *ids = spill_trace_ids(t, tok, l);
      for (uint32_t k = 0; k < K; k++) {
        size_t key = (size_t)l * E + ids[k];
        count[key]++;
        here++;
        if (tok > tok_begin && last[key] == tok - 1) shared++;
        last[key] = tok;
      }
    }
    touched += here;
    if (tok > tok_begin) {
      overlap += shared;
      reuse_den += here;
    }
  }
  const uint32_t n_tok = tok_end - tok_begin;
  out->n_tokens = n_tok;
  out->n_layers = L;
  out->n_experts = E;
  out->top_k = K;
  out->accesses = (uint64_t)n_tok * L * K;
  out->pool = (uint32_t)pool;
  out->touched_per_token = (double)touched / n_tok;
  out->reuse_next = reuse_den ? (double)overlap / reuse_den : 0.0;

  /* Per-layer skew on the unsorted counts, then coverage over the pool. */
  double gsum = 0, tsum = 0;
  uint64_t *tmp = (uint64_t *)malloc((size_t)E * sizeof(uint64_t));
  if (!tmp) {
    free(count);
    free(last);
    free(ls);
    return spill_err_set(e, SPILL_E_NOMEM, "trace stats: out of memory");
  }
  for (uint32_t l = 0; l < L; l++) {
    memcpy(tmp, count + (size_t)l * E, (size_t)E * sizeof(uint64_t));
    qsort(tmp, E, sizeof(uint64_t), cmp_u64_desc);
    uint64_t total = 0, top = 0;
    double weighted = 0; /* sum of rank * x with ascending 1-based rank */
    uint32_t top_n = (E + 9) / 10;
    for (uint32_t i = 0; i < E; i++) {
      total += tmp[i];
      if (i < top_n) top += tmp[i];
      weighted += (double)(E - i) * (double)tmp[i];
      if (tmp[i]) ls[l].distinct++;
    }
    ls[l].layer = t->layer_ids[l];
    ls[l].gini = total ? 2.0 * weighted / ((double)E * (double)total) - (double)(E + 1) / E : 0;
    ls[l].top10_share = total ? (double)top / (double)total : 0;
    gsum += ls[l].gini;
    tsum += ls[l].top10_share;
  }
  free(tmp);
  out->gini_mean = gsum / L;
  out->top10_share_mean = tsum / L;
  out->layers = ls;

  qsort(count, pool, sizeof(uint64_t), cmp_u64_desc);
  uint64_t total = out->accesses, cum = 0;
  static const double kFrac[3] = {0.50, 0.80, 0.95};
  int next = 0;
  for (size_t i = 0; i < pool && next < 3; i++) {
    cum += count[i];
    while (next < 3 && (double)cum >= kFrac[next] * (double)total) {
      out->cover_pairs[next] = (uint32_t)(i + 1);
      out->cover_frac[next] = (double)(i + 1) / (double)pool;
      next++;
    }
  }
  for (size_t i = 0; i < pool; i++)
    if (count[i]) out->touched_total++;

  out->recorded_hit_rate = -1;
  out->lookahead_precision = -1;
  if (t->format == SPILL_TRACE_ROUTER && tok_begin == 0 && tok_end == t->n_tokens) {
    out->recorded_hit_rate = (double)t->n_recorded_hits / (double)out->accesses;
    if (t->n_pred) out->lookahead_precision = (double)t->n_pred_correct / (double)t->n_pred;
  }
  free(count);
  free(last);
  return SPILL_OK;
}

void spill_trace_stats_free(spill_trace_stats *s) {
  if (!s) return;
  free(s->layers);
  s->layers = NULL;
}
