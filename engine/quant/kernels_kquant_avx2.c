/* engine/quant/kernels_kquant_avx2.c: AVX2 + FMA K-quant row dot products.
 * Each group of 8 weights is rebuilt exactly as the scalar dequantiser does
 * (the same f32 products: d*sc then *q, minus d*min), widened from bytes with
 * vpmovzx, and accumulated with one FMA per 8 lanes; only the summation order
 * differs from __ref. Compiled with -mavx2 -mfma; called only after CPUID.
 */
#include <immintrin.h>

#include "engine/base/half.h"
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_kquant.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/* 8 unsigned bytes -> 8 int32 lanes */
static __m256i u8x8(const uint8_t *p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
}

static __m256 q45_block(int five, const uint8_t *b, const float *x, __m256 acc) {
  const float d = spill_f16_to_f32(rd16(b)), min = spill_f16_to_f32(rd16(b + 2));
  const uint8_t *sc = b + 4, *qh = b + 16, *q = five ? b + 48 : b + 16;
  const __m256i m4 = _mm256_set1_epi32(0xF), sixteen = _mm256_set1_epi32(16);
  int is = 0, sh = 0;
  for (int j = 0; j < 256; j += 64, q += 32, is += 2, sh += 2) {
    uint8_t s, m;
    scale_min_k4(is + 0, sc, &s, &m);
    const __m256 d1 = _mm256_set1_ps(d * s), m1 = _mm256_set1_ps(min * m);
    scale_min_k4(is + 1, sc, &s, &m);
    const __m256 d2 = _mm256_set1_ps(d * s), m2 = _mm256_set1_ps(min * m);
    for (int l = 0; l < 32; l += 8) {
      __m256i v = u8x8(q + l);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_srli_epi32(v, 4);
      if (five) {
        __m256i h = u8x8(qh + l);
        lo = _mm256_add_epi32(lo, _mm256_and_si256(_mm256_slli_epi32(_mm256_srli_epi32(h, sh), 4), sixteen));
        hi = _mm256_add_epi32(hi, _mm256_and_si256(_mm256_slli_epi32(_mm256_srli_epi32(h, sh + 1), 4), sixteen));
      }
      /* w = d1 * q - m1, rounded as the scalar code (no fused multiply-subtract) */
      __m256 w0 = _mm256_sub_ps(_mm256_mul_ps(d1, _mm256_cvtepi32_ps(lo)), m1);
      __m256 w1 = _mm256_sub_ps(_mm256_mul_ps(d2, _mm256_cvtepi32_ps(hi)), m2);
      acc = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j + l), acc);
      acc = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 32 + l), acc);
    }
  }
  return acc;
}

static __m256 q6_block(const uint8_t *b, const float *x, __m256 acc) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  const float d = spill_f16_to_f32(rd16(b + 208));
  const __m256i m4 = _mm256_set1_epi32(0xF), m3 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; l += 8) {
      const int is = l / 16;
      __m256i a = u8x8(ql + l), c = u8x8(ql + l + 32), h = u8x8(qh + l);
      __m256i q1 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi32(_mm256_and_si256(h, m3), 4)), k32);
      __m256i q2 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(c, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2), m3), 4)), k32);
      __m256i q3 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 4), m3), 4)), k32);
      __m256i q4 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(c, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 6), m3), 4)), k32);
      const __m256 s1 = _mm256_set1_ps(d * sc[is + 0]), s2 = _mm256_set1_ps(d * sc[is + 2]),
                   s3 = _mm256_set1_ps(d * sc[is + 4]), s4 = _mm256_set1_ps(d * sc[is + 6]);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(s1, _mm256_cvtepi32_ps(q1)), _mm256_loadu_ps(x + n + l), acc);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(s2, _mm256_cvtepi32_ps(q2)), _mm256_loadu_ps(x + n + l + 32), acc);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(s3, _mm256_cvtepi32_ps(q3)), _mm256_loadu_ps(x + n + l + 64), acc);
      acc = _mm256_fmadd_ps(_mm256_mul_ps(s4, _mm256_cvtepi32_ps(q4)), _mm256_loadu_ps(x + n + l + 96), acc);
    }
  }
  return acc;
}

float spill_k_dot_kquant_f32__avx2(int dt, const uint8_t *row, const float *x, uint32_t cols) {
  const uint32_t bb = spill_dtype_traits_of(dt)->block_bytes;
  __m256 acc = _mm256_setzero_ps();
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb;
    const float *xb = x + (size_t)b * 256;
    acc = dt == SPILL_DT_Q6_K ? q6_block(blk, xb, acc) : q45_block(dt == SPILL_DT_Q5_K, blk, xb, acc);
  }
  return spill_k_hsum8(acc);
}
