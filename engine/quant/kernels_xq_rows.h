/* engine/quant/kernels_xq_rows.h: the row dispatch of the integer-activation
 * matvec (kernels_xq.h), written once for the __ref and __avx2 twins: each
 * passes its own row kernels (a q4_k/q5_k row, a q6_k row, a q8/q4 row) and
 * this loop finds row r's bytes and picks the kernel by dtype (q8/q4 rows
 * go to the kernel as one range, so it can run several rows per pass),
 * and the block loop of the activation quantiser. Internal to
 * engine/quant.
 */
#ifndef SPILL_QUANT_KERNELS_XQ_ROWS_H
#define SPILL_QUANT_KERNELS_XQ_ROWS_H

#include "engine/quant/kernels_xq.h"

/* One q4_k (five = 0) or q5_k (five = 1) row of cols weights. */
typedef float (*spill_k_xq_row_q45k_fn)(const uint8_t *row, const spill_k_xq *xq, uint32_t cols, int five);
/* One q6_k row of cols weights. */
typedef float (*spill_k_xq_row_q6k_fn)(const uint8_t *row, const spill_k_xq *xq, uint32_t cols);
/* y[r] for r in [r0, r1) of a q8 or q4 matrix (group % 32 == 0). */
typedef void (*spill_k_xq_rows_q8q4_fn)(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                        uint32_t r1);

/* y[r] for r in [r0, r1): w is one that spill_k_matvec_xq_ok accepts. */
static inline void spill_k_xq_rows(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                   uint32_t r1, spill_k_xq_row_q45k_fn q45k, spill_k_xq_row_q6k_fn q6k,
                                   spill_k_xq_rows_q8q4_fn q8q4) {
  const size_t cols = w->cols;
  if (w->dtype == SPILL_K_DT_Q8 || w->dtype == SPILL_K_DT_Q4) {
    q8q4(w, xq, y, r0, r1);
    return;
  }
  for (uint32_t r = r0; r < r1; r++) {
    if (w->dtype == SPILL_K_DT_Q4_K || w->dtype == SPILL_K_DT_Q5_K) {
      const int five = w->dtype == SPILL_K_DT_Q5_K;
      y[r] = q45k((const uint8_t *)w->data + (size_t)r * (cols / 256) * (five ? 176 : 144), xq, (uint32_t)cols,
                  five);
    } else {
      y[r] = q6k((const uint8_t *)w->data + (size_t)r * (cols / 256) * 210, xq, (uint32_t)cols);
    }
  }
}

/* One Q8_0 block (32 values) and one Q8_K block (256 values, 16 sums). */
typedef void (*spill_k_xq_q8_0_fn)(const float *x, int8_t *q, float *d);
typedef void (*spill_k_xq_q8_k_fn)(const float *x, int8_t *q, float *d, int16_t *bs);

/* Quantises x into every form xq holds, block by block. */
static inline void spill_k_xq_blocks(const float *x, spill_k_xq *xq, spill_k_xq_q8_0_fn q80,
                                     spill_k_xq_q8_k_fn q8k) {
  const uint32_t n = xq->n;
  if (xq->q32)
    for (uint32_t b = 0; b < n / 32; b++) q80(x + 32 * b, xq->q32 + 32 * b, xq->d32 + b);
  if (xq->q256)
    for (uint32_t b = 0; b < n / 256; b++) q8k(x + 256 * b, xq->q256 + 256 * b, xq->d256 + b, xq->bsum + 16 * b);
}

#endif
