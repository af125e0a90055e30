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
 * cache), never more slots than the model has expert records (a budget
 * above floor - min cache + every record is more than the model can use).
 * An explicit budget whose RAM use (so bounded) is above the cap is refused
 * unless forced: it would push the machine into swap or the OOM killer. The
 * state and scratch terms are engine/model's one memory formula
 * (engine/model/model_memory.h), which spill_model_open allocates by
 * (engine/spill_plan_test.cc opens models of every attention kind and
 * family and compares), so the engine stays inside its budget. Depends on
 * engine/base, engine/format (spill_arch), engine/model (model_memory.h) and
 * the public types of engine/spill.h (//engine:api).
 */
#ifndef SPILL_PLAN_RAM_PLAN_H
#define SPILL_PLAN_RAM_PLAN_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"
#include "engine/model/model_memory.h"
#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* spill_plan, spill_plan_state, spill_plan_scratch: the public types of
 * engine/spill.h (the plan is part of the API); this module fills them. */

/* Counts state, scratch, floor, ws and recommended for (arch, record, trunk)
 * and what the model runs with (o: ctx, threads, prefill chunk, act_q8,
 * int16 LUTs, sliding-window KV: a spill_swa_kv, auto counted as rings until
 * spill_plan_budget decides). Fails with SPILL_E_INVALID_ARG on impossible inputs and
 * SPILL_E_RANGE on overflow. */
int spill_plan_compute_run(const spill_arch *a, uint64_t record_bytes, uint64_t trunk_bytes,
                           const spill_model_mem_opts *o, spill_plan *p, spill_err *e);
/* spill_plan_compute_run with the engine's defaults (prefill chunk 16,
 * act_quant f32) and the int16 LUTs counted (no expert dtype here: an upper
 * bound). */
int spill_plan_compute(const spill_arch *a, uint64_t record_bytes, uint64_t trunk_bytes,
                       int ctx, int n_threads, spill_plan *p, spill_err *e);
/* Applies a budget: explicit (> 0) or the default rule for usable_ram.
 * An explicit budget below the floor is refused with SPILL_E_RAM_BUDGET and a
 * message giving the floor; so is one whose RAM use min(budget, model_max)
 * is above the cap, unless force (then budget_forced is set). p is filled
 * either way, so the numbers can be reported. A plan counted with swa_kv
 * auto (o->swa_full_kv = SPILL_SWA_KV_AUTO) is decided here, once: full
 * (p->swa_full_extra added to state, floor, recommended and model_max) when
 * that extra is at most 1/8 of the budget planned with rings and the budget
 * still holds with it, else rings (also when the rings' budget fails). */
int spill_plan_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget, int force,
                      spill_err *e);
/* Usable RAM of this machine: min(physical RAM, cgroup v2 memory.max or v1
 * memory.limit_in_bytes on our cgroup path). Reads /proc and /sys. */
uint64_t spill_plan_usable_ram(void);
/* Test only: read the cgroup membership from proc_cgroup (a file in
 * /proc/self/cgroup's format) and the limits under cgroup_root instead of
 * /proc/self/cgroup and /sys/fs/cgroup (NULL restores each). Process-wide;
 * not thread-safe against a concurrent spill_plan_usable_ram. */
void spill_plan_test_cgroup_paths(const char *proc_cgroup, const char *cgroup_root);
/* Memory the kernel says a new allocation can still get now (/proc/meminfo's
 * MemAvailable), 0 when unknown. For tools that size a measurement by what
 * is free on a shared machine, not by what the machine has. */
uint64_t spill_plan_available_ram(void);
/* Test only: read MemAvailable from meminfo (a file in /proc/meminfo's
 * format) instead of /proc/meminfo (NULL restores it). Process-wide. */
void spill_plan_test_meminfo_path(const char *meminfo);

/* The published Kimi K3 shape (docs/PLAN.md): its arch, record size and the
 * trunk bytes we compute for it with our own tensor formats. */
int spill_plan_k3_shape(spill_arch *a, uint64_t *record_bytes, uint64_t *trunk_bytes,
                        spill_err *e);
/* The same shape with its experts as expert_dtype: SPILL_DT_RVQ3 (the
 * published container) or SPILL_DT_MXFP4 (the checkpoint's experts as
 * shipped); other dtypes are refused. */
int spill_plan_k3_shape_dtype(int expert_dtype, spill_arch *a, uint64_t *record_bytes,
                              uint64_t *trunk_bytes, spill_err *e);
/* Trunk bytes of an arch with our quantisation choices (q4 groups of 128 for
 * the bulk, q8 groups of 32 for embeddings and lm_head, f32 norms, routers
 * and small vectors). Used for --shape k3 where there is no container. */
uint64_t spill_plan_trunk_estimate(const spill_arch *a);
/* The same, with the rvq3 codebooks counted only for rvq3 experts (the
 * published shapes other than K3's, whose two rows keep them either way). */
uint64_t spill_plan_trunk_estimate_dtype(const spill_arch *a, int expert_dtype);

/* The table of published shapes (engine/plan/plan_shapes.c; docs/PLAN.md
 * "Published shapes"): row i's name (for --shape and the simulator's
 * "model.shape"), what it is (the model and the expert dtype its figures
 * assume) and its experts' dtypes (gate, up, down); any output may be NULL.
 * SPILL_E_RANGE past the last row. */
int spill_plan_shape_info(int i, const char **name, const char **about, spill_dtype dt[3]);
/* The arch, expert record size, estimated trunk bytes and expert (gate)
 * dtype (expert_dtype may be NULL) of the shape called name; SPILL_E_INVALID_ARG naming the known shapes otherwise. */
int spill_plan_shape_arch(const char *name, spill_arch *a, uint64_t *record_bytes,
                          uint64_t *trunk_bytes, spill_dtype *expert_dtype, spill_err *e);
/* spill_plan_compute_run of the shape called name (its arch in *a) with the
 * knobs' defaults, as spill_plan_model plans a container of that arch (K3's
 * rows: spill_plan_compute, the rvq3 LUTs counted, as published). */
int spill_plan_shape_compute(const char *name, int ctx, int threads, spill_arch *a,
                             spill_plan *p, spill_err *e);

/* Parses "24G", "512M", "8GiB", "1.5G" (binary units) into bytes; 0 on error. */
uint64_t spill_plan_parse_size(const char *s);

#ifdef __cplusplus
}
#endif
#endif
