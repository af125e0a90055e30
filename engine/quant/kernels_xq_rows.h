/* engine/quant/kernels_xq_rows.h: the block loop of the activation
 * quantiser (kernels_xq.h), written once for the __ref and __avx2 twins:
 * each passes its own Q8_0 and Q8_K block quantisers. (Which row kernel a
 * weight dtype gets is the kernel table's, kernels_dispatch.c.) Internal to
 * engine/quant.
 */
#ifndef SPILL_QUANT_KERNELS_XQ_ROWS_H
#define SPILL_QUANT_KERNELS_XQ_ROWS_H

#include "engine/base/half.h"
#include "engine/quant/kernels_xq.h"

/* One Q8_0 block (32 values) and one Q8_K block (256 values, 16 sums). */
typedef void (*spill_k_xq_q8_0_fn)(const float *x, int8_t *q, float *d, float *s);

/* The Q8_1 sum of a block (kernels_xq.h): f16(amax/127 x sum), as ggml's
 * x86 quantize_row_q8_1 computes it (d before its f16 rounding). */
static inline float spill_q8_1_sum(float amax, int sum) {
  return spill_f16_to_f32(spill_f32_to_f16(amax / 127.0f * (float)sum));
}
typedef void (*spill_k_xq_q8_k_fn)(const float *x, int8_t *q, float *d, int16_t *bs);

/* Quantises x into every form xq holds, block by block. */
static inline void spill_k_xq_blocks(const float *x, spill_k_xq *xq, spill_k_xq_q8_0_fn q80,
                                     spill_k_xq_q8_k_fn q8k) {
  const uint32_t n = xq->n;
  if (xq->q32)
    for (uint32_t b = 0; b < n / 32; b++) q80(x + 32 * b, xq->q32 + 32 * b, xq->d32 + b, xq->s32 + b);
  if (xq->q256)
    for (uint32_t b = 0; b < n / 256; b++) q8k(x + 256 * b, xq->q256 + 256 * b, xq->d256 + b, xq->bsum + 16 * b);
}

#endif
