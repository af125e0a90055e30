/* engine/spill_info.c: the container-level calls of the public API: model
 * information from the manifest, the offline audit and synthetic generation.
 * Thin: the work is in engine/format and research/gen; this file only maps
 * public structs to module structs and counts parameters. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/format/container.h"
#include "research/gen/synth.h"
#include "engine/plan/ram_plan.h"
#include "engine/spill.h"

/* Weights in a tensor (vectors count their length). */
static uint64_t tensor_params(const spill_tensor_info *t) { return t->shape[0] * t->shape[1]; }

int spill_info_read(const char *model_dir, spill_info *info, spill_err *e) {
  spill_container c;
  memset(info, 0, sizeof *info);
  SPILL_TRY(spill_container_open(model_dir, &c, e));
  const spill_manifest *m = &c.m;
  const spill_arch *a = &m->arch;
  snprintf(info->name, sizeof info->name, "%s", m->name);
  snprintf(info->family, sizeof info->family, "%s", a->family);
  info->n_layers = a->n_layers;
  info->n_dense_layers = a->n_dense_layers;
  info->n_moe_layers = spill_arch_n_moe(a);
  for (int l = 0; l < a->n_layers; l++) {
    if (a->layer_attn[l] == SPILL_ATTN_MLA) info->n_mla++;
    else if (a->layer_attn[l] == SPILL_ATTN_KDA) info->n_kda++;
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

int spill_gen(const char *out_dir, const spill_gen_request *req, spill_progress_cb progress,
              void *user, spill_err *e) {
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  if (req->preset) o.preset = req->preset;
  if (req->ram_bytes) o.ram_bytes = req->ram_bytes;
  if (req->disk_bytes) o.disk_bytes = req->disk_bytes;
  if (req->seed) o.seed = req->seed;
  if (req->attn_mix) o.attn_mix = req->attn_mix;
  if (req->trunk_dtype) {
    if (strcmp(req->trunk_dtype, "q4") == 0) o.trunk = SPILL_GEN_TRUNK_Q4;
    else if (strcmp(req->trunk_dtype, "f32") == 0) o.trunk = SPILL_GEN_TRUNK_F32;
    else
      return spill_err_set(e, SPILL_E_CONFIG, "trunk dtype '%s': expected q4 or f32",
                           req->trunk_dtype);
  }
  if (req->expert_dtype) {
    spill_dtype dt;
    if (spill_dtype_parse(req->expert_dtype, &dt) != SPILL_OK)
      return spill_err_set(e, SPILL_E_CONFIG, "expert dtype '%s': expected rvq3, f32, q8 or q4",
                           req->expert_dtype);
    o.expert_dtype = dt;
  }
  if (req->experts > 0) o.n_experts = req->experts;
  if (req->moe_layers > 0) o.n_moe_layers = req->moe_layers;
  if (req->top_k > 0) o.top_k = req->top_k;
  o.progress = progress;
  o.progress_ctx = user;
  return spill_gen_write(out_dir, &o, e);
}

int spill_plan_model(const char *model_dir, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e) {
  spill_container c;
  SPILL_TRY(spill_container_open(model_dir, &c, e));
  int rc = spill_plan_compute(&c.m.arch, c.m.record_bytes, c.trunk_bytes, ctx, threads, plan, e);
  spill_container_close(&c);
  SPILL_TRY(rc);
  return spill_plan_budget(plan, usable_ram ? usable_ram : spill_plan_usable_ram(), budget_bytes,
                           0, e);
}

int spill_plan_shape(const char *shape, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e) {
  SPILL_FAIL_IF(e, !shape || strcmp(shape, "k3") != 0, SPILL_E_INVALID_ARG,
                "unknown shape '%s' (known: k3)", shape ? shape : "");
  spill_arch a;
  uint64_t rec, trunk;
  SPILL_TRY(spill_plan_k3_shape(&a, &rec, &trunk, e));
  SPILL_TRY(spill_plan_compute(&a, rec, trunk, ctx, threads, plan, e));
  return spill_plan_budget(plan, usable_ram ? usable_ram : spill_plan_usable_ram(), budget_bytes,
                           0, e);
}

uint64_t spill_usable_ram(void) { return spill_plan_usable_ram(); }
