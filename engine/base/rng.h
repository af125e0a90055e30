/* engine/base/rng.h: the tree's one pseudo-random generator, header-only:
 * xoshiro256** (Blackman and Vigna) seeded through splitmix64, plus
 * splitmix64 itself for one-word states.
 *
 * Users: the synthetic-model generator (research/gen: a model's values and
 * routing are these bits for a seed, on every machine, so the algorithm is
 * frozen: changing it changes every generated model), the harness statistics
 * (bootstrap resampling) and the cache policies and simulator (splitmix64 on
 * one word). Deterministic, not for cryptography. Depends on nothing.
 */
#ifndef SPILL_BASE_RNG_H
#define SPILL_BASE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_rng {
  uint64_t s[4];
} spill_rng;

/* splitmix64: advances *x and returns the next output. */
static inline uint64_t spill_rng_splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The xoshiro256** state: four splitmix64 outputs from seed. */
static inline void spill_rng_seed(spill_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = spill_rng_splitmix(&x);
}

static inline uint64_t spill_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The next xoshiro256** output. */
static inline uint64_t spill_rng_next(spill_rng *r) {
  uint64_t *s = r->s;
  const uint64_t out = spill_rng_rotl(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = spill_rng_rotl(s[3], 45);
  return out;
}

#ifdef __cplusplus
}
#endif
#endif
