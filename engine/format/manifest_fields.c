/* engine/format/manifest_fields.c: the one table of manifest.json's fields
 * (docs/FORMAT.md "manifest.json"). Every key of every manifest object is a
 * row here; from the rows come the unknown-key check of each object
 * (spill_mf_only_keys), the reading of the architecture's scalar fields with
 * their ranges and defaults (spill_mf_read) and their writing
 * (spill_mf_write), so a new arch field is one row plus its struct member.
 *
 * Rows of kind SPILL_MF_CUSTOM (arrays, nested objects, the expert layout,
 * fields whose presence hangs on another's) are only listed here: the
 * manifest_parse.c / manifest_json.c code of their object reads and writes
 * them, in the table's order. Depends on engine/base and cJSON only.
 */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

#define DIM_MAX (1 << 20)
#define A(member) offsetof(spill_arch, member)
#define NONE ((size_t)-1)

static const char *const k_activation[] = {"swiglu", "situ", "swiglu_oai", NULL}; /* spill_act_kind order */
static const char *const k_latent_norm[] = {"input", "output", "none", NULL}; /* spill_latent_norm order */
static const char *const k_qk_norm[] = {"none", "head", "full", NULL}; /* spill_qk_norm order */
static const char *const k_router[] = {"sigmoid", "softmax", "softmax_topk", NULL};    /* spill_router_kind order */

/* obj, key, kind, offset, lo, hi, cap (hi <= that int field + cap_delta), cap_delta, flags,
 * default (SPILL_MF_OPTIONAL), enum names, string / enum max length, first version */
#define ROW_I(o, k, m, lo, hi) {o, k, SPILL_MF_INT, A(m), lo, hi, NONE, 0, 0, 0, NULL, 0, 1}
#define ROW_CUSTOM(o, k) {o, k, SPILL_MF_CUSTOM, NONE, 0, 0, NONE, 0, 0, 0, NULL, 0, 1}
const spill_mf_field spill_mf_fields[] = {
    /* the top level (manifest_parse.c parse_root; manifest_json.c) */
    ROW_CUSTOM(SPILL_MF_ROOT, "format"),
    ROW_CUSTOM(SPILL_MF_ROOT, "version"),
    {SPILL_MF_ROOT, "container_id", SPILL_MF_CUSTOM, NONE, 0, 0, NONE, 0, 0, 0, NULL, 0, 2},
    ROW_CUSTOM(SPILL_MF_ROOT, "name"),
    ROW_CUSTOM(SPILL_MF_ROOT, "generator"),
    ROW_CUSTOM(SPILL_MF_ROOT, "arch"),
    ROW_CUSTOM(SPILL_MF_ROOT, "tensors"),
    ROW_CUSTOM(SPILL_MF_ROOT, "experts"),
    ROW_CUSTOM(SPILL_MF_ROOT, "banks"),
    ROW_CUSTOM(SPILL_MF_ROOT, "files"),
    /* arch */
    {SPILL_MF_ARCH, "family", SPILL_MF_STR, A(family), 0, 0, NONE, 0, 0, 0, NULL,
     sizeof(((spill_arch *)0)->family) - 1, 1},
    ROW_I(SPILL_MF_ARCH, "vocab_size", vocab_size, 1, 1 << 24),
    ROW_I(SPILL_MF_ARCH, "d_model", d_model, 1, DIM_MAX),
    ROW_I(SPILL_MF_ARCH, "n_layers", n_layers, 1, SPILL_MAX_LAYERS),
    {SPILL_MF_ARCH, "n_dense_layers", SPILL_MF_INT, A(n_dense_layers), 0, SPILL_MAX_LAYERS, A(n_layers), 0, 0, 0,
     NULL, 0, 1},
    ROW_I(SPILL_MF_ARCH, "d_ff", d_ff, 0, DIM_MAX),
    {SPILL_MF_ARCH, "norm_eps", SPILL_MF_POS, A(norm_eps), 0, 1.0, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_ARCH, "activation", SPILL_MF_ENUM, A(activation), 0, 0, NONE, 0, 0, 0, k_activation, 16, 1},
    {SPILL_MF_ARCH, "bos_id", SPILL_MF_INT, A(bos_id), -1, 1 << 24, A(vocab_size), -1, 0, 0, NULL, 0, 1},
    {SPILL_MF_ARCH, "eos_id", SPILL_MF_INT, A(eos_id), -1, 1 << 24, A(vocab_size), -1, 0, 0, NULL, 0, 1},
    /* Kimi K3 as released; optional (absent in containers written before them), 0 = omitted */
    {SPILL_MF_ARCH, "situ_beta", SPILL_MF_NUM, A(situ_beta), 0, 1e6, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_ARCH, "situ_linear_beta", SPILL_MF_NUM, A(situ_lambda), -1e6, 1e6, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL,
     0, 1},
    {SPILL_MF_ARCH, "attn_res_block", SPILL_MF_INT, A(attn_res_block), 0, SPILL_MAX_LAYERS, A(n_layers), 0,
     SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    ROW_CUSTOM(SPILL_MF_ARCH, "layer_attn"),
    ROW_CUSTOM(SPILL_MF_ARCH, "gqa"),
    ROW_CUSTOM(SPILL_MF_ARCH, "mla"),
    ROW_CUSTOM(SPILL_MF_ARCH, "kda"),
    ROW_CUSTOM(SPILL_MF_ARCH, "gdn"),
    ROW_CUSTOM(SPILL_MF_ARCH, "moe"),
    /* arch.gqa */
    ROW_I(SPILL_MF_GQA, "n_heads", gqa.n_heads, 1, 4096),
    {SPILL_MF_GQA, "n_kv_heads", SPILL_MF_INT, A(gqa.n_kv_heads), 1, 4096, A(gqa.n_heads), 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "head_dim", SPILL_MF_INT, A(gqa.head_dim), 2, 4096, NONE, 0, SPILL_MF_EVEN, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "rope_theta", SPILL_MF_POS, A(gqa.rope_theta), 0, 1e12, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "qk_norm", SPILL_MF_ENUM, A(gqa.qk_norm), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, SPILL_QK_NORM_NONE,
     k_qk_norm, 8, 1},
    /* optional (absent in containers written before them): 0 = omitted */
    {SPILL_MF_GQA, "rope_dim", SPILL_MF_INT, A(gqa.rope_dim), 0, 4096, A(gqa.head_dim), 0,
     SPILL_MF_OPTIONAL | SPILL_MF_EVEN, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "qkv_bias", SPILL_MF_BOOL, A(gqa.qkv_bias), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "o_bias", SPILL_MF_BOOL, A(gqa.o_bias), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "out_gate", SPILL_MF_BOOL, A(gqa.out_gate), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "sinks", SPILL_MF_BOOL, A(gqa.sinks), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_GQA, "swa_window", SPILL_MF_INT, A(gqa.swa_window), 0, 1 << 30, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_GQA, "swa_pattern", SPILL_MF_INT, A(gqa.swa_pattern), 0, SPILL_MAX_LAYERS, NONE, 0, SPILL_MF_OPTIONAL,
     0, NULL, 0, 1},
    {SPILL_MF_GQA, "yarn_factor", SPILL_MF_NUM, A(gqa.yarn_factor), 0, 1e6, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_GQA, "yarn_orig_ctx", SPILL_MF_INT, A(gqa.yarn_orig_ctx), 0, 1 << 30, NONE, 0, SPILL_MF_OPTIONAL, 0,
     NULL, 0, 1},
    {SPILL_MF_GQA, "yarn_beta_fast", SPILL_MF_NUM, A(gqa.yarn_beta_fast), 0, 1e6, NONE, 0, SPILL_MF_OPTIONAL, 0,
     NULL, 0, 1},
    {SPILL_MF_GQA, "yarn_beta_slow", SPILL_MF_NUM, A(gqa.yarn_beta_slow), 0, 1e6, NONE, 0, SPILL_MF_OPTIONAL, 0,
     NULL, 0, 1},
    {SPILL_MF_GQA, "rope_mscale", SPILL_MF_NUM, A(gqa.rope_mscale), 0, 1e3, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_GQA, "yarn_unrounded", SPILL_MF_BOOL, A(gqa.yarn_unrounded), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL,
     0, 1},
    /* arch.mla */
    ROW_I(SPILL_MF_MLA, "n_heads", mla.n_heads, 1, 4096),
    ROW_I(SPILL_MF_MLA, "q_lora_rank", mla.q_lora_rank, 0, DIM_MAX),
    ROW_I(SPILL_MF_MLA, "kv_lora_rank", mla.kv_lora_rank, 1, DIM_MAX),
    ROW_I(SPILL_MF_MLA, "qk_nope_dim", mla.qk_nope_dim, 1, 4096),
    {SPILL_MF_MLA, "qk_rope_dim", SPILL_MF_INT, A(mla.qk_rope_dim), 0, 4096, NONE, 0, SPILL_MF_EVEN, 0, NULL, 0, 1},
    ROW_I(SPILL_MF_MLA, "v_head_dim", mla.v_head_dim, 1, 4096),
    {SPILL_MF_MLA, "use_rope", SPILL_MF_BOOL, A(mla.use_rope), 0, 0, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_MLA, "rope_theta", SPILL_MF_POS, A(mla.rope_theta), 0, 1e12, NONE, 0, 0, 0, NULL, 0, 1},
    /* optional (absent in containers written before them): 0 = default, omitted */
    {SPILL_MF_MLA, "rope_mscale", SPILL_MF_NUM, A(mla.rope_mscale), 0, 1e3, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_MLA, "softmax_scale", SPILL_MF_NUM, A(mla.softmax_scale), 0, 1e3, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL,
     0, 1},
    {SPILL_MF_MLA, "kv_norm_eps", SPILL_MF_NUM, A(mla.kv_norm_eps), 0, 1.0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_MLA, "out_gate", SPILL_MF_BOOL, A(mla.out_gate), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    ROW_CUSTOM(SPILL_MF_MLA, "yarn"), /* present iff yarn_factor != 0 */
    /* arch.mla.yarn */
    {SPILL_MF_YARN, "factor", SPILL_MF_NUM, A(mla.yarn_factor), 1.0, 1e6, NONE, 0, 0, 0, NULL, 0, 1},
    ROW_I(SPILL_MF_YARN, "orig_ctx", mla.yarn_orig_ctx, 1, 1 << 30),
    {SPILL_MF_YARN, "beta_fast", SPILL_MF_POS, A(mla.yarn_beta_fast), 0, 1e6, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_YARN, "beta_slow", SPILL_MF_POS, A(mla.yarn_beta_slow), 0, 1e6, NONE, 0, 0, 0, NULL, 0, 1},
    /* arch.kda */
    ROW_I(SPILL_MF_KDA, "n_heads", kda.n_heads, 1, 4096),
    ROW_I(SPILL_MF_KDA, "head_dim", kda.head_dim, 1, 4096),
    ROW_I(SPILL_MF_KDA, "conv_kernel", kda.conv_kernel, 1, 64),
    ROW_I(SPILL_MF_KDA, "gate_rank", kda.gate_rank, 1, DIM_MAX),
    ROW_I(SPILL_MF_KDA, "out_gate_rank", kda.out_gate_rank, 0, DIM_MAX),
    {SPILL_MF_KDA, "decay_floor", SPILL_MF_NUM, A(kda.decay_floor), -1e6, 0.0, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_KDA, "l2norm_eps", SPILL_MF_NUM, A(kda.l2norm_eps), 0, 1.0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_KDA, "gate_lower_bound", SPILL_MF_NUM, A(kda.gate_lower_bound), -1e6, 0.0, NONE, 0, SPILL_MF_OPTIONAL,
     0, NULL, 0, 1},
    /* arch.gdn */
    ROW_I(SPILL_MF_GDN, "n_k_heads", gdn.n_k_heads, 1, 4096),
    ROW_I(SPILL_MF_GDN, "n_v_heads", gdn.n_v_heads, 1, 4096),
    ROW_I(SPILL_MF_GDN, "head_dim", gdn.head_dim, 1, 4096),
    ROW_I(SPILL_MF_GDN, "conv_kernel", gdn.conv_kernel, 1, 64),
    /* arch.moe */
    ROW_I(SPILL_MF_MOE, "n_experts", moe.n_experts, 1, SPILL_MAX_EXPERTS),
    {SPILL_MF_MOE, "top_k", SPILL_MF_INT, A(moe.top_k), 1, SPILL_MAX_TOPK, A(moe.n_experts), 0, 0, 0, NULL, 0, 1},
    ROW_I(SPILL_MF_MOE, "d_expert", moe.d_expert, 1, DIM_MAX),
    ROW_I(SPILL_MF_MOE, "n_shared", moe.n_shared, 0, 64),
    ROW_I(SPILL_MF_MOE, "d_shared", moe.d_shared, 0, DIM_MAX),
    ROW_I(SPILL_MF_MOE, "d_latent", moe.d_latent, 0, DIM_MAX),
    {SPILL_MF_MOE, "router", SPILL_MF_ENUM, A(moe.router), 0, 0, NONE, 0, 0, 0, k_router, 16, 1},
    {SPILL_MF_MOE, "norm_topk", SPILL_MF_BOOL, A(moe.norm_topk), 0, 0, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_MOE, "routed_scale", SPILL_MF_POS, A(moe.routed_scale), 0, 1e6, NONE, 0, 0, 0, NULL, 0, 1},
    {SPILL_MF_MOE, "latent_norm", SPILL_MF_ENUM, A(moe.latent_norm), 0, 0, NONE, 0, SPILL_MF_OPTIONAL,
     SPILL_LATENT_NORM_INPUT, k_latent_norm, 8, 1},
    {SPILL_MF_MOE, "norm_min", SPILL_MF_NUM, A(moe.norm_min), 0, 1.0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_MOE, "shared_gate", SPILL_MF_BOOL, A(moe.shared_gate), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0,
     1},
    {SPILL_MF_MOE, "router_bias", SPILL_MF_BOOL, A(moe.router_bias), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    {SPILL_MF_MOE, "expert_bias", SPILL_MF_BOOL, A(moe.expert_bias), 0, 0, NONE, 0, SPILL_MF_OPTIONAL, 0, NULL, 0, 1},
    /* group-limited selection: all four present iff n_group (written when > 1) */
    ROW_CUSTOM(SPILL_MF_MOE, "n_group"),
    ROW_CUSTOM(SPILL_MF_MOE, "topk_group"),
    ROW_CUSTOM(SPILL_MF_MOE, "group_score"),
    ROW_CUSTOM(SPILL_MF_MOE, "group_mask"),
    /* tensors[i] */
    ROW_CUSTOM(SPILL_MF_TENSOR, "name"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "dtype"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "shape"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "group"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "offset"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "bytes"),
    ROW_CUSTOM(SPILL_MF_TENSOR, "crc32"),
    /* experts */
    ROW_CUSTOM(SPILL_MF_EXPERTS, "dtype"),
    ROW_CUSTOM(SPILL_MF_EXPERTS, "group"),
    ROW_CUSTOM(SPILL_MF_EXPERTS, "record_bytes"),
    ROW_CUSTOM(SPILL_MF_EXPERTS, "payload_bytes"),
    ROW_CUSTOM(SPILL_MF_EXPERTS, "sections"),
    /* experts.sections[i] */
    ROW_CUSTOM(SPILL_MF_SECTION, "name"),
    ROW_CUSTOM(SPILL_MF_SECTION, "rows"),
    ROW_CUSTOM(SPILL_MF_SECTION, "cols"),
    ROW_CUSTOM(SPILL_MF_SECTION, "offset"),
    ROW_CUSTOM(SPILL_MF_SECTION, "bytes"),
    /* banks[i] */
    ROW_CUSTOM(SPILL_MF_BANK, "layer"),
    ROW_CUSTOM(SPILL_MF_BANK, "file"),
    ROW_CUSTOM(SPILL_MF_BANK, "n_experts"),
    ROW_CUSTOM(SPILL_MF_BANK, "record_bytes"),
    ROW_CUSTOM(SPILL_MF_BANK, "data_offset"),
    {SPILL_MF_BANK, "dtypes", SPILL_MF_CUSTOM, NONE, 0, 0, NONE, 0, 0, 0, NULL, 0, SPILL_FORMAT_MIXED},
    /* files[i] */
    ROW_CUSTOM(SPILL_MF_FILE, "name"),
    ROW_CUSTOM(SPILL_MF_FILE, "bytes"),
    ROW_CUSTOM(SPILL_MF_FILE, "crc32"),
};
const int spill_mf_n_fields = (int)(sizeof spill_mf_fields / sizeof spill_mf_fields[0]);

static int *int_at(spill_arch *a, const spill_mf_field *f) { return (int *)((char *)a + f->off); }
static const int *cint_at(const spill_arch *a, const spill_mf_field *f) {
  return (const int *)((const char *)a + f->off);
}
static double *num_at(spill_arch *a, const spill_mf_field *f) { return (double *)((char *)a + f->off); }
static const double *cnum_at(const spill_arch *a, const spill_mf_field *f) {
  return (const double *)((const char *)a + f->off);
}

int spill_mf_only_keys(const cJSON *o, const char *path, spill_mf_obj obj, int version, spill_err *e) {
  const char *keys[64];
  int n = 0;
  for (int i = 0; i < spill_mf_n_fields && n < 63; i++)
    if (spill_mf_fields[i].obj == obj && version >= spill_mf_fields[i].min_version)
      keys[n++] = spill_mf_fields[i].key;
  keys[n] = NULL;
  return spill_json_only_keys(o, path, keys, SPILL_E_FORMAT, e);
}

static int read_enum(const cJSON *o, const char *path, const spill_mf_field *f, int *out, spill_err *e) {
  const char *s;
  if (f->flags & SPILL_MF_OPTIONAL)
    SPILL_TRY(spill_json_str_opt(o, f->key, path, f->max_len, f->names[(int)f->dflt], &s, SPILL_E_FORMAT, e));
  else
    SPILL_TRY(spill_json_str(o, f->key, path, f->max_len, &s, SPILL_E_FORMAT, e));
  int n = 0;
  for (; f->names[n]; n++)
    if (!strcmp(s, f->names[n])) {
      *out = n;
      return SPILL_OK;
    }
  char want[160] = "";
  for (int i = 0; i < n; i++)
    snprintf(want + strlen(want), sizeof want - strlen(want), "%s\"%s\"",
             i == 0 ? "" : i == n - 1 ? " or " : ", ", f->names[i]);
  return spill_err_set(e, SPILL_E_FORMAT, "%s.%s: \"%s\" is not %s", path, f->key, s, want);
}

static int read_field(const cJSON *o, const char *path, const spill_mf_field *f, spill_arch *a, spill_err *e) {
  const int opt = f->flags & SPILL_MF_OPTIONAL;
  switch (f->kind) {
    case SPILL_MF_INT: {
      int64_t hi = (int64_t)f->hi, v;
      if (f->cap != NONE) {
        const int64_t c = (int64_t)*(const int *)((const char *)a + f->cap) + f->cap_delta;
        if (c < hi) hi = c;
      }
      if (opt)
        SPILL_TRY(spill_json_int_opt(o, f->key, path, (int64_t)f->lo, hi, (int64_t)f->dflt, &v, SPILL_E_FORMAT, e));
      else
        SPILL_TRY(spill_json_int(o, f->key, path, (int64_t)f->lo, hi, &v, SPILL_E_FORMAT, e));
      *int_at(a, f) = (int)v;
      SPILL_FAIL_IF(e, (f->flags & SPILL_MF_EVEN) && v % 2 != 0, SPILL_E_FORMAT, "%s.%s: %d is odd", path, f->key,
                    (int)v);
      return SPILL_OK;
    }
    case SPILL_MF_NUM:
    case SPILL_MF_POS:
      if (opt)
        SPILL_TRY(spill_json_num_opt(o, f->key, path, f->lo, f->hi, f->dflt, num_at(a, f), SPILL_E_FORMAT, e));
      else
        SPILL_TRY(spill_json_num(o, f->key, path, f->lo, f->hi, num_at(a, f), SPILL_E_FORMAT, e));
      SPILL_FAIL_IF(e, f->kind == SPILL_MF_POS && *num_at(a, f) <= 0.0, SPILL_E_FORMAT, "%s.%s: must be > 0",
                    path, f->key);
      return SPILL_OK;
    case SPILL_MF_BOOL:
      SPILL_FAIL_IF(e, !opt && !cJSON_GetObjectItemCaseSensitive(o, f->key), SPILL_E_FORMAT,
                    "%s.%s: missing key", path, f->key);
      return spill_json_bool_opt(o, f->key, path, (int)f->dflt, int_at(a, f), SPILL_E_FORMAT, e);
    case SPILL_MF_ENUM:
      return read_enum(o, path, f, int_at(a, f), e);
    case SPILL_MF_STR: {
      const char *s;
      SPILL_TRY(spill_json_str(o, f->key, path, f->max_len, &s, SPILL_E_FORMAT, e));
      snprintf((char *)a + f->off, f->max_len + 1, "%s", s);
      return SPILL_OK;
    }
    case SPILL_MF_CUSTOM:
      return SPILL_OK;
  }
  return SPILL_OK;
}

int spill_mf_read(const cJSON *o, const char *path, spill_mf_obj obj, spill_arch *a, spill_err *e) {
  SPILL_TRY(spill_mf_only_keys(o, path, obj, SPILL_FORMAT_VERSION, e));
  for (int i = 0; i < spill_mf_n_fields; i++)
    if (spill_mf_fields[i].obj == obj) SPILL_TRY(read_field(o, path, &spill_mf_fields[i], a, e));
  return SPILL_OK;
}

int spill_mf_write(cJSON *o, spill_mf_obj obj, const spill_arch *a, spill_mf_custom_fn custom, void *ctx) {
  int failed = 0;
  for (int i = 0; i < spill_mf_n_fields; i++) {
    const spill_mf_field *f = &spill_mf_fields[i];
    if (f->obj != obj) continue;
    const int opt = f->flags & SPILL_MF_OPTIONAL;
    cJSON *v = NULL;
    switch (f->kind) {
      case SPILL_MF_INT:
      case SPILL_MF_BOOL: {
        const int x = *cint_at(a, f);
        if (opt && x == (int)f->dflt) continue;
        v = f->kind == SPILL_MF_INT ? cJSON_CreateNumber(x) : cJSON_CreateBool(x ? 1 : 0);
        break;
      }
      case SPILL_MF_NUM:
      case SPILL_MF_POS: {
        const double x = *cnum_at(a, f);
        if (opt && x == f->dflt) continue;
        v = cJSON_CreateNumber(x);
        break;
      }
      case SPILL_MF_ENUM: {
        int x = *cint_at(a, f), n = 0;
        while (f->names[n]) n++;
        /* a value outside the names is not written (optional) or written as the first */
        if (x < 0 || x >= n) {
          if (opt) continue;
          x = 0;
        }
        if (opt && x == (int)f->dflt) continue;
        v = cJSON_CreateString(f->names[x]);
        break;
      }
      case SPILL_MF_STR:
        v = cJSON_CreateString((const char *)a + f->off);
        break;
      case SPILL_MF_CUSTOM:
        if (custom) failed |= custom(ctx, o, f->key);
        continue;
    }
    if (!v || !cJSON_AddItemToObject(o, f->key, v)) {
      cJSON_Delete(v);
      failed = 1;
    }
  }
  return failed;
}
