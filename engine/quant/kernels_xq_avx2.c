/* engine/quant/kernels_xq_avx2.c: AVX2 integer-activation matvec
 * (kernels_xq.h). Byte products with vpmaddubsw (unsigned x signed, no
 * saturation possible at these ranges: |pair| <= 2*63*127), widened with
 * vpmaddwd, summed exactly in int32; the f32 scaling follows the order
 * kernels_xq.h fixes, so results equal spill_k_matvec_xq__ref bit for bit.
 * Compiled with -mavx2 -mfma; called only after CPUID.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"
#include "engine/quant/kernels_xq.h"
#include "engine/quant/kernels_xq_rows.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static float f16(uint16_t h) { return _cvtsh_ss(h); }

/* The 8 6-bit scales and 8 mins of a Q4_K block's 12 scale bytes at p
 * (ggml's get_scale_min_k4 for j = 0..7) as int16: scales in *sc (in both
 * 128-bit lanes), mins in *mn. With a, b, c the three 32-bit words: scales
 * 0-3 = a & 0x3f.., 4-7 = (c & 0x0f..) | (a >> 6 & 3..) << 4; mins 0-3 = b &
 * 0x3f.., 4-7 = (c >> 4 & 0x0f..) | (b >> 6 & 3..) << 4, done in one xmm.
 * Reads 16 bytes at p (the block continues past the scales). */
static inline __attribute__((always_inline)) void scales_mins(const uint8_t *p, __m256i *sc, __m128i *mn) {
  const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);         /* a b c . */
  const __m128i low = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), _mm_setr_epi32(0, 0, 0, 4)); /* a c b c>>4 */
  const __m128i lm = _mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, 0x40), 2), /* . a . b, >> 6 << 4 */
                                   _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  const __m256i w = _mm256_cvtepu8_epi16(_mm_or_si128(lm, hi)); /* s0-7 | m0-7 */
  *sc = _mm256_permute4x64_epi64(w, 0x44);
  *mn = _mm256_extracti128_si256(w, 1);
}

/* int16 element t of each 128-bit lane of v, in every int16 of that lane. */
static inline __m256i pick16(__m256i v, int t_lo, int t_hi) {
  const __m256i m = _mm256_set_m128i(_mm_set1_epi16((short)(2 * t_hi | (2 * t_hi + 1) << 8)),
                                     _mm_set1_epi16((short)(2 * t_lo | (2 * t_lo + 1) << 8)));
  return _mm256_shuffle_epi8(v, m);
}

/* Sub-blocks 2j (low nibbles of the 32 bytes at qs) and 2j+1 (high
 * nibbles) of a q4_k/q5_k block times x, scaled by the int16 scales sc:
 * int32 lane k of the result is the lane-k part of kernels_xq.h's S_k. With
 * five, bit 2j / 2j+1 of qh (the q5_k high bits) adds 16. */
static inline __attribute__((always_inline)) __m256i q45k_pair(const uint8_t *qs, const int8_t *x,
                                                               __m256i sc, __m256i qh, int j,
                                                               int five) {
  const __m256i m4 = _mm256_set1_epi8(0xF), q = load32(qs);
  __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if (five) {
    const __m256i h16 = _mm256_set1_epi8(16);
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j), 4), h16));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * j + 1), 4), h16));
  }
  const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(x)), pick16(sc, 2 * j, 2 * j));
  const __m256i phi =
      _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(x + 32)), pick16(sc, 2 * j + 1, 2 * j + 1));
  return _mm256_add_epi32(plo, phi);
}

/* q4_k (five = 0) or q5_k, in the lane order of kernels_xq.h. */
static inline __attribute__((always_inline)) float q45k(const uint8_t *row, const spill_k_xq *xq,
                                                        uint32_t cols, int five) {
  const size_t bb = spill_dtype_traits_of(five ? SPILL_DT_Q5_K : SPILL_DT_Q4_K)->block_bytes;
  __m256 acc = _mm256_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb, *qs = blk + (five ? 48 : 16);
    const __m256i qh = five ? load32(blk + 16) : _mm256_setzero_si256();
    const int8_t *x = xq->q256 + (size_t)b * 256;
    const int16_t *bs = xq->bsum + (size_t)b * 16;
    __m256i sc;
    __m128i mn;
    scales_mins(blk + 4, &sc, &mn);
    const __m128i bsp = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(const void *)bs),
                                       _mm_loadu_si128((const __m128i *)(const void *)(bs + 8)));
    const __m128i ml = _mm_madd_epi16(mn, bsp); /* M_0..M_3 */
    __m256i sumv = q45k_pair(qs, x, sc, qh, 0, five);
    sumv = _mm256_add_epi32(sumv, q45k_pair(qs + 32, x + 64, sc, qh, 1, five));
    sumv = _mm256_add_epi32(sumv, q45k_pair(qs + 64, x + 128, sc, qh, 2, five));
    sumv = _mm256_add_epi32(sumv, q45k_pair(qs + 96, x + 192, sc, qh, 3, five));
    const float dx = xq->d256[b];
    const float dall = dx * f16(rd16(blk)), dmin = dx * f16(rd16(blk + 2));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dall), _mm256_cvtepi32_ps(sumv), acc);
    accm = _mm_fmadd_ps(_mm_set1_ps(-dmin), _mm_cvtepi32_ps(ml), accm);
  }
  accm = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
  accm = _mm_add_ss(accm, _mm_movehdup_ps(accm));
  return spill_k_hsum8(acc) + _mm_cvtss_f32(accm);
}

static float row_q45k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols, int five) {
  return five ? q45k(row, xq, cols, 1) : q45k(row, xq, cols, 0);
}

/* The q6_k values (0..63) of elements 128 half + 32 k + l (l = 0..31): low
 * nibbles from a (k = 0) / c (1) or their high nibbles (2, 3), bits 2k, 2k+1 of h. */
static inline __attribute__((always_inline)) __m256i q6_vals(__m256i a, __m256i c, __m256i h, int k) {
  const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
  const __m256i src = k & 1 ? c : a;
  const __m256i lo = _mm256_and_si256(k & 2 ? _mm256_srli_epi16(src, 4) : src, m4);
  return _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * k), m3), 4));
}

/* Chunk k of a q6_k half-block: int32 lanes of sc_g q x, q unsigned
 * (groups 8 half + 2k in the low lane, + 1 in the high lane; sv holds that
 * half's 8 scales as int16 in both lanes). */
static inline __attribute__((always_inline)) __m256i q6_chunk(__m256i q, const int8_t *x, __m256i sv, int k) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(x)), pick16(sv, 2 * k, 2 * k + 1));
}

static inline __attribute__((always_inline)) __m256i q6_half(const uint8_t *blk, const int8_t *x, __m256i sc16,
                                                             int half) {
  const __m256i a = load32(blk + 64 * half), c = load32(blk + 64 * half + 32);
  const __m256i h = load32(blk + 128 + 32 * half);
  const __m256i sv = half ? _mm256_permute4x64_epi64(sc16, 0xEE) : _mm256_permute4x64_epi64(sc16, 0x44);
  x += 128 * half;
  __m256i s = q6_chunk(q6_vals(a, c, h, 0), x, sv, 0);
  s = _mm256_add_epi32(s, q6_chunk(q6_vals(a, c, h, 1), x + 32, sv, 1));
  s = _mm256_add_epi32(s, q6_chunk(q6_vals(a, c, h, 2), x + 64, sv, 2));
  return _mm256_add_epi32(s, q6_chunk(q6_vals(a, c, h, 3), x + 96, sv, 3));
}

static int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static float row_q6k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols) {
  const size_t bb = spill_dtype_traits_of(SPILL_DT_Q6_K)->block_bytes;
  float acc = 0.0f;
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb;
    const int8_t *x = xq->q256 + (size_t)b * 256;
    /* the 16 int8 scales as int16: s0..s7 | s8..s15 */
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
    /* the -32 offset: 32 sum_g sc_g B_g, B the 16-element sums */
    const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(load32(xq->bsum + (size_t)b * 16), sc16), 5);
    const __m256i sumv =
        _mm256_sub_epi32(_mm256_add_epi32(q6_half(blk, x, sc16, 0), q6_half(blk, x, sc16, 1)), off);
    acc += (xq->d256[b] * f16(rd16(blk + 208))) * (float)hsum_i32(sumv);
  }
  return acc;
}

/* One 32-block: lane k of an int32 vector (sum_{e=4k..4k+3} w_e x_e) into
 * the row's f32 lanes with one FMA. */
static inline __m256 fma_block(__m256i lanes, float d, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
}

/* q8: |w| unsigned times x with w's sign (the same products, no saturation). */
static inline __m256i lanes_q8(const uint8_t *w, __m256i xv) {
  const __m256i wv = load32(w);
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* q4 (element 2i in the low nibble of byte i, 2i+1 in the high one): the
 * 16 bytes at w as unsigned nibbles ordered lo b2k, lo b2k+1, hi b2k, hi
 * b2k+1 (elements 4k, 4k+2, 4k+1, 4k+3) for k = 0..7, times x in that order
 * (xp, see rows4), minus 8 x (x8: 8 sum_{e=4k..4k+3} x_e): sum (w - 8) x. */
static inline __m256i lanes_q4(const uint8_t *w, __m256i xp, __m256i x8) {
  const __m256i dup = _mm256_setr_epi8(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7, 8, 9, 8, 9, 10, 11, 10, 11,
                                       12, 13, 12, 13, 14, 15, 14, 15);
  const __m256i a = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)w)), dup);
  const __m256i nib = _mm256_and_si256(_mm256_blend_epi16(a, _mm256_srli_epi16(a, 4), 0xAA), _mm256_set1_epi8(0xF));
  return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(nib, xp), _mm256_set1_epi16(1)), x8);
}

/* Rows r..r+3 of a q8 (q4 = 0) or q4 matrix in one pass: each activation
 * block is loaded (and for q4 reordered) once for the four rows, and the
 * four independent lane accumulators (one per row, each in the order of
 * kernels_xq.h) keep the FMA chains from serialising. n < 4 repeats row
 * r+n-1; only n are stored. */
static inline __attribute__((always_inline)) void rows4(const spill_qmat *w, const spill_k_xq *xq,
                                                        float *y, uint32_t r, uint32_t n, int q4) {
  const uint32_t cols = w->cols, g = w->group, ng = cols / g, bb = q4 ? 16 : 32;
  const size_t rb = q4 ? cols / 2 : cols;
  const __m256i perm = _mm256_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15, 0, 2, 1, 3, 4, 6, 5,
                                        7, 8, 10, 9, 11, 12, 14, 13, 15);
  const uint8_t *row[4];
  const spill_k_u16_unaligned *s[4];
  for (uint32_t i = 0; i < 4; i++) {
    const uint32_t ri = r + (i < n ? i : n - 1);
    row[i] = (const uint8_t *)w->data + (size_t)ri * rb;
    s[i] = w->scales + (size_t)ri * ng;
  }
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (uint32_t b0 = 0, gi = 0; b0 < cols / 32; b0 += g / 32, gi++) {
    const float s0 = f16(s[0][gi]), s1 = f16(s[1][gi]), s2 = f16(s[2][gi]), s3 = f16(s[3][gi]);
    for (uint32_t b = b0; b < b0 + g / 32; b++) {
      const __m256i xv = load32(xq->q32 + 32 * b);
      const float dx = xq->d32[b];
      if (q4) {
        const __m256i xp = _mm256_shuffle_epi8(xv, perm);
        const __m256i x8 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), xv), _mm256_set1_epi16(1));
        a0 = fma_block(lanes_q4(row[0] + bb * b, xp, x8), s0 * dx, a0);
        a1 = fma_block(lanes_q4(row[1] + bb * b, xp, x8), s1 * dx, a1);
        a2 = fma_block(lanes_q4(row[2] + bb * b, xp, x8), s2 * dx, a2);
        a3 = fma_block(lanes_q4(row[3] + bb * b, xp, x8), s3 * dx, a3);
      } else {
        a0 = fma_block(lanes_q8(row[0] + bb * b, xv), s0 * dx, a0);
        a1 = fma_block(lanes_q8(row[1] + bb * b, xv), s1 * dx, a1);
        a2 = fma_block(lanes_q8(row[2] + bb * b, xv), s2 * dx, a2);
        a3 = fma_block(lanes_q8(row[3] + bb * b, xv), s3 * dx, a3);
      }
    }
  }
  const float v[4] = {spill_k_hsum8(a0), spill_k_hsum8(a1), spill_k_hsum8(a2), spill_k_hsum8(a3)};
  for (uint32_t i = 0; i < n; i++) y[r + i] = v[i];
}

/* max |x| over n (a multiple of 8) floats, or -1 if one is not finite. */
static float amax_finite(const float *x, int n) {
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = _mm256_set1_ps(3.4028235e38f);
  __m256 m = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int i = 0; i < n; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), absm);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, big, _CMP_LE_OQ)); /* false for inf and NaN */
    m = _mm256_max_ps(m, a);
  }
  if (_mm256_movemask_ps(ok) != 0xff) return -1.0f;
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/* 32 values rint(x_i * s) as int8, in order, saturated as kernels_xq_ref.c's
 * sat8 (NaN and beyond int32 to -128); with top, min(127, .) first (a NaN
 * stays NaN: minps returns its second operand then). */
static __m256i round32(const float *x, float s, int top) {
  const __m256 vs = _mm256_set1_ps(s), k127 = _mm256_set1_ps(127.0f);
  __m256i r[4];
  for (int i = 0; i < 4; i++) {
    __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), vs),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (top) v = _mm256_min_ps(k127, v);
    r[i] = _mm256_cvtps_epi32(v);
  }
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Q8_0 as kernels_xq_ref.c's quant_q8_0 (and the Q8_1 sum). */
static void quant_q8_0(const float *x, int8_t *q, float *d, float *s) {
  const float amax = amax_finite(x, 32);
  if (amax < 0.0f) {
    memset(q, 0, 32);
    *d = NAN;
    *s = NAN;
    return;
  }
  *d = spill_f16_to_f32(spill_f32_to_f16(amax / 127.0f));
  const __m256i v = round32(x, amax != 0.0f ? 127.0f / amax : 0.0f, 0);
  _mm256_storeu_si256((__m256i *)(void *)q, v);
  /* sum of 32 int8: vpsadbw on the biased bytes, minus 32 x 128 */
  const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
  const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
  const int sum = (int)(_mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1)) - 32 * 128;
  *s = spill_q8_1_sum(amax, sum);
}

/* Q8_K as kernels_xq_ref.c's quant_q8_k: the first element of largest |x|
 * sets the scale; 16-element sums by vpsadbw on the biased bytes. */
static void quant_q8_k(const float *x, int8_t *q, float *d, int16_t *bs) {
  const float amax = amax_finite(x, 256);
  if (amax <= 0.0f) {
    memset(q, 0, 256);
    memset(bs, 0, 16 * sizeof *bs);
    *d = amax == 0.0f ? 0.0f : NAN;
    return;
  }
  const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), va = _mm256_set1_ps(amax);
  int first = 0;
  for (int i = 0; i < 256; i += 8) {
    const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absm), va, _CMP_EQ_OQ));
    if (m) {
      first = i + __builtin_ctz((unsigned)m);
      break;
    }
  }
  const float iscale = -127.0f / x[first];
  const __m256i bias = _mm256_set1_epi8((char)0x80);
  for (int i = 0; i < 256; i += 32) {
    const __m256i v = round32(x + i, iscale, 1);
    _mm256_storeu_si256((__m256i *)(void *)(q + i), v);
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, bias), _mm256_setzero_si256());
    bs[i / 16] = (int16_t)(_mm256_extract_epi64(sad, 0) + _mm256_extract_epi64(sad, 1) - 16 * 128);
    bs[i / 16 + 1] = (int16_t)(_mm256_extract_epi64(sad, 2) + _mm256_extract_epi64(sad, 3) - 16 * 128);
  }
  *d = 1.0f / iscale;
}

void spill_k_xq_quantize__avx2(const float *x, spill_k_xq *xq) {
  spill_k_xq_blocks(x, xq, quant_q8_0, quant_q8_k);
}

/* One q8 row: the same lane accumulation as rows4's, but one stream of
 * weights at a time. On a matrix streamed from DRAM (the Q8_0 trunk of a
 * fitted model) four rows and their four scale arrays at once ran at about
 * half the bytes/s of one row (6-layer Qwen3-30B-A3B-shaped file, 1 thread:
 * 45-49 -> 25-28 ms per token, docs/PERFORMANCE.md); q4 keeps rows4. */
static void row1_q8(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r) {
  const uint32_t cols = w->cols, g = w->group, ng = cols / g;
  const uint8_t *row = (const uint8_t *)w->data + (size_t)r * cols;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * ng;
  __m256 a = _mm256_setzero_ps();
  for (uint32_t b0 = 0, gi = 0; b0 < cols / 32; b0 += g / 32, gi++) {
    const float s0 = f16(s[gi]);
    for (uint32_t b = b0; b < b0 + g / 32; b++)
      a = fma_block(lanes_q8(row + 32 * b, load32(xq->q32 + 32 * b)), s0 * xq->d32[b], a);
  }
  y[r] = spill_k_hsum8(a);
}

/* The table's rows (kernels_isa.h): q8 rows one per pass, q4 rows four
 * per pass; a K-quant row starts at r x its blocks' bytes. */
void spill_k_matvec_q8_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) row1_q8(w, xq, y, r);
}

void spill_k_matvec_q4_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r += 4) {
    const uint32_t n = r1 - r < 4 ? r1 - r : 4;
    rows4(w, xq, y, r, n, 1);
  }
}

static const uint8_t *kq_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / 256) * spill_dtype_traits_of(w->dtype)->block_bytes;
}

void spill_k_matvec_q4_k_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q45k(kq_row(w, r), xq, w->cols, 0);
}

void spill_k_matvec_q5_k_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q45k(kq_row(w, r), xq, w->cols, 1);
}

void spill_k_matvec_q6_k_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q6k(kq_row(w, r), xq, w->cols);
}
