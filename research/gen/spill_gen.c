/* research/gen/spill_gen.c: the client-facing calls of the synthetic-model
 * generator (research/gen/spill_gen.h): maps a spill_gen_request onto
 * spill_gen_opts and shapes a request after a router trace. Thin: the
 * planning and writing are in synth_*.c; the trace check is the engine's
 * (spill_routing_trace_inspect), so `spill gen --like-trace` accepts exactly
 * the traces the engine replays. spill_plan_recipe plans a request's model
 * with the engine's planner (engine/plan) without writing it.
 */
#include <stdio.h>
#include <string.h>

#include "engine/base/cpu_cores.h"
#include "engine/base/alloc.h"
#include "engine/format/container.h"
#include "engine/plan/ram_plan.h"
#include "research/gen/spill_gen.h"
#include "research/gen/synth.h"

/* spill_gen_opts for a request (progress not set). */
static int gen_opts(const spill_gen_request *req, spill_gen_opts *o, spill_err *e) {
  spill_gen_opts_init(o);
  if (req->preset) o->preset = req->preset;
  if (req->ram_bytes) o->ram_bytes = req->ram_bytes;
  if (req->disk_bytes) o->disk_bytes = req->disk_bytes;
  if (req->seed) o->seed = req->seed;
  if (req->attn_mix) o->attn_mix = req->attn_mix;
  if (req->trunk_dtype) {
    if (strcmp(req->trunk_dtype, "q4") == 0) o->trunk = SPILL_GEN_TRUNK_Q4;
    else if (strcmp(req->trunk_dtype, "f32") == 0) o->trunk = SPILL_GEN_TRUNK_F32;
    else
      return spill_err_set(e, SPILL_E_CONFIG, "trunk dtype '%s': expected q4 or f32",
                           req->trunk_dtype);
  }
  if (req->expert_dtype) {
    spill_dtype dt;
    if (spill_dtype_parse(req->expert_dtype, &dt) != SPILL_OK)
      return spill_err_set(e, SPILL_E_CONFIG, "expert dtype '%s': expected rvq3, f32, q8, q4 or mxfp4",
                           req->expert_dtype);
    o->expert_dtype = dt;
  } else if (req->attn_mix && !strcmp(req->attn_mix, "gptoss")) {
    o->expert_dtype = SPILL_DT_MXFP4; /* gpt-oss ships its experts in MXFP4 */
  }
  if (req->experts > 0) o->n_experts = req->experts;
  if (req->moe_layers > 0) o->n_moe_layers = req->moe_layers;
  if (req->top_k > 0) o->top_k = req->top_k;
  if (req->lookahead_precision != 0) o->la_precision = req->lookahead_precision;
  if (req->coact > 0) o->coact = req->coact;
  if (req->coact < 0) o->coact = 0;
  if (req->reuse > 0) o->reuse = req->reuse;
  if (req->reuse < 0) o->reuse = 0;
  return SPILL_OK;
}

int spill_gen(const char *out_dir, const spill_gen_request *req, spill_progress_cb progress,
              void *user, spill_err *e) {
  spill_gen_opts o;
  SPILL_TRY(gen_opts(req, &o, e));
  o.progress = progress;
  o.progress_ctx = user;
  spill_gen_summary sum;
  if (req->summary && req->summary_cap) {
    req->summary[0] = 0;
    o.summary_out = &sum;
  }
  SPILL_TRY(spill_gen_write(out_dir, &o, e));
  if (o.summary_out) snprintf(req->summary, req->summary_cap, "%s", sum.text);
  return SPILL_OK;
}

/* trunk.bin's size as the container writer lays the planned tensors out:
 * each at a SPILL_TENSOR_ALIGN offset, the file padded to a whole page. */
static int round_up(uint64_t v, uint64_t a, uint64_t *out) {
  uint64_t r;
  if (!spill_add_u64(v, a - 1, &r)) return 0;
  *out = r / a * a;
  return 1;
}

static int planned_trunk_bytes(const spill_manifest *m, uint64_t *out, spill_err *e) {
  uint64_t pos = 0, off;
  for (int i = 0; i < m->n_tensors; i++)
    SPILL_FAIL_IF(e, !round_up(pos, SPILL_TENSOR_ALIGN, &off) ||
                         !spill_add_u64(off, m->tensors[i].bytes, &pos),
                  SPILL_E_CONFIG, "gen: trunk size overflows at tensor %s", m->tensors[i].name);
  SPILL_FAIL_IF(e, !round_up(pos, SPILL_PAGE, out), SPILL_E_CONFIG, "gen: trunk size overflows");
  return SPILL_OK;
}

int spill_plan_recipe(const spill_gen_request *req, int ctx, int threads, uint64_t budget_bytes,
                      uint64_t usable_ram, spill_plan *plan, int *bos_id, spill_err *e) {
  SPILL_FAIL_IF(e, !req || !plan, SPILL_E_INVALID_ARG, "gen: no request or plan");
  spill_gen_opts o;
  SPILL_TRY(gen_opts(req, &o, e));
  o.shape_only = 1; /* sizes only: never the routers' calibration (issue 26 item 10) */
  spill_manifest m;
  SPILL_TRY(spill_gen_plan(&o, &m, e));
  uint64_t trunk = 0;
  int rc = planned_trunk_bytes(&m, &trunk, e);
  /* the knobs' defaults (threads auto as the engine resolves it, act_quant
   * q8 where the dtypes take it) and the container's int16-LUT choice, as
   * spill_plan_model plans the written container */
  if (threads <= 0) threads = spill_cpu_physical_cores(); /* threads auto, as the engine */
  const spill_model_mem_opts mo = {ctx, threads, 16, spill_model_act_q8(&m, 1),
                                   spill_model_rvq3_qlut(m.expert_dtype), 0, SPILL_SWA_KV_AUTO};
  if (rc == SPILL_OK) rc = spill_plan_compute_run(&m.arch, m.record_bytes, trunk, &mo, plan, e);
  if (bos_id) *bos_id = m.arch.bos_id;
  spill_manifest_free(&m);
  SPILL_TRY(rc);
  return spill_plan_budget(plan, usable_ram ? usable_ram : spill_plan_usable_ram(), budget_bytes,
                           0, e);
}

int spill_gen_request_like_trace(spill_gen_request *req, const char *file, spill_err *e) {
  SPILL_FAIL_IF(e, !req, SPILL_E_INVALID_ARG, "gen: no request");
  spill_routing_trace_info ti;
  SPILL_TRY(spill_routing_trace_inspect(file, NULL, &ti, e));
  if (!req->preset) req->preset = "mini";
  SPILL_FAIL_IF(e, strcmp(req->preset, "nano") && strcmp(req->preset, "mini"), SPILL_E_CONFIG,
                "gen: a model like trace %s takes preset nano or mini, not %s", file,
                req->preset);
  SPILL_FAIL_IF(e, req->experts > 0 && req->experts != ti.n_experts, SPILL_E_CONFIG,
                "gen: experts %d, but trace %s has %d experts per layer", req->experts, file,
                ti.n_experts);
  SPILL_FAIL_IF(e, req->moe_layers > 0 && req->moe_layers != ti.n_layers, SPILL_E_CONFIG,
                "gen: %d MoE layers, but trace %s has %d", req->moe_layers, file, ti.n_layers);
  SPILL_FAIL_IF(e, req->top_k > 0 && req->top_k != ti.top_k, SPILL_E_CONFIG,
                "gen: top-%d, but trace %s has top-%d", req->top_k, file, ti.top_k);
  req->experts = ti.n_experts;
  req->moe_layers = ti.n_layers;
  req->top_k = ti.top_k;
  return SPILL_OK;
}
