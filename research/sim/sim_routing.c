/* research/sim/sim_routing.c: where the simulator's routed experts come from.
 *
 * Either a router trace (engine/trace reads and validates it) or synthetic
 * routing: per layer a seeded random ranking of the experts with Zipf
 * popularity over the ranks, latent per-token topics shared by all layers
 * (co-activation) that persist across tokens (next-token reuse). The skew
 * factor, the topic weight and the persistence are solved on a pilot so
 * that the statistics `spill trace stats` measures (research/trace, the
 * same code) meet the targets; the defaults are the OLMoE trace's tuning
 * half (docs/SIM.md). The result is an ordinary spill_trace (simple
 * format), so trace stats and replay apply to it unchanged. Deterministic
 * in the seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"
#include "research/sim/sim.h"
#include "research/trace/trace_analysis.h"

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

#define SYN_TOPICS 16 /* latent topics of synthetic routing (see generate) */

typedef struct synth {
  uint32_t L, E, K;
  const double *zipf; /* (L) exponents before the skew factor */
  double *cdf;        /* (L, E) cumulative weights of ranks, per layer */
  uint32_t *perm;     /* (L, E) rank -> expert of each layer */
  uint32_t *topic;    /* (L, SYN_TOPICS, K) each topic's experts at each layer */
  uint8_t *chosen;    /* (E) scratch */
  uint64_t seed;
} synth;

static uint32_t draw_rank(const synth *s, uint32_t l, uint64_t *rng) {
  const double *cdf = s->cdf + (size_t)l * s->E;
  double u = rng_unit(rng) * cdf[s->E - 1];
  uint32_t lo = 0, hi = s->E - 1;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (cdf[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* A popularity draw at layer l not chosen yet (chosen marks the layer's). */
static uint32_t draw_free(const synth *s, uint32_t l, uint64_t *rng) {
  const uint32_t E = s->E;
  for (int tries = 0; tries < 64; tries++) {
    uint32_t cand = s->perm[(size_t)l * E + draw_rank(s, l, rng)];
    if (!s->chosen[cand]) return cand;
  }
  for (uint32_t r = 0; r < E; r++) /* heavy skew: the most popular free one */
    if (!s->chosen[s->perm[(size_t)l * E + r]]) return s->perm[(size_t)l * E + r];
  return UINT32_MAX;
}

/* Popularity with the skew factor f (exponent f x zipf[l]) and the topics'
 * expert sets (K distinct popularity draws per layer and topic). */
static void build_layers(synth *s, double f) {
  const uint32_t L = s->L, E = s->E, K = s->K;
  for (uint32_t l = 0; l < L; l++) {
    double acc = 0;
    for (uint32_t r = 0; r < E; r++)
      s->cdf[(size_t)l * E + r] = (acc += pow((double)r + 1.0, -f * s->zipf[l]));
  }
  uint64_t rng = s->seed ^ 0x70706963ull;
  for (uint32_t l = 0; l < L; l++)
    for (uint32_t z = 0; z < SYN_TOPICS; z++) {
      uint32_t *set = s->topic + ((size_t)l * SYN_TOPICS + z) * K;
      memset(s->chosen, 0, E);
      for (uint32_t j = 0; j < K; j++) {
        set[j] = draw_free(s, l, &rng);
        s->chosen[set[j]] = 1;
      }
    }
}

/* One of the K candidates cand[] not chosen yet, uniformly; UINT32_MAX if
 * none is free. */
static uint32_t pick_free(synth *s, const uint32_t *cand, uint32_t K, uint64_t *rng) {
  uint32_t avail = 0;
  for (uint32_t q = 0; q < K; q++) avail += !s->chosen[cand[q]];
  if (!avail) return UINT32_MAX;
  uint32_t pick = spill_cache_rng_below(rng, avail);
  for (uint32_t q = 0; q < K; q++)
    if (!s->chosen[cand[q]] && pick-- == 0) return cand[q];
  return UINT32_MAX;
}

/* Fills ids (T, L, K). Each token has a latent topic (one of SYN_TOPICS),
 * shared by all its layers: this ties layer l's experts to layer l + 1's
 * (co-activation). The topic persists from the previous token with
 * probability rho = min(x, 1), else is drawn uniformly: persistence is what
 * makes consecutive tokens share experts (next-token reuse), as context
 * does in real text. A pick is, with probability p = max(x - 1, 0), one of
 * the previous token's ids at its layer (for reuse beyond what persistence
 * gives); else, with probability b, one of the topic's experts at that
 * layer; else a popularity draw. Distinct within a layer. */
static void generate(synth *s, uint32_t T, double x, double b, uint64_t seed, uint32_t *ids) {
  const uint32_t L = s->L, E = s->E, K = s->K;
  const double rho = x < 1 ? x : 1, p = x > 1 ? x - 1 : 0;
  uint64_t rng = seed ^ 0x5157AB1Eull;
  uint32_t z = 0;
  for (uint32_t t = 0; t < T; t++) {
    if (t == 0 || rng_unit(&rng) >= rho) z = spill_cache_rng_below(&rng, SYN_TOPICS);
    for (uint32_t l = 0; l < L; l++) {
      uint32_t *cur = ids + ((size_t)t * L + l) * K;
      const uint32_t *prev = t ? ids + ((size_t)(t - 1) * L + l) * K : NULL;
      const uint32_t *set = s->topic + ((size_t)l * SYN_TOPICS + z) * K;
      memset(s->chosen, 0, E);
      for (uint32_t j = 0; j < K; j++) {
        uint32_t id = UINT32_MAX;
        if (prev && p > 0 && rng_unit(&rng) < p) id = pick_free(s, prev, K, &rng);
        if (id == UINT32_MAX && rng_unit(&rng) < b) id = pick_free(s, set, K, &rng);
        if (id == UINT32_MAX) id = draw_free(s, l, &rng);
        s->chosen[id] = 1;
        cur[j] = id;
      }
    }
  }
}

/* Fills the trace fields other than ids for T tokens of s's shape. */
static void trace_shape(const synth *s, uint32_t T, spill_trace *out) {
  out->format = SPILL_TRACE_SIMPLE;
  out->n_tokens = T;
  out->n_layers = s->L;
  out->n_experts = s->E;
  out->top_k = s->K;
  for (uint32_t l = 0; l < s->L; l++) out->layer_ids[l] = l;
  for (uint32_t t = 0; t < T; t++) {
    out->tok[t] = t;
    out->pos[t] = t;
    out->phase[t] = SPILL_TRACE_PHASE_NONE;
  }
}

static int trace_alloc(uint32_t T, uint32_t L, uint32_t K, spill_trace *out) {
  memset(out, 0, sizeof *out);
  out->ids = malloc((size_t)T * L * K * sizeof *out->ids);
  out->layer_ids = malloc((size_t)L * sizeof *out->layer_ids);
  out->tok = malloc((size_t)T * sizeof *out->tok);
  out->pos = malloc((size_t)T * sizeof *out->pos);
  out->phase = malloc(T);
  if (out->ids && out->layer_ids && out->tok && out->pos && out->phase) return 0;
  spill_trace_free(out);
  return -1;
}

/* Next-token reuse, co-activation precision and mean top-10% share of a
 * pilot generated with (p, q), as `spill trace stats` measures them (the
 * same code). */
/* Next-token reuse of ids (T, L, K), as spill_trace_compute_stats defines
 * it (ids of token t also used by t - 1 at that layer, over t >= 1). */
static double ids_reuse(const synth *s, uint32_t T, const uint32_t *ids) {
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

static int pilot_stats(synth *s, uint32_t T, double p, double q, uint64_t seed, double *reuse,
                       double *coact, double *top10, spill_err *e) {
  /* reuse over SPILL_SIM_CAL_REUSE_X x T tokens (its expectation does not
   * depend on the length, its noise does); co-activation and skew, by the
   * statistics code itself, over the first T: the length their targets
   * were measured on */
  const uint32_t TL = T * SPILL_SIM_CAL_REUSE_X;
  spill_trace t;
  SPILL_FAIL_IF(e, trace_alloc(TL, s->L, s->K, &t) < 0, SPILL_E_NOMEM,
                "synthetic routing: out of memory");
  trace_shape(s, TL, &t);
  generate(s, TL, p, q, seed, t.ids);
  *reuse = ids_reuse(s, TL, t.ids);
  int rc = SPILL_OK;
  if (coact || top10) {
    spill_trace_stats st;
    rc = spill_trace_compute_stats(&t, 0, T, &st, e);
    if (rc == SPILL_OK) {
      if (coact) *coact = st.coact_precision;
      if (top10) *top10 = st.top10_share_mean;
      spill_trace_stats_free(&st);
    }
  }
  spill_trace_free(&t);
  return rc;
}

/* One bisection: the x in [lo, hi] whose pilot statistic (which rises with
 * x) meets want; which = 0 reuse, 1 co-activation, 2 top-10% share. */
typedef struct calx {
  synth *s;
  double f, p, b;
} calx;

static int bisect(calx *x, int which, double hi, double want, spill_err *e) {
  double lo = 0, r, c = 0, t = 0;
  double *knob = which == 0 ? &x->p : which == 1 ? &x->b : &x->f;
  for (int it = 0; it < 10; it++) {
    *knob = 0.5 * (lo + hi);
    if (which == 2) build_layers(x->s, x->f);
    SPILL_TRY(pilot_stats(x->s, SPILL_SIM_CAL_TOKENS, x->p, x->b, x->s->seed + 1, &r,
                          which == 1 ? &c : NULL, which == 2 ? &t : NULL, e));
    double got = which == 0 ? r : which == 1 ? c : t;
    if (got < want) lo = *knob;
    else hi = *knob;
  }
  *knob = 0.5 * (lo + hi);
  if (which == 2) build_layers(x->s, x->f);
  return SPILL_OK;
}

/* Solves the skew factor f, the topic weight b and the reuse probability p
 * so that a pilot of SPILL_SIM_CAL_TOKENS tokens over at most
 * SPILL_SIM_CAL_LAYERS layers has the targets (0 = leave that knob: f 1,
 * b 0, p 0): coordinate bisections, three rounds (each knob moves the
 * other statistics a little). */
static int calibrate(synth *full, const spill_sim_synth_params *sp, double *f_out, double *p_out,
                     double *b_out, spill_err *e) {
  synth s = *full;
  if (s.L > SPILL_SIM_CAL_LAYERS) s.L = SPILL_SIM_CAL_LAYERS;
  calx x = {&s, 1.0, 0.0, 0.0};
  build_layers(&s, 1.0);
  const double coact = s.L >= 2 ? sp->coact : 0;
  /* the top-10% share of 150 tokens is a sampling statistic: with more than
   * 16 experts per routed slot (OLMoE: 8) it is mostly noise, and the
   * exponents fitted to the shares as weights stand (factor 1) */
  const double top10 = s.E <= 16 * s.K ? sp->top10 : 0;
  const int knobs = (top10 > 0) + (coact > 0) + (sp->reuse > 0);
  for (int round = 0; round < (knobs > 1 ? 3 : 1); round++) {
    if (top10 > 0) SPILL_TRY(bisect(&x, 2, 4.0, top10, e));
    if (coact > 0) SPILL_TRY(bisect(&x, 1, 1.0, coact, e));
    if (sp->reuse > 0) SPILL_TRY(bisect(&x, 0, 2.0, sp->reuse, e));
  }
  *f_out = x.f;
  *p_out = x.p;
  *b_out = x.b;
  return SPILL_OK;
}

int spill_sim_synth(spill_sim_synth_params *sp, uint64_t seed, spill_trace *out,
                    spill_err *e) {
  const uint32_t n_tokens = sp->n_tokens, n_layers = sp->n_layers, n_experts = sp->n_experts,
                 top_k = sp->top_k;
  SPILL_FAIL_IF(e, !n_tokens || !n_layers || !top_k || top_k > n_experts, SPILL_E_INVALID_ARG,
                "synthetic routing: need tokens, layers >= 1 and 1 <= top_k <= experts");
  SPILL_FAIL_IF(e, !(sp->reuse >= 0 && sp->reuse <= 1) || !(sp->coact >= 0 && sp->coact <= 1) ||
                       !(sp->top10 >= 0 && sp->top10 <= 1),
                SPILL_E_INVALID_ARG, "synthetic routing: reuse, coact and top10 must be in [0, 1]");
  for (uint32_t l = 0; l < n_layers; l++)
    SPILL_FAIL_IF(e, !(sp->zipf[l] >= 0 && sp->zipf[l] <= 8), SPILL_E_INVALID_ARG,
                  "synthetic routing: zipf of layer %u must be in [0, 8]", l);
  memset(out, 0, sizeof *out);
  synth s = {n_layers, n_experts, top_k, sp->zipf, NULL, NULL, NULL, NULL, seed};
  s.cdf = malloc((size_t)n_layers * n_experts * sizeof *s.cdf);
  s.perm = malloc((size_t)n_layers * n_experts * sizeof *s.perm);
  s.topic = malloc((size_t)n_layers * SYN_TOPICS * top_k * sizeof *s.topic);
  s.chosen = malloc(n_experts);
  int rc = SPILL_OK;
  if (!s.cdf || !s.perm || !s.topic || !s.chosen ||
      trace_alloc(n_tokens, n_layers, top_k, out)) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "synthetic routing: out of memory");
    goto done;
  }
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
  double f = 1, p = 0, b = 0;
  if ((rc = calibrate(&s, sp, &f, &p, &b, e)) < 0) {
    spill_trace_free(out);
    goto done;
  }
  sp->skew_out = f;
  sp->reuse_p_out = p;
  sp->topic_b_out = b;
  build_layers(&s, f);
  generate(&s, n_tokens, p, b, seed, out->ids);
  trace_shape(&s, n_tokens, out);
done:
  free(s.cdf);
  free(s.perm);
  free(s.topic);
  free(s.chosen);
  return rc;
}

/* Top-10% share the config asks of layer l (0: none, an exponent is given). */
static double layer_top10(const spill_sim_config *c, uint32_t l) {
  if (c->synth_top10_n > 0)
    return c->synth_top10_layers[(uint64_t)l * c->synth_top10_n / c->moe_layers];
  return c->synth_top10_share > 0 ? c->synth_top10_share : 0;
}

/* Zipf exponent of each layer from the config (the shares' exponents are
 * then scaled by the calibration, see calibrate) and the mean share the
 * calibration pilot's layers must show (0: exponents as given). */
static void layer_zipf(const spill_sim_config *c, double *z, double *top10) {
  uint32_t pilot = c->moe_layers < SPILL_SIM_CAL_LAYERS ? c->moe_layers : SPILL_SIM_CAL_LAYERS;
  *top10 = 0;
  for (uint32_t l = 0; l < c->moe_layers; l++) {
    double share = layer_top10(c, l);
    z[l] = share > 0 ? spill_sim_zipf_for_top10(c->n_experts, share) : c->synth_zipf;
    if (l < pilot) *top10 += share / pilot;
  }
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
  SPILL_FAIL_IF(e, !c->moe_layers, SPILL_E_CONFIG, "synthetic routing: no MoE layers");
  double *z = malloc((size_t)c->moe_layers * sizeof *z);
  SPILL_FAIL_IF(e, !z, SPILL_E_NOMEM, "synthetic routing: out of memory");
  double top10 = 0;
  layer_zipf(c, z, &top10);
  uint32_t n = c->synth_prefill + c->synth_tokens;
  spill_sim_synth_params sp = {n, c->moe_layers, c->n_experts, c->top_k, z, c->synth_reuse,
                               c->synth_coact, top10, 0, 0, 0};
  int rc = spill_sim_synth(&sp, c->synth_seed, out, e);
  if (rc == SPILL_OK && zipf_out) /* the mean exponent used */
    for (uint32_t l = 0; l < c->moe_layers; l++) *zipf_out += sp.skew_out * z[l] / c->moe_layers;
  free(z);
  if (rc < 0) return rc;
  for (uint32_t t = 0; t < n; t++)
    out->phase[t] = t < c->synth_prefill ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE;
  return SPILL_OK;
}
