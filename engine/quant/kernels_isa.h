/* engine/quant/kernels_isa.h: the per-ISA twins of the dispatching kernels
 * (internal to engine/quant, its tests and bench/).
 *
 * The dispatcher (kernels_dispatch.c) calls one column of this table.
 * Callers of the engine use kernels.h; tests and benchmarks call a twin directly to
 * compare ISAs in one process. An __avx2/__avx512 twin may only be called
 * when spill_k_isa_supported() says so (it executes those instructions
 * unconditionally). Every twin has the same contract as its kernels.h name,
 * including the row-split determinism. A twin hands the shapes it does not
 * vectorise down one level (__avx512 -> __avx2 -> __ref), which BUILD
 * declares as its dependencies; no twin calls the dispatcher.
 *
 * The dtype codes are the frozen spill_dtype values of engine/format/
 * container.h, repeated here so that quant depends on engine/base only.
 */
#ifndef SPILL_QUANT_KERNELS_ISA_H
#define SPILL_QUANT_KERNELS_ISA_H

#include "engine/quant/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  SPILL_K_DT_F32 = 0,
  SPILL_K_DT_F16 = 1,
  SPILL_K_DT_BF16 = 2,
  SPILL_K_DT_Q8 = 3,
  SPILL_K_DT_Q4 = 4,
  SPILL_K_DT_RVQ3 = 5,
};

void spill_k_matvec__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1);
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

void spill_k_matvec__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                            uint32_t r1);
void spill_k_lut_rvq3_f32__avx512(const float *codebook, const float *x, uint32_t cols, float *lut,
                                  uint32_t g0, uint32_t g1);
void spill_k_apply_rvq3_f32__avx512(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                    uint32_t r1);

#ifdef __cplusplus
}
#endif
#endif
