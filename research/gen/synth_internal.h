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

/* How a trunk tensor's values are drawn. */
typedef enum spill_gen_init_kind {
  SPILL_GEN_INIT_GAUSS = 0, /* N(0, a^2) */
  SPILL_GEN_INIT_NORM,      /* 1 + a * N(0, 1) */
  SPILL_GEN_INIT_CONV,      /* taps U(-a, a), last tap + 0.5 */
  SPILL_GEN_INIT_A_LOG,     /* log U(1, 16) */
  SPILL_GEN_INIT_DT_BIAS,   /* softplus^-1 of dt, log dt ~ U(log 1e-3, log 1e-1) */
  SPILL_GEN_INIT_PROBS_B,   /* a * N(0, 1): the popularity bias */
  SPILL_GEN_INIT_CODEBOOK,  /* rvq3 (3, 256, 8): stage s ~ N(0, 0.5^s), centred */
} spill_gen_init_kind;

typedef struct spill_gen_init {
  spill_gen_init_kind kind;
  float a;
} spill_gen_init;

/* The full plan: manifest template plus per-tensor init and the derivation. */
typedef struct spill_gen_plan_full {
  spill_manifest m;
  spill_gen_init *init; /* m.n_tensors entries */
  spill_gen_summary sum;
  uint32_t trunk_group; /* q4/q8 group of the trunk */
  float expert_sigma_in;  /* std of gate/up weights */
  float expert_sigma_out; /* std of down weights */
  uint64_t seed;
  float skew;
  float bias_spread; /* exp_probs_b std: skew x calibrated spread */
} spill_gen_plan_full;

int spill_gen_plan_full_make(const spill_gen_opts *o, spill_gen_plan_full *p, spill_err *e);
void spill_gen_plan_full_free(spill_gen_plan_full *p);

/* Bias spread a (exp_probs_b = a z, z ~ N(0,1)) that makes the mean-field
 * coverage of an (E, top-k) sigmoid router match the OLMoE trace (sum of the
 * three points). Deterministic in (E, k). */
int spill_gen_calibrate_bias(int n_experts, int top_k, float *scale, spill_err *e);

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
