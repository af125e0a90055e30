/* engine/quant/kernels_kquant_ref.c: scalar K-quant block dequantisers
 * (ggml's dequantize_row_q4_K / q5_K / q6_K, same operations in the same
 * order, so every value equals llama.cpp's) and the __ref row dot product.
 */
#include <string.h>

#include "engine/base/half.h"
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

void spill_k_kquant_dequant_block(int dt, const uint8_t *b, float *y) {
  if (dt == SPILL_DT_Q6_K) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = spill_f16_to_f32(rd16(b + 208));
    for (int n = 0; n < 256; n += 128) {
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
    return;
  }
  const int five = dt == SPILL_DT_Q5_K;
  const float d = spill_f16_to_f32(rd16(b)), min = spill_f16_to_f32(rd16(b + 2));
  const uint8_t *sc = b + 4, *qh = b + 16, *q = five ? b + 48 : b + 16;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    uint8_t s, m;
    scale_min_k4(is + 0, sc, &s, &m);
    const float d1 = d * s, m1 = min * m;
    scale_min_k4(is + 1, sc, &s, &m);
    const float d2 = d * s, m2 = min * m;
    if (five) {
      for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = (uint8_t)(u1 << 2);
      u2 = (uint8_t)(u2 << 2);
    } else {
      for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
    }
    q += 32;
    is += 2;
  }
}

void spill_k_kquant_dequant_blocks(int dt, const uint8_t *blk, uint64_t n, float *out) {
  const uint32_t bb = spill_dtype_traits_of(dt)->block_bytes;
  for (uint64_t b = 0; b < n; b++) spill_k_kquant_dequant_block(dt, blk + b * bb, out + b * 256);
}

float spill_k_dot_kquant_f32__ref(int dt, const uint8_t *row, const float *x, uint32_t cols) {
  const uint32_t bb = spill_dtype_traits_of(dt)->block_bytes;
  float w[256], acc = 0.0f;
  for (uint32_t b = 0; b < cols / 256; b++) {
    spill_k_kquant_dequant_block(dt, row + (size_t)b * bb, w);
    const float *xb = x + (size_t)b * 256;
    for (int i = 0; i < 256; i++) acc += w[i] * xb[i];
  }
  return acc;
}
