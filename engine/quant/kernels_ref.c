/* engine/quant/kernels_ref.c: the scalar reference kernels (__ref) and the
 * small vector helpers.
 *
 * The __ref kernels define the numerics every SIMD twin is tested against:
 * plain f32 arithmetic, one accumulator per row, summed in column order
 * (group by group for q8/q4, scale applied per group; rvq3 adds the three
 * stage lookups of a group before adding them to the row sum). They are
 * always built and run on any x86-64 (and any other CPU). The int16 rvq3
 * LUT quantiser spill_k_qlut_rvq3_i16__ref is the exact arithmetic of its
 * AVX2 twin, and spill_k_apply_rvq3_i16__ref that of the VBMI twin (int sum
 * of three stage entries, f32 convert, times the group scale, added to the
 * row sum; no FMA contraction in C11 mode). One matvec and one dequantiser
 * per dtype: the choice of kernel (dtype x ISA) is kernels_dispatch.c's. Depends on engine/base and the
 * K-quant reference (kernels_kquant_ref.c) only.
 */
#include <math.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"

/* ---------------------------------------------------------------- ref */

static float dot_f32(const float *w, const float *x, uint32_t n) {
  float acc = 0.0f;
  for (uint32_t c = 0; c < n; c++) acc += w[c] * x[c];
  return acc;
}

static float row_q8(const int8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
                    uint32_t group) {
  float acc = 0.0f;
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    float g = 0.0f;
    for (uint32_t c = c0; c < c0 + group; c++) g += (float)q[c] * x[c];
    acc += spill_f16_to_f32(s[c0 / group]) * g;
  }
  return acc;
}

static float row_q4(const uint8_t *q, const spill_k_u16_unaligned *s, const float *x, uint32_t cols,
                    uint32_t group) {
  /* q points at the row's first byte; cols and group are even. */
  float acc = 0.0f;
  for (uint32_t c0 = 0; c0 < cols; c0 += group) {
    float g = 0.0f;
    for (uint32_t c = c0; c < c0 + group; c += 2) {
      uint8_t b = q[c / 2];
      g += (float)((int)(b & 0x0F) - 8) * x[c];
      g += (float)((int)(b >> 4) - 8) * x[c + 1];
    }
    acc += spill_f16_to_f32(s[c0 / group]) * g;
  }
  return acc;
}

static float row_f16(const uint16_t *p, const float *x, size_t cols) {
  float acc = 0.0f;
  for (size_t c = 0; c < cols; c++) acc += spill_f16_to_f32(p[c]) * x[c];
  return acc;
}

static float row_bf16(const uint16_t *p, const float *x, size_t cols) {
  float acc = 0.0f;
  for (size_t c = 0; c < cols; c++) acc += spill_bf16_to_f32(p[c]) * x[c];
  return acc;
}

/* The per-dtype row loops of the kernel table (kernels_isa.h): each output
 * row is one accumulator summed in column order. */
#define REF_ROWS(DT, EXPR)                                                                      \
  void spill_k_matvec_##DT##_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0, \
                                      uint32_t r1) {                                            \
    const size_t cols = w->cols;                                                                \
    for (uint32_t r = r0; r < r1; r++) y[r] = (EXPR);                                           \
  }

REF_ROWS(f32, dot_f32((const float *)w->data + (size_t)r * cols, x, (uint32_t)cols))
REF_ROWS(f16, row_f16((const uint16_t *)w->data + (size_t)r * cols, x, cols))
REF_ROWS(bf16, row_bf16((const uint16_t *)w->data + (size_t)r * cols, x, cols))
REF_ROWS(q8, row_q8((const int8_t *)w->data + (size_t)r * cols,
                    w->scales + (size_t)r * (cols / w->group), x, (uint32_t)cols, w->group))
REF_ROWS(q4, row_q4((const uint8_t *)w->data + (size_t)r * cols / 2,
                    w->scales + (size_t)r * (cols / w->group), x, (uint32_t)cols, w->group))
REF_ROWS(kquant, spill_k_dot_kquant_f32__ref(
                     w->dtype,
                     (const uint8_t *)w->data +
                         (size_t)r * (cols / 256) * spill_dtype_traits_of(w->dtype)->block_bytes,
                     x, (uint32_t)cols))
#undef REF_ROWS

void spill_k_lut_rvq3_f32__ref(const float *codebook, const float *x, uint32_t cols, float *lut,
                               uint32_t g0, uint32_t g1) {
  const size_t ng = cols / 8;
  for (uint32_t s = 0; s < 3; s++) {
    const float *cb = codebook + (size_t)s * 256 * 8;
    for (uint32_t g = g0; g < g1; g++) {
      float *out = lut + ((size_t)s * ng + g) * 256;
      const float *xg = x + (size_t)g * 8;
      for (uint32_t k = 0; k < 256; k++) out[k] = dot_f32(cb + k * 8, xg, 8);
    }
  }
}

void spill_k_apply_rvq3_f32__ref(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                 uint32_t r1) {
  const size_t ng = w->cols / 8;
  const uint8_t *idx = (const uint8_t *)w->data;
  const float *l0 = lut, *l1 = lut + ng * 256, *l2 = lut + 2 * ng * 256;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = idx + (size_t)r * ng * 3;
    float acc = 0.0f;
    for (size_t g = 0; g < ng; g++, p += 3)
      acc += l0[g * 256 + p[0]] + l1[g * 256 + p[1]] + l2[g * 256 + p[2]];
    y[r] = spill_f16_to_f32(w->scales[r]) * acc;
  }
}

void spill_k_matvec_rvq3_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                  uint32_t r1) {
  const size_t ng = w->cols / 8;
  const float *c0 = w->codebook, *c1 = c0 + 256 * 8, *c2 = c1 + 256 * 8;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
    float acc = 0.0f;
    for (size_t g = 0; g < ng; g++, p += 3) {
      const float *e0 = c0 + p[0] * 8, *e1 = c1 + p[1] * 8, *e2 = c2 + p[2] * 8;
      for (size_t j = 0; j < 8; j++) acc += ((e0[j] + e1[j]) + e2[j]) * x[g * 8 + j];
    }
    y[r] = spill_f16_to_f32(w->scales[r]) * acc;
  }
}

size_t spill_k_qlut_rvq3_i16_bytes(uint32_t cols) {
  return (size_t)(cols / 8) * (SPILL_K_RVQ3_QLUT_GROUP_BYTES + sizeof(float));
}

void spill_k_qlut_rvq3_i16__ref(const float *lut, uint32_t cols, void *qlut, uint32_t g0,
                                uint32_t g1) {
  const size_t ng = cols / 8;
  uint8_t *qt = (uint8_t *)qlut;
  float *scale = (float *)(qt + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES);
  for (size_t g = g0; g < g1; g++) {
    float m = 0.0f;
    int nan = 0;
    for (size_t s = 0; s < 3; s++)
      for (size_t k = 0; k < 256; k++) {
        const float v = lut[(s * ng + g) * 256 + k];
        nan |= isnan(v);
        m = fmaxf(m, fabsf(v));
      }
    /* A non-finite input poisons the group (scale NaN, entries 0) so that
     * every row's output is NaN, as the f32 path would (nearly) give. */
    const int bad = nan || isinf(m);
    const float inv = m > 0.0f && !bad ? 10922.0f / m : 0.0f;
    scale[g] = bad ? NAN : m / 10922.0f;
    for (size_t s = 0; s < 3; s++) {
      uint8_t *t = qt + g * SPILL_K_RVQ3_QLUT_GROUP_BYTES + s * 512;
      for (size_t k = 0; k < 256; k++) {
        float v = nearbyintf(lut[(s * ng + g) * 256 + k] * inv);
        if (v > 10922.0f) v = 10922.0f;
        if (v < -10922.0f) v = -10922.0f;
        const uint16_t q = (uint16_t)(int16_t)v;
        t[k] = (uint8_t)(q & 0xFF);
        t[256 + k] = (uint8_t)(q >> 8);
      }
    }
  }
}

void spill_k_apply_rvq3_i16__ref(const spill_qmat *w, const void *qlut, float *y, uint32_t r0,
                                 uint32_t r1) {
  const size_t ng = w->cols / 8;
  const uint8_t *qt = (const uint8_t *)qlut;
  const float *scale = (const float *)(qt + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES);
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
    float acc = 0.0f;
    for (size_t g = 0; g < ng; g++, p += 3) {
      const uint8_t *t = qt + g * SPILL_K_RVQ3_QLUT_GROUP_BYTES;
      int sum = 0;
      for (size_t s = 0; s < 3; s++)
        sum += (int16_t)(uint16_t)(t[s * 512 + p[s]] | (t[s * 512 + 256 + p[s]] << 8));
      const float prod = (float)sum * scale[g];
      acc = acc + prod;
    }
    y[r] = spill_f16_to_f32(w->scales[r]) * acc;
  }
}

/* spill_k_dequant_row, one function per dtype (rows of the kernel table). */
void spill_k_dequant_row_f32__ref(const spill_qmat *w, uint32_t r, float *out) {
  memcpy(out, (const float *)w->data + (size_t)r * w->cols, (size_t)w->cols * sizeof(float));
}

void spill_k_dequant_row_f16__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t cols = w->cols;
  const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
  for (size_t c = 0; c < cols; c++) out[c] = spill_f16_to_f32(p[c]);
}

void spill_k_dequant_row_bf16__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t cols = w->cols;
  const uint16_t *p = (const uint16_t *)w->data + (size_t)r * cols;
  for (size_t c = 0; c < cols; c++) out[c] = spill_bf16_to_f32(p[c]);
}

void spill_k_dequant_row_q8__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t cols = w->cols;
  const int8_t *q = (const int8_t *)w->data + (size_t)r * cols;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * (cols / w->group);
  for (size_t c = 0; c < cols; c++) out[c] = spill_f16_to_f32(s[c / w->group]) * (float)q[c];
}

void spill_k_dequant_row_q4__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t cols = w->cols;
  const uint8_t *q = (const uint8_t *)w->data + (size_t)r * cols / 2;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * (cols / w->group);
  for (size_t c = 0; c < cols; c++) {
    int nib = (c & 1) ? (q[c / 2] >> 4) : (q[c / 2] & 0x0F);
    out[c] = spill_f16_to_f32(s[c / w->group]) * (float)(nib - 8);
  }
}

void spill_k_dequant_row_kquant__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t nb = w->cols / 256;
  const uint8_t *p = (const uint8_t *)w->data + (size_t)r * nb * spill_dtype_traits_of(w->dtype)->block_bytes;
  spill_k_kquant_dequant_blocks(w->dtype, p, nb, out);
}

void spill_k_dequant_row_rvq3__ref(const spill_qmat *w, uint32_t r, float *out) {
  const size_t ng = w->cols / 8;
  const uint8_t *p = (const uint8_t *)w->data + (size_t)r * ng * 3;
  const float sc = spill_f16_to_f32(w->scales[r]);
  const float *cb = w->codebook;
  for (size_t g = 0; g < ng; g++, p += 3)
    for (size_t j = 0; j < 8; j++)
      out[g * 8 + j] = sc * (cb[(0 * 256 + p[0]) * 8 + j] + cb[(1 * 256 + p[1]) * 8 + j] +
                             cb[(2 * 256 + p[2]) * 8 + j]);
}

/* ------------------------------------------------------------ helpers */

void spill_k_rmsnorm(const float *x, const float *w, float *y, uint32_t n, float eps) {
  float ss = 0.0f;
  for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (uint32_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

float spill_k_dot(const float *a, const float *b, uint32_t n) { return dot_f32(a, b, n); }

void spill_k_gdn_step__ref(float *S, uint32_t d, float decay, const float *k, const float *q,
                           float beta, const float *v, float *u, float *o) {
  memset(u, 0, (size_t)d * sizeof(float));
  for (uint32_t a = 0; a < d; a++) { /* decay rows, u = S^T k */
    float *row = S + (size_t)a * d;
    const float ka = k[a];
    for (uint32_t b = 0; b < d; b++) {
      row[b] = row[b] * decay;
      u[b] = u[b] + row[b] * ka;
    }
  }
  for (uint32_t b = 0; b < d; b++) u[b] = beta * (v[b] - u[b]);
  memset(o, 0, (size_t)d * sizeof(float));
  for (uint32_t a = 0; a < d; a++) { /* S += k u^T; o = S^T q */
    float *row = S + (size_t)a * d;
    const float ka = k[a], qa = q[a];
    for (uint32_t b = 0; b < d; b++) {
      row[b] = row[b] + ka * u[b];
      o[b] = o[b] + row[b] * qa;
    }
  }
}

void spill_k_silu_mul(float *g, const float *u, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void spill_k_softmax(float *x, uint32_t n) {
  float m = x[0];
  for (uint32_t i = 1; i < n; i++)
    if (x[i] > m) m = x[i];
  float sum = 0.0f;
  for (uint32_t i = 0; i < n; i++) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (uint32_t i = 0; i < n; i++) x[i] *= inv;
}

/* a ranks before b: larger score, then lower index; NaN after every number. */
static int topk_before(float a, uint32_t ia, float b, uint32_t ib) {
  if (isnan(a) || isnan(b)) return isnan(b) && (!isnan(a) || ia < ib);
  return a > b || (a == b && ia < ib);
}

void spill_k_topk(const float *score, uint32_t n, uint32_t k, uint32_t *idx) {
  /* Insertion into a sorted list of k: O(n k), k is small (<= 64). */
  uint32_t have = 0;
  for (uint32_t i = 0; i < n && k > 0; i++) {
    if (have == k && !topk_before(score[i], i, score[idx[k - 1]], idx[k - 1])) continue;
    uint32_t pos = have < k ? have++ : k - 1;
    while (pos > 0 && topk_before(score[i], i, score[idx[pos - 1]], idx[pos - 1])) {
      idx[pos] = idx[pos - 1];
      pos--;
    }
    idx[pos] = i;
  }
}
