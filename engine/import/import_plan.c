/* engine/import/import_plan.c: what every architecture's plan shares, below
 * the architecture files (arch_*.c) and the registry (arch_registry.c) that
 * picks one: access to the source's tensors, the plan's trunk and expert
 * entries (shape-checked, FP8 scales found), the trunk's two ends
 * (embedding, output norm, output; tied or not), a layer tensor under its
 * GGUF or Hugging Face name, the routed, shared and dense FFN blocks, the
 * config.json / GGUF readers every plan uses (bounded integers, the
 * unknown-key refusal, block FP8, BOS/EOS) and the check that every source
 * tensor was consumed.
 *
 * Strictness is the point: every config key is either used, known not to
 * change the maths (training-only, bookkeeping), or checked to have the value
 * whose maths we implement; anything else is an error naming the key. Every
 * source tensor the plan does not consume is an error too (a bias we would
 * silently drop changes the model), except the known-derived
 * rotary_emb.inv_freq. Shapes are checked against the config. This file calls
 * no architecture file and not the registry.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/import/import_internal.h"

/* ---- source access ---- */

int imp_src_n_tensors(const imp_src *s) { return s->is_gguf ? s->gg.n_tensors : s->st.n_tensors; }

const spill_src_tensor *imp_src_tensor(const imp_src *s, int i) {
  return s->is_gguf ? &s->gg.t[i] : &s->st.t[i];
}

const spill_src_tensor *imp_src_find(imp_src *s, const char *name) {
  char full[SPILL_SRC_NAME_MAX + 64];
  if (!s->is_gguf && s->hf_prefix[0]) {
    snprintf(full, sizeof full, "%s%s", s->hf_prefix, name);
    name = full;
  }
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
        free(p->moe[l].mx_scale[k]);
      }
  free(p->moe);
  free(p->trunk);
  memset(p, 0, sizeof *p);
}

/* ---- plan entries ---- */

static const char *hf_model(const imp_src *s) { return s->hf_model[0] ? s->hf_model : "model."; }

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
  SPILL_FAIL_IF(e, !*out, SPILL_E_FORMAT, "%s tensor %s%s is missing", s->arch_name,
                s->is_gguf ? "" : s->hf_prefix, name);
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

int imp_add_layer(imp_src *s, imp_plan *p, int l, const char *dst, const char *gguf, const char *hf, int ndim,
                  uint64_t rows, uint64_t cols, int unpermute, spill_err *e) {
  char a[160], b[200];
  snprintf(a, sizeof a, "blk.%d.%s", l, dst);
  if (s->is_gguf) snprintf(b, sizeof b, "blk.%d.%s", l, gguf);
  else snprintf(b, sizeof b, "%slayers.%d.%s", hf_model(s), l, hf);
  return imp_add_trunk(s, p, a, b, ndim, rows, cols, unpermute, e);
}

int imp_plan_init(imp_src *s, imp_plan *p, int max_trunk, int n_moe, uint64_t V, uint64_t D, int tied,
                  spill_err *e) {
  const int G = s->is_gguf;
  p->trunk = calloc((size_t)max_trunk, sizeof *p->trunk);
  p->moe = calloc((size_t)n_moe, sizeof *p->moe);
  SPILL_FAIL_IF(e, !p->trunk || !p->moe, SPILL_E_NOMEM, "out of memory");
  char emb[64], norm[64];
  snprintf(emb, sizeof emb, "%sembed_tokens.weight", hf_model(s));
  snprintf(norm, sizeof norm, "%snorm.weight", hf_model(s));
  SPILL_TRY(imp_add_trunk(s, p, "tok_embd", G ? "token_embd.weight" : emb, 2, V, D, 0, e));
  SPILL_TRY(imp_add_trunk(s, p, "output_norm", G ? "output_norm.weight" : norm, 1, D, 0, 0, e));
  const char *out = G ? (tied ? "token_embd.weight" : "output.weight") : (tied ? emb : "lm_head.weight");
  return imp_add_trunk(s, p, "output", out, 2, V, D, 0, e);
}

int imp_plan_experts(imp_src *s, imp_moe_layer *m, int l, uint64_t E, uint64_t D, uint64_t F, const char *hf_mid,
                     const char *const hf_leaf[SPILL_SEC_COUNT], spill_err *e) {
  static const char *const gg[SPILL_SEC_COUNT] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  char pre[64], b[96];
  if (s->is_gguf) snprintf(pre, sizeof pre, "blk.%d.", l);
  else snprintf(pre, sizeof pre, "%slayers.%d.", hf_model(s), l);
  for (int k = 0; k < SPILL_SEC_COUNT; k++) {
    const uint64_t rows = k == SPILL_SEC_DOWN ? D : F, cols = k == SPILL_SEC_DOWN ? F : D;
    if (s->is_gguf) {
      snprintf(b, sizeof b, "%s%s.weight", pre, gg[k]);
      SPILL_TRY(imp_gguf_experts(s, m, k, b, E, rows, cols, e));
    } else {
      SPILL_TRY(imp_hf_experts(s, m, k, pre, hf_mid, hf_leaf[k], E, rows, cols, e));
    }
  }
  return SPILL_OK;
}

int imp_plan_dense_ffn(imp_src *s, imp_plan *p, int l, uint64_t D, uint64_t Fd, spill_err *e) {
  SPILL_TRY(imp_add_layer(s, p, l, "ffn_gate", "ffn_gate.weight", "mlp.gate_proj.weight", 2, Fd, D, 0, e));
  SPILL_TRY(imp_add_layer(s, p, l, "ffn_up", "ffn_up.weight", "mlp.up_proj.weight", 2, Fd, D, 0, e));
  return imp_add_layer(s, p, l, "ffn_down", "ffn_down.weight", "mlp.down_proj.weight", 2, D, Fd, 0, e);
}

int imp_plan_shared_experts(imp_src *s, imp_plan *p, int l, uint64_t D, uint64_t S, const char *hf_mid,
                            spill_err *e) {
  static const char *const dst[3] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
  static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int k = 0; k < 3; k++) {
    char g[48], h[160];
    snprintf(g, sizeof g, "%s.weight", dst[k]);
    snprintf(h, sizeof h, "%s.%s.weight", hf_mid, hf[k]);
    SPILL_TRY(imp_add_layer(s, p, l, dst[k], g, h, 2, k == 2 ? D : S, k == 2 ? S : D, 0, e));
  }
  return SPILL_OK;
}

int imp_add_squeezed(imp_src *s, imp_plan *p, int l, const char *dst, const char *gguf, const char *hf,
                     uint64_t rows, uint64_t cols, int f32, int longer, spill_err *e) {
  imp_trunk *t = &p->trunk[p->n_trunk];
  memset(t, 0, sizeof *t);
  char b[200];
  snprintf(t->name, sizeof t->name, "blk.%d.%s", l, dst);
  if (s->is_gguf) snprintf(b, sizeof b, "blk.%d.%s", l, gguf);
  else snprintf(b, sizeof b, "%slayers.%d.%s", hf_model(s), l, hf);
  SPILL_TRY(imp_need(s, b, &t->src, e));
  uint64_t got[SPILL_SRC_MAX_DIMS], want[2];
  int ng = 0, nw = 0;
  for (int i = 0; i < t->src->ndim; i++)
    if (t->src->shape[i] != 1) got[ng++] = t->src->shape[i];
  if (rows != 1) want[nw++] = rows;
  if (cols > 1) want[nw++] = cols;
  const int pad_ok = longer && !cols && ng == 1 && nw == 1 && got[0] >= want[0];
  if (!pad_ok && (ng != nw || (nw > 0 && memcmp(got, want, (size_t)nw * sizeof *got))))
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s%s: shape is not [%llu, %llu]%s up to unit dimensions",
                         s->is_gguf ? "" : s->hf_prefix, b, (unsigned long long)rows,
                         (unsigned long long)(cols ? cols : 1), longer ? " (or a longer vector)" : "");
  SPILL_FAIL_IF(e, t->src->dtype == SPILL_SRC_F8_E4M3, SPILL_E_UNSUPPORTED, "tensor %s: FP8 is not supported here",
                t->src->name);
  t->ndim = cols ? 2 : 1;
  t->rows = rows;
  t->cols = cols ? cols : 1;
  t->f32 = f32;
  p->n_trunk++;
  return SPILL_OK;
}

/* ---- Hugging Face config.json ---- */

int imp_cfg_int(const cJSON *r, const char *path, const char *key, int64_t lo, int64_t hi, int dflt, int required,
                int *out, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
  if (!v || cJSON_IsNull(v)) {
    SPILL_FAIL_IF(e, required, SPILL_E_FORMAT, "%s: %s is missing", path, key);
    *out = dflt;
    return SPILL_OK;
  }
  int64_t x;
  SPILL_TRY(spill_json_int(r, key, path, lo, hi, &x, SPILL_E_FORMAT, e));
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

int imp_in_list(const char *const *l, const char *k) { return in_list(l, k); }

int imp_cfg_only_keys(const cJSON *root, const char *arch, const char *const *keys, spill_err *e) {
  for (const cJSON *it = root->child; it; it = it->next)
    if (!in_list(k_harmless, it->string) && !in_list(keys, it->string))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "config.json: key \"%.80s\" is not understood for %s (it may change the "
                           "maths; refusing rather than importing a different model)",
                           it->string, arch);
  return SPILL_OK;
}

int imp_cfg_text_merged(const cJSON *root, const char *path, cJSON **out, spill_err *e) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  SPILL_FAIL_IF(e, tc && !cJSON_IsObject(tc), SPILL_E_FORMAT, "%s: text_config is not an object", path);
  cJSON *m = cJSON_Duplicate(root, 1);
  SPILL_FAIL_IF(e, !m, SPILL_E_NOMEM, "out of memory");
  cJSON_DeleteItemFromObjectCaseSensitive(m, "text_config");
  cJSON_DeleteItemFromObjectCaseSensitive(m, "vision_config"); /* the vision tower is skipped */
  for (const cJSON *it = tc ? tc->child : NULL; it; it = it->next) {
    cJSON *d = cJSON_Duplicate(it, 1);
    if (!d) {
      cJSON_Delete(m);
      return spill_err_set(e, SPILL_E_NOMEM, "out of memory");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, it->string);
    cJSON_AddItemToObject(m, it->string, d);
  }
  *out = m;
  return SPILL_OK;
}

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
      cJSON *tr = NULL;
      rc = spill_json_parse(tj, tl, tp, SPILL_E_FORMAT, &tr, e);
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

int imp_cfg_layer_list(const cJSON *la, const char *path, const char *key, int L, uint8_t *marks,
                       uint8_t bit, spill_err *e) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(la, key);
  if (!a || cJSON_IsNull(a)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsArray(a), SPILL_E_FORMAT, "%s: linear_attn_config.%s is not an array", path, key);
  for (const cJSON *x = a->child; x; x = x->next) {
    const double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
    SPILL_FAIL_IF(e, v != (double)(int)v || v < 1 || v > L, SPILL_E_FORMAT,
                  "%s: linear_attn_config.%s holds %.40s, not a 1-based layer number in [1, %d]", path, key,
                  cJSON_IsNumber(x) ? "a value out of range" : "a non-number", L);
    SPILL_FAIL_IF(e, marks[(int)v - 1] & bit, SPILL_E_FORMAT, "%s: linear_attn_config.%s lists layer %d twice",
                  path, key, (int)v);
    marks[(int)v - 1] |= bit;
  }
  return SPILL_OK;
}

/* Refuses a member of object o (named path) outside keys, naming it. */
static int ct_only(const cJSON *o, const char *path, const char *const *keys, spill_err *e) {
  SPILL_FAIL_IF(e, !cJSON_IsObject(o), SPILL_E_FORMAT, "config.json: %s is not an object", path);
  for (const cJSON *it = o->child; it; it = it->next)
    SPILL_FAIL_IF(e, !in_list(keys, it->string), SPILL_E_UNSUPPORTED,
                  "config.json: %s.%.60s is not understood (it may change the maths; refusing)", path, it->string);
  return SPILL_OK;
}

/* o.key must be absent, null or an empty object/array (a scheme not used). */
static int ct_unused(const cJSON *o, const char *path, const char *key, const char *why, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!v || cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child)) return SPILL_OK;
  return spill_err_set(e, SPILL_E_UNSUPPORTED, "config.json: %s.%s is set: %s is not supported", path, key, why);
}

static int ct_str_is(const cJSON *o, const char *path, const char *key, const char *want, int required,
                     spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if ((!v || cJSON_IsNull(v)) && !required) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsString(v) || strcmp(v->valuestring, want), SPILL_E_UNSUPPORTED,
                "config.json: %s.%s is not \"%s\" (only compressed-tensors %s is supported)", path, key, want,
                "mxfp4-pack-quantized");
  return SPILL_OK;
}

int imp_cfg_ct_mxfp4(const cJSON *q, imp_src *s, spill_err *e) {
  static const char *const top[] = {"quant_method", "format", "config_groups", "ignore", "quantization_status",
                                    "global_compression_ratio", "version", "kv_cache_scheme", "sparsity_config",
                                    "transform_config", "provider", NULL};
  static const char *const grp[] = {"targets", "weights", "input_activations", "output_activations", "format",
                                    NULL};
  static const char *const wts[] = {"num_bits", "type", "group_size", "strategy", "symmetric", "dynamic",
                                    "observer", "observer_kwargs", "actorder", "block_structure", "scale_dtype",
                                    "zp_dtype", NULL};
  const char *P = "quantization_config";
  SPILL_TRY(ct_only(q, P, top, e));
  SPILL_TRY(ct_str_is(q, P, "quant_method", "compressed-tensors", 1, e));
  SPILL_TRY(ct_str_is(q, P, "format", "mxfp4-pack-quantized", 1, e));
  SPILL_TRY(ct_unused(q, P, "kv_cache_scheme", "a quantised KV cache", e));
  SPILL_TRY(ct_unused(q, P, "sparsity_config", "sparse weights", e));
  SPILL_TRY(ct_unused(q, P, "transform_config", "a weight/activation transform", e));
  const cJSON *cg = cJSON_GetObjectItemCaseSensitive(q, "config_groups");
  SPILL_FAIL_IF(e, !cJSON_IsObject(cg) || !cg->child, SPILL_E_FORMAT,
                "config.json: quantization_config.config_groups is missing or empty");
  for (const cJSON *g = cg->child; g; g = g->next) {
    char gp[160], wp[200];
    snprintf(gp, sizeof gp, "%s.config_groups.%.60s", P, g->string);
    SPILL_TRY(ct_only(g, gp, grp, e));
    SPILL_TRY(ct_str_is(g, gp, "format", "mxfp4-pack-quantized", 0, e));
    SPILL_TRY(ct_unused(g, gp, "input_activations", "activation quantisation", e));
    SPILL_TRY(ct_unused(g, gp, "output_activations", "output quantisation", e));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
    snprintf(wp, sizeof wp, "%s.weights", gp);
    SPILL_TRY(ct_only(w, wp, wts, e));
    int bits, gs;
    SPILL_TRY(imp_cfg_int(w, wp, "num_bits", 1, 64, 0, 1, &bits, e));
    SPILL_TRY(imp_cfg_int(w, wp, "group_size", 1, 1 << 20, 32, 0, &gs, e));
    SPILL_FAIL_IF(e, bits != 4 || gs != 32, SPILL_E_UNSUPPORTED,
                  "config.json: %s: num_bits %d / group_size %d: MXFP4 is 4 bits in groups of 32", wp, bits, gs);
    SPILL_TRY(ct_str_is(w, wp, "type", "float", 1, e));
    SPILL_TRY(ct_unused(w, wp, "actorder", "activation ordering", e));
    SPILL_TRY(ct_unused(w, wp, "block_structure", "block quantisation", e));
    const cJSON *sym = cJSON_GetObjectItemCaseSensitive(w, "symmetric");
    SPILL_FAIL_IF(e, sym && !cJSON_IsNull(sym) && !cJSON_IsTrue(sym), SPILL_E_UNSUPPORTED,
                  "config.json: %s.symmetric is not true: MXFP4 has no zero point", wp);
  }
  s->ct_mxfp4 = 1;
  return SPILL_OK;
}

/* ---- GGUF metadata ---- */

int imp_gguf_kda_layers(const spill_gguf *g, const char *arch, int L, uint8_t *is_kda,
                        spill_err *e) {
  char key[128];
  snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  SPILL_FAIL_IF(e, !kv, SPILL_E_FORMAT, "GGUF key %s is missing (it marks the KDA layers)", key);
  memset(is_kda, 0, (size_t)L);
  if (kv->type != SPILL_GGUF_ARRAY) {
    int hk;
    SPILL_TRY(imp_gguf_int(g, arch, "attention.head_count_kv", 0, 4096, &hk, 0, 1, e));
    for (int l = 0; l < L; l++) is_kda[l] = hk == 0;
    return SPILL_OK;
  }
  SPILL_FAIL_IF(e, kv->n != (uint64_t)L, SPILL_E_FORMAT,
                "GGUF key %s has %llu entries, block_count is %d", key, (unsigned long long)kv->n, L);
  for (int l = 0; l < L; l++) {
    int64_t v;
    SPILL_TRY(spill_gguf_arr_i64(kv, (uint64_t)l, &v, e));
    SPILL_FAIL_IF(e, v < 0 || v > 4096, SPILL_E_FORMAT,
                  "GGUF key %s[%d] = %lld out of range [0, 4096]", key, l, (long long)v);
    is_kda[l] = v == 0;
  }
  return SPILL_OK;
}

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

/* uint8 bytes: safetensors U8, or F8_E8M0 for a scale (an e8m0 byte). */
static int is_u8(const spill_src_tensor *t, int e8m0_ok) {
  return t->dtype == SPILL_SRC_OTHER &&
         (!strcmp(t->other_name, "U8") || (e8m0_ok && !strcmp(t->other_name, "F8_E8M0")));
}

int imp_hf_experts_oss(imp_src *s, imp_moe_layer *m, int k, const char *pre, uint64_t E, uint64_t rows,
                       uint64_t cols, uint32_t stride, uint32_t first, spill_err *e) {
  char b[SPILL_SRC_NAME_MAX];
  const spill_src_tensor *bl, *sc;
  SPILL_FAIL_IF(e, cols % 32, SPILL_E_FORMAT, "%s: %llu input columns are not whole MXFP4 blocks of 32", pre,
                (unsigned long long)cols);
  const uint64_t R = rows * stride, nb = cols / 32;
  snprintf(b, sizeof b, "%s_blocks", pre);
  SPILL_TRY(imp_need(s, b, &bl, e));
  SPILL_FAIL_IF(e, !is_u8(bl, 0), SPILL_E_FORMAT, "tensor %s: dtype %s, MXFP4 blocks are U8", bl->name,
                bl->dtype == SPILL_SRC_OTHER ? bl->other_name : spill_src_dtype_traits(bl->dtype)->name);
  SPILL_FAIL_IF(e, !(bl->ndim == 4 && bl->shape[0] == E && bl->shape[1] == R && bl->shape[2] == nb && bl->shape[3] == 16),
                SPILL_E_FORMAT, "tensor %s: shape is not [%llu, %llu, %llu, 16]", bl->name, (unsigned long long)E,
                (unsigned long long)R, (unsigned long long)nb);
  snprintf(b, sizeof b, "%s_scales", pre);
  SPILL_TRY(imp_need(s, b, &sc, e));
  SPILL_FAIL_IF(e, !is_u8(sc, 1), SPILL_E_FORMAT, "tensor %s: dtype %s, MXFP4 scales are e8m0 bytes (U8 or F8_E8M0)",
                sc->name, sc->dtype == SPILL_SRC_OTHER ? sc->other_name : spill_src_dtype_traits(sc->dtype)->name);
  SPILL_FAIL_IF(e, !(sc->ndim == 3 && sc->shape[0] == E && sc->shape[1] == R && sc->shape[2] == nb), SPILL_E_FORMAT,
                "tensor %s: shape is not [%llu, %llu, %llu]", sc->name, (unsigned long long)E, (unsigned long long)R,
                (unsigned long long)nb);
  m->per[k] = calloc((size_t)E, sizeof *m->per[k]);
  m->scale[k] = calloc((size_t)E, sizeof *m->scale[k]);
  m->mx_scale[k] = calloc((size_t)E, sizeof *m->mx_scale[k]);
  SPILL_FAIL_IF(e, !m->per[k] || !m->scale[k] || !m->mx_scale[k], SPILL_E_NOMEM, "out of memory");
  for (uint64_t x = 0; x < E; x++) {
    m->per[k][x] = bl;
    m->mx_scale[k][x] = sc;
  }
  m->oss_stride[k] = stride;
  m->oss_first[k] = first;
  return SPILL_OK;
}

int imp_hf_experts_fused(imp_src *s, imp_moe_layer *m, int k, const char *name, uint64_t E, uint64_t fused_rows,
                         uint64_t first, uint64_t rows, uint64_t cols, spill_err *e) {
  const spill_src_tensor *t;
  SPILL_TRY(imp_need(s, name, &t, e));
  SPILL_FAIL_IF(e, t->dtype != SPILL_SRC_F32 && t->dtype != SPILL_SRC_F16 && t->dtype != SPILL_SRC_BF16,
                SPILL_E_UNSUPPORTED, "tensor %s: dtype %s: fused experts are read as f32, f16 or bf16", t->name,
                t->dtype == SPILL_SRC_OTHER ? t->other_name : spill_src_dtype_traits(t->dtype)->name);
  SPILL_FAIL_IF(e, !(t->ndim == 3 && t->shape[0] == E && t->shape[1] == fused_rows && t->shape[2] == cols),
                SPILL_E_FORMAT, "tensor %s: shape is not [%llu, %llu, %llu] (experts, rows, cols) as the config implies",
                t->name, (unsigned long long)E, (unsigned long long)fused_rows, (unsigned long long)cols);
  m->per[k] = calloc((size_t)E, sizeof *m->per[k]);
  m->scale[k] = calloc((size_t)E, sizeof *m->scale[k]);
  SPILL_FAIL_IF(e, !m->per[k] || !m->scale[k], SPILL_E_NOMEM, "out of memory");
  for (uint64_t x = 0; x < E; x++) m->per[k][x] = t;
  m->fused_rows[k] = (uint32_t)fused_rows;
  m->fused_first[k] = (uint32_t)first;
  (void)rows;
  return SPILL_OK;
}

int imp_hf_experts_mxfp4(imp_src *s, imp_moe_layer *m, int k, const char *pre, const char *mid, const char *leaf,
                         uint64_t E, uint64_t rows, uint64_t cols, spill_err *e) {
  char b[SPILL_SRC_NAME_MAX];
  SPILL_FAIL_IF(e, cols % 32, SPILL_E_FORMAT, "%s%s.*.%s: %llu input columns are not whole MXFP4 blocks of 32",
                pre, mid, leaf, (unsigned long long)cols);
  m->per[k] = calloc((size_t)E, sizeof *m->per[k]);
  m->scale[k] = calloc((size_t)E, sizeof *m->scale[k]);
  m->mx_scale[k] = calloc((size_t)E, sizeof *m->mx_scale[k]);
  SPILL_FAIL_IF(e, !m->per[k] || !m->scale[k] || !m->mx_scale[k], SPILL_E_NOMEM, "out of memory");
  for (uint64_t x = 0; x < E; x++) {
    const spill_src_tensor *pk, *sc;
    snprintf(b, sizeof b, "%s%s.%llu.%s.weight_packed", pre, mid, (unsigned long long)x, leaf);
    SPILL_TRY(imp_need(s, b, &pk, e));
    SPILL_FAIL_IF(e, !is_u8(pk, 0), SPILL_E_FORMAT, "tensor %s: dtype %s, compressed-tensors MXFP4 packs into U8",
                  pk->name, pk->dtype == SPILL_SRC_OTHER ? pk->other_name : spill_src_dtype_traits(pk->dtype)->name);
    SPILL_TRY(imp_check_shape(pk, 2, rows, cols / 2, e));
    snprintf(b, sizeof b, "%s%s.%llu.%s.weight_scale", pre, mid, (unsigned long long)x, leaf);
    SPILL_TRY(imp_need(s, b, &sc, e));
    SPILL_FAIL_IF(e, !is_u8(sc, 1), SPILL_E_FORMAT, "tensor %s: dtype %s, MXFP4 scales are e8m0 bytes (U8 or F8_E8M0)",
                  sc->name, sc->dtype == SPILL_SRC_OTHER ? sc->other_name : spill_src_dtype_traits(sc->dtype)->name);
    SPILL_TRY(imp_check_shape(sc, 2, rows, cols / 32, e));
    m->per[k][x] = pk;
    m->mx_scale[k][x] = sc;
  }
  return SPILL_OK;
}

int imp_check_consumed(imp_src *s, const imp_plan *p, int skip_layer_from, spill_err *e) {
  for (int i = 0; i < imp_src_n_tensors(s); i++) {
    const char *n = imp_src_tensor(s, i)->name;
    int layer;
    if (s->used[i] || ends_with(n, "rotary_emb.inv_freq")) continue;
    int skip = 0;
    for (const char *const *sp = s->skip_prefixes; sp && *sp && !skip; sp++)
      skip = !strncmp(n, *sp, strlen(*sp));
    if (skip) {
      s->n_skipped++;
      continue;
    }
    if (ends_with(n, ".weight_packed") || ends_with(n, ".weight_scale"))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "source tensor %s: a compressed-tensors MXFP4 tensor outside the routed experts "
                           "(only the routed experts are read as MXFP4; refusing)", n);
    if (skip_layer_from >= 0 &&
        (sscanf(n, s->is_gguf ? "blk.%d." : "model.layers.%d.", &layer) == 1) && layer >= skip_layer_from)
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

