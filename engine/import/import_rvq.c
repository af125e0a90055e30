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
 *
 * Speed without changing a bit: the nearest-entry search has an AVX2 twin
 * (import_rvq_avx2.c: an f32 filter with a proven error bound, then the
 * reference's own double distances for the few candidates; chosen by
 * spill_k_isa(), so SPILL_ISA=ref selects the scalar one), and the searches
 * are split over threads by contiguous ranges (k-means assignment and
 * residuals, rows of an encoded matrix) whose results land in per-item
 * slots; everything order-dependent (centroid sums, error sums) stays in one
 * thread, in order. Output is the same for any thread count and ISA.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/half.h"
#include "engine/import/import_rvq.h"
#include "engine/quant/kernels.h"

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

int imp_rvq_nearest__ref(const float *cb, const float *x) {
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

/* One stage's codebook in both layouts: cb (K x D) for the scalar search,
 * cbtf (D x K, the same floats) for the AVX2 one's first pass. */
typedef struct stage_cb {
  const float *cb;
  float cbtf[D * K];
  int avx2;
} stage_cb;

static void stage_cb_set(stage_cb *s, const float *cb, int avx2) {
  s->cb = cb;
  s->avx2 = avx2;
  for (int k = 0; k < K; k++)
    for (int j = 0; j < D; j++) s->cbtf[j * K + k] = cb[k * D + j];
}

static int use_avx2(void) {
#if defined(__x86_64__)
  return spill_k_isa() >= SPILL_ISA_AVX2;
#else
  return 0;
#endif
}

static int nearest(const stage_cb *s, const float *x) {
#if defined(__x86_64__)
  if (s->avx2) return imp_rvq_nearest__avx2(s->cb, s->cbtf, x);
#endif
  return imp_rvq_nearest__ref(s->cb, x);
}

int imp_rvq_threads(int requested) {
  if (requested > 0) return requested > 64 ? 64 : requested;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Runs fn(ctx, lo, hi) over [0, n) cut into `threads` contiguous ranges, the
 * first in the calling thread. A thread that cannot start runs its range
 * here instead: the ranges, not the threads, decide the results. */
typedef void (*range_fn)(void *ctx, size_t lo, size_t hi);
typedef struct range_job {
  range_fn fn;
  void *ctx;
  size_t lo, hi;
  pthread_t tid;
  int started;
} range_job;

static void *range_main(void *a) {
  range_job *j = a;
  j->fn(j->ctx, j->lo, j->hi);
  return NULL;
}

static void par_for(int threads, size_t n, range_fn fn, void *ctx) {
  if (threads > 64) threads = 64;
  if (threads <= 1 || n < 2 * (size_t)threads) {
    fn(ctx, 0, n);
    return;
  }
  range_job job[64];
  for (int t = 0; t < threads; t++) {
    job[t] = (range_job){fn, ctx, n * (size_t)t / (size_t)threads, n * (size_t)(t + 1) / (size_t)threads, 0, 0};
    if (t > 0) job[t].started = pthread_create(&job[t].tid, NULL, range_main, &job[t]) == 0;
  }
  fn(ctx, job[0].lo, job[0].hi);
  for (int t = 1; t < threads; t++) {
    if (job[t].started) pthread_join(job[t].tid, NULL);
    else fn(ctx, job[t].lo, job[t].hi);
  }
}

/* k-means assignment / residual step over sample vectors [lo, hi). */
typedef struct assign_ctx {
  const stage_cb *s;
  float (*r)[D];
  int *assign;
  int subtract; /* 1: replace r[i] by its residual after the nearest entry */
} assign_ctx;

static void assign_range(void *c, size_t lo, size_t hi) {
  const assign_ctx *a = c;
  for (size_t i = lo; i < hi; i++) {
    const int k = nearest(a->s, a->r[i]);
    a->assign[i] = k;
    if (a->subtract)
      for (int j = 0; j < D; j++) a->r[i][j] -= a->s->cb[k * D + j];
  }
}

/* Lloyd's k-means of the n vectors r into cb (K x D). */
static void kmeans(float (*r)[D], size_t n, uint64_t *rng, float *cb, int *assign, stage_cb *sc,
                   int threads) {
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
    stage_cb_set(sc, cb, sc->avx2);
    assign_ctx ac = {sc, r, assign, 0};
    par_for(threads, n, assign_range, &ac);
    for (size_t i = 0; i < n; i++) { /* sums in sample order, one thread */
      const int a = assign[i];
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

int imp_rvq_train(imp_rvq_sample *s, float *cb, int threads, spill_err *e) {
  const size_t n = s->seen < IMP_RVQ_SAMPLE ? (size_t)s->seen : IMP_RVQ_SAMPLE;
  int *assign = malloc(sizeof(int) * (n ? n : 1));
  stage_cb *sc = malloc(sizeof *sc);
  if (!assign || !sc) {
    free(assign);
    free(sc);
    return spill_err_set(e, SPILL_E_NOMEM, "rvq3: out of memory");
  }
  sc->avx2 = use_avx2();
  threads = imp_rvq_threads(threads);
  uint64_t rng = 0x5DEECE66Dull ^ (uint64_t)n;
  for (int t = 0; t < STAGES; t++) {
    float *c = cb + (size_t)t * K * D;
    kmeans(s->v, n, &rng, c, assign, sc, threads);
    stage_cb_set(sc, c, sc->avx2); /* the residual the next stage learns */
    assign_ctx ac = {sc, s->v, assign, 1};
    par_for(threads, n, assign_range, &ac);
  }
  free(assign);
  free(sc);
  return SPILL_OK;
}

/* One row: its scale, cols/8 x 3 index bytes, and its own squared error
 * and squared weights (summed from 0 for this row). */
static void encode_row(const stage_cb *sc, const float *row, uint64_t cols, uint8_t *idx,
                       uint16_t *scale, double *num, double *den) {
  const float s = imp_rvq_row_scale(row, cols);
  *scale = spill_f32_to_f16(s);
  double nu = 0, de = 0;
  for (uint64_t g = 0; g + D <= cols; g += D) {
    float res[D], rec[D] = {0};
    for (int j = 0; j < D; j++) res[j] = s > 0 ? row[g + j] / s : 0.0f;
    for (int t = 0; t < STAGES; t++) {
      const float *c = sc[t].cb;
      const int a = s > 0 ? nearest(&sc[t], res) : 0;
      idx[(g / D) * STAGES + (uint64_t)t] = (uint8_t)a;
      for (int j = 0; j < D; j++) {
        res[j] -= c[a * D + j];
        rec[j] += c[a * D + j];
      }
    }
    for (int j = 0; j < D; j++) { /* the engine's decode: s * (cb0 + cb1 + cb2) */
      const double w = row[g + j], d = w - (double)s * rec[j];
      nu += d * d;
      de += w * w;
    }
  }
  *num = nu;
  *den = de;
}

typedef struct encode_ctx {
  const stage_cb *sc;
  const float *m;
  uint64_t cols;
  uint8_t *idx, *scales;
  double *num, *den; /* per row */
} encode_ctx;

static void encode_range(void *c, size_t lo, size_t hi) {
  const encode_ctx *x = c;
  const uint64_t per = (x->cols / D) * STAGES;
  for (size_t r = lo; r < hi; r++) {
    uint16_t s16;
    encode_row(x->sc, x->m + r * x->cols, x->cols, x->idx + r * per, &s16, &x->num[r], &x->den[r]);
    memcpy(x->scales + 2 * r, &s16, 2); /* scales need not be 2-byte aligned */
  }
}

int imp_rvq_encode_rows(const float *cb, const float *m, uint64_t rows, uint64_t cols, uint8_t *idx,
                        uint8_t *scales, double *num, double *den, int threads, spill_err *e) {
  stage_cb *sc = malloc(sizeof(stage_cb) * STAGES);
  double *part = malloc(sizeof(double) * 2 * (rows ? rows : 1));
  if (!sc || !part) {
    free(sc);
    free(part);
    return spill_err_set(e, SPILL_E_NOMEM, "rvq3: out of memory");
  }
  const int avx2 = use_avx2();
  for (int t = 0; t < STAGES; t++) stage_cb_set(&sc[t], cb + (size_t)t * K * D, avx2);
  encode_ctx x = {sc, m, cols, idx, scales, part, part + rows};
  par_for(imp_rvq_threads(threads), (size_t)rows, encode_range, &x);
  for (uint64_t r = 0; r < rows; r++) { /* in row order, whatever the threads */
    *num += part[r];
    *den += part[rows + r];
  }
  free(sc);
  free(part);
  return SPILL_OK;
}
