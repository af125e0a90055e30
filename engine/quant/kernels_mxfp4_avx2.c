/* engine/quant/kernels_mxfp4_avx2.c: AVX2 + FMA MXFP4 matvecs
 * (kernels_mxfp4.h). The 16 code bytes of a block become 32 int8 values
 * with one pshufb through the value table (low nibbles = elements 0..15 in
 * the low 128-bit lane, high nibbles = 16..31 in the high one).
 * f32 input: values widened to f32 and FMA'd with x (same values as __ref,
 * another summation order). Q8_0 input: |value| times q with value's sign
 * (vpsignb; no saturation: |pair| <= 2 * 12 * 128) through vpmaddubsw +
 * vpmaddwd gives the exact int32 lanes, scaled in the order kernels_mxfp4.h
 * fixes, so the result equals __ref (and ggml's vec_dot_mxfp4_q8_0) bit for
 * bit. Compiled with -mavx2 -mfma; called only after CPUID.
 */
#include <immintrin.h>

#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_mxfp4.h"

static inline const uint8_t *mx_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / SPILL_K_MXFP4_BLOCK) * SPILL_K_MXFP4_BLOCK_BYTES;
}

/* The 32 int8 values of the block whose codes start at qs. */
static inline __m256i block_values(const uint8_t *qs, __m128i table) {
  const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)qs), m4 = _mm_set1_epi8(0xF);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, m4));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), m4));
  return _mm256_set_m128i(hi, lo);
}

static inline __m128i value_table(void) {
  return _mm_loadu_si128((const __m128i *)(const void *)spill_k_mxfp4_values);
}

void spill_k_matvec_mxfp4_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                    uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_MXFP4_BLOCK;
  const __m128i table = value_table();
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = mx_row(w, r);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < nb; b++, p += SPILL_K_MXFP4_BLOCK_BYTES) {
      const float *xb = x + (size_t)b * SPILL_K_MXFP4_BLOCK;
      const __m256i v = block_values(p + 1, table);
      const __m128i vlo = _mm256_castsi256_si128(v), vhi = _mm256_extracti128_si256(v, 1);
      const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vlo));
      const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vlo, 8)));
      const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vhi));
      const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vhi, 8)));
      __m256 g0 = _mm256_mul_ps(w0, _mm256_loadu_ps(xb));
      __m256 g1 = _mm256_mul_ps(w1, _mm256_loadu_ps(xb + 8));
      g0 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), g0);
      g1 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), g1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(spill_k_e8m0_half(p[0])), _mm256_add_ps(g0, g1), acc);
    }
    y[r] = spill_k_hsum8(acc);
  }
}

/* Lane k (int32) of one block: sum_{e=4k..4k+3} value_e q_e. */
static inline __m256i block_lanes(const uint8_t *blk, const int8_t *q, __m128i table) {
  const __m256i v = block_values(blk + 1, table);
  const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)q);
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(qv, v));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

static inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void spill_k_matvec_mxfp4_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                   uint32_t r0, uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_MXFP4_BLOCK;
  const __m128i table = value_table();
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = mx_row(w, r);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    uint32_t b = 0;
    for (; b + 1 < nb; b += 2) {
      const uint8_t *k0 = p + (size_t)b * SPILL_K_MXFP4_BLOCK_BYTES, *k1 = k0 + SPILL_K_MXFP4_BLOCK_BYTES;
      const __m256i l0 = block_lanes(k0, xq->q32 + (size_t)b * 32, table);
      const __m256i l1 = block_lanes(k1, xq->q32 + (size_t)(b + 1) * 32, table);
      const float d0 = xq->d32[b] * spill_k_e8m0_half(k0[0]);
      const float d1 = xq->d32[b + 1] * spill_k_e8m0_half(k1[0]);
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(d0), _mm256_cvtepi32_ps(l0), a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(l1), a1);
    }
    float sum = spill_k_hsum8(_mm256_add_ps(a0, a1));
    if (b < nb) {
      const uint8_t *blk = p + (size_t)b * SPILL_K_MXFP4_BLOCK_BYTES;
      const int32_t s = hsum_i32(block_lanes(blk, xq->q32 + (size_t)b * 32, table));
      const float d = xq->d32[b] * spill_k_e8m0_half(blk[0]);
      const float t = d * (float)s;
      sum = sum + t;
    }
    y[r] = sum;
  }
}
