/* engine/quant/kernels_kquant.h: rows of ggml's K-quant super-blocks (Q4_K,
 * Q5_K, Q6_K), stored verbatim as container dtypes q4_k / q5_k / q6_k
 * (docs/FORMAT.md), so a GGUF Q4_K_M file runs with exactly its weights.
 *
 * A row of `cols` (a multiple of 256) elements is cols/256 blocks in ggml's
 * layout (block bytes: the dtype traits table, engine/base/dtype_traits.h). Dequantisation
 * follows ggml's dequantize_row_q*_K operation for operation, so values are
 * bit-identical to llama.cpp's. The matvec row kernels: __ref dequantises a
 * block and accumulates w*x in element order; __avx2 accumulates 8 lanes
 * with FMA (same values, different summation order: within the f32 ceilings
 * of kernels_test.cc). Internal to engine/quant (spill_k_matvec dispatches
 * to them).
 */
#ifndef SPILL_QUANT_KERNELS_KQUANT_H
#define SPILL_QUANT_KERNELS_KQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype_traits.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dequantises one 256-element block into out (256 floats). */
void spill_k_kquant_dequant_block(int dtype, const uint8_t *blk, float *out);
/* Dequantises n consecutive blocks at blk into out (256 n floats). */
void spill_k_kquant_dequant_blocks(int dtype, const uint8_t *blk, uint64_t n, float *out);
/* sum_c w[c] x[c] over a row of cols elements (cols % 256 == 0). */
float spill_k_dot_kquant_f32__ref(int dtype, const uint8_t *row, const float *x, uint32_t cols);
float spill_k_dot_kquant_f32__avx2(int dtype, const uint8_t *row, const float *x, uint32_t cols);

#ifdef __cplusplus
}
#endif
#endif
