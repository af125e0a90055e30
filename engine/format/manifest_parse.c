/* engine/format/manifest_parse.c: parsing and validation of manifest.json.
 *
 * The manifest is untrusted input. Every key is read through the bounded
 * helpers of engine/base/json_util.h, unknown keys are rejected, and every
 * cross-field rule of docs/FORMAT.md (architecture consistency, tensor sizes
 * and placement, the expert record layout, banks and files) is checked here,
 * so that the rest of the engine can trust a parsed spill_manifest's sizes
 * and offsets (file sizes on disk are checked by spill_container_open).
 * Every error is "<src>: <json path>: <reason>" with code SPILL_E_FORMAT, or
 * SPILL_E_VERSION for a version this reader does not read.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/base/json_util.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

#define F SPILL_E_FORMAT
#define MAX_TENSORS 1000000
#define DIM_MAX (1 << 20)

static int get_int(const cJSON *o, const char *key, const char *path, int64_t lo, int64_t hi,
                   int *out, spill_err *e) {
  int64_t v;
  SPILL_TRY(spill_json_int(o, key, path, lo, hi, &v, F, e));
  *out = (int)v;
  return SPILL_OK;
}

static int get_u64(const cJSON *o, const char *key, const char *path, uint64_t hi, uint64_t *out,
                   spill_err *e) {
  int64_t v;
  SPILL_TRY(spill_json_int(o, key, path, 0, (int64_t)hi, &v, F, e));
  *out = (uint64_t)v;
  return SPILL_OK;
}

static int has(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key) != NULL;
}

/* ---- arch ---- */

/* The scalar fields of each arch object are rows of the field table
 * (manifest_fields.c: key check, ranges, defaults); the code below reads
 * the custom rows and checks the rules that tie fields together. */

static int parse_gqa(const cJSON *o, spill_arch *a, spill_err *e) {
  const char *p = "arch.gqa";
  SPILL_TRY(spill_mf_read(o, p, SPILL_MF_GQA, a, e));
  const spill_gqa_cfg *g = &a->gqa;
  SPILL_FAIL_IF(e, g->n_heads % g->n_kv_heads != 0, F,
                "%s.n_kv_heads: %d does not divide n_heads %d", p, g->n_kv_heads, g->n_heads);
  return SPILL_OK;
}

static int parse_mla(const cJSON *o, spill_arch *a, spill_err *e) {
  SPILL_TRY(spill_mf_read(o, "arch.mla", SPILL_MF_MLA, a, e));
  a->mla.yarn_factor = 0;
  if (!has(o, "yarn")) return SPILL_OK;
  const cJSON *y;
  SPILL_TRY(spill_json_obj(o, "yarn", "arch.mla", &y, F, e));
  return spill_mf_read(y, "arch.mla.yarn", SPILL_MF_YARN, a, e);
}

/* n_group, topk_group, group_score, group_mask: optional group-limited
 * selection (absent = none: n_group 0). */
static int parse_moe_groups(const cJSON *o, spill_moe_cfg *m, spill_err *e) {
  const char *p = "arch.moe";
  m->n_group = m->topk_group = 0;
  m->group_score = SPILL_GROUP_MAX;
  if (!has(o, "n_group")) {
    SPILL_FAIL_IF(e, has(o, "topk_group") || has(o, "group_score") || has(o, "group_mask"), F,
                  "%s: topk_group / group_score without n_group", p);
    return SPILL_OK;
  }
  int64_t ng, tg;
  const char *gs;
  SPILL_TRY(spill_json_int(o, "n_group", p, 1, m->n_experts, &ng, F, e));
  SPILL_TRY(spill_json_int_opt(o, "topk_group", p, 1, ng, ng, &tg, F, e));
  SPILL_TRY(spill_json_str_opt(o, "group_score", p, 8, "max", &gs, F, e));
  m->n_group = (int)ng;
  m->topk_group = (int)tg;
  if (!strcmp(gs, "max"))
    m->group_score = SPILL_GROUP_MAX;
  else if (!strcmp(gs, "top2"))
    m->group_score = SPILL_GROUP_TOP2;
  else
    return spill_err_set(e, F, "%s.group_score: \"%s\" is not \"max\" or \"top2\"", p, gs);
  const char *gm;
  SPILL_TRY(spill_json_str_opt(o, "group_mask", p, 8, "inf", &gm, F, e));
  SPILL_FAIL_IF(e, strcmp(gm, "inf") && strcmp(gm, "zero"), F,
                "%s.group_mask: \"%s\" is not \"inf\" or \"zero\"", p, gm);
  m->group_mask_zero = !strcmp(gm, "zero");
  SPILL_FAIL_IF(e, m->n_experts % m->n_group != 0, F, "%s.n_group: %d does not divide n_experts %d",
                p, m->n_group, m->n_experts);
  SPILL_FAIL_IF(e, m->n_group > 1 && m->top_k > m->topk_group * (m->n_experts / m->n_group), F,
                "%s.top_k: %d exceeds the %d experts of topk_group %d groups", p, m->top_k,
                m->topk_group * (m->n_experts / m->n_group), m->topk_group);
  SPILL_FAIL_IF(e, m->n_group > 1 && m->group_score == SPILL_GROUP_TOP2 && m->n_experts / m->n_group < 2,
                F, "%s.group_score: top2 needs groups of at least 2 experts", p);
  return SPILL_OK;
}

static int parse_moe(const cJSON *o, spill_arch *a, spill_err *e) {
  const char *p = "arch.moe";
  SPILL_TRY(spill_mf_read(o, p, SPILL_MF_MOE, a, e));
  const spill_moe_cfg *m = &a->moe;
  SPILL_FAIL_IF(e, m->n_shared > 0 && m->d_shared < 1, F,
                "%s.d_shared: must be >= 1 when n_shared is %d", p, m->n_shared);
  return parse_moe_groups(o, &a->moe, e);
}

static int parse_arch(const cJSON *root, spill_arch *a, spill_err *e) {
  static const char *const kinds[] = {"gqa", "mla", "kda", "gdn"};
  static const spill_mf_obj kind_obj[] = {SPILL_MF_GQA, SPILL_MF_MLA, SPILL_MF_KDA, SPILL_MF_GDN};
  const char *p = "arch";
  const cJSON *o, *la, *sub;
  int n;
  SPILL_TRY(spill_json_obj(root, "arch", "", &o, F, e));
  SPILL_TRY(spill_mf_read(o, p, SPILL_MF_ARCH, a, e));
  SPILL_FAIL_IF(e, a->n_dense_layers > 0 && a->d_ff < 1, F,
                "arch.d_ff: must be >= 1 when n_dense_layers is %d", a->n_dense_layers);
  SPILL_FAIL_IF(e, (a->activation == SPILL_ACT_SITU) != (a->situ_beta > 0), F,
                "arch.situ_beta: %g with activation \"%s\" (situ needs a beta > 0, swiglu none)",
                a->situ_beta, a->activation == SPILL_ACT_SITU ? "situ" : "swiglu");
  SPILL_FAIL_IF(e, a->activation != SPILL_ACT_SITU && a->situ_lambda != 0, F,
                "arch.situ_linear_beta: set without activation \"situ\"");
  SPILL_TRY(spill_json_arr(o, "layer_attn", p, &la, &n, F, e));
  SPILL_FAIL_IF(e, n != a->n_layers, F, "arch.layer_attn: %d entries, n_layers is %d", n,
                a->n_layers);
  int used[4] = {0, 0, 0, 0};
  int i = 0;
  for (const cJSON *it = la->child; it; it = it->next, i++) {
    int k = -1;
    if (cJSON_IsString(it) && it->valuestring)
      for (int j = 0; j < 4; j++)
        if (strcmp(it->valuestring, kinds[j]) == 0) k = j;
    SPILL_FAIL_IF(e, k < 0, F, "arch.layer_attn[%d]: expected \"gqa\", \"mla\", \"kda\" or \"gdn\"", i);
    /* kinds[] order is gqa, mla, kda, gdn = the enum values */
    a->layer_attn[i] = (spill_attn_kind)k;
    used[k] = 1;
  }
  for (int j = 0; j < 4; j++) {
    if (!has(o, kinds[j])) {
      SPILL_FAIL_IF(e, used[j], F, "arch.%s: missing key (some layer uses %s attention)",
                    kinds[j], kinds[j]);
      continue;
    }
    SPILL_TRY(spill_json_obj(o, kinds[j], p, &sub, F, e));
    if (j == SPILL_ATTN_GQA) SPILL_TRY(parse_gqa(sub, a, e));
    if (j == SPILL_ATTN_MLA) SPILL_TRY(parse_mla(sub, a, e));
    if (j == SPILL_ATTN_GDN) {
      SPILL_TRY(spill_mf_read(sub, "arch.gdn", kind_obj[j], a, e));
      SPILL_FAIL_IF(e, a->gdn.n_v_heads % a->gdn.n_k_heads != 0, F,
                    "arch.gdn.n_v_heads: %d is not a multiple of n_k_heads %d", a->gdn.n_v_heads,
                    a->gdn.n_k_heads);
    }
    if (j == SPILL_ATTN_KDA) {
      SPILL_TRY(spill_mf_read(sub, "arch.kda", kind_obj[j], a, e));
      SPILL_FAIL_IF(e, a->kda.gate_lower_bound < 0 && a->kda.decay_floor != 0, F,
                    "arch.kda.decay_floor: %g with gate_lower_bound %g (the bounded decay has no floor)",
                    a->kda.decay_floor, a->kda.gate_lower_bound);
    }
  }
  if (has(o, "moe") || a->n_layers > a->n_dense_layers) {
    SPILL_FAIL_IF(e, !has(o, "moe"), F, "arch.moe: missing key (layers %d..%d are MoE)",
                  a->n_dense_layers, a->n_layers - 1);
    SPILL_TRY(spill_json_obj(o, "moe", p, &sub, F, e));
    SPILL_TRY(parse_moe(sub, a, e));
  }
  return SPILL_OK;
}

/* ---- tensors ---- */

/* Reads a dtype name and, for q8/q4, the required group; rejects a group on
 * other dtypes. */
static int parse_dtype_group(const cJSON *o, const char *p, spill_dtype *dt, uint32_t *group,
                             spill_err *e) {
  const char *s;
  SPILL_TRY(spill_json_str(o, "dtype", p, 16, &s, F, e));
  SPILL_FAIL_IF(e, spill_dtype_parse(s, dt) != SPILL_OK, F, "%s.dtype: unknown dtype \"%s\"", p,
                s);
  if (*dt == SPILL_DT_Q8 || *dt == SPILL_DT_Q4) {
    int g;
    SPILL_TRY(get_int(o, "group", p, 1, DIM_MAX, &g, e));
    SPILL_FAIL_IF(e, *dt == SPILL_DT_Q4 && (g & 1), F, "%s.group: %d is odd (q4)", p, g);
    *group = (uint32_t)g;
  } else {
    SPILL_FAIL_IF(e, has(o, "group"), F, "%s.group: only q8 and q4 have a group size", p);
    *group = 0;
  }
  return SPILL_OK;
}

static int parse_tensor(const cJSON *o, const char *p, spill_tensor_info *t, spill_err *e) {
  const char *s;
  const cJSON *sh;
  int n;
  SPILL_FAIL_IF(e, !cJSON_IsObject(o), F, "%s: expected object", p);
  SPILL_TRY(spill_mf_only_keys(o, p, SPILL_MF_TENSOR, SPILL_FORMAT_VERSION, e));
  SPILL_TRY(spill_json_str(o, "name", p, SPILL_NAME_MAX - 1, &s, F, e));
  for (const char *c = s; *c; c++)
    SPILL_FAIL_IF(e, (unsigned char)*c < 0x21 || (unsigned char)*c > 0x7E, F,
                  "%s.name: byte 0x%02x is not printable ASCII", p, (unsigned char)*c);
  snprintf(t->name, sizeof t->name, "%s", s);
  SPILL_TRY(parse_dtype_group(o, p, &t->dtype, &t->group, e));
  SPILL_TRY(spill_json_arr(o, "shape", p, &sh, &n, F, e));
  SPILL_FAIL_IF(e, n < 1 || n > 2, F, "%s.shape: %d dimensions, expected 1 or 2", p, n);
  t->ndim = n;
  t->shape[1] = 1;
  int i = 0;
  for (const cJSON *it = sh->child; it; it = it->next, i++) {
    double v = cJSON_IsNumber(it) ? it->valuedouble : -1.0;
    SPILL_FAIL_IF(e, !cJSON_IsNumber(it) || !isfinite(v) || v != floor(v) || v < 1.0 ||
                         v > (double)SPILL_JSON_INT_MAX,
                  F, "%s.shape[%d]: expected an integer in [1, 2^53]", p, i);
    t->shape[i] = (uint64_t)v;
  }
  SPILL_TRY(get_u64(o, "offset", p, SPILL_JSON_INT_MAX, &t->offset, e));
  SPILL_FAIL_IF(e, t->offset % SPILL_TENSOR_ALIGN != 0, F,
                "%s.offset: %llu is not a multiple of %u", p, (unsigned long long)t->offset,
                SPILL_TENSOR_ALIGN);
  SPILL_TRY(get_u64(o, "bytes", p, SPILL_JSON_INT_MAX, &t->bytes, e));
  uint64_t want, rows = t->ndim == 1 ? 1 : t->shape[0], cols = t->ndim == 1 ? t->shape[0] : t->shape[1];
  int rc = spill_dtype_matrix_bytes(t->dtype, rows, cols, t->group, &want, e);
  if (rc < 0) {
    spill_err_prefix(e, "%s (%s)", p, t->name);
    return rc;
  }
  SPILL_FAIL_IF(e, want != t->bytes, F, "%s.bytes: %llu, but %s of this shape takes %llu", p,
                (unsigned long long)t->bytes, spill_dtype_name(t->dtype),
                (unsigned long long)want);
  uint64_t end;
  SPILL_FAIL_IF(e, !spill_add_u64(t->offset, t->bytes, &end) || end > (uint64_t)SPILL_JSON_INT_MAX,
                F, "%s: offset + bytes overflows", p);
  uint64_t crc;
  SPILL_TRY(get_u64(o, "crc32", p, UINT32_MAX, &crc, e));
  t->crc32 = (uint32_t)crc;
  return SPILL_OK;
}

static int cmp_offset(const void *a, const void *b) {
  const spill_tensor_info *x = *(const spill_tensor_info *const *)a;
  const spill_tensor_info *y = *(const spill_tensor_info *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return x < y ? -1 : x > y;
}
static int cmp_name(const void *a, const void *b) {
  const spill_tensor_info *x = *(const spill_tensor_info *const *)a;
  const spill_tensor_info *y = *(const spill_tensor_info *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x < y ? -1 : x > y);
}

/* Overlap and duplicate-name checks by sorting pointers (offsets, then
 * names); returns the end of the last tensor in *trunk_end. */
static int check_tensor_table(const spill_manifest *m, uint64_t *trunk_end, spill_err *e) {
  int n = m->n_tensors;
  *trunk_end = 0;
  if (n == 0) return SPILL_OK;
  const spill_tensor_info **v = malloc((size_t)n * sizeof *v);
  SPILL_FAIL_IF(e, !v, SPILL_E_NOMEM, "tensors: out of memory");
  for (int i = 0; i < n; i++) v[i] = &m->tensors[i];
  int rc = SPILL_OK;
  qsort(v, (size_t)n, sizeof *v, cmp_offset);
  for (int i = 0; i < n && rc == SPILL_OK; i++) {
    const spill_tensor_info *t = v[i];
    if (i + 1 < n && t->offset + t->bytes > v[i + 1]->offset)
      rc = spill_err_set(e, F, "tensors[%d] (%s) [%llu, %llu) overlaps tensors[%d] (%s) at %llu",
                         (int)(t - m->tensors), t->name, (unsigned long long)t->offset,
                         (unsigned long long)(t->offset + t->bytes), (int)(v[i + 1] - m->tensors),
                         v[i + 1]->name, (unsigned long long)v[i + 1]->offset);
    if (t->offset + t->bytes > *trunk_end) *trunk_end = t->offset + t->bytes;
  }
  if (rc == SPILL_OK) {
    qsort(v, (size_t)n, sizeof *v, cmp_name);
    for (int i = 0; i + 1 < n && rc == SPILL_OK; i++)
      if (strcmp(v[i]->name, v[i + 1]->name) == 0)
        rc = spill_err_set(e, F, "tensors[%d]: duplicate name \"%s\" (also tensors[%d])",
                           (int)(v[i + 1] - m->tensors), v[i]->name, (int)(v[i] - m->tensors));
  }
  free(v);
  return rc;
}

/* ---- experts, banks, files ---- */

/* v3: banks[i].dtypes, read before the record layout (which depends on
 * them); allocates m->banks and fills every bank's section dtypes (the
 * experts.dtype where a bank has no "dtypes"). */
static int parse_bank_dtypes(const cJSON *root, spill_manifest *m, spill_err *e) {
  const cJSON *arr;
  int n, n_moe = spill_arch_n_moe(&m->arch);
  SPILL_TRY(spill_json_arr(root, "banks", "", &arr, &n, F, e));
  SPILL_FAIL_IF(e, n != n_moe, F, "banks: %d entries, the model has %d MoE layers", n, n_moe);
  m->banks = calloc((size_t)n, sizeof *m->banks);
  SPILL_FAIL_IF(e, !m->banks, SPILL_E_NOMEM, "banks: out of memory");
  m->n_banks = n;
  int i = 0;
  for (const cJSON *o = arr->child; o; o = o->next, i++) {
    spill_bank_info *b = &m->banks[i];
    for (int k = 0; k < SPILL_SEC_COUNT; k++) b->sect_dtype[k] = m->expert_dtype;
    const cJSON *d = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "dtypes") : NULL;
    if (!d) continue;
    SPILL_FAIL_IF(e, !cJSON_IsArray(d) || cJSON_GetArraySize(d) != SPILL_SEC_COUNT, F,
                  "banks[%d].dtypes: expected an array of 3 dtype names (gate, up, down)", i);
    int k = 0;
    for (const cJSON *x = d->child; x; x = x->next, k++) {
      SPILL_FAIL_IF(e, !cJSON_IsString(x) || spill_dtype_parse(x->valuestring, &b->sect_dtype[k]) < 0,
                    F, "banks[%d].dtypes[%d]: not a dtype name", i, k);
      if (b->sect_dtype[k] != m->expert_dtype) m->sect_mixed = 1;
    }
  }
  return SPILL_OK;
}

static int parse_experts(const cJSON *root, spill_manifest *m, spill_err *e) {
  static const char *const snames[SPILL_SEC_COUNT] = {"gate", "up", "down"};
  const char *p = "experts";
  const cJSON *o, *secs;
  int n;
  if (spill_arch_n_moe(&m->arch) == 0) {
    SPILL_FAIL_IF(e, has(root, "experts"), F, "experts: present, but the model has no MoE layers");
    return SPILL_OK;
  }
  SPILL_TRY(spill_json_obj(root, "experts", "", &o, F, e));
  SPILL_TRY(spill_mf_only_keys(o, p, SPILL_MF_EXPERTS, m->version, e));
  SPILL_TRY(parse_dtype_group(o, p, &m->expert_dtype, &m->expert_group, e));
  spill_section_info want[SPILL_SEC_COUNT];
  uint32_t want_payload;
  uint64_t want_record, got;
  int rc;
  if (m->version >= SPILL_FORMAT_MIXED) {
    SPILL_TRY(parse_bank_dtypes(root, m, e));
    rc = spill_manifest_mixed_layout(m, want, &want_payload, &want_record, e);
  } else {
    rc = spill_record_layout(&m->arch, m->expert_dtype, m->expert_group, want, &want_payload,
                             &want_record, e);
  }
  if (rc < 0) {
    spill_err_prefix(e, "experts");
    return rc;
  }
  SPILL_TRY(get_u64(o, "record_bytes", p, SPILL_JSON_INT_MAX, &got, e));
  SPILL_FAIL_IF(e, got != want_record, F,
                "experts.record_bytes: %llu, but the layout of %s experts (%d x %d) needs %llu",
                (unsigned long long)got, spill_dtype_name(m->expert_dtype), m->arch.moe.d_expert,
                want[SPILL_SEC_GATE].cols, (unsigned long long)want_record);
  SPILL_TRY(get_u64(o, "payload_bytes", p, UINT32_MAX, &got, e));
  SPILL_FAIL_IF(e, got != want_payload, F, "experts.payload_bytes: %llu, but the layout needs %u",
                (unsigned long long)got, want_payload);
  SPILL_TRY(spill_json_arr(o, "sections", p, &secs, &n, F, e));
  SPILL_FAIL_IF(e, n != SPILL_SEC_COUNT, F, "experts.sections: %d entries, expected 3", n);
  int i = 0;
  for (const cJSON *s = secs->child; s; s = s->next, i++) {
    char sp[48];
    const char *name;
    uint64_t v[4];
    static const char *const num_keys[4] = {"rows", "cols", "offset", "bytes"};
    snprintf(sp, sizeof sp, "experts.sections[%d]", i);
    SPILL_FAIL_IF(e, !cJSON_IsObject(s), F, "%s: expected object", sp);
    SPILL_TRY(spill_mf_only_keys(s, sp, SPILL_MF_SECTION, m->version, e));
    SPILL_TRY(spill_json_str(s, "name", sp, 8, &name, F, e));
    SPILL_FAIL_IF(e, strcmp(name, snames[i]) != 0, F, "%s.name: \"%s\", expected \"%s\"", sp,
                  name, snames[i]);
    const uint32_t wv[4] = {want[i].rows, want[i].cols, want[i].offset, want[i].bytes};
    for (int k = 0; k < 4; k++) {
      SPILL_TRY(get_u64(s, num_keys[k], sp, UINT32_MAX, &v[k], e));
      SPILL_FAIL_IF(e, v[k] != wv[k], F, "%s.%s: %llu, but the layout needs %u", sp, num_keys[k],
                    (unsigned long long)v[k], wv[k]);
    }
  }
  memcpy(m->sect, want, sizeof want);
  m->payload_bytes = want_payload;
  m->record_bytes = want_record;
  return SPILL_OK;
}

static int parse_banks(const cJSON *root, spill_manifest *m, spill_err *e) {
  const cJSON *arr;
  int n, n_moe = spill_arch_n_moe(&m->arch);
  SPILL_TRY(spill_json_arr(root, "banks", "", &arr, &n, F, e));
  SPILL_FAIL_IF(e, n != n_moe, F, "banks: %d entries, the model has %d MoE layers", n, n_moe);
  if (n == 0) return SPILL_OK;
  if (!m->banks) {
    m->banks = calloc((size_t)n, sizeof *m->banks);
    SPILL_FAIL_IF(e, !m->banks, SPILL_E_NOMEM, "banks: out of memory");
    m->n_banks = n;
    for (int i = 0; i < n; i++)
      for (int k = 0; k < SPILL_SEC_COUNT; k++) m->banks[i].sect_dtype[k] = m->expert_dtype;
  }
  int i = 0;
  for (const cJSON *o = arr->child; o; o = o->next, i++) {
    spill_bank_info *b = &m->banks[i];
    char p[32], want_name[SPILL_NAME_MAX];
    const char *file;
    int layer, ne;
    uint64_t v;
    snprintf(p, sizeof p, "banks[%d]", i);
    SPILL_FAIL_IF(e, !cJSON_IsObject(o), F, "%s: expected object", p);
    SPILL_TRY(spill_mf_only_keys(o, p, SPILL_MF_BANK, m->version, e));
    int want_layer = m->arch.n_dense_layers + i;
    SPILL_TRY(get_int(o, "layer", p, 0, SPILL_MAX_LAYERS - 1, &layer, e));
    SPILL_FAIL_IF(e, layer != want_layer, F,
                  "%s.layer: %d, expected %d (one bank per MoE layer, in order)", p, layer,
                  want_layer);
    b->layer = layer;
    spill_fmt_bank_name(layer, want_name);
    SPILL_TRY(spill_json_str(o, "file", p, SPILL_NAME_MAX - 1, &file, F, e));
    SPILL_FAIL_IF(e, strcmp(file, want_name) != 0, F, "%s.file: \"%s\", expected \"%s\"", p, file,
                  want_name);
    snprintf(b->file, sizeof b->file, "%s", file);
    SPILL_TRY(get_int(o, "n_experts", p, 1, SPILL_MAX_EXPERTS, &ne, e));
    SPILL_FAIL_IF(e, ne != m->arch.moe.n_experts, F, "%s.n_experts: %d, arch.moe.n_experts is %d",
                  p, ne, m->arch.moe.n_experts);
    b->n_experts = (uint32_t)ne;
    SPILL_TRY(get_u64(o, "record_bytes", p, SPILL_JSON_INT_MAX, &v, e));
    SPILL_FAIL_IF(e, v != m->record_bytes, F, "%s.record_bytes: %llu, experts.record_bytes is %llu",
                  p, (unsigned long long)v, (unsigned long long)m->record_bytes);
    b->record_bytes = v;
    SPILL_TRY(get_u64(o, "data_offset", p, SPILL_JSON_INT_MAX, &v, e));
    SPILL_FAIL_IF(e, v != SPILL_BANK_HEADER_BYTES, F, "%s.data_offset: %llu, expected %u", p,
                  (unsigned long long)v, SPILL_BANK_HEADER_BYTES);
    b->data_offset = v;
  }
  return SPILL_OK;
}

static int parse_files(const cJSON *root, spill_manifest *m, uint64_t trunk_end, spill_err *e) {
  const cJSON *arr;
  int n;
  SPILL_TRY(spill_json_arr(root, "files", "", &arr, &n, F, e));
  SPILL_FAIL_IF(e, n != 1 + m->n_banks, F,
                "files: %d entries, expected %d (trunk.bin, then one per bank)", n,
                1 + m->n_banks);
  m->files = calloc((size_t)n, sizeof *m->files);
  SPILL_FAIL_IF(e, !m->files, SPILL_E_NOMEM, "files: out of memory");
  m->n_files = n;
  int i = 0;
  for (const cJSON *o = arr->child; o; o = o->next, i++) {
    spill_file_info *f = &m->files[i];
    char p[32];
    const char *name, *want = i == 0 ? SPILL_TRUNK_FILE : m->banks[i - 1].file;
    uint64_t v, want_bytes;
    snprintf(p, sizeof p, "files[%d]", i);
    SPILL_FAIL_IF(e, !cJSON_IsObject(o), F, "%s: expected object", p);
    SPILL_TRY(spill_mf_only_keys(o, p, SPILL_MF_FILE, m->version, e));
    SPILL_TRY(spill_json_str(o, "name", p, SPILL_NAME_MAX - 1, &name, F, e));
    SPILL_FAIL_IF(e, strcmp(name, want) != 0, F, "%s.name: \"%s\", expected \"%s\"", p, name,
                  want);
    snprintf(f->name, sizeof f->name, "%s", name);
    SPILL_TRY(get_u64(o, "bytes", p, SPILL_JSON_INT_MAX, &f->bytes, e));
    if (i == 0) {
      if (trunk_end > f->bytes) {
        /* Name the tensor that sticks out: the most useful message. */
        for (int t = 0; t < m->n_tensors; t++) {
          const spill_tensor_info *ti = &m->tensors[t];
          SPILL_FAIL_IF(e, ti->offset + ti->bytes > f->bytes, F,
                        "tensors[%d] (%s): [%llu, %llu) extends past the end of trunk.bin "
                        "(%llu bytes)", t, ti->name, (unsigned long long)ti->offset,
                        (unsigned long long)(ti->offset + ti->bytes),
                        (unsigned long long)f->bytes);
        }
      }
      SPILL_FAIL_IF(e, !spill_round_up_u64(trunk_end, SPILL_PAGE, &want_bytes), F,
                    "trunk size overflows");
    } else {
      const spill_bank_info *b = &m->banks[i - 1];
      SPILL_FAIL_IF(e, !spill_mul_u64(b->n_experts, b->record_bytes, &want_bytes) ||
                           !spill_add_u64(want_bytes, b->data_offset, &want_bytes),
                    F, "%s: bank size overflows", p);
    }
    SPILL_FAIL_IF(e, f->bytes != want_bytes, F, "%s.bytes: %llu, but %s must be %llu bytes", p,
                  (unsigned long long)f->bytes, name, (unsigned long long)want_bytes);
    SPILL_TRY(get_u64(o, "crc32", p, UINT32_MAX, &v, e));
    f->crc32 = (uint32_t)v;
  }
  return SPILL_OK;
}

static int check_codebooks(const spill_manifest *m, spill_err *e) {
  static const char *const mats[3] = {"gate", "up", "down"};
  if (m->expert_dtype != SPILL_DT_RVQ3 || spill_arch_n_moe(&m->arch) == 0) return SPILL_OK;
  for (int l = m->arch.n_dense_layers; l < m->arch.n_layers; l++) {
    for (int k = 0; k < 3; k++) {
      char name[SPILL_NAME_MAX];
      snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.codebook", l, mats[k]);
      const spill_tensor_info *t = spill_manifest_find(m, name);
      SPILL_FAIL_IF(e, !t, F, "tensors: rvq3 experts need the codebook tensor \"%s\"", name);
      SPILL_FAIL_IF(e, t->dtype != SPILL_DT_F32 || t->ndim != 2 ||
                           t->shape[0] != SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES ||
                           t->shape[1] != SPILL_RVQ_DIM,
                    F, "tensors: codebook \"%s\" must be f32 of shape [768, 8]", name);
    }
  }
  return SPILL_OK;
}

static int parse_root(const cJSON *root, spill_manifest *m, spill_err *e) {
  const char *s;
  int64_t version;
  const cJSON *arr;
  int n;
  SPILL_FAIL_IF(e, !cJSON_IsObject(root), F, "expected a JSON object");
  SPILL_TRY(spill_json_str(root, "format", "", 32, &s, F, e));
  SPILL_FAIL_IF(e, strcmp(s, "spill") != 0, F, "format: \"%s\", expected \"spill\"", s);
  SPILL_TRY(spill_json_int(root, "version", "", INT32_MIN, INT32_MAX, &version, F, e));
  SPILL_FAIL_IF(e, version < SPILL_FORMAT_VERSION_MIN || version > SPILL_FORMAT_VERSION,
                SPILL_E_VERSION, "version: %lld, this reader reads versions %d to %d",
                (long long)version, SPILL_FORMAT_VERSION_MIN, SPILL_FORMAT_VERSION);
  m->version = (int)version;
  SPILL_TRY(spill_mf_only_keys(root, "", SPILL_MF_ROOT, m->version, e));
  if (version >= 2) {
    /* 16 lower-case hex digits, not all zero (docs/FORMAT.md, container_id) */
    SPILL_TRY(spill_json_str(root, "container_id", "", 16, &s, F, e));
    uint64_t id = 0;
    int ok = strlen(s) == 16;
    for (int i = 0; ok && i < 16; i++) {
      char c = s[i];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) ok = 0;
      id = id << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    SPILL_FAIL_IF(e, !ok || id == 0, F,
                  "container_id: \"%s\" is not 16 lower-case hex digits (non-zero)", s);
    m->container_id = id;
  }
  SPILL_TRY(spill_json_str(root, "name", "", sizeof m->name - 1, &s, F, e));
  snprintf(m->name, sizeof m->name, "%s", s);
  if (has(root, "generator")) {
    const cJSON *g;
    SPILL_TRY(spill_json_obj(root, "generator", "", &g, F, e));
    char *txt = cJSON_PrintUnformatted(g);
    SPILL_FAIL_IF(e, !txt, SPILL_E_NOMEM, "generator: out of memory");
    m->generator_json = strdup(txt);
    cJSON_free(txt);
    SPILL_FAIL_IF(e, !m->generator_json, SPILL_E_NOMEM, "generator: out of memory");
  }
  SPILL_TRY(parse_arch(root, &m->arch, e));

  SPILL_TRY(spill_json_arr(root, "tensors", "", &arr, &n, F, e));
  SPILL_FAIL_IF(e, n > MAX_TENSORS, F, "tensors: %d entries exceeds the limit of %d", n,
                MAX_TENSORS);
  if (n > 0) {
    m->tensors = calloc((size_t)n, sizeof *m->tensors);
    SPILL_FAIL_IF(e, !m->tensors, SPILL_E_NOMEM, "tensors: out of memory");
  }
  m->n_tensors = n;
  int i = 0;
  for (const cJSON *o = arr->child; o; o = o->next, i++) {
    char p[32];
    snprintf(p, sizeof p, "tensors[%d]", i);
    SPILL_TRY(parse_tensor(o, p, &m->tensors[i], e));
  }
  uint64_t trunk_end;
  SPILL_TRY(check_tensor_table(m, &trunk_end, e));
  SPILL_TRY(parse_experts(root, m, e));
  SPILL_TRY(check_codebooks(m, e));
  SPILL_TRY(parse_banks(root, m, e));
  return parse_files(root, m, trunk_end, e);
}


int spill_manifest_parse(const char *json, size_t len, const char *src, spill_manifest *m,
                         spill_err *e) {
  if (!src) src = SPILL_MANIFEST_FILE;
  SPILL_FAIL_IF(e, !json || !m, SPILL_E_INVALID_ARG, "%s: no manifest text", src);
  memset(m, 0, sizeof *m);
  SPILL_FAIL_IF(e, len > SPILL_MANIFEST_MAX_BYTES, F, "%s: %zu bytes exceeds the limit of %u", src,
                len, SPILL_MANIFEST_MAX_BYTES);
  /* the manifest is UTF-8 (docs/FORMAT.md); names are copied into results;
   * repeated keys (cJSON keeps the first, Python the last) and NULs, which
   * would cut a name, are refused (spill_json_parse) */
  cJSON *root = NULL;
  int rc = spill_json_parse(json, len, NULL, F, &root, e);
  if (rc == SPILL_OK) rc = parse_root(root, m, e);
  if (root) cJSON_Delete(root);
  if (rc < 0) {
    /* json_util writes "<path>.<key>"; at the root the path is empty. */
    if (e && e->msg[0] == '.') memmove(e->msg, e->msg + 1, strlen(e->msg));
    spill_err_prefix(e, "%s", src);
    spill_manifest_free(m);
  }
  return rc;
}
