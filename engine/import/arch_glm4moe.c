/* engine/import/arch_glm4moe.c: the GLM-4.5 / 4.6 / 4.7 family for `spill
 * import`: config.json model_type glm4_moe (transformers' Glm4Moe modelling
 * code) and GGUF glm4moe (llama.cpp's src/models/glm4-moe.cpp), to a spill
 * GQA architecture and a tensor plan (docs/MODEL.md "GLM-4.5").
 *
 * GQA with q/k/v biases (attention_bias), optional per-head q/k RMSNorm
 * (use_qk_norm; GGUF: attn_q_norm present), partial rotate-half RoPE on the
 * first head_dim * partial_rotary_factor dims (GGUF rope.dimension_count),
 * leading dense layers, a sigmoid router whose selection adds
 * e_score_correction_bias (exp_probs_b) while the weights come from the
 * unbiased scores, normalised (norm_topk_prob) then scaled
 * (routed_scaling_factor), optional group-limited selection, shared experts
 * added to the routed sum. The next-token-prediction (MTP, "nextn") layers
 * after the trunk are not part of the forward pass: counted by GGUF
 * block_count, skipped, and named in the import summary. As everywhere
 * (import_plan.c) every config key is used, harmless or checked, and every
 * other source tensor is consumed. A row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

typedef struct glm_cfg {
  int V, D, L, H, Hk, d, rd, E, k, F, Fd, n_shared, n_dense, n_mtp;
  int n_group, topk_group, mask_zero;
  int norm_topk, qkv_bias, qk_norm, tied, bos, eos;
  double rscale, eps, theta;
} glm_cfg;

/* ---- config.json (transformers' Glm4MoeConfig) ---- */

static int unsupported(const char *key, const cJSON *v, const char *why, spill_err *e) {
  char *txt = v ? cJSON_PrintUnformatted(v) : NULL;
  int rc = spill_err_set(e, SPILL_E_UNSUPPORTED, "config.json: %s = %.80s changes the maths and is not supported (%s)",
                         key, txt ? txt : "?", why);
  free(txt);
  return rc;
}

/* rope_theta and partial_rotary_factor, at the top level (transformers < 5)
 * or in rope_parameters (a plain "default" RoPE only); rope_scaling null. */
static int hf_rope(const cJSON *root, glm_cfg *c, spill_err *e) {
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) return unsupported("rope_scaling", rs, "RoPE scaling", e);
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
  const cJSON *src = root;
  if (rp && !cJSON_IsNull(rp)) {
    SPILL_FAIL_IF(e, !cJSON_IsObject(rp), SPILL_E_FORMAT, "config.json: rope_parameters is not an object");
    static const char *const keys[] = {"rope_type", "rope_theta", "partial_rotary_factor", NULL};
    for (const cJSON *it = rp->child; it; it = it->next)
      if (!imp_in_list(keys, it->string))
        return spill_err_set(e, SPILL_E_UNSUPPORTED,
                             "config.json: rope_parameters.%.60s is not understood for glm4_moe (it may change "
                             "the maths)", it->string);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
    if (t && !(cJSON_IsString(t) && !strcmp(t->valuestring, "default")))
      return unsupported("rope_parameters.rope_type", t, "only \"default\"", e);
    SPILL_FAIL_IF(e, cJSON_GetObjectItemCaseSensitive(root, "rope_theta") ||
                         cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor"),
                  SPILL_E_FORMAT, "config.json: rope_theta / partial_rotary_factor both at the top level and "
                                  "in rope_parameters");
    src = rp;
  }
  double prf;
  SPILL_TRY(spill_json_num_opt(src, "rope_theta", "config.json", 1e-6, 1e12, 10000.0, &c->theta, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(src, "partial_rotary_factor", "config.json", 0, 1, 0.5, &prf, SPILL_E_FORMAT, e));
  /* transformers: rotary dim = int(head_dim * partial_rotary_factor) */
  c->rd = (int)((double)c->d * prf);
  SPILL_FAIL_IF(e, c->rd < 2 || c->rd % 2, SPILL_E_FORMAT,
                "config.json: partial_rotary_factor %g of head_dim %d gives %d rotary dims (need an even number >= 2)",
                prf, c->d, c->rd);
  return SPILL_OK;
}

static int hf_config(imp_src *s, const char *dir, const cJSON *root, glm_cfg *c, spill_err *e) {
  /* the keys of zai-org/GLM-4.5-Air's and GLM-4.5's config.json (transformers
   * 4.54) and of transformers' Glm4MoeConfig; the rest is harmless (import_plan.c) */
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
      "head_dim", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "intermediate_size",
      "n_shared_experts", "first_k_dense_replace", "n_group", "topk_group", "norm_topk_prob",
      "routed_scaling_factor", "rms_norm_eps", "rope_theta", "partial_rotary_factor", "rope_scaling",
      "rope_parameters", "tie_word_embeddings", "attention_bias", "use_qk_norm", "hidden_act",
      "num_nextn_predict_layers", "quantization_config", NULL};
  const char *p = "config.json";
  SPILL_TRY(imp_cfg_only_keys(root, s->arch_name, keys, e));
  SPILL_TRY(imp_cfg_int(root, p, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(root, p, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_key_value_heads", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(imp_cfg_int(root, p, "head_dim", 2, 4096, c->D / c->H, 0, &c->d, e));
  SPILL_TRY(imp_cfg_int(root, p, "n_routed_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_experts_per_tok", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(imp_cfg_int(root, p, "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(root, p, "n_shared_experts", 0, 64, 1, 0, &c->n_shared, e));
  SPILL_TRY(imp_cfg_int(root, p, "first_k_dense_replace", 0, c->L, 1, 0, &c->n_dense, e));
  SPILL_TRY(imp_cfg_int(root, p, "intermediate_size", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_nextn_predict_layers", 0, 64, 0, 0, &c->n_mtp, e));
  SPILL_TRY(imp_cfg_int(root, p, "n_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->n_group, e));
  SPILL_TRY(imp_cfg_int(root, p, "topk_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->topk_group, e));
  SPILL_TRY(spill_json_num(root, "rms_norm_eps", p, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(root, "routed_scaling_factor", p, 0, 1e6, 1.0, &c->rscale, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "norm_topk_prob", p, 1, &c->norm_topk, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "tie_word_embeddings", p, 0, &c->tied, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "attention_bias", p, 0, &c->qkv_bias, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "use_qk_norm", p, 0, &c->qk_norm, SPILL_E_FORMAT, e));
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
  if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
    return unsupported("hidden_act", act, "only silu", e);
  SPILL_TRY(hf_rope(root, c, e));
  c->mask_zero = 1; /* the modelling code: masked_fill(~score_mask, 0.0) */
  SPILL_TRY(imp_cfg_quant(root, s, e));
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

/* ---- GGUF glm4moe (llama.cpp's reading of the keys) ---- */

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out, spill_err *e) {
  return imp_gguf_int(g, "glm4moe", key, lo, hi, out, dflt, req, e);
}

static int gnum(const spill_gguf *g, const char *key, double dflt, double *out, spill_err *e) {
  char k[160];
  snprintf(k, sizeof k, "glm4moe.%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) return SPILL_OK;
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !isfinite(*out), SPILL_E_FORMAT, "GGUF key %s is not finite", k);
  return SPILL_OK;
}

/* Keys whose maths llama.cpp applies and spill does not: refused by name. */
static int gguf_refused(const spill_gguf *g, spill_err *e) {
  static const char *const bad[] = {"rope.dimension_sections", "rope.scaling.type", "attention.sliding_window",
                                    "attention.clamp_kqv", "attention.temperature_scale", NULL};
  for (int i = 0; bad[i]; i++) {
    char k[160];
    snprintf(k, sizeof k, "glm4moe.%s", bad[i]);
    const spill_gguf_kv *kv = spill_gguf_find_kv(g, k);
    if (!kv) continue;
    if (!strcmp(bad[i], "rope.scaling.type") && kv->type == SPILL_GGUF_STRING && !strcmp(kv->str[0], "none"))
      continue;
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF key %s changes the maths and is not supported", k);
  }
  return SPILL_OK;
}

static int gguf_config(imp_src *s, glm_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int n_all, kl, vl, gf;
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &n_all, e));
  SPILL_TRY(gkey(g, "nextn_predict_layers", 0, n_all - 1, 0, 0, &c->n_mtp, e));
  c->L = n_all - c->n_mtp; /* block_count counts the MTP layers after the trunk */
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(gkey(g, "attention.head_count_kv", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(gkey(g, "attention.key_length", 2, 4096, c->D / c->H, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 2, 4096, kl, 0, &vl, e));
  SPILL_FAIL_IF(e, vl != kl, SPILL_E_UNSUPPORTED, "GGUF glm4moe: value_length %d != key_length %d", vl, kl);
  c->d = kl;
  SPILL_TRY(gkey(g, "rope.dimension_count", 2, c->d, c->d, 0, &c->rd, e));
  SPILL_FAIL_IF(e, c->rd % 2, SPILL_E_FORMAT, "GGUF glm4moe.rope.dimension_count %d is odd", c->rd);
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "leading_dense_block_count", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(gkey(g, "feed_forward_length", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(gkey(g, "expert_shared_count", 0, 64, 0, 1, &c->n_shared, e));
  /* llama.cpp: absent (0) means sigmoid for glm4moe; 1 softmax would select with exp_probs_b too */
  SPILL_TRY(gkey(g, "expert_gating_func", 0, 16, 2, 0, &gf, e));
  SPILL_FAIL_IF(e, gf != 0 && gf != 2, SPILL_E_UNSUPPORTED,
                "GGUF glm4moe.expert_gating_func %d is not supported (2, sigmoid)", gf);
  SPILL_TRY(gnum(g, "expert_weights_scale", 0.0, &c->rscale, e));
  SPILL_FAIL_IF(e, c->rscale < 0 || c->rscale > 1e6, SPILL_E_FORMAT,
                "GGUF glm4moe.expert_weights_scale %g out of range", c->rscale);
  if (c->rscale == 0) c->rscale = 1.0; /* llama.cpp scales only when != 0 */
  c->norm_topk = 0;
  if (spill_gguf_find_kv(g, "glm4moe.expert_weights_norm"))
    SPILL_TRY(spill_gguf_get_bool(g, "glm4moe.expert_weights_norm", &c->norm_topk, e));
  /* llama.cpp divides by max(sum, 2^-14), the modelling code by sum + 1e-20:
   * both are the sum for any sum of k sigmoids above 2^-14 (as deepseek2) */
  SPILL_TRY(gkey(g, "expert_group_count", 0, SPILL_MAX_EXPERTS, 0, 0, &c->n_group, e));
  SPILL_TRY(gkey(g, "expert_group_used_count", 0, SPILL_MAX_EXPERTS, 0, 0, &c->topk_group, e));
  c->mask_zero = 0; /* llama.cpp: dropped groups at -inf */
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 0, &c->eps, e));
  SPILL_TRY(gnum(g, "rope.freq_base", 10000.0, &c->theta, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1) || !(c->theta > 0 && c->theta <= 1e12), SPILL_E_FORMAT,
                "GGUF glm4moe: epsilon %g or freq_base %g out of range", c->eps, c->theta);
  SPILL_TRY(gguf_refused(g, e));
  SPILL_FAIL_IF(e, spill_gguf_find(g, "blk.0.attn_qkv.weight"), SPILL_E_UNSUPPORTED,
                "GGUF glm4moe: a fused blk.N.attn_qkv is not supported (separate attn_q/k/v)");
  /* optional parts, present in every layer or none (llama.cpp takes them per layer) */
  c->qkv_bias = spill_gguf_find(g, "blk.0.attn_q.bias") != NULL;
  c->qk_norm = spill_gguf_find(g, "blk.0.attn_q_norm.weight") != NULL;
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                "glm4moe tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  c->tied = !spill_gguf_find(g, "output.weight");
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- checks and tensors ---- */

static int check(const glm_cfg *c, spill_err *e) {
  SPILL_FAIL_IF(e, c->H % c->Hk, SPILL_E_FORMAT, "glm4moe: %d heads not a multiple of %d kv heads", c->H, c->Hk);
  SPILL_FAIL_IF(e, c->d % 2, SPILL_E_FORMAT, "glm4moe: odd head dim %d", c->d);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "glm4moe: top-k %d > %d experts", c->k, c->E);
  SPILL_FAIL_IF(e, c->n_dense >= c->L, SPILL_E_UNSUPPORTED, "glm4moe: every layer dense (%d of %d): no experts",
                c->n_dense, c->L);
  if (c->n_group > 1) {
    SPILL_FAIL_IF(e, c->E % c->n_group || c->E / c->n_group < 2, SPILL_E_FORMAT,
                  "glm4moe: %d expert groups do not split %d experts into groups of >= 2", c->n_group, c->E);
    SPILL_FAIL_IF(e, c->topk_group < 1 || c->topk_group > c->n_group, SPILL_E_FORMAT,
                  "glm4moe: %d groups used not in [1, %d]", c->topk_group, c->n_group);
    SPILL_FAIL_IF(e, c->k > c->topk_group * (c->E / c->n_group), SPILL_E_FORMAT,
                  "glm4moe: top-k %d > the %d experts of the used groups", c->k, c->topk_group * (c->E / c->n_group));
  }
  return SPILL_OK;
}

static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *h, int nd, uint64_t r,
             uint64_t co, spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e);
}

static int plan_layer(imp_src *s, const glm_cfg *c, imp_plan *p, int l, spill_err *e) {
  static const char *const hf[SPILL_SEC_COUNT] = {"gate_proj", "up_proj", "down_proj"};
  const uint64_t D = c->D, H = c->H, Hk = c->Hk, d = c->d, E = c->E, S = (uint64_t)c->n_shared * c->F;
  SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, e));
  SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * d, D, e));
  SPILL_TRY(T(s, p, l, "attn_k", "attn_k.weight", "self_attn.k_proj.weight", 2, Hk * d, D, e));
  SPILL_TRY(T(s, p, l, "attn_v", "attn_v.weight", "self_attn.v_proj.weight", 2, Hk * d, D, e));
  if (c->qkv_bias) {
    SPILL_TRY(T(s, p, l, "attn_q_bias", "attn_q.bias", "self_attn.q_proj.bias", 1, H * d, 0, e));
    SPILL_TRY(T(s, p, l, "attn_k_bias", "attn_k.bias", "self_attn.k_proj.bias", 1, Hk * d, 0, e));
    SPILL_TRY(T(s, p, l, "attn_v_bias", "attn_v.bias", "self_attn.v_proj.bias", 1, Hk * d, 0, e));
  }
  if (c->qk_norm) {
    SPILL_TRY(T(s, p, l, "attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, d, 0, e));
    SPILL_TRY(T(s, p, l, "attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, d, 0, e));
  }
  SPILL_TRY(T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * d, e));
  SPILL_TRY(T(s, p, l, "ffn_norm", "post_attention_norm.weight", "post_attention_layernorm.weight", 1, D, 0, e));
  if (l < c->n_dense) return imp_plan_dense_ffn(s, p, l, D, (uint64_t)c->Fd, e);
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "mlp.gate.weight", 2, E, D, e));
  SPILL_TRY(T(s, p, l, "exp_probs_b", "exp_probs_b.bias", "mlp.gate.e_score_correction_bias", 1, E, 0, e));
  if (S > 0) SPILL_TRY(imp_plan_shared_experts(s, p, l, D, S, "mlp.shared_experts", e));
  return imp_plan_experts(s, &p->moe[l - c->n_dense], l, E, D, (uint64_t)c->F, "mlp.experts", hf, e);
}

static void fill_arch(const glm_cfg *c, const char *family, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "%s", family);
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = c->n_dense;
  a->d_ff = c->n_dense > 0 ? c->Fd : 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  spill_gqa_cfg *g = &a->gqa;
  g->n_heads = c->H;
  g->n_kv_heads = c->Hk;
  g->head_dim = c->d;
  g->rope_theta = c->theta;
  g->qk_norm = c->qk_norm ? SPILL_QK_NORM_HEAD : SPILL_QK_NORM_NONE;
  g->rope_dim = c->rd < c->d ? c->rd : 0;
  g->qkv_bias = c->qkv_bias;
  g->o_bias = 0;
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
  o->group_mask_zero = c->n_group > 1 ? c->mask_zero : 0;
}

static int plan(imp_src *s, glm_cfg *c, imp_plan *p, spill_err *e) {
  SPILL_TRY(check(c, e));
  fill_arch(c, s->arch_name, &p->arch);
  SPILL_TRY(imp_plan_init(s, p, 3 + 20 * c->L, c->L - c->n_dense, (uint64_t)c->V, (uint64_t)c->D, c->tied, e));
  for (int l = 0; l < c->L; l++) SPILL_TRY(plan_layer(s, c, p, l, e));
  if (c->n_mtp > 0)
    snprintf(p->skipped, sizeof p->skipped, "layers %d..%d (next-token prediction, nextn/MTP)", c->L,
             c->L + c->n_mtp - 1);
  /* MTP layers after the trunk are not part of the forward pass */
  return imp_check_consumed(s, p, c->n_mtp > 0 ? c->L : -1, e);
}

int imp_glm4moe_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  glm_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(hf_config(s, dir, root, &c, e));
  return plan(s, &c, p, e);
}

int imp_glm4moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  glm_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(gguf_config(s, &c, e));
  return plan(s, &c, p, e);
}
