/* engine/gen/synth.h: synthetic K3-family models (`spill gen`).
 *
 * Real weights cannot be downloaded, so the engine is exercised on random
 * models of the real shape. This module plans an architecture from a preset,
 * draws every trunk tensor and expert record from a seeded PRNG and streams
 * them through the container writer (engine/format). Experts are drawn
 * directly in their quantised form (random per-layer rvq3 codebooks with
 * shrinking residual stages, random indices, f16 row scales), so a multi-GB
 * container is written at disk speed. Every tensor and every (layer, expert)
 * record has its own PRNG stream derived from the global seed: output is a
 * pure function of the options, independent of generation order/threads.
 *
 * Presets:
 *   nano  a few MB, for tests. vocab 320 (bytes, bos 256, eos 257), d_model
 *         64, 4 layers (0 dense, 1-3 MoE), 16 experts top-4, d_expert 32, one
 *         shared expert (d 32), heads 4 x 16, q4 trunk groups of 32. The
 *         attn_mix variants together cover every path of docs/MODEL.md:
 *           k3   kda,kda,kda,mla; MLA with q_lora and NoPE, KDA full-rank
 *                output gate; sigmoid router + bias; latent MoE (32).
 *           mla  all MLA, no q_lora (attn_q), RoPE on; latent MoE.
 *           kda  all KDA with a low-rank output gate (attn_g_a/attn_g_b).
 *           gqa  all GQA (4 heads, 2 kv heads, RoPE); softmax router, no
 *                latent MoE, no renormalisation (OLMoE style).
 *   mini  K3 structure at ~1.1 GB for the demo: d_model 1024, 16 layers
 *         (layer 0 dense; MLA at 3,7,11,15 = 12 KDA : 4 MLA), latent 512,
 *         d_expert 448, 256 experts top-8, 2 shared experts, rvq3 experts,
 *         q4/q8 trunk; ~31 MB of experts per token.
 *   twin  ("k3") K3's proportions scaled to a RAM size R (default 8 GiB):
 *         93 layers (1 dense + 92 MoE), top-16, MLA at l%4==3 and at the last
 *         layer (69 KDA + 24 MLA, K3's count), latent MoE, 2 shared experts.
 *         Derivation (K3: trunk 27.28 GB = 42.6% and per-token expert
 *         working set 17.0 GiB = 26.6% of a 64 GiB machine):
 *           1. ws = record_bytes x 16 x 92 -> target 0.27 R. For each
 *              d_latent (multiple of 64) take d_expert = round64(d_latent x
 *              3072/3584) and the exact rvq3 record size; keep the d_latent
 *              whose ws is nearest the target. d_model = 2 d_latent.
 *           2. K3 dims scaled by d_model/7168 (rounded to 64): vocab (from
 *              163840), dense d_ff (18432), q_lora (1536), kv_lora (512);
 *              head dims kept (KDA 128, MLA 128/64/128), KDA gate rank 128,
 *              d_shared = d_expert.
 *           3. Trunk -> target 0.43 R: the head count (KDA and MLA, K3: 96)
 *              is chosen so the trunk bytes are nearest the target.
 *           4. Experts per layer: as many as fit in disk_bytes (container
 *              = manifest + trunk + 92 banks <= disk_bytes).
 *         spill_gen_summarize prints the numbers of each step.
 *   Overrides: n_experts (any preset), n_moe_layers and top_k (nano and
 *         mini: a model shaped for a router trace, `spill gen --like-trace`;
 *         the preset's dense layer stays first and the attention pattern
 *         runs on over the added layers).
 *
 * Expert popularity: routers are f32 with N(0, 1/D) rows (logits ~N(0, 1)
 * for unit-rms h) and a selection-only bias exp_probs_b = skew * a *
 * (z + 0.05 (z^2 - 1)), z ~ N(0, 1) per (layer, expert): a slightly
 * right-skewed spread (a few very popular experts); experts with a large
 * bias win the top-k more often. The spread a is calibrated per (n_experts,
 * top_k) at plan time (bisection on a mean-field router: iid N(0, 1)
 * logits, ~0.2 s for a twin) so that the coverage curve matches the real OLMoE-1B-7B trace
 * (traces/olmoe-1b-7b-299.jsonl, pooled over its 16 layers: 50/80/95% of
 * activations come from 20.7/49.5/73.4% of the (layer, expert) pairs), at the
 * trace's sampling density. skew = 1 is that calibration, 0 a uniform bias.
 * spill_gen_routing_coverage checks it through the real routers with hidden
 * states drawn as rmsnorm'd Gaussians (the only distribution we control; real
 * hidden states are structured): mini gives 22.4/49.3/75.0% (15 layers),
 * the 8 GiB twin 22.4/48.9/74.1% (8 layers). The softmax router of the gqa
 * variant has no bias, hence no skew.
 *
 * Thread safety: all calls are reentrant; spill_gen_write may run 2 threads
 * internally. Depends on engine/base and engine/format; never prints.
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
  const char *attn_mix;   /* "k3" (3 KDA : 1 MLA), "mla", "kda", "gqa" */
  spill_gen_trunk trunk;
  spill_dtype expert_dtype; /* rvq3 (default), f32, q8, q4 */
  double skew;            /* popularity skew, 0 = uniform bias; < 0 = default */
  int threads;            /* generator threads besides the writer: 0 or 1 */
  int n_experts;          /* > 0: experts per MoE layer instead of the preset's
                             (twin: instead of what the disk cap allows) */
  int n_moe_layers;       /* > 0: MoE layers after the preset's dense layer(s)
                             instead of the preset's (nano, mini only; the
                             attention mix pattern continues over them) */
  int top_k;              /* > 0: experts routed per token instead of the
                             preset's (nano, mini only; 1..SPILL_MAX_TOPK) */
  spill_progress_fn progress; /* may be NULL; (ctx, bytes done, bytes total) */
  void *progress_ctx;
} spill_gen_opts;

/* Fills the defaults: nano, 8 GiB, 40e9 B, seed 1, k3 mix, q4 trunk, rvq3
 * experts, default skew, 1 generator thread, no progress. */
void spill_gen_opts_init(spill_gen_opts *o);

/* Computes the architecture and the tensor list without writing anything.
 * On success *out owns heap memory (free with spill_manifest_free): name,
 * arch, tensors (names, dtypes, shapes, groups, 64-aligned offsets and
 * bytes), expert dtype/group, record layout, banks, and generator_json (the
 * options). Errors: SPILL_E_CONFIG (unknown preset/mix, RAM or disk too small
 * for the preset), SPILL_E_UNSUPPORTED (expert dtype). */
int spill_gen_plan(const spill_gen_opts *o, spill_manifest *out, spill_err *e);

/* Sizes of a plan and the derivation, for `spill gen --dry-run` / info. */
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
