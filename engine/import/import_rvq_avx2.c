/* engine/import/import_rvq_avx2.c: the AVX2 twin of the rvq3 encoder's
 * nearest-entry search (imp_rvq_nearest__ref in import_rvq.c).
 *
 * Four codebook entries per __m256d, two groups of four in flight. Every
 * distance is the reference's own double arithmetic in its own order
 * (d = 0; d += t * t for j = 0..7, t = (double)x[j] - (double)cb[k][j]):
 * separate multiply and add, never FMA (this file is built with -mavx2
 * only), and the strict "<" scan keeps the first minimum, so the index is
 * bit-for-bit the reference's. Built only on x86-64 (BUILD).
 */
#include <immintrin.h>
#include <math.h>

#include "engine/import/import_rvq.h"

enum { D = SPILL_RVQ_DIM, K = SPILL_RVQ_ENTRIES };

int imp_rvq_nearest__avx2(const double *cbt, const float *x) {
  __m256d xb[D];
  for (int j = 0; j < D; j++) xb[j] = _mm256_set1_pd((double)x[j]);
  __m256d best = _mm256_set1_pd(INFINITY), bidx = _mm256_setzero_pd();
  __m256d idx0 = _mm256_setr_pd(0, 1, 2, 3), idx1 = _mm256_setr_pd(4, 5, 6, 7);
  const __m256d eight = _mm256_set1_pd(8);
  for (int k = 0; k < K; k += 8) {
    __m256d d0 = _mm256_setzero_pd(), d1 = _mm256_setzero_pd();
    for (int j = 0; j < D; j++) {
      const __m256d t0 = _mm256_sub_pd(xb[j], _mm256_loadu_pd(cbt + j * K + k));
      const __m256d t1 = _mm256_sub_pd(xb[j], _mm256_loadu_pd(cbt + j * K + k + 4));
      d0 = _mm256_add_pd(d0, _mm256_mul_pd(t0, t0));
      d1 = _mm256_add_pd(d1, _mm256_mul_pd(t1, t1));
    }
    __m256d m = _mm256_cmp_pd(d0, best, _CMP_LT_OQ); /* entries k..k+3 before k+4..k+7 */
    best = _mm256_blendv_pd(best, d0, m);
    bidx = _mm256_blendv_pd(bidx, idx0, m);
    m = _mm256_cmp_pd(d1, best, _CMP_LT_OQ);
    best = _mm256_blendv_pd(best, d1, m);
    bidx = _mm256_blendv_pd(bidx, idx1, m);
    idx0 = _mm256_add_pd(idx0, eight);
    idx1 = _mm256_add_pd(idx1, eight);
  }
  double b[4], bi[4];
  _mm256_storeu_pd(b, best);
  _mm256_storeu_pd(bi, bidx);
  /* lane l holds the first minimum of entries l, l+4, ...; the global first
   * minimum is the smallest distance, ties to the smallest index (all lanes
   * untouched: index 0, as the reference) */
  int l0 = 0;
  for (int l = 1; l < 4; l++)
    if (b[l] < b[l0] || (b[l] == b[l0] && bi[l] < bi[l0])) l0 = l;
  return (int)bi[l0];
}
