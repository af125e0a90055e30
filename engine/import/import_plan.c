/* engine/import/import_plan.c: from a checkpoint's config.json (Hugging Face)
 * or GGUF metadata to a spill architecture and a tensor plan (which source
 * tensor becomes which container tensor or expert section), per
 * architecture: qwen3_moe / qwen3moe, olmoe, mixtral / llama with experts.
 *
 * Strictness is the point: every config key is either used, known not to
 * change the maths (training-only, bookkeeping), or checked to have the value
 * whose maths we implement; anything else is an error naming the key. Every
 * source tensor the plan does not consume is an error too (a bias we would
 * silently drop changes the model), except the known-derived
 * rotary_emb.inv_freq. Shapes are checked against the config.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

/* ---- source access ---- */

int imp_src_n_tensors(const imp_src *s) { return s->is_gguf ? s->gg.n_tensors : s->st.n_tensors; }

const spill_src_tensor *imp_src_tensor(const imp_src *s, int i) {
  return s->is_gguf ? &s->gg.t[i] : &s->st.t[i];
}

const spill_src_tensor *imp_src_find(imp_src *s, const char *name) {
  const spill_src_tensor *t = s->is_gguf ? spill_gguf_find(&s->gg, name) : spill_st_find(&s->st, name);
  if (t) s->used[t - imp_src_tensor(s, 0)] = 1;
  return t;
}

int imp_src_read(const imp_src *s, const spill_src_tensor *t, uint64_t off, void *dst, size_t n,
                 spill_err *e) {
  return s->is_gguf ? spill_gguf_read(&s->gg, t, off, dst, n, e)
                    : spill_st_read(&s->st, t, off, dst, n, e);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

int imp_src_open(imp_src *s, const char *path, spill_err *e) {
  memset(s, 0, sizeof *s);
  struct stat st;
  SPILL_FAIL_IF(e, stat(path, &st) != 0, SPILL_E_IO, "%s: no such file or directory", path);
  if (!S_ISDIR(st.st_mode) && ends_with(path, ".gguf")) {
    s->is_gguf = 1;
    SPILL_TRY(spill_gguf_open(path, &s->gg, e));
  } else {
    SPILL_FAIL_IF(e, !S_ISDIR(st.st_mode), SPILL_E_INVALID_ARG,
                  "%s: expected a checkpoint directory (config.json + safetensors) or a .gguf file",
                  path);
    SPILL_TRY(spill_st_open(path, &s->st, e));
  }
  s->used = calloc((size_t)imp_src_n_tensors(s) + 1, 1);
  SPILL_FAIL_IF(e, !s->used, SPILL_E_NOMEM, "out of memory");
  return SPILL_OK;
}

void imp_src_close(imp_src *s) {
  if (!s) return;
  spill_gguf_close(&s->gg);
  spill_st_close(&s->st);
  free(s->used);
  memset(s, 0, sizeof *s);
}

void imp_plan_free(imp_plan *p) {
  if (!p) return;
  if (p->moe)
    for (int l = 0; l < spill_arch_n_moe(&p->arch); l++)
      for (int k = 0; k < SPILL_SEC_COUNT; k++) {
        free(p->moe[l].per[k]);
        free(p->moe[l].scale[k]);
      }
  free(p->moe);
  free(p->trunk);
  memset(p, 0, sizeof *p);
}

/* ---- the plan ---- */

enum { ARCH_QWEN3MOE = 0, ARCH_OLMOE = 1, ARCH_MIXTRAL = 2 };

typedef struct shape_cfg {
  int arch;
  int V, D, L, H, Hk, d, E, k, F; /* vocab, d_model, layers, heads, kv heads, head_dim, experts, top-k, d_expert */
  double eps, theta;
  int norm_topk, tied, bos, eos;
  int gguf_llama; /* GGUF llama: q/k rows permuted by the converter */
} shape_cfg;

int imp_check_shape(const spill_src_tensor *t, int ndim, uint64_t a, uint64_t b, spill_err *e) {
  int ok = t->ndim == ndim && t->shape[0] == a && (ndim == 1 || t->shape[1] == b);
  if (ok) return SPILL_OK;
  char got[96] = "";
  for (int i = 0; i < t->ndim; i++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu", i ? ", " : "",
             (unsigned long long)t->shape[i]);
  if (ndim == 1)
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: shape [%s], the config implies [%llu]",
                         t->name, got, (unsigned long long)a);
  return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: shape [%s], the config implies [%llu, %llu]",
                       t->name, got, (unsigned long long)a, (unsigned long long)b);
}

int imp_need(imp_src *s, const char *name, const spill_src_tensor **out, spill_err *e) {
  *out = imp_src_find(s, name);
  SPILL_FAIL_IF(e, !*out, SPILL_E_FORMAT, "%s tensor %s is missing", s->arch_name, name);
  return SPILL_OK;
}

int imp_add_trunk(imp_src *s, imp_plan *p, const char *dst, const char *src, int ndim,
                  uint64_t rows, uint64_t cols, int unpermute, spill_err *e) {
  imp_trunk *t = &p->trunk[p->n_trunk];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", dst);
  SPILL_TRY(imp_need(s, src, &t->src, e));
  SPILL_TRY(imp_check_shape(t->src, ndim, rows, cols, e));
  t->ndim = ndim;
  t->rows = rows;
  t->cols = ndim == 1 ? 1 : cols;
  t->unpermute_heads = unpermute;
  if (!s->is_gguf && t->src->dtype == SPILL_SRC_F8_E4M3) {
    char sn[SPILL_SRC_NAME_MAX + 16];
    snprintf(sn, sizeof sn, "%s_scale_inv", src);
    SPILL_TRY(imp_need(s, sn, &t->scale, e));
  }
  p->n_trunk++;
  return SPILL_OK;
}

/* ---- Hugging Face config.json ---- */

typedef struct cfg_reader {
  const cJSON *root;
  const char *file;
  const char *arch;
  const char *const *allowed;
  int n_allowed;
} cfg_reader;

static int cfg_int(const cJSON *root, const char *key, int64_t lo, int64_t hi, int *out, int dflt,
                   int required, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    SPILL_FAIL_IF(e, required, SPILL_E_FORMAT, "config.json: %s is missing", key);
    *out = dflt;
    return SPILL_OK;
  }
  int64_t x;
  SPILL_TRY(spill_json_int(root, key, "config.json", lo, hi, &x, SPILL_E_FORMAT, e));
  *out = (int)x;
  return SPILL_OK;
}

/* Keys that do not change the forward pass (bookkeeping, training-only,
 * generation defaults). Any key neither here nor read by an architecture is
 * an error. */
static const char *const k_harmless[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "use_cache", "initializer_range", "max_position_embeddings",
    "output_router_logits", "router_aux_loss_coef", "attention_dropout", "pad_token_id",
    "return_dict", "output_attentions", "output_hidden_states", "torchscript",
    "router_jitter_noise", "router_z_loss_coef", "tokenizer_class", "auto_map", "bos_token_id",
    "eos_token_id", NULL};

static int in_list(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

int imp_cfg_harmless(const char *key) { return in_list(k_harmless, key); }
int imp_in_list(const char *const *l, const char *k) { return in_list(l, k); }

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

static int first_int(const cJSON *v, int *out) {
  if (cJSON_IsArray(v)) v = v->child;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
      v->valuedouble > 16777216)
    return 0;
  *out = (int)v->valuedouble;
  return 1;
}

/* quantization_config: only block-wise FP8 e4m3 (DeepSeek-V3 / Kimi-K2),
 * its weight_block_size into s->fp8_block. */
int imp_cfg_quant(const cJSON *root, imp_src *s, spill_err *e) {
  int rc = SPILL_OK;
  {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (q && !cJSON_IsNull(q)) {
      const cJSON *m = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
      const cJSON *f = cJSON_GetObjectItemCaseSensitive(q, "fmt");
      const cJSON *b = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
      if (!cJSON_IsString(m) || strcmp(m->valuestring, "fp8") ||
          (f && (!cJSON_IsString(f) || strcmp(f->valuestring, "e4m3"))) || !cJSON_IsArray(b) ||
          cJSON_GetArraySize(b) != 2 || !cJSON_IsNumber(b->child) || !cJSON_IsNumber(b->child->next) ||
          b->child->valuedouble < 1 || b->child->valuedouble > 65536 ||
          b->child->next->valuedouble < 1 || b->child->next->valuedouble > 65536)
        rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "config.json: quantization_config is not block-wise fp8 e4m3 "
                           "(quant_method \"fp8\", weight_block_size [r, c])");
      else {
        s->fp8_block[0] = (uint32_t)b->child->valuedouble;
        s->fp8_block[1] = (uint32_t)b->child->next->valuedouble;
      }
    }
  }
  return rc;
}

cJSON *imp_hf_config(const char *dir, const char **model_type) {
  char path[4200], *json = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  spill_err ig = {0};
  *model_type = NULL;
  if (spill_read_file(path, 16u << 20, &json, &len, &ig) != SPILL_OK) return NULL;
  cJSON *root = cJSON_ParseWithLength(json, len);
  free(json);
  const cJSON *mt = root ? cJSON_GetObjectItemCaseSensitive(root, "model_type") : NULL;
  if (cJSON_IsString(mt)) *model_type = mt->valuestring;
  return root;
}

/* eos_token_id, and bos_token_id when tokenizer_config.json adds BOS. */
int imp_cfg_bos_eos(const cJSON *root, const char *dir, int *bos, int *eos, spill_err *e) {
  int rc = SPILL_OK;
  *bos = -1;
  *eos = -1;
  if (rc == SPILL_OK) {
    const cJSON *eo = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (eo && !cJSON_IsNull(eo) && !first_int(eo, eos))
      rc = spill_err_set(e, SPILL_E_FORMAT, "config.json: eos_token_id is not a token id");
    /* BOS only when the tokenizer adds it (tokenizer_config.json add_bos_token) */
    char tp[4200], *tj = NULL;
    size_t tl;
    snprintf(tp, sizeof tp, "%s/tokenizer_config.json", dir);
    spill_err ig = {0};
    if (rc == SPILL_OK && spill_read_file(tp, 64u << 20, &tj, &tl, &ig) == SPILL_OK) {
      cJSON *tr = cJSON_ParseWithLength(tj, tl);
      const cJSON *ab = tr ? cJSON_GetObjectItemCaseSensitive(tr, "add_bos_token") : NULL;
      const cJSON *bo = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
      if (cJSON_IsTrue(ab) && bo && !first_int(bo, bos))
        rc = spill_err_set(e, SPILL_E_FORMAT, "config.json: bos_token_id is not a token id");
      cJSON_Delete(tr);
      free(tj);
    }
  }
  return rc;
}

static int hf_config(imp_src *s, const char *dir, shape_cfg *c, spill_err *e) {
  char path[4200], *json = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  SPILL_TRY(spill_read_file(path, 16u << 20, &json, &len, e));
  cJSON *root = cJSON_ParseWithLength(json, len);
  free(json);
  SPILL_FAIL_IF(e, !cJSON_IsObject(root), SPILL_E_FORMAT, "%s: not a JSON object", path);
  int rc = SPILL_OK;
  const char *mt = NULL;
  rc = spill_json_str(root, "model_type", "config.json", 31, &mt, SPILL_E_FORMAT, e);
  if (rc == SPILL_OK) {
    snprintf(s->arch_name, sizeof s->arch_name, "%s", mt);
    if (!strcmp(mt, "qwen3_moe")) c->arch = ARCH_QWEN3MOE;
    else if (!strcmp(mt, "olmoe")) c->arch = ARCH_OLMOE;
    else if (!strcmp(mt, "mixtral")) c->arch = ARCH_MIXTRAL;
    else
      rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "config.json: model_type \"%s\" is not supported (qwen3_moe, olmoe, "
                         "mixtral, deepseek_v2, deepseek_v3, kimi_k2, kimi_linear)",
                         mt);
  }
  /* keys read per architecture. Checked against real config.json files
   * (import_test.sh "real config.json key set"): Qwen/Qwen3-30B-A3B
   * (transformers 4.51.0), allenai/OLMoE-1B-7B-0125-Instruct and
   * mistralai/Mixtral-8x7B-v0.1 (4.36.0.dev0): every key of each is in
   * k_harmless or in its family's list below. */
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
  const char *const *keys = c->arch == ARCH_QWEN3MOE ? qwen : c->arch == ARCH_OLMOE ? olmoe : mixtral;
  for (const cJSON *it = root->child; it && rc == SPILL_OK; it = it->next)
    if (!in_list(k_harmless, it->string) && !in_list(keys, it->string))
      rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "config.json: key \"%.80s\" is not understood for %s (it may change the "
                         "maths; refusing rather than importing a different model)",
                         it->string, s->arch_name);
  if (rc == SPILL_OK) rc = cfg_int(root, "vocab_size", 1, 16777216, &c->V, 0, 1, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "hidden_size", 1, 1048576, &c->D, 0, 1, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "num_hidden_layers", 1, SPILL_MAX_LAYERS, &c->L, 0, 1, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "num_attention_heads", 1, 4096, &c->H, 0, 1, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "num_key_value_heads", 1, 4096, &c->Hk, c->H, 0, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "head_dim", 2, 4096, &c->d, c->D / c->H, 0, e);
  if (rc == SPILL_OK)
    rc = cfg_int(root, c->arch == ARCH_MIXTRAL ? "num_local_experts" : "num_experts", 1,
                 SPILL_MAX_EXPERTS, &c->E, 0, 1, e);
  if (rc == SPILL_OK) rc = cfg_int(root, "num_experts_per_tok", 1, SPILL_MAX_TOPK, &c->k, 0, 1, e);
  if (rc == SPILL_OK)
    rc = cfg_int(root, c->arch == ARCH_QWEN3MOE ? "moe_intermediate_size" : "intermediate_size", 1,
                 1048576, &c->F, 0, 1, e);
  if (rc == SPILL_OK)
    rc = spill_json_num(root, "rms_norm_eps", "config.json", 1e-30, 1, &c->eps, SPILL_E_FORMAT, e);
  if (rc == SPILL_OK)
    rc = spill_json_num_opt(root, "rope_theta", "config.json", 1e-6, 1e12, 10000.0, &c->theta,
                            SPILL_E_FORMAT, e);
  if (rc == SPILL_OK)
    rc = spill_json_bool_opt(root, "norm_topk_prob", "config.json", c->arch == ARCH_MIXTRAL,
                             &c->norm_topk, SPILL_E_FORMAT, e);
  if (rc == SPILL_OK)
    rc = spill_json_bool_opt(root, "tie_word_embeddings", "config.json", 0, &c->tied, SPILL_E_FORMAT, e);
  /* values whose maths we implement */
  if (rc == SPILL_OK) rc = want_null_or(root, "attention_bias", is_false, "attention biases", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "hidden_act", is_silu, "only silu", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "rope_scaling", never, "RoPE scaling", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "clip_qkv", never, "q/k/v clipping", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "decoder_sparse_step", is_one, "dense layers between MoE layers", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "mlp_only_layers", is_empty_arr, "dense layers between MoE layers", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "use_sliding_window", is_false, "sliding-window attention", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "layer_types", all_full_attn, "sliding-window layers", e);
  if (rc == SPILL_OK && c->arch == ARCH_MIXTRAL)
    rc = want_null_or(root, "sliding_window", never, "sliding-window attention", e);
  if (rc == SPILL_OK) rc = want_null_or(root, "router_jitter_noise", is_zero, "router noise", e);
  if (rc == SPILL_OK) rc = imp_cfg_quant(root, s, e);
  if (rc == SPILL_OK) rc = imp_cfg_bos_eos(root, dir, &c->bos, &c->eos, e);
  cJSON_Delete(root);
  return rc;
}

/* ---- GGUF metadata ---- */

int imp_gguf_int(const spill_gguf *g, const char *arch, const char *key, int lo, int hi, int *out,
                 int dflt, int required, spill_err *e) {
  char k[160];
  snprintf(k, sizeof k, "%s.%s", arch, key);
  if (!spill_gguf_find_kv(g, k)) {
    SPILL_FAIL_IF(e, required, SPILL_E_FORMAT, "GGUF key %s is missing", k);
    *out = dflt;
    return SPILL_OK;
  }
  uint64_t v;
  SPILL_TRY(spill_gguf_get_u64(g, k, &v, e));
  SPILL_FAIL_IF(e, v < (uint64_t)lo || v > (uint64_t)hi, SPILL_E_FORMAT,
                "GGUF key %s = %llu out of range [%d, %d]", k, (unsigned long long)v, lo, hi);
  *out = (int)v;
  return SPILL_OK;
}

static int gguf_config(imp_src *s, shape_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  const char *an;
  SPILL_TRY(spill_gguf_get_str(g, "general.architecture", &an, NULL, e));
  snprintf(s->arch_name, sizeof s->arch_name, "%s", an);
  if (!strcmp(an, "qwen3moe")) c->arch = ARCH_QWEN3MOE;
  else if (!strcmp(an, "olmoe")) c->arch = ARCH_OLMOE;
  else if (!strcmp(an, "llama")) { c->arch = ARCH_MIXTRAL; c->gguf_llama = 1; }
  else
    return spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "GGUF general.architecture \"%.40s\" is not supported (qwen3moe, olmoe, "
                         "llama with experts, deepseek2, kimi-linear)", an);
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
  SPILL_TRY(imp_gguf_int(g, an, c->arch == ARCH_QWEN3MOE ? "expert_feed_forward_length" : "feed_forward_length",
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
  /* maths-changing keys we do not implement */
  static const char *const bad[] = {"rope.scaling.type", "attention.sliding_window",
                                    "attention.clamp_kqv", "expert_shared_count", NULL};
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
  /* routing: llama.cpp renormalises for qwen3moe and llama (Mixtral), not olmoe */
  c->norm_topk = c->arch != ARCH_OLMOE;
  snprintf(k, sizeof k, "%s.expert_weights_norm", an);
  if (spill_gguf_find_kv(g, k)) SPILL_TRY(spill_gguf_get_bool(g, k, &c->norm_topk, e));
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2, SPILL_E_FORMAT, "%s tensor token_embd.weight is missing", an);
  SPILL_FAIL_IF(e, emb->shape[0] > 16777216, SPILL_E_FORMAT, "token_embd.weight: vocabulary too large");
  c->V = (int)emb->shape[0];
  c->tied = !spill_gguf_find(g, "output.weight");
  SPILL_FAIL_IF(e, c->tied && c->arch == ARCH_OLMOE, SPILL_E_FORMAT, "olmoe tensor output.weight is missing");
  /* llama.cpp adds BOS by default for llama vocabularies */
  return imp_gguf_bos_eos(g, c->V, c->arch == ARCH_MIXTRAL, &c->bos, &c->eos, e);
}

int imp_gguf_bos_eos(const spill_gguf *g, int V, int add_bos_dflt, int *bos, int *eos, spill_err *e) {
  *bos = *eos = -1;
  int add_bos = add_bos_dflt;
  if (spill_gguf_find_kv(g, "tokenizer.ggml.add_bos_token"))
    SPILL_TRY(spill_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos, e));
  uint64_t v;
  if (add_bos && spill_gguf_find_kv(g, "tokenizer.ggml.bos_token_id")) {
    SPILL_TRY(spill_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &v, e));
    *bos = v < (uint64_t)V ? (int)v : -1;
  }
  if (spill_gguf_find_kv(g, "tokenizer.ggml.eos_token_id")) {
    SPILL_TRY(spill_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &v, e));
    *eos = v < (uint64_t)V ? (int)v : -1;
  }
  return SPILL_OK;
}

int imp_gguf_experts(imp_src *s, imp_moe_layer *m, int k, const char *name, uint64_t E, uint64_t rows,
                     uint64_t cols, spill_err *e) {
  SPILL_TRY(imp_need(s, name, &m->stacked[k], e));
  const spill_src_tensor *t = m->stacked[k];
  if (!(t->ndim == 3 && t->shape[0] == E && t->shape[1] == rows && t->shape[2] == cols))
    return spill_err_set(e, SPILL_E_FORMAT,
                         "tensor %s: shape is not [%llu, %llu, %llu] (experts, rows, cols) as the metadata implies",
                         name, (unsigned long long)E, (unsigned long long)rows, (unsigned long long)cols);
  return SPILL_OK;
}

int imp_add_kv_b_split(imp_src *s, imp_plan *p, const char *pre, int l, uint64_t H, uint64_t dc,
                       uint64_t dn, uint64_t dv, spill_err *e) {
  char b[200];
  imp_trunk *t = &p->trunk[p->n_trunk];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "blk.%d.attn_kv_b", l);
  snprintf(b, sizeof b, "%sattn_k_b.weight", pre);
  SPILL_TRY(imp_need(s, b, &t->src, e));
  snprintf(b, sizeof b, "%sattn_v_b.weight", pre);
  SPILL_TRY(imp_need(s, b, &t->v_b, e));
  if (!(t->src->ndim == 3 && t->src->shape[0] == H && t->src->shape[1] == dc && t->src->shape[2] == dn) ||
      !(t->v_b->ndim == 3 && t->v_b->shape[0] == H && t->v_b->shape[1] == dv && t->v_b->shape[2] == dc))
    return spill_err_set(e, SPILL_E_FORMAT,
                         "tensors %sattn_k_b / attn_v_b: shapes are not [%llu, %llu, %llu] / [%llu, %llu, %llu]",
                         pre, (unsigned long long)H, (unsigned long long)dc, (unsigned long long)dn,
                         (unsigned long long)H, (unsigned long long)dv, (unsigned long long)dc);
  t->ndim = 2;
  t->rows = H * (dn + dv);
  t->cols = dc;
  t->kvb_heads = (uint32_t)H;
  t->kvb_dn = (uint32_t)dn;
  t->kvb_dv = (uint32_t)dv;
  p->n_trunk++;
  return SPILL_OK;
}

/* ---- tensors ---- */

static int plan_tensors(imp_src *s, const shape_cfg *c, imp_plan *p, spill_err *e) {
  const int G = s->is_gguf;
  const uint64_t D = (uint64_t)c->D, V = (uint64_t)c->V, H = (uint64_t)c->H, Hk = (uint64_t)c->Hk,
                 d = (uint64_t)c->d, E = (uint64_t)c->E, F = (uint64_t)c->F;
  p->trunk = calloc((size_t)(3 + 10 * c->L), sizeof *p->trunk);
  p->moe = calloc((size_t)c->L, sizeof *p->moe);
  SPILL_FAIL_IF(e, !p->trunk || !p->moe, SPILL_E_NOMEM, "out of memory");
  char a[160], b[160];
  SPILL_TRY(imp_add_trunk(s, p, "tok_embd", G ? "token_embd.weight" : "model.embed_tokens.weight", 2, V, D, 0, e));
  SPILL_TRY(imp_add_trunk(s, p, "output_norm", G ? "output_norm.weight" : "model.norm.weight", 1, D, 0, 0, e));
  const char *out = G ? (c->tied ? "token_embd.weight" : "output.weight")
                      : (c->tied ? "model.embed_tokens.weight" : "lm_head.weight");
  SPILL_TRY(imp_add_trunk(s, p, "output", out, 2, V, D, 0, e));
  static const char *const hf_exp[3][2] = {{"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
  static const char *const gg_exp[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  const int mix = c->arch == ARCH_MIXTRAL;
  for (int l = 0; l < c->L; l++) {
    char pre[64];
    snprintf(pre, sizeof pre, G ? "blk.%d." : "model.layers.%d.", l);
#define T(dst, g, h, nd, r, co, up)                                         \
  do {                                                                      \
    snprintf(a, sizeof a, "blk.%d.%s", l, dst);                             \
    snprintf(b, sizeof b, "%s%s", pre, G ? g : h);                          \
    SPILL_TRY(imp_add_trunk(s, p, a, b, nd, r, co, up, e));                     \
  } while (0)
    T("attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, 0);
    T("attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, H * d, D, c->gguf_llama ? c->H : 0);
    T("attn_k", "attn_k.weight", "self_attn.k_proj.weight", 2, Hk * d, D, c->gguf_llama ? c->Hk : 0);
    T("attn_v", "attn_v.weight", "self_attn.v_proj.weight", 2, Hk * d, D, 0);
    T("attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * d, 0);
    if (c->arch == ARCH_QWEN3MOE) {
      T("attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, d, 0, 0);
      T("attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, d, 0, 0);
    } else if (c->arch == ARCH_OLMOE) {
      T("attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, H * d, 0, 0);
      T("attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, Hk * d, 0, 0);
    }
    T("ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", 1, D, 0, 0);
    T("ffn_gate_inp", "ffn_gate_inp.weight", mix ? "block_sparse_moe.gate.weight" : "mlp.gate.weight", 2, E, D, 0);
#undef T
    imp_moe_layer *m = &p->moe[l];
    for (int k = 0; k < SPILL_SEC_COUNT; k++) {
      const uint64_t rows = k == 2 ? D : F, cols = k == 2 ? F : D;
      if (G) {
        snprintf(b, sizeof b, "blk.%d.%s.weight", l, gg_exp[k]);
        SPILL_TRY(imp_gguf_experts(s, m, k, b, E, rows, cols, e));
      } else {
        SPILL_TRY(imp_hf_experts(s, m, k, pre, mix ? "block_sparse_moe.experts" : "mlp.experts", hf_exp[k][mix],
                                 E, rows, cols, e));
      }
    }
  }
  return imp_check_consumed(s, p, -1, e);
}

int imp_hf_experts(imp_src *s, imp_moe_layer *m, int k, const char *pre, const char *mid, const char *leaf,
                   uint64_t E, uint64_t rows, uint64_t cols, spill_err *e) {
  char b[SPILL_SRC_NAME_MAX];
  m->per[k] = calloc((size_t)E, sizeof *m->per[k]);
  m->scale[k] = calloc((size_t)E, sizeof *m->scale[k]);
  SPILL_FAIL_IF(e, !m->per[k] || !m->scale[k], SPILL_E_NOMEM, "out of memory");
  for (uint64_t x = 0; x < E; x++) {
    snprintf(b, sizeof b, "%s%s.%llu.%s.weight", pre, mid, (unsigned long long)x, leaf);
    SPILL_TRY(imp_need(s, b, &m->per[k][x], e));
    SPILL_TRY(imp_check_shape(m->per[k][x], 2, rows, cols, e));
    if (m->per[k][x]->dtype == SPILL_SRC_F8_E4M3) {
      char sn[SPILL_SRC_NAME_MAX + 16];
      snprintf(sn, sizeof sn, "%s_scale_inv", b);
      SPILL_TRY(imp_need(s, sn, &m->scale[k][x], e));
    }
  }
  return SPILL_OK;
}

int imp_check_consumed(imp_src *s, const imp_plan *p, int skip_layer_from, spill_err *e) {
  for (int i = 0; i < imp_src_n_tensors(s); i++) {
    const char *n = imp_src_tensor(s, i)->name;
    int layer;
    if (s->used[i] || ends_with(n, "rotary_emb.inv_freq")) continue;
    if (skip_layer_from >= 0 && sscanf(n, "model.layers.%d.", &layer) == 1 && layer >= skip_layer_from)
      continue;
    return spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "source tensor %s is not part of the %s model as implemented (refusing to "
                         "drop it: it would change the maths)",
                         n, s->arch_name);
  }
  /* FP8 tensors need the block grid */
  for (int i = 0; i < p->n_trunk; i++) {
    const imp_trunk *t = &p->trunk[i];
    if (!t->scale) continue;
    SPILL_FAIL_IF(e, !s->fp8_block[0], SPILL_E_FORMAT,
                  "tensor %s is FP8 but config.json has no quantization_config.weight_block_size",
                  t->src->name);
  }
  return SPILL_OK;
}

int imp_plan_build(imp_src *s, imp_plan *p, spill_err *e) {
  memset(p, 0, sizeof *p);
  shape_cfg c;
  memset(&c, 0, sizeof c);
  /* the directory of the checkpoint */
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", !s->is_gguf && s->st.n_files ? s->st.paths[0] : ".");
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
  int handled = 0;
  int drc = imp_deepseek_plan(s, dir, p, &handled, e);
  if (!handled) drc = imp_kimi_linear_plan(s, dir, p, &handled, e);
  if (handled) {
    if (drc != SPILL_OK) imp_plan_free(p);
    return drc;
  }
  if (s->is_gguf) {
    SPILL_TRY(gguf_config(s, &c, e));
  } else {
    SPILL_TRY(hf_config(s, dir, &c, e));
  }
  SPILL_FAIL_IF(e, c.H % c.Hk != 0, SPILL_E_FORMAT, "%s: %d heads not a multiple of %d kv heads",
                s->arch_name, c.H, c.Hk);
  SPILL_FAIL_IF(e, c.k > c.E, SPILL_E_FORMAT, "%s: top-k %d > %d experts", s->arch_name, c.k, c.E);
  SPILL_FAIL_IF(e, c.d % 2, SPILL_E_FORMAT, "%s: odd head dim %d", s->arch_name, c.d);
  SPILL_FAIL_IF(e, c.arch == ARCH_OLMOE && c.Hk != c.H && s->is_gguf, SPILL_E_FORMAT,
                "olmoe: llama.cpp needs head_count_kv == head_count");
  if (c.bos >= c.V) c.bos = -1;
  if (c.eos >= c.V) c.eos = -1;
  spill_arch *a = &p->arch;
  snprintf(a->family, sizeof a->family, "%s", s->arch_name);
  a->vocab_size = c.V;
  a->d_model = c.D;
  a->n_layers = c.L;
  a->n_dense_layers = 0;
  a->d_ff = 0;
  a->norm_eps = c.eps;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = c.bos;
  a->eos_id = c.eos;
  for (int l = 0; l < c.L; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  a->gqa.n_heads = c.H;
  a->gqa.n_kv_heads = c.Hk;
  a->gqa.head_dim = c.d;
  a->gqa.rope_theta = c.theta;
  a->gqa.qk_norm = c.arch == ARCH_QWEN3MOE ? SPILL_QK_NORM_HEAD
                   : c.arch == ARCH_OLMOE  ? SPILL_QK_NORM_FULL
                                           : SPILL_QK_NORM_NONE;
  a->moe.n_experts = c.E;
  a->moe.top_k = c.k;
  a->moe.d_expert = c.F;
  a->moe.router = SPILL_ROUTER_SOFTMAX;
  a->moe.norm_topk = c.norm_topk;
  a->moe.routed_scale = 1.0;
  int rc = plan_tensors(s, &c, p, e);
  if (rc != SPILL_OK) imp_plan_free(p);
  return rc;
}
