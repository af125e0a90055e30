/* engine/quant/kernels_dispatch.c: the ISA choice and the dispatching
 * kernel names of kernels.h.
 *
 * spill_k_init picks the best ISA the CPU and OS support
 * (__builtin_cpu_supports checks the OS-enabled XSAVE state too), lowered by
 * the SPILL_ISA environment variable, a test and benchmark hook
 * (docs/PERFORMANCE.md "Environment hooks"); unknown values are ignored (the
 * library never prints). The selection lives in one atomic so that a
 * dispatching call costs one relaxed load. Each dispatching name calls one
 * column of the table below; the twins (kernels_ref.c, kernels_avx2.c,
 * kernels_avx512.c) never call back into this file.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_xq.h"

/* ----------------------------------------------------------- dispatch */

typedef struct k_table {
  void (*matvec)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
  void (*lut)(const float *, const float *, uint32_t, float *, uint32_t, uint32_t);
  void (*apply)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
  void (*rvq3_matvec)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
} k_table;

static const k_table k_tables[3] = {
    {spill_k_matvec__ref, spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
#if defined(__x86_64__)
    {spill_k_matvec__avx2, spill_k_lut_rvq3_f32__avx2, spill_k_apply_rvq3_f32__avx2,
     spill_k_matvec_rvq3_f32__avx2},
    {spill_k_matvec__avx512, spill_k_lut_rvq3_f32__avx512, spill_k_apply_rvq3_f32__avx512,
     spill_k_matvec_rvq3_f32__avx2},
#else
    {spill_k_matvec__ref, spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
    {spill_k_matvec__ref, spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
#endif
};

static _Atomic(const k_table *) k_current;
static _Atomic int k_current_isa;
static pthread_once_t k_once = PTHREAD_ONCE_INIT;

int spill_k_isa_supported(spill_isa isa) {
  switch (isa) {
    case SPILL_ISA_REF:
      return 1;
#if defined(__x86_64__)
    case SPILL_ISA_AVX2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
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
  k_table_get()->matvec(w, x, y, r0, r1);
}

void spill_k_lut_rvq3_f32(const float *codebook, const float *x, uint32_t cols, float *lut,
                      uint32_t g0, uint32_t g1) {
  k_table_get()->lut(codebook, x, cols, lut, g0, g1);
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

/* Integer-activation matvec: the AVX2 twin on AVX2 and AVX-512 CPUs
 * (bit-identical to __ref, kernels_xq.h). */
void spill_k_matvec_xq(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0,
                       uint32_t r1) {
#if defined(__x86_64__)
  if (spill_k_init() != SPILL_ISA_REF) {
    spill_k_matvec_xq__avx2(w, xq, y, r0, r1);
    return;
  }
#endif
  spill_k_matvec_xq__ref(w, xq, y, r0, r1);
}
