/* research/trace/trace_stats.c: locality statistics of a router trace.
 *
 * Definitions (docs/TRACE.md): a "pair" is a (layer, expert); the pool is
 * n_layers * n_experts pairs. Next-token reuse counts, for every token after
 * the first of the window, the pairs it shares with the previous token,
 * divided by its pair count. Coverage sorts pairs by activation count and
 * reports the fewest that carry 50/80/95% of all activations. Skew per layer
 * is the Gini coefficient of the n_experts use counts (zeros included) and
 * the share of the top ceil(n_experts / 10) experts. Reuse distance is the
 * number of tokens since the pair's previous use (bucketed by powers of
 * two). Cross-layer co-activation is scored online, as a policy or a
 * prefetcher could use it: counts learned on earlier tokens only
 * (router_trace.h). Belady's hit rate at 3/6/12% of the pool runs the replay
 * module's MIN on the window. Pure computation: a few passes over the ids,
 * a sort of the pool and an (L-1) x E x E count table; no output, no global
 * state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

const double spill_trace_belady_fracs[SPILL_TRACE_BELADY_POINTS] = {0.03, 0.06, 0.12};

uint32_t spill_trace_rd_bucket_hi(int i) {
  return i >= 0 && i < 8 ? 1u << i : 0;
}

static int rd_bucket(uint32_t d) {
  int b = 0;
  while (b < 8 && d > (1u << b)) b++;
  return b; /* 8 = ">128" */
}

/* Online cross-layer co-activation precision (router_trace.h). */
static int coact(const spill_trace *t, uint32_t tb, uint32_t te, spill_trace_stats *out,
                 spill_trace_layer_stats *ls) {
  const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
  out->coact_precision = out->coact_popular_precision = out->coact_prev_token_precision = -1;
  for (uint32_t l = 0; l < L; l++) ls[l].coact_precision = -1;
  if (L < 2 || (uint64_t)(L - 1) * E * E > (1ull << 26) || te - tb < 2) return 0;
  uint32_t *C = (uint32_t *)calloc((size_t)(L - 1) * E * E, sizeof(uint32_t));
  uint64_t *pop = (uint64_t *)calloc((size_t)L * E, sizeof(uint64_t));
  double *score = (double *)malloc((size_t)E * sizeof(double));
  uint8_t *used = (uint8_t *)calloc(E, 1);
  uint64_t *hit_l = (uint64_t *)calloc(L, sizeof(uint64_t));
  if (!C || !pop || !score || !used || !hit_l) {
    free(C), free(pop), free(score), free(used), free(hit_l);
    return -1;
  }
  uint64_t hc = 0, hp = 0, hv = 0, den = 0;
  for (uint32_t tok = tb; tok < te; tok++) {
    if (tok > tb) {
      for (uint32_t l = 0; l + 1 < L; l++) {
        const uint32_t *a = spill_trace_ids(t, tok, l), *b = spill_trace_ids(t, tok, l + 1);
        const uint64_t *pp = pop + (size_t)(l + 1) * E;
        for (uint32_t x = 0; x < E; x++) score[x] = 0;
        for (uint32_t k = 0; k < K; k++) {
          const uint32_t *row = C + ((size_t)l * E + a[k]) * E;
          for (uint32_t x = 0; x < E; x++) score[x] += row[x];
        }
        for (uint32_t k = 0; k < K; k++) used[b[k]] = 1;
        /* top K by (score, popularity, -id), and top K by (popularity, -id) */
        for (int pass = 0; pass < 2; pass++) {
          uint32_t got = 0;
          for (uint32_t r = 0; r < K; r++) {
            int64_t best = -1;
            for (uint32_t x = 0; x < E; x++) {
              if (used[x] & (2 << pass)) continue; /* already picked this pass */
              if (best < 0) {
                best = x;
                continue;
              }
              double sx = pass ? 0 : score[x], sb = pass ? 0 : score[best];
              if (sx > sb || (sx == sb && pp[x] > pp[best])) best = x;
            }
            if (best < 0) break;
            used[best] |= (uint8_t)(2 << pass);
            got += used[best] & 1;
          }
          if (pass == 0) {
            hc += got;
            hit_l[l + 1] += got;
          } else {
            hp += got;
          }
        }
        const uint32_t *pv = spill_trace_ids(t, tok - 1, l + 1);
        for (uint32_t k = 0; k < K; k++) hv += used[pv[k]] & 1;
        for (uint32_t x = 0; x < E; x++) used[x] = 0;
        den += K;
      }
    }
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *a = spill_trace_ids(t, tok, l);
      for (uint32_t k = 0; k < K; k++) pop[(size_t)l * E + a[k]]++;
      if (l + 1 == L) continue;
      const uint32_t *b = spill_trace_ids(t, tok, l + 1);
      for (uint32_t i = 0; i < K; i++)
        for (uint32_t j = 0; j < K; j++) C[((size_t)l * E + a[i]) * E + b[j]]++;
    }
  }
  const double per_layer_den = (double)(te - tb - 1) * K;
  for (uint32_t l = 1; l < L; l++) ls[l].coact_precision = (double)hit_l[l] / per_layer_den;
  out->coact_precision = (double)hc / (double)den;
  out->coact_popular_precision = (double)hp / (double)den;
  out->coact_prev_token_precision = (double)hv / (double)den;
  free(C), free(pop), free(score), free(used), free(hit_l);
  return 0;
}

static int cmp_u64_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : (x > y ? -1 : 0);
}

/* One pass over the window: use counts per (layer, expert), reuse
 * distances, and next-token reuse (overall and per layer). -1 on
 * allocation failure. */
static int reuse_pass(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end,
                      uint64_t *count, uint32_t *last, spill_trace_layer_stats *ls,
                      spill_trace_stats *out) {
  const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
  uint64_t touched = 0, overlap = 0, reuse_den = 0;
  uint64_t *shared_l = (uint64_t *)calloc(L, sizeof(uint64_t));
  if (!shared_l) return -1;
  for (uint32_t tok = tok_begin; tok < tok_end; tok++) {
    uint64_t here = 0, shared = 0;
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *ids = spill_trace_ids(t, tok, l);
      for (uint32_t k = 0; k < K; k++) {
        size_t key = (size_t)l * E + ids[k];
        count[key]++;
        here++;
        if (last[key] == UINT32_MAX) out->reuse_dist[SPILL_TRACE_RD_BUCKETS - 1]++;
        else out->reuse_dist[rd_bucket(tok - last[key])]++;
        if (tok > tok_begin && last[key] == tok - 1) {
          shared++;
          shared_l[l]++;
        }
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
  out->touched_per_token = (double)touched / n_tok;
  out->reuse_next = reuse_den ? (double)overlap / reuse_den : 0.0;
  for (uint32_t l = 0; l < L; l++)
    ls[l].reuse_next = n_tok > 1 ? (double)shared_l[l] / ((double)(n_tok - 1) * K) : 0.0;
  free(shared_l);
  return 0;
}

/* Per-layer skew (Gini, top-10% share, distinct experts) on the unsorted
 * counts, and their means. -1 on allocation failure. */
static int layer_skew(const spill_trace *t, const uint64_t *count, spill_trace_layer_stats *ls,
                      spill_trace_stats *out) {
  const uint32_t L = t->n_layers, E = t->n_experts;
  double gsum = 0, tsum = 0;
  uint64_t *tmp = (uint64_t *)malloc((size_t)E * sizeof(uint64_t));
  if (!tmp) return -1;
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
  return 0;
}

/* Coverage over the pool: the fewest pairs carrying 50/80/95% of the
 * accesses, and the pairs touched at all (sorts count). */
static void coverage(uint64_t *count, size_t pool, spill_trace_stats *out) {
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
}

/* Belady's MIN at 3/6/12% of the pool. -1 on allocation failure. */
static int belady_points(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end,
                         spill_trace_stats *out) {
  const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
  const size_t pool = (size_t)L * E;
  const size_t n = (size_t)(tok_end - tok_begin) * L * K;
  uint32_t *keys = (uint32_t *)malloc((n ? n : 1) * sizeof(uint32_t));
  if (!keys || pool > UINT32_MAX) {
    free(keys);
    return -1;
  }
  size_t i = 0;
  for (uint32_t tok = tok_begin; tok < tok_end; tok++)
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *ids = spill_trace_ids(t, tok, l);
      for (uint32_t k = 0; k < K; k++) keys[i++] = l * E + ids[k];
    }
  for (int p = 0; p < SPILL_TRACE_BELADY_POINTS; p++) {
    double want = spill_trace_belady_fracs[p] * (double)pool + 0.5;
    uint32_t slots = want < 1 ? 1 : (uint32_t)want;
    int64_t h = spill_trace_belady_hits(keys, n, (uint32_t)pool, slots, 0);
    if (h < 0) {
      free(keys);
      return -1;
    }
    out->belady_slots[p] = slots;
    out->belady_hit_rate[p] = n ? (double)h / (double)n : 0;
  }
  free(keys);
  return 0;
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

  const uint32_t n_tok = tok_end - tok_begin;
  out->n_tokens = n_tok;
  out->n_layers = L;
  out->n_experts = E;
  out->top_k = K;
  out->accesses = (uint64_t)n_tok * L * K;
  out->pool = (uint32_t)pool;
  if (reuse_pass(t, tok_begin, tok_end, count, last, ls, out) < 0 ||
      layer_skew(t, count, ls, out) < 0) {
    free(count);
    free(last);
    free(ls);
    memset(out, 0, sizeof(*out));
    return spill_err_set(e, SPILL_E_NOMEM, "trace stats: out of memory");
  }
  out->layers = ls;
  coverage(count, pool, out);
  out->recorded_hit_rate = -1;
  out->lookahead_precision = -1;
  if (t->format == SPILL_TRACE_ROUTER && tok_begin == 0 && tok_end == t->n_tokens) {
    out->recorded_hit_rate = (double)t->n_recorded_hits / (double)out->accesses;
    if (t->n_pred) out->lookahead_precision = (double)t->n_pred_correct / (double)t->n_pred;
  }
  free(count);
  free(last);

  if (coact(t, tok_begin, tok_end, out, ls) < 0) {
    spill_trace_stats_free(out);
    return spill_err_set(e, SPILL_E_NOMEM, "trace stats: out of memory");
  }
  if (belady_points(t, tok_begin, tok_end, out) < 0) {
    spill_trace_stats_free(out);
    return spill_err_set(e, SPILL_E_NOMEM, "trace stats: out of memory");
  }
  return SPILL_OK;
}

void spill_trace_stats_free(spill_trace_stats *s) {
  if (!s) return;
  free(s->layers);
  s->layers = NULL;
}
