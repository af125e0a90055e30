/* engine/format/manifest_json.c: serialising a spill_manifest to the JSON of
 * docs/FORMAT.md, plus the manifest's small accessors.
 *
 * The output is what spill_manifest_parse accepts: spill_manifest_to_json
 * followed by spill_manifest_parse reproduces the struct field for field
 * (the writer relies on this to validate the container it is about to
 * write). Integers are below 2^53 so cJSON's doubles carry them exactly.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/container.h"
#include "engine/format/format_internal.h"

void spill_manifest_free(spill_manifest *m) {
  if (!m) return;
  free(m->tensors);
  free(m->banks);
  free(m->files);
  free(m->generator_json);
  memset(m, 0, sizeof *m);
}

const spill_tensor_info *spill_manifest_find(const spill_manifest *m, const char *name) {
  if (!m || !name) return NULL;
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
  return NULL;
}

/* cJSON reports allocation failure by returning NULL from the Add calls; we
 * count failures instead of checking each call. */
typedef struct jb {
  int failed;
} jb;

static void num(jb *b, cJSON *o, const char *k, double v) {
  if (!cJSON_AddNumberToObject(o, k, v)) b->failed = 1;
}
static void str(jb *b, cJSON *o, const char *k, const char *v) {
  if (!cJSON_AddStringToObject(o, k, v)) b->failed = 1;
}
static void boolean(jb *b, cJSON *o, const char *k, int v) {
  if (!cJSON_AddBoolToObject(o, k, v ? 1 : 0)) b->failed = 1;
}
static cJSON *obj(jb *b, cJSON *parent, const char *k) {
  cJSON *o = k ? cJSON_AddObjectToObject(parent, k) : cJSON_CreateObject();
  if (!o) b->failed = 1;
  if (o && !k && parent && !cJSON_AddItemToArray(parent, o)) b->failed = 1;
  return o;
}
static cJSON *arr(jb *b, cJSON *parent, const char *k) {
  cJSON *a = cJSON_AddArrayToObject(parent, k);
  if (!a) b->failed = 1;
  return a;
}

static void dtype_group(jb *b, cJSON *o, spill_dtype dt, uint32_t group) {
  str(b, o, "dtype", spill_dtype_name(dt));
  if (dt == SPILL_DT_Q8 || dt == SPILL_DT_Q4) num(b, o, "group", group);
}

static void arch_json(jb *b, cJSON *root, const spill_arch *a) {
  static const char *const kinds[3] = {"gqa", "mla", "kda"};
  cJSON *o = obj(b, root, "arch");
  if (!o) return;
  int used[3] = {0, 0, 0};
  str(b, o, "family", a->family);
  num(b, o, "vocab_size", a->vocab_size);
  num(b, o, "d_model", a->d_model);
  num(b, o, "n_layers", a->n_layers);
  num(b, o, "n_dense_layers", a->n_dense_layers);
  num(b, o, "d_ff", a->d_ff);
  num(b, o, "norm_eps", a->norm_eps);
  str(b, o, "activation", "swiglu");
  num(b, o, "bos_id", a->bos_id);
  num(b, o, "eos_id", a->eos_id);
  cJSON *la = arr(b, o, "layer_attn");
  for (int i = 0; la && i < a->n_layers && i < SPILL_MAX_LAYERS; i++) {
    int k = (int)a->layer_attn[i];
    if (k < 0 || k > 2) k = 0;
    used[k] = 1;
    if (!cJSON_AddItemToArray(la, cJSON_CreateString(kinds[k]))) b->failed = 1;
  }
  /* A config is written when a layer uses it or when it was present (all
   * valid configs have n_heads >= 1), so parse(to_json(m)) == m. */
  if (used[SPILL_ATTN_GQA] || a->gqa.n_heads > 0) {
    cJSON *g = obj(b, o, "gqa");
    if (g) {
      num(b, g, "n_heads", a->gqa.n_heads);
      num(b, g, "n_kv_heads", a->gqa.n_kv_heads);
      num(b, g, "head_dim", a->gqa.head_dim);
      num(b, g, "rope_theta", a->gqa.rope_theta);
      /* written only when used, so containers without it stay byte-identical */
      if (a->gqa.qk_norm == SPILL_QK_NORM_HEAD || a->gqa.qk_norm == SPILL_QK_NORM_FULL)
        if (!cJSON_AddItemToObject(
                g, "qk_norm", cJSON_CreateString(a->gqa.qk_norm == SPILL_QK_NORM_HEAD ? "head" : "full")))
          b->failed = 1;
    }
  }
  if (used[SPILL_ATTN_MLA] || a->mla.n_heads > 0) {
    cJSON *m = obj(b, o, "mla");
    if (m) {
      num(b, m, "n_heads", a->mla.n_heads);
      num(b, m, "q_lora_rank", a->mla.q_lora_rank);
      num(b, m, "kv_lora_rank", a->mla.kv_lora_rank);
      num(b, m, "qk_nope_dim", a->mla.qk_nope_dim);
      num(b, m, "qk_rope_dim", a->mla.qk_rope_dim);
      num(b, m, "v_head_dim", a->mla.v_head_dim);
      boolean(b, m, "use_rope", a->mla.use_rope);
      num(b, m, "rope_theta", a->mla.rope_theta);
      /* written only when used, so older containers stay byte-identical */
      if (a->mla.rope_mscale != 0) num(b, m, "rope_mscale", a->mla.rope_mscale);
      if (a->mla.softmax_scale != 0) num(b, m, "softmax_scale", a->mla.softmax_scale);
      if (a->mla.kv_norm_eps != 0) num(b, m, "kv_norm_eps", a->mla.kv_norm_eps);
      if (a->mla.yarn_factor != 0) {
        cJSON *y = obj(b, m, "yarn");
        if (y) {
          num(b, y, "factor", a->mla.yarn_factor);
          num(b, y, "orig_ctx", a->mla.yarn_orig_ctx);
          num(b, y, "beta_fast", a->mla.yarn_beta_fast);
          num(b, y, "beta_slow", a->mla.yarn_beta_slow);
        }
      }
    }
  }
  if (used[SPILL_ATTN_KDA] || a->kda.n_heads > 0) {
    cJSON *k = obj(b, o, "kda");
    if (k) {
      num(b, k, "n_heads", a->kda.n_heads);
      num(b, k, "head_dim", a->kda.head_dim);
      num(b, k, "conv_kernel", a->kda.conv_kernel);
      num(b, k, "gate_rank", a->kda.gate_rank);
      num(b, k, "out_gate_rank", a->kda.out_gate_rank);
      num(b, k, "decay_floor", a->kda.decay_floor);
      /* written only when set, so older containers stay byte-identical */
      if (a->kda.l2norm_eps != 0) num(b, k, "l2norm_eps", a->kda.l2norm_eps);
    }
  }
  if (spill_arch_n_moe(a) > 0 || a->moe.n_experts > 0) {
    cJSON *m = obj(b, o, "moe");
    if (m) {
      num(b, m, "n_experts", a->moe.n_experts);
      num(b, m, "top_k", a->moe.top_k);
      num(b, m, "d_expert", a->moe.d_expert);
      num(b, m, "n_shared", a->moe.n_shared);
      num(b, m, "d_shared", a->moe.d_shared);
      num(b, m, "d_latent", a->moe.d_latent);
      str(b, m, "router", a->moe.router == SPILL_ROUTER_SIGMOID ? "sigmoid" : "softmax");
      boolean(b, m, "norm_topk", a->moe.norm_topk);
      num(b, m, "routed_scale", a->moe.routed_scale);
      if (a->moe.n_group > 1) {
        num(b, m, "n_group", a->moe.n_group);
        num(b, m, "topk_group", a->moe.topk_group);
        str(b, m, "group_score", a->moe.group_score == SPILL_GROUP_TOP2 ? "top2" : "max");
        if (a->moe.group_mask_zero) str(b, m, "group_mask", "zero");
      }
    }
  }
}

int spill_manifest_to_json(const spill_manifest *m, char **out, spill_err *e) {
  static const char *const snames[SPILL_SEC_COUNT] = {"gate", "up", "down"};
  SPILL_FAIL_IF(e, !m || !out, SPILL_E_INVALID_ARG, "manifest to JSON: NULL argument");
  SPILL_FAIL_IF(e, m->n_tensors < 0 || (m->n_tensors > 0 && !m->tensors) || m->n_banks < 0 ||
                       (m->n_banks > 0 && !m->banks) || m->n_files < 0 ||
                       (m->n_files > 0 && !m->files),
                SPILL_E_INVALID_ARG, "manifest to JSON: inconsistent array counts");
  jb b = {0};
  cJSON *root = cJSON_CreateObject();
  SPILL_FAIL_IF(e, !root, SPILL_E_NOMEM, "manifest to JSON: out of memory");
  str(&b, root, "format", "spill");
  num(&b, root, "version", m->version >= SPILL_FORMAT_VERSION_MIN ? m->version : SPILL_FORMAT_VERSION);
  if (m->version != 1) {
    char id[17];
    snprintf(id, sizeof id, "%016llx", (unsigned long long)m->container_id);
    str(&b, root, "container_id", id);
  }
  str(&b, root, "name", m->name);
  if (m->generator_json) {
    cJSON *g = cJSON_Parse(m->generator_json);
    if (!g || !cJSON_IsObject(g)) {
      cJSON_Delete(g);
      cJSON_Delete(root);
      return spill_err_set(e, SPILL_E_INVALID_ARG,
                           "manifest to JSON: generator is not a JSON object");
    }
    if (!cJSON_AddItemToObject(root, "generator", g)) {
      cJSON_Delete(g);
      b.failed = 1;
    }
  }
  arch_json(&b, root, &m->arch);
  cJSON *ts = arr(&b, root, "tensors");
  for (int i = 0; ts && i < m->n_tensors; i++) {
    const spill_tensor_info *t = &m->tensors[i];
    cJSON *o = obj(&b, ts, NULL);
    if (!o) break;
    str(&b, o, "name", t->name);
    dtype_group(&b, o, t->dtype, t->group);
    cJSON *sh = arr(&b, o, "shape");
    for (int d = 0; sh && d < (t->ndim == 1 ? 1 : 2); d++)
      if (!cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]))) b.failed = 1;
    num(&b, o, "offset", (double)t->offset);
    num(&b, o, "bytes", (double)t->bytes);
    num(&b, o, "crc32", t->crc32);
  }
  if (spill_arch_n_moe(&m->arch) > 0) {
    cJSON *x = obj(&b, root, "experts");
    if (x) {
      dtype_group(&b, x, m->expert_dtype, m->expert_group);
      num(&b, x, "record_bytes", (double)m->record_bytes);
      num(&b, x, "payload_bytes", m->payload_bytes);
      cJSON *ss = arr(&b, x, "sections");
      for (int i = 0; ss && i < SPILL_SEC_COUNT; i++) {
        cJSON *o = obj(&b, ss, NULL);
        if (!o) break;
        str(&b, o, "name", snames[i]);
        num(&b, o, "rows", m->sect[i].rows);
        num(&b, o, "cols", m->sect[i].cols);
        num(&b, o, "offset", m->sect[i].offset);
        num(&b, o, "bytes", m->sect[i].bytes);
      }
    }
  }
  cJSON *bs = arr(&b, root, "banks");
  for (int i = 0; bs && i < m->n_banks; i++) {
    const spill_bank_info *k = &m->banks[i];
    cJSON *o = obj(&b, bs, NULL);
    if (!o) break;
    num(&b, o, "layer", k->layer);
    str(&b, o, "file", k->file);
    num(&b, o, "n_experts", k->n_experts);
    num(&b, o, "record_bytes", (double)k->record_bytes);
    num(&b, o, "data_offset", (double)k->data_offset);
    if (m->version >= SPILL_FORMAT_MIXED) {
      cJSON *d = arr(&b, o, "dtypes");
      for (int s = 0; d && s < SPILL_SEC_COUNT; s++)
        if (!cJSON_AddItemToArray(d, cJSON_CreateString(spill_dtype_name(k->sect_dtype[s]))))
          b.failed = 1;
    }
  }
  cJSON *fs = arr(&b, root, "files");
  for (int i = 0; fs && i < m->n_files; i++) {
    const spill_file_info *f = &m->files[i];
    cJSON *o = obj(&b, fs, NULL);
    if (!o) break;
    str(&b, o, "name", f->name);
    num(&b, o, "bytes", (double)f->bytes);
    num(&b, o, "crc32", f->crc32);
  }
  char *txt = b.failed ? NULL : cJSON_Print(root);
  cJSON_Delete(root);
  SPILL_FAIL_IF(e, !txt, SPILL_E_NOMEM, "manifest to JSON: out of memory");
  /* Hand back memory the caller frees with free(). */
  size_t n = strlen(txt);
  *out = malloc(n + 2);
  if (*out) {
    memcpy(*out, txt, n);
    (*out)[n] = '\n';
    (*out)[n + 1] = 0;
  }
  cJSON_free(txt);
  SPILL_FAIL_IF(e, !*out, SPILL_E_NOMEM, "manifest to JSON: out of memory");
  return SPILL_OK;
}
