/* engine/import/import_rvq.c: training and encoding of the rvq3 expert
 * format for `spill import --experts rvq3` (docs/FORMAT.md "rvq3": 3 stages
 * of 256-entry codebooks of 8-dim f32 vectors, one f16 scale per row).
 *
 * A row is scaled by s = f16(rms(row)) and cut into 8-dim vectors; stage t's
 * codebook is k-means (Lloyd, IMP_RVQ_ITERS iterations, initialised from
 * seeded random sample vectors) over what stages 0..t-1 left of a sample of
 * those vectors; a vector is encoded greedily, stage by stage, by the entry
 * nearest to its remaining residual. Everything is deterministic: the sample
 * (a reservoir of at most IMP_RVQ_SAMPLE vectors) and the initialisation
 * come from a fixed-seed generator, loops run in a fixed order and sums are
 * in double, so an interrupted import re-trains the same codebooks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/import/import_internal.h"

enum { D = SPILL_RVQ_DIM, K = SPILL_RVQ_ENTRIES, STAGES = SPILL_RVQ_STAGES };

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

void imp_rvq_sample_init(imp_rvq_sample *s, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
}

float imp_rvq_row_scale(const float *row, uint64_t cols) {
  double ss = 0;
  for (uint64_t c = 0; c < cols; c++) ss += (double)row[c] * row[c];
  return spill_f16_to_f32(spill_f32_to_f16((float)sqrt(ss / (double)cols)));
}

void imp_rvq_sample_row(imp_rvq_sample *s, const float *row, uint64_t cols) {
  const float sc = imp_rvq_row_scale(row, cols);
  if (!(sc > 0)) return; /* an all-zero row encodes as s = 0 whatever the codebook */
  for (uint64_t g = 0; g + D <= cols; g += D) {
    uint64_t slot = s->seen < IMP_RVQ_SAMPLE ? s->seen : rng_next(&s->rng) % (s->seen + 1);
    s->seen++;
    if (slot >= IMP_RVQ_SAMPLE) continue;
    for (int j = 0; j < D; j++) s->v[slot][j] = row[g + j] / sc;
  }
}

static int nearest(const float *cb, const float *x) {
  int best = 0;
  double bd = INFINITY;
  for (int k = 0; k < K; k++) {
    double d = 0;
    for (int j = 0; j < D; j++) {
      double t = (double)x[j] - cb[k * D + j];
      d += t * t;
    }
    if (d < bd) {
      bd = d;
      best = k;
    }
  }
  return best;
}

/* Lloyd's k-means of the n vectors r into cb (K x D). */
static void kmeans(float (*r)[D], size_t n, uint64_t *rng, float *cb, int *assign) {
  for (int k = 0; k < K; k++) {
    size_t i = n > 0 ? (size_t)(rng_next(rng) % n) : 0;
    for (int j = 0; j < D; j++) cb[k * D + j] = n > 0 ? r[i][j] : 0.0f;
  }
  double *sum = malloc(sizeof(double) * K * D);
  size_t *cnt = malloc(sizeof(size_t) * K);
  if (!sum || !cnt) { /* keep the sample-point codebook: still valid, just untrained */
    free(sum);
    free(cnt);
    return;
  }
  for (int it = 0; it < IMP_RVQ_ITERS && n > 0; it++) {
    memset(sum, 0, sizeof(double) * K * D);
    memset(cnt, 0, sizeof(size_t) * K);
    for (size_t i = 0; i < n; i++) {
      int a = nearest(cb, r[i]);
      assign[i] = a;
      cnt[a]++;
      for (int j = 0; j < D; j++) sum[a * D + j] += r[i][j];
    }
    for (int k = 0; k < K; k++) {
      if (cnt[k] == 0) { /* empty cluster: restart it on a random sample vector */
        size_t i = (size_t)(rng_next(rng) % n);
        for (int j = 0; j < D; j++) cb[k * D + j] = r[i][j];
        continue;
      }
      for (int j = 0; j < D; j++) cb[k * D + j] = (float)(sum[k * D + j] / (double)cnt[k]);
    }
  }
  free(sum);
  free(cnt);
}

int imp_rvq_train(imp_rvq_sample *s, float *cb, spill_err *e) {
  const size_t n = s->seen < IMP_RVQ_SAMPLE ? (size_t)s->seen : IMP_RVQ_SAMPLE;
  int *assign = malloc(sizeof(int) * (n ? n : 1));
  SPILL_FAIL_IF(e, !assign, SPILL_E_NOMEM, "rvq3: out of memory");
  uint64_t rng = 0x5DEECE66Dull ^ (uint64_t)n;
  for (int t = 0; t < STAGES; t++) {
    float *c = cb + (size_t)t * K * D;
    kmeans(s->v, n, &rng, c, assign);
    for (size_t i = 0; i < n; i++) { /* the residual the next stage learns */
      const int a = nearest(c, s->v[i]);
      for (int j = 0; j < D; j++) s->v[i][j] -= c[a * D + j];
    }
  }
  free(assign);
  return SPILL_OK;
}

void imp_rvq_encode_row(const float *cb, const float *row, uint64_t cols, uint8_t *idx,
                        uint16_t *scale, double *num, double *den) {
  const float sc = imp_rvq_row_scale(row, cols);
  *scale = spill_f32_to_f16(sc);
  for (uint64_t g = 0; g + D <= cols; g += D) {
    float res[D], rec[D] = {0};
    for (int j = 0; j < D; j++) res[j] = sc > 0 ? row[g + j] / sc : 0.0f;
    for (int t = 0; t < STAGES; t++) {
      const float *c = cb + (size_t)t * K * D;
      const int a = sc > 0 ? nearest(c, res) : 0;
      idx[(g / D) * STAGES + (uint64_t)t] = (uint8_t)a;
      for (int j = 0; j < D; j++) {
        res[j] -= c[a * D + j];
        rec[j] += c[a * D + j];
      }
    }
    for (int j = 0; j < D; j++) { /* the engine's decode: s * (cb0 + cb1 + cb2) */
      const double w = row[g + j], d = w - (double)sc * rec[j];
      *num += d * d;
      *den += w * w;
    }
  }
}
