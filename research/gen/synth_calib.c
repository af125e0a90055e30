/* research/gen/synth_calib.c: solves the two router constants of a plan that
 * set its lookahead precision and cross-layer co-activation.
 *
 * The generated weights carry them (docs/GEN.md, "Routing statistics"):
 *  - eps, the relative size of what a layer writes into the residual stream
 *    between the lookahead point (layer l's MoE input) and layer l+1's router
 *    (spill_gen_write_scale): the larger, the less h_l predicts l+1's experts;
 *  - c, the share of every router row taken from one matrix all MoE layers
 *    share (its rows permuted per layer): paired experts of two layers have
 *    rows correlated c; the larger, the more layer l's ids predict l+1's.
 * Mean-field model, as for the popularity bias: router logits are iid N(0, 1)
 * projections; moving from h_l to h_l+1 turns every projection v into
 * (v + eps g) / sqrt(1 + eps^2), g fresh. Precision is measured as the engine
 * records it (top-`width` of layer l+1's router on h_l, correct if among the
 * true top-k), co-activation by research/trace's own statistics over
 * SPILL_GEN_CAL_TOKENS tokens. Fixed seeds: common random numbers.
 * The popularity bias spread is re-solved in the same model with the rows
 * and biases shared (mf_solve_spread), since sharing flattens popularity.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "research/gen/synth_internal.h"
#include "research/trace/trace_analysis.h"

#define CAL_TOKENS 150 /* co-activation's definition: the tuning half's length */
#define CAL_LAYERS 8

typedef struct mf {
  int E, k, width, L, sigmoid;
  int nt; /* topics (spill_gen_n_topics): expert e of layer j is in perm[j][e] % nt */
  float spread;
  float *bias;      /* (L, E) */
  float *zshared;   /* (E) the shared popularity draws */
  float *zown;      /* (L, E) each layer's own */
  uint32_t *perm;   /* (L, E): where layer j's experts take the shared rows */
  float *u, *z;
  uint32_t *ids;    /* (T, L, k) */
} mf;

static void fill_gauss(spill_gen_rng *r, float *v, int n) {
  for (int i = 0; i < n; i++) v[i] = spill_gen_gauss12(r);
}

static void evolve(spill_gen_rng *r, float *v, int n, float eps) {
  const float inv = 1.0f / sqrtf(1.0f + eps * eps);
  for (int i = 0; i < n; i++) v[i] = (v[i] + eps * spill_gen_gauss12(r)) * inv;
}

/* Top-k (or top-w) of layer j's selection score from the projections of the
 * shared matrix (u, permuted by layer) and of the layer's own rows (z). */
static int mf_select(mf *m, int j, const float *u, const float *z, float c, int k,
                     uint32_t *out) {
  const float a = sqrtf(c), b = sqrtf(1.0f - c);
  const uint32_t *pj = m->perm + (size_t)j * m->E;
  float ts[SPILL_MAX_TOPK];
  int ti[SPILL_MAX_TOPK], nt = 0;
  for (int e = 0; e < m->E; e++) {
    float s = a * u[pj[e] % m->nt] + b * z[e];
    float sel = m->sigmoid ? 1.0f / (1.0f + expf(-s)) + m->bias[(size_t)j * m->E + e] : s;
    spill_gen_topk_push(ts, ti, &nt, k, sel, e);
  }
  for (int i = 0; i < nt; i++) out[i] = (uint32_t)ti[i];
  return nt;
}

/* The popularity bias at spread a: sqrt(c) of it shared through the same
 * pairing as the rows (synth_values.c, SPILL_GEN_INIT_PROBS_B). */
static void mf_set_bias(mf *m, float a, float c) {
  for (int j = 0; j < m->L; j++)
    for (int e = 0; e < m->E; e++) {
      const size_t i = (size_t)j * m->E + e;
      m->bias[i] = a * spill_gen_bias_shape(sqrtf(c) * m->zshared[m->perm[i] % m->nt] +
                                            sqrtf(1.0f - c) * m->zown[i]);
    }
}

/* Runs CAL_TOKENS tokens; returns the lookahead precision; fills m->ids. */
static double mf_run(mf *m, float eps, float c) {
  mf_set_bias(m, m->spread, c);
  spill_gen_rng r;
  spill_gen_rng_seed(&r, 0x6D66636Cull, (uint64_t)m->E, (uint64_t)m->k * 977 + m->width);
  const int E = m->E;
  uint64_t pred = 0, good = 0;
  uint32_t p[SPILL_MAX_TOPK];
  for (int t = 0; t < CAL_TOKENS; t++) {
    fill_gauss(&r, m->u, E);
    fill_gauss(&r, m->z, E);
    for (int j = 0; j < m->L; j++) {
      uint32_t *ids = m->ids + ((size_t)t * m->L + j) * m->k;
      mf_select(m, j, m->u, m->z, c, m->k, ids);
      if (j > 0) { /* the previous layer's predictions against these ids */
        for (int i = 0; i < m->width; i++)
          for (int x = 0; x < m->k; x++) good += p[i] == ids[x];
        pred += (uint64_t)m->width;
      }
      if (j == m->L - 1) break;
      fill_gauss(&r, m->z, E); /* layer j+1's own projections at h_j: fresh */
      mf_select(m, j + 1, m->u, m->z, c, m->width, p);
      evolve(&r, m->u, E, eps); /* h_j -> h_j+1 */
      evolve(&r, m->z, E, eps);
    }
  }
  return pred ? (double)good / (double)pred : 0;
}

static int mf_coact(mf *m, double *out, spill_err *e);
static int mf_stats(mf *m, double *coact, double *reuse, spill_err *e);

/* Sum of the 50/80/95% coverage points (as spill_gen_calibrate_bias scores
 * them) of the mf model's routers at bias spread a and row share c: every
 * layer sampled at the trace's density (spill_gen_trace_samples), hidden
 * states independent per sample. Rows and biases shared within a topic make
 * experts' selections correlated, which flattens popularity at a given a;
 * this is the model that the sharing-aware spread is solved in. */
static double mf_coverage_sum(mf *m, float a, float c, uint64_t *counts) {
  mf_set_bias(m, a, c);
  memset(counts, 0, (size_t)m->E * m->L * sizeof *counts);
  spill_gen_rng r;
  spill_gen_rng_seed(&r, 0x6D66636F76ull, (uint64_t)m->E, (uint64_t)m->k);
  const int samples = spill_gen_trace_samples(m->E, m->k);
  uint32_t ids[SPILL_MAX_TOPK];
  for (int j = 0; j < m->L; j++)
    for (int n = 0; n < samples; n++) {
      fill_gauss(&r, m->u, m->E);
      fill_gauss(&r, m->z, m->E);
      const int nt = mf_select(m, j, m->u, m->z, c, m->k, ids);
      for (int i = 0; i < nt; i++) counts[(size_t)j * m->E + ids[i]]++;
    }
  const size_t n = (size_t)m->E * m->L;
  return spill_gen_coverage_at(counts, n, 0.50) + spill_gen_coverage_at(counts, n, 0.80) +
         spill_gen_coverage_at(counts, n, 0.95);
}

/* The spread (of unit skew) that brings the mf model's coverage sum at row
 * share c to the OLMoE target; coverage falls as the spread grows. */
static float mf_solve_spread(mf *m, float c, uint64_t *counts) {
  const double target = SPILL_GEN_TARGET_AT50 + SPILL_GEN_TARGET_AT80 + SPILL_GEN_TARGET_AT95;
  if (mf_coverage_sum(m, 0.0f, c, counts) <= target) return 0.0f;
  float lo = 0.0f, hi = 1.0f;
  while (hi < 8.0f && mf_coverage_sum(m, hi, c, counts) > target) hi *= 2.0f;
  for (int it = 0; it < 16; it++) {
    float mid = 0.5f * (lo + hi);
    if (mf_coverage_sum(m, mid, c, counts) > target) lo = mid;
    else hi = mid;
  }
  return hi;
}

/* Bisects the row share c for the co-activation target at the current eps
 * and spread into *chain (0 when coact <= 0). */
static int mf_solve_chain(mf *m, float eps, double coact, float *chain, spill_err *e) {
  double got = 0;
  float clo = 0.0f, chi = SPILL_GEN_MAX_CHAIN;
  for (int it = 0; it < 12; it++) {
    float mid = 0.5f * (clo + chi);
    mf_run(m, eps, mid);
    SPILL_TRY(mf_coact(m, &got, e));
    if (got < coact) clo = mid;
    else chi = mid;
  }
  *chain = coact > 0 ? 0.5f * (clo + chi) : 0.0f;
  return SPILL_OK;
}

/* research/trace's statistics of the last run's ids (m->ids). */
static int mf_stats(mf *m, double *coact, double *reuse, spill_err *e) {
  spill_trace t;
  memset(&t, 0, sizeof t);
  t.format = SPILL_TRACE_SIMPLE;
  t.n_tokens = CAL_TOKENS;
  t.n_layers = (uint32_t)m->L;
  t.n_experts = (uint32_t)m->E;
  t.top_k = (uint32_t)m->k;
  t.meta.rank_order = 1;
  uint32_t lids[CAL_LAYERS];
  int64_t tok[CAL_TOKENS], pos[CAL_TOKENS];
  uint8_t phase[CAL_TOKENS];
  for (int j = 0; j < m->L; j++) lids[j] = (uint32_t)j;
  for (int i = 0; i < CAL_TOKENS; i++) {
    tok[i] = i;
    pos[i] = -1;
    phase[i] = SPILL_TRACE_PHASE_NONE;
  }
  t.layer_ids = lids;
  t.tok = tok;
  t.pos = pos;
  t.phase = phase;
  t.ids = m->ids;
  spill_trace_stats st;
  SPILL_TRY(spill_trace_compute_stats(&t, 0, 0, &st, e));
  if (coact) *coact = st.coact_precision;
  if (reuse) *reuse = st.reuse_next;
  spill_trace_stats_free(&st);
  return SPILL_OK;
}

/* Co-activation precision of the last mf_run's ids. */
static int mf_coact(mf *m, double *out, spill_err *e) { return mf_stats(m, out, NULL, e); }

/* Next-token reuse of the mf routers (bias and shared rows as set) when
 * every layer's projections of token t+1 are rho times token t's plus
 * sqrt(1 - rho^2) fresh; layers independent. us, zs: (L, E) states. */
static int mf_reuse_at(mf *m, float c, float rho, float *us, float *zs, double *out,
                       spill_err *e) {
  spill_gen_rng r;
  spill_gen_rng_seed(&r, 0x6D667275ull, (uint64_t)m->E, (uint64_t)m->k);
  const size_t n = (size_t)m->L * m->E;
  fill_gauss(&r, us, (int)n);
  fill_gauss(&r, zs, (int)n);
  const float fresh = sqrtf(1.0f - rho * rho);
  for (int t = 0; t < CAL_TOKENS; t++) {
    if (t > 0)
      for (size_t i = 0; i < n; i++) {
        us[i] = rho * us[i] + fresh * spill_gen_gauss12(&r);
        zs[i] = rho * zs[i] + fresh * spill_gen_gauss12(&r);
      }
    for (int j = 0; j < m->L; j++)
      mf_select(m, j, us + (size_t)j * m->E, zs + (size_t)j * m->E, c, m->k,
                m->ids + ((size_t)t * m->L + j) * m->k);
  }
  return mf_stats(m, NULL, out, e);
}

static int mf_init(mf *m, int E, int k, int width, int sigmoid, float spread, uint64_t seed,
                   spill_err *e) {
  memset(m, 0, sizeof *m);
  m->E = E;
  m->k = k;
  m->width = width < k ? width : k;
  m->L = CAL_LAYERS;
  m->nt = spill_gen_n_topics(E, k);
  m->sigmoid = sigmoid;
  m->spread = spread;
  const size_t n = (size_t)E;
  m->bias = malloc(n * CAL_LAYERS * sizeof *m->bias);
  m->zshared = malloc(n * sizeof *m->zshared);
  m->zown = malloc(n * CAL_LAYERS * sizeof *m->zown);
  m->perm = malloc(n * CAL_LAYERS * sizeof *m->perm);
  m->u = malloc(n * sizeof(float));
  m->z = malloc(n * sizeof(float));
  m->ids = malloc((size_t)CAL_TOKENS * CAL_LAYERS * k * sizeof *m->ids);
  SPILL_FAIL_IF(e, !m->bias || !m->zshared || !m->zown || !m->perm || !m->u || !m->z || !m->ids,
                SPILL_E_NOMEM, "gen: routing calibration buffers");
  spill_gen_rng r;
  spill_gen_rng_seed(&r, 0x6D6662ull, n, (uint64_t)k);
  for (size_t i = 0; i < n * CAL_LAYERS; i++) m->zown[i] = spill_gen_gauss(&r);
  /* the topics' shared popularity draws are the model's own (synth_values.c):
   * only n_topics values, so their realization shapes the coverage */
  for (int t = 0; t < m->nt; t++) {
    spill_gen_rng tr;
    spill_gen_rng_seed(&tr, seed, (uint64_t)t + 1, STREAM_SHARED_BIAS);
    m->zshared[t] = spill_gen_gauss(&tr);
  }
  for (int j = 0; j < CAL_LAYERS; j++) spill_gen_permutation(&r, m->perm + (size_t)j * n, E);
  return SPILL_OK;
}

static void mf_free(mf *m) {
  free(m->bias);
  free(m->zshared);
  free(m->zown);
  free(m->perm);
  free(m->u);
  free(m->z);
  free(m->ids);
}

/* Checks the shape and sets m up (mf_free it whatever this returns). */
static int mf_open(mf *m, int E, int k, int sigmoid, float spread, uint64_t seed, spill_err *e) {
  memset(m, 0, sizeof *m);
  SPILL_FAIL_IF(e, E <= 0 || k <= 0 || k > E || k > SPILL_MAX_TOPK, SPILL_E_CONFIG,
                "gen: cannot calibrate routing for %d experts top-%d", E, k);
  return mf_init(m, E, k, SPILL_GEN_LA_WIDTH, sigmoid, spread, seed, e);
}

static uint64_t g_calibrations; /* __atomic: plans may run on several threads */

void spill_gen_count_calibration(void) { __atomic_fetch_add(&g_calibrations, 1, __ATOMIC_RELAXED); }

uint64_t spill_gen_calibrations(void) { return __atomic_load_n(&g_calibrations, __ATOMIC_RELAXED); }

int spill_gen_calibrate_routing(int n_experts, int top_k, int sigmoid, uint64_t seed,
                                float skew, float bias_spread, double precision, double coact,
                                float eps_max, spill_gen_routing_cal *out, spill_err *e) {
  spill_gen_count_calibration();
  mf m;
  int rc = mf_open(&m, n_experts, top_k, sigmoid, bias_spread, seed, e);
  if (rc != SPILL_OK) {
    mf_free(&m);
    return rc;
  }
  /* precision falls as eps grows and hardly depends on c: solve eps at c = 0 */
  float lo = 0.0f, hi = 2.0f;
  for (int it = 0; it < 16; it++) {
    float mid = 0.5f * (lo + hi);
    if (mf_run(&m, mid, 0.0f) > precision) lo = mid;
    else hi = mid;
  }
  out->eps = 0.5f * (lo + hi);
  if (out->eps > eps_max) out->eps = eps_max; /* the stream's growth (spill_gen_max_write_rho) */
  /* co-activation rises with c */
  rc = mf_solve_chain(&m, out->eps, coact, &out->chain, e);
  out->bias_spread = bias_spread;
  /* Rows and biases shared within topics flatten popularity at a given
   * spread (independent draws were what spill_gen_calibrate_bias assumed):
   * re-solve the spread at the share found, the share at that spread, and
   * the spread once more, so the coverage target holds at the final share. */
  if (rc == SPILL_OK && sigmoid && bias_spread > 0 && out->chain > 0) {
    uint64_t *counts = malloc((size_t)n_experts * m.L * sizeof *counts);
    if (!counts) rc = spill_err_set(e, SPILL_E_NOMEM, "gen: routing calibration counts");
    for (int round = 0; rc == SPILL_OK && round < 2; round++) {
      out->bias_spread = skew * mf_solve_spread(&m, out->chain, counts);
      m.spread = out->bias_spread;
      if (round == 0) rc = mf_solve_chain(&m, out->eps, coact, &out->chain, e);
    }
    free(counts);
  }
  if (rc == SPILL_OK) {
    out->precision = mf_run(&m, out->eps, out->chain);
    rc = mf_coact(&m, &out->coact, e);
  }
  mf_free(&m);
  return rc;
}

int spill_gen_calibrate_reuse(int n_experts, int top_k, int sigmoid, uint64_t seed,
                              float bias_spread, float chain, double reuse, double *rho,
                              double *got, spill_err *e) {
  spill_gen_count_calibration();
  mf m;
  int rc = mf_open(&m, n_experts, top_k, sigmoid, bias_spread, seed, e);
  float *us = malloc((size_t)n_experts * CAL_LAYERS * sizeof *us);
  float *zs = malloc((size_t)n_experts * CAL_LAYERS * sizeof *zs);
  if (rc == SPILL_OK && (!us || !zs)) rc = spill_err_set(e, SPILL_E_NOMEM, "gen: reuse buffers");
  if (rc == SPILL_OK) mf_set_bias(&m, bias_spread, chain);
  /* reuse rises with rho */
  float lo = 0.0f, hi = (float)SPILL_GEN_MAX_REUSE_RHO;
  double r = 0;
  for (int it = 0; rc == SPILL_OK && it < 14; it++) {
    float mid = 0.5f * (lo + hi);
    rc = mf_reuse_at(&m, chain, mid, us, zs, &r, e);
    if (r < reuse) lo = mid;
    else hi = mid;
  }
  if (rc == SPILL_OK) {
    *rho = 0.5 * (lo + hi);
    rc = mf_reuse_at(&m, chain, (float)*rho, us, zs, got, e);
  }
  free(us);
  free(zs);
  mf_free(&m);
  return rc;
}
