/* engine/plan/ram_plan.h: the RAM-budget planner (pure arithmetic).
 *
 * Given an architecture, the expert record size, the resident trunk bytes and
 * a context length, it counts every term the engine keeps in RAM:
 *   floor = trunk + attention state at ctx (MLA latent, KDA recurrent state,
 *           conv rings, GQA KV) + scratch (term by term) + a minimum expert
 *           cache of 2 x top_k records;
 *   ws    = record x top_k x MoE layers (the per-token expert working set);
 *   recommended = floor + 3 ws.
 * The default budget is the largest of floor + 3ws, + 2ws, + 1ws that fits
 * 7/8 of usable RAM (min of physical RAM and our cgroup's memory limit); else
 * the floor, with a warning. The expert cache gets budget - (floor - min
 * cache). The model allocates exactly the scratch terms counted here
 * (engine/model checks it against this file in a test), so the engine stays
 * inside its budget. Depends on engine/base and engine/format (spill_arch).
 */
#ifndef SPILL_PLAN_RAM_PLAN_H
#define SPILL_PLAN_RAM_PLAN_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_plan_state {
  uint64_t mla_latent;  /* (kv_lora + rope) floats x ctx x MLA layers */
  uint64_t kda_state;   /* H d^2 floats x KDA layers */
  uint64_t kda_conv;    /* 3 (K-1) H d floats x KDA layers */
  uint64_t gqa_kv;      /* 2 Hk d floats x ctx x GQA layers */
  uint64_t total;
} spill_plan_state;

typedef struct spill_plan_scratch {
  uint64_t activations;  /* residual, norms, q/k/v/o projections of one token */
  uint64_t attn_scores;  /* max heads x ctx floats */
  uint64_t moe_buffers;  /* router scores, per-selection expert outputs, latent */
  uint64_t rvq_luts;     /* rvq3 lookup tables: gate/up input LUTs + down LUT per thread */
  uint64_t logits;       /* vocab floats */
  uint64_t total;
} spill_plan_scratch;

typedef struct spill_plan {
  int ctx;
  uint64_t trunk;
  spill_plan_state state;
  spill_plan_scratch scratch;
  uint64_t record_bytes;
  uint64_t min_cache; /* 2 x top_k records */
  uint64_t floor;
  uint64_t ws;        /* record x top_k x MoE layers */
  uint64_t recommended;
  /* machine-dependent part (filled by spill_plan_budget) */
  uint64_t usable_ram;
  uint64_t cap;        /* 7/8 usable */
  uint64_t budget;     /* explicit or default */
  int budget_ws;       /* default rule: how many ws above the floor (3,2,1; 0 = floor) */
  int budget_explicit;
  int below_recommended_warning; /* default fell back to the floor */
  uint64_t expert_cache; /* budget - (floor - min_cache) */
  uint64_t cache_slots;  /* expert_cache / record_bytes */
} spill_plan;

/* Counts state, scratch, floor, ws and recommended for (arch, record, trunk,
 * ctx, threads). Fails with SPILL_E_INVALID_ARG on impossible inputs and
 * SPILL_E_RANGE on overflow. */
int spill_plan_compute(const spill_arch *a, uint64_t record_bytes, uint64_t trunk_bytes,
                       int ctx, int n_threads, spill_plan *p, spill_err *e);
/* Applies a budget: explicit (> 0) or the default rule for usable_ram.
 * An explicit budget below the floor is refused with SPILL_E_RAM_BUDGET and a
 * message giving the floor. */
int spill_plan_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget,
                      spill_err *e);
/* Usable RAM of this machine: min(physical RAM, cgroup v2 memory.max or v1
 * memory.limit_in_bytes on our cgroup path). Reads /proc and /sys. */
uint64_t spill_plan_usable_ram(void);
/* Test only: read the cgroup membership from proc_cgroup (a file in
 * /proc/self/cgroup's format) and the limits under cgroup_root instead of
 * /proc/self/cgroup and /sys/fs/cgroup (NULL restores each). Process-wide;
 * not thread-safe against a concurrent spill_plan_usable_ram. */
void spill_plan_test_cgroup_paths(const char *proc_cgroup, const char *cgroup_root);

/* The published Kimi K3 shape (docs/PLAN.md): its arch, record size and the
 * trunk bytes we compute for it with our own tensor formats. */
int spill_plan_k3_shape(spill_arch *a, uint64_t *record_bytes, uint64_t *trunk_bytes,
                        spill_err *e);
/* Trunk bytes of an arch with our quantisation choices (q4 groups of 128 for
 * the bulk, q8 groups of 32 for embeddings and lm_head, f32 norms, routers
 * and small vectors). Used for --shape k3 where there is no container. */
uint64_t spill_plan_trunk_estimate(const spill_arch *a);

/* Parses "24G", "512M", "8GiB", "1.5G" (binary units) into bytes; 0 on error. */
uint64_t spill_plan_parse_size(const char *s);

#ifdef __cplusplus
}
#endif
#endif
