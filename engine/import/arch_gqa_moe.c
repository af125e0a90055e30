/* engine/import/arch_gqa_moe.c: the GQA + softmax-router MoE family for
 * `spill import`: config.json model_type qwen3_moe, olmoe, mixtral and GGUF
 * qwen3moe, olmoe, llama with experts (rows of arch_registry.c; variant
 * IMP_GQA_QWEN3MOE / _OLMOE / _MIXTRAL), to a spill architecture and a
 * tensor plan (docs/MODEL.md "Imported architectures"): every layer GQA
 * (q/k norm per head for Qwen3-MoE, over the whole projection for OLMoE,
 * none for Mixtral), RoPE over the whole head, a softmax router over all
 * experts, top-k, no shared experts. GGUF llama q/k rows are un-permuted at
 * import. As everywhere (import_plan.c), every config key is used, harmless
 * or checked, and every source tensor is consumed.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

typedef struct shape_cfg {
  int arch;                       /* IMP_GQA_* */
  int V, D, L, H, Hk, d, E, k, F; /* vocab, d_model, layers, heads, kv heads, head_dim, experts, top-k, d_expert */
  double eps, theta;
  int norm_topk, tied, bos, eos;
  int gguf_llama; /* GGUF llama: q/k rows permuted by the converter */
} shape_cfg;

/* ---- Hugging Face config.json ---- */

static int want_null_or(const cJSON *root, const char *key, int (*ok)(const cJSON *), const char *what,
                        spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v) || ok(v)) return SPILL_OK;
  char *txt = cJSON_PrintUnformatted(v);
  int rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "config.json: %s = %.100s changes the maths and is not supported (%s)", key,
                         txt ? txt : "?", what);
  free(txt);
  return rc;
}

static int is_false(const cJSON *v) { return cJSON_IsFalse(v); }
static int is_empty_arr(const cJSON *v) { return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0; }
static int is_one(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == 1; }
static int is_zero(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == 0; }
static int is_silu(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "silu"); }
static int all_full_attn(const cJSON *v) {
  if (!cJSON_IsArray(v)) return 0;
  for (const cJSON *x = v->child; x; x = x->next)
    if (!cJSON_IsString(x) || strcmp(x->valuestring, "full_attention")) return 0;
  return 1;
}
static int never(const cJSON *v) { (void)v; return 0; }

/* Values whose maths we implement; anything else is refused by name. */
static int hf_values(const cJSON *root, const shape_cfg *c, spill_err *e) {
  SPILL_TRY(want_null_or(root, "attention_bias", is_false, "attention biases", e));
  SPILL_TRY(want_null_or(root, "hidden_act", is_silu, "only silu", e));
  SPILL_TRY(want_null_or(root, "rope_scaling", never, "RoPE scaling", e));
  SPILL_TRY(want_null_or(root, "clip_qkv", never, "q/k/v clipping", e));
  SPILL_TRY(want_null_or(root, "decoder_sparse_step", is_one, "dense layers between MoE layers", e));
  SPILL_TRY(want_null_or(root, "mlp_only_layers", is_empty_arr, "dense layers between MoE layers", e));
  SPILL_TRY(want_null_or(root, "use_sliding_window", is_false, "sliding-window attention", e));
  SPILL_TRY(want_null_or(root, "layer_types", all_full_attn, "sliding-window layers", e));
  if (c->arch == IMP_GQA_MIXTRAL) SPILL_TRY(want_null_or(root, "sliding_window", never, "sliding-window attention", e));
  return want_null_or(root, "router_jitter_noise", is_zero, "router noise", e);
}

static int hf_config(imp_src *s, const char *dir, const cJSON *root, shape_cfg *c, spill_err *e) {
  /* keys read per architecture. Checked against real config.json files
   * (import_test.sh "real config.json key set"): Qwen/Qwen3-30B-A3B
   * (transformers 4.51.0), allenai/OLMoE-1B-7B-0125-Instruct and
   * mistralai/Mixtral-8x7B-v0.1 (4.36.0.dev0): every key of each is in
   * import_plan.c's harmless list or in its family's list below. */
  static const char *const qwen[] = {"vocab_size", "hidden_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "num_experts",
      "num_experts_per_tok", "moe_intermediate_size", "rms_norm_eps", "rope_theta",
      "norm_topk_prob", "tie_word_embeddings", "intermediate_size", "attention_bias",
      "hidden_act", "decoder_sparse_step", "mlp_only_layers", "use_sliding_window",
      "sliding_window", "max_window_layers", "rope_scaling", "layer_types", "quantization_config", NULL};
  static const char *const olmoe[] = {"vocab_size", "hidden_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "num_experts", "num_experts_per_tok",
      "intermediate_size", "rms_norm_eps", "rope_theta", "norm_topk_prob", "tie_word_embeddings",
      "attention_bias", "hidden_act", "clip_qkv", "rope_scaling", "quantization_config", NULL};
  static const char *const mixtral[] = {"vocab_size", "hidden_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "num_local_experts",
      "num_experts_per_tok", "intermediate_size", "rms_norm_eps", "rope_theta",
      "tie_word_embeddings", "hidden_act", "sliding_window", "rope_scaling", "quantization_config", NULL};
  const char *const *keys = c->arch == IMP_GQA_QWEN3MOE ? qwen : c->arch == IMP_GQA_OLMOE ? olmoe : mixtral;
  const char *p = "config.json";
  SPILL_TRY(imp_cfg_only_keys(root, s->arch_name, keys, e));
  SPILL_TRY(imp_cfg_int(root, p, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(root, p, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_key_value_heads", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(imp_cfg_int(root, p, "head_dim", 2, 4096, c->D / c->H, 0, &c->d, e));
  SPILL_TRY(imp_cfg_int(root, p, c->arch == IMP_GQA_MIXTRAL ? "num_local_experts" : "num_experts", 1,
                        SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_experts_per_tok", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(imp_cfg_int(root, p, c->arch == IMP_GQA_QWEN3MOE ? "moe_intermediate_size" : "intermediate_size", 1,
                        1048576, 0, 1, &c->F, e));
  SPILL_TRY(spill_json_num(root, "rms_norm_eps", p, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(root, "rope_theta", p, 1e-6, 1e12, 10000.0, &c->theta, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "norm_topk_prob", p, c->arch == IMP_GQA_MIXTRAL, &c->norm_topk,
                                SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_bool_opt(root, "tie_word_embeddings", p, 0, &c->tied, SPILL_E_FORMAT, e));
  SPILL_TRY(hf_values(root, c, e));
  SPILL_TRY(imp_cfg_quant(root, s, e));
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

/* ---- GGUF metadata ---- */

/* Maths-changing keys we do not implement (rope scaling "none" and zero
 * shared experts are the defaults, accepted). */
static int gguf_refused_keys(const spill_gguf *g, const char *an, spill_err *e) {
  static const char *const bad[] = {"rope.scaling.type", "attention.sliding_window",
                                    "attention.clamp_kqv", "expert_shared_count", NULL};
  char k[160];
  for (int i = 0; bad[i]; i++) {
    snprintf(k, sizeof k, "%s.%s", an, bad[i]);
    const spill_gguf_kv *kv = spill_gguf_find_kv(g, k);
    if (!kv) continue;
    if (!strcmp(bad[i], "rope.scaling.type") && kv->type == SPILL_GGUF_STRING &&
        !strcmp(kv->str[0], "none"))
      continue;
    if (!strcmp(bad[i], "expert_shared_count")) {
      uint64_t v = 1;
      if (spill_gguf_get_u64(g, k, &v, e) == SPILL_OK && v == 0) continue;
    }
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF key %s changes the maths and is not supported", k);
  }
  return SPILL_OK;
}

static int gguf_config(imp_src *s, shape_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  const char *an = s->arch_name;
  c->gguf_llama = c->arch == IMP_GQA_MIXTRAL;
  SPILL_TRY(imp_gguf_int(g, an, "embedding_length", 1, 1048576, &c->D, 0, 1, e));
  SPILL_TRY(imp_gguf_int(g, an, "block_count", 1, SPILL_MAX_LAYERS, &c->L, 0, 1, e));
  SPILL_TRY(imp_gguf_int(g, an, "attention.head_count", 1, 4096, &c->H, 0, 1, e));
  SPILL_TRY(imp_gguf_int(g, an, "attention.head_count_kv", 1, 4096, &c->Hk, c->H, 0, e));
  SPILL_TRY(imp_gguf_int(g, an, "attention.key_length", 2, 4096, &c->d, c->D / c->H, 0, e));
  int vl;
  SPILL_TRY(imp_gguf_int(g, an, "attention.value_length", 2, 4096, &vl, c->d, 0, e));
  SPILL_FAIL_IF(e, vl != c->d, SPILL_E_UNSUPPORTED, "GGUF %s: value_length %d != key_length %d", an,
                vl, c->d);
  SPILL_TRY(imp_gguf_int(g, an, "expert_count", 0, SPILL_MAX_EXPERTS, &c->E, 0, 1, e));
  SPILL_FAIL_IF(e, c->E < 1, SPILL_E_UNSUPPORTED, "GGUF %s: expert_count 0 (a dense model)", an);
  SPILL_TRY(imp_gguf_int(g, an, "expert_used_count", 1, SPILL_MAX_TOPK, &c->k, 0, 1, e));
  SPILL_TRY(imp_gguf_int(g, an, c->arch == IMP_GQA_QWEN3MOE ? "expert_feed_forward_length" : "feed_forward_length",
                   1, 1048576, &c->F, 0, 1, e));
  int rd;
  SPILL_TRY(imp_gguf_int(g, an, "rope.dimension_count", 0, 4096, &rd, c->d, 0, e));
  SPILL_FAIL_IF(e, rd != c->d, SPILL_E_UNSUPPORTED,
                "GGUF %s.rope.dimension_count %d != head dim %d (partial RoPE not supported)", an, rd, c->d);
  char k[160];
  snprintf(k, sizeof k, "%s.rope.freq_base", an);
  c->theta = 10000.0;
  if (spill_gguf_find_kv(g, k)) SPILL_TRY(spill_gguf_get_f64(g, k, &c->theta, e));
  snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", an);
  SPILL_TRY(spill_gguf_get_f64(g, k, &c->eps, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1) || !(c->theta > 0 && c->theta <= 1e12),
                SPILL_E_FORMAT, "GGUF %s: epsilon %g or freq_base %g out of range", an, c->eps, c->theta);
  SPILL_TRY(gguf_refused_keys(g, an, e));
  /* routing: llama.cpp renormalises for qwen3moe and llama (Mixtral), not olmoe */
  c->norm_topk = c->arch != IMP_GQA_OLMOE;
  snprintf(k, sizeof k, "%s.expert_weights_norm", an);
  if (spill_gguf_find_kv(g, k)) SPILL_TRY(spill_gguf_get_bool(g, k, &c->norm_topk, e));
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2, SPILL_E_FORMAT, "%s tensor token_embd.weight is missing", an);
  SPILL_FAIL_IF(e, emb->shape[0] > 16777216, SPILL_E_FORMAT, "token_embd.weight: vocabulary too large");
  c->V = (int)emb->shape[0];
  c->tied = !spill_gguf_find(g, "output.weight");
  SPILL_FAIL_IF(e, c->tied && c->arch == IMP_GQA_OLMOE, SPILL_E_FORMAT, "olmoe tensor output.weight is missing");
  /* llama.cpp adds BOS by default for llama vocabularies */
  return imp_gguf_bos_eos(g, c->V, c->arch == IMP_GQA_MIXTRAL, &c->bos, &c->eos, e);
}

/* ---- tensors ---- */

static int plan_tensors(imp_src *s, const shape_cfg *c, imp_plan *p, spill_err *e) {
  const uint64_t D = (uint64_t)c->D, V = (uint64_t)c->V, H = (uint64_t)c->H, Hk = (uint64_t)c->Hk,
                 d = (uint64_t)c->d, E = (uint64_t)c->E, F = (uint64_t)c->F;
  static const char *const hf_exp[2][SPILL_SEC_COUNT] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};
  const int mix = c->arch == IMP_GQA_MIXTRAL;
  SPILL_TRY(imp_plan_init(s, p, 3 + 10 * c->L, c->L, V, D, c->tied, e));
  for (int l = 0; l < c->L; l++) {
#define T(dst, g, h, nd, r, co, up) SPILL_TRY(imp_add_layer(s, p, l, dst, g, h, nd, r, co, up, e))
    T("attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, 0);
    T("attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * d, D, c->gguf_llama ? c->H : 0);
    T("attn_k", "attn_k.weight", "self_attn.k_proj.weight", 2, Hk * d, D, c->gguf_llama ? c->Hk : 0);
    T("attn_v", "attn_v.weight", "self_attn.v_proj.weight", 2, Hk * d, D, 0);
    T("attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * d, 0);
    if (c->arch == IMP_GQA_QWEN3MOE) {
      T("attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, d, 0, 0);
      T("attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, d, 0, 0);
    } else if (c->arch == IMP_GQA_OLMOE) {
      T("attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, H * d, 0, 0);
      T("attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, Hk * d, 0, 0);
    }
    T("ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, 0, 0);
    T("ffn_gate_inp", "ffn_gate_inp.weight", mix ? "block_sparse_moe.gate.weight" : "mlp.gate.weight", 2, E, D, 0);
#undef T
    SPILL_TRY(imp_plan_experts(s, &p->moe[l], l, E, D, F, mix ? "block_sparse_moe.experts" : "mlp.experts",
                               hf_exp[mix], e));
  }
  return imp_check_consumed(s, p, -1, e);
}

static void fill_arch(const imp_src *s, const shape_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "%s", s->arch_name);
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = 0;
  a->d_ff = 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = c->bos;
  a->eos_id = c->eos;
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  a->gqa.n_heads = c->H;
  a->gqa.n_kv_heads = c->Hk;
  a->gqa.head_dim = c->d;
  a->gqa.rope_theta = c->theta;
  a->gqa.qk_norm = c->arch == IMP_GQA_QWEN3MOE ? SPILL_QK_NORM_HEAD
                   : c->arch == IMP_GQA_OLMOE  ? SPILL_QK_NORM_FULL
                                               : SPILL_QK_NORM_NONE;
  a->moe.n_experts = c->E;
  a->moe.top_k = c->k;
  a->moe.d_expert = c->F;
  a->moe.router = SPILL_ROUTER_SOFTMAX;
  a->moe.norm_topk = c->norm_topk;
  a->moe.routed_scale = 1.0;
}

/* The shared tail of both sources: consistency, the arch, the tensors. */
static int plan(imp_src *s, shape_cfg *c, imp_plan *p, spill_err *e) {
  SPILL_FAIL_IF(e, c->H % c->Hk != 0, SPILL_E_FORMAT, "%s: %d heads not a multiple of %d kv heads",
                s->arch_name, c->H, c->Hk);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "%s: top-k %d > %d experts", s->arch_name, c->k, c->E);
  SPILL_FAIL_IF(e, c->d % 2, SPILL_E_FORMAT, "%s: odd head dim %d", s->arch_name, c->d);
  SPILL_FAIL_IF(e, c->arch == IMP_GQA_OLMOE && c->Hk != c->H && s->is_gguf, SPILL_E_FORMAT,
                "olmoe: llama.cpp needs head_count_kv == head_count");
  if (c->bos >= c->V) c->bos = -1;
  if (c->eos >= c->V) c->eos = -1;
  fill_arch(s, c, &p->arch);
  return plan_tensors(s, c, p, e);
}

int imp_gqa_moe_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p, spill_err *e) {
  shape_cfg c;
  memset(&c, 0, sizeof c);
  c.arch = variant;
  SPILL_TRY(hf_config(s, dir, root, &c, e));
  return plan(s, &c, p, e);
}

int imp_gqa_moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  shape_cfg c;
  memset(&c, 0, sizeof c);
  c.arch = variant;
  SPILL_TRY(gguf_config(s, &c, e));
  return plan(s, &c, p, e);
}
