/* engine/quant/kernels_mxfp4_ref.c: the scalar MXFP4 kernels (the block
 * dequantiser, the f32-input and Q8_0-input __ref matvecs) whose arithmetic
 * kernels_mxfp4.h fixes; kernels_mxfp4_avx2.c's Q8_0 twin matches the
 * integer-path one bit for bit. Depends on engine/base only.
 */
#include <math.h>

#include "engine/quant/kernels_mxfp4.h"

const int8_t spill_k_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void spill_k_mxfp4_dequant_block(const uint8_t *blk, float *out) {
  const float d = spill_k_e8m0_half(blk[0]);
  for (int j = 0; j < 16; j++) {
    out[j] = (float)spill_k_mxfp4_values[blk[1 + j] & 0xF] * d;
    out[j + 16] = (float)spill_k_mxfp4_values[blk[1 + j] >> 4] * d;
  }
}

static const uint8_t *mx_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / SPILL_K_MXFP4_BLOCK) * SPILL_K_MXFP4_BLOCK_BYTES;
}

void spill_k_dequant_row_mxfp4__ref(const spill_qmat *w, uint32_t r, float *out) {
  const uint8_t *p = mx_row(w, r);
  for (uint32_t b = 0; b < w->cols / SPILL_K_MXFP4_BLOCK; b++)
    spill_k_mxfp4_dequant_block(p + (size_t)b * SPILL_K_MXFP4_BLOCK_BYTES, out + (size_t)b * SPILL_K_MXFP4_BLOCK);
}

void spill_k_matvec_mxfp4_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                   uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_MXFP4_BLOCK;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = mx_row(w, r);
    float acc = 0.0f;
    for (uint32_t b = 0; b < nb; b++, p += SPILL_K_MXFP4_BLOCK_BYTES) {
      const float *xb = x + (size_t)b * SPILL_K_MXFP4_BLOCK;
      float s = 0.0f;
      for (int j = 0; j < 16; j++) s += (float)spill_k_mxfp4_values[p[1 + j] & 0xF] * xb[j];
      for (int j = 0; j < 16; j++) s += (float)spill_k_mxfp4_values[p[1 + j] >> 4] * xb[16 + j];
      acc += spill_k_e8m0_half(p[0]) * s;
    }
    y[r] = acc;
  }
}

/* Code of element e of a compressed-tensors packed row. */
static inline uint8_t ct_code(const uint8_t *row, uint64_t e) {
  return (uint8_t)((row[e / 2] >> (4 * (e & 1))) & 0xF);
}

void spill_k_mxfp4_from_packed(const uint8_t *packed, const uint8_t *scales, uint64_t rows,
                               uint64_t cols, uint8_t *blocks) {
  const uint64_t nb = cols / SPILL_K_MXFP4_BLOCK;
  for (uint64_t r = 0; r < rows; r++) {
    const uint8_t *pr = packed + r * (cols / 2);
    for (uint64_t b = 0; b < nb; b++, blocks += SPILL_K_MXFP4_BLOCK_BYTES) {
      blocks[0] = scales[r * nb + b];
      for (uint64_t j = 0; j < 16; j++)
        blocks[1 + j] = (uint8_t)(ct_code(pr, 32 * b + j) | ct_code(pr, 32 * b + 16 + j) << 4);
    }
  }
}

void spill_k_mxfp4_to_packed(const uint8_t *blocks, uint64_t rows, uint64_t cols, uint8_t *packed,
                             uint8_t *scales) {
  const uint64_t nb = cols / SPILL_K_MXFP4_BLOCK;
  for (uint64_t r = 0; r < rows; r++) {
    uint8_t *pr = packed + r * (cols / 2);
    for (uint64_t b = 0; b < nb; b++, blocks += SPILL_K_MXFP4_BLOCK_BYTES) {
      scales[r * nb + b] = blocks[0];
      uint8_t code[32];
      for (int j = 0; j < 16; j++) {
        code[j] = blocks[1 + j] & 0xF;
        code[16 + j] = blocks[1 + j] >> 4;
      }
      for (int i = 0; i < 16; i++) pr[16 * b + i] = (uint8_t)(code[2 * i] | code[2 * i + 1] << 4);
    }
  }
}

int spill_k_fits_mxfp4_xq(const spill_qmat *w) { return w->cols % SPILL_K_MXFP4_BLOCK == 0; }

/* Lane k of one block: sum_{e=4k..4k+3} value_e q_e, exact in int32. */
static void block_lanes(const uint8_t *blk, const int8_t *q, int32_t lane[8]) {
  int v[32];
  for (int j = 0; j < 16; j++) {
    v[j] = spill_k_mxfp4_values[blk[1 + j] & 0xF];
    v[j + 16] = spill_k_mxfp4_values[blk[1 + j] >> 4];
  }
  for (int k = 0; k < 8; k++)
    lane[k] = v[4 * k] * q[4 * k] + v[4 * k + 1] * q[4 * k + 1] + v[4 * k + 2] * q[4 * k + 2] +
              v[4 * k + 3] * q[4 * k + 3];
}

static float hsum8(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

void spill_k_matvec_mxfp4_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                  uint32_t r1) {
  const uint32_t nb = w->cols / SPILL_K_MXFP4_BLOCK;
  for (uint32_t r = r0; r < r1; r++) {
    const uint8_t *p = mx_row(w, r);
    float acc[2][8] = {{0}};
    uint32_t b = 0;
    for (; b + 1 < nb; b += 2) {
      for (int h = 0; h < 2; h++) {
        const uint8_t *blk = p + (size_t)(b + h) * SPILL_K_MXFP4_BLOCK_BYTES;
        int32_t lane[8];
        block_lanes(blk, xq->q32 + (size_t)(b + h) * 32, lane);
        const float d = xq->d32[b + h] * spill_k_e8m0_half(blk[0]);
        for (int k = 0; k < 8; k++) acc[h][k] = fmaf(d, (float)lane[k], acc[h][k]);
      }
    }
    float l[8];
    for (int k = 0; k < 8; k++) l[k] = acc[0][k] + acc[1][k];
    float sum = hsum8(l);
    if (b < nb) { /* the unpaired last block: int sum, then d * sum added (no fma) */
      const uint8_t *blk = p + (size_t)b * SPILL_K_MXFP4_BLOCK_BYTES;
      int32_t lane[8], s = 0;
      block_lanes(blk, xq->q32 + (size_t)b * 32, lane);
      for (int k = 0; k < 8; k++) s += lane[k];
      const float d = xq->d32[b] * spill_k_e8m0_half(blk[0]);
      const float t = d * (float)s;
      sum = sum + t;
    }
    y[r] = sum;
  }
}
