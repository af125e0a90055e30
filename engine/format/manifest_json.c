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

/* The arch objects' scalar rows come from the field table
 * (manifest_fields.c); arch_custom writes its custom rows in their place.
 * An attention config is written when a layer uses it or when it was
 * present (all valid configs have n_heads >= 1), so parse(to_json(m)) == m. */
typedef struct arch_ctx {
  const spill_arch *a;
  int used[4];
} arch_ctx;

static int arch_custom(void *ctx, cJSON *o, const char *key) {
  static const char *const kinds[4] = {"gqa", "mla", "kda", "gdn"};
  arch_ctx *c = ctx;
  const spill_arch *a = c->a;
  jb b = {0};
  if (!strcmp(key, "layer_attn")) {
    cJSON *la = arr(&b, o, "layer_attn");
    for (int i = 0; la && i < a->n_layers && i < SPILL_MAX_LAYERS; i++) {
      int k = (int)a->layer_attn[i];
      if (k < 0 || k > 3) k = 0;
      c->used[k] = 1;
      if (!cJSON_AddItemToArray(la, cJSON_CreateString(kinds[k]))) b.failed = 1;
    }
  } else if (!strcmp(key, "gqa") && (c->used[SPILL_ATTN_GQA] || a->gqa.n_heads > 0)) {
    cJSON *g = obj(&b, o, "gqa");
    if (g) b.failed |= spill_mf_write(g, SPILL_MF_GQA, a, NULL, NULL);
  } else if (!strcmp(key, "mla") && (c->used[SPILL_ATTN_MLA] || a->mla.n_heads > 0)) {
    cJSON *m = obj(&b, o, "mla");
    if (m) b.failed |= spill_mf_write(m, SPILL_MF_MLA, a, arch_custom, c);
  } else if (!strcmp(key, "yarn") && a->mla.yarn_factor != 0) {
    cJSON *y = obj(&b, o, "yarn");
    if (y) b.failed |= spill_mf_write(y, SPILL_MF_YARN, a, NULL, NULL);
  } else if (!strcmp(key, "kda") && (c->used[SPILL_ATTN_KDA] || a->kda.n_heads > 0)) {
    cJSON *k = obj(&b, o, "kda");
    if (k) b.failed |= spill_mf_write(k, SPILL_MF_KDA, a, NULL, NULL);
  } else if (!strcmp(key, "gdn") && (c->used[SPILL_ATTN_GDN] || a->gdn.n_k_heads > 0)) {
    cJSON *g = obj(&b, o, "gdn");
    if (g) b.failed |= spill_mf_write(g, SPILL_MF_GDN, a, NULL, NULL);
  } else if (!strcmp(key, "moe") && (spill_arch_n_moe(a) > 0 || a->moe.n_experts > 0)) {
    cJSON *m = obj(&b, o, "moe");
    if (m) b.failed |= spill_mf_write(m, SPILL_MF_MOE, a, arch_custom, c);
  } else if (!strcmp(key, "n_group") && a->moe.n_group > 1) {
    /* the group rows are written together, here */
    num(&b, o, "n_group", a->moe.n_group);
    num(&b, o, "topk_group", a->moe.topk_group);
    str(&b, o, "group_score", a->moe.group_score == SPILL_GROUP_TOP2 ? "top2" : "max");
    if (a->moe.group_mask_zero) str(&b, o, "group_mask", "zero");
  }
  return b.failed;
}

static void arch_json(jb *b, cJSON *root, const spill_arch *a) {
  cJSON *o = obj(b, root, "arch");
  if (!o) return;
  arch_ctx c = {a, {0, 0, 0}};
  b->failed |= spill_mf_write(o, SPILL_MF_ARCH, a, arch_custom, &c);
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
