/* engine/quant/kernels_mxfp4.h: MXFP4 blocks (the OCP microscaling FP4
 * format as ggml stores it, block_mxfp4), container dtype mxfp4
 * (docs/FORMAT.md), so a checkpoint's MXFP4 experts run with exactly their
 * bytes.
 *
 * A block is 32 weights in 17 bytes: byte 0 an e8m0 exponent e, bytes 1..16
 * the 4-bit codes, byte 1+j holding element j in its low nibble and element
 * j+16 in its high nibble. A code indexes the e2m1 values doubled,
 * {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}, and the block
 * scale is half of 2^(e-127): 2^(e-128), which for e = 0 and 1 is a
 * subnormal float (2^-128, 2^-127), as ggml's ggml_e8m0_to_fp32_half gives
 * it. w = value * scale is exact in f32. e = 255 (NaN in e8m0) is refused
 * by the format's checks (spill_dtype_check_values); a kernel given one
 * computes what ggml computes (2^127).
 *
 * Kernels (rows of the table in kernels_dispatch.c):
 *  - f32 input: __ref sums value * x over a block in element order, then
 *    adds scale * that sum to the row sum; __avx2 keeps two 8-lane FMA sums
 *    per block (elements 0-7 and 16-23, 8-15 and 24-31), scales their sum
 *    into an 8-lane row accumulator, and sums the lanes in the fixed order
 *    of kernels_hsum_avx2.h: the same values, another order (within the f32
 *    ceilings of kernels_mxfp4_test.cc).
 *  - Q8_0 input (act_quant q8, kernels_xq.h): ggml's AVX2
 *    ggml_vec_dot_mxfp4_q8_0 arithmetic, which __ref and __avx2 both follow
 *    bit for bit: lane k (0..7) of a block is the exact int32 sum of its
 *    elements 4k..4k+3's value * q; even blocks go to one 8-lane f32
 *    accumulator and odd blocks to another, each lane k = fma(d_x * scale,
 *    (float)lane_k, acc_k) block by block; the row is H(acc_even + acc_odd)
 *    (H of kernels_xq.h); a last, unpaired block (cols / 32 odd) adds
 *    fma(d_x * scale, (float)sum, row) as the peer's compiled tail does.
 * Internal to engine/quant and its tests.
 */
#ifndef SPILL_QUANT_KERNELS_MXFP4_H
#define SPILL_QUANT_KERNELS_MXFP4_H

#include <stdint.h>
#include <string.h>

#include "engine/quant/kernels.h"
#include "engine/quant/kernels_xq.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_K_MXFP4_BLOCK 32u      /* weights per block */
#define SPILL_K_MXFP4_BLOCK_BYTES 17u /* 1 exponent + 16 code bytes */

/* The e2m1 values doubled, by code. */
extern const int8_t spill_k_mxfp4_values[16];

/* The block scale of exponent e: 2^(e-128) (ggml_e8m0_to_fp32_half). */
static inline float spill_k_e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Dequantises one block into out (32 floats). */
void spill_k_mxfp4_dequant_block(const uint8_t *blk, float *out);

/* Lossless repack between the Hugging Face compressed-tensors
 * `mxfp4-pack-quantized` layout and ggml's blocks (no value changes: the
 * same codes and exponents in another order). compressed-tensors: a (rows,
 * cols) matrix is weight_packed, uint8 (rows, cols/2), element 2i of a row
 * in the low nibble of byte i and 2i+1 in the high one, and weight_scale,
 * uint8 e8m0 (rows, cols/32), the exponent of elements [32b, 32b+32).
 * blocks: rows * (cols/32) blocks of 17 bytes (above). cols % 32 == 0;
 * buffers do not overlap. For engine/import. */
void spill_k_mxfp4_from_packed(const uint8_t *packed, const uint8_t *scales, uint64_t rows,
                               uint64_t cols, uint8_t *blocks);
void spill_k_mxfp4_to_packed(const uint8_t *blocks, uint64_t rows, uint64_t cols, uint8_t *packed,
                             uint8_t *scales);

/* The kernel table's cells (kernels_isa.h's contracts). */
void spill_k_matvec_mxfp4_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                   uint32_t r1);
void spill_k_matvec_mxfp4_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                    uint32_t r1);
void spill_k_matvec_mxfp4_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                                  uint32_t r1);
void spill_k_matvec_mxfp4_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                   uint32_t r0, uint32_t r1);
void spill_k_dequant_row_mxfp4__ref(const spill_qmat *w, uint32_t r, float *out);
/* The integer path takes w: cols a multiple of 32. */
int spill_k_fits_mxfp4_xq(const spill_qmat *w);

#ifdef __cplusplus
}
#endif
#endif
