/* engine/import/arch_kimi_linear.c: Kimi-Linear for `spill import`
 * (config.json model_type kimi_linear, Moonshot's modeling_kimi.py and the
 * KDA kernels of flash-linear-attention; docs/MODEL.md "Kimi-Linear").
 *
 * Layers listed (1-based) in linear_attn_config.kda_layers are KDA, the
 * others MLA without RoPE (mla_use_nope) and without q LoRA; leading dense
 * layers, then DeepSeek-V3-style MoE: sigmoid scores + e_score_correction_bias
 * for the selection, groups scored by their two best with dropped groups
 * at 0, renormalised (moe_renormalize) and always times
 * routed_scaling_factor, shared experts. The KDA decay and output gates are
 * low-rank (rank head_dim); conv weights are written as f32 (the engine's
 * layout), A_log (1, 1, H, 1) as a vector. The MLA latent RMSNorm uses the
 * modelling code's default eps 1e-6, not rms_norm_eps (mla.kv_norm_eps).
 * Every config key is used, harmless or checked; every tensor is consumed.
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
  uint8_t is_kda[SPILL_MAX_LAYERS];
} kl_cfg;

static int kint(const cJSON *r, const char *path, const char *k, int64_t lo, int64_t hi, int dflt,
                int req, int *out, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, k);
  if (!v || cJSON_IsNull(v)) {
    SPILL_FAIL_IF(e, req, SPILL_E_FORMAT, "%s: %s is missing", path, k);
    *out = dflt;
    return SPILL_OK;
  }
  int64_t x;
  SPILL_TRY(spill_json_int(r, k, path, lo, hi, &x, SPILL_E_FORMAT, e));
  *out = (int)x;
  return SPILL_OK;
}

static int refuse(const char *key, const char *why, spill_err *e) {
  return spill_err_set(e, SPILL_E_UNSUPPORTED,
                       KL ": %s changes the maths and is not supported for kimi_linear (%s)", key, why);
}

/* A 1-based layer list of linear_attn_config; marks[l] |= bit. */
static int layer_list(const cJSON *la, const char *key, int L, uint8_t *marks, uint8_t bit,
                      spill_err *e) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(la, key);
  if (!a || cJSON_IsNull(a)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsArray(a), SPILL_E_FORMAT, KL ": linear_attn_config.%s is not an array", key);
  for (const cJSON *x = a->child; x; x = x->next) {
    const double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
    SPILL_FAIL_IF(e, v != (double)(int)v || v < 1 || v > L, SPILL_E_FORMAT,
                  KL ": linear_attn_config.%s holds %.40s, not a 1-based layer number in [1, %d]", key,
                  cJSON_IsNumber(x) ? "a value out of range" : "a non-number", L);
    SPILL_FAIL_IF(e, marks[(int)v - 1] & bit, SPILL_E_FORMAT, KL ": linear_attn_config.%s lists layer %d twice",
                  key, (int)v);
    marks[(int)v - 1] |= bit;
  }
  return SPILL_OK;
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
  SPILL_TRY(layer_list(la, "kda_layers", c->L, m, 1, e));
  const cJSON *fa = cJSON_GetObjectItemCaseSensitive(la, "full_attn_layers");
  if (fa && !cJSON_IsNull(fa)) {
    SPILL_TRY(layer_list(la, "full_attn_layers", c->L, m, 2, e));
    for (int l = 0; l < c->L; l++)
      SPILL_FAIL_IF(e, m[l] != 1 && m[l] != 2, SPILL_E_FORMAT,
                    KL ": layer %d is in %s", l + 1,
                    m[l] ? "both kda_layers and full_attn_layers" : "neither kda_layers nor full_attn_layers");
  }
  int any = 0;
  for (int l = 0; l < c->L; l++) any |= c->is_kda[l] = m[l] & 1;
  if (!any) return SPILL_OK;
  SPILL_TRY(kint(la, p, "num_heads", 1, 4096, 0, 1, &c->kH, e));
  SPILL_TRY(kint(la, p, "head_dim", 1, 4096, 0, 1, &c->kd, e));
  return kint(la, p, "short_conv_kernel_size", 1, 64, 0, 1, &c->kK, e);
}

/* The routing of KimiMoEGate: sigmoid + bias selection, top-two group scores. */
static int hf_routing(const cJSON *root, kl_cfg *c, spill_err *e) {
  const char *act;
  SPILL_TRY(spill_json_str_opt(root, "moe_router_activation_func", KL, 32, "sigmoid", &act,
                               SPILL_E_FORMAT, e));
  if (strcmp(act, "sigmoid"))
    return refuse("moe_router_activation_func",
                  "only sigmoid; the modelling code adds e_score_correction_bias to softmax scores too", e);
  SPILL_TRY(kint(root, KL, "num_expert_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->n_group, e));
  SPILL_TRY(kint(root, KL, "topk_group", 1, SPILL_MAX_EXPERTS, 1, 0, &c->topk_group, e));
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
  SPILL_TRY(kint(root, KL, "moe_layer_freq", 1, 1024, 1, 0, &freq, e));
  if (freq != 1) return refuse("moe_layer_freq", "dense layers between MoE layers; only 1", e);
  SPILL_TRY(kint(root, KL, "num_nextn_predict_layers", 0, 64, 0, 0, &mtp, e));
  if (mtp != 0) return refuse("num_nextn_predict_layers", "the modelling code has no MTP layers", e);
  return spill_json_bool_opt(root, "tie_word_embeddings", KL, 0, &c->tied, SPILL_E_FORMAT, e);
}

static int hf_dims(const cJSON *root, kl_cfg *c, spill_err *e) {
  SPILL_TRY(kint(root, KL, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(kint(root, KL, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(kint(root, KL, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(kint(root, KL, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(kint(root, KL, "kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(kint(root, KL, "qk_nope_head_dim", 1, 4096, 0, 1, &c->dn, e));
  SPILL_TRY(kint(root, KL, "qk_rope_head_dim", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(kint(root, KL, "v_head_dim", 1, 4096, 0, 1, &c->dv, e));
  SPILL_TRY(kint(root, KL, "num_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(kint(root, KL, "num_experts_per_token", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(kint(root, KL, "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(kint(root, KL, "intermediate_size", 1, 1048576, 0, 1, &c->Fd, e));
  SPILL_TRY(kint(root, KL, "num_shared_experts", 0, 64, 0, 0, &c->n_shared, e));
  SPILL_TRY(kint(root, KL, "first_k_dense_replace", 0, c->L, 0, 0, &c->n_dense, e));
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
  for (const cJSON *it = root->child; it; it = it->next)
    if (!imp_cfg_harmless(it->string) && !imp_in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           KL ": key \"%.80s\" is not understood for kimi_linear (it may change the "
                           "maths; refusing rather than importing a different model)",
                           it->string);
  SPILL_TRY(hf_dims(root, c, e));
  SPILL_TRY(hf_values(root, c, e));
  SPILL_TRY(hf_routing(root, c, e));
  SPILL_TRY(hf_linear_attn(root, c, e));
  SPILL_TRY(imp_cfg_quant(root, s, e));
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

/* ---- tensors ---- */

/* Adds container tensor blk.l.dst from HF model.layers.l.src. */
static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *src, int nd, uint64_t r,
             uint64_t co, spill_err *e) {
  char a[160], b[200];
  snprintf(a, sizeof a, "blk.%d.%s", l, dst);
  snprintf(b, sizeof b, "model.layers.%d.%s", l, src);
  return imp_add_trunk(s, p, a, b, nd, r, co, 0, e);
}

/* Like T for a source whose shape is [rows, cols] (cols 0: [rows]) with
 * extra unit dimensions (conv weights (C, 1, K), A_log (1, 1, H, 1)); f32:
 * the container keeps it as f32. */
static int T_squeezed(imp_src *s, imp_plan *p, int l, const char *dst, const char *src, uint64_t rows,
                      uint64_t cols, int f32, spill_err *e) {
  imp_trunk *t = &p->trunk[p->n_trunk];
  memset(t, 0, sizeof *t);
  char b[200];
  snprintf(t->name, sizeof t->name, "blk.%d.%s", l, dst);
  snprintf(b, sizeof b, "model.layers.%d.%s", l, src);
  SPILL_TRY(imp_need(s, b, &t->src, e));
  uint64_t got[SPILL_SRC_MAX_DIMS], want[2];
  int ng = 0, nw = 0;
  for (int i = 0; i < t->src->ndim; i++)
    if (t->src->shape[i] != 1) got[ng++] = t->src->shape[i];
  if (rows != 1) want[nw++] = rows;
  if (cols > 1) want[nw++] = cols;
  if (ng != nw || (nw > 0 && memcmp(got, want, (size_t)nw * sizeof *got)))
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: shape is not [%llu, %llu] up to unit dimensions", b,
                         (unsigned long long)rows, (unsigned long long)(cols ? cols : 1));
  SPILL_FAIL_IF(e, t->src->dtype == SPILL_SRC_F8_E4M3, SPILL_E_UNSUPPORTED, "tensor %s: FP8 is not supported here", b);
  t->ndim = cols ? 2 : 1;
  t->rows = rows;
  t->cols = cols ? cols : 1;
  t->f32 = f32;
  p->n_trunk++;
  return SPILL_OK;
}

static int plan_kda(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, n = (uint64_t)c->kH * c->kd, d = c->kd, K = c->kK;
  static const char *const qkv[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    char dst[32], src[48];
    snprintf(dst, sizeof dst, "attn_%s", qkv[i]);
    snprintf(src, sizeof src, "self_attn.%s_proj.weight", qkv[i]);
    SPILL_TRY(T(s, p, l, dst, src, 2, n, D, e));
    snprintf(dst, sizeof dst, "attn_%s_conv", qkv[i]);
    snprintf(src, sizeof src, "self_attn.%s_conv1d.weight", qkv[i]);
    SPILL_TRY(T_squeezed(s, p, l, dst, src, n, K, 1, e));
  }
  SPILL_TRY(T(s, p, l, "attn_f_a", "self_attn.f_a_proj.weight", 2, d, D, e));
  SPILL_TRY(T(s, p, l, "attn_f_b", "self_attn.f_b_proj.weight", 2, n, d, e));
  SPILL_TRY(T(s, p, l, "attn_dt_bias", "self_attn.dt_bias", 1, n, 0, e));
  SPILL_TRY(T_squeezed(s, p, l, "attn_a_log", "self_attn.A_log", (uint64_t)c->kH, 0, 0, e));
  SPILL_TRY(T(s, p, l, "attn_b", "self_attn.b_proj.weight", 2, (uint64_t)c->kH, D, e));
  SPILL_TRY(T(s, p, l, "attn_g_a", "self_attn.g_a_proj.weight", 2, d, D, e));
  SPILL_TRY(T(s, p, l, "attn_g_b", "self_attn.g_b_proj.weight", 2, n, d, e));
  SPILL_TRY(T(s, p, l, "attn_o_norm", "self_attn.o_norm.weight", 1, d, 0, e));
  return T(s, p, l, "attn_output", "self_attn.o_proj.weight", 2, D, n, e);
}

/* MLA without RoPE: the rope dims are never rotated, so their order does not
 * matter and no rows are moved (unlike arch_deepseek.c). */
static int plan_mla(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, dn = c->dn, dr = c->dr, dv = c->dv, dc = c->dc;
  SPILL_TRY(T(s, p, l, "attn_q", "self_attn.q_proj.weight", 2, H * (dn + dr), D, e));
  SPILL_TRY(T(s, p, l, "attn_kv_a", "self_attn.kv_a_proj_with_mqa.weight", 2, dc + dr, D, e));
  SPILL_TRY(T(s, p, l, "attn_kv_a_norm", "self_attn.kv_a_layernorm.weight", 1, dc, 0, e));
  SPILL_TRY(T(s, p, l, "attn_kv_b", "self_attn.kv_b_proj.weight", 2, H * (dn + dv), dc, e));
  return T(s, p, l, "attn_output", "self_attn.o_proj.weight", 2, D, H * dv, e);
}

static int plan_ffn(imp_src *s, const kl_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, E = c->E, F = c->F, Fd = c->Fd, S = (uint64_t)c->n_shared * c->F;
  if (l < c->n_dense) {
    SPILL_TRY(T(s, p, l, "ffn_gate", "mlp.gate_proj.weight", 2, Fd, D, e));
    SPILL_TRY(T(s, p, l, "ffn_up", "mlp.up_proj.weight", 2, Fd, D, e));
    return T(s, p, l, "ffn_down", "mlp.down_proj.weight", 2, D, Fd, e);
  }
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "block_sparse_moe.gate.weight", 2, E, D, e));
  SPILL_TRY(T(s, p, l, "exp_probs_b", "block_sparse_moe.gate.e_score_correction_bias", 1, E, 0, e));
  if (S > 0) {
    SPILL_TRY(T(s, p, l, "ffn_gate_shexp", "block_sparse_moe.shared_experts.gate_proj.weight", 2, S, D, e));
    SPILL_TRY(T(s, p, l, "ffn_up_shexp", "block_sparse_moe.shared_experts.up_proj.weight", 2, S, D, e));
    SPILL_TRY(T(s, p, l, "ffn_down_shexp", "block_sparse_moe.shared_experts.down_proj.weight", 2, D, S, e));
  }
  /* experts: w1 gate, w3 up, w2 down (KimiBlockSparseMLP) */
  static const char *const w[SPILL_SEC_COUNT] = {"w1", "w3", "w2"};
  imp_moe_layer *m = &p->moe[l - c->n_dense];
  char pre[48];
  snprintf(pre, sizeof pre, "model.layers.%d.", l);
  for (int k = 0; k < SPILL_SEC_COUNT; k++)
    SPILL_TRY(imp_hf_experts(s, m, k, pre, "block_sparse_moe.experts", w[k], E, k == 2 ? D : F, k == 2 ? F : D, e));
  return SPILL_OK;
}

static int plan_tensors(imp_src *s, const kl_cfg *c, imp_plan *p, spill_err *e) {
  const uint64_t D = c->D, V = c->V;
  p->trunk = calloc((size_t)(3 + 24 * c->L), sizeof *p->trunk);
  p->moe = calloc((size_t)(c->L - c->n_dense + 1), sizeof *p->moe);
  SPILL_FAIL_IF(e, !p->trunk || !p->moe, SPILL_E_NOMEM, "out of memory");
  SPILL_TRY(imp_add_trunk(s, p, "tok_embd", "model.embed_tokens.weight", 2, V, D, 0, e));
  SPILL_TRY(imp_add_trunk(s, p, "output_norm", "model.norm.weight", 1, D, 0, 0, e));
  SPILL_TRY(imp_add_trunk(s, p, "output", c->tied ? "model.embed_tokens.weight" : "lm_head.weight", 2, V, D,
                          0, e));
  for (int l = 0; l < c->L; l++) {
    SPILL_TRY(T(s, p, l, "attn_norm", "input_layernorm.weight", 1, D, 0, e));
    SPILL_TRY(c->is_kda[l] ? plan_kda(s, c, p, l, e) : plan_mla(s, c, p, l, e));
    SPILL_TRY(T(s, p, l, "ffn_norm", "post_attention_layernorm.weight", 1, D, 0, e));
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
    /* KimiMLAAttention: kv_a_layernorm = KimiRMSNorm(kv_lora_rank), eps default 1e-6 */
    m->kv_norm_eps = 1e-6;
  }
  if (any_kda) {
    spill_kda_cfg *k = &a->kda;
    k->n_heads = c->kH;
    k->head_dim = c->kd;
    k->conv_kernel = c->kK;
    k->gate_rank = c->kd;     /* f_a_proj: Linear(hidden, head_dim) */
    k->out_gate_rank = c->kd; /* g_a_proj: Linear(hidden, head_dim) */
    k->decay_floor = 0;       /* fused_kda_gate without lower_bound */
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
  o->group_mask_zero = c->n_group > 1; /* masked_fill(~mask, 0.0) */
}

int imp_kimi_linear_plan(imp_src *s, const char *dir, imp_plan *p, int *handled, spill_err *e) {
  *handled = 0;
  if (s->is_gguf) return SPILL_OK; /* GGUF kimi-linear: see docs/MODEL.md (not imported) */
  char path[4200], *json = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  spill_err ig = {0};
  if (spill_read_file(path, 16u << 20, &json, &len, &ig) != SPILL_OK) return SPILL_OK;
  cJSON *root = cJSON_ParseWithLength(json, len);
  free(json);
  const cJSON *mt = root ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
  if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "kimi_linear")) {
    cJSON_Delete(root);
    return SPILL_OK;
  }
  *handled = 1;
  snprintf(s->arch_name, sizeof s->arch_name, "kimi_linear");
  kl_cfg *c = calloc(1, sizeof *c);
  int rc = c ? hf_config(s, dir, root, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  cJSON_Delete(root);
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}
