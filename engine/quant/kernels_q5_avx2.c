/* engine/quant/kernels_q5_avx2.c: AVX2 + FMA Q5_0 / Q5_1 matvecs
 * (kernels_q5.h). A block's 32 values come out in element order, one byte
 * each (low nibbles of qs = elements 0..15 in the low 128-bit lane, high
 * nibbles = 16..31 in the high one), the fifth bits spread from qh by one
 * pshufb + compare, as ggml's bytes_from_bits_32.
 * f32 input: values widened to f32 and FMA'd with x (same values as __ref,
 * another summation order). Q8_0 / Q8_1 input: vpmaddubsw (|v| with q
 * given v's sign for Q5_0; u unsigned for Q5_1; no saturation: |pair| <=
 * 2 * 31 * 128) + vpmaddwd give the exact int32 lanes, scaled in the order
 * kernels_q5.h fixes, so the result equals __ref (and ggml's
 * vec_dot_q5_0_q8_0 / vec_dot_q5_1_q8_1) bit for bit. Compiled with -mavx2
 * -mfma -mf16c; called only after CPUID.
 */
#include <immintrin.h>
#include <string.h>

#include "engine/base/dtype_traits.h"
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_q5.h"

static inline float f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8))); }

static inline const uint8_t *q5_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / SPILL_K_Q5_BLOCK) * spill_k_q5_block_bytes(w->dtype);
}

/* The 32 values u (0..31) of the block whose qh starts at qh (qs after it). */
static inline __m256i block_u(const uint8_t *qh) {
  const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(qh + 4)), m4 = _mm_set1_epi8(0xF);
  const __m256i lo4 = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m4), _mm_and_si128(b, m4));
  uint32_t h;
  memcpy(&h, qh, 4);
  /* byte e of the result: 0xFF iff bit e of h is set */
  const __m256i sh = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                         _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                           0x0101010101010101, 0x0000000000000000));
  const __m256i bits = _mm256_cmpeq_epi8(_mm256_or_si256(sh, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                         _mm256_set1_epi64x(-1));
  return _mm256_or_si256(lo4, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)));
}

void spill_k_matvec_q5_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                 uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK, bb = spill_k_q5_block_bytes(w->dtype);
  const int one = w->dtype == SPILL_DT_Q5_1;
  const uint32_t qo = one ? 4 : 2;
  const __m256i bias = _mm256_set1_epi8(one ? 0 : 16);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < nb; b++, p += bb) {
      const float *xb = x + (size_t)b * SPILL_K_Q5_BLOCK;
      const __m256i v = _mm256_sub_epi8(block_u(p + qo), bias);
      const __m128i vlo = _mm256_castsi256_si128(v), vhi = _mm256_extracti128_si256(v, 1);
      const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
      const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
      __m256 g0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vlo)), x0);
      __m256 g1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vlo, 8))), x1);
      g0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(vhi)), x2, g0);
      g1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(vhi, 8))), x3, g1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(p)), _mm256_add_ps(g0, g1), acc);
      if (one) {
        const __m256 sx = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(p + 2)), sx, acc);
      }
    }
    y[r] = spill_k_hsum8(acc);
  }
}

static inline __m256 lanes_f32(__m256i u, __m256i s) {
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

void spill_k_matvec_q5_0_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                  uint32_t r0, uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK;
  const __m256i k16 = _mm256_set1_epi8(16);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    __m256 acc = _mm256_setzero_ps();
    for (uint32_t b = 0; b < nb; b++, p += 22) {
      const __m256i v = _mm256_sub_epi8(block_u(p + 2), k16); /* -16..15 */
      const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(xq->q32 + (size_t)b * 32));
      const __m256 l = lanes_f32(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q, v));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(p) * xq->d32[b]), l, acc);
    }
    y[r] = spill_k_hsum8(acc);
  }
}

void spill_k_matvec_q5_1_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                  uint32_t r0, uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (uint32_t b = 0; b < nb; b++, p += 24) {
      summs = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(f16(p + 2)), _mm_set_ss(xq->s32[b]), _mm_set_ss(summs)));
      const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(xq->q32 + (size_t)b * 32));
      const __m256 l = lanes_f32(block_u(p + 4), q);
      acc = _mm256_fmadd_ps(l, _mm256_set1_ps(f16(p) * xq->d32[b]), acc);
    }
    y[r] = spill_k_hsum8(acc) + summs;
  }
}
