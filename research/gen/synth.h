/* research/gen/synth.h: synthetic K3-family models (`spill gen`).
 *
 * Plans an architecture from a preset (nano, mini, twin) and streams seeded
 * random trunk tensors and expert records, drawn in their quantised form,
 * through the container writer; output is a pure function of the options.
 * The presets, the twin's derivation and the router calibration against the
 * OLMoE trace are described in docs/GEN.md.
 *
 * Thread safety: all calls are reentrant; spill_gen_write may run 2 threads
 * internally. Depends on engine/base, engine/format, engine/trace, research/trace
 * (statistics, for the routing calibration) and research/sim's routing_defaults;
 * never prints.
 */
#ifndef SPILL_GEN_SYNTH_H
#define SPILL_GEN_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spill_gen_trunk {
  SPILL_GEN_TRUNK_Q4 = 0,  /* q4 bulk matrices, q8 tok_embd/output, f32 small */
  SPILL_GEN_TRUNK_F32 = 1, /* every trunk tensor f32 (reference comparisons) */
} spill_gen_trunk;

#define SPILL_GEN_DEFAULT_RAM (8ull << 30)
#define SPILL_GEN_DEFAULT_DISK 40000000000ull
/* skew multiplies the calibrated bias spread: 1 = OLMoE-like, 0 = none. */
#define SPILL_GEN_DEFAULT_SKEW 1.0
/* The OLMoE-1B-7B trace's pooled coverage points (fraction of experts). */
#define SPILL_GEN_TARGET_AT50 0.207
#define SPILL_GEN_TARGET_AT80 0.495
#define SPILL_GEN_TARGET_AT95 0.734

typedef struct spill_gen_opts {
  const char *preset;     /* "nano", "mini", "twin" (alias "k3") */
  uint64_t ram_bytes;     /* twin: RAM scaled to; 0 = SPILL_GEN_DEFAULT_RAM */
  uint64_t disk_bytes;    /* cap on the container; 0 = SPILL_GEN_DEFAULT_DISK */
  uint64_t seed;
  const char *attn_mix;   /* "k3" (Kimi K3 as released, 3 KDA : 1 MLA), "k3-family"
                             (the earlier reconstruction, same pattern), "mla", "kda", "gqa",
                             "gqa-swa" (gqa with gpt-oss's sliding window: 8 tokens on
                             nano (128 otherwise) on the even layers, a sink logit per
                             head), "qwen35" (3 GDN : 1 gated GQA), "gptoss", "glm4moe"
                             (every layer GQA: docs/GEN.md) */
  spill_gen_trunk trunk;
  spill_dtype expert_dtype; /* rvq3 (default), f32, q8, q4, mxfp4 */
  double skew;            /* popularity skew, 0 = uniform bias; < 0 = default */
  double la_precision;    /* lookahead precision at width 6 the routers are solved
                             for, (0, 1]; < 0 = the K3 default (0.81) */
  double coact;           /* co-activation precision, [0, 1); 0 = independent
                             routers; < 0 = the OLMoE default (0.575) */
  double reuse;           /* next-token reuse the KDA layers are solved for,
                             [0, 1); 0 = off (the earlier random conv taps and
                             unit attention gain); < 0 = the OLMoE default (0.411) */
  int threads;            /* generator threads besides the writer: 0 or 1 */
  int n_experts;          /* > 0: experts per MoE layer instead of the preset's
                             (twin: instead of what the disk cap allows) */
  int n_moe_layers;       /* > 0: MoE layers after the preset's dense layer(s)
                             instead of the preset's (nano, mini only; the
                             attention mix pattern continues over them) */
  int top_k;              /* > 0: experts routed per token instead of the
                             preset's (nano, mini only; 1..SPILL_MAX_TOPK) */
  int shape_only;         /* 1: shapes and sizes only (spill_plan_recipe, `spill
                             exp --validate`): the routers are not calibrated,
                             so planning costs O(tensors) whatever the expert
                             count; the init constants are then 0 (write
                             nothing from such a plan) */
  spill_progress_fn progress; /* may be NULL; (ctx, bytes done, bytes total) */
  void *progress_ctx;
  struct spill_gen_summary *summary_out; /* may be NULL; spill_gen_write's plan summary */
} spill_gen_opts;

/* Fills the defaults: nano, 8 GiB, 40e9 B, seed 1, k3 mix, q4 trunk, rvq3
 * experts, default skew, 1 generator thread, no progress. */
void spill_gen_opts_init(spill_gen_opts *o);

/* How many router calibrations (bias, routing, reuse: the costly part of a
 * plan, O(experts x tokens x layers) per solver step) this process has run;
 * tests use it to show a shape-only plan runs none. Thread-safe. */
uint64_t spill_gen_calibrations(void);

/* Computes the architecture and the tensor list without writing anything.
 * On success *out owns heap memory (free with spill_manifest_free): name,
 * arch, tensors (names, dtypes, shapes, groups, 64-aligned offsets and
 * bytes), expert dtype/group, record layout, banks, and generator_json (the
 * options). Errors: SPILL_E_CONFIG (unknown preset/mix, RAM or disk too small
 * for the preset), SPILL_E_UNSUPPORTED (expert dtype). */
int spill_gen_plan(const spill_gen_opts *o, spill_manifest *out, spill_err *e);

/* Sizes of a plan and the derivation (printed by `spill gen`). */
typedef struct spill_gen_summary {
  uint64_t ram_bytes;       /* the twin's target RAM (0 for nano/mini) */
  uint64_t trunk_bytes;     /* trunk.bin (with alignment) */
  uint64_t record_bytes;
  uint64_t ws_bytes;        /* record_bytes x top_k x n_moe_layers */
  uint64_t expert_bytes;    /* all banks, headers included */
  uint64_t container_bytes; /* trunk + banks + manifest estimate */
  double trunk_frac, ws_frac; /* of ram_bytes (0 if none) */
  char text[4096];          /* multi-line derivation, for printing */
} spill_gen_summary;
int spill_gen_summarize(const spill_gen_opts *o, spill_gen_summary *s, spill_err *e);

/* Writes the container into dir (created if missing; must not hold a
 * container). Progress is reported in bytes of trunk + records. On failure
 * the writer is aborted and no manifest.json exists. */
int spill_gen_write(const char *dir, const spill_gen_opts *o, spill_err *e);

/* Coverage curve: fraction of experts (over all sampled (layer, expert)
 * pairs, most popular first) that carry `level` (0..1) of all activations.
 * counts has n entries. Returns 0 when the total is 0. */
double spill_gen_coverage_at(const uint64_t *counts, size_t n, double level);

typedef struct spill_gen_coverage {
  double at50, at80, at95; /* fraction of experts carrying 50/80/95% */
  int layers;              /* MoE layers sampled */
  uint64_t activations;    /* n_samples x top_k x layers */
} spill_gen_coverage;

/* Tokens per layer that give the OLMoE trace's sampling density (299 x 8 / 64
 * = 37.4 selections per (layer, expert) pair) for n_experts top-k. The
 * coverage statistic depends on the density (sparse samples look skewed),
 * so calibration and measurement use the trace's. */
int spill_gen_trace_samples(int n_experts, int top_k);

/* Routes n_samples (<= 0: spill_gen_trace_samples) hidden states h = rmsnorm(N(0, I_D)) (seeded) through the
 * routers the generator would write for the first max_layers MoE layers (the
 * very same f32 weights and bias; max_layers <= 0 = all) and measures the
 * pooled coverage. Cost: n_samples x layers x n_experts x d_model MACs. */
int spill_gen_routing_coverage(const spill_gen_opts *o, int n_samples, int max_layers,
                               spill_gen_coverage *out, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
