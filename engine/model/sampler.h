/* engine/model/sampler.h: next-token choice from logits (docs/MODEL.md,
 * "Sampling"). Greedy (argmax, lowest id on ties) when temperature <= 0;
 * otherwise logits / T, softmax, top-k (k > 0), top-p (0 < p < 1), then a
 * draw with xorshift64* seeded from the config. All scratch is allocated by
 * init, so sampling never allocates. One sampler per sequence; not
 * thread-safe. Depends on engine/base only.
 */
#ifndef SPILL_MODEL_SAMPLER_H
#define SPILL_MODEL_SAMPLER_H

#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_sampler_opts {
  float temperature; /* <= 0: greedy */
  int top_k;         /* <= 0: off */
  float top_p;       /* <= 0 or >= 1: off */
  uint64_t seed;     /* 0 is replaced by a fixed non-zero constant */
} spill_sampler_opts;

typedef struct spill_sampler {
  spill_sampler_opts o;
  uint64_t rng;     /* xorshift64* state, never 0 */
  int vocab;
  float *prob;      /* (vocab) */
  int *idx;         /* (vocab) */
} spill_sampler;

/* Allocates scratch for `vocab` logits; free with spill_sampler_free. */
int spill_sampler_init(spill_sampler *s, const spill_sampler_opts *o, int vocab, spill_err *e);
void spill_sampler_free(spill_sampler *s); /* NULL/zeroed fine */
/* Index of the greedy choice: max logit, lowest id on ties (NaN never wins
 * unless all are NaN, then 0). */
int spill_sampler_argmax(const float *logits, int n);
/* Picks a token from logits (vocab floats, not modified). */
int spill_sampler_sample(spill_sampler *s, const float *logits);
/* Next xorshift64* output (exposed for tests): x ^= x >> 12; x ^= x << 25;
 * x ^= x >> 27; return x * 0x2545F4914F6CDD1D. */
uint64_t spill_sampler_next_u64(uint64_t *state);
/* Uniform float in [0, 1): top 24 bits of the next u64 / 2^24. */
float spill_sampler_next_f32(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif
