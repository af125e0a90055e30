/* engine/spill_info.c: the container-level calls of the public API: model
 * information from the manifest and RAM plans of a model or a published
 * shape. Thin: the work is in engine/format and engine/plan; this file only
 * maps public structs to module structs and counts parameters. (Synthetic
 * generation is a research tool: research/gen/spill_gen.h.) */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/cpu_cores.h"
#include "engine/format/container.h"
#include "engine/plan/ram_plan.h"
#include "engine/spill.h"
#include "engine/spill_internal.h"

/* Weights in a tensor (vectors count their length). */
static uint64_t tensor_params(const spill_tensor_info *t) { return t->shape[0] * t->shape[1]; }

int spill_info_read(const char *model_dir, spill_info *info, spill_err *e) {
  spill_container c;
  memset(info, 0, sizeof *info);
  SPILL_TRY(spill_container_open(model_dir, &c, e));
  const spill_manifest *m = &c.m;
  const spill_arch *a = &m->arch;
  snprintf(info->name, sizeof info->name, "%s", m->name);
  info->container_id = m->container_id;
  snprintf(info->family, sizeof info->family, "%s", a->family);
  info->n_layers = a->n_layers;
  info->n_dense_layers = a->n_dense_layers;
  info->n_moe_layers = spill_arch_n_moe(a);
  for (int l = 0; l < a->n_layers; l++) {
    if (a->layer_attn[l] == SPILL_ATTN_MLA) info->n_mla++;
    else if (a->layer_attn[l] == SPILL_ATTN_KDA) info->n_kda++;
    else if (a->layer_attn[l] == SPILL_ATTN_GDN) info->n_gdn++;
    else info->n_gqa++;
  }
  info->d_model = a->d_model;
  info->vocab_size = a->vocab_size;
  info->bos_id = a->bos_id;
  info->eos_id = a->eos_id;
  if (info->n_moe_layers) {
    info->n_experts = a->moe.n_experts;
    info->top_k = a->moe.top_k;
    info->d_expert = a->moe.d_expert;
    info->d_latent = a->moe.d_latent;
    info->n_shared = a->moe.n_shared;
    snprintf(info->expert_dtype, sizeof info->expert_dtype, "%s",
             spill_dtype_name(m->expert_dtype));
    info->record_bytes = m->record_bytes;
  }
  info->trunk_bytes = c.trunk_bytes;
  for (int i = 0; i < m->n_files; i++) info->container_bytes += m->files[i].bytes;
  uint64_t trunk_params = 0, embd_params = 0, codebook_params = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    const spill_tensor_info *t = &m->tensors[i];
    trunk_params += tensor_params(t);
    if (strcmp(t->name, "tok_embd") == 0) embd_params = tensor_params(t);
    if (strstr(t->name, ".codebook")) codebook_params += tensor_params(t);
  }
  /* Codebooks are quantisation metadata, not weights. */
  trunk_params -= codebook_params;
  uint64_t expert_params = 0;
  for (int s = 0; s < SPILL_SEC_COUNT; s++)
    expert_params += (uint64_t)m->sect[s].rows * m->sect[s].cols;
  info->params_total = trunk_params + expert_params * (uint64_t)a->moe.n_experts *
                                          (uint64_t)info->n_moe_layers * (info->n_moe_layers > 0);
  /* Active per token: every trunk weight but the embedding table (one row is
   * read, not multiplied) plus top_k experts in each MoE layer. */
  info->params_active = trunk_params - embd_params +
                        expert_params * (uint64_t)info->top_k * (uint64_t)info->n_moe_layers;
  spill_container_close(&c);
  return SPILL_OK;
}

int spill_plan_model_run(const char *model_dir, const spill_model_mem_opts *o,
                         uint64_t budget_bytes, uint64_t usable_ram, spill_plan *plan,
                         spill_err *e) {
  spill_container c;
  SPILL_TRY(spill_container_open(model_dir, &c, e));
  spill_model_mem_opts mo = *o;
  if (mo.n_threads <= 0) mo.n_threads = spill_cpu_physical_cores(); /* threads auto */
  mo.rvq3_qlut = spill_model_rvq3_qlut(c.m.expert_dtype);
  mo.act_q8 = spill_model_act_q8(&c.m, mo.act_q8);
  int rc = spill_plan_compute_run(&c.m.arch, c.m.record_bytes, c.trunk_bytes, &mo, plan, e);
  spill_container_close(&c);
  SPILL_TRY(rc);
  return spill_plan_budget(plan, usable_ram ? usable_ram : spill_plan_usable_ram(), budget_bytes,
                           0, e);
}

int spill_plan_model(const char *model_dir, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e) {
  /* the knobs' defaults (act_quant q8, swa_kv auto) */
  const spill_model_mem_opts o = {ctx, threads, 16, 1, 0, 0, SPILL_SWA_KV_AUTO};
  return spill_plan_model_run(model_dir, &o, budget_bytes, usable_ram, plan, e);
}

int spill_plan_shape(const char *shape, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e) {
  spill_arch a;
  if (threads <= 0) threads = spill_cpu_physical_cores(); /* threads auto */
  SPILL_TRY(spill_plan_shape_compute(shape, ctx, threads, &a, plan, e));
  /* counted with rings; the budget decides swa_kv as the knob's default
   * (auto) does */
  plan->swa_kv = SPILL_SWA_KV_AUTO;
  return spill_plan_budget(plan, usable_ram ? usable_ram : spill_plan_usable_ram(), budget_bytes,
                           0, e);
}

int spill_plan_shape_at(int i, const char **name, const char **about) {
  return spill_plan_shape_info(i, name, about, NULL);
}

uint64_t spill_usable_ram(void) { return spill_plan_usable_ram(); }

uint64_t spill_available_ram(void) { return spill_plan_available_ram(); }

int spill_physical_cores(void) { return spill_cpu_physical_cores(); }
