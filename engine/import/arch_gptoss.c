/* engine/import/arch_gptoss.c: OpenAI's gpt-oss for `spill import`: GGUF
 * gpt-oss (llama.cpp's src/models/openai-moe.cpp and its converter
 * conversion/gpt_oss.py) and the Hugging Face checkpoint (config.json
 * model_type gpt_oss, transformers' GptOss; experts as MXFP4 *_blocks +
 * *_scales with gate and up interleaved by rows, repacked byte for byte
 * into ggml MXFP4 blocks) to a spill GQA architecture and a tensor plan
 * (docs/MODEL.md "gpt-oss").
 *
 * GQA over the whole head with q/k/v/o biases, NeoX RoPE with YaRN (llama.cpp
 * applies beta_fast 32 / beta_slow 1 whatever the keys say, floors/ceils the
 * correction range and scales cos/sin by 1 + 0.1 ln(factor)), a learned sink
 * logit per head in the softmax, a sliding window on the layers llama.cpp's
 * pattern 2 picks (even layers), the router with a bias whose top-k logits
 * are weighted by their softmax, per-expert gate/up/down biases and the
 * clamped SwiGLU (swiglu_oai). MXFP4 experts are kept byte for byte under
 * --experts keep. Keys llama.cpp reads and spill would compute differently
 * (or llama.cpp ignores although they change the model) are refused by name;
 * every source tensor is consumed (import_plan.c). A row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

#define ARCH "gpt-oss"

typedef struct oss_cfg {
  int V, D, L, H, Hk, d, E, k, F, window, pattern, orig_ctx, bos, eos;
  int unrounded; /* HF rope_scaling truncate false */
  double eps, theta, factor, beta_fast, beta_slow;
} oss_cfg;

/* ---- config.json (transformers' GptOssConfig) ---- */

static int unsupported(const char *key, const cJSON *v, const char *why, spill_err *e) {
  char *txt = v ? cJSON_PrintUnformatted(v) : NULL;
  int rc = spill_err_set(e, SPILL_E_UNSUPPORTED, "config.json: %s = %.80s changes the maths and is not supported (%s)",
                         key, txt ? txt : "?", why);
  free(txt);
  return rc;
}

/* rope_scaling: null, or yarn with factor, original_max_position_embeddings,
 * beta_fast, beta_slow (32 / 1 when absent), truncate (default true). */
static int hf_rope(const cJSON *root, oss_cfg *c, spill_err *e) {
  const char *p = "config.json rope_scaling";
  SPILL_TRY(spill_json_num_opt(root, "rope_theta", "config.json", 1e-3, 1e12, 10000.0, &c->theta, SPILL_E_FORMAT, e));
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
  c->factor = 0;
  if (!rs || cJSON_IsNull(rs)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsObject(rs), SPILL_E_FORMAT, "config.json: rope_scaling is not an object");
  static const char *const keys[] = {"rope_type", "type", "factor", "original_max_position_embeddings",
                                     "beta_fast", "beta_slow", "truncate", NULL};
  for (const cJSON *it = rs->child; it; it = it->next)
    if (!imp_in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "config.json: rope_scaling.%.60s is not understood for gpt_oss (it may change the maths)",
                           it->string);
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
  if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rs, "type");
  if (!(cJSON_IsString(ty) && !strcmp(ty->valuestring, "yarn"))) return unsupported("rope_scaling.rope_type", ty, "yarn only", e);
  SPILL_TRY(spill_json_num(rs, "factor", p, 1.0, 1e6, &c->factor, SPILL_E_FORMAT, e));
  SPILL_TRY(imp_cfg_int(rs, p, "original_max_position_embeddings", 1, 1 << 30, 0, 1, &c->orig_ctx, e));
  SPILL_TRY(spill_json_num_opt(rs, "beta_fast", p, 1e-6, 1e6, 32.0, &c->beta_fast, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(rs, "beta_slow", p, 1e-6, 1e6, 1.0, &c->beta_slow, SPILL_E_FORMAT, e));
  int trunc;
  SPILL_TRY(spill_json_bool_opt(rs, "truncate", p, 1, &trunc, SPILL_E_FORMAT, e));
  c->unrounded = !trunc;
  return SPILL_OK;
}

/* quantization_config: absent, or quant_method mxfp4 (the experts' *_blocks
 * and *_scales) with its modules_to_not_convert list. */
static int hf_quant(const cJSON *root, spill_err *e) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
  if (!q || cJSON_IsNull(q)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsObject(q), SPILL_E_FORMAT, "config.json: quantization_config is not an object");
  for (const cJSON *it = q->child; it; it = it->next) {
    if (!strcmp(it->string, "modules_to_not_convert")) continue;
    if (!strcmp(it->string, "quant_method") && cJSON_IsString(it) && !strcmp(it->valuestring, "mxfp4")) continue;
    char k[96];
    snprintf(k, sizeof k, "quantization_config.%.60s", it->string);
    return unsupported(k, it, "gpt_oss: quant_method mxfp4 only", e);
  }
  SPILL_FAIL_IF(e, !cJSON_GetObjectItemCaseSensitive(q, "quant_method"), SPILL_E_FORMAT,
                "config.json: quantization_config without quant_method");
  return SPILL_OK;
}

/* layer_types must be llama.cpp's pattern 2 (sliding on even layers). */
static int hf_layer_types(const cJSON *root, oss_cfg *c, spill_err *e) {
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
  c->pattern = 2;
  if (!lt || cJSON_IsNull(lt)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->L, SPILL_E_FORMAT,
                "config.json: layer_types is not a list of %d layer types", c->L);
  int l = 0;
  for (const cJSON *it = lt->child; it; it = it->next, l++) {
    const char *want = l % 2 == 0 ? "sliding_attention" : "full_attention";
    if (!(cJSON_IsString(it) && !strcmp(it->valuestring, want))) {
      char k[32];
      snprintf(k, sizeof k, "layer_types[%d]", l);
      return unsupported(k, it, "sliding_attention on the even layers, full_attention on the odd ones only", e);
    }
  }
  return SPILL_OK;
}

static int hf_config(imp_src *s, const char *dir, const cJSON *root, oss_cfg *c, spill_err *e) {
  /* the keys of openai/gpt-oss-20b's and -120b's config.json and of
   * transformers' GptOssConfig; the rest is harmless (import_plan.c) */
  static const char *const keys[] = {
      "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
      "num_local_experts", "num_experts_per_tok", "experts_per_token", "intermediate_size", "rms_norm_eps",
      "rope_theta", "rope_scaling", "sliding_window", "layer_types", "swiglu_limit", "attention_bias",
      "hidden_act", "tie_word_embeddings", "quantization_config", "initial_context_length", NULL};
  const char *p = "config.json";
  SPILL_TRY(imp_cfg_only_keys(root, s->arch_name, keys, e));
  SPILL_TRY(imp_cfg_int(root, p, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(root, p, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_key_value_heads", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(imp_cfg_int(root, p, "head_dim", 2, 4096, c->D / c->H, 0, &c->d, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_local_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(root, p, "num_experts_per_tok", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  int k2;
  SPILL_TRY(imp_cfg_int(root, p, "experts_per_token", 1, SPILL_MAX_TOPK, c->k, 0, &k2, e));
  SPILL_FAIL_IF(e, k2 != c->k, SPILL_E_FORMAT, "config.json: experts_per_token %d != num_experts_per_tok %d", k2,
                c->k);
  SPILL_TRY(imp_cfg_int(root, p, "intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(root, p, "sliding_window", 0, 1 << 30, 0, 1, &c->window, e));
  SPILL_TRY(spill_json_num(root, "rms_norm_eps", p, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  double lim;
  SPILL_TRY(spill_json_num_opt(root, "swiglu_limit", p, -1e30, 1e30, 7.0, &lim, SPILL_E_FORMAT, e));
  if (lim != 7.0) return unsupported("swiglu_limit", cJSON_GetObjectItemCaseSensitive(root, "swiglu_limit"), "7 only", e);
  int ab, tied;
  SPILL_TRY(spill_json_bool_opt(root, "attention_bias", p, 1, &ab, SPILL_E_FORMAT, e));
  if (!ab) return unsupported("attention_bias", cJSON_GetObjectItemCaseSensitive(root, "attention_bias"), "true only", e);
  SPILL_TRY(spill_json_bool_opt(root, "tie_word_embeddings", p, 0, &tied, SPILL_E_FORMAT, e));
  if (tied) return unsupported("tie_word_embeddings", cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings"), "false only", e);
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
  if (act && !cJSON_IsNull(act) && !(cJSON_IsString(act) && !strcmp(act->valuestring, "silu")))
    return unsupported("hidden_act", act, "only silu (the clamped SwiGLU)", e);
  int ctx0;
  SPILL_TRY(imp_cfg_int(root, p, "initial_context_length", 1, 1 << 30, 1, 0, &ctx0, e));
  SPILL_TRY(hf_layer_types(root, c, e));
  SPILL_TRY(hf_rope(root, c, e));
  SPILL_TRY(hf_quant(root, e));
  return imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
}

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out, spill_err *e) {
  return imp_gguf_int(g, ARCH, key, lo, hi, out, dflt, req, e);
}

static int gnum(const spill_gguf *g, const char *key, double dflt, double *out, spill_err *e) {
  char k[160];
  snprintf(k, sizeof k, ARCH ".%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) return SPILL_OK;
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !isfinite(*out), SPILL_E_FORMAT, "GGUF key %s is not finite", k);
  return SPILL_OK;
}

/* A number key that llama.cpp does not read (or reads as a fixed value) but
 * that would change the model: accepted only at the value llama.cpp uses. */
static int gfixed(const spill_gguf *g, const char *key, double want, spill_err *e) {
  double v;
  SPILL_TRY(gnum(g, key, want, &v, e));
  SPILL_FAIL_IF(e, v != want, SPILL_E_UNSUPPORTED,
                "GGUF key " ARCH ".%s = %g changes the maths and is not supported (llama.cpp computes with %g)",
                key, v, want);
  return SPILL_OK;
}

/* Keys whose maths llama.cpp applies and spill does not: refused by name. */
static int gguf_refused(const spill_gguf *g, spill_err *e) {
  static const char *const bad[] = {"rope.dimension_sections", "attention.clamp_kqv", "attention.temperature_scale",
                                    "rope.scaling.yarn_log_multiplier", "expert_weights_scale",
                                    "expert_weights_norm", "expert_shared_count", "leading_dense_block_count",
                                    "rope.dimension_count", NULL};
  for (int i = 0; bad[i]; i++) {
    char k[160];
    snprintf(k, sizeof k, ARCH ".%s", bad[i]);
    if (spill_gguf_find_kv(g, k))
      return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF key %s changes the maths and is not supported", k);
  }
  SPILL_TRY(gfixed(g, "rope.scaling.yarn_beta_fast", 32.0, e));
  SPILL_TRY(gfixed(g, "rope.scaling.yarn_beta_slow", 1.0, e));
  SPILL_TRY(gfixed(g, "rope.scaling.yarn_ext_factor", 1.0, e));
  SPILL_TRY(gfixed(g, "rope.scaling.attn_factor", 1.0, e));
  return SPILL_OK;
}

static int gguf_rope(const spill_gguf *g, oss_cfg *c, spill_err *e) {
  SPILL_TRY(gnum(g, "rope.freq_base", 10000.0, &c->theta, e));
  double swa_base;
  SPILL_TRY(gnum(g, "rope.freq_base_swa", c->theta, &swa_base, e));
  SPILL_FAIL_IF(e, swa_base != c->theta, SPILL_E_UNSUPPORTED,
                "GGUF key " ARCH ".rope.freq_base_swa = %g differs from freq_base %g: not supported", swa_base,
                c->theta);
  c->factor = 0;
  c->orig_ctx = 0;
  const spill_gguf_kv *ty = spill_gguf_find_kv(g, ARCH ".rope.scaling.type");
  if (!ty) return SPILL_OK;
  SPILL_FAIL_IF(e, ty->type != SPILL_GGUF_STRING, SPILL_E_FORMAT, "GGUF key " ARCH ".rope.scaling.type is not a string");
  if (!strcmp(ty->str[0], "none")) return SPILL_OK;
  SPILL_FAIL_IF(e, strcmp(ty->str[0], "yarn"), SPILL_E_UNSUPPORTED,
                "GGUF key " ARCH ".rope.scaling.type = %.32s is not supported (yarn or none)", ty->str[0]);
  c->beta_fast = 32.0; /* what llama.cpp applies (gguf_refused checks the keys) */
  c->beta_slow = 1.0;
  SPILL_TRY(gnum(g, "rope.scaling.factor", 0.0, &c->factor, e));
  SPILL_FAIL_IF(e, !(c->factor >= 1.0 && c->factor <= 1e6), SPILL_E_FORMAT,
                "GGUF key " ARCH ".rope.scaling.factor %g out of range [1, 1e6]", c->factor);
  int ctx;
  SPILL_TRY(gkey(g, "context_length", 1, 1 << 30, 0, 1, &ctx, e));
  SPILL_TRY(gkey(g, "rope.scaling.original_context_length", 1, 1 << 30, ctx, 0, &c->orig_ctx, e));
  return SPILL_OK;
}

/* llama.cpp's load_swa_pattern(2): sliding_window_pattern, an int (default
 * 2); the bool-array form is refused. */
static int gguf_swa(const spill_gguf *g, oss_cfg *c, spill_err *e) {
  SPILL_TRY(gkey(g, "attention.sliding_window", 0, 1 << 30, 0, 1, &c->window, e));
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, ARCH ".attention.sliding_window_pattern");
  SPILL_FAIL_IF(e, kv && kv->type == SPILL_GGUF_ARRAY, SPILL_E_UNSUPPORTED,
                "GGUF key " ARCH ".attention.sliding_window_pattern as a per-layer array is not supported");
  SPILL_TRY(gkey(g, "attention.sliding_window_pattern", 0, SPILL_MAX_LAYERS, 2, 0, &c->pattern, e));
  return SPILL_OK;
}

static int gguf_config(imp_src *s, oss_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int kl, vl;
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(gkey(g, "attention.head_count_kv", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(gkey(g, "attention.key_length", 2, 4096, c->D / c->H, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 2, 4096, kl, 0, &vl, e));
  SPILL_FAIL_IF(e, vl != kl, SPILL_E_UNSUPPORTED, "GGUF " ARCH ": value_length %d != key_length %d", vl, kl);
  c->d = kl;
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 0, &c->eps, e));
  SPILL_TRY(gguf_rope(g, c, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1) || !(c->theta > 0 && c->theta <= 1e12), SPILL_E_FORMAT,
                "GGUF " ARCH ": epsilon %g or freq_base %g out of range", c->eps, c->theta);
  SPILL_TRY(gguf_swa(g, c, e));
  SPILL_TRY(gguf_refused(g, e));
  SPILL_FAIL_IF(e, spill_gguf_find(g, "blk.0.attn_qkv.weight"), SPILL_E_UNSUPPORTED,
                "GGUF " ARCH ": a fused blk.N.attn_qkv is not supported (separate attn_q/k/v)");
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                ARCH " tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- checks and tensors ---- */

static int check(const oss_cfg *c, spill_err *e) {
  SPILL_FAIL_IF(e, c->H % c->Hk, SPILL_E_FORMAT, ARCH ": %d heads not a multiple of %d kv heads", c->H, c->Hk);
  SPILL_FAIL_IF(e, c->d % 2, SPILL_E_FORMAT, ARCH ": odd head dim %d", c->d);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, ARCH ": top-k %d > %d experts", c->k, c->E);
  return SPILL_OK;
}

static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *h, int nd, uint64_t r,
             uint64_t co, spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e);
}

/* HF: gate_up_proj_bias (E, 2F) split into gate (even columns) and up
 * (odd), down_proj_bias (E, D); the MXFP4 experts gate_up_proj_* (gate the
 * even rows, up the odd ones) and down_proj_*. The dequantised form
 * (gate_up_proj (E, D, 2F)) is refused by name. */
static int plan_hf_experts(imp_src *s, imp_plan *p, int l, uint64_t D, uint64_t E, uint64_t F, spill_err *e) {
  char b[160];
  snprintf(b, sizeof b, "model.layers.%d.mlp.experts.gate_up_proj", l);
  SPILL_FAIL_IF(e, imp_src_find(s, b) != NULL, SPILL_E_UNSUPPORTED,
                "tensor %s: dequantised gpt-oss experts are not supported (the MXFP4 *_blocks + *_scales are)", b);
  static const char *const dst[2] = {"ffn_gate_exps_bias", "ffn_up_exps_bias"};
  for (int k = 0; k < 2; k++) {
    SPILL_TRY(imp_add_squeezed(s, p, l, dst[k], NULL, "mlp.experts.gate_up_proj_bias", E, 2 * F, 1, 0, e));
    imp_trunk *t = &p->trunk[p->n_trunk - 1];
    t->cols = F;
    t->col_stride = 2;
    t->col_first = (uint32_t)k;
  }
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_down_exps_bias", NULL, "mlp.experts.down_proj_bias", E, D, 1, 0, e));
  imp_moe_layer *m = &p->moe[l];
  snprintf(b, sizeof b, "model.layers.%d.mlp.experts.gate_up_proj", l);
  SPILL_TRY(imp_hf_experts_oss(s, m, SPILL_SEC_GATE, b, E, F, D, 2, 0, e));
  SPILL_TRY(imp_hf_experts_oss(s, m, SPILL_SEC_UP, b, E, F, D, 2, 1, e));
  snprintf(b, sizeof b, "model.layers.%d.mlp.experts.down_proj", l);
  return imp_hf_experts_oss(s, m, SPILL_SEC_DOWN, b, E, D, F, 1, 0, e);
}

/* llama.cpp loads the q/k/v biases as optional: a file without them would
 * run as another model there. Here they are required and named. */
static int plan_layer(imp_src *s, const oss_cfg *c, imp_plan *p, int l, spill_err *e) {
  static const char *const hf[SPILL_SEC_COUNT] = {"gate_proj", "up_proj", "down_proj"};
  const uint64_t D = c->D, H = c->H, Hk = c->Hk, d = c->d, E = c->E, F = c->F;
  SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, e));
  SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * d, D, e));
  SPILL_TRY(T(s, p, l, "attn_k", "attn_k.weight", "self_attn.k_proj.weight", 2, Hk * d, D, e));
  SPILL_TRY(T(s, p, l, "attn_v", "attn_v.weight", "self_attn.v_proj.weight", 2, Hk * d, D, e));
  SPILL_TRY(T(s, p, l, "attn_q_bias", "attn_q.bias", "self_attn.q_proj.bias", 1, H * d, 0, e));
  SPILL_TRY(T(s, p, l, "attn_k_bias", "attn_k.bias", "self_attn.k_proj.bias", 1, Hk * d, 0, e));
  SPILL_TRY(T(s, p, l, "attn_v_bias", "attn_v.bias", "self_attn.v_proj.bias", 1, Hk * d, 0, e));
  SPILL_TRY(T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * d, e));
  SPILL_TRY(T(s, p, l, "attn_output_bias", "attn_output.bias", "self_attn.o_proj.bias", 1, D, 0, e));
  SPILL_TRY(T(s, p, l, "attn_sinks", "attn_sinks.weight", "self_attn.sinks", 1, H, 0, e));
  SPILL_TRY(T(s, p, l, "ffn_norm", "post_attention_norm.weight", "post_attention_layernorm.weight", 1, D, 0, e));
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "mlp.router.weight", 2, E, D, e));
  SPILL_TRY(T(s, p, l, "ffn_gate_inp_bias", "ffn_gate_inp.bias", "mlp.router.bias", 1, E, 0, e));
  if (!s->is_gguf) return plan_hf_experts(s, p, l, D, E, F, e);
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_gate_exps_bias", "ffn_gate_exps.bias", NULL, E, F, 1, 0, e));
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_up_exps_bias", "ffn_up_exps.bias", NULL, E, F, 1, 0, e));
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_down_exps_bias", "ffn_down_exps.bias", NULL, E, D, 1, 0, e));
  return imp_plan_experts(s, &p->moe[l], l, E, D, F, "mlp.experts", hf, e);
}

static void fill_arch(const oss_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "gpt-oss");
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = 0;
  a->d_ff = 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SWIGLU_OAI;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  spill_gqa_cfg *g = &a->gqa;
  g->n_heads = c->H;
  g->n_kv_heads = c->Hk;
  g->head_dim = c->d;
  g->rope_theta = c->theta;
  g->qk_norm = SPILL_QK_NORM_NONE;
  g->qkv_bias = 1;
  g->o_bias = 1;
  g->sinks = 1;
  g->swa_window = c->window;
  g->swa_pattern = c->window > 0 ? c->pattern : 0;
  if (c->factor > 1.0) {
    g->yarn_factor = c->factor;
    g->yarn_orig_ctx = c->orig_ctx;
    g->yarn_beta_fast = c->beta_fast;
    g->yarn_beta_slow = c->beta_slow;
    g->yarn_unrounded = c->unrounded;
    /* ggml's rope_yarn: mscale = attn_factor (1 here) * (1 + 0.1 ln(1 / freq_scale)) */
    g->rope_mscale = 1.0 + 0.1 * log(c->factor);
  }
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->router = SPILL_ROUTER_SOFTMAX_TOPK;
  o->norm_topk = 0;
  o->routed_scale = 1.0;
  o->router_bias = 1;
  o->expert_bias = 1;
}

static int plan(imp_src *s, oss_cfg *c, imp_plan *p, spill_err *e) {
  SPILL_TRY(check(c, e));
  fill_arch(c, &p->arch);
  SPILL_TRY(imp_plan_init(s, p, 3 + 20 * c->L, c->L, (uint64_t)c->V, (uint64_t)c->D, 0, e));
  for (int l = 0; l < c->L; l++) SPILL_TRY(plan_layer(s, c, p, l, e));
  return imp_check_consumed(s, p, -1, e);
}

int imp_gptoss_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  oss_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(hf_config(s, dir, root, &c, e));
  return plan(s, &c, p, e);
}

int imp_gptoss_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  oss_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(gguf_config(s, &c, e));
  return plan(s, &c, p, e);
}
