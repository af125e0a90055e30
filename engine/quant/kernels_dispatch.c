/* engine/quant/kernels_dispatch.c: the ISA choice, the kernel table (one
 * row per dtype, one cell per ISA) and the dispatching kernel names of
 * kernels.h.
 *
 * spill_k_init picks the best ISA the CPU and OS support
 * (__builtin_cpu_supports checks the OS-enabled XSAVE state too), lowered by
 * the SPILL_ISA environment variable, a test and benchmark hook
 * (docs/PERFORMANCE.md "Environment hooks"); unknown values are ignored (the
 * library never prints). The selection lives in one atomic so that a
 * dispatching call costs one relaxed load. A matvec is picked from the dtype
 * table: the cell of the selected ISA, or the first one below it that has a
 * kernel taking the matrix's shape; adding a dtype is one row here (and one
 * in engine/base/dtype_traits.c). The rvq3 LUT kernels, which are not per
 * dtype, are one column of the ISA table. The twins (kernels_ref.c,
 * kernels_avx2.c, kernels_avx512.c, kernels_xq_*.c) never call back into
 * this file.
 */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_mxfp4.h"
#include "engine/quant/kernels_q5.h"
#include "engine/quant/kernels_xq.h"

/* ------------------------------------------------- the dtype x ISA table */

/* One ISA's kernels for one dtype: NULL, or a fits function that says 0 for
 * w, hands the call to the ISA below (avx512 -> avx2 -> ref). */
typedef struct k_cell {
  spill_k_matvec_f32_fn f32;
  spill_k_fits_fn f32_fits;
  spill_k_matvec_xq_fn xq; /* act_quant q8 (kernels_xq.h) */
} k_cell;

typedef struct k_dtype_kernels {
  spill_k_dequant_row_fn dequant_row; /* scalar, every ISA */
  spill_k_fits_fn xq_fits;            /* the integer path takes w (NULL: the dtype has none) */
  k_cell isa[SPILL_ISA_AVX512 + 1];
} k_dtype_kernels;

#if defined(__x86_64__)
#define X86(f) f
#else
#define X86(f) NULL
#endif

/* rvq3 has no matvec cells: its kernels are the LUT ones below (and
 * spill_k_matvec on it gives NaN rows, a caller bug). */
static const k_dtype_kernels k_dtypes[SPILL_DT_COUNT] = {
    [SPILL_DT_F32] = {spill_k_dequant_row_f32__ref, NULL,
                      {{spill_k_matvec_f32_f32__ref, NULL, NULL},
                       {X86(spill_k_matvec_f32_f32__avx2), NULL, NULL},
                       {X86(spill_k_matvec_f32_f32__avx512), NULL, NULL}}},
    [SPILL_DT_F16] = {spill_k_dequant_row_f16__ref, NULL,
                      {{spill_k_matvec_f16_f32__ref, NULL, NULL},
                       {X86(spill_k_matvec_f16_f32__avx2), NULL, NULL},
                       {X86(spill_k_matvec_f16_f32__avx512), NULL, NULL}}},
    [SPILL_DT_BF16] = {spill_k_dequant_row_bf16__ref, NULL,
                       {{spill_k_matvec_bf16_f32__ref, NULL, NULL},
                        {X86(spill_k_matvec_bf16_f32__avx2), NULL, NULL},
                        {X86(spill_k_matvec_bf16_f32__avx512), NULL, NULL}}},
    [SPILL_DT_Q8] = {spill_k_dequant_row_q8__ref, spill_k_fits_q8q4_xq,
                     {{spill_k_matvec_q8_f32__ref, NULL, spill_k_matvec_q8_xq__ref},
                      {X86(spill_k_matvec_q8_f32__avx2), X86(spill_k_fits_q8_f32__avx2),
                       X86(spill_k_matvec_q8_xq__avx2)},
                      {X86(spill_k_matvec_q8_f32__avx512), X86(spill_k_fits_q8_f32__avx512), NULL}}},
    [SPILL_DT_Q4] = {spill_k_dequant_row_q4__ref, spill_k_fits_q8q4_xq,
                     {{spill_k_matvec_q4_f32__ref, NULL, spill_k_matvec_q4_xq__ref},
                      {X86(spill_k_matvec_q4_f32__avx2), X86(spill_k_fits_q4_f32__avx2),
                       X86(spill_k_matvec_q4_xq__avx2)},
                      {X86(spill_k_matvec_q4_f32__avx512), X86(spill_k_fits_q4_f32__avx512), NULL}}},
    [SPILL_DT_RVQ3] = {spill_k_dequant_row_rvq3__ref, NULL, {{NULL, NULL, NULL}}},
    [SPILL_DT_Q4_K] = {spill_k_dequant_row_kquant__ref, spill_k_fits_kquant_xq,
                       {{spill_k_matvec_kquant_f32__ref, NULL, spill_k_matvec_q4_k_xq__ref},
                        {X86(spill_k_matvec_kquant_f32__avx2), NULL, X86(spill_k_matvec_q4_k_xq__avx2)},
                        {NULL, NULL, NULL}}},
    [SPILL_DT_Q5_K] = {spill_k_dequant_row_kquant__ref, spill_k_fits_kquant_xq,
                       {{spill_k_matvec_kquant_f32__ref, NULL, spill_k_matvec_q5_k_xq__ref},
                        {X86(spill_k_matvec_kquant_f32__avx2), NULL, X86(spill_k_matvec_q5_k_xq__avx2)},
                        {NULL, NULL, NULL}}},
    [SPILL_DT_Q6_K] = {spill_k_dequant_row_kquant__ref, spill_k_fits_kquant_xq,
                       {{spill_k_matvec_kquant_f32__ref, NULL, spill_k_matvec_q6_k_xq__ref},
                        {X86(spill_k_matvec_kquant_f32__avx2), NULL, X86(spill_k_matvec_q6_k_xq__avx2)},
                        {NULL, NULL, NULL}}},
    [SPILL_DT_MXFP4] = {spill_k_dequant_row_mxfp4__ref, spill_k_fits_mxfp4_xq,
                        {{spill_k_matvec_mxfp4_f32__ref, NULL, spill_k_matvec_mxfp4_xq__ref},
                         {X86(spill_k_matvec_mxfp4_f32__avx2), NULL, X86(spill_k_matvec_mxfp4_xq__avx2)},
                         {NULL, NULL, NULL}}},
    [SPILL_DT_Q5_0] = {spill_k_dequant_row_q5__ref, spill_k_fits_q5_xq,
                       {{spill_k_matvec_q5_f32__ref, NULL, spill_k_matvec_q5_0_xq__ref},
                        {X86(spill_k_matvec_q5_f32__avx2), NULL, X86(spill_k_matvec_q5_0_xq__avx2)},
                        {NULL, NULL, NULL}}},
    [SPILL_DT_Q5_1] = {spill_k_dequant_row_q5__ref, spill_k_fits_q5_xq,
                       {{spill_k_matvec_q5_f32__ref, NULL, spill_k_matvec_q5_1_xq__ref},
                        {X86(spill_k_matvec_q5_f32__avx2), NULL, X86(spill_k_matvec_q5_1_xq__avx2)},
                        {NULL, NULL, NULL}}},
};

static const k_dtype_kernels *k_dtype(int dt) {
  return dt >= 0 && dt < SPILL_DT_COUNT && k_dtypes[dt].dequant_row ? &k_dtypes[dt] : NULL;
}

/* The f32-input kernel for w at ISA isa or the first one below it that takes w. */
static spill_k_matvec_f32_fn k_pick_f32(const spill_qmat *w, int isa) {
  const k_dtype_kernels *d = k_dtype(w->dtype);
  for (; d && isa >= 0; isa--) {
    const k_cell *c = &d->isa[isa];
    if (c->f32 && (!c->f32_fits || c->f32_fits(w))) return c->f32;
  }
  return NULL;
}

static spill_k_matvec_xq_fn k_pick_xq(const spill_qmat *w, int isa) {
  const k_dtype_kernels *d = k_dtype(w->dtype);
  for (; d && isa >= 0; isa--)
    if (d->isa[isa].xq) return d->isa[isa].xq;
  return NULL;
}

static void k_matvec_from(int isa, const spill_qmat *w, const float *x, float *y, uint32_t r0,
                          uint32_t r1) {
  spill_k_matvec_f32_fn f = k_pick_f32(w, isa);
  if (f) {
    f(w, x, y, r0, r1);
    return;
  }
  for (uint32_t r = r0; r < r1; r++) y[r] = NAN; /* rvq3 or an unknown dtype: caller bug */
}

void spill_k_matvec__ref(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1) {
  k_matvec_from(SPILL_ISA_REF, w, x, y, r0, r1);
}

void spill_k_matvec__avx2(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1) {
  k_matvec_from(SPILL_ISA_AVX2, w, x, y, r0, r1);
}

void spill_k_matvec__avx512(const spill_qmat *w, const float *x, float *y, uint32_t r0,
                            uint32_t r1) {
  k_matvec_from(SPILL_ISA_AVX512, w, x, y, r0, r1);
}

void spill_k_dequant_row(const spill_qmat *w, uint32_t r, float *out) {
  const k_dtype_kernels *d = k_dtype(w->dtype);
  if (d) {
    d->dequant_row(w, r, out);
    return;
  }
  for (size_t c = 0; c < w->cols; c++) out[c] = NAN;
}

int spill_k_dtype_has_xq(int dtype) {
  const k_dtype_kernels *d = k_dtype(dtype);
  return d && d->xq_fits;
}

int spill_k_matvec_xq_ok(const spill_qmat *w) {
  const k_dtype_kernels *d = k_dtype(w->dtype);
  return d && d->xq_fits && d->xq_fits(w);
}

static void k_matvec_xq_from(int isa, const spill_qmat *w, const spill_k_xq *xq, float *y,
                             uint32_t r0, uint32_t r1) {
  spill_k_matvec_xq_fn f = k_pick_xq(w, isa);
  if (f) {
    f(w, xq, y, r0, r1);
    return;
  }
  for (uint32_t r = r0; r < r1; r++) y[r] = NAN; /* no integer path: caller bug */
}

void spill_k_matvec_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                            uint32_t r1) {
  k_matvec_xq_from(SPILL_ISA_REF, w, xq, y, r0, r1);
}

void spill_k_matvec_xq__avx2(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                             uint32_t r1) {
  k_matvec_xq_from(SPILL_ISA_AVX2, w, xq, y, r0, r1);
}

/* ----------------------------------------------------------- dispatch */

typedef struct k_table {
  void (*lut)(const float *, const float *, uint32_t, float *, uint32_t, uint32_t);
  void (*apply)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
  void (*rvq3_matvec)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
} k_table;

static const k_table k_tables[3] = {
    {spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
#if defined(__x86_64__)
    {spill_k_lut_rvq3_f32__avx2, spill_k_apply_rvq3_f32__avx2, spill_k_matvec_rvq3_f32__avx2},
    {spill_k_lut_rvq3_f32__avx512, spill_k_apply_rvq3_f32__avx512, spill_k_matvec_rvq3_f32__avx2},
#else
    {spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
    {spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
#endif
};

static _Atomic(const k_table *) k_current;
static _Atomic int k_current_isa;
static pthread_once_t k_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports has no
 * "f16c", and the fuzz targets build this file with clang) */
static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

int spill_k_isa_supported(spill_isa isa) {
  switch (isa) {
    case SPILL_ISA_REF:
      return 1;
#if defined(__x86_64__)
    case SPILL_ISA_AVX2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case SPILL_ISA_AVX512:
      __builtin_cpu_init();
      return spill_k_isa_supported(SPILL_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#endif
    default:
      return 0;
  }
}

static void k_select(spill_isa isa) {
  atomic_store(&k_current_isa, (int)isa);
  atomic_store(&k_current, &k_tables[isa]);
}

static void k_detect(void) {
  spill_isa best = SPILL_ISA_REF;
  if (spill_k_isa_supported(SPILL_ISA_AVX512)) best = SPILL_ISA_AVX512;
  else if (spill_k_isa_supported(SPILL_ISA_AVX2)) best = SPILL_ISA_AVX2;
  const char *env = getenv("SPILL_ISA");
  if (env) {
    spill_isa want = best;
    if (strcmp(env, "ref") == 0) want = SPILL_ISA_REF;
    else if (strcmp(env, "avx2") == 0) want = SPILL_ISA_AVX2;
    else if (strcmp(env, "avx512") == 0) want = SPILL_ISA_AVX512;
    if (want < best) best = want; /* the variable may only lower the choice */
  }
  k_select(best);
}

spill_isa spill_k_init(void) {
  pthread_once(&k_once, k_detect);
  return (spill_isa)atomic_load(&k_current_isa);
}

int spill_k_set_isa(spill_isa isa) {
  if ((int)isa < 0 || (int)isa > SPILL_ISA_AVX512 || !spill_k_isa_supported(isa)) return 0;
  spill_k_init();
  k_select(isa);
  return 1;
}

spill_isa spill_k_isa(void) { return spill_k_init(); }

const char *spill_k_isa_name(spill_isa isa) {
  switch (isa) {
    case SPILL_ISA_REF: return "ref";
    case SPILL_ISA_AVX2: return "avx2";
    case SPILL_ISA_AVX512: return "avx512";
    default: return "unknown";
  }
}

static inline const k_table *k_table_get(void) {
  const k_table *t = atomic_load_explicit(&k_current, memory_order_acquire);
  if (!t) {
    spill_k_init();
    t = atomic_load(&k_current);
  }
  return t;
}

void spill_k_matvec(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1) {
  k_matvec_from((int)spill_k_init(), w, x, y, r0, r1);
}

void spill_k_lut_rvq3_f32(const float *codebook, const float *x, uint32_t cols, float *lut,
                      uint32_t g0, uint32_t g1) {
  k_table_get()->lut(codebook, x, cols, lut, g0, g1);
}

void spill_k_gdn_step(float *S, uint32_t d, float decay, const float *k, const float *q, float beta,
                      const float *v, float *u, float *o) {
  if (spill_k_init() >= SPILL_ISA_AVX2)
    spill_k_gdn_step__avx2(S, d, decay, k, q, beta, v, u, o);
  else
    spill_k_gdn_step__ref(S, d, decay, k, q, beta, v, u, o);
}

/* Cached: spill_k_apply_rvq3_i16 asks on every call (hot path). */
static atomic_int k_vbmi = -1;

int spill_k_vbmi_supported(void) {
  int v = atomic_load_explicit(&k_vbmi, memory_order_relaxed);
  if (v >= 0) return v;
#if defined(__x86_64__)
  __builtin_cpu_init();
  v = spill_k_isa_supported(SPILL_ISA_AVX512) && __builtin_cpu_supports("avx512vbmi");
#else
  v = 0;
#endif
  atomic_store_explicit(&k_vbmi, v, memory_order_relaxed);
  return v;
}

void spill_k_qlut_rvq3_i16(const float *lut, uint32_t cols, void *qlut, uint32_t g0, uint32_t g1) {
#if defined(__x86_64__)
  if (spill_k_init() != SPILL_ISA_REF) {
    spill_k_qlut_rvq3_i16__avx2(lut, cols, qlut, g0, g1);
    return;
  }
#endif
  spill_k_qlut_rvq3_i16__ref(lut, cols, qlut, g0, g1);
}

int spill_k_apply_rvq3_i16_fast(void) {
  return spill_k_init() == SPILL_ISA_AVX512 && spill_k_vbmi_supported();
}

void spill_k_apply_rvq3_i16(const spill_qmat *w, const void *qlut, float *y, uint32_t r0,
                          uint32_t r1) {
#if defined(__x86_64__)
  if (spill_k_apply_rvq3_i16_fast()) {
    spill_k_apply_rvq3_i16__avx512vbmi(w, qlut, y, r0, r1);
    return;
  }
#endif
  spill_k_apply_rvq3_i16__ref(w, qlut, y, r0, r1);
}

void spill_k_apply_rvq3_f32(const spill_qmat *w, const float *lut, float *y, uint32_t r0,
                        uint32_t r1) {
  k_table_get()->apply(w, lut, y, r0, r1);
}

void spill_k_matvec_rvq3_f32(const spill_qmat *w, const float *x, float *y, uint32_t r0, uint32_t r1) {
  k_table_get()->rvq3_matvec(w, x, y, r0, r1);
}

/* Activation quantiser: the AVX2 twin on AVX2 and AVX-512 CPUs
 * (bit-identical to __ref, kernels_xq.h). */
void spill_k_xq_quantize(const float *x, spill_k_xq *xq) {
#if defined(__x86_64__)
  if (spill_k_init() != SPILL_ISA_REF) {
    spill_k_xq_quantize__avx2(x, xq);
    return;
  }
#endif
  spill_k_xq_quantize__ref(x, xq);
}

/* Integer-activation matvec: the table's cell for the selected ISA (the
 * AVX2 twins serve AVX-512 CPUs too; bit-identical to __ref, kernels_xq.h). */
void spill_k_matvec_xq(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                       uint32_t r1) {
  k_matvec_xq_from((int)spill_k_init(), w, xq, y, r0, r1);
}
