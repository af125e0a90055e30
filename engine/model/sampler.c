/* engine/model/sampler.c: greedy / temperature / top-k / top-p sampling
 * (docs/MODEL.md "Sampling") with xorshift64*. Top-p is applied to the top-k
 * list renormalised (as llama.cpp does). Probabilities are computed in
 * f32 after subtracting the max logit; top-k and top-p work on the ids sorted
 * by descending probability (ties: lower id first), so results depend only
 * on the logits, the options and the seed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/sampler.h"

#define SEED_ZERO_REPLACEMENT 0x9E3779B97F4A7C15ull

uint64_t spill_sampler_next_u64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

float spill_sampler_next_f32(uint64_t *state) {
  return (float)(spill_sampler_next_u64(state) >> 40) / 16777216.0f;
}

int spill_sampler_init(spill_sampler *s, const spill_sampler_opts *o, int vocab, spill_err *e) {
  SPILL_FAIL_IF(e, !s || vocab < 1, SPILL_E_INVALID_ARG, "sampler: vocab %d", vocab);
  memset(s, 0, sizeof *s);
  if (o) s->o = *o;
  s->rng = s->o.seed ? s->o.seed : SEED_ZERO_REPLACEMENT;
  s->vocab = vocab;
  s->prob = malloc((size_t)vocab * sizeof *s->prob);
  s->idx = malloc((size_t)vocab * sizeof *s->idx);
  if (!s->prob || !s->idx) {
    spill_sampler_free(s);
    return spill_err_set(e, SPILL_E_NOMEM, "sampler: %d entries", vocab);
  }
  return SPILL_OK;
}

void spill_sampler_free(spill_sampler *s) {
  if (!s) return;
  free(s->prob);
  free(s->idx);
  s->prob = NULL;
  s->idx = NULL;
}

int spill_sampler_argmax(const float *logits, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (logits[i] > logits[best] || (logits[best] != logits[best] && logits[i] == logits[i]))
      best = i;
  return best;
}

/* qsort has no context pointer: the probabilities being sorted, per thread. */
static _Thread_local const float *t_sort_prob;

static int by_prob_desc(const void *pa, const void *pb) {
  const int a = *(const int *)pa, b = *(const int *)pb;
  const float x = t_sort_prob[a], y = t_sort_prob[b];
  if (x > y) return -1;
  if (x < y) return 1;
  return (a > b) - (a < b);
}

int spill_sampler_sample(spill_sampler *s, const float *logits) {
  const int n = s->vocab;
  if (!(s->o.temperature > 0.0f)) return spill_sampler_argmax(logits, n);
  float *p = s->prob; /* (vocab) */
  int *idx = s->idx;  /* (vocab) */
  const float inv_t = 1.0f / s->o.temperature;
  float mx = logits[spill_sampler_argmax(logits, n)];
  float sum = 0.0f;
  for (int i = 0; i < n; i++) {
    p[i] = expf((logits[i] - mx) * inv_t);
    sum += p[i];
    idx[i] = i;
  }
  for (int i = 0; i < n; i++) p[i] /= sum;
  t_sort_prob = p;
  qsort(idx, (size_t)n, sizeof *idx, by_prob_desc);
  int m = n;
  if (s->o.top_k > 0 && s->o.top_k < m) m = s->o.top_k;
  if (s->o.top_p > 0.0f && s->o.top_p < 1.0f) {
    /* top-p on the top-k list renormalised: prefix mass >= p * (top-k mass) */
    float kept = 0.0f;
    for (int j = 0; j < m; j++) kept += p[idx[j]];
    const float target = s->o.top_p * kept;
    float cum = 0.0f;
    int j = 0;
    while (j < m) {
      cum += p[idx[j]];
      j++;
      if (cum >= target) break;
    }
    m = j;
  }
  float mass = 0.0f;
  for (int j = 0; j < m; j++) mass += p[idx[j]];
  const float r = spill_sampler_next_f32(&s->rng) * mass;
  float cdf = 0.0f;
  for (int j = 0; j < m; j++) {
    cdf += p[idx[j]];
    if (r < cdf) return idx[j];
  }
  return idx[m - 1]; /* rounding */
}
