/* engine/model/model_memory.h: the one memory formula of engine/model.
 *
 * The bytes of sequence state and of forward scratch a model allocates at
 * open, term by term, for an arch and the options it runs with.
 * spill_model_open allocates and carves exactly these bytes (the same code
 * measures and carves: model_memory.c), and engine/plan reports them in
 * spill_plan's state and scratch terms; a test opens models of every
 * attention kind and family and checks that the two agree to the byte.
 * Pure arithmetic over the arch (saturating; `overflow` says a term did not
 * fit 64 bits). Depends on engine/format (spill_arch) and engine/quant (the
 * sizes of quantised activations and int16 LUTs).
 */
#ifndef SPILL_MODEL_MODEL_MEMORY_H
#define SPILL_MODEL_MODEL_MEMORY_H

#include <stdint.h>

#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the model runs with, beyond the arch (spill_model_opts' meaning). */
typedef struct spill_model_mem_opts {
  int ctx;       /* tokens of state and of the attention score row */
  int n_threads; /* pool threads (one score row and temporaries each); <= 0: 1 */
  int max_chunk; /* tokens per prefill chunk (and the slack of sliding-window rings); <= 0: 16 */
  int act_q8;    /* 1: buffers of the quantised matvec inputs (act_q8) */
  int rvq3_qlut; /* 1: the int16 LUTs of rvq3 experts (spill_model_rvq3_qlut) */
  int spec_max;  /* speculation: most tokens of a verify chunk (<= max_chunk); 0 = none */
  int swa_full_kv; /* 1: sliding-window layers keep ctx rows, not a ring (spill_model_opts);
                    * engine/plan also takes SPILL_SWA_KV_AUTO (2) and decides */
} spill_model_mem_opts;

/* Scratch groups (spill_plan_scratch's terms). */
enum {
  SPILL_MEM_ACTIVATIONS = 0, /* residual, norms, projections, FFN of a chunk; act_q8 inputs;
                              * speculation: the recurrent-state copy and its layers' inputs */
  SPILL_MEM_ATTN_SCORES,     /* one score row of ctx floats per thread */
  SPILL_MEM_MOE,             /* router, expert inputs, per-selection outputs, bookkeeping */
  SPILL_MEM_RVQ_LUTS,        /* rvq3 LUTs of every token's input, one down LUT; int16 copies */
  SPILL_MEM_LOGITS,          /* vocab floats; speculation: spec_max x vocab more */
  SPILL_MEM_GROUPS
};

typedef struct spill_model_mem {
  /* state bytes of all layers of each attention kind (spill_attn_kind):
   * [kind][0] the cache or recurrent state, [kind][1] the rings: KDA/GDN conv
   * rings, GQA sliding-window layers' key/value rings (W - 1 + max_chunk rows) */
  uint64_t state[4][2]; /* SPILL_ATTN_KINDS */
  uint64_t state_total;
  uint64_t scratch[SPILL_MEM_GROUPS]; /* bytes, every buffer 64-byte aligned */
  uint64_t scratch_total;
  int overflow; /* 1: a term saturated (the arch is too large to allocate) */
} spill_model_mem;

/* Fills *out for arch a and options o. a must have n_layers in
 * [0, SPILL_MAX_LAYERS]; a layer of an unknown attention kind has no state. */
void spill_model_memory(const spill_arch *a, const spill_model_mem_opts *o, spill_model_mem *out);

/* 1 when a model whose experts have this dtype runs rvq3 through int16 LUTs:
 * rvq3 experts, SPILL_RVQ3_QLUT=1 in the environment and a CPU where the
 * int16 path is fast (VBMI). The model decides with this, and so does the
 * plan of a container. */
int spill_model_rvq3_qlut(int expert_dtype);

/* The act_quant a container runs with: 1 when q8 activations are requested
 * (requested != 0, the default: spill_config act_quant q8) and some matrix
 * of the container, a trunk tensor or an expert section, has a dtype with an
 * integer path (kernels_xq.h: q8, q4, the K-quants, MXFP4); 0 otherwise, so
 * an f32/f16/bf16/rvq3 container allocates no quantised-input buffers and
 * computes exactly as with act_quant f32. The model and the plan of a
 * container both decide with this. */
int spill_model_act_q8(const spill_manifest *m, int requested);

#ifdef __cplusplus
}
#endif
#endif
