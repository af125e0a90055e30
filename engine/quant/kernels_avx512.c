/* engine/quant/kernels_avx512.c: AVX-512 (F/BW/VL/DQ) + FMA + F16C twins.
 *
 * Compiled with the AVX-512 flags in its own cc_library and only called after
 * spill_k_isa_supported(SPILL_ISA_AVX512). Same structure as the AVX2 twins
 * with 16 lanes; as there, each row's instruction sequence depends only on
 * the row and the shape, so row splits are bit-exact.
 *
 * matvec: q8 needs group % 16 == 0 and q4 group % 32 == 0, else the AVX2
 * twin handles the matrix (which itself falls back to __ref).
 * rvq3 apply (gather version, kept to re-measure on CPUs with fast gathers):
 * 16 groups (48 index bytes) at a time; each half of 8 groups is
 * de-interleaved with pshufb as in the AVX2 twin, the two halves joined and
 * widened to 16 int32 offsets for _mm512_i32gather_ps. The row's leftover
 * groups (ng % 16) go through one 8-group 256-bit step and a scalar tail.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Fixed-order horizontal sum (not _mm512_reduce_add_ps, whose order is the
 * compiler's business). */
static inline float hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

static inline __m512 ld_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline __m512 ld_f16(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 ld_bf16(const uint16_t *p) {
  __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline float sc_f32(const float *p) { return *p; }
static inline float sc_f16(const uint16_t *p) { return spill_f16_to_f32(*p); }
static inline float sc_bf16(const uint16_t *p) { return spill_bf16_to_f32(*p); }

#define DENSE_ROW(NAME, T, LD, SC)                                                  \
  static float NAME(const T *w, const float *x, uint32_t n) {                      \
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                     \
    uint32_t c = 0;                                                                 \
    for (; c + 64 <= n; c += 64) {                                                  \
      a0 = _mm512_fmadd_ps(LD(w + c), _mm512_loadu_ps(x + c), a0);                  \
      a1 = _mm512_fmadd_ps(LD(w + c + 16), _mm512_loadu_ps(x + c + 16), a1);        \
      a2 = _mm512_fmadd_ps(LD(w + c + 32), _mm512_loadu_ps(x + c + 32), a2);        \
      a3 = _mm512_fmadd_ps(LD(w + c + 48), _mm512_loadu_ps(x + c + 48), a3);        \
    }                                                                               \
    for (; c + 16 <= n; c += 16) a0 = _mm512_fmadd_ps(LD(w + c), _mm512_loadu_ps(x + c), a0); \
    float acc = hsum16(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));    \
    for (; c < n; c++) acc += SC(w + c) * x[c];                                     \
    return acc;                                                                     \
  }

DENSE_ROW(row_f32, float, ld_f32, sc_f32)
DENSE_ROW(row_f16, uint16_t, ld_f16, sc_f16)
DENSE_ROW(row_bf16, uint16_t, ld_bf16, sc_bf16)

static float row_q8(const int8_t *q, const uint16_t *s, const float *x, uint32_t cols,
                    uint32_t group) {
  __m512 acc = _mm512_setzero_ps();
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    __m512 g0 = _mm512_setzero_ps(), g1 = g0;
    uint32_t c = c0;
    for (; c + 32 <= c0 + group; c += 32) {
      __m256i b = _mm256_loadu_si256((const __m256i *)(q + c));
      __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)));
      __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)));
      g0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), g0);
      g1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), g1);
    }
    if (c < c0 + group) { /* group % 32 == 16 */
      __m128i b = _mm_loadu_si128((const __m128i *)(q + c));
      g0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), _mm512_loadu_ps(x + c), g0);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(spill_f16_to_f32(s[c0 / group])), _mm512_add_ps(g0, g1),
                          acc);
  }
  return hsum16(acc);
}

static float row_q4(const uint8_t *q, const uint16_t *s, const float *x, uint32_t cols,
                    uint32_t group) {
  const __m128i m0f = _mm_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi32(8);
  __m512 acc = _mm512_setzero_ps();
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    __m512 g0 = _mm512_setzero_ps(), g1 = g0;
    for (uint32_t c = c0; c < c0 + group; c += 32) {
      __m128i b = _mm_loadu_si128((const __m128i *)(q + c / 2));
      __m128i lo = _mm_and_si128(b, m0f);
      __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), m0f);
      __m128i e0 = _mm_unpacklo_epi8(lo, hi); /* elements c .. c+15 */
      __m128i e1 = _mm_unpackhi_epi8(lo, hi); /* elements c+16 .. c+31 */
      __m512 w0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e0), eight));
      __m512 w1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(e1), eight));
      g0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), g0);
      g1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), g1);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(spill_f16_to_f32(s[c0 / group])), _mm512_add_ps(g0, g1),
                          acc);
  }
  return hsum16(acc);
}

void spill_k_matvec__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                            uint32_t r1) {
  const size_t cols = w->cols;
  switch (w->dtype) {
    case SPILL_K_DT_F32:
      for (uint32_t r = r0; r < r1; r++)
        y[r] = row_f32((const float *)w->data + r * cols, x, (uint32_t)cols);
      return;
    case SPILL_K_DT_F16:
      for (uint32_t r = r0; r < r1; r++)
        y[r] = row_f16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols);
      return;
    case SPILL_K_DT_BF16:
      for (uint32_t r = r0; r < r1; r++)
        y[r] = row_bf16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols);
      return;
    case SPILL_K_DT_Q8:
      if (w->group % 16 != 0) break;
      for (uint32_t r = r0; r < r1; r++)
        y[r] = row_q8((const int8_t *)w->data + r * cols, w->scales + r * (cols / w->group), x,
                      (uint32_t)cols, w->group);
      return;
    case SPILL_K_DT_Q4:
      if (w->group % 32 != 0) break;
      for (uint32_t r = r0; r < r1; r++)
        y[r] = row_q4((const uint8_t *)w->data + r * cols / 2, w->scales + r * (cols / w->group),
                      x, (uint32_t)cols, w->group);
      return;
    default:
      break;
  }
  spill_k_matvec__avx2(w, x, y, r0, r1);
}

/* ------------------------------------------------------------- rvq3 */

void spill_k_rvq3_lut__avx512(const float *codebook, const float *x, uint32_t cols, float *lut,
                              uint32_t g0, uint32_t g1) {
  const size_t ng = cols / 8;
  float cbt[8 * 256] __attribute__((aligned(64))); /* (dim, entry) of one stage */
  for (uint32_t s = 0; s < 3; s++) {
    const float *cb = codebook + (size_t)s * 256 * 8;
    for (uint32_t k = 0; k < 256; k++)
      for (uint32_t j = 0; j < 8; j++) cbt[j * 256 + k] = cb[k * 8 + j];
    for (uint32_t g = g0; g < g1; g++) {
      const float *xg = x + (size_t)g * 8;
      const __m512 x0 = _mm512_set1_ps(xg[0]), x1 = _mm512_set1_ps(xg[1]);
      const __m512 x2 = _mm512_set1_ps(xg[2]), x3 = _mm512_set1_ps(xg[3]);
      const __m512 x4 = _mm512_set1_ps(xg[4]), x5 = _mm512_set1_ps(xg[5]);
      const __m512 x6 = _mm512_set1_ps(xg[6]), x7 = _mm512_set1_ps(xg[7]);
      float *out = lut + ((size_t)s * ng + g) * 256;
      for (uint32_t k = 0; k < 256; k += 16) {
        __m512 a = _mm512_mul_ps(x0, _mm512_load_ps(cbt + 0 * 256 + k));
        __m512 b = _mm512_mul_ps(x1, _mm512_load_ps(cbt + 1 * 256 + k));
        a = _mm512_fmadd_ps(x2, _mm512_load_ps(cbt + 2 * 256 + k), a);
        b = _mm512_fmadd_ps(x3, _mm512_load_ps(cbt + 3 * 256 + k), b);
        a = _mm512_fmadd_ps(x4, _mm512_load_ps(cbt + 4 * 256 + k), a);
        b = _mm512_fmadd_ps(x5, _mm512_load_ps(cbt + 5 * 256 + k), b);
        a = _mm512_fmadd_ps(x6, _mm512_load_ps(cbt + 6 * 256 + k), a);
        b = _mm512_fmadd_ps(x7, _mm512_load_ps(cbt + 7 * 256 + k), b);
        _mm512_storeu_ps(out + k, _mm512_add_ps(a, b));
      }
    }
  }
}

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

/* Stage s indices of the 8 groups whose 24 index bytes start at p, in the
 * low 8 bytes of the result. */
static inline __m128i idx8(const uint8_t *p, __m128i sa, __m128i sb) {
  const __m128i a = _mm_loadu_si128((const __m128i *)p);
  const __m128i b = _mm_loadu_si128((const __m128i *)(p + 8));
  return _mm_or_si128(_mm_shuffle_epi8(a, sa), _mm_shuffle_epi8(b, sb));
}

void spill_k_rvq3_apply_gather__avx512(const spill_qmat *w, const float *lut, float *y,
                                       uint32_t r0, uint32_t r1) {
  const size_t ng = w->cols / 8;
  const size_t ng16 = ng & ~(size_t)15;
  const float *l0 = lut, *l1 = lut + ng * 256, *l2 = lut + 2 * ng * 256;
  const __m128i sa0 = _mm_load_si128((const __m128i *)k_shuf_a[0]);
  const __m128i sa1 = _mm_load_si128((const __m128i *)k_shuf_a[1]);
  const __m128i sa2 = _mm_load_si128((const __m128i *)k_shuf_a[2]);
  const __m128i sb0 = _mm_load_si128((const __m128i *)k_shuf_b[0]);
  const __m128i sb1 = _mm_load_si128((const __m128i *)k_shuf_b[1]);
  const __m128i sb2 = _mm_load_si128((const __m128i *)k_shuf_b[2]);
  const __m512i offs = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(256));
  const __m256i offs8 = _mm512_castsi512_si256(offs);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
    __m512 acc = _mm512_setzero_ps();
    size_t g = 0;
    for (; g < ng16; g += 16, p += 48) {
      __m512i i0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa0, sb0), idx8(p + 24, sa0, sb0)));
      __m512i i1 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa1, sb1), idx8(p + 24, sa1, sb1)));
      __m512i i2 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa2, sb2), idx8(p + 24, sa2, sb2)));
      const __m512 v0 = _mm512_i32gather_ps(_mm512_add_epi32(i0, offs), l0 + g * 256, 4);
      const __m512 v1 = _mm512_i32gather_ps(_mm512_add_epi32(i1, offs), l1 + g * 256, 4);
      const __m512 v2 = _mm512_i32gather_ps(_mm512_add_epi32(i2, offs), l2 + g * 256, 4);
      acc = _mm512_add_ps(acc, _mm512_add_ps(_mm512_add_ps(v0, v1), v2));
    }
    float sum = hsum16(acc);
    if (g + 8 <= ng) {
      __m256i i0 = _mm256_add_epi32(_mm256_cvtepu8_epi32(idx8(p, sa0, sb0)), offs8);
      __m256i i1 = _mm256_add_epi32(_mm256_cvtepu8_epi32(idx8(p, sa1, sb1)), offs8);
      __m256i i2 = _mm256_add_epi32(_mm256_cvtepu8_epi32(idx8(p, sa2, sb2)), offs8);
      const __m256 v0 = _mm256_i32gather_ps(l0 + g * 256, i0, 4);
      const __m256 v1 = _mm256_i32gather_ps(l1 + g * 256, i1, 4);
      const __m256 v2 = _mm256_i32gather_ps(l2 + g * 256, i2, 4);
      sum += hsum8(_mm256_add_ps(_mm256_add_ps(v0, v1), v2));
      g += 8;
      p += 24;
    }
    for (; g < ng; g++, p += 3)
      sum += l0[g * 256 + p[0]] + l1[g * 256 + p[1]] + l2[g * 256 + p[2]];
    y[r] = spill_f16_to_f32(w->scales[r]) * sum;
  }
}

/* The dispatched apply is the AVX2 twin's scalar-load loop: the 16-lane
 * gather above is no faster than 8-lane ones on Zen 5 (measured by
 * BM_Rvq3ApplyGather_K3Gate), and the loop is load-port bound, not width
 * bound. */
void spill_k_rvq3_apply__avx512(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                uint32_t r1) {
  spill_k_rvq3_apply__avx2(w, lut, y, r0, r1);
}

/* ---- candidate: dequantise two groups per zmm, FMA with x ---- */

/* Byte offset in a stage codebook of entry (byte k of u): 32 * index. */
static inline __attribute__((always_inline)) size_t cb_off(uint64_t u, int k) {
  return k == 0 ? (size_t)((u << 5) & 0x1FE0) : (size_t)((u >> (8 * k - 5)) & 0x1FE0);
}
#define CB_LD(c, b) _mm256_loadu_ps((const float *)((const char *)(c) + cb_off(q[(b) >> 3], (b) & 7)))
#define CB_LD2(c, b) \
  _mm512_insertf32x8(_mm512_castps256_ps512(CB_LD(c, b)), CB_LD(c, (b) + 3), 1)

/* Groups 2j, 2j+1 of an 8-group chunk whose 24 index bytes are in q[0..3). */
#define PAIR(j) \
  _mm512_add_ps(_mm512_add_ps(CB_LD2(c0, 6 * (j)), CB_LD2(c1, 6 * (j) + 1)), CB_LD2(c2, 6 * (j) + 2))

static inline __m512 chunk8(const float *c0, const float *c1, const float *c2, const uint8_t *p,
                            const float *x, __m512 acc) {
  uint64_t q[3];
  memcpy(q, p, 24);
  acc = _mm512_fmadd_ps(PAIR(0), _mm512_loadu_ps(x), acc);
  acc = _mm512_fmadd_ps(PAIR(1), _mm512_loadu_ps(x + 16), acc);
  acc = _mm512_fmadd_ps(PAIR(2), _mm512_loadu_ps(x + 32), acc);
  acc = _mm512_fmadd_ps(PAIR(3), _mm512_loadu_ps(x + 48), acc);
  return acc;
}

static inline __m512 cbsum2(const float *c0, const float *c1, const float *c2, const uint8_t *p) {
  const __m512 v0 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(c0 + (size_t)p[0] * 8)),
                                       _mm256_loadu_ps(c0 + (size_t)p[3] * 8), 1);
  const __m512 v1 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(c1 + (size_t)p[1] * 8)),
                                       _mm256_loadu_ps(c1 + (size_t)p[4] * 8), 1);
  const __m512 v2 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(c2 + (size_t)p[2] * 8)),
                                       _mm256_loadu_ps(c2 + (size_t)p[5] * 8), 1);
  return _mm512_add_ps(_mm512_add_ps(v0, v1), v2);
}

/* The groups past the 8-group chunks (ng % 8), then the horizontal sum. */
static inline float row_rest(const float *c0, const float *c1, const float *c2, const uint8_t *p,
                             const float *x, __m512 acc, size_t g, size_t ng) {
  for (; g + 2 <= ng; g += 2, p += 6)
    acc = _mm512_fmadd_ps(cbsum2(c0, c1, c2, p), _mm512_loadu_ps(x + g * 8), acc);
  float s = hsum16(acc);
  if (g < ng) { /* odd ng: the last group */
    const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(c0 + (size_t)p[0] * 8),
                                                 _mm256_loadu_ps(c1 + (size_t)p[1] * 8)),
                                   _mm256_loadu_ps(c2 + (size_t)p[2] * 8));
    s += hsum8(_mm256_mul_ps(v, _mm256_loadu_ps(x + g * 8)));
  }
  return s;
}

void spill_k_rvq3_matvec__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                 uint32_t r1) {
  const size_t ng = w->cols / 8, rs = ng * 3, ng8 = ng & ~(size_t)7;
  const uint8_t *idx = (const uint8_t *)w->data;
  const float *c0 = w->codebook, *c1 = c0 + 256 * 8, *c2 = c1 + 256 * 8;
  uint32_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint8_t *p0 = idx + (size_t)r * rs, *p1 = p0 + rs, *p2 = p1 + rs, *p3 = p2 + rs;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t g = 0;
    for (; g < ng8; g += 8, p0 += 24, p1 += 24, p2 += 24, p3 += 24) {
      a0 = chunk8(c0, c1, c2, p0, x + g * 8, a0);
      a1 = chunk8(c0, c1, c2, p1, x + g * 8, a1);
      a2 = chunk8(c0, c1, c2, p2, x + g * 8, a2);
      a3 = chunk8(c0, c1, c2, p3, x + g * 8, a3);
    }
    y[r] = spill_f16_to_f32(w->scales[r]) * row_rest(c0, c1, c2, p0, x, a0, g, ng);
    y[r + 1] = spill_f16_to_f32(w->scales[r + 1]) * row_rest(c0, c1, c2, p1, x, a1, g, ng);
    y[r + 2] = spill_f16_to_f32(w->scales[r + 2]) * row_rest(c0, c1, c2, p2, x, a2, g, ng);
    y[r + 3] = spill_f16_to_f32(w->scales[r + 3]) * row_rest(c0, c1, c2, p3, x, a3, g, ng);
  }
  for (; r < r1; r++) {
    const uint8_t *p = idx + (size_t)r * rs;
    __m512 a = _mm512_setzero_ps();
    size_t g = 0;
    for (; g < ng8; g += 8, p += 24) a = chunk8(c0, c1, c2, p, x + g * 8, a);
    y[r] = spill_f16_to_f32(w->scales[r]) * row_rest(c0, c1, c2, p, x, a, g, ng);
  }
}
