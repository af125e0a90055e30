/* engine/quant/kernels_avx2.c: AVX2 + FMA + F16C twins of the kernels.
 *
 * Compiled with -mavx2 -mfma -mf16c in its own cc_library and only called
 * after spill_k_isa_supported(SPILL_ISA_AVX2). Each output row is computed by
 * a fixed instruction sequence that depends only on the row and the matrix
 * shape, never on [r0, r1), so any row split gives bit-identical results.
 *
 * matvec: 8-wide FMA with four accumulators for f32/f16/bf16; q8/q4 keep a
 * vector group sum and fold it into the row accumulator with the group scale
 * (needs group % 8 == 0 for q8, % 16 for q4: the fits functions the kernel
 * table asks before it hands other shapes to __ref).
 * rvq3 apply: two versions. The gather one takes 8 consecutive groups of a
 * row at a time, de-interleaves their 24 index bytes into three vectors of 8
 * stage indices with two pshufb per stage, offsets them by 256 per group and
 * gathers from the LUT (_mm256_i32gather_ps); gathers are slow on AMD Zen,
 * so it is not dispatched. The dispatched one is column-blocked scalar
 * lookups, bit-identical to __ref (see the comment above it).
 * rvq3 matvec (no LUT): dequantise each group from the codebooks and FMA.
 * rvq3 LUT: the codebook of a stage is transposed once per call to (8, 256)
 * so each LUT entry block is eight broadcast-FMAs.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"

static inline __m256 ld_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 ld_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256 ld_bf16(const uint16_t *p) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
static inline float sc_f32(const float *p) { return *p; }
static inline float sc_f16(const uint16_t *p) { return spill_f16_to_f32(*p); }
static inline float sc_bf16(const uint16_t *p) { return spill_bf16_to_f32(*p); }

/* One row of a dense matrix: four 8-wide accumulators over 32 columns, one
 * over the remaining blocks of 8, then a scalar tail. */
#define DENSE_ROW(NAME, T, LD, SC)                                               \
  static float NAME(const T *w, const float *x, uint32_t n) {                   \
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                  \
    uint32_t c = 0;                                                              \
    for (; c + 32 <= n; c += 32) {                                               \
      a0 = _mm256_fmadd_ps(LD(w + c), _mm256_loadu_ps(x + c), a0);               \
      a1 = _mm256_fmadd_ps(LD(w + c + 8), _mm256_loadu_ps(x + c + 8), a1);       \
      a2 = _mm256_fmadd_ps(LD(w + c + 16), _mm256_loadu_ps(x + c + 16), a2);     \
      a3 = _mm256_fmadd_ps(LD(w + c + 24), _mm256_loadu_ps(x + c + 24), a3);     \
    }                                                                            \
    for (; c + 8 <= n; c += 8) a0 = _mm256_fmadd_ps(LD(w + c), _mm256_loadu_ps(x + c), a0); \
    float acc = spill_k_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));  \
    for (; c < n; c++) acc += SC(w + c) * x[c];                                  \
    return acc;                                                                  \
  }

DENSE_ROW(row_f32, float, ld_f32, sc_f32)
DENSE_ROW(row_f16, uint16_t, ld_f16, sc_f16)
DENSE_ROW(row_bf16, uint16_t, ld_bf16, sc_bf16)

static float row_q8(const int8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
                    uint32_t group) {
  __m256 acc = _mm256_setzero_ps();
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    __m256 g0 = _mm256_setzero_ps(), g1 = g0;
    uint32_t c = c0;
    for (; c + 16 <= c0 + group; c += 16) {
      __m128i b = _mm_loadu_si128((const __m128i *)(q + c));
      __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
      __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
      g0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c), g0);
      g1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + 8), g1);
    }
    if (c < c0 + group) { /* group % 16 == 8 */
      __m128i b = _mm_loadl_epi64((const __m128i *)(q + c));
      g0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), _mm256_loadu_ps(x + c), g0);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(spill_f16_to_f32(s[c0 / group])), _mm256_add_ps(g0, g1),
                          acc);
  }
  return spill_k_hsum8(acc);
}

static float row_q4(const uint8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
                    uint32_t group) {
  const __m128i m0f = _mm_set1_epi8(0x0F);
  const __m256i eight = _mm256_set1_epi32(8);
  __m256 acc = _mm256_setzero_ps();
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    __m256 g0 = _mm256_setzero_ps(), g1 = g0;
    for (uint32_t c = c0; c < c0 + group; c += 16) {
      __m128i b = _mm_loadl_epi64((const __m128i *)(q + c / 2));
      __m128i lo = _mm_and_si128(b, m0f);
      __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
      __m128i e = _mm_unpacklo_epi8(lo, hi); /* elements c .. c+15 in order */
      __m256 w0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(e), eight));
      __m256 w1 =
          _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(e, 8)), eight));
      g0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c), g0);
      g1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + 8), g1);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(spill_f16_to_f32(s[c0 / group])), _mm256_add_ps(g0, g1),
                          acc);
  }
  return spill_k_hsum8(acc);
}

/* The per-dtype rows of the kernel table (kernels_isa.h). */
#define AVX2_ROWS(DT, EXPR)                                                                      \
  void spill_k_matvec_##DT##_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0, \
                                       uint32_t r1) {                                            \
    const size_t cols = w->cols;                                                                 \
    for (uint32_t r = r0; r < r1; r++) y[r] = (EXPR);                                            \
  }

AVX2_ROWS(f32, row_f32((const float *)w->data + r * cols, x, (uint32_t)cols))
AVX2_ROWS(f16, row_f16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols))
AVX2_ROWS(bf16, row_bf16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols))
AVX2_ROWS(q8, row_q8((const int8_t *)w->data + r * cols, w->scales + r * (cols / w->group), x,
                     (uint32_t)cols, w->group))
AVX2_ROWS(q4, row_q4((const uint8_t *)w->data + r * cols / 2, w->scales + r * (cols / w->group), x,
                     (uint32_t)cols, w->group))
AVX2_ROWS(kquant, spill_k_dot_kquant_f32__avx2(
                      w->dtype,
                      (const uint8_t *)w->data +
                          r * ((cols / 256) * spill_dtype_traits_of(w->dtype)->block_bytes),
                      x, (uint32_t)cols))
#undef AVX2_ROWS

int spill_k_fits_q8_f32__avx2(const spill_qmat *w) { return w->group % 8 == 0; }
int spill_k_fits_q4_f32__avx2(const spill_qmat *w) { return w->group % 16 == 0; }

/* ------------------------------------------------------------- rvq3 */

void spill_k_lut_rvq3_f32__avx2(const float *codebook, const float *x, uint32_t cols, float *lut,
                                uint32_t g0, uint32_t g1) {
  const size_t ng = cols / 8;
  float cbt[8 * 256] __attribute__((aligned(32))); /* (dim, entry) of one stage */
  for (uint32_t s = 0; s < 3; s++) {
    const float *cb = codebook + (size_t)s * 256 * 8;
    for (uint32_t k = 0; k < 256; k++)
      for (uint32_t j = 0; j < 8; j++) cbt[j * 256 + k] = cb[k * 8 + j];
    for (uint32_t g = g0; g < g1; g++) {
      const float *xg = x + (size_t)g * 8;
      const __m256 x0 = _mm256_set1_ps(xg[0]), x1 = _mm256_set1_ps(xg[1]);
      const __m256 x2 = _mm256_set1_ps(xg[2]), x3 = _mm256_set1_ps(xg[3]);
      const __m256 x4 = _mm256_set1_ps(xg[4]), x5 = _mm256_set1_ps(xg[5]);
      const __m256 x6 = _mm256_set1_ps(xg[6]), x7 = _mm256_set1_ps(xg[7]);
      float *out = lut + ((size_t)s * ng + g) * 256;
      for (uint32_t k = 0; k < 256; k += 8) {
        __m256 a = _mm256_mul_ps(x0, _mm256_load_ps(cbt + 0 * 256 + k));
        __m256 b = _mm256_mul_ps(x1, _mm256_load_ps(cbt + 1 * 256 + k));
        a = _mm256_fmadd_ps(x2, _mm256_load_ps(cbt + 2 * 256 + k), a);
        b = _mm256_fmadd_ps(x3, _mm256_load_ps(cbt + 3 * 256 + k), b);
        a = _mm256_fmadd_ps(x4, _mm256_load_ps(cbt + 4 * 256 + k), a);
        b = _mm256_fmadd_ps(x5, _mm256_load_ps(cbt + 5 * 256 + k), b);
        a = _mm256_fmadd_ps(x6, _mm256_load_ps(cbt + 6 * 256 + k), a);
        b = _mm256_fmadd_ps(x7, _mm256_load_ps(cbt + 7 * 256 + k), b);
        _mm256_storeu_ps(out + k, _mm256_add_ps(a, b));
      }
    }
  }
}

/* pshufb masks that pick stage s of 8 consecutive (i0, i1, i2) triples:
 * groups 0..4 from the bytes [0, 16) of the chunk, groups 5..7 from [8, 24). */
#define Z (char)0x80
static const char k_shuf_a[3][16] __attribute__((aligned(16))) = {
    {0, 3, 6, 9, 12, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z},
    {1, 4, 7, 10, 13, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z},
    {2, 5, 8, 11, 14, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z, Z},
};
static const char k_shuf_b[3][16] __attribute__((aligned(16))) = {
    {Z, Z, Z, Z, Z, 7, 10, 13, Z, Z, Z, Z, Z, Z, Z, Z},
    {Z, Z, Z, Z, Z, 8, 11, 14, Z, Z, Z, Z, Z, Z, Z, Z},
    {Z, Z, Z, Z, Z, 9, 12, 15, Z, Z, Z, Z, Z, Z, Z, Z},
};
#undef Z

void spill_k_apply_rvq3_f32_gather__avx2(const spill_qmat *w, const float *lut, float *y,
                                         uint32_t r0, uint32_t r1) {
  const size_t ng = w->cols / 8;
  const size_t ng8 = ng & ~(size_t)7;
  const float *l0 = lut, *l1 = lut + ng * 256, *l2 = lut + 2 * ng * 256;
  const __m128i sa0 = _mm_load_si128((const __m128i *)k_shuf_a[0]);
  const __m128i sa1 = _mm_load_si128((const __m128i *)k_shuf_a[1]);
  const __m128i sa2 = _mm_load_si128((const __m128i *)k_shuf_a[2]);
  const __m128i sb0 = _mm_load_si128((const __m128i *)k_shuf_b[0]);
  const __m128i sb1 = _mm_load_si128((const __m128i *)k_shuf_b[1]);
  const __m128i sb2 = _mm_load_si128((const __m128i *)k_shuf_b[2]);
  const __m256i offs = _mm256_setr_epi32(0, 256, 512, 768, 1024, 1280, 1536, 1792);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
    __m256 acc = _mm256_setzero_ps();
    size_t g = 0;
    for (; g < ng8; g += 8, p += 24) {
      const __m128i a = _mm_loadu_si128((const __m128i *)p);
      const __m128i b = _mm_loadu_si128((const __m128i *)(p + 8));
      __m256i i0 = _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, sa0), _mm_shuffle_epi8(b, sb0)));
      __m256i i1 = _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, sa1), _mm_shuffle_epi8(b, sb1)));
      __m256i i2 = _mm256_cvtepu8_epi32(_mm_or_si128(_mm_shuffle_epi8(a, sa2), _mm_shuffle_epi8(b, sb2)));
      const __m256 v0 = _mm256_i32gather_ps(l0 + g * 256, _mm256_add_epi32(i0, offs), 4);
      const __m256 v1 = _mm256_i32gather_ps(l1 + g * 256, _mm256_add_epi32(i1, offs), 4);
      const __m256 v2 = _mm256_i32gather_ps(l2 + g * 256, _mm256_add_epi32(i2, offs), 4);
      acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_add_ps(v0, v1), v2));
    }
    float sum = spill_k_hsum8(acc);
    for (; g < ng; g++, p += 3)
      sum += l0[g * 256 + p[0]] + l1[g * 256 + p[1]] + l2[g * 256 + p[2]];
    y[r] = spill_f16_to_f32(w->scales[r]) * sum;
  }
}

/* The dispatched apply: column-blocked. The f32 LUT of a K3 expert input is
 * 3 * 448 KiB = 1.38 MB, more than the 1 MB L2 of the Zen 5 dev machines,
 * and a row touches a random line of every group's slice, so the row-by-row
 * loop waits on L3 (ref K3 gate 3.8G weights/s vs 6.3G at the twin's
 * L2-resident 480 KB). Here the groups are taken 8 at a time (3 * 8 KiB of
 * LUT, L1-resident) and every row of [r0, r1) adds its 8 groups to its
 * partial sum, kept in y[r], 4 rows interleaved for independent add chains.
 * Each row still adds (l0 + l1) + l2 group by group in column order from
 * 0.0f, so the result is bit-identical to __ref for any row split. */

#define RVQ3_BLK 8 /* groups per block */

static inline __attribute__((always_inline)) float grp(const float *b0, const float *b1,
                                                       const float *b2, const uint8_t *p) {
  return (b0[p[0]] + b1[p[1]]) + b2[p[2]];
}

void spill_k_apply_rvq3_f32__avx2(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                  uint32_t r1) {
  const size_t ng = w->cols / 8, rs = ng * 3;
  const uint8_t *idx = (const uint8_t *)w->data;
  const float *l0 = lut, *l1 = lut + ng * 256, *l2 = lut + 2 * ng * 256;
  for (uint32_t r = r0; r < r1; r++) y[r] = 0.0f;
  for (size_t gb = 0; gb < ng; gb += RVQ3_BLK) {
    const size_t ge = gb + RVQ3_BLK < ng ? gb + RVQ3_BLK : ng;
    uint32_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      const uint8_t *p0 = idx + (size_t)r * rs + gb * 3, *p1 = p0 + rs, *p2 = p1 + rs,
                    *p3 = p2 + rs;
      float a0 = y[r], a1 = y[r + 1], a2 = y[r + 2], a3 = y[r + 3];
      for (size_t g = gb; g < ge; g++, p0 += 3, p1 += 3, p2 += 3, p3 += 3) {
        const float *b0 = l0 + g * 256, *b1 = l1 + g * 256, *b2 = l2 + g * 256;
        a0 += grp(b0, b1, b2, p0);
        a1 += grp(b0, b1, b2, p1);
        a2 += grp(b0, b1, b2, p2);
        a3 += grp(b0, b1, b2, p3);
      }
      y[r] = a0, y[r + 1] = a1, y[r + 2] = a2, y[r + 3] = a3;
    }
    for (; r < r1; r++) {
      const uint8_t *p = idx + (size_t)r * rs + gb * 3;
      float a = y[r];
      for (size_t g = gb; g < ge; g++, p += 3)
        a += grp(l0 + g * 256, l1 + g * 256, l2 + g * 256, p);
      y[r] = a;
    }
  }
  for (uint32_t r = r0; r < r1; r++) y[r] = spill_f16_to_f32(w->scales[r]) * y[r];
}

/* rvq3 without a LUT: each group's weights are dequantised from the
 * codebooks (three 8-float loads, two adds; 24 KiB of codebook stays in L1)
 * and FMA'd with x into one 8-lane accumulator per row, 4 rows at a time
 * sharing the x load. Per row: lanes summed by hsum8, times the row scale;
 * the same sequence in the 4-row and 1-row loops. */

static inline __attribute__((always_inline)) __m256 cbsum(const float *c0, const float *c1,
                                                          const float *c2, const uint8_t *p) {
  return _mm256_add_ps(
      _mm256_add_ps(_mm256_loadu_ps(c0 + (size_t)p[0] * 8), _mm256_loadu_ps(c1 + (size_t)p[1] * 8)),
      _mm256_loadu_ps(c2 + (size_t)p[2] * 8));
}

void spill_k_matvec_rvq3_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                   uint32_t r1) {
  const size_t ng = w->cols / 8, rs = ng * 3;
  const uint8_t *idx = (const uint8_t *)w->data;
  const float *c0 = w->codebook, *c1 = c0 + 256 * 8, *c2 = c1 + 256 * 8;
  uint32_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t *p0 = idx + (size_t)r * rs, *p1 = p0 + rs, *p2 = p1 + rs, *p3 = p2 + rs;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t g = 0; g < ng; g++, p0 += 3, p1 += 3, p2 += 3, p3 += 3) {
      const __m256 xv = _mm256_loadu_ps(x + g * 8);
      a0 = _mm256_fmadd_ps(cbsum(c0, c1, c2, p0), xv, a0);
      a1 = _mm256_fmadd_ps(cbsum(c0, c1, c2, p1), xv, a1);
      a2 = _mm256_fmadd_ps(cbsum(c0, c1, c2, p2), xv, a2);
      a3 = _mm256_fmadd_ps(cbsum(c0, c1, c2, p3), xv, a3);
    }
    y[r] = spill_f16_to_f32(w->scales[r]) * spill_k_hsum8(a0);
    y[r + 1] = spill_f16_to_f32(w->scales[r + 1]) * spill_k_hsum8(a1);
    y[r + 2] = spill_f16_to_f32(w->scales[r + 2]) * spill_k_hsum8(a2);
    y[r + 3] = spill_f16_to_f32(w->scales[r + 3]) * spill_k_hsum8(a3);
  }
  for (; r < r1; r++) {
    const uint8_t *p = idx + (size_t)r * rs;
    __m256 a = _mm256_setzero_ps();
    for (size_t g = 0; g < ng; g++, p += 3)
      a = _mm256_fmadd_ps(cbsum(c0, c1, c2, p), _mm256_loadu_ps(x + g * 8), a);
    y[r] = spill_f16_to_f32(w->scales[r]) * spill_k_hsum8(a);
  }
}

/* The int16 rvq3 LUT (spill_k_qlut_rvq3_i16): bit-identical to the __ref loop
 * (the same scalar scale, v * inv rounded to nearest-even by cvtps2dq as
 * nearbyintf does in the default rounding mode, the same clamp); a group
 * holding a NaN or an infinity is left to __ref. 16 entries per step:
 * packssdw + vpermq give them in order as int16, then the low and high bytes
 * are split with and/shift + packuswb into the two planes. */
void spill_k_qlut_rvq3_i16__avx2(const float *lut, uint32_t cols, void *qlut, uint32_t g0,
                                 uint32_t g1) {
  const size_t ng = cols / 8;
  uint8_t *qt = (uint8_t *)qlut;
  float *scale = (float *)(qt + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES);
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i qmax = _mm256_set1_epi32(10922), qmin = _mm256_set1_epi32(-10922);
  const __m256i ff = _mm256_set1_epi16(0xFF);
  for (size_t g = g0; g < g1; g++) {
    __m256 m = _mm256_setzero_ps(), unord = _mm256_setzero_ps();
    for (size_t s = 0; s < 3; s++)
      for (size_t k = 0; k < 256; k += 8) {
        const __m256 v = _mm256_loadu_ps(lut + (s * ng + g) * 256 + k);
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, _mm256_and_ps(v, absmask));
      }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float mx = _mm_cvtss_f32(h);
    if (_mm256_movemask_ps(unord) || mx > 3.4e38f) { /* NaN or inf: the __ref rules */
      spill_k_qlut_rvq3_i16__ref(lut, cols, qlut, (uint32_t)g, (uint32_t)g + 1);
      continue;
    }
    const float inv = mx > 0.0f ? 10922.0f / mx : 0.0f;
    scale[g] = mx / 10922.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (size_t s = 0; s < 3; s++) {
      const float *src = lut + (s * ng + g) * 256;
      uint8_t *t = qt + g * SPILL_K_RVQ3_QLUT_GROUP_BYTES + s * 512;
      for (size_t k = 0; k < 256; k += 16) {
        __m256i q0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + k), vinv));
        __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(src + k + 8), vinv));
        q0 = _mm256_max_epi32(_mm256_min_epi32(q0, qmax), qmin);
        q1 = _mm256_max_epi32(_mm256_min_epi32(q1, qmax), qmin);
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
        const __m256i b = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_and_si256(w, ff), _mm256_srli_epi16(w, 8)), 0xD8);
        _mm_storeu_si128((__m128i *)(t + k), _mm256_castsi256_si128(b));
        _mm_storeu_si128((__m128i *)(t + 256 + k), _mm256_extracti128_si256(b, 1));
      }
    }
  }
}

/* spill_k_gdn_step, AVX2: 8 columns at a time with separate multiplies and
 * adds in __ref's order (no FMA), the tail as __ref: bit-identical to it. */
void spill_k_gdn_step__avx2(float *S, uint32_t d, float decay, const float *k, const float *q,
                            float beta, const float *v, float *u, float *o) {
  const uint32_t d8 = d & ~7u;
  const __m256 vdec = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta);
  memset(u, 0, (size_t)d * sizeof(float));
  for (uint32_t a = 0; a < d; a++) {
    float *row = S + (size_t)a * d;
    const float ka = k[a];
    const __m256 vk = _mm256_set1_ps(ka);
    uint32_t b = 0;
    for (; b < d8; b += 8) {
      const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(row + b), vdec);
      _mm256_storeu_ps(row + b, r);
      _mm256_storeu_ps(u + b, _mm256_add_ps(_mm256_loadu_ps(u + b), _mm256_mul_ps(r, vk)));
    }
    for (; b < d; b++) {
      row[b] = row[b] * decay;
      u[b] = u[b] + row[b] * ka;
    }
  }
  uint32_t b = 0;
  for (; b < d8; b += 8)
    _mm256_storeu_ps(u + b, _mm256_mul_ps(vbeta, _mm256_sub_ps(_mm256_loadu_ps(v + b), _mm256_loadu_ps(u + b))));
  for (; b < d; b++) u[b] = beta * (v[b] - u[b]);
  memset(o, 0, (size_t)d * sizeof(float));
  for (uint32_t a = 0; a < d; a++) {
    float *row = S + (size_t)a * d;
    const float ka = k[a], qa = q[a];
    const __m256 vk = _mm256_set1_ps(ka), vq = _mm256_set1_ps(qa);
    uint32_t c = 0;
    for (; c < d8; c += 8) {
      const __m256 r = _mm256_add_ps(_mm256_loadu_ps(row + c), _mm256_mul_ps(vk, _mm256_loadu_ps(u + c)));
      _mm256_storeu_ps(row + c, r);
      _mm256_storeu_ps(o + c, _mm256_add_ps(_mm256_loadu_ps(o + c), _mm256_mul_ps(r, vq)));
    }
    for (; c < d; c++) {
      row[c] = row[c] + ka * u[c];
      o[c] = o[c] + row[c] * qa;
    }
  }
}
