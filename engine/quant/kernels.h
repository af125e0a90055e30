/* engine/quant/kernels.h: the compute kernels of the forward pass.
 *
 * Every kernel has a scalar `__ref` twin that is always built; AVX2 and
 * AVX-512 versions are compiled with their ISA enabled per file and selected
 * once at start-up by CPUID (spill_k_init, kernels_dispatch.c). The
 * dispatching names (no suffix) call the selected version. Names say op,
 * formats and ISA: spill_k_<op>_<weights>_<input>__<isa>, e.g.
 * spill_k_matvec_rvq3_f32__avx2; spill_k_matvec takes its weight format
 * from spill_qmat.dtype (f32/f16/bf16/q8/q4/q4_k/q5_k/q6_k). Kernels work on a row range [r0, r1) so
 * callers split work across threads by rows: each output element is computed
 * by exactly one thread with a fixed summation order, so results are
 * bit-identical for any thread count. For a given ISA results are
 * deterministic; across ISAs they differ within the per-format ceilings
 * stated in kernels_test.cc.
 *
 * Layouts are those of docs/FORMAT.md: a (rows, cols) matrix is row-major.
 *   f32/f16/bf16: rows*cols elements.
 *   q8: rows*cols int8, then rows*(cols/group) f16 scales; w = s * q.
 *   q4: rows*cols/2 bytes (element 2i low nibble, 2i+1 high), then
 *       rows*(cols/group) f16 scales; w = s * (nibble - 8).
 *   rvq3: rows*(cols/8)*3 uint8 indices (row, group, stage), then rows f16
 *       scales; w[r][8g+j] = s[r] * (cb0[i0][j] + cb1[i1][j] + cb2[i2][j]),
 *       codebooks f32 (3, 256, 8).
 * Depends on engine/base only; knows nothing of containers or models.
 */
#ifndef SPILL_QUANT_KERNELS_H
#define SPILL_QUANT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spill_isa { SPILL_ISA_REF = 0, SPILL_ISA_AVX2 = 1, SPILL_ISA_AVX512 = 2 } spill_isa;

/* Detects the CPU once (thread-safe, idempotent) and selects the best ISA;
 * the SPILL_ISA environment variable ("ref", "avx2", "avx512"), a test and
 * benchmark hook (docs/PERFORMANCE.md "Environment hooks"), may lower it.
 * Returns it. */
spill_isa spill_k_init(void);
/* Whether the CPU (and OS) support an ISA. */
int spill_k_isa_supported(spill_isa isa);
/* Forces an ISA (tests/benchmarks); returns 0 if unsupported. */
int spill_k_set_isa(spill_isa isa);
spill_isa spill_k_isa(void);
const char *spill_k_isa_name(spill_isa isa);

/* f16 scales follow the values in the same buffer, so they are only 1-byte
 * aligned when the value bytes are odd (rvq3: 3 * cols/8 per row; q4 with an
 * odd row count): accessed through this 1-byte-aligned type, not uint16_t. */
typedef uint16_t spill_k_u16_unaligned __attribute__((aligned(1)));

/* A weight matrix view (no ownership). */
typedef struct spill_qmat {
  int dtype;           /* spill_dtype value (engine/format/container.h) */
  uint32_t rows, cols;
  uint32_t group;      /* q8/q4 */
  const void *data;    /* values / indices */
  const spill_k_u16_unaligned *scales; /* q8/q4/rvq3: f16 scales (same buffer; may be
                                         odd-aligned) */
  const float *codebook;  /* rvq3: (3, 256, 8) */
} spill_qmat;

/* y[r] = sum_c W[r][c] * x[c] for r in [r0, r1), for f32/f16/bf16/q8/q4.
 * x has cols floats. For q8/q4 the row is computed group by group:
 * y = sum_g s_g * (sum_{c in g} q_c * x_c). */
void spill_k_matvec(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1);
void spill_k_matvec__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1);

/* rvq3 lookup table for input x (cols floats): lut[(s*(cols/8) + g)*256 + k]
 * = dot(cb[s][k], x[8g .. 8g+8)). lut holds 3*(cols/8)*256 floats. Built
 * once per (input, codebook) and shared by every expert of a layer that uses
 * the same codebook. Groups [g0, g1) only, for threading. */
void spill_k_lut_rvq3_f32(const float *codebook, const float *x, uint32_t cols, float *lut,
                          uint32_t g0, uint32_t g1);
void spill_k_lut_rvq3_f32__ref(const float *codebook, const float *x, uint32_t cols, float *lut,
                               uint32_t g0, uint32_t g1);
/* y[r] = s[r] * sum_g (lut0[g][i0] + lut1[g][i1] + lut2[g][i2]) for r in [r0, r1).
 * The AVX2/AVX-512 versions are bit-identical to __ref (same order). */
void spill_k_apply_rvq3_f32(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                            uint32_t r1);
void spill_k_apply_rvq3_f32__ref(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                                 uint32_t r1);

/* rvq3 without a LUT: y[r] = s[r] * sum_g sum_j (cb0[i0][j] + cb1[i1][j] +
 * cb2[i2][j]) * x[8g + j] for r in [r0, r1); x has cols floats; w->codebook
 * must be set. The engine does not call it (every rvq3 matvec goes through a
 * LUT); it is kept as the LUT path's independent check (kernels_test: within
 * 1e-6 of sum |w x| of the LUT path) and its AVX2 twin is tested with it. */
void spill_k_matvec_rvq3_f32(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                             uint32_t r1);
void spill_k_matvec_rvq3_f32__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                                  uint32_t r1);

/* rvq3 through an int16 LUT: the fast path on AVX-512 VBMI CPUs (AMD Zen
 * 4/5, Intel Ice Lake and later), about 3x the f32-LUT __ref at K3 gate
 * shapes and 2x at the twin's. Use it when spill_k_apply_rvq3_i16_fast()
 * returns 1 (elsewhere spill_k_apply_rvq3_i16 runs a scalar loop slower than
 * spill_k_apply_rvq3_f32). The forward pass: build the f32 LUT as before with
 * spill_k_lut_rvq3_f32 (groups split across threads), then, after every group
 * of it is built, spill_k_qlut_rvq3_i16 (groups split across threads; the
 * scale of group g depends only on group g, so any split is bit-exact),
 * then spill_k_apply_rvq3_i16 instead of spill_k_apply_rvq3_f32, rows split as
 * before. The f32 LUT may be discarded after spill_k_qlut_rvq3_i16.
 * spill_k_qlut_rvq3_i16 quantises groups [g0, g1) of an f32 LUT (as built by
 * spill_k_lut_rvq3_f32) into qlut, a caller buffer of spill_k_qlut_rvq3_i16_bytes(
 * cols) bytes (64-byte aligned is best): per group g, for stage s and entry
 * k, q = round(lut[s][g][k] / scale_g), scale_g = max_{s,k} |lut[s][g][k]|
 * / 10922, stored as a low-byte plane and a high-byte plane of 256 bytes
 * each, then the ng f32 scales. spill_k_apply_rvq3_i16 computes
 * y[r] = s[r] * sum_g scale_g * (q0[g][i0] + q1[g][i1] + q2[g][i2]);
 * its error vs spill_k_apply_rvq3_f32 is at most s[r] * sum_g 1.5 scale_g (half
 * a step per lookup) plus f32 rounding: ~1e-6 of sum |w x| for typical
 * inputs (see kernels_test.cc). Results are bit-identical across ISAs and
 * row splits; spill_k_qlut_rvq3_i16's output is the same on every ISA. A group
 * whose LUT holds a NaN or infinity gets a NaN scale (its rows give NaN). */
#define SPILL_K_RVQ3_QLUT_GROUP_BYTES 1536u
int spill_k_apply_rvq3_i16_fast(void);
size_t spill_k_qlut_rvq3_i16_bytes(uint32_t cols);
void spill_k_qlut_rvq3_i16(const float *lut, uint32_t cols, void *qlut, uint32_t g0, uint32_t g1);
void spill_k_qlut_rvq3_i16__ref(const float *lut, uint32_t cols, void *qlut, uint32_t g0,
                                uint32_t g1);
void spill_k_apply_rvq3_i16(const spill_qmat *w, const void *qlut, float *y, uint32_t r0,
                            uint32_t r1);
void spill_k_apply_rvq3_i16__ref(const spill_qmat *w, const void *qlut, float *y, uint32_t r0,
                                 uint32_t r1);

/* Dequantises row r of any dtype into out (cols floats), e.g. embeddings. */
void spill_k_dequant_row(const spill_qmat *w, uint32_t r, float *out);

/* Small vector helpers used on the hot path (ref only is fine for these). */
void spill_k_rmsnorm(const float *x, const float *w, float *y, uint32_t n, float eps);
float spill_k_dot(const float *a, const float *b, uint32_t n);
/* g[i] = silu(g[i]) * u[i] (the SwiGLU gate), in place on g. */
void spill_k_silu_mul(float *g, const float *u, uint32_t n);
/* One step of the gated delta rule for one head (docs/MODEL.md "ATTN GDN"):
 * S (d, d) row-major, rows = key channels; k, q (d) already normalised,
 * v (d), u (d) caller scratch:
 *   S = decay S;  u = beta (v - S^T k);  S = S + k u^T;  o = S^T q.
 * Every element is computed by the same sequence of f32 multiplies and adds
 * (no fused multiply-add) on every ISA: __ref and __avx2 are bit-identical. */
void spill_k_gdn_step(float *S, uint32_t d, float decay, const float *k, const float *q, float beta,
                      const float *v, float *u, float *o);
/* In-place softmax, max-subtracted; n >= 1. */
void spill_k_softmax(float *x, uint32_t n);
/* Indices of the k largest of score[0..n), by descending score, ties broken
 * by the lower index (docs/MODEL.md "Top-k"); NaN ranks below every number.
 * idx holds k entries; k <= n. */
void spill_k_topk(const float *score, uint32_t n, uint32_t k, uint32_t *idx);

#ifdef __cplusplus
}
#endif
#endif
