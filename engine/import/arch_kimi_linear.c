/* engine/import/arch_kimi_linear.c: Kimi-Linear for `spill import`
 * (config.json model_type kimi_linear, Moonshot's modeling_kimi.py and the
 * KDA kernels of flash-linear-attention; GGUF kimi-linear as llama.cpp's
 * converter writes it and its graph computes; docs/MODEL.md "Kimi-Linear").
 *
 * Layers listed (1-based) in linear_attn_config.kda_layers (GGUF: per-layer
 * head_count_kv 0) are KDA, the others MLA without RoPE and without q LoRA;
 * leading dense layers, then DeepSeek-V3-style MoE: sigmoid scores + bias
 * for the selection, groups scored by their two best, renormalised and
 * times routed_scaling_factor, shared experts. The KDA decay and output
 * gates are low-rank (rank head_dim); conv weights are written as f32, A_log
 * as a vector (GGUF stores A = -exp(A_log): written as log(-A)). HF: the MLA
 * latent RMSNorm uses eps 1e-6 and dropped groups score 0; GGUF (llama.cpp):
 * rms_norm_eps and -inf, weights always renormalised, kv_b joined from
 * attn_k_b / attn_v_b, the KDA q/k l2norm eps rms_norm_eps (not 1e-6). Every config key is used, harmless or checked; every
 * tensor is consumed. A row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

#define KL "config.json"

typedef struct kl_cfg {
  int V, D, L, H, dc, dn, dr, dv, E, k, F, Fd, n_shared, n_dense;
  int kH, kd, kK; /* KDA heads, head dim, conv kernel */
  int n_group, topk_group, norm_topk, tied, bos, eos;
  double rscale, eps;
  double kv_eps; /* MLA latent RMSNorm eps (0: eps) */
  double l2_eps; /* KDA q/k l2norm eps (0: the engine's 1e-6) */
  int G;         /* GGUF kimi-linear source (llama.cpp's names and semantics) */
  uint8_t is_kda[SPILL_MAX_LAYERS];
} kl_cfg;

static int refuse(const char *key, const char *why, spill_err *e) {
  return spill_err_set(e, SPILL_E_UNSUPPORTED,
                       KL ": %s changes the maths and is not supported for kimi_linear (%s)", key, why);
}

/* linear_attn_config: KDA dims and which layers are KDA (1-based lists, as
 * the published config and the modelling code's is_kda_layer(i) = i+1 in
 * kda_layers); full_attn_layers, when given, must be the complement. */
static int hf_linear_attn(const cJSON *root, kl_cfg *c, spill_err *e) {
  const cJSON *la = cJSON_GetObjectItemCaseSensitive(root, "linear_attn_config");
  memset(c->is_kda, 0, sizeof c->is_kda);
  if (!la || cJSON_IsNull(la)) return SPILL_OK; /* every layer MLA */
  static const char *const keys[] = {"kda_layers", "full_attn_layers", "num_heads", "head_dim",
                                     "short_conv_kernel_size", NULL};
  SPILL_FAIL_IF(e, !cJSON_IsObject(la), SPILL_E_FORMAT, KL ": linear_attn_config is not an object");
  for (const cJSON *it = la->child; it; it = it->next)
    if (!imp_in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           KL ": linear_attn_config.%.60s is not understood for kimi_linear (it may change "
                           "the maths; refusing)", it->string);
  const char *p = KL " linear_attn_config";
  uint8_t m[SPILL_MAX_LAYERS] = {0};
  SPILL_TRY(imp_cfg_layer_list(la, KL, "kda_layers", c->L, m, 1, e));
  const cJSON *fa = cJSON_GetObjectItemCaseSensitive(la, "full_attn_layers");
  if (fa && !cJSON_IsNull(fa)) {
    SPILL_TRY(imp_cfg_layer_list(la, KL, "full_attn_layers", c->L, m, 2, e));
    for (int l = 0; l < c->L; l++)
      SPILL_FAIL_IF(e, m[l] != 1 && m[l] != 2, SPILL_E_FORMAT,
                    KL ": layer %d is in %s", l + 1,
                    m[l] ? "both kda_layers and full_attn_layers" : "neither kda_layers nor full_attn_layers");
  }
  int any = 0;
  for (int l = 0; l < c->L; l++) any |= c->is_kda[l] = m[l] & 1;
  if (!any) return SPILL_OK;
  SPILL_TRY(imp_cfg_int(la, p, "num_heads", 1, 4096, 0, 1, &c->kH, e));
  SPILL_TRY(imp_cfg_int(la, p, "head_dim", 1, 4096, 0, 1, &c->kd, e));
  return imp_cfg_int(la, p, "short_conv_kernel_size", 1, 64, 0, 1, &c->kK, e);
}

/* The routing of KimiMoEGate: sigmoid + bias selection, top-two group scores. */
static int hf_routing(const cJSON *root, kl_cfg *c, spill_err *e) {
  const char *act;
  SPILL_TRY(spill_json_str_opt(root, "moe_router_activation_func", KL, 32, "sigmoid", &act,
                               SPILL_E_FORMAT, e));
  if (strcmp(act, "sigmoid"))
    return refuse("moe_router_activation_func",
                  "only sigmoid; the modelling code adds e_score_correction_bias to softmax scores too", e);
  SPILL_TRY(imp_cfg_int(root, KL, "num_expert_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->n_group, e));
  SPILL_TRY(imp_cfg_int(root, KL, "topk_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->topk_group, e));
  SPILL_FAIL_IF(e, c->E % c->n_group, SPILL_E_FORMAT, KL ": num_expert_group %d does not divide num_experts %d",
                c->n_group, c->E);
  SPILL_FAIL_IF(e, c->topk_group > c->n_group, SPILL_E_FORMAT, KL ": topk_group %d > num_expert_group %d",
                c->topk_group, c->n_group);
  SPILL_FAIL_IF(e, c->E / c->n_group < 2, SPILL_E_FORMAT,
                KL ": groups of %d expert(s); the gate scores a group by its two best", c->E / c->n_group);
  SPILL_FAIL_IF(e, c->k > c->topk_group * (c->E / c->n_group), SPILL_E_FORMAT,
                KL ": num_experts_per_token %d > the %d experts of topk_group groups", c->k,
                c->topk_group * (c->E / c->n_group));
  int renorm;
  SPILL_TRY(spill_json_bool_opt(root, "moe_renormalize", KL, 0, &renorm, SPILL_E_FORMAT, e));
  c->norm_topk = renorm && c->k > 1;
  return spill_json_num_opt(root, "routed_scaling_factor", KL, 0, 1e6, 1.0, &c->rscale, SPILL_E_FORMAT, e);
}

/* Values whose other settings the modelling code does not implement. */
static int hf_values(const cJSON *root, kl_cfg *c, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "mla_use_nope");
  if (!cJSON_IsTrue(v)) return refuse("mla_use_nope", "the modelling code asserts true: MLA without RoPE", e);
  v = cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank");
  if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
    return refuse("q_lora_rank", "the modelling code asserts null: full-rank q_proj", e);
  v = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  if (v && !cJSON_IsNull(v)) return refuse("rope_scaling", "not in the published config; MLA has no RoPE", e);
  const char *act;
  SPILL_TRY(spill_json_str_opt(root, "hidden_act", KL, 32, "silu", &act, SPILL_E_FORMAT, e));
  if (strcmp(act, "silu")) return refuse("hidden_act", "only silu", e);
  int freq, mtp;
  SPILL_TRY(imp_cfg_int(root, KL, "moe_layer_freq", 1, 1024, 1, 0, &freq, e));
  if (freq != 1) return refuse("moe_layer_freq", "dense layers between MoE layers; only 1", e);
  SPILL_TRY(imp_cfg_int(root, KL, "num_nextn_predict_layers", 0, 64, 0, 0, &mtp, e));
  if (mtp != 0) return refuse("num_nextn_predict_layers", "the modelling code has no MTP layers", e);
  return spill_json_bool_opt(root, "tie_word_embeddings", KL, 0, &c->tied, SPILL_E_FORMAT, e);
}

static int hf_dims(const cJSON *root, kl_cfg *c, spill_err *e) {
  SPILL_TRY(imp_cfg_int(root, KL, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(root, KL, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(root, KL, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(root, KL, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(root, KL, "kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(imp_cfg_int(root, KL, "qk_nope_head_dim", 1, 4096, 0, 1, &c->dn, e));
  SPILL_TRY(imp_cfg_int(root, KL, "qk_rope_head_dim", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(imp_cfg_int(root, KL, "v_head_dim", 1, 4096, 0, 1, &c->dv, e));
  SPILL_TRY(imp_cfg_int(root, KL, "num_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(root, KL, "num_experts_per_token", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(imp_cfg_int(root, KL, "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(root, KL, "intermediate_size", 1, 1048576, 0, 1, &c->Fd, e));
  SPILL_TRY(imp_cfg_int(root, KL, "num_shared_experts", 0, 64, 0, 0, &c->n_shared, e));
  SPILL_TRY(imp_cfg_int(root, KL, "first_k_dense_replace", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(spill_json_num(root, "rms_norm_eps", KL, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  SPILL_FAIL_IF(e, c->dr % 2, SPILL_E_FORMAT, KL ": qk_rope_head_dim %d is odd", c->dr);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, KL ": num_experts_per_token %d > %d experts", c->k, c->E);
  return SPILL_OK;
}

static int hf_config(imp_src *s, const char *dir, const cJSON *root, kl_cfg *c, spill_err *e) {
  /* read or checked; num_key_value_heads, rope_theta, head_dim (top level),
   * use_grouped_topk and model_max_length are not read by the forward pass
   * (MLA gives every head its own k/v through kv_b and has no RoPE; the
   * gate always runs the grouped top-k) */
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
      "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "head_dim",
      "num_experts", "num_experts_per_token", "moe_intermediate_size", "intermediate_size",
      "num_shared_experts", "first_k_dense_replace", "moe_layer_freq", "num_expert_group", "topk_group",
      "use_grouped_topk", "moe_router_activation_func", "moe_renormalize", "routed_scaling_factor",
      "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "hidden_act", "mla_use_nope",
      "linear_attn_config", "num_nextn_predict_layers", "model_max_length", "quantization_config", NULL};
  SPILL_TRY(imp_cfg_only_keys(root, "kimi_linear", keys, e));
  SPILL_TRY(hf_dims(root, c, e));
  SPILL_TRY(hf_values(root, c, e));
  SPILL_TRY(hf_routing(root, c, e));
  SPILL_TRY(hf_linear_attn(root, c, e));
  SPILL_TRY(imp_cfg_quant(root, s, e));
  c->kv_eps = 1e-6;
  c->l2_eps = 0; /* fla's l2norm: x / sqrt(|x|^2 + 1e-6), the engine's default */
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

/* ---- GGUF kimi-linear (llama.cpp's reading of the keys) ---- */

#define GA "kimi-linear"

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out,
                spill_err *e) {
  return imp_gguf_int(g, GA, key, lo, hi, out, dflt, req, e);
}

/* attention.head_count_kv: 0 marks a KDA layer (import_plan.c). */
static int gguf_layer_kinds(const spill_gguf *g, kl_cfg *c, spill_err *e) {
  return imp_gguf_kda_layers(g, GA, c->L, c->is_kda, e);
}

static int gguf_dims(const spill_gguf *g, kl_cfg *c, spill_err *e) {
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(gguf_layer_kinds(g, c, e));
  int ql, klm, kl, vl, any_kda = 0;
  SPILL_TRY(gkey(g, "attention.q_lora_rank", 0, 1048576, 0, 0, &ql, e));
  SPILL_FAIL_IF(e, ql != 0, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".attention.q_lora_rank %d: q LoRA is not supported for kimi-linear", ql);
  SPILL_TRY(gkey(g, "attention.kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(gkey(g, "rope.dimension_count", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(gkey(g, "attention.key_length_mla", 1, 1048576, 0, 1, &klm, e));
  SPILL_TRY(gkey(g, "attention.value_length_mla", 1, 4096, 0, 1, &c->dv, e));
  c->dn = klm - c->dr;
  SPILL_FAIL_IF(e, c->dn < 1, SPILL_E_FORMAT, "GGUF " GA ": key_length_mla %d <= rope.dimension_count %d", klm, c->dr);
  SPILL_TRY(gkey(g, "attention.key_length", 1, 1048576, c->dc + c->dr, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 1, 1048576, c->dc, 0, &vl, e));
  SPILL_FAIL_IF(e, kl != c->dc + c->dr || vl != c->dc, SPILL_E_FORMAT,
                "GGUF " GA ": key_length %d / value_length %d are not kv_lora_rank + rope / kv_lora_rank", kl, vl);
  for (int l = 0; l < c->L; l++) any_kda |= c->is_kda[l];
  c->kH = c->H; /* llama.cpp: KDA layers have attention.head_count heads */
  SPILL_TRY(gkey(g, "kda.head_dim", 1, 4096, 0, any_kda, &c->kd, e));
  SPILL_TRY(gkey(g, "ssm.conv_kernel", 1, 64, 0, any_kda, &c->kK, e));
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "expert_shared_count", 0, 64, 0, 1, &c->n_shared, e));
  SPILL_TRY(gkey(g, "leading_dense_block_count", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(gkey(g, "feed_forward_length", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "GGUF " GA ": top-k %d > %d experts", c->k, c->E);
  SPILL_FAIL_IF(e, !spill_gguf_find_kv(g, GA ".attention.layer_norm_rms_epsilon"), SPILL_E_FORMAT,
                "GGUF key " GA ".attention.layer_norm_rms_epsilon is missing");
  SPILL_TRY(spill_gguf_get_f64(g, GA ".attention.layer_norm_rms_epsilon", &c->eps, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1), SPILL_E_FORMAT, "GGUF " GA ": epsilon %g out of range", c->eps);
  return SPILL_OK;
}

/* llama.cpp's build_moe_ffn for kimi-linear: the gating function of the
 * file (only sigmoid: the selection bias exp_probs_b is required), groups
 * by the sum of the two best with dropped groups at -inf, weights always
 * renormalised (expert_weights_norm is not read), then expert_weights_scale
 * (absent or 0: 1). */
static int gguf_routing(const spill_gguf *g, kl_cfg *c, spill_err *e) {
  int gf, ng, tg;
  SPILL_TRY(gkey(g, "expert_gating_func", 0, 16, 0, 1, &gf, e));
  SPILL_FAIL_IF(e, gf != 2, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".expert_gating_func %d: only 2 (sigmoid) is supported for kimi-linear", gf);
  c->rscale = 0;
  if (spill_gguf_find_kv(g, GA ".expert_weights_scale"))
    SPILL_TRY(spill_gguf_get_f64(g, GA ".expert_weights_scale", &c->rscale, e));
  SPILL_FAIL_IF(e, !(c->rscale >= 0 && c->rscale <= 1e6), SPILL_E_FORMAT,
                "GGUF " GA ".expert_weights_scale %g out of range", c->rscale);
  if (c->rscale == 0) c->rscale = 1.0;
  c->norm_topk = 1;
  SPILL_TRY(gkey(g, "expert_group_count", 0, SPILL_MAX_EXPERTS, 0, 0, &ng, e));
  SPILL_TRY(gkey(g, "expert_group_used_count", 0, SPILL_MAX_EXPERTS, 0, 0, &tg, e));
  c->n_group = c->topk_group = 1;
  if (ng > 1) {
    SPILL_FAIL_IF(e, c->E % ng || c->E / ng < 2, SPILL_E_FORMAT,
                  "GGUF " GA ": expert_group_count %d does not split %d experts into groups of >= 2", ng, c->E);
    SPILL_FAIL_IF(e, tg < 1 || tg >= ng, SPILL_E_FORMAT,
                  "GGUF " GA ": expert_group_used_count %d not in [1, %d) (llama.cpp asserts it)", tg, ng);
    SPILL_FAIL_IF(e, c->k > tg * (c->E / ng), SPILL_E_FORMAT,
                  "GGUF " GA ": top-k %d > the %d experts of the used groups", c->k, tg * (c->E / ng));
    c->n_group = ng;
    c->topk_group = tg;
  }
  return SPILL_OK;
}

static int gguf_config(imp_src *s, kl_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  c->G = 1;
  SPILL_TRY(gguf_dims(g, c, e));
  SPILL_TRY(gguf_routing(g, c, e));
  c->kv_eps = 0; /* llama.cpp: the latent RMSNorm uses rms_norm_eps */
  /* llama.cpp's KDA q/k norm (build_gdn_l2_norm) is rms_norm(x, eps / d) / sqrt(d)
   * = x / sqrt(|x|^2 + eps) with eps = rms_norm_eps */
  c->l2_eps = c->eps;
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                GA " tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  SPILL_FAIL_IF(e, !spill_gguf_find(g, "output.weight"), SPILL_E_FORMAT,
                GA " tensor output.weight is missing (llama.cpp requires it)");
  c->tied = 0;
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- tensors ---- */

/* Adds container tensor blk.l.dst from the GGUF name g or the HF name h,
 * both below the layer's prefix. */
static int T(imp_src *s, const kl_cfg *c, imp_plan *p, int l, const char *dst, const char *g, const char *h,
             int nd, uint64_t r, uint64_t co, spill_err *e) {
  (void)c;
  return imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e);
}

/* T for a source of shape [rows, cols] up to unit dimensions (import_plan.c). */
static int T_squeezed(imp_src *s, const kl_cfg *c, imp_plan *p, int l, const char *dst, const char *g,
                      const char *h, uint64_t rows, uint64_t cols, int f32, spill_err *e) {
  (void)c;
  return imp_add_squeezed(s, p, l, dst, g, h, rows, cols, f32, 0, e);
}

/* GGUF names per llama.cpp's convert_hf_to_gguf (KimiLinearModel): q/k/v
 * attn_*, conv ssm_conv1d_*, f_a/f_b ssm_f_a/b, dt_bias ssm_dt.bias, A_log
 * as A = -exp(A_log) in ssm_a, b_proj ssm_beta, g_a/g_b ssm_g_a/b, o_norm
 * ssm_norm. */
static int plan_kda(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, n = (uint64_t)c->kH * c->kd, d = c->kd, K = c->kK;
  static const char *const qkv[3] = {"q", "k", "v"};
  char fused[48];
  snprintf(fused, sizeof fused, "blk.%d.attn_qkv.weight", l);
  SPILL_FAIL_IF(e, c->G && spill_gguf_find(&s->gg, fused), SPILL_E_UNSUPPORTED,
                "tensor %s: a fused q/k/v projection is not supported (separate attn_q/k/v only)", fused);
  for (int i = 0; i < 3; i++) {
    char dst[32], g[48], h[48];
    snprintf(dst, sizeof dst, "attn_%s", qkv[i]);
    snprintf(g, sizeof g, "attn_%s.weight", qkv[i]);
    snprintf(h, sizeof h, "self_attn.%s_proj.weight", qkv[i]);
    SPILL_TRY(T(s, c, p, l, dst, g, h, 2, n, D, e));
    snprintf(dst, sizeof dst, "attn_%s_conv", qkv[i]);
    snprintf(g, sizeof g, "ssm_conv1d_%s.weight", qkv[i]);
    snprintf(h, sizeof h, "self_attn.%s_conv1d.weight", qkv[i]);
    SPILL_TRY(T_squeezed(s, c, p, l, dst, g, h, n, K, 1, e));
  }
  SPILL_TRY(T(s, c, p, l, "attn_f_a", "ssm_f_a.weight", "self_attn.f_a_proj.weight", 2, d, D, e));
  SPILL_TRY(T(s, c, p, l, "attn_f_b", "ssm_f_b.weight", "self_attn.f_b_proj.weight", 2, n, d, e));
  SPILL_TRY(T(s, c, p, l, "attn_dt_bias", "ssm_dt.bias", "self_attn.dt_bias", 1, n, 0, e));
  SPILL_TRY(T_squeezed(s, c, p, l, "attn_a_log", "ssm_a", "self_attn.A_log", (uint64_t)c->kH, 0, 0, e));
  p->trunk[p->n_trunk - 1].log_neg = c->G;
  SPILL_TRY(T(s, c, p, l, "attn_b", "ssm_beta.weight", "self_attn.b_proj.weight", 2, (uint64_t)c->kH, D, e));
  SPILL_TRY(T(s, c, p, l, "attn_g_a", "ssm_g_a.weight", "self_attn.g_a_proj.weight", 2, d, D, e));
  SPILL_TRY(T(s, c, p, l, "attn_g_b", "ssm_g_b.weight", "self_attn.g_b_proj.weight", 2, n, d, e));
  SPILL_TRY(T(s, c, p, l, "attn_o_norm", "ssm_norm.weight", "self_attn.o_norm.weight", 1, d, 0, e));
  return T(s, c, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, n, e);
}

/* MLA without RoPE: the rope dims are never rotated, so their order does not
 * matter and no rows are moved (unlike arch_deepseek.c). GGUF: kv_b split
 * into attn_k_b / attn_v_b as llama.cpp's converter writes it; the legacy
 * attn_kv_b is refused (llama.cpp de3ff81 cannot run it: its fallback path
 * needs key_length_mla unset, which load_arch_hparams requires). */
static int plan_mla(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, dn = c->dn, dr = c->dr, dv = c->dv, dc = c->dc;
  char pre[32], b[64];
  snprintf(pre, sizeof pre, "blk.%d.", l);
  if (c->G) {
    snprintf(b, sizeof b, "%sattn_kv_b.weight", pre);
    SPILL_FAIL_IF(e, spill_gguf_find(&s->gg, b), SPILL_E_UNSUPPORTED,
                  "tensor %s: the unsplit (legacy) kv_b is not supported for kimi-linear; llama.cpp's "
                  "converter writes attn_k_b / attn_v_b", b);
    snprintf(b, sizeof b, "%sattn_q_a.weight", pre);
    SPILL_FAIL_IF(e, spill_gguf_find(&s->gg, b), SPILL_E_UNSUPPORTED,
                  "tensor %s: q LoRA is not supported for kimi-linear", b);
  }
  SPILL_TRY(T(s, c, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * (dn + dr), D, e));
  SPILL_TRY(T(s, c, p, l, "attn_kv_a", "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", 2, dc + dr,
              D, e));
  SPILL_TRY(T(s, c, p, l, "attn_kv_a_norm", "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", 1, dc, 0,
              e));
  if (c->G)
    SPILL_TRY(imp_add_kv_b_split(s, p, pre, l, H, dc, dn, dv, e));
  else
    SPILL_TRY(T(s, c, p, l, "attn_kv_b", NULL, "self_attn.kv_b_proj.weight", 2, H * (dn + dv), dc, e));
  return T(s, c, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * dv, e);
}

static int plan_ffn(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, E = c->E, Fd = c->Fd, S = (uint64_t)c->n_shared * c->F;
  /* HF experts: w1 gate, w3 up, w2 down (KimiBlockSparseMLP); GGUF stacked */
  static const char *const w[SPILL_SEC_COUNT] = {"w1", "w3", "w2"};
  if (l < c->n_dense) return imp_plan_dense_ffn(s, p, l, D, Fd, e);
  SPILL_TRY(T(s, c, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "block_sparse_moe.gate.weight", 2, E, D, e));
  SPILL_TRY(T(s, c, p, l, "exp_probs_b", "exp_probs_b.bias", "block_sparse_moe.gate.e_score_correction_bias", 1,
              E, 0, e));
  if (S > 0) SPILL_TRY(imp_plan_shared_experts(s, p, l, D, S, "block_sparse_moe.shared_experts", e));
  return imp_plan_experts(s, &p->moe[l - c->n_dense], l, E, D, (uint64_t)c->F, "block_sparse_moe.experts", w, e);
}

static int plan_tensors(imp_src *s, const kl_cfg *c, imp_plan *p, spill_err *e) {
  const uint64_t D = c->D;
  /* GGUF kimi-linear is never tied (c->tied 0: output.weight required) */
  SPILL_TRY(imp_plan_init(s, p, 3 + 24 * c->L, c->L - c->n_dense + 1, (uint64_t)c->V, D, c->tied, e));
  for (int l = 0; l < c->L; l++) {
    SPILL_TRY(T(s, c, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, e));
    SPILL_TRY(c->is_kda[l] ? plan_kda(s, c, p, l, e) : plan_mla(s, c, p, l, e));
    SPILL_TRY(T(s, c, p, l, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, 0, e));
    SPILL_TRY(plan_ffn(s, c, p, l, e));
  }
  return imp_check_consumed(s, p, -1, e);
}

static void fill_arch(const kl_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "kimi_linear");
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = c->n_dense;
  a->d_ff = c->n_dense > 0 ? c->Fd : 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SWIGLU;
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
    m->q_lora_rank = 0;
    m->kv_lora_rank = c->dc;
    m->qk_nope_dim = c->dn;
    m->qk_rope_dim = c->dr;
    m->v_head_dim = c->dv;
    m->use_rope = 0;
    m->rope_theta = 10000.0; /* unused without RoPE; the manifest needs a positive value */
    /* HF KimiMLAAttention: kv_a_layernorm = KimiRMSNorm(kv_lora_rank), eps
     * default 1e-6; GGUF (llama.cpp): rms_norm_eps (0 = the arch's) */
    m->kv_norm_eps = c->kv_eps;
  }
  if (any_kda) {
    spill_kda_cfg *k = &a->kda;
    k->n_heads = c->kH;
    k->head_dim = c->kd;
    k->conv_kernel = c->kK;
    k->gate_rank = c->kd;     /* f_a_proj: Linear(hidden, head_dim) */
    k->out_gate_rank = c->kd; /* g_a_proj: Linear(hidden, head_dim) */
    k->decay_floor = 0;       /* fused_kda_gate without lower_bound */
    k->l2norm_eps = c->l2_eps;
  }
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->n_shared = c->n_shared;
  o->d_shared = c->n_shared > 0 ? c->F : 0;
  o->router = SPILL_ROUTER_SIGMOID;
  o->norm_topk = c->norm_topk;
  o->routed_scale = c->rscale;
  o->n_group = c->n_group > 1 ? c->n_group : 0;
  o->topk_group = c->n_group > 1 ? c->topk_group : 0;
  o->group_score = SPILL_GROUP_TOP2;
  /* HF masked_fill(~mask, 0.0); llama.cpp fills dropped groups with -inf */
  o->group_mask_zero = c->n_group > 1 && !c->G;
}

int imp_kimi_linear_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p,
                            spill_err *e) {
  (void)variant;
  kl_cfg *c = calloc(1, sizeof *c);
  int rc = c ? hf_config(s, dir, root, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}

int imp_kimi_linear_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  kl_cfg *c = calloc(1, sizeof *c);
  int rc = c ? gguf_config(s, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}
