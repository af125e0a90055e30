/* engine/quant/kernels_q5_ref.c: the scalar Q5_0 / Q5_1 kernels (the block
 * dequantiser, the f32-input and Q8_0 / Q8_1-input __ref matvecs) whose
 * arithmetic kernels_q5.h fixes; kernels_q5_avx2.c's integer twins match
 * these bit for bit. Depends on engine/base only.
 */
#include <math.h>
#include <string.h>

#include "engine/base/dtype_traits.h"
#include "engine/base/half.h"
#include "engine/quant/kernels_q5.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

void spill_k_q5_values(const uint8_t *qh, uint8_t u[32]) {
  const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
  const uint8_t *qs = qh + 4;
  for (int j = 0; j < 16; j++) {
    u[j] = (uint8_t)((qs[j] & 0xF) | ((h >> j) & 1) << 4);
    u[j + 16] = (uint8_t)((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4);
  }
}

/* Offset of qh in a block of dt: after d (and m). */
static inline uint32_t qh_off(int dt) { return dt == SPILL_DT_Q5_1 ? 4u : 2u; }

void spill_k_q5_dequant_blocks(int dt, const uint8_t *src, uint64_t nb, float *out) {
  const uint32_t bb = spill_k_q5_block_bytes(dt);
  for (uint64_t b = 0; b < nb; b++, src += bb, out += 32) {
    uint8_t u[32];
    spill_k_q5_values(src + qh_off(dt), u);
    const float d = spill_f16_to_f32(rd16(src));
    if (dt == SPILL_DT_Q5_1) {
      const float m = spill_f16_to_f32(rd16(src + 2));
      for (int j = 0; j < 32; j++) {
        const float t = (float)u[j] * d;
        out[j] = t + m;
      }
    } else {
      for (int j = 0; j < 32; j++) out[j] = (float)((int)u[j] - 16) * d;
    }
  }
}

static const uint8_t *q5_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / SPILL_K_Q5_BLOCK) * spill_k_q5_block_bytes(w->dtype);
}

void spill_k_dequant_row_q5__ref(const spill_qmat *w, uint32_t r, float *out) {
  spill_k_q5_dequant_blocks(w->dtype, q5_row(w, r), w->cols / SPILL_K_Q5_BLOCK, out);
}

void spill_k_matvec_q5_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK, bb = spill_k_q5_block_bytes(w->dtype);
  const int one = w->dtype == SPILL_DT_Q5_1;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    float acc = 0.0f;
    for (uint32_t b = 0; b < nb; b++, p += bb) {
      const float *xb = x + (size_t)b * SPILL_K_Q5_BLOCK;
      uint8_t u[32];
      spill_k_q5_values(p + qh_off(w->dtype), u);
      float s = 0.0f, sx = 0.0f;
      for (int j = 0; j < 32; j++) s += (float)((int)u[j] - (one ? 0 : 16)) * xb[j];
      acc += spill_f16_to_f32(rd16(p)) * s;
      if (one) {
        for (int j = 0; j < 32; j++) sx += xb[j];
        acc += spill_f16_to_f32(rd16(p + 2)) * sx;
      }
    }
    y[r] = acc;
  }
}

int spill_k_fits_q5_xq(const spill_qmat *w) { return w->cols % SPILL_K_Q5_BLOCK == 0; }

/* Lane k of one block: sum_{e=4k..4k+3} (u_e - bias) q_e, exact in int32. */
static void block_lanes(const uint8_t *qh, int bias, const int8_t *q, int32_t lane[8]) {
  uint8_t u[32];
  spill_k_q5_values(qh, u);
  for (int k = 0; k < 8; k++) {
    int32_t s = 0;
    for (int i = 4 * k; i < 4 * k + 4; i++) s += ((int32_t)u[i] - bias) * q[i];
    lane[k] = s;
  }
}

static float hsum8(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

void spill_k_matvec_q5_0_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                 uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    float acc[8] = {0};
    for (uint32_t b = 0; b < nb; b++, p += 22) {
      int32_t lane[8];
      block_lanes(p + 2, 16, xq->q32 + (size_t)b * 32, lane);
      const float d = spill_f16_to_f32(rd16(p)) * xq->d32[b];
      for (int k = 0; k < 8; k++) acc[k] = fmaf(d, (float)lane[k], acc[k]);
    }
    y[r] = hsum8(acc);
  }
}

void spill_k_matvec_q5_1_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                 uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_Q5_BLOCK;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = q5_row(w, r);
    float acc[8] = {0}, summs = 0.0f;
    for (uint32_t b = 0; b < nb; b++, p += 24) {
      summs = fmaf(spill_f16_to_f32(rd16(p + 2)), xq->s32[b], summs);
      int32_t lane[8];
      block_lanes(p + 4, 0, xq->q32 + (size_t)b * 32, lane);
      const float d = spill_f16_to_f32(rd16(p)) * xq->d32[b];
      for (int k = 0; k < 8; k++) acc[k] = fmaf((float)lane[k], d, acc[k]);
    }
    y[r] = hsum8(acc) + summs;
  }
}
