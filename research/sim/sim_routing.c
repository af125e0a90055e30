/* research/sim/sim_routing.c: where the simulator's routed experts come from.
 *
 * Either a router trace (engine/trace reads and validates it) or synthetic
 * routing: per layer a seeded random ranking of the experts with Zipf(s)
 * popularity over the ranks, and next-token reuse: each of a layer's top_k
 * picks repeats one of the previous token's ids at that layer with
 * probability p, else is drawn from the popularity (distinct within the
 * layer). p is solved from the target reuse r and the chance overlap b that
 * popularity alone gives (measured on a pilot run): r = p + (1 - p) b.
 * The result is an ordinary spill_trace (simple format), so trace stats and
 * replay apply to it unchanged. Deterministic in the seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"
#include "research/sim/sim.h"

/* Share of the top ceil(n/10) ranks under weights 1/(r+1)^s. */
static double top10_share(uint32_t n, double s) {
  uint32_t top = (n + 9) / 10;
  double all = 0, head = 0;
  for (uint32_t r = 0; r < n; r++) {
    double w = pow((double)r + 1.0, -s);
    all += w;
    if (r < top) head += w;
  }
  return head / all;
}

double spill_sim_zipf_for_top10(uint32_t n_experts, double share) {
  if (n_experts < 2) return 0.0;
  double lo = 0.0, hi = 8.0;
  if (share <= top10_share(n_experts, lo)) return 0.0;
  for (int i = 0; i < 60; i++) {
    double mid = 0.5 * (lo + hi);
    if (top10_share(n_experts, mid) < share) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

static double rng_unit(uint64_t *st) {
  return (double)(spill_cache_rng_next(st) >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct synth {
  uint32_t L, E, K;
  double *cdf;     /* (E) cumulative weights of ranks */
  uint32_t *perm;  /* (L, E) rank -> expert of each layer */
  uint8_t *chosen; /* (E) scratch */
  uint8_t *inprev; /* (E) scratch */
} synth;

static uint32_t draw_rank(const synth *s, uint64_t *rng) {
  double u = rng_unit(rng) * s->cdf[s->E - 1];
  uint32_t lo = 0, hi = s->E - 1;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (s->cdf[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Fills ids (T, L, K) with reuse probability p. */
static void generate(synth *s, uint32_t T, double p, uint64_t seed, uint32_t *ids) {
  const uint32_t L = s->L, E = s->E, K = s->K;
  uint64_t rng = seed ^ 0x5157AB1Eull;
  for (uint32_t t = 0; t < T; t++) {
    for (uint32_t l = 0; l < L; l++) {
      uint32_t *cur = ids + ((size_t)t * L + l) * K;
      const uint32_t *prev = t ? ids + ((size_t)(t - 1) * L + l) * K : NULL;
      memset(s->chosen, 0, E);
      for (uint32_t j = 0; j < K; j++) {
        uint32_t id = UINT32_MAX;
        if (prev && rng_unit(&rng) < p) {
          uint32_t avail = 0;
          for (uint32_t q = 0; q < K; q++) avail += !s->chosen[prev[q]];
          if (avail) {
            uint32_t pick = spill_cache_rng_below(&rng, avail);
            for (uint32_t q = 0; q < K; q++)
              if (!s->chosen[prev[q]] && pick-- == 0) {
                id = prev[q];
                break;
              }
          }
        }
        for (int tries = 0; id == UINT32_MAX && tries < 64; tries++) {
          uint32_t cand = s->perm[(size_t)l * E + draw_rank(s, &rng)];
          if (!s->chosen[cand]) id = cand;
        }
        if (id == UINT32_MAX) /* heavy skew: take the most popular free one */
          for (uint32_t r = 0; r < E && id == UINT32_MAX; r++)
            if (!s->chosen[s->perm[(size_t)l * E + r]]) id = s->perm[(size_t)l * E + r];
        s->chosen[id] = 1;
        cur[j] = id;
      }
    }
  }
}

static double measured_reuse(const synth *s, uint32_t T, const uint32_t *ids) {
  uint64_t same = 0, total = 0;
  for (uint32_t t = 1; t < T; t++)
    for (uint32_t l = 0; l < s->L; l++) {
      const uint32_t *cur = ids + ((size_t)t * s->L + l) * s->K;
      const uint32_t *prev = ids + ((size_t)(t - 1) * s->L + l) * s->K;
      for (uint32_t j = 0; j < s->K; j++)
        for (uint32_t q = 0; q < s->K; q++) same += cur[j] == prev[q];
      total += s->K;
    }
  return total ? (double)same / (double)total : 0.0;
}

int spill_sim_synth(uint32_t n_tokens, uint32_t n_layers, uint32_t n_experts, uint32_t top_k,
                    double zipf, double reuse, uint64_t seed, spill_trace *out, spill_err *e) {
  SPILL_FAIL_IF(e, !n_tokens || !n_layers || !top_k || top_k > n_experts, SPILL_E_INVALID_ARG,
                "synthetic routing: need tokens, layers >= 1 and 1 <= top_k <= experts");
  SPILL_FAIL_IF(e, !(zipf >= 0 && zipf <= 8) || !(reuse >= 0 && reuse <= 1), SPILL_E_INVALID_ARG,
                "synthetic routing: zipf must be in [0, 8] and reuse in [0, 1]");
  memset(out, 0, sizeof *out);
  synth s = {n_layers, n_experts, top_k, NULL, NULL, NULL, NULL};
  s.cdf = malloc((size_t)n_experts * sizeof *s.cdf);
  s.perm = malloc((size_t)n_layers * n_experts * sizeof *s.perm);
  s.chosen = malloc(n_experts);
  s.inprev = malloc(n_experts);
  out->ids = malloc((size_t)n_tokens * n_layers * top_k * sizeof *out->ids);
  out->layer_ids = malloc((size_t)n_layers * sizeof *out->layer_ids);
  out->tok = malloc((size_t)n_tokens * sizeof *out->tok);
  out->pos = malloc((size_t)n_tokens * sizeof *out->pos);
  out->phase = malloc(n_tokens);
  int rc = SPILL_OK;
  if (!s.cdf || !s.perm || !s.chosen || !s.inprev || !out->ids || !out->layer_ids || !out->tok ||
      !out->pos || !out->phase) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "synthetic routing: out of memory");
    spill_trace_free(out);
    goto done;
  }
  double acc = 0;
  for (uint32_t r = 0; r < n_experts; r++) s.cdf[r] = (acc += pow((double)r + 1.0, -zipf));
  uint64_t prng = seed;
  for (uint32_t l = 0; l < n_layers; l++) {
    uint32_t *pm = s.perm + (size_t)l * n_experts;
    for (uint32_t i = 0; i < n_experts; i++) pm[i] = i;
    for (uint32_t i = n_experts - 1; i > 0; i--) { /* Fisher-Yates */
      uint32_t j = spill_cache_rng_below(&prng, i + 1);
      uint32_t tmp = pm[i];
      pm[i] = pm[j];
      pm[j] = tmp;
    }
  }
  /* pilot without reuse: the chance overlap popularity alone gives */
  uint32_t pilot = n_tokens < 64 ? n_tokens : 64;
  double p = 0;
  if (reuse > 0 && pilot >= 2) {
    generate(&s, pilot, 0.0, seed + 1, out->ids);
    double b = measured_reuse(&s, pilot, out->ids);
    p = b < 1 ? (reuse - b) / (1 - b) : 0;
    if (p < 0) p = 0;
  }
  generate(&s, n_tokens, p, seed, out->ids);
  out->format = SPILL_TRACE_SIMPLE;
  out->n_tokens = n_tokens;
  out->n_layers = n_layers;
  out->n_experts = n_experts;
  out->top_k = top_k;
  for (uint32_t l = 0; l < n_layers; l++) out->layer_ids[l] = l;
  for (uint32_t t = 0; t < n_tokens; t++) {
    out->tok[t] = t;
    out->pos[t] = t;
    out->phase[t] = SPILL_TRACE_PHASE_NONE;
  }
done:
  free(s.cdf);
  free(s.perm);
  free(s.chosen);
  free(s.inprev);
  return rc;
}

int spill_sim_routing(const spill_sim_config *c, spill_trace *out, double *zipf_out,
                      spill_err *e) {
  if (zipf_out) *zipf_out = 0;
  if (c->routing == SPILL_SIM_ROUTING_TRACE) {
    spill_trace_read_opts o = {c->n_experts, NULL};
    SPILL_TRY(spill_trace_read_file(c->trace_path, &o, out, e));
    if (out->n_layers != c->moe_layers || out->top_k != c->top_k) {
      spill_err_set(e, SPILL_E_TRACE,
                    "%s: %u layers x top-%u does not match the model's %u MoE layers x top-%u",
                    c->trace_path, out->n_layers, out->top_k, c->moe_layers, c->top_k);
      spill_trace_free(out);
      return SPILL_E_TRACE;
    }
    return SPILL_OK;
  }
  double s = c->synth_top10_share > 0 ? spill_sim_zipf_for_top10(c->n_experts, c->synth_top10_share)
                                      : c->synth_zipf;
  if (zipf_out) *zipf_out = s;
  uint32_t n = c->synth_prefill + c->synth_tokens;
  SPILL_TRY(spill_sim_synth(n, c->moe_layers, c->n_experts, c->top_k, s, c->synth_reuse,
                            c->synth_seed, out, e));
  for (uint32_t t = 0; t < n; t++)
    out->phase[t] = t < c->synth_prefill ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE;
  return SPILL_OK;
}
