/* engine/quant/kernels_xq.h: integer-activation matvec (act_quant q8).
 *
 * The input vector is quantised once (spill_k_xq_quantize) the way ggml's
 * CPU backend quantises it: Q8_0 blocks of 32 (x86 quantize_row_q8_0: amax,
 * d = amax/127 stored as f16, q = round-half-even(x * 127/amax)) for q4/q8/
 * mxfp4/q5_0 weights, with the Q8_1 block sums for q5_1 (kernels_q5.h), and Q8_K blocks of 256 (quantize_row_q8_K_ref: the element of
 * largest |x| gives iscale = -127/x, q = min(127, rint(iscale x)), d =
 * 1/iscale, 16-element sums) for q4_k/q5_k/q6_k. The dot products then run in
 * integers, exact, and are scaled in f32 in an order fixed here, so the
 * __avx2 twins are bit-identical to __ref:
 * Lane k (0..7) of a 256-block holds the elements e with (e % 32) / 4 == k
 * (the int32 lanes of vpmaddubsw + vpmaddwd over 32-byte rows):
 *   q4_k, q5_k (ggml's AVX2 vec_dot order): S_k = sum_e sc_j(e) q_e x_e,
 *         M_i = m_2i B_2i + m_2i+1 B_2i+1 (i = 0..3, B_j = sum x over
 *         sub-block j), both int32; per
 *         super-block acc_k = fma(dx*d_w, (float)S_k, acc_k), accm_i =
 *         fma(-(dx*dmin_w), (float)M_i, accm_i); y = H(acc) +
 *         ((accm_0+accm_2)+(accm_1+accm_3)).
 *   q6_k: per super-block acc += (d_x * d_w) * (float)sumi, sumi = sum_e
 *         sc_g(e) (q_e - 32) x_e (int32), acc one f32 (this order keeps the
 *         llama.cpp oracle's Q6_K cases passing; ggml's lane order flipped a
 *         near-tied routing in one of them).
 *   H(l) = ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
 *   q4/q8 (group a multiple of 32): 8 f32 lanes; for each 32-block b, lane
 *         k = fma(s_g * d_b, (float)sum_{e=4k..4k+3} w_e q_e, lane k), then
 *         y = H(lanes).
 * Weights of other dtypes (or q4/q8 groups not a multiple of 32) have no
 * integer path: spill_k_matvec_xq_ok() says 0 and callers use
 * spill_k_matvec with the f32 input.
 */
#ifndef SPILL_QUANT_KERNELS_XQ_H
#define SPILL_QUANT_KERNELS_XQ_H

#include <stddef.h>
#include <stdint.h>

#include "engine/quant/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A quantised input vector of n floats, laid out in one caller buffer of
 * spill_k_xq_bytes(n) bytes (spill_k_xq_init). */
typedef struct spill_k_xq {
  uint32_t n;
  int8_t *q32;     /* Q8_0 values (n), NULL unless n % 32 == 0 */
  float *d32;      /* Q8_0 scales (n/32), f16-rounded */
  float *s32;      /* Q8_1 sums (n/32): f16(d * sum of the block's q), d = amax/127
                    * before rounding (ggml's x86 quantize_row_q8_1; the values are
                    * q32's), f16-rounded; for q5_1 weights */
  int8_t *q256;    /* Q8_K values (n), NULL unless n % 256 == 0 */
  float *d256;     /* Q8_K scales (n/256) */
  int16_t *bsum;   /* Q8_K sums of 16 consecutive values (n/16) */
} spill_k_xq;

size_t spill_k_xq_bytes(uint32_t n);
/* Points xq's arrays into buf (spill_k_xq_bytes(n) bytes, any alignment). */
void spill_k_xq_init(spill_k_xq *xq, void *buf, uint32_t n);
/* Quantises x (xq->n floats) into both forms that n allows. Dispatches by
 * ISA; the __avx2 twin is bit-identical to __ref (the same f32 operations,
 * rounding half-even). Non-finite inputs give a NaN scale. */
void spill_k_xq_quantize(const float *x, spill_k_xq *xq);
void spill_k_xq_quantize__ref(const float *x, spill_k_xq *xq);
void spill_k_xq_quantize__avx2(const float *x, spill_k_xq *xq);
/* 1 if w has an integer path for an input of w->cols that xq can hold. */
int spill_k_matvec_xq_ok(const spill_qmat *w);
/* 1 if weights of this dtype (spill_dtype) have an integer path at all
 * (for some column counts); 0 for f32, f16, bf16, rvq3 and unknown dtypes. */
int spill_k_dtype_has_xq(int dtype);
/* y[r] = W[r] . xq for r in [r0, r1); w must satisfy spill_k_matvec_xq_ok
 * and xq->n == w->cols. Dispatches by ISA (bit-identical across ISAs). */
void spill_k_matvec_xq(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                       uint32_t r1);
void spill_k_matvec_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                            uint32_t r1);
void spill_k_matvec_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                             uint32_t r1);

#ifdef __cplusplus
}
#endif
#endif
