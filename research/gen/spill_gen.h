/* research/gen/spill_gen.h: synthetic models for clients (`spill gen`, the
 * experiment runner, tests that need a tiny container): the request, its
 * shaping after a router trace, and the call that writes the container.
 *
 * A research tool beside the inference library, not part of it: libspill
 * (//engine:spill) reads containers, this module writes synthetic ones
 * through research/gen's planner and engine/format's writer (docs/GEN.md).
 * Depends on the public API (engine/spill.h) and research/gen's synth.h.
 * Never prints. Calls are reentrant.
 */
#ifndef SPILL_GEN_SPILL_GEN_H
#define SPILL_GEN_SPILL_GEN_H

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_gen_request {
  const char *preset;   /* "nano", "mini", or "twin" (K3 proportions scaled to ram_bytes) */
  uint64_t ram_bytes;   /* twin: the machine RAM to scale to (default 8 GiB) */
  uint64_t disk_bytes;  /* twin: container size cap (default 40e9) */
  uint64_t seed;        /* default 1 */
  const char *attn_mix; /* "k3" (default: Kimi K3 as released), "k3-family" (the
                           earlier reconstruction), "mla", "kda", "gqa", "gqa-swa"
                           (gqa with gpt-oss's sliding window and sinks), "qwen35"
                           (3 GDN : 1 gated GQA), "gptoss" (gpt-oss: sinks, sliding
                           window, biases, clamped SwiGLU; no dense layer), "glm4moe"
                           (GLM-4.5: biases, half-head RoPE, sigmoid router) */
  const char *trunk_dtype;  /* "q4" (default: q4 bulk, q8 embeddings) or "f32" */
  const char *expert_dtype; /* "rvq3" (default; "mxfp4" for attn_mix gptoss), "f32", "q8", "q4",
                               "mxfp4" */
  int experts;          /* > 0: experts per MoE layer instead of the preset's */
  int moe_layers;       /* > 0: MoE layers (after the preset's dense layer); nano/mini */
  int top_k;            /* > 0: routed experts per token; nano/mini */
  /* Routing statistics the weights are solved for (docs/GEN.md); 0 = the
   * calibrated default (research/sim/routing_defaults.h). */
  double lookahead_precision; /* (0, 1]: at lookahead width 6; default 0.81 (K3) */
  double coact;               /* (0, 1): co-activation precision; default 0.575
                                 (OLMoE); < 0: independent routers */
  double reuse;               /* (0, 1): next-token reuse; default 0.411 (OLMoE);
                                 < 0: off (reuse is what the text gives) */
  /* Optional output: when summary is not NULL, spill_gen writes the plan's
   * derivation there (sizes; each routing target asked vs the mean-field
   * model, "out of reach", reuse "not carried" without a KDA layer 0),
   * NUL-terminated, cut at summary_cap bytes. */
  char *summary;
  size_t summary_cap;
} spill_gen_request;

/* Fills req's moe_layers, experts and top_k from the trace FILE (checked by
 * spill_routing_trace_inspect, engine/spill.h), so that spill_gen makes a
 * model that can replay it (`spill gen --like-trace`). Fails with SPILL_E_CONFIG if req already asks for a
 * different shape or for the twin preset. */
int spill_gen_request_like_trace(spill_gen_request *req, const char *file, spill_err *e);

/* Writes a container into out_dir (created; must not hold a manifest).
 * Deterministic for a seed. progress may be NULL. */
int spill_gen(const char *out_dir, const spill_gen_request *req, spill_progress_cb progress,
              void *user, spill_err *e);

/* The RAM plan of the model spill_gen would write for req, without writing
 * it: the numbers spill_plan_model (engine/spill.h) gives on the written
 * container, with the same arguments and errors (SPILL_E_RAM_BUDGET with the
 * plan filled). bos_id (may be NULL) gets that model's BOS id (-1: none),
 * which the byte tokenizer prepends. For `spill exp --validate` on an
 * experiment whose model is a recipe not generated yet. */
int spill_plan_recipe(const spill_gen_request *req, int ctx, int threads, uint64_t budget_bytes,
                      uint64_t usable_ram, spill_plan *plan, int *bos_id, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
