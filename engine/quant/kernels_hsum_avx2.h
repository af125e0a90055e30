/* engine/quant/kernels_hsum_avx2.h: the one fixed-order horizontal sum of
 * 8 f32 lanes, ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), shared by the AVX2 and
 * AVX-512 kernel files so their reductions stay bit-identical to each
 * other's. Internal to engine/quant; include only from files compiled
 * with -mavx2 (or an ISA that implies it).
 */
#ifndef SPILL_QUANT_KERNELS_HSUM_AVX2_H
#define SPILL_QUANT_KERNELS_HSUM_AVX2_H

#include <immintrin.h>

static inline float spill_k_hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#endif
