/* engine/import/arch_kimi_k3.c: Kimi K3 as released for `spill import`:
 * GGUF `kimi-k3` with llama.cpp de3ff81's keys and tensors, and the Hugging
 * Face checkpoint as released (config.json architectures
 * KimiK3ForConditionalGeneration, the text model's keys under text_config
 * merged over the top level, tensors under `language_model.`, the vision
 * tower and projector skipped and counted), both read as llama.cpp's
 * src/models/kimi-k3.cpp and conversion/kimi_k3.py read them (docs/MODEL.md
 * "Kimi K3 as released" lists the keys, tensors and the graph).
 *
 * Layers with attention.head_count_kv 0 (HF: not in
 * linear_attn_config.full_attn_layers) are KDA (the K3 decay when
 * kda.gate_lower_bound is set, else kimi-linear's softplus decay; full-rank
 * output gate ssm_g / g_proj; GGUF ssm_a = -exp(A_log) written as log(-A),
 * HF A_log's padded storage cut to the head count), the others NoPE MLA (q
 * LoRA when attn_q_a / q_lora_rank, kv_b joined from attn_k_b / attn_v_b or
 * kv_b_proj as is, the optional output gate attn_gate / g_proj). Leading
 * dense layers, then latent MoE: sigmoid + bias selection, no groups,
 * optional renormalisation (divided by max(sum, 2^-14)) and scale, routed
 * experts on ffn_routed_down h (no norm), their weighted sum RMS-normalised
 * by ffn_routed_norm when present, then ffn_routed_up; shared experts on h.
 * SiTU everywhere; attention residuals every attn_res.block_size layers (HF:
 * each score vector is <x>_res_norm * <x>_res_proj, fused in f32 as the
 * converter does). HF experts are compressed-tensors MXFP4 (weight_packed +
 * weight_scale, repacked losslessly into ggml blocks by import_run.c) or
 * plain tensors. Every optional part is decided by its key or tensor as
 * llama.cpp decides it; every config key is used, harmless or checked; every
 * tensor is consumed. A row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

#define GA "kimi-k3"

typedef struct k3_cfg {
  int V, D, L, H, dc, dn, dr, dv, ql, E, k, F, Fd, S, n_dense, Dl;
  int kd, kK, bs, norm, gate, rnorm, bos, eos;
  int tied; /* HF tie_word_embeddings (GGUF: never) */
  double eps, rscale, lb, beta, lbeta;
  uint8_t is_kda[SPILL_MAX_LAYERS];
} k3_cfg;

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out,
                spill_err *e) {
  return imp_gguf_int(g, GA, key, lo, hi, out, dflt, req, e);
}

/* A float key "kimi-k3.<key>": *out = dflt when absent and not required. */
static int gnum(const spill_gguf *g, const char *key, double lo, double hi, double dflt, int req, double *out,
                spill_err *e) {
  char k[96];
  snprintf(k, sizeof k, GA ".%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) {
    SPILL_FAIL_IF(e, req, SPILL_E_FORMAT, "GGUF key %s is missing", k);
    return SPILL_OK;
  }
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !(*out >= lo && *out <= hi), SPILL_E_FORMAT, "GGUF key %s = %g out of range [%g, %g]", k,
                *out, lo, hi);
  return SPILL_OK;
}

/* Is the layer's tensor present (GGUF "blk.l.<g>", HF "model.layers.l.<h>")?
 * Does not mark it used. */
static int has_tensor2(const imp_src *s, int l, const char *g, const char *h) {
  char b[SPILL_SRC_NAME_MAX];
  if (s->is_gguf) {
    snprintf(b, sizeof b, "blk.%d.%s", l, g);
    return spill_gguf_find(&s->gg, b) != NULL;
  }
  snprintf(b, sizeof b, "%smodel.layers.%d.%s", s->hf_prefix, l, h);
  return spill_st_find(&s->st, b) != NULL;
}

/* attention.head_count_kv: 0 marks a KDA layer (import_plan.c). */
static int layer_kinds(const spill_gguf *g, k3_cfg *c, spill_err *e) {
  return imp_gguf_kda_layers(g, GA, c->L, c->is_kda, e);
}

/* The optional tensors: llama.cpp decides per layer, spill's arch holds one
 * choice, so every layer of the kind must agree. GGUF: q LoRA's rank from
 * attn_q_a's shape; HF: from q_lora_rank (c->ql already set). */
static int optional_parts(imp_src *s, k3_cfg *c, spill_err *e) {
  const int G = s->is_gguf;
  int first_mla = -1, first_moe = c->n_dense < c->L ? c->n_dense : -1;
  for (int l = 0; l < c->L && first_mla < 0; l++)
    if (!c->is_kda[l]) first_mla = l;
  const char *gate_g = "attn_gate.weight", *gate_h = "self_attn.g_proj.weight";
  const char *qa_g = "attn_q_a.weight", *qa_h = "self_attn.q_a_proj.weight";
  const char *rn_g = "ffn_routed_norm.weight", *rn_h = "block_sparse_moe.routed_expert_norm.weight";
  if (first_mla >= 0) {
    c->gate = has_tensor2(s, first_mla, gate_g, gate_h);
    if (G) {
      char b[64];
      snprintf(b, sizeof b, "blk.%d.attn_q_a.weight", first_mla);
      const spill_src_tensor *qa = spill_gguf_find(&s->gg, b);
      c->ql = 0;
      if (qa) {
        SPILL_FAIL_IF(e, qa->ndim != 2 || qa->shape[0] < 1 || qa->shape[0] > 1048576, SPILL_E_FORMAT,
                      "tensor %s: not a matrix of at most 1048576 rows", b);
        c->ql = (int)qa->shape[0];
      }
    }
    for (int l = first_mla; l < c->L; l++) {
      if (c->is_kda[l]) continue;
      SPILL_FAIL_IF(e, has_tensor2(s, l, gate_g, gate_h) != c->gate, SPILL_E_UNSUPPORTED,
                    "tensor %s%s%d.%s: the MLA output gate is on some MLA layers and not on "
                    "others (spill's arch holds one choice)", G ? "" : s->hf_prefix, G ? "blk." : "model.layers.", l, G ? gate_g : gate_h);
      SPILL_FAIL_IF(e, has_tensor2(s, l, qa_g, qa_h) != (c->ql > 0), SPILL_E_UNSUPPORTED,
                    G ? "tensor %s%s%d.%s: q LoRA on some MLA layers and not on others"
                      : "tensor %s%s%d.%s: present or absent against q_lora_rank (q LoRA on some MLA layers only)",
                    G ? "" : s->hf_prefix, G ? "blk." : "model.layers.", l, G ? qa_g : qa_h);
    }
  } else {
    c->ql = 0;
  }
  c->rnorm = first_moe >= 0 && has_tensor2(s, first_moe, rn_g, rn_h);
  for (int l = c->n_dense; l < c->L; l++)
    SPILL_FAIL_IF(e, has_tensor2(s, l, rn_g, rn_h) != c->rnorm, SPILL_E_UNSUPPORTED,
                  "tensor %s%s%d.%s: on some MoE layers and not on others", G ? "" : s->hf_prefix, G ? "blk." : "model.layers.", l,
                  G ? rn_g : rn_h);
  SPILL_FAIL_IF(e, c->rnorm && c->Dl == 0, SPILL_E_UNSUPPORTED,
                "tensor %s%s%d.%s without %s", G ? "" : s->hf_prefix, G ? "blk." : "model.layers.", first_moe, G ? rn_g : rn_h,
                G ? GA ".expert_latent_length" : "routed_expert_hidden_size");
  return SPILL_OK;
}

static int config(imp_src *s, k3_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int klm, kl, vl, gf, ng, any_kda = 0, any_mla = 0;
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(layer_kinds(g, c, e));
  for (int l = 0; l < c->L; l++) {
    any_kda |= c->is_kda[l];
    any_mla |= !c->is_kda[l];
  }
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 1e-30, 1, 0, 1, &c->eps, e));
  SPILL_TRY(gkey(g, "kda.head_dim", 1, 4096, 0, any_kda, &c->kd, e));
  SPILL_TRY(gkey(g, "ssm.conv_kernel", 1, 64, 0, any_kda, &c->kK, e));
  SPILL_TRY(gnum(g, "kda.gate_lower_bound", -1e6, 0, 0, 0, &c->lb, e));
  SPILL_FAIL_IF(e, spill_gguf_find_kv(g, GA ".kda.gate_lower_bound") && !(c->lb < 0), SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".kda.gate_lower_bound %g: only a negative bound is supported", c->lb);
  SPILL_TRY(gkey(g, "attention.kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(gkey(g, "rope.dimension_count", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(gkey(g, "attention.key_length_mla", 1, 1048576, 0, 1, &klm, e));
  SPILL_TRY(gkey(g, "attention.value_length_mla", 1, 4096, 0, 1, &c->dv, e));
  c->dn = klm - c->dr;
  SPILL_FAIL_IF(e, c->dn < 1, SPILL_E_FORMAT, "GGUF " GA ": key_length_mla %d <= rope.dimension_count %d", klm, c->dr);
  SPILL_FAIL_IF(e, c->dr % 2, SPILL_E_FORMAT, "GGUF " GA ": rope.dimension_count %d is odd", c->dr);
  SPILL_TRY(gkey(g, "attention.key_length", 1, 1048576, c->dc + c->dr, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 1, 1048576, c->dc, 0, &vl, e));
  SPILL_FAIL_IF(e, kl != c->dc + c->dr || vl != c->dc, SPILL_E_FORMAT,
                "GGUF " GA ": key_length %d / value_length %d are not kv_lora_rank + rope / kv_lora_rank", kl, vl);
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "GGUF " GA ": top-k %d > %d experts", c->k, c->E);
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "expert_shared_count", 0, 64, 0, 1, &c->S, e));
  SPILL_TRY(gkey(g, "leading_dense_block_count", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(gkey(g, "feed_forward_length", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(gkey(g, "expert_latent_length", 0, 1048576, 0, 0, &c->Dl, e));
  SPILL_TRY(gkey(g, "expert_gating_func", 0, 16, 0, 1, &gf, e));
  SPILL_FAIL_IF(e, gf != 2, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".expert_gating_func %d: only 2 (sigmoid) is supported for kimi-k3", gf);
  SPILL_TRY(gkey(g, "expert_group_count", 0, SPILL_MAX_EXPERTS, 0, 0, &ng, e));
  SPILL_FAIL_IF(e, ng > 1, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".expert_group_count %d: kimi-k3 has no group-limited routing", ng);
  c->norm = 0;
  if (spill_gguf_find_kv(g, GA ".expert_weights_norm"))
    SPILL_TRY(spill_gguf_get_bool(g, GA ".expert_weights_norm", &c->norm, e));
  SPILL_TRY(gnum(g, "expert_weights_scale", 0, 1e6, 0, 0, &c->rscale, e));
  if (c->rscale == 0) c->rscale = 1.0; /* llama.cpp: applied unless 0 or 1 */
  SPILL_TRY(gnum(g, "activation.situ_beta", 1e-30, 1e6, 0, 1, &c->beta, e));
  SPILL_TRY(gnum(g, "activation.situ_linear_beta", -1e6, 1e6, 0, 1, &c->lbeta, e));
  SPILL_TRY(gkey(g, "attn_res.block_size", 0, c->L, 0, 1, &c->bs, e));
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                GA " tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  SPILL_FAIL_IF(e, !spill_gguf_find(g, "output.weight"), SPILL_E_FORMAT,
                GA " tensor output.weight is missing (llama.cpp requires it)");
  SPILL_TRY(optional_parts(s, c, e));
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- Hugging Face config.json (KimiK3ForConditionalGeneration) ---- */

#define HF "config.json"

static int refuse(const char *key, const char *why, spill_err *e) {
  return spill_err_set(e, SPILL_E_UNSUPPORTED, HF ": %s changes the maths and is not supported for kimi_k3 (%s)",
                       key, why);
}

/* linear_attn_config: which layers are KDA (1-based full_attn_layers are
 * MLA, as llama.cpp's converter reads it; kda_layers, when given, must be
 * the complement), the KDA dims and the decay's lower bound. */
static int hf_linear_attn(const cJSON *r, k3_cfg *c, spill_err *e) {
  static const char *const keys[] = {"kda_layers", "full_attn_layers", "num_heads", "head_dim",
                                     "short_conv_kernel_size", "gate_lower_bound", NULL};
  const char *P = HF " linear_attn_config";
  const cJSON *la = cJSON_GetObjectItemCaseSensitive(r, "linear_attn_config");
  SPILL_FAIL_IF(e, !cJSON_IsObject(la), SPILL_E_FORMAT, HF ": linear_attn_config is missing or not an object");
  for (const cJSON *it = la->child; it; it = it->next)
    if (!imp_in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           HF ": linear_attn_config.%.60s is not understood for kimi_k3 (it may change the "
                           "maths; refusing)", it->string);
  uint8_t m[SPILL_MAX_LAYERS] = {0};
  const cJSON *fa = cJSON_GetObjectItemCaseSensitive(la, "full_attn_layers");
  SPILL_FAIL_IF(e, !cJSON_IsArray(fa), SPILL_E_FORMAT, HF ": linear_attn_config.full_attn_layers is missing");
  SPILL_TRY(imp_cfg_layer_list(la, HF, "full_attn_layers", c->L, m, 2, e));
  const cJSON *ka = cJSON_GetObjectItemCaseSensitive(la, "kda_layers");
  if (ka && !cJSON_IsNull(ka)) {
    SPILL_TRY(imp_cfg_layer_list(la, HF, "kda_layers", c->L, m, 1, e));
    for (int l = 0; l < c->L; l++)
      SPILL_FAIL_IF(e, m[l] != 1 && m[l] != 2, SPILL_E_FORMAT, HF ": layer %d is in %s", l + 1,
                    m[l] ? "both kda_layers and full_attn_layers" : "neither kda_layers nor full_attn_layers");
  }
  int any = 0, kH = 0;
  for (int l = 0; l < c->L; l++) any |= c->is_kda[l] = !(m[l] & 2);
  if (!any) return SPILL_OK;
  SPILL_TRY(imp_cfg_int(la, P, "num_heads", 1, 4096, c->H, 0, &kH, e));
  SPILL_FAIL_IF(e, kH != c->H, SPILL_E_UNSUPPORTED,
                HF ": linear_attn_config.num_heads %d != num_attention_heads %d (llama.cpp's kimi-k3 gives KDA "
                "the attention head count)", kH, c->H);
  SPILL_TRY(imp_cfg_int(la, P, "head_dim", 1, 4096, 0, 1, &c->kd, e));
  SPILL_TRY(imp_cfg_int(la, P, "short_conv_kernel_size", 1, 64, 0, 1, &c->kK, e));
  SPILL_TRY(spill_json_num_opt(la, "gate_lower_bound", P, -1e6, 0, 0, &c->lb, SPILL_E_FORMAT, e));
  const cJSON *lb = cJSON_GetObjectItemCaseSensitive(la, "gate_lower_bound");
  SPILL_FAIL_IF(e, lb && !cJSON_IsNull(lb) && !(c->lb < 0), SPILL_E_UNSUPPORTED,
                HF ": linear_attn_config.gate_lower_bound %g: only a negative bound is supported", c->lb);
  return SPILL_OK;
}

/* The text model's values (r: text_config merged over the top level). */
static int hf_values(const cJSON *r, k3_cfg *c, spill_err *e) {
  SPILL_TRY(imp_cfg_int(r, HF, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(r, HF, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(spill_json_num(r, "rms_norm_eps", HF, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  SPILL_TRY(imp_cfg_int(r, HF, "q_lora_rank", 0, 1048576, 0, 0, &c->ql, e));
  SPILL_TRY(imp_cfg_int(r, HF, "kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(imp_cfg_int(r, HF, "qk_nope_head_dim", 1, 4096, 0, 1, &c->dn, e));
  SPILL_TRY(imp_cfg_int(r, HF, "qk_rope_head_dim", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(imp_cfg_int(r, HF, "v_head_dim", 1, 4096, 0, 1, &c->dv, e));
  SPILL_FAIL_IF(e, c->dr % 2, SPILL_E_FORMAT, HF ": qk_rope_head_dim %d is odd", c->dr);
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "mla_use_nope")))
    return refuse("mla_use_nope", "K3's MLA is NoPE; llama.cpp's converter asserts true", e);
  SPILL_TRY(imp_cfg_int(r, HF, "num_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_experts_per_token", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, HF ": num_experts_per_token %d > %d experts", c->k, c->E);
  SPILL_TRY(imp_cfg_int(r, HF, "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_shared_experts", 0, 64, 0, 1, &c->S, e));
  SPILL_TRY(imp_cfg_int(r, HF, "first_k_dense_replace", 0, c->L, 0, 1, &c->n_dense, e));
  SPILL_TRY(imp_cfg_int(r, HF, "intermediate_size", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(imp_cfg_int(r, HF, "routed_expert_hidden_size", 1, 1048576, 0, 0, &c->Dl, e));
  SPILL_TRY(spill_json_num(r, "routed_scaling_factor", HF, 0, 1e6, &c->rscale, SPILL_E_FORMAT, e));
  if (c->rscale == 0) c->rscale = 1.0; /* llama.cpp: applied unless 0 or 1 */
  SPILL_TRY(spill_json_bool_opt(r, "moe_renormalize", HF, 0, &c->norm, SPILL_E_FORMAT, e));
  const char *act;
  SPILL_TRY(spill_json_str(r, "moe_router_activation_func", HF, 32, &act, SPILL_E_FORMAT, e));
  if (strcmp(act, "sigmoid")) return refuse("moe_router_activation_func", "only sigmoid", e);
  int ng, tg, freq, mtp;
  SPILL_TRY(imp_cfg_int(r, HF, "num_expert_group", 1, SPILL_MAX_EXPERTS, 1, 0, &ng, e));
  SPILL_TRY(imp_cfg_int(r, HF, "topk_group", 1, SPILL_MAX_EXPERTS, 1, 0, &tg, e));
  if (ng > 1) return refuse("num_expert_group", "llama.cpp's kimi-k3 has no group-limited routing", e);
  SPILL_TRY(imp_cfg_int(r, HF, "moe_layer_freq", 1, 1024, 1, 0, &freq, e));
  if (freq != 1) return refuse("moe_layer_freq", "dense layers between MoE layers; only 1", e);
  SPILL_TRY(imp_cfg_int(r, HF, "num_nextn_predict_layers", 0, 64, 0, 0, &mtp, e));
  if (mtp != 0) return refuse("num_nextn_predict_layers", "MTP layers are not part of the graph", e);
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) return refuse("rope_scaling", "K3's MLA has no RoPE", e);
  SPILL_TRY(spill_json_str(r, "hidden_act", HF, 32, &act, SPILL_E_FORMAT, e));
  if (strcmp(act, "situ")) return refuse("hidden_act", "K3 is SiTU (activation_situ_beta / _linear_beta)", e);
  SPILL_TRY(spill_json_num(r, "activation_situ_beta", HF, 1e-30, 1e6, &c->beta, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num(r, "activation_situ_linear_beta", HF, -1e6, 1e6, &c->lbeta, SPILL_E_FORMAT, e));
  SPILL_TRY(imp_cfg_int(r, HF, "attn_res_block_size", 0, c->L, 0, 1, &c->bs, e));
  return spill_json_bool_opt(r, "tie_word_embeddings", HF, 0, &c->tied, SPILL_E_FORMAT, e);
}

static const char *const k_skip[] = {"vision_tower.", "mm_projector.", NULL};

static int hf_config(imp_src *s, const char *dir, const cJSON *root, k3_cfg *c, spill_err *e) {
  /* read or checked; num_key_value_heads, head_dim, rope_theta,
   * use_grouped_topk (no groups), model_max_length and the vision
   * wrapper's media keys are not read by the text model's forward pass */
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
      "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "head_dim",
      "mla_use_nope", "num_experts", "num_experts_per_token", "moe_intermediate_size", "intermediate_size",
      "num_shared_experts", "first_k_dense_replace", "moe_layer_freq", "num_expert_group", "topk_group",
      "use_grouped_topk", "moe_router_activation_func", "moe_renormalize", "routed_scaling_factor",
      "routed_expert_hidden_size", "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings",
      "hidden_act", "activation_situ_beta", "activation_situ_linear_beta", "attn_res_block_size",
      "linear_attn_config", "num_nextn_predict_layers", "model_max_length", "quantization_config",
      "media_placeholder_token_id", "ignore_index", "use_unified_vision_chunk", "video_placeholder", NULL};
  cJSON *r = NULL;
  SPILL_TRY(imp_cfg_text_merged(root, HF, &r, e));
  int rc = imp_cfg_only_keys(r, "kimi_k3", keys, e);
  if (rc == SPILL_OK) rc = hf_values(r, c, e);
  if (rc == SPILL_OK) rc = hf_linear_attn(r, c, e);
  if (rc == SPILL_OK) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(r, "quantization_config");
    const cJSON *qm = q ? cJSON_GetObjectItemCaseSensitive(q, "quant_method") : NULL;
    if (cJSON_IsString(qm) && !strcmp(qm->valuestring, "compressed-tensors")) rc = imp_cfg_ct_mxfp4(q, s, e);
    else rc = imp_cfg_quant(r, s, e);
  }
  if (rc == SPILL_OK) rc = imp_cfg_bos_eos(r, dir, &c->bos, &c->eos, e);
  cJSON_Delete(r);
  SPILL_TRY(rc);
  /* float values as llama.cpp holds them (f32 GGUF keys and hparams), so the
   * checkpoint and its GGUF conversion give one container */
  c->eps = (float)c->eps;
  c->lb = (float)c->lb;
  c->beta = (float)c->beta;
  c->lbeta = (float)c->lbeta;
  c->rscale = (float)c->rscale;
  /* the released checkpoint's text tensors sit under language_model. */
  if (spill_st_find(&s->st, "language_model.model.embed_tokens.weight"))
    snprintf(s->hf_prefix, sizeof s->hf_prefix, "language_model.");
  s->skip_prefixes = k_skip;
  return optional_parts(s, c, e);
}

/* ---- tensors ---- */

/* Container tensor blk.l.dst from GGUF "blk.l.<g>" or HF "model.layers.l.<h>". */
static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *h, int nd, uint64_t r,
             uint64_t co, spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e);
}

/* An AttnRes score vector (D): GGUF the fused tensor; HF <hf>_norm.weight *
 * <hf>_proj.weight (a [D] and a [1, D] or [D]), fused by import_run.c. l < 0:
 * the output's (no layer). */
static int res_score(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *hf, uint64_t D,
                     spill_err *e) {
  char n[160], pr[200];
  if (s->is_gguf) {
    if (l >= 0) return T(s, p, l, dst, g, NULL, 1, D, 0, e);
    return imp_add_trunk(s, p, dst, g, 1, D, 0, 0, e);
  }
  if (l >= 0) {
    snprintf(n, sizeof n, "%s_norm.weight", hf);
    SPILL_TRY(imp_add_squeezed(s, p, l, dst, NULL, n, D, 0, 0, 0, e));
    snprintf(pr, sizeof pr, "model.layers.%d.%s_proj.weight", l, hf);
  } else {
    snprintf(n, sizeof n, "%s_norm.weight", hf);
    SPILL_TRY(imp_add_trunk(s, p, dst, n, 1, D, 0, 0, e));
    snprintf(pr, sizeof pr, "%s_proj.weight", hf);
  }
  imp_trunk *t = &p->trunk[p->n_trunk - 1];
  SPILL_TRY(imp_need(s, pr, &t->mul, e));
  uint64_t got = 1;
  for (int i = 0; i < t->mul->ndim; i++) got *= t->mul->shape[i];
  SPILL_FAIL_IF(e, got != D || (t->mul->ndim == 2 && t->mul->shape[0] != 1) || t->mul->ndim > 2, SPILL_E_FORMAT,
                "tensor %s: shape is not [1, %llu] or [%llu] (a projection of the normed entry to one score)",
                t->mul->name, (unsigned long long)D, (unsigned long long)D);
  SPILL_FAIL_IF(e, t->mul->dtype == SPILL_SRC_OTHER || t->mul->dtype == SPILL_SRC_F8_E4M3, SPILL_E_UNSUPPORTED,
                "tensor %s: dtype %s is not supported here (F32, F16, BF16)", t->mul->name,
                t->mul->dtype == SPILL_SRC_OTHER ? t->mul->other_name : "F8_E4M3");
  return SPILL_OK;
}

static int plan_kda(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, n = (uint64_t)c->H * c->kd, d = c->kd, K = c->kK;
  static const char *const qkv[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    char dst[32], g[48], h[48];
    snprintf(dst, sizeof dst, "attn_%s", qkv[i]);
    snprintf(g, sizeof g, "attn_%s.weight", qkv[i]);
    snprintf(h, sizeof h, "self_attn.%s_proj.weight", qkv[i]);
    SPILL_TRY(T(s, p, l, dst, g, h, 2, n, D, e));
    snprintf(dst, sizeof dst, "attn_%s_conv", qkv[i]);
    snprintf(g, sizeof g, "ssm_conv1d_%s.weight", qkv[i]);
    snprintf(h, sizeof h, "self_attn.%s_conv1d.weight", qkv[i]);
    SPILL_TRY(imp_add_squeezed(s, p, l, dst, g, h, n, K, 1, 0, e));
  }
  SPILL_TRY(T(s, p, l, "attn_f_a", "ssm_f_a.weight", "self_attn.f_a_proj.weight", 2, d, D, e));
  SPILL_TRY(T(s, p, l, "attn_f_b", "ssm_f_b.weight", "self_attn.f_b_proj.weight", 2, n, d, e));
  SPILL_TRY(T(s, p, l, "attn_dt_bias", "ssm_dt.bias", "self_attn.dt_bias", 1, n, 0, e));
  /* GGUF: -exp(A_log) -> A_log; HF: A_log, padded storage cut to the head count */
  SPILL_TRY(imp_add_squeezed(s, p, l, "attn_a_log", "ssm_a", "self_attn.A_log", (uint64_t)c->H, 0, 0, !s->is_gguf, e));
  p->trunk[p->n_trunk - 1].log_neg = s->is_gguf;
  SPILL_TRY(T(s, p, l, "attn_b", "ssm_beta.weight", "self_attn.b_proj.weight", 2, (uint64_t)c->H, D, e));
  /* the full-rank output gate (HF g_proj on a KDA layer) */
  SPILL_TRY(T(s, p, l, "attn_g", "ssm_g.weight", "self_attn.g_proj.weight", 2, n, D, e));
  SPILL_TRY(T(s, p, l, "attn_o_norm", "ssm_norm.weight", "self_attn.o_norm.weight", 1, d, 0, e));
  return T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, n, e);
}

static int plan_mla(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, dn = c->dn, dr = c->dr, dv = c->dv, dc = c->dc, ql = c->ql;
  char pre[32], b[64];
  snprintf(pre, sizeof pre, "blk.%d.", l);
  if (s->is_gguf) {
    snprintf(b, sizeof b, "%sattn_kv_b.weight", pre);
    SPILL_FAIL_IF(e, spill_gguf_find(&s->gg, b), SPILL_E_UNSUPPORTED,
                  "tensor %s: the unsplit kv_b is not part of kimi-k3 (llama.cpp's graph needs attn_k_b / attn_v_b)", b);
  }
  if (ql > 0) {
    SPILL_TRY(T(s, p, l, "attn_q_a", "attn_q_a.weight", "self_attn.q_a_proj.weight", 2, ql, D, e));
    SPILL_TRY(T(s, p, l, "attn_q_a_norm", "attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", 1, ql, 0, e));
    SPILL_TRY(T(s, p, l, "attn_q_b", "attn_q_b.weight", "self_attn.q_b_proj.weight", 2, H * (dn + dr), ql, e));
  } else {
    SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * (dn + dr), D, e));
  }
  SPILL_TRY(T(s, p, l, "attn_kv_a", "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", 2, dc + dr, D, e));
  SPILL_TRY(T(s, p, l, "attn_kv_a_norm", "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", 1, dc, 0, e));
  if (s->is_gguf)
    SPILL_TRY(imp_add_kv_b_split(s, p, pre, l, H, dc, dn, dv, e));
  else /* per head: dn nope rows, then dv value rows (the container's order) */
    SPILL_TRY(T(s, p, l, "attn_kv_b", NULL, "self_attn.kv_b_proj.weight", 2, H * (dn + dv), dc, e));
  if (c->gate) SPILL_TRY(T(s, p, l, "attn_gate", "attn_gate.weight", "self_attn.g_proj.weight", 2, H * dv, D, e));
  return T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * dv, e);
}

static int plan_ffn(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, E = c->E, Dl = c->Dl, S = (uint64_t)c->S * c->F, Din = Dl > 0 ? Dl : D;
  /* HF experts: w1 gate, w3 up, w2 down */
  static const char *const w[SPILL_SEC_COUNT] = {"w1", "w3", "w2"};
  if (l < c->n_dense) return imp_plan_dense_ffn(s, p, l, D, (uint64_t)c->Fd, e);
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "block_sparse_moe.gate.weight", 2, E, D, e));
  SPILL_TRY(T(s, p, l, "exp_probs_b", "exp_probs_b.bias", "block_sparse_moe.gate.e_score_correction_bias", 1, E, 0,
              e));
  if (Dl > 0) {
    SPILL_TRY(T(s, p, l, "moe_down_proj", "ffn_routed_down.weight", "block_sparse_moe.routed_expert_down_proj.weight",
                2, Dl, D, e));
    if (c->rnorm)
      SPILL_TRY(T(s, p, l, "moe_latent_norm", "ffn_routed_norm.weight", "block_sparse_moe.routed_expert_norm.weight",
                  1, Dl, 0, e));
    SPILL_TRY(T(s, p, l, "moe_up_proj", "ffn_routed_up.weight", "block_sparse_moe.routed_expert_up_proj.weight", 2,
                D, Dl, e));
  }
  if (S > 0) SPILL_TRY(imp_plan_shared_experts(s, p, l, D, S, "block_sparse_moe.shared_experts", e));
  imp_moe_layer *m = &p->moe[l - c->n_dense];
  if (s->is_gguf || !s->ct_mxfp4) {
    if (!s->is_gguf && has_tensor2(s, l, "", "block_sparse_moe.experts.0.w1.weight_packed"))
      return spill_err_set(e, SPILL_E_FORMAT,
                           "tensor %smodel.layers.%d.block_sparse_moe.experts.0.w1.weight_packed: packed MXFP4 "
                           "experts, but config.json has no compressed-tensors mxfp4-pack-quantized "
                           "quantization_config", s->hf_prefix, l);
    return imp_plan_experts(s, m, l, E, Din, (uint64_t)c->F, "block_sparse_moe.experts", w, e);
  }
  char pre[48];
  snprintf(pre, sizeof pre, "model.layers.%d.", l);
  for (int k = 0; k < SPILL_SEC_COUNT; k++) {
    const uint64_t rows = k == SPILL_SEC_DOWN ? Din : (uint64_t)c->F, cols = k == SPILL_SEC_DOWN ? (uint64_t)c->F : Din;
    SPILL_TRY(imp_hf_experts_mxfp4(s, m, k, pre, "block_sparse_moe.experts", w[k], E, rows, cols, e));
  }
  return SPILL_OK;
}

static int plan_tensors(imp_src *s, const k3_cfg *c, imp_plan *p, spill_err *e) {
  const uint64_t D = c->D;
  SPILL_TRY(imp_plan_init(s, p, 4 + 28 * c->L, c->L - c->n_dense + 1, (uint64_t)c->V, D, c->tied, e));
  if (c->bs > 0)
    SPILL_TRY(res_score(s, p, -1, "output_res_score", "output_res_score.weight", "model.output_attn_res", D, e));
  for (int l = 0; l < c->L; l++) {
    SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, e));
    if (c->bs > 0) {
      SPILL_TRY(res_score(s, p, l, "attn_res_score", "attn_res_score.weight", "self_attention_res", D, e));
      SPILL_TRY(res_score(s, p, l, "ffn_res_score", "ffn_res_score.weight", "mlp_res", D, e));
    }
    SPILL_TRY(c->is_kda[l] ? plan_kda(s, c, p, l, e) : plan_mla(s, c, p, l, e));
    SPILL_TRY(T(s, p, l, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, 0, e));
    SPILL_TRY(plan_ffn(s, c, p, l, e));
  }
  return imp_check_consumed(s, p, -1, e);
}

static void fill_arch(const k3_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "kimi-k3");
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = c->n_dense;
  a->d_ff = c->n_dense > 0 ? c->Fd : 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SITU;
  a->situ_beta = c->beta;
  a->situ_lambda = c->lbeta;
  a->attn_res_block = c->bs;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  int any_mla = 0, any_kda = 0;
  for (int l = 0; l < c->L; l++) {
    a->layer_attn[l] = c->is_kda[l] ? SPILL_ATTN_KDA : SPILL_ATTN_MLA;
    any_kda |= c->is_kda[l];
    any_mla |= !c->is_kda[l];
  }
  if (any_mla) {
    spill_mla_cfg *m = &a->mla;
    m->n_heads = c->H;
    m->q_lora_rank = c->ql;
    m->kv_lora_rank = c->dc;
    m->qk_nope_dim = c->dn;
    m->qk_rope_dim = c->dr;
    m->v_head_dim = c->dv;
    m->use_rope = 0;         /* NoPE: k_pe / q_pe unrotated */
    m->rope_theta = 10000.0; /* unused without RoPE; the manifest needs a positive value */
    m->kv_norm_eps = 0;      /* rms_norm_eps */
    m->out_gate = c->gate;
  }
  if (any_kda) {
    spill_kda_cfg *k = &a->kda;
    k->n_heads = c->H;
    k->head_dim = c->kd;
    k->conv_kernel = c->kK;
    k->gate_rank = c->kd; /* ssm_f_a (d, D) */
    k->out_gate_rank = 0; /* ssm_g (H d, D), full rank */
    k->decay_floor = 0;
    k->l2norm_eps = c->eps; /* llama.cpp's q/k norm: x / sqrt(|x|^2 + rms eps) */
    k->gate_lower_bound = c->lb;
  }
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->n_shared = c->S;
  o->d_shared = c->S > 0 ? c->F : 0;
  o->d_latent = c->Dl;
  o->latent_norm = c->Dl > 0 ? (c->rnorm ? SPILL_LATENT_NORM_OUTPUT : SPILL_LATENT_NORM_NONE)
                             : SPILL_LATENT_NORM_INPUT;
  o->router = SPILL_ROUTER_SIGMOID;
  o->norm_topk = c->norm;
  o->norm_min = 6.103515625e-5; /* llama.cpp clamps the sum at 2^-14 */
  o->routed_scale = c->rscale;
}

int imp_kimi_k3_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p,
                        spill_err *e) {
  (void)variant;
  k3_cfg *c = calloc(1, sizeof *c);
  int rc = c ? hf_config(s, dir, root, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}

int imp_kimi_k3_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  k3_cfg *c = calloc(1, sizeof *c);
  int rc = c ? config(s, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}
