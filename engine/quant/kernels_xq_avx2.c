/* engine/quant/kernels_xq_avx2.c: AVX2 integer-activation matvec
 * (kernels_xq.h). Byte products with vpmaddubsw (unsigned x signed, no
 * saturation possible at these ranges: |pair| <= 2*63*127), widened with
 * vpmaddwd, summed exactly in int32; the f32 scaling follows the order
 * kernels_xq.h fixes, so results equal spill_k_matvec_xq__ref bit for bit.
 * Compiled with -mavx2 -mfma; called only after CPUID.
 */
#include <immintrin.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"
#include "engine/quant/kernels_xq.h"
#include "engine/quant/kernels_xq_rows.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The 8 6-bit scales and 8 mins of a Q4_K block's 12 scale bytes (ggml's
 * get_scale_min_k4 for j = 0..7, by 32-bit masks) into sc[0..8), mn[0..8). */
static void scales_mins(const uint8_t *p, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t a, b, c;
  memcpy(&a, p, 4);
  memcpy(&b, p + 4, 4);
  memcpy(&c, p + 8, 4);
  const uint32_t s0 = a & 0x3f3f3f3fu, m0 = b & 0x3f3f3f3fu;
  const uint32_t s1 = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t m1 = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
  memcpy(sc, &s0, 4);
  memcpy(sc + 4, &s1, 4);
  memcpy(mn, &m0, 4);
  memcpy(mn + 4, &m1, 4);
}

/* q4_k, or q5_k with five (the high bit of element 64j+l is bit 2j of
 * qh[l], of element 64j+32+l bit 2j+1: added as 16 before the products). */
static float row_q45k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols, int five) {
  const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
  const size_t bb = five ? 176 : 144;
  float acc = 0.0f;
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb, *qs = blk + (five ? 48 : 16);
    const __m256i qh = five ? load32(blk + 16) : _mm256_setzero_si256();
    const int8_t *x = xq->q256 + (size_t)b * 256;
    const int16_t *bs = xq->bsum + (size_t)b * 16;
    uint8_t sc[8], mn[8];
    scales_mins(blk + 4, sc, mn);
    /* sum_j m_j (bsum[2j] + bsum[2j+1]) */
    const __m128i bsp = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs),
                                       _mm_loadu_si128((const __m128i *)(const void *)(bs + 8)));
    const __m128i mm = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)mn));
    __m128i ms = _mm_madd_epi16(mm, bsp);
    ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0x4E));
    ms = _mm_add_epi32(ms, _mm_shuffle_epi32(ms, 0xB1));
    const int32_t summs = _mm_cvtsi128_si32(ms);
    __m256i sumv = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
      const __m256i q = load32(qs + 32 * j);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if (five) { /* (qh >> 2j) & 1, (qh >> 2j+1) & 1, times 16, per byte */
        const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j + 1)), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
      }
      const __m256i plo = _mm256_maddubs_epi16(lo, load32(x + 64 * j));
      const __m256i phi = _mm256_maddubs_epi16(hi, load32(x + 64 * j + 32));
      sumv = _mm256_add_epi32(sumv, _mm256_madd_epi16(plo, _mm256_set1_epi16((short)sc[2 * j])));
      sumv = _mm256_add_epi32(sumv, _mm256_madd_epi16(phi, _mm256_set1_epi16((short)sc[2 * j + 1])));
    }
    const int32_t sumi = hsum_i32(sumv);
    const float dx = xq->d256[b];
    const float dall = dx * spill_f16_to_f32(rd16(blk)), dmin = dx * spill_f16_to_f32(rd16(blk + 2));
    acc += dall * (float)sumi;
    acc -= dmin * (float)summs;
  }
  return acc;
}

static float row_q6k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
  float acc = 0.0f;
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * 210;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const int8_t *x = xq->q256 + (size_t)b * 256;
    const int16_t *bs = xq->bsum + (size_t)b * 16;
    int32_t off = 0; /* sum_g sc_g * 32 * sum x over group g */
    for (int g = 0; g < 16; g++) off += sc[g] * bs[g];
    __m256i sumv = _mm256_setzero_si256();
    for (int half = 0; half < 2; half++) {
      const __m256i a = load32(blk + 64 * half), c = load32(blk + 64 * half + 32);
      const __m256i h = load32(blk + 128 + 32 * half);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_slli_epi16(_mm256_and_si256(h, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(c, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m3), 4));
      for (int k = 0; k < 4; k++) {
        const int g = 8 * half + 2 * k; /* 16-element groups g (low lane) and g+1 (high lane) */
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
        const __m256i p = _mm256_maddubs_epi16(q[k], load32(x + 128 * half + 32 * k));
        sumv = _mm256_add_epi32(sumv, _mm256_madd_epi16(p, s));
      }
    }
    const int32_t sumi = hsum_i32(sumv) - 32 * off;
    acc += (xq->d256[b] * spill_f16_to_f32(rd16(blk + 208))) * (float)sumi;
  }
  return acc;
}

static float f16(uint16_t h) { return _cvtsh_ss(h); }

/* One 32-block: lanes k = sum_{e=4k..4k+3} w_e x_e (|w| unsigned times x
 * with w's sign: the same products, no saturation), then one FMA. */
static inline __m256 block32(__m256i wv, const int8_t *xq, float d, __m256 acc) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(load32(xq), wv));
  const __m256i lanes = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

static float row_q8(const spill_qmat *w, uint32_t r, const spill_k_xq *xq) {
  const uint32_t cols = w->cols, g = w->group;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * (cols / g);
  const int8_t *q = (const int8_t *)w->data + (size_t)r * cols;
  __m256 acc = _mm256_setzero_ps();
  for (uint32_t b0 = 0, gi = 0; b0 < cols / 32; b0 += g / 32, gi++) {
    const float sw = f16(s[gi]);
    for (uint32_t b = b0; b < b0 + g / 32; b++)
      acc = block32(load32(q + 32 * b), xq->q32 + 32 * b, sw * xq->d32[b], acc);
  }
  return spill_k_hsum8(acc);
}

/* q4 rows: element 2i in the low nibble of byte i, 2i+1 in the high one. */
static float row_q4(const spill_qmat *w, uint32_t r, const spill_k_xq *xq) {
  const uint32_t cols = w->cols, g = w->group;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * (cols / g);
  const uint8_t *q = (const uint8_t *)w->data + (size_t)r * cols / 2;
  const __m128i m4 = _mm_set1_epi8(0xF);
  const __m256i k8 = _mm256_set1_epi8(8);
  __m256 acc = _mm256_setzero_ps();
  for (uint32_t b0 = 0, gi = 0; b0 < cols / 32; b0 += g / 32, gi++) {
    const float sw = f16(s[gi]);
    for (uint32_t b = b0; b < b0 + g / 32; b++) {
      const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(q + 16 * b));
      const __m128i lo = _mm_and_si128(v, m4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
      const __m256i wv = _mm256_sub_epi8(
          _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)), k8);
      acc = block32(wv, xq->q32 + 32 * b, sw * xq->d32[b], acc);
    }
  }
  return spill_k_hsum8(acc);
}

/* q8 or q4 row, as kernels_xq_rows.h takes it. */
static float row_q8q4(const spill_qmat *w, uint32_t r, const spill_k_xq *xq) {
  return w->dtype == SPILL_K_DT_Q8 ? row_q8(w, r, xq) : row_q4(w, r, xq);
}

void spill_k_matvec_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                             uint32_t r1) {
  spill_k_xq_rows(w, xq, y, r0, r1, row_q45k, row_q6k, row_q8q4);
}
