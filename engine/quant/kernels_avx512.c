/* engine/quant/kernels_avx512.c: AVX-512 (F/BW/VL/DQ) + FMA + F16C twins.
 *
 * Compiled with the AVX-512 flags in its own cc_library and only called after
 * spill_k_isa_supported(SPILL_ISA_AVX512). Same structure as the AVX2 twins
 * with 16 lanes; as there, each row's instruction sequence depends only on
 * the row and the shape, so row splits are bit-exact.
 *
 * matvec: q8 needs group % 16 == 0 and q4 group % 32 == 0 (the fits
 * functions): else the kernel table hands the matrix to the AVX2 twin (and
 * from there to __ref); dtypes without a cell here go to AVX2 likewise.
 * rvq3 apply_q (int16 LUT, VBMI byte permutes, 64 rows at a time): see the
 * comment above spill_k_apply_rvq3_i16__avx512vbmi; its functions carry the VBMI
 * target attribute so nothing else in this file may use VBMI.
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
#include "engine/quant/kernels_hsum_avx2.h"
#include "engine/quant/kernels_isa.h"

/* Fixed-order horizontal sum (not _mm512_reduce_add_ps, whose order is the
 * compiler's business). */
static inline float hsum16(__m512 v) {
  return spill_k_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
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

static float row_q8(const int8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
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

static float row_q4(const uint8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
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

/* The per-dtype rows of the kernel table (kernels_isa.h). */
#define AVX512_ROWS(DT, EXPR)                                                                      \
  void spill_k_matvec_##DT##_f32__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0, \
                                         uint32_t r1) {                                            \
    const size_t cols = w->cols;                                                                   \
    for (uint32_t r = r0; r < r1; r++) y[r] = (EXPR);                                              \
  }

AVX512_ROWS(f32, row_f32((const float *)w->data + r * cols, x, (uint32_t)cols))
AVX512_ROWS(f16, row_f16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols))
AVX512_ROWS(bf16, row_bf16((const uint16_t *)w->data + r * cols, x, (uint32_t)cols))
AVX512_ROWS(q8, row_q8((const int8_t *)w->data + r * cols, w->scales + r * (cols / w->group), x,
                       (uint32_t)cols, w->group))
AVX512_ROWS(q4, row_q4((const uint8_t *)w->data + r * cols / 2, w->scales + r * (cols / w->group),
                       x, (uint32_t)cols, w->group))
#undef AVX512_ROWS

int spill_k_fits_q8_f32__avx512(const spill_qmat *w) { return w->group % 16 == 0; }
int spill_k_fits_q4_f32__avx512(const spill_qmat *w) { return w->group % 32 == 0; }

/* ------------------------------------------------------------- rvq3 */

void spill_k_lut_rvq3_f32__avx512(const float *codebook, const float *x, uint32_t cols, float *lut,
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

void spill_k_apply_rvq3_f32_gather__avx512(const spill_qmat *w, const float *lut, float *y,
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
  const __m512i offs =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(256));
  const __m256i offs8 = _mm512_castsi512_si256(offs);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
    __m512 acc = _mm512_setzero_ps();
    size_t g = 0;
    for (; g < ng16; g += 16, p += 48) {
      __m512i i0 =
          _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa0, sb0), idx8(p + 24, sa0, sb0)));
      __m512i i1 =
          _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa1, sb1), idx8(p + 24, sa1, sb1)));
      __m512i i2 =
          _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(idx8(p, sa2, sb2), idx8(p + 24, sa2, sb2)));
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
      sum += spill_k_hsum8(_mm256_add_ps(_mm256_add_ps(v0, v1), v2));
      g += 8;
      p += 24;
    }
    for (; g < ng; g++, p += 3) sum += l0[g * 256 + p[0]] + l1[g * 256 + p[1]] + l2[g * 256 + p[2]];
    y[r] = spill_f16_to_f32(w->scales[r]) * sum;
  }
}

/* The dispatched apply is the AVX2 twin's column-blocked scalar loop: the
 * 16-lane gather above is no faster than 8-lane ones on Zen 5 (measured by
 * BM_Rvq3ApplyGather_K3Gate). */
void spill_k_apply_rvq3_f32__avx512(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                    uint32_t r1) {
  spill_k_apply_rvq3_f32__avx2(w, lut, y, r0, r1);
}

/* ---- rvq3 apply over the int16 LUT with AVX-512 VBMI byte permutes ----
 *
 * 64 rows at a time, one byte lane per row. Index bytes are brought to
 * group-major order on the fly, 8 groups (24 bytes per row) at a time: a
 * masked 32-byte load per row, 7 qword permutes per 8 rows, then per 8-byte
 * column a vpermb per 8 rows (8x8 byte transpose) and an 8x8 qword
 * transpose (24 vpermt2q) give one 64-byte vector per (group, stage) whose
 * lane l is row rb + l. (Qword gathers instead of the loads ran at 14G
 * weights/s vs 25G with plain loads: gathers are slow on Zen 5.) A 256-entry byte
 * table is two vpermt2b (128 entries each) and a blend on the index's top
 * bit; the low and high byte planes of the int16 entries are looked up
 * separately and interleaved into int16 lanes, summed over the 3 stages in
 * int16 (|q| <= 10922, so no overflow), widened to int32, converted to f32
 * (exact) and added to the row accumulators as acc + f * scale_g, exactly
 * the arithmetic of spill_k_apply_rvq3_i16__ref, so results are bit-identical
 * to it for any row split. */
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

static VBMI inline __m512i qpos(int a, int b, int c, int d, int e, int f, int g, int h) {
  return _mm512_setr_epi64(a, b, c, d, e, f, g, h);
}

/* vpermb index of an 8x8 byte transpose: byte 8j+i <- byte 8i+j. */
static const uint8_t k_tb[64] __attribute__((aligned(64))) = {
    0,  8,  16, 24, 32, 40, 48, 56, 1,  9,  17, 25, 33, 41, 49, 57, 2,  10, 18, 26, 34, 42,
    50, 58, 3,  11, 19, 27, 35, 43, 51, 59, 4,  12, 20, 28, 36, 44, 52, 60, 5,  13, 21, 29,
    37, 45, 53, 61, 6,  14, 22, 30, 38, 46, 54, 62, 7,  15, 23, 31, 39, 47, 55, 63};

/* Qword c (c < 3) of the 24 index bytes at base + row * rs of rows
 * 8k .. 8k+7 into M[c] (qword i = row 8k+i; rows >= n read as zero). */
static VBMI inline __attribute__((always_inline)) void vbmi_load_octet(const uint8_t *base,
                                                                       size_t rs, uint32_t k,
                                                                       uint32_t n, __m512i M[3]) {
  __m256i Y[8];
  for (uint32_t i = 0; i < 8; i++) {
    const uint32_t row = 8 * k + i;
    Y[i] = row < n ? _mm256_maskz_loadu_epi8(0xFFFFFF, base + row * rs) : _mm256_setzero_si256();
  }
  __m512i Z[4]; /* Z[j] = rows j, j+4: [rj.q0 .. rj.q3, rj4.q0 .. rj4.q3] */
  for (int j = 0; j < 4; j++) Z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(Y[j]), Y[j + 4], 1);
  const __m512i pa = qpos(0, 8, 4, 12, 1, 9, 5, 13), pb = qpos(2, 10, 6, 14, 3, 11, 7, 15);
  const __m512i A = _mm512_permutex2var_epi64(Z[0], pa, Z[1]); /* r0 r1 r4 r5 .q0, .q1 */
  const __m512i B = _mm512_permutex2var_epi64(Z[0], pb, Z[1]); /* r0 r1 r4 r5 .q2, .q3 */
  const __m512i C = _mm512_permutex2var_epi64(Z[2], pa, Z[3]); /* r2 r3 r6 r7 .q0, .q1 */
  const __m512i D = _mm512_permutex2var_epi64(Z[2], pb, Z[3]); /* r2 r3 r6 r7 .q2, .q3 */
  const __m512i lo = qpos(0, 1, 8, 9, 2, 3, 10, 11), hi = qpos(4, 5, 12, 13, 6, 7, 14, 15);
  M[0] = _mm512_permutex2var_epi64(A, lo, C);
  M[1] = _mm512_permutex2var_epi64(A, hi, C);
  M[2] = _mm512_permutex2var_epi64(B, lo, D);
}

/* V[j] (j < 8): byte j of qword k of M[k'] for the 64 lanes 8k' + i, i.e.
 * lane l is row l: a vpermb per register (8x8 byte transpose) and an 8x8
 * qword transpose. */
static VBMI void vbmi_transpose(const __m512i In[8], __m512i V[8]) {
  const __m512i tb = _mm512_load_si512(k_tb);
  __m512i M[8], A[8], B[8];
  for (int k = 0; k < 8; k++) M[k] = _mm512_permutexvar_epi8(tb, In[k]);
  const __m512i s1a = qpos(0, 1, 2, 3, 8, 9, 10, 11), s1b = qpos(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i s2a = qpos(0, 1, 8, 9, 4, 5, 12, 13), s2b = qpos(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i s3a = qpos(0, 8, 2, 10, 4, 12, 6, 14), s3b = qpos(1, 9, 3, 11, 5, 13, 7, 15);
  for (int k = 0; k < 4; k++) {
    A[k] = _mm512_permutex2var_epi64(M[k], s1a, M[k + 4]);
    A[k + 4] = _mm512_permutex2var_epi64(M[k], s1b, M[k + 4]);
  }
  for (int k = 0; k < 8; k += (k & 1) ? 3 : 1) { /* 0, 1, 4, 5 */
    B[k] = _mm512_permutex2var_epi64(A[k], s2a, A[k + 2]);
    B[k + 2] = _mm512_permutex2var_epi64(A[k], s2b, A[k + 2]);
  }
  for (int k = 0; k < 8; k += 2) {
    V[k] = _mm512_permutex2var_epi64(B[k], s3a, B[k + 1]);
    V[k + 1] = _mm512_permutex2var_epi64(B[k], s3b, B[k + 1]);
  }
}

/* int16 entries of the 64 lanes' indices v in one stage table; w_lo gets
 * rows {0-7, 16-23, 32-39, 48-55}, w_hi the others (unpack order). */
static VBMI inline __attribute__((always_inline)) void vbmi_look(const int8_t *t, __m512i v,
                                                                 __m512i *w_lo, __m512i *w_hi) {
  const __mmask64 top = _mm512_movepi8_mask(v);
  const __m512i lo = _mm512_mask_blend_epi8(
      top, _mm512_permutex2var_epi8(_mm512_loadu_si512(t), v, _mm512_loadu_si512(t + 64)),
      _mm512_permutex2var_epi8(_mm512_loadu_si512(t + 128), v, _mm512_loadu_si512(t + 192)));
  const __m512i hi = _mm512_mask_blend_epi8(
      top, _mm512_permutex2var_epi8(_mm512_loadu_si512(t + 256), v, _mm512_loadu_si512(t + 320)),
      _mm512_permutex2var_epi8(_mm512_loadu_si512(t + 384), v, _mm512_loadu_si512(t + 448)));
  *w_lo = _mm512_unpacklo_epi8(lo, hi);
  *w_hi = _mm512_unpackhi_epi8(lo, hi);
}

VBMI void spill_k_apply_rvq3_i16__avx512vbmi(const spill_qmat *w, const void *qlut, float *y,
                                             uint32_t r0, uint32_t r1) {
  const size_t ng = w->cols / 8, rs = ng * 3, ng8 = ng & ~(size_t)7;
  const int8_t *qt = (const int8_t *)qlut;
  const float *scale = (const float *)(qt + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES);
  const uint8_t *idx = (const uint8_t *)w->data;
  uint8_t pad[64 * 24] __attribute__((aligned(64)));
  for (uint32_t rb = r0; rb < r1; rb += 64) {
    const uint32_t n = r1 - rb < 64 ? r1 - rb : 64;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    const uint8_t *rowp = idx + (size_t)rb * rs;
    for (size_t g0 = 0; g0 < ng; g0 += 8) {
      const size_t cnt = g0 < ng8 ? 8 : ng - g0;
      const uint8_t *base = rowp + g0 * 3;
      size_t stride = rs;
      if (cnt < 8) { /* the row tails: copy into a zero-padded block */
        memset(pad, 0, sizeof pad);
        for (uint32_t i = 0; i < n; i++)
          memcpy(pad + 24 * i, rowp + (size_t)i * rs + g0 * 3, cnt * 3);
        base = pad;
        stride = 24;
      }
      __m512i M[3][8], O[3], V[24];
      for (uint32_t k = 0; k < 8; k++) {
        vbmi_load_octet(base, stride, k, n, O);
        M[0][k] = O[0], M[1][k] = O[1], M[2][k] = O[2];
      }
      vbmi_transpose(M[0], V);
      vbmi_transpose(M[1], V + 8);
      vbmi_transpose(M[2], V + 16);
      for (size_t j = 0; j < cnt; j++) {
        const size_t g = g0 + j;
        const int8_t *t = qt + g * SPILL_K_RVQ3_QLUT_GROUP_BYTES;
        __m512i a_lo, a_hi, b_lo, b_hi, c_lo, c_hi;
        vbmi_look(t, V[3 * j], &a_lo, &a_hi);
        vbmi_look(t + 512, V[3 * j + 1], &b_lo, &b_hi);
        vbmi_look(t + 1024, V[3 * j + 2], &c_lo, &c_hi);
        const __m512i s_lo = _mm512_add_epi16(_mm512_add_epi16(a_lo, b_lo), c_lo);
        const __m512i s_hi = _mm512_add_epi16(_mm512_add_epi16(a_hi, b_hi), c_hi);
        const __m512 sc = _mm512_set1_ps(scale[g]);
        const __m512i q0 = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(s_lo));
        const __m512i q1 = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(s_lo, 1));
        const __m512i q2 = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(s_hi));
        const __m512i q3 = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(s_hi, 1));
        acc[0] = _mm512_add_ps(acc[0], _mm512_mul_ps(_mm512_cvtepi32_ps(q0), sc));
        acc[1] = _mm512_add_ps(acc[1], _mm512_mul_ps(_mm512_cvtepi32_ps(q1), sc));
        acc[2] = _mm512_add_ps(acc[2], _mm512_mul_ps(_mm512_cvtepi32_ps(q2), sc));
        acc[3] = _mm512_add_ps(acc[3], _mm512_mul_ps(_mm512_cvtepi32_ps(q3), sc));
      }
    }
    /* acc[0]: rows 0-7, 16-23; acc[1]: 32-39, 48-55; acc[2]: 8-15, 24-31;
     * acc[3]: 40-47, 56-63. */
    float tmp[64] __attribute__((aligned(64)));
    static const uint8_t base_row[4] = {0, 32, 8, 40};
    for (int q = 0; q < 4; q++) {
      _mm512_store_ps(tmp + 16 * q, acc[q]);
      for (int m = 0; m < 16; m++) {
        const uint32_t row = base_row[q] + (m < 8 ? m : 8 + m);
        if (row < n) y[rb + row] = spill_f16_to_f32(w->scales[rb + row]) * tmp[16 * q + m];
      }
    }
  }
}
#undef VBMI
