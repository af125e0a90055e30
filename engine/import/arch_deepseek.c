/* engine/import/arch_deepseek.c: the DeepSeek family for `spill import`:
 * config.json model_type deepseek_v2 / deepseek_v3 / kimi_k2 (DeepSeek's
 * own modelling code) and GGUF deepseek2 (llama.cpp's semantics), to a spill
 * MLA architecture and a tensor plan (docs/MODEL.md "Imported architectures").
 *
 * MLA with or without q LoRA, YaRN RoPE (mscale on cos/sin, mscale_all_dim
 * on the softmax scale), leading dense layers, shared experts; routing:
 * V2 softmax greedy / group_limited_greedy (group = its best expert),
 * V3 / K2 sigmoid + e_score_correction_bias + noaux_tc (group = sum of its
 * two best), norm_topk_prob and routed_scaling_factor as each modelling code
 * applies them. DeepSeek rotates interleaved pairs of the rope dims; spill
 * rotates halves, so the rope rows of q and kv_a are de-interleaved at
 * import (same dot products). GGUF attn_k_b / attn_v_b are joined back
 * into attn_kv_b. As everywhere (import_plan.c), every config key is used,
 * harmless or checked, and every source tensor is consumed (MTP layers
 * excepted: HF num_nextn_predict_layers, GGUF nextn_predict_layers, which
 * block_count includes; GLM-4.7-Flash's GGUF is a deepseek2 with one).
 * GLM-4.7-Flash's own checkpoint (model_type glm4_moe_lite) is read the way
 * llama.cpp's converter reads it (a DeepSeek-V2 model class): sigmoid
 * scoring without a scoring_func key, partial_rotary_factor 1 only, and
 * its rms_norm_eps for every norm, q_a / kv_a included. Rows of
 * arch_registry.c.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

typedef struct ds_cfg {
  int V, D, L, H, ql, dc, dn, dr, dv, E, k, F, Fd, n_shared, n_dense;
  int n_group, topk_group, mask_zero;
  spill_group_score gscore;
  spill_router_kind router;
  int norm_topk, has_bias;
  double rscale, eps, theta;
  double yarn_factor, beta_fast, beta_slow, rope_mscale, softmax_scale;
  int yarn_orig, tied, bos, eos, n_mtp, split_kvb;
} ds_cfg;

static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

/* ---- config.json ---- */

static const char *jstr(const cJSON *r, const char *k, const char *dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, k);
  return cJSON_IsString(v) ? v->valuestring : dflt;
}

static int unsupported(const char *key, const char *why, spill_err *e) {
  return spill_err_set(e, SPILL_E_UNSUPPORTED,
                       "config.json: %s changes the maths and is not supported (%s)", key, why);
}

/* rope_scaling: null or YaRN as DeepSeek's modelling code reads it. */
static int hf_rope_scaling(const cJSON *root, ds_cfg *c, spill_err *e) {
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  const int dk = c->dn + c->dr;
  c->softmax_scale = 1.0 / sqrt((double)dk);
  if (!rs || cJSON_IsNull(rs)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsObject(rs), SPILL_E_FORMAT, "config.json: rope_scaling is not an object");
  static const char *const keys[] = {"type", "rope_type", "factor", "original_max_position_embeddings",
                                     "beta_fast", "beta_slow", "mscale", "mscale_all_dim", NULL};
  for (const cJSON *it = rs->child; it; it = it->next)
    if (!imp_in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "config.json: rope_scaling.%.60s is not understood (refusing)", it->string);
  const char *ty = jstr(rs, "type", jstr(rs, "rope_type", ""));
  if (strcmp(ty, "yarn")) return unsupported("rope_scaling.type", "only yarn", e);
  const char *p = "config.json rope_scaling";
  double mscale, mall, bf, bs, orig;
  SPILL_TRY(spill_json_num(rs, "factor", p, 1.0, 1e6, &c->yarn_factor, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num(rs, "original_max_position_embeddings", p, 1, 1 << 30, &orig, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(rs, "beta_fast", p, 1e-6, 1e6, 32.0, &bf, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(rs, "beta_slow", p, 1e-6, 1e6, 1.0, &bs, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(rs, "mscale", p, 0, 1e3, 1.0, &mscale, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(rs, "mscale_all_dim", p, 0, 1e3, 0.0, &mall, SPILL_E_FORMAT, e));
  c->yarn_orig = (int)orig;
  c->beta_fast = bf;
  c->beta_slow = bs;
  c->rope_mscale = yarn_mscale(c->yarn_factor, mscale) / yarn_mscale(c->yarn_factor, mall);
  if (mall != 0) {
    const double m = yarn_mscale(c->yarn_factor, mall);
    c->softmax_scale *= m * m;
  }
  return SPILL_OK;
}

/* scoring_func x topk_method -> router, groups; norm/scale per V2 or V3 code. */
static int hf_routing(const cJSON *root, const char *mt, ds_cfg *c, spill_err *e) {
  /* glm4_moe_lite has no scoring_func: its routers are sigmoid + bias (llama.cpp's deepseek2
   * loader sets sigmoid for it) */
  const char *sf = jstr(root, "scoring_func", strcmp(mt, "glm4_moe_lite") ? "softmax" : "sigmoid");
  const char *tm = jstr(root, "topk_method", "greedy");
  double rsf;
  SPILL_TRY(spill_json_num_opt(root, "routed_scaling_factor", "config.json", 0, 1e6, 1.0, &rsf,
                               SPILL_E_FORMAT, e));
  int ng, tg;
  SPILL_TRY(imp_cfg_int(root, "config.json", "n_group", 1, SPILL_MAX_EXPERTS, 1, 0, &ng, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "topk_group", 1, SPILL_MAX_EXPERTS, ng, 0, &tg, e));
  SPILL_FAIL_IF(e, c->E % ng, SPILL_E_FORMAT, "config.json: n_group %d does not divide n_routed_experts %d",
                ng, c->E);
  SPILL_FAIL_IF(e, tg > ng, SPILL_E_FORMAT, "config.json: topk_group %d > n_group %d", tg, ng);
  int norm;
  SPILL_TRY(spill_json_bool_opt(root, "norm_topk_prob", "config.json", 0, &norm, SPILL_E_FORMAT, e));
  norm = norm && c->k > 1; /* both codes: top_k > 1 and norm_topk_prob */
  c->n_group = c->topk_group = 0;
  c->gscore = SPILL_GROUP_MAX;
  if (!strcmp(sf, "softmax") && (!strcmp(tm, "greedy") || !strcmp(tm, "group_limited_greedy"))) {
    c->router = SPILL_ROUTER_SOFTMAX;
    if (!strcmp(tm, "group_limited_greedy") && ng > 1) {
      c->n_group = ng;
      c->topk_group = tg;
    }
  } else if (!strcmp(sf, "sigmoid") && !strcmp(tm, "noaux_tc")) {
    c->router = SPILL_ROUTER_SIGMOID;
    c->has_bias = 1;
    if (ng > 1) {
      c->n_group = ng;
      c->topk_group = tg;
      c->gscore = SPILL_GROUP_TOP2;
      SPILL_FAIL_IF(e, c->E / ng < 2, SPILL_E_FORMAT, "config.json: noaux_tc needs groups of >= 2 experts");
    }
  } else {
    return spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "config.json: scoring_func \"%.20s\" with topk_method \"%.30s\" is not "
                         "supported (softmax + greedy / group_limited_greedy, sigmoid + noaux_tc)",
                         sf, tm);
  }
  c->mask_zero = 1; /* modelling code: masked_fill(~mask, 0.0) */
  SPILL_FAIL_IF(e, c->n_group > 1 && c->k > c->topk_group * (c->E / c->n_group), SPILL_E_FORMAT,
                "config.json: num_experts_per_tok %d > the %d experts of topk_group groups", c->k,
                c->topk_group * (c->E / c->n_group));
  c->norm_topk = norm;
  /* V2: scaled only when not renormalised; V3 / K2: always */
  c->rscale = !strcmp(mt, "deepseek_v2") && norm ? 1.0 : rsf;
  return SPILL_OK;
}

static int hf_values(const cJSON *root, ds_cfg *c, spill_err *e) {
  const cJSON *v;
  double prf;
  SPILL_TRY(spill_json_num_opt(root, "partial_rotary_factor", "config.json", 0, 1, 1.0, &prf, SPILL_E_FORMAT, e));
  if (prf != 1.0) return unsupported("partial_rotary_factor", "RoPE on part of qk_rope_head_dim; only 1", e);
  v = cJSON_GetObjectItemCaseSensitive(root, "attention_bias");
  if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v)) return unsupported("attention_bias", "attention biases", e);
  if (strcmp(jstr(root, "hidden_act", "silu"), "silu")) return unsupported("hidden_act", "only silu", e);
  int tp, freq;
  SPILL_TRY(imp_cfg_int(root, "config.json", "pretraining_tp", 1, 1024, 1, 0, &tp, e));
  if (tp != 1) return unsupported("pretraining_tp", "only 1", e);
  SPILL_TRY(imp_cfg_int(root, "config.json", "moe_layer_freq", 1, 1024, 1, 0, &freq, e));
  if (freq != 1) return unsupported("moe_layer_freq", "dense layers between MoE layers; only 1", e);
  SPILL_TRY(imp_cfg_int(root, "config.json", "num_nextn_predict_layers", 0, 64, 0, 0, &c->n_mtp, e));
  return spill_json_bool_opt(root, "tie_word_embeddings", "config.json", 0, &c->tied, SPILL_E_FORMAT, e);
}

static int hf_dims(const cJSON *root, const char *mt, ds_cfg *c, spill_err *e) {
  SPILL_TRY(imp_cfg_int(root, "config.json", "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "q_lora_rank", 0, 1048576, 0, 0, &c->ql, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "qk_nope_head_dim", 1, 4096, 0, 1, &c->dn, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "qk_rope_head_dim", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "v_head_dim", 1, 4096, 0, 1, &c->dv, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "n_routed_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "num_experts_per_tok", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "intermediate_size", 1, 1048576, 0, 1, &c->Fd, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "n_shared_experts", 0, 64, 0, 0, &c->n_shared, e));
  SPILL_TRY(imp_cfg_int(root, "config.json", "first_k_dense_replace", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(spill_json_num(root, "rms_norm_eps", "config.json", 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  /* The modelling code builds q_a_layernorm and kv_a_layernorm with its RMSNorm's default eps 1e-6
   * whatever rms_norm_eps says; the container gives them the layer norms' eps, so only 1e-6 (the
   * released DeepSeek-V2/V3 configs' value) imports the same model. GLM-4.7-Flash (1e-5) is read
   * as llama.cpp's conversion reads it: one eps for every norm. */
  if (c->eps != 1e-6 && strcmp(mt, "glm4_moe_lite"))
    return unsupported("rms_norm_eps", "other than 1e-6: q_a_layernorm and kv_a_layernorm keep 1e-6", e);
  SPILL_TRY(spill_json_num_opt(root, "rope_theta", "config.json", 1e-6, 1e12, 10000.0, &c->theta,
                               SPILL_E_FORMAT, e));
  SPILL_FAIL_IF(e, c->dr % 2, SPILL_E_FORMAT, "config.json: qk_rope_head_dim %d is odd", c->dr);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "config.json: num_experts_per_tok %d > %d experts", c->k, c->E);
  return SPILL_OK;
}

static int hf_config(imp_src *s, const char *dir, const cJSON *root, ds_cfg *c, spill_err *e) {
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
      "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "num_experts_per_tok",
      "moe_intermediate_size", "intermediate_size", "n_shared_experts", "first_k_dense_replace",
      "moe_layer_freq", "n_group", "topk_group", "topk_method", "scoring_func", "norm_topk_prob",
      "routed_scaling_factor", "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings",
      "attention_bias", "hidden_act", "pretraining_tp", "quantization_config",
      "num_nextn_predict_layers", "aux_loss_alpha", "seq_aux", "ep_size", "partial_rotary_factor", NULL};
  SPILL_TRY(imp_cfg_only_keys(root, s->arch_name, keys, e));
  SPILL_TRY(hf_dims(root, s->arch_name, c, e));
  SPILL_TRY(hf_values(root, c, e));
  SPILL_TRY(hf_routing(root, s->arch_name, c, e));
  SPILL_TRY(hf_rope_scaling(root, c, e));
  SPILL_TRY(imp_cfg_quant(root, s, e));
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

/* ---- GGUF deepseek2 (llama.cpp's reading of the keys) ---- */

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out,
                spill_err *e) {
  return imp_gguf_int(g, "deepseek2", key, lo, hi, out, dflt, req, e);
}

static int gnum(const spill_gguf *g, const char *key, double dflt, double *out, spill_err *e) {
  char k[160];
  snprintf(k, sizeof k, "deepseek2.%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) return SPILL_OK;
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !isfinite(*out), SPILL_E_FORMAT, "GGUF key %s is not finite", k);
  return SPILL_OK;
}

static int gguf_dims(const spill_gguf *g, ds_cfg *c, spill_err *e) {
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  /* block_count counts the next-token-prediction layers after the trunk
   * (GLM-4.7-Flash's converter writes them; llama.cpp runs them only as a draft head) */
  SPILL_TRY(gkey(g, "nextn_predict_layers", 0, c->L - 1, 0, 0, &c->n_mtp, e));
  c->L -= c->n_mtp;
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(gkey(g, "attention.q_lora_rank", 0, 1048576, 0, 0, &c->ql, e));
  SPILL_TRY(gkey(g, "attention.kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(gkey(g, "rope.dimension_count", 0, 4096, 0, 1, &c->dr, e));
  int kl, vl, klm, vlm;
  SPILL_TRY(gkey(g, "attention.key_length", 1, 1048576, 0, 1, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 1, 1048576, 0, 1, &vl, e));
  SPILL_TRY(gkey(g, "attention.key_length_mla", 0, 1048576, 0, 0, &klm, e));
  SPILL_TRY(gkey(g, "attention.value_length_mla", 0, 1048576, 0, 0, &vlm, e));
  c->split_kvb = klm > 0 && vlm > 0; /* llama.cpp's is_mla(): attn_k_b / attn_v_b */
  c->dn = (c->split_kvb ? klm : kl) - c->dr;
  c->dv = c->split_kvb ? vlm : vl;
  SPILL_FAIL_IF(e, c->dn < 1 || c->dr % 2, SPILL_E_FORMAT,
                "GGUF deepseek2: key length %d, rope dims %d inconsistent", c->split_kvb ? klm : kl, c->dr);
  SPILL_FAIL_IF(e, c->split_kvb && (kl != c->dc + c->dr || vl != c->dc), SPILL_E_FORMAT,
                "GGUF deepseek2: key_length %d / value_length %d are not kv_lora_rank + rope / kv_lora_rank",
                kl, vl);
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "leading_dense_block_count", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(gkey(g, "feed_forward_length", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(gkey(g, "expert_shared_count", 0, 64, 0, 1, &c->n_shared, e));
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "GGUF deepseek2: top-k %d > %d experts", c->k, c->E);
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 0, &c->eps, e));
  SPILL_TRY(gnum(g, "rope.freq_base", 10000.0, &c->theta, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1) || !(c->theta > 0 && c->theta <= 1e12), SPILL_E_FORMAT,
                "GGUF deepseek2: epsilon %g or freq_base %g out of range", c->eps, c->theta);
  return SPILL_OK;
}

/* llama.cpp: gating 1 softmax / 2 sigmoid (absent: softmax), selection bias
 * when exp_probs_b exists, groups by the sum of the two best (both gatings),
 * dropped groups at -inf, renormalise if expert_weights_norm, then scale. */
static int gguf_routing(const spill_gguf *g, ds_cfg *c, spill_err *e) {
  int gf, norm = 0;
  SPILL_TRY(gkey(g, "expert_gating_func", 0, 2, 1, 0, &gf, e));
  c->router = gf == 2 ? SPILL_ROUTER_SIGMOID : SPILL_ROUTER_SOFTMAX;
  c->has_bias = gf == 2; /* spill's sigmoid router selects with exp_probs_b (required) */
  SPILL_TRY(gnum(g, "expert_weights_scale", 0.0, &c->rscale, e));
  SPILL_FAIL_IF(e, c->rscale < 0 || c->rscale > 1e6, SPILL_E_FORMAT,
                "GGUF deepseek2.expert_weights_scale %g out of range", c->rscale);
  if (c->rscale == 0) c->rscale = 1.0;
  if (spill_gguf_find_kv(g, "deepseek2.expert_weights_norm"))
    SPILL_TRY(spill_gguf_get_bool(g, "deepseek2.expert_weights_norm", &norm, e));
  c->norm_topk = norm;
  int ng, tg;
  SPILL_TRY(gkey(g, "expert_group_count", 0, SPILL_MAX_EXPERTS, 0, 0, &ng, e));
  SPILL_TRY(gkey(g, "expert_group_used_count", 0, SPILL_MAX_EXPERTS, 0, 0, &tg, e));
  c->n_group = c->topk_group = 0;
  c->gscore = SPILL_GROUP_TOP2;
  c->mask_zero = 0;
  if (ng > 1) {
    SPILL_FAIL_IF(e, c->E % ng || c->E / ng < 2, SPILL_E_FORMAT,
                  "GGUF deepseek2: expert_group_count %d does not split %d experts into groups of >= 2",
                  ng, c->E);
    SPILL_FAIL_IF(e, tg < 1 || tg > ng, SPILL_E_FORMAT,
                  "GGUF deepseek2: expert_group_used_count %d not in [1, %d]", tg, ng);
    SPILL_FAIL_IF(e, c->k > tg * (c->E / ng), SPILL_E_FORMAT,
                  "GGUF deepseek2: top-k %d > the %d experts of the used groups", c->k, tg * (c->E / ng));
    c->n_group = ng;
    c->topk_group = tg;
  }
  return SPILL_OK;
}

static int gguf_rope(const spill_gguf *g, ds_cfg *c, spill_err *e) {
  const int dk = c->dn + c->dr;
  c->softmax_scale = 1.0 / sqrt((double)dk);
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, "deepseek2.rope.scaling.type");
  if (!kv) return SPILL_OK;
  SPILL_FAIL_IF(e, kv->type != SPILL_GGUF_STRING, SPILL_E_FORMAT, "GGUF deepseek2.rope.scaling.type is not a string");
  if (!strcmp(kv->str[0], "none")) return SPILL_OK;
  SPILL_FAIL_IF(e, strcmp(kv->str[0], "yarn"), SPILL_E_UNSUPPORTED,
                "GGUF deepseek2.rope.scaling.type \"%.20s\" is not supported (none, yarn)", kv->str[0]);
  double f, lm, af, orig;
  SPILL_TRY(gnum(g, "rope.scaling.factor", 0.0, &f, e));
  SPILL_FAIL_IF(e, !(f >= 1 && f <= 1e6), SPILL_E_FORMAT, "GGUF deepseek2.rope.scaling.factor %g out of range", f);
  SPILL_TRY(gnum(g, "rope.scaling.original_context_length", 0.0, &orig, e));
  SPILL_FAIL_IF(e, !(orig >= 1 && orig <= (1 << 30)), SPILL_E_FORMAT,
                "GGUF deepseek2.rope.scaling.original_context_length missing or out of range");
  SPILL_TRY(gnum(g, "rope.scaling.yarn_log_multiplier", 0.0, &lm, e));
  SPILL_TRY(gnum(g, "rope.scaling.attn_factor", 1.0, &af, e));
  SPILL_FAIL_IF(e, af != 1.0, SPILL_E_UNSUPPORTED, "GGUF deepseek2.rope.scaling.attn_factor %g: only 1", af);
  SPILL_TRY(gnum(g, "rope.scaling.yarn_beta_fast", 32.0, &c->beta_fast, e));
  SPILL_TRY(gnum(g, "rope.scaling.yarn_beta_slow", 1.0, &c->beta_slow, e));
  SPILL_FAIL_IF(e, !(c->beta_fast > 0) || !(c->beta_slow > 0), SPILL_E_FORMAT, "GGUF deepseek2: YaRN betas must be > 0");
  c->yarn_factor = f;
  c->yarn_orig = (int)orig;
  /* llama.cpp: cos/sin unscaled (mscale == mscale_all_dim), kq scale
   * (1 + 0.1 (log_mul / 0.1) ln f)^2 / sqrt(dk), log_mul = 0.1 mscale_all_dim */
  c->rope_mscale = 1.0;
  const double m = 1.0 + lm * log(f);
  c->softmax_scale *= m * m;
  return SPILL_OK;
}

static int gguf_config(imp_src *s, ds_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  SPILL_TRY(gguf_dims(g, c, e));
  SPILL_TRY(gguf_routing(g, c, e));
  SPILL_TRY(gguf_rope(g, c, e));
  static const char *const bad[] = {"attention.temperature_scale", "attention.sliding_window",
                                    "attention.clamp_kqv", NULL};
  for (int i = 0; bad[i]; i++) {
    char k[160];
    snprintf(k, sizeof k, "deepseek2.%s", bad[i]);
    uint64_t v = 1;
    if (spill_gguf_find_kv(g, k) && !(spill_gguf_get_u64(g, k, &v, e) == SPILL_OK && v == 0))
      return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF key %s changes the maths and is not supported", k);
  }
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                "deepseek2 tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  c->tied = !spill_gguf_find(g, "output.weight");
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- tensors ---- */

/* Adds container tensor blk.l.dst from the GGUF name g or the HF name h. */
static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *h, int nd, uint64_t r,
             uint64_t co, spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e);
}

static void rope_rows(imp_plan *p, uint32_t block, uint32_t off, uint32_t dim) {
  imp_trunk *t = &p->trunk[p->n_trunk - 1];
  if (dim == 0) return;
  t->rope_block = block;
  t->rope_off = off;
  t->rope_dim = dim;
}

static int plan_attn(imp_src *s, const ds_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, dn = c->dn, dr = c->dr, dv = c->dv, dc = c->dc, ql = c->ql;
  SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, e));
  if (ql > 0) {
    SPILL_TRY(T(s, p, l, "attn_q_a", "attn_q_a.weight", "self_attn.q_a_proj.weight", 2, ql, D, e));
    SPILL_TRY(T(s, p, l, "attn_q_a_norm", "attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight", 1, ql, 0, e));
    SPILL_TRY(T(s, p, l, "attn_q_b", "attn_q_b.weight", "self_attn.q_b_proj.weight", 2, H * (dn + dr), ql, e));
  } else {
    SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * (dn + dr), D, e));
  }
  rope_rows(p, (uint32_t)(dn + dr), (uint32_t)dn, (uint32_t)dr);
  SPILL_TRY(T(s, p, l, "attn_kv_a", "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight", 2, dc + dr, D, e));
  rope_rows(p, (uint32_t)(dc + dr), (uint32_t)dc, (uint32_t)dr);
  SPILL_TRY(T(s, p, l, "attn_kv_a_norm", "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight", 1, dc, 0, e));
  if (s->is_gguf && c->split_kvb) {
    char pre[32];
    snprintf(pre, sizeof pre, "blk.%d.", l);
    SPILL_TRY(imp_add_kv_b_split(s, p, pre, l, H, dc, dn, dv, e));
  } else {
    SPILL_TRY(T(s, p, l, "attn_kv_b", "attn_kv_b.weight", "self_attn.kv_b_proj.weight", 2, H * (dn + dv), dc, e));
  }
  return T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * dv, e);
}

static int plan_ffn(imp_src *s, const ds_cfg *c, imp_plan *p, int l, spill_err *e) {
  static const char *const hf[SPILL_SEC_COUNT] = {"gate_proj", "up_proj", "down_proj"};
  const uint64_t D = c->D, E = c->E, Fd = c->Fd, S = (uint64_t)c->n_shared * c->F;
  SPILL_TRY(T(s, p, l, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, 0, e));
  if (l < c->n_dense) return imp_plan_dense_ffn(s, p, l, D, Fd, e);
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "mlp.gate.weight", 2, E, D, e));
  if (c->has_bias)
    SPILL_TRY(T(s, p, l, "exp_probs_b", "exp_probs_b.bias", "mlp.gate.e_score_correction_bias", 1, E, 0, e));
  if (S > 0) SPILL_TRY(imp_plan_shared_experts(s, p, l, D, S, "mlp.shared_experts", e));
  return imp_plan_experts(s, &p->moe[l - c->n_dense], l, E, D, (uint64_t)c->F, "mlp.experts", hf, e);
}

static int plan_tensors(imp_src *s, const ds_cfg *c, imp_plan *p, spill_err *e) {
  SPILL_TRY(imp_plan_init(s, p, 3 + 20 * c->L, c->L - c->n_dense + 1, (uint64_t)c->V, (uint64_t)c->D, c->tied, e));
  for (int l = 0; l < c->L; l++) {
    SPILL_TRY(plan_attn(s, c, p, l, e));
    SPILL_TRY(plan_ffn(s, c, p, l, e));
  }
  /* MTP (next-token prediction) layers after the last one are not part of the forward pass */
  if (c->n_mtp > 0)
    snprintf(p->skipped, sizeof p->skipped, "layers %d..%d (next-token prediction, nextn/MTP)", c->L,
             c->L + c->n_mtp - 1);
  return imp_check_consumed(s, p, c->n_mtp > 0 ? c->L : -1, e);
}

static void fill_arch(const ds_cfg *c, const char *family, spill_arch *a) {
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
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = SPILL_ATTN_MLA;
  spill_mla_cfg *m = &a->mla;
  m->n_heads = c->H;
  m->q_lora_rank = c->ql;
  m->kv_lora_rank = c->dc;
  m->qk_nope_dim = c->dn;
  m->qk_rope_dim = c->dr;
  m->v_head_dim = c->dv;
  m->use_rope = 1;
  m->rope_theta = c->theta;
  m->yarn_factor = c->yarn_factor > 1.0 ? c->yarn_factor : 0;
  m->yarn_orig_ctx = m->yarn_factor ? c->yarn_orig : 0;
  m->yarn_beta_fast = m->yarn_factor ? c->beta_fast : 0;
  m->yarn_beta_slow = m->yarn_factor ? c->beta_slow : 0;
  m->rope_mscale = c->rope_mscale != 0 && c->rope_mscale != 1.0 ? c->rope_mscale : 0;
  m->softmax_scale = c->softmax_scale;
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->n_shared = c->n_shared;
  o->d_shared = c->n_shared > 0 ? c->F : 0;
  o->router = c->router;
  o->norm_topk = c->norm_topk;
  o->routed_scale = c->rscale;
  o->n_group = c->n_group > 1 ? c->n_group : 0;
  o->topk_group = c->n_group > 1 ? c->topk_group : 0;
  o->group_score = c->gscore;
  o->group_mask_zero = c->n_group > 1 ? c->mask_zero : 0;
}

int imp_deepseek_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p, spill_err *e) {
  (void)variant; /* the model_type (s->arch_name) tells V2 from V3 / K2 */
  ds_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(hf_config(s, dir, root, &c, e));
  fill_arch(&c, s->arch_name, &p->arch);
  return plan_tensors(s, &c, p, e);
}

int imp_deepseek_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  ds_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(gguf_config(s, &c, e));
  fill_arch(&c, s->arch_name, &p->arch);
  return plan_tensors(s, &c, p, e);
}
