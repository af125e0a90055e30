/* engine/import/import_rvq_avx2.c: the AVX2 twin of the rvq3 encoder's
 * nearest-entry search (imp_rvq_nearest__ref in import_rvq.c), returning
 * the reference's index bit for bit, about 3x fewer vector operations than
 * computing the reference's double distances 4 at a time.
 *
 * Filter, then decide exactly. Pass 1 computes every squared distance in
 * f32, 8 entries per __m256 (sub + FMA). A float distance differs from the
 * exact one by at most gamma_10 = 10u/(1-10u) ~ 6e-7 relative (u = 2^-24:
 * one rounding in x - c, one in the square, seven in the sum) plus ~30 x
 * 2^-150 absolute if it underflows, and the reference's double distance is
 * 1e-15-close to the exact one, so every entry whose double distance is the
 * minimum has float distance <= m (1 + 2^-14) + 1e-36, m the float minimum.
 * Pass 2 recomputes those candidates (usually one or two) with the
 * reference's own double arithmetic and order (d = 0; d += t * t, no FMA:
 * -ffp-contract=off in BUILD) and keeps the first minimum in index order,
 * which is the reference's answer. No candidate (NaN input) or an infinite
 * minimum: the full reference scan. Built only on x86-64 (BUILD).
 */
#include <immintrin.h>
#include <math.h>

#include "engine/import/import_rvq.h"

enum { D = SPILL_RVQ_DIM, K = SPILL_RVQ_ENTRIES };

static double exact(const float *cb, int k, const float *x) { /* the reference's distance */
  double d = 0;
  for (int j = 0; j < D; j++) {
    double t = (double)x[j] - cb[k * D + j];
    d += t * t;
  }
  return d;
}

int imp_rvq_nearest__avx2(const float *cb, const float *cbtf, const float *x) {
  __m256 xb[D];
  for (int j = 0; j < D; j++) xb[j] = _mm256_set1_ps(x[j]);
  float df[K];
  __m256 mn = _mm256_set1_ps(INFINITY);
  for (int k = 0; k < K; k += 16) {
    __m256 d0 = _mm256_setzero_ps(), d1 = _mm256_setzero_ps();
    for (int j = 0; j < D; j++) {
      const __m256 t0 = _mm256_sub_ps(xb[j], _mm256_loadu_ps(cbtf + j * K + k));
      const __m256 t1 = _mm256_sub_ps(xb[j], _mm256_loadu_ps(cbtf + j * K + k + 8));
      d0 = _mm256_fmadd_ps(t0, t0, d0);
      d1 = _mm256_fmadd_ps(t1, t1, d1);
    }
    _mm256_storeu_ps(df + k, d0);
    _mm256_storeu_ps(df + k + 8, d1);
    mn = _mm256_min_ps(mn, _mm256_min_ps(d0, d1)); /* NaN distances drop out */
  }
  float m8[8];
  _mm256_storeu_ps(m8, mn);
  float m = m8[0];
  for (int i = 1; i < 8; i++) m = m8[i] < m ? m8[i] : m;
  if (!(m < INFINITY)) return imp_rvq_nearest__ref(cb, x);
  const __m256 thr = _mm256_set1_ps((float)((double)m * (1.0 + 1.0 / 16384) + 1e-36));
  int best = -1;
  double bd = INFINITY;
  for (int k = 0; k < K; k += 8) {
    unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(df + k), thr, _CMP_LE_OQ));
    while (mask) {
      const int kk = k + __builtin_ctz(mask);
      mask &= mask - 1;
      const double d = exact(cb, kk, x);
      if (d < bd) {
        bd = d;
        best = kk;
      }
    }
  }
  return best >= 0 ? best : imp_rvq_nearest__ref(cb, x);
}
