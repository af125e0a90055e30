/* engine/quant/kernels_q5.h: ggml's Q5_0 and Q5_1 blocks, container dtypes
 * q5_0 and q5_1 (docs/FORMAT.md), so the matrices llama-quantize stores in
 * them (its fallback for column counts that are not a multiple of 256:
 * Q4_K -> Q5_0, Q5_K -> Q5_1) run with exactly their bytes.
 *
 * A block is 32 weights: Q5_0 (22 bytes) f16 d, 4 bytes qh (a little-endian
 * word h), 16 bytes qs; Q5_1 (24 bytes) f16 d, f16 m, qh, qs. Element j < 16
 * has u = (qs[j] & 15) | bit j of h << 4, element j + 16 has u = (qs[j] >>
 * 4) | bit j + 16 of h << 4 (u in 0..31). Q5_0: w = (u - 16) * d; Q5_1: w =
 * u * d + m (ggml's dequantize_row_q5_0 / q5_1, f32).
 *
 * Kernels (rows of the table in kernels_dispatch.c):
 *  - f32 input: __ref sums v * x over a block in element order (v = u - 16
 *    for Q5_0, u for Q5_1; for Q5_1 also the sum of x), then adds d * sum
 *    (+ m * sum x) to the row sum; __avx2 keeps the block's products in 8
 *    lanes and scales them into an 8-lane row accumulator (the same values,
 *    another order; within the f32 ceilings of kernels_q5_test.cc).
 *  - Q8_0 / Q8_1 input (act_quant q8, kernels_xq.h): ggml's AVX2
 *    arithmetic, which __ref and __avx2 follow bit for bit. Lane k (0..7)
 *    of a block is the exact int32 sum of its elements 4k..4k+3's v * q.
 *    Q5_0 (ggml_vec_dot_q5_0_q8_0, and llamafile's tinyBLAS_Q0_AVX for
 *    ggml_mul_mat, the same per-element operations): acc_k = fma(d_w * d_x,
 *    (float)lane_k, acc_k) block by block, y = H(acc). Q5_1
 *    (ggml_vec_dot_q5_1_q8_1, Q8_1 activations carrying s = d * sum q):
 *    acc_k = fma((float)lane_k, d_w * d_x, acc_k), summs = fma(m_w, s_x,
 *    summs) (the peer's compiled code fuses it: vfmadd231ss), y = H(acc) +
 *    summs.
 * Internal to engine/quant, its tests and engine/import (the dequantiser).
 */
#ifndef SPILL_QUANT_KERNELS_Q5_H
#define SPILL_QUANT_KERNELS_Q5_H

#include <stdint.h>

#include "engine/quant/kernels.h"
#include "engine/quant/kernels_xq.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_K_Q5_BLOCK 32u /* weights per block */

/* Block bytes of dt (SPILL_DT_Q5_0: 22, SPILL_DT_Q5_1: 24). */
static inline uint32_t spill_k_q5_block_bytes(int dt) { return dt == SPILL_DT_Q5_1 ? 24u : 22u; }

/* The 32 unsigned 5-bit values u of a block whose qh starts at qh (qs
 * follows it). */
void spill_k_q5_values(const uint8_t *qh, uint8_t u[32]);
/* Dequantises nb consecutive blocks of dt (SPILL_DT_Q5_0 or _Q5_1) at src
 * into out (32 nb floats), as ggml's dequantize_row_q5_0 / q5_1. */
void spill_k_q5_dequant_blocks(int dt, const uint8_t *src, uint64_t nb, float *out);

/* The kernel table's cells (kernels_isa.h's contracts); the f32 and
 * dequant cells serve both dtypes (by w->dtype). */
void spill_k_matvec_q5_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                uint32_t r1);
void spill_k_matvec_q5_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                 uint32_t r1);
void spill_k_matvec_q5_0_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                 uint32_t r1);
void spill_k_matvec_q5_0_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                  uint32_t r0, uint32_t r1);
void spill_k_matvec_q5_1_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                 uint32_t r1);
void spill_k_matvec_q5_1_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                  uint32_t r0, uint32_t r1);
void spill_k_dequant_row_q5__ref(const spill_qmat *w, uint32_t r, float *out);
/* The integer path takes w: cols a multiple of 32. */
int spill_k_fits_q5_xq(const spill_qmat *w);

#ifdef __cplusplus
}
#endif
#endif
