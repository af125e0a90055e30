/* research/gen/synth_internal.h: what the planner, the value generators and the
 * coverage probe of research/gen share; private to the module.
 *
 * Streams: every tensor gets the PRNG stream seeded from (seed, fnv1a(name)),
 * every expert record the stream (seed, layer, expert), so values never
 * depend on the order of generation. The PRNG is engine/base/rng.h's
 * xoshiro256** seeded with splitmix64; Gaussians are Irwin-Hall sums of four
 * 16-bit uniforms (integer arithmetic plus one multiply: bit-identical on
 * every libm).
 */
#ifndef SPILL_GEN_SYNTH_INTERNAL_H
#define SPILL_GEN_SYNTH_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "engine/base/rng.h"
#include "research/gen/synth.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The generator's streams are engine/base/rng.h's xoshiro256**. */
typedef spill_rng spill_gen_rng;

static inline void spill_gen_rng_seed(spill_gen_rng *r, uint64_t seed, uint64_t a, uint64_t b) {
  spill_rng_seed(r, seed ^ (a * 0xD6E8FEB86659FD93ull) ^ (b * 0xA0761D6478BD642Full));
}

static inline uint64_t spill_gen_next(spill_gen_rng *r) { return spill_rng_next(r); }

/* Uniform in [0, 1). */
static inline float spill_gen_unif(spill_gen_rng *r) {
  return (float)(spill_gen_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Approximately N(0, 1): (sum of 4 uniforms - 2) * sqrt(3), range +-3.46. */
static inline float spill_gen_gauss(spill_gen_rng *r) {
  uint64_t v = spill_gen_next(r);
  uint32_t s = (uint32_t)(v & 0xFFFF) + (uint32_t)((v >> 16) & 0xFFFF) +
               (uint32_t)((v >> 32) & 0xFFFF) + (uint32_t)(v >> 48);
  return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* Closer to N(0, 1) in the tails (Irwin-Hall of 12, range +-6): for
 * statistics that live in the upper tail, such as top-k selection. */
static inline float spill_gen_gauss12(spill_gen_rng *r) {
  uint32_t s = 0;
  for (int i = 0; i < 3; i++) {
    uint64_t v = spill_gen_next(r);
    s += (uint32_t)(v & 0xFFFF) + (uint32_t)((v >> 16) & 0xFFFF) +
         (uint32_t)((v >> 32) & 0xFFFF) + (uint32_t)(v >> 48);
  }
  return (float)s * (1.0f / 65536.0f) - 6.0f;
}

/* Shape of the popularity bias: a Gaussian with a heavier right tail (a few
 * very popular experts, as in real traces). 0.05 balances the errors of the
 * 50% point (too flat with 0) and the 95% point (too steep with 0.1). */
#ifndef SPILL_GEN_BIAS_SKEWNESS
#define SPILL_GEN_BIAS_SKEWNESS 0.05f
#endif
static inline float spill_gen_bias_shape(float z) {
  return z + SPILL_GEN_BIAS_SKEWNESS * (z * z - 1.0f);
}

static inline uint64_t spill_gen_fnv1a(const char *s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ull;
  return h;
}

/* Inserts (score, id) into the descending top-k list (ties: lower id first;
 * ids arrive in increasing order, so a tie never displaces). */
static inline void spill_gen_topk_push(float *ts, int *ti, int *n, int k, float score, int id) {
  if (*n == k && score <= ts[k - 1]) return;
  int j = *n < k ? (*n)++ : k - 1;
  while (j > 0 && ts[j - 1] < score) {
    ts[j] = ts[j - 1];
    ti[j] = ti[j - 1];
    j--;
  }
  ts[j] = score;
  ti[j] = id;
}

/* A uniformly random permutation of 0..n-1 (Fisher-Yates). */
static inline void spill_gen_permutation(spill_gen_rng *r, uint32_t *p, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint32_t)i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(spill_gen_next(r) % (uint64_t)(i + 1));
    uint32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
}

/* Topics: E / top_k groups of experts per MoE layer. Expert e of layer j
 * belongs to topic ((a e + b) mod n) mod n_topics, a coprime to n, a and b
 * from the stream (seed, "pair", j): a different grouping per layer, no
 * memory. */
static inline void spill_gen_pairing(uint64_t seed, int j, int n, uint64_t *a, uint64_t *b) {
  spill_gen_rng r;
  spill_gen_rng_seed(&r, seed ^ 0x70616972ull, (uint64_t)j, 0x70616972ull);
  uint64_t x = n > 1 ? 1 + spill_gen_next(&r) % (uint64_t)(n - 1) : 1;
  for (;;) { /* the first x >= the draw coprime to n */
    uint64_t g = x, h = (uint64_t)n;
    while (h) {
      uint64_t t = g % h;
      g = h;
      h = t;
    }
    if (g == 1) break;
    x = x + 1 < (uint64_t)n ? x + 1 : 1;
  }
  *a = x;
  *b = spill_gen_next(&r) % (uint64_t)(n > 0 ? n : 1);
}

/* The stream of a topic's shared popularity draw (seed, topic + 1, this):
 * the first spill_gen_gauss of it, the same in every MoE layer. */
#define STREAM_SHARED_BIAS 0x62696173ull /* "bias" */

static inline int spill_gen_n_topics(int n_experts, int top_k) {
  int t = top_k > 0 ? n_experts / top_k : n_experts;
  return t > 0 ? t : 1;
}

/* The rms of what each residual writer of layer l (attention output, dense
 * FFN, routed and shared experts) adds, for a stream of rms 1 after the
 * embedding that grows by 1 + 2 rho^2 in variance per layer: every layer
 * changes the stream by the same relative amount. */
static inline float spill_gen_write_scale(float rho, int layer) {
  return rho * powf(1.0f + 2.0f * rho * rho, 0.5f * (float)layer);
}

/* The most the stream's rms may grow over a model's layers (times the reuse
 * base's sqrt(1 + G^2) <= sqrt(5)): the writers' weights grow with it and
 * are stored with f16 scales (q4/q8 groups, rvq3 rows; max 65504), so the
 * growth is held to 2^16 whatever the layer count. Uncapped, a writer ratio
 * of 0.77 (74 experts top-16 at precision 0.81) grows the stream 2.2^46-fold
 * over 93 layers: the f16 scales of its late writers overflow to inf and
 * every logit is NaN. */
#define SPILL_GEN_MAX_STREAM_GROWTH 65536.0

/* The largest writer ratio rho whose stream grows at most
 * SPILL_GEN_MAX_STREAM_GROWTH-fold over n_layers layers:
 * (1 + 2 rho^2)^(n_layers / 2) = growth. */
static inline double spill_gen_max_write_rho(int n_layers) {
  if (n_layers < 1) return 1e30;
  return sqrt((pow(SPILL_GEN_MAX_STREAM_GROWTH, 2.0 / (double)n_layers) - 1.0) / 2.0);
}

/* With next-token reuse (base G > 0), layer 0's KDA attention writes rms G
 * into a stream of rms 1 and every other residual writer is
 * spill_gen_write_scale times sqrt(1 + G^2): the stream after layer 0's
 * attention has rms sqrt(1 + G^2) and every layer changes it by the same
 * relative amount as without reuse (the lookahead precision is kept). */
static inline float spill_gen_reuse_scale(float base) { return sqrtf(1.0f + base * base); }

/* The largest router-row share c the co-activation solve may use. Topic-
 * shared rows and biases make popularity come in steps of a topic's experts,
 * which a spread solved on the sum of the three coverage points cannot keep
 * on the OLMoE curve as c grows: with the spread re-solved at c, the 95%
 * point of mini / twin (synth_test, seed 1) is 75.0/74.2% at c 0.6, 75.7/75.0
 * at 0.8, 75.9/75.6 at 0.85 and 76.9/76.7 at 0.95 (target 73.4, tolerance 3
 * pp). Where co-activation needs more, the plan says it is out of reach. */
#define SPILL_GEN_MAX_CHAIN 0.85f

/* Lookahead precision is measured at this width (K3's published 81% is over
 * the top 6). */
#define SPILL_GEN_LA_WIDTH 6

/* The two router constants of a plan and what the mean-field model predicts
 * they give. */
typedef struct spill_gen_routing_cal {
  float eps;        /* relative change of the router input from one MoE layer to the next */
  float chain;      /* router row correlation of paired experts of consecutive layers */
  double precision; /* predicted lookahead precision at SPILL_GEN_LA_WIDTH */
  double coact;     /* predicted co-activation precision (research/trace's) */
  float bias_spread; /* exp_probs_b std for the coverage target at this chain */
} spill_gen_routing_cal;

/* Solves eps for the lookahead precision (then capped at eps_max: the
 * stream's growth, spill_gen_max_write_rho; the precision predicted is then
 * above the one asked), then chain for the co-activation
 * (synth_calib.c). bias_spread: skew x spill_gen_calibrate_bias's spread,
 * solved without sharing; with chain > 0 on a sigmoid router the spread is
 * re-solved (times skew) so that the shared rows keep the coverage target.
 * seed: the model's; the topics' shared popularity draws are its own (few
 * values, so their realization matters). Deterministic in its arguments. coact <= 0: chain 0. */
int spill_gen_calibrate_routing(int n_experts, int top_k, int sigmoid, uint64_t seed,
                                float skew, float bias_spread, double precision, double coact,
                                float eps_max, spill_gen_routing_cal *out, spill_err *e);

/* Next-token reuse (docs/GEN.md, "Routing statistics"): in the mean-field
 * router model of spill_gen_calibrate_routing, every router projection of
 * token t+1 is rho v + sqrt(1 - rho^2) g of token t's (g fresh); returns the
 * rho whose next-token reuse (research/trace's) is `reuse`, and that reuse in
 * *got (capped at SPILL_GEN_MAX_REUSE_RHO: *got < reuse says out of reach).
 * Deterministic in its arguments. */
int spill_gen_calibrate_reuse(int n_experts, int top_k, int sigmoid, uint64_t seed,
                              float bias_spread, float chain, double reuse, double *rho,
                              double *got, spill_err *e);
#define SPILL_GEN_MAX_REUSE_RHO 0.98

/* The carrier of reuse: KDA layers with box conv taps (q, k, v summed over
 * the last conv_kernel tokens, so the delta-rule readout drifts slowly from
 * token to token) and faster decay (SPILL_GEN_REUSE_DT_MIN); layer 0's KDA
 * attention, which sees only the token embeddings, writes a base of rms G
 * (spill_gen_reuse_scale). The router input's consecutive-token correlation
 * is modelled as SPILL_GEN_KDA_LAG1 times the KDA outputs' share of its
 * variance (kda_corr, synth_plan.c); the constant was fitted on tuning seeds
 * 5-8 of nano 8 x 64 top-8 for an earlier carrier (a gain on every KDA
 * output) and kept for the base: crude (docs/GEN.md, "Reuse"). */
#define SPILL_GEN_KDA_LAG1 0.79
/* The largest base: at 2.5 a mini model's routing collapses late in decode
 * (98% reuse over the last 48 tokens, 3.5% of the pairs carrying 50%;
 * docs/GEN.md), at 1.5 it does not. Where the reuse asked needs more, the
 * plan says it is out of reach. */
#define SPILL_GEN_MAX_REUSE_BASE 2.0f
/* With reuse the KDA decay rates dt are drawn from [this, 0.1] instead of
 * [1e-3, 0.1]: channels that decay by less than 1% a token add a near-
 * constant component (the mean of the whole context) that makes reuse depend
 * on the seed and concentrates routing (docs/GEN.md). */
#define SPILL_GEN_REUSE_DT_MIN 1e-2f

/* How a trunk tensor's values are drawn. */
typedef enum spill_gen_init_kind {
  SPILL_GEN_INIT_GAUSS = 0, /* N(0, a^2) */
  SPILL_GEN_INIT_NORM,      /* 1 + a * N(0, 1) */
  SPILL_GEN_INIT_CONV,      /* taps U(-a, a), last tap + 0.5 */
  SPILL_GEN_INIT_CONV_BOX,  /* every tap a: a moving sum of the last K inputs */
  SPILL_GEN_INIT_A_LOG,     /* log U(1, 16) */
  SPILL_GEN_INIT_DT_BIAS,   /* softplus^-1 of dt, log dt ~ U(log a, log 1e-1); a = 0: 1e-3 */
  SPILL_GEN_INIT_DT_BIAS_LB, /* Kimi K3's decay lb sigmoid(exp(A_log) f) with A_log 0: the
                               logit of A dt / 5 (|lb| = 5), so the decay is -A dt at
                               f = dt_bias, dt drawn as for SPILL_GEN_INIT_DT_BIAS and A from
                               U(1, 16) per channel (the family's A_log range, per head) */
  SPILL_GEN_INIT_PROBS_B,   /* a * N(0, 1): the popularity bias */
  SPILL_GEN_INIT_CODEBOOK,  /* rvq3 (3, 256, 8): stage s ~ N(0, 0.5^s), centred */
  SPILL_GEN_INIT_ROUTER,    /* a * (rows shared with the neighbouring MoE layers' routers) */
  SPILL_GEN_INIT_NEG_A,     /* -U(1, 16): a GDN ssm_a = -exp(A_log) */
} spill_gen_init_kind;

typedef struct spill_gen_init {
  spill_gen_init_kind kind;
  float a;
  int layer; /* SPILL_GEN_INIT_ROUTER: the model layer */
} spill_gen_init;

/* The full plan: manifest template plus per-tensor init and the derivation. */
typedef struct spill_gen_plan_full {
  spill_manifest m;
  spill_gen_init *init; /* m.n_tensors entries */
  spill_gen_summary sum;
  uint32_t trunk_group; /* q4/q8 group of the trunk */
  float expert_sigma_in;  /* std of gate/up weights */
  float expert_sigma_out; /* std of down weights (times the layer's write scale
                             when the experts write the stream: !expert_out_latent) */
  int expert_out_latent;
  uint64_t seed;
  float skew;
  float bias_spread; /* exp_probs_b std: skew x calibrated spread */
  float write_rho;   /* rms of each residual writer relative to the stream (write_scale) */
  int write_rho_capped; /* the precision solve wanted more (spill_gen_max_write_rho) */
  float chain;       /* share c of every router row drawn from one matrix all MoE
                        layers share (rows permuted per layer): paired experts of
                        two layers have router rows correlated c */
  double want_precision, want_coact; /* the targets they were solved for */
  spill_gen_routing_cal cal;         /* what the mean-field model predicts */
  double want_reuse;  /* next-token reuse asked (0: off) */
  double reuse_rho;   /* router-input correlation of consecutive tokens it needs */
  double model_reuse; /* reuse the mean-field model gives at reuse_rho */
  float reuse_base;   /* G: rms of layer 0's KDA attention output (0: no reuse) */
  double model_corr;  /* kda_corr at reuse_base (< reuse_rho: out of reach) */
} spill_gen_plan_full;

/* The topic of expert e of MoE layer `layer` (spill_gen_pairing). */
static inline uint64_t spill_gen_topic(const spill_gen_plan_full *p, int layer, int e) {
  const int n = p->m.arch.moe.n_experts;
  uint64_t a, b;
  spill_gen_pairing(p->seed, layer, n, &a, &b);
  return ((a * (uint64_t)e + b) % (uint64_t)n) %
         (uint64_t)spill_gen_n_topics(n, p->m.arch.moe.top_k);
}

int spill_gen_plan_full_make(const spill_gen_opts *o, spill_gen_plan_full *p, spill_err *e);
void spill_gen_plan_full_free(spill_gen_plan_full *p);

/* Bias spread a (exp_probs_b = a z, z ~ N(0,1)) that makes the mean-field
 * coverage of an (E, top-k) sigmoid router match the OLMoE trace (sum of the
 * three points). Deterministic in (E, k). */
int spill_gen_calibrate_bias(int n_experts, int top_k, float *scale, spill_err *e);
/* Counts one calibration (spill_gen_calibrations). */
void spill_gen_count_calibration(void);

/* Fills t's values (f32) for tensor index i of the plan: n = rows*cols. */
void spill_gen_tensor_f32(const spill_gen_plan_full *p, int i, float *out);
/* Fills the encoded bytes of tensor i (its dtype) into out (t->bytes). */
int spill_gen_tensor_bytes(const spill_gen_plan_full *p, int i, uint8_t *out, spill_err *e);
/* Fills one expert record payload (payload_bytes) for (layer, expert). */
void spill_gen_expert_payload(const spill_gen_plan_full *p, int layer, uint32_t expert,
                              uint8_t *payload);

#ifdef __cplusplus
}
#endif
#endif
