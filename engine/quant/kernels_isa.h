/* engine/quant/kernels_isa.h: the per-ISA twins of the dispatching kernels
 * and the per-dtype kernels of the kernel table (internal to engine/quant,
 * its tests and bench/).
 *
 * The dispatcher (kernels_dispatch.c) picks from its tables: the dtype x ISA
 * table for matvecs, the ISA table for the rvq3 LUT kernels. Callers of the
 * engine use kernels.h; tests and benchmarks call a twin directly to compare
 * ISAs in one process. An __avx2/__avx512 kernel may only be called when
 * spill_k_isa_supported() says so (it executes those instructions
 * unconditionally). Every twin has the same contract as its kernels.h name,
 * including the row-split determinism. Shapes or dtypes an ISA does not
 * vectorise go one level down (__avx512 -> __avx2 -> __ref) through the
 * table's NULL cells and fits functions; no twin calls the dispatcher.
 *
 * Dtype codes are the spill_dtype values of engine/base/dtype_traits.h.
 */
#ifndef SPILL_QUANT_KERNELS_ISA_H
#define SPILL_QUANT_KERNELS_ISA_H

#include "engine/base/dtype_traits.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_xq.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the per-dtype kernels of the dtype x ISA table (kernels_dispatch.c) ----
 * spill_k_matvec_<dtype>_f32__<isa>: y[r] = W[r] . x for r in [r0, r1) with
 * f32 input, the contract of spill_k_matvec; spill_k_matvec_<dtype>_xq__<isa>:
 * the same with the quantised input of kernels_xq.h (spill_k_matvec_xq);
 * spill_k_dequant_row_<dtype>__ref: spill_k_dequant_row. The K-quant family
 * shares one f32 kernel per ISA (the block layout comes from w->dtype). A
 * cell whose kernel takes only some shapes names a fits function; a NULL
 * cell, or one whose fits says 0, hands the call to the ISA below. */
typedef void (*spill_k_matvec_f32_fn)(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                      uint32_t r1);
typedef void (*spill_k_matvec_xq_fn)(const spill_qmat *w, const spill_k_xq *xq, float *y,
                                     uint32_t r0, uint32_t r1);
typedef void (*spill_k_dequant_row_fn)(const spill_qmat *w, uint32_t r, float *out);
typedef int (*spill_k_fits_fn)(const spill_qmat *w);

#define SPILL_K_DECL_F32(DT, ISA)                                                              \
  void spill_k_matvec_##DT##_f32__##ISA(const spill_qmat *w, const float *x, float *y, uint32_t r0, \
                                        uint32_t r1);
#define SPILL_K_DECL_XQ(DT, ISA)                                                               \
  void spill_k_matvec_##DT##_xq__##ISA(const spill_qmat *w, const spill_k_xq *xq, float *y,  \
                                       uint32_t r0, uint32_t r1);
#define SPILL_K_DECL_DQ(DT) void spill_k_dequant_row_##DT##__ref(const spill_qmat *w, uint32_t r, float *out);

/* kernels_ref.c */
SPILL_K_DECL_F32(f32, ref) SPILL_K_DECL_F32(f16, ref) SPILL_K_DECL_F32(bf16, ref)
SPILL_K_DECL_F32(q8, ref) SPILL_K_DECL_F32(q4, ref) SPILL_K_DECL_F32(kquant, ref)
SPILL_K_DECL_DQ(f32) SPILL_K_DECL_DQ(f16) SPILL_K_DECL_DQ(bf16) SPILL_K_DECL_DQ(q8)
SPILL_K_DECL_DQ(q4) SPILL_K_DECL_DQ(rvq3) SPILL_K_DECL_DQ(kquant)
/* kernels_avx2.c; q8 needs group % 8 == 0, q4 group % 16 == 0 */
SPILL_K_DECL_F32(f32, avx2) SPILL_K_DECL_F32(f16, avx2) SPILL_K_DECL_F32(bf16, avx2)
SPILL_K_DECL_F32(q8, avx2) SPILL_K_DECL_F32(q4, avx2) SPILL_K_DECL_F32(kquant, avx2)
int spill_k_fits_q8_f32__avx2(const spill_qmat *w);
int spill_k_fits_q4_f32__avx2(const spill_qmat *w);
/* kernels_avx512.c; q8 needs group % 16 == 0, q4 group % 32 == 0 */
SPILL_K_DECL_F32(f32, avx512) SPILL_K_DECL_F32(f16, avx512) SPILL_K_DECL_F32(bf16, avx512)
SPILL_K_DECL_F32(q8, avx512) SPILL_K_DECL_F32(q4, avx512)
int spill_k_fits_q8_f32__avx512(const spill_qmat *w);
int spill_k_fits_q4_f32__avx512(const spill_qmat *w);
/* kernels_xq_ref.c, with the shapes that have an integer path */
SPILL_K_DECL_XQ(q8, ref) SPILL_K_DECL_XQ(q4, ref) SPILL_K_DECL_XQ(q4_k, ref)
SPILL_K_DECL_XQ(q5_k, ref) SPILL_K_DECL_XQ(q6_k, ref)
int spill_k_fits_q8q4_xq(const spill_qmat *w);    /* group a multiple of 32 */
int spill_k_fits_kquant_xq(const spill_qmat *w);  /* cols a multiple of 256 */
/* kernels_xq_avx2.c */
SPILL_K_DECL_XQ(q8, avx2) SPILL_K_DECL_XQ(q4, avx2) SPILL_K_DECL_XQ(q4_k, avx2)
SPILL_K_DECL_XQ(q5_k, avx2) SPILL_K_DECL_XQ(q6_k, avx2)

/* The matvec entry points of one ISA: the table walked down from that ISA
 * (tests and benchmarks compare ISAs in one process with them). */
void spill_k_matvec__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1);
void spill_k_matvec__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                            uint32_t r1);
void spill_k_lut_rvq3_f32__avx2(const float *codebook, const float *x, uint32_t cols, float *lut,
                                uint32_t g0, uint32_t g1);
void spill_k_apply_rvq3_f32__avx2(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                  uint32_t r1);

/* rvq3 apply by vector gathers from the LUT; same contract as
 * spill_k_apply_rvq3_f32. Not dispatched: slower than the scalar-load twins on
 * the AMD Zen 5 dev machines; kept, tested and benchmarked so the choice can
 * be re-measured on CPUs with fast gathers. */
void spill_k_apply_rvq3_f32_gather__avx2(const spill_qmat *w, const float *lut, float *y,
                                         uint32_t r0, uint32_t r1);
void spill_k_apply_rvq3_f32_gather__avx512(const spill_qmat *w, const float *lut, float *y,
                                           uint32_t r0, uint32_t r1);

/* Dequantise-and-FMA rvq3 matvec (spill_k_matvec_rvq3_f32); also used on
 * AVX-512 CPUs (a 2-groups-per-zmm twin measured no faster). */
void spill_k_matvec_rvq3_f32__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                   uint32_t r1);

/* The int16-LUT apply with AVX-512 VBMI byte permutes (kernels_avx512.c);
 * only when spill_k_vbmi_supported(). Bit-identical to
 * spill_k_apply_rvq3_i16__ref. */
void spill_k_apply_rvq3_i16__avx512vbmi(const spill_qmat *w, const void *qlut, float *y,
                                        uint32_t r0, uint32_t r1);
int spill_k_vbmi_supported(void);
/* spill_k_qlut_rvq3_i16, AVX2; bit-identical to spill_k_qlut_rvq3_i16__ref. */
void spill_k_qlut_rvq3_i16__avx2(const float *lut, uint32_t cols, void *qlut, uint32_t g0,
                                 uint32_t g1);

void spill_k_lut_rvq3_f32__avx512(const float *codebook, const float *x, uint32_t cols, float *lut,
                                  uint32_t g0, uint32_t g1);
void spill_k_apply_rvq3_f32__avx512(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                    uint32_t r1);

/* spill_k_gdn_step's twins (kernels_ref.c, kernels_avx2.c) */
void spill_k_gdn_step__ref(float *S, uint32_t d, float decay, const float *k, const float *q,
                           float beta, const float *v, float *u, float *o);
void spill_k_gdn_step__avx2(float *S, uint32_t d, float decay, const float *k, const float *q,
                            float beta, const float *v, float *u, float *o);

#ifdef __cplusplus
}
#endif
#endif
