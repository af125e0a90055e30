/* engine/model/weights.c: loading the trunk and resolving tensors.
 *
 * The whole trunk.bin is read into one SPILL_TENSOR_ALIGN-aligned
 * spill_alloc buffer (tensor i at its manifest offset). Every tensor the arch
 * needs is then looked up by name exactly once and turned into a spill_qmat
 * view or an f32 pointer inside that buffer, after checking its shape (and,
 * for vectors, conv weights and codebooks, that it is f32). Missing or
 * misshaped tensors fail with SPILL_E_FORMAT naming the tensor. The hot path
 * never does a string lookup. Also: views of expert records (sections of
 * a pinned record) and row sub-views of matrices. Each attention kind
 * resolves its own tensors through spill_model_get_mat / spill_model_get_f32
 * (its loader in attention_<kind>.c); this file calls no other file of
 * engine/model.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/model/model_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/base/crc32.h"

/* Bytes of one row's values, and scales per row (f16 count), from the
 * dtype traits table; 0 and 0 for a shape the loader has already refused. */
static void row_layout(int dtype, uint32_t cols, uint32_t group, size_t *row_bytes,
                       size_t *row_scales) {
  uint64_t rb = 0, rs = 0;
  if (!spill_dtype_row_layout(dtype, cols, group, &rb, &rs)) rb = rs = 0;
  *row_bytes = (size_t)rb;
  *row_scales = (size_t)rs;
}

/* Fills a view of a (rows, cols) matrix whose bytes start at p. */
static void make_qmat(int dtype, uint32_t rows, uint32_t cols, uint32_t group,
                      const float *codebook, const uint8_t *p, spill_qmat *w) {
  size_t rb, rs;
  row_layout(dtype, cols, group, &rb, &rs);
  memset(w, 0, sizeof *w);
  w->dtype = dtype;
  w->rows = rows;
  w->cols = cols;
  w->group = group;
  w->data = p;
  w->scales = rs ? (const uint16_t *)(const void *)(p + rb * rows) : NULL;
  w->codebook = codebook;
}

spill_qmat spill_model_qmat_rows(const spill_qmat *w, uint32_t r0, uint32_t n) {
  size_t rb, rs;
  row_layout(w->dtype, w->cols, w->group, &rb, &rs);
  spill_qmat v = *w;
  v.rows = n;
  v.data = (const uint8_t *)w->data + rb * r0;
  v.scales = w->scales ? w->scales + rs * r0 : NULL;
  return v;
}

void spill_model_expert_qmat(const spill_model *m, int layer, const uint8_t *rec, int sec,
                             spill_qmat *out) {
  const spill_section_info *si = &m->c.m.sect[sec];
  make_qmat(spill_manifest_sect_dtype(&m->c.m, layer, sec), si->rows, si->cols,
            m->c.m.expert_group,
            m->L[layer].codebook[sec], rec + si->offset, out);
}

/* ---- name resolution ---- */

typedef struct loader {
  spill_model *m;
  char name[SPILL_NAME_MAX + 32];
} loader;

static const spill_tensor_info *find(loader *ld, int layer, const char *suffix) {
  if (layer >= 0)
    snprintf(ld->name, sizeof ld->name, "blk.%d.%s", layer, suffix);
  else
    snprintf(ld->name, sizeof ld->name, "%s", suffix);
  return spill_manifest_find(&ld->m->c.m, ld->name);
}

static int shape_err(loader *ld, const spill_tensor_info *t, uint64_t rows, uint64_t cols,
                     int vec, spill_err *e) {
  if (vec)
    return spill_err_set(e, SPILL_E_FORMAT,
                         "tensor %s: shape (%" PRIu64 ", %" PRIu64 ") ndim %d, arch expects "
                         "vector (%" PRIu64 ")",
                         ld->name, t->shape[0], t->shape[1], t->ndim, rows);
  return spill_err_set(e, SPILL_E_FORMAT,
                       "tensor %s: shape (%" PRIu64 ", %" PRIu64 ") ndim %d, arch expects "
                       "(%" PRIu64 ", %" PRIu64 ")",
                       ld->name, t->shape[0], t->shape[1], t->ndim, rows, cols);
}

/* A matrix used through the matvec kernel: any dtype but rvq3. */
static int get_mat(loader *ld, int layer, const char *suffix, uint64_t rows, uint64_t cols,
                   spill_qmat *w, spill_err *e) {
  const spill_tensor_info *t = find(ld, layer, suffix);
  if (!t) return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: missing from the manifest", ld->name);
  if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return shape_err(ld, t, rows, cols, 0, e);
  const spill_dtype_traits *tr = spill_dtype_traits_of((int)t->dtype);
  if (!tr || tr->codebook)
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "tensor %s: dtype %s not supported in the trunk",
                         ld->name, spill_dtype_name(t->dtype));
  if (t->offset > ld->m->trunk_bytes || t->bytes > ld->m->trunk_bytes - t->offset)
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: outside trunk.bin", ld->name);
  if (spill_dtype_check_values(t->dtype, ld->m->trunk + t->offset, rows, cols, e) < 0) {
    spill_err_prefix(e, "tensor %s", ld->name);
    return SPILL_E_FORMAT;
  }
  make_qmat(t->dtype, (uint32_t)rows, (uint32_t)cols, t->group, NULL, ld->m->trunk + t->offset, w);
  return SPILL_OK;
}

/* An f32 array: a vector (n) when cols == 0, else an f32 matrix (rows, cols). */
static int get_f32(loader *ld, int layer, const char *suffix, uint64_t rows, uint64_t cols,
                   const float **out, spill_err *e) {
  const spill_tensor_info *t = find(ld, layer, suffix);
  if (!t) return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: missing from the manifest", ld->name);
  if (cols == 0) {
    if (t->ndim != 1 || t->shape[0] != rows) return shape_err(ld, t, rows, 0, 1, e);
  } else if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols) {
    return shape_err(ld, t, rows, cols, 0, e);
  }
  if (t->dtype != SPILL_DT_F32)
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "tensor %s: dtype %s, expected f32", ld->name,
                         spill_dtype_name(t->dtype));
  if (t->offset > ld->m->trunk_bytes || t->bytes > ld->m->trunk_bytes - t->offset)
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: outside trunk.bin", ld->name);
  *out = (const float *)(const void *)(ld->m->trunk + t->offset);
  return SPILL_OK;
}

int spill_model_get_mat(spill_model *m, int layer, const char *suffix, uint64_t rows,
                        uint64_t cols, spill_qmat *w, spill_err *e) {
  loader ld = {.m = m};
  return get_mat(&ld, layer, suffix, rows, cols, w, e);
}

int spill_model_get_f32(spill_model *m, int layer, const char *suffix, uint64_t rows,
                        uint64_t cols, const float **out, spill_err *e) {
  loader ld = {.m = m};
  return get_f32(&ld, layer, suffix, rows, cols, out, e);
}

int spill_model_load_ffn(spill_model *m, int l, spill_err *e) {
  loader lo = {.m = m};
  loader *ld = &lo;
  const spill_arch *a = &m->a;
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)a->d_model;
  if (!L->is_moe) {
    const uint64_t F = (uint64_t)a->d_ff;
    SPILL_TRY(get_mat(ld, l, "ffn_gate", F, D, &L->ffn_gate, e));
    SPILL_TRY(get_mat(ld, l, "ffn_up", F, D, &L->ffn_up, e));
    SPILL_TRY(get_mat(ld, l, "ffn_down", D, F, &L->ffn_down, e));
    return SPILL_OK;
  }
  const spill_moe_cfg *c = &a->moe;
  const uint64_t E = (uint64_t)c->n_experts;
  SPILL_TRY(get_mat(ld, l, "ffn_gate_inp", E, D, &L->ffn_gate_inp, e));
  if (c->router == SPILL_ROUTER_SIGMOID)
    SPILL_TRY(get_f32(ld, l, "exp_probs_b", E, 0, &L->exp_probs_b, e));
  if (c->router_bias) SPILL_TRY(get_f32(ld, l, "ffn_gate_inp_bias", E, 0, &L->ffn_gate_inp_bias, e));
  if (c->expert_bias) {
    const uint64_t de = (uint64_t)c->d_expert, din = (uint64_t)m->d_in;
    SPILL_TRY(get_f32(ld, l, "ffn_gate_exps_bias", E, de, &L->exps_bias[SPILL_SEC_GATE], e));
    SPILL_TRY(get_f32(ld, l, "ffn_up_exps_bias", E, de, &L->exps_bias[SPILL_SEC_UP], e));
    SPILL_TRY(get_f32(ld, l, "ffn_down_exps_bias", E, din, &L->exps_bias[SPILL_SEC_DOWN], e));
  }
  if (c->d_latent == 0 && c->latent_norm != SPILL_LATENT_NORM_INPUT)
    return spill_err_set(e, SPILL_E_FORMAT, "arch.moe.latent_norm: set without a latent (d_latent 0)");
  if (c->d_latent > 0) {
    const uint64_t dl = (uint64_t)c->d_latent;
    SPILL_TRY(get_mat(ld, l, "moe_down_proj", dl, D, &L->moe_down_proj, e));
    if (c->latent_norm != SPILL_LATENT_NORM_NONE)
      SPILL_TRY(get_f32(ld, l, "moe_latent_norm", dl, 0, &L->moe_latent_norm, e));
    SPILL_TRY(get_mat(ld, l, "moe_up_proj", D, dl, &L->moe_up_proj, e));
  }
  if (c->n_shared > 0) {
    const uint64_t S = (uint64_t)c->n_shared * (uint64_t)c->d_shared;
    SPILL_TRY(get_mat(ld, l, "ffn_gate_shexp", S, D, &L->ffn_gate_shexp, e));
    SPILL_TRY(get_mat(ld, l, "ffn_up_shexp", S, D, &L->ffn_up_shexp, e));
    SPILL_TRY(get_mat(ld, l, "ffn_down_shexp", D, S, &L->ffn_down_shexp, e));
    if (c->shared_gate) SPILL_TRY(get_mat(ld, l, "ffn_gate_inp_shexp", 1, D, &L->ffn_gate_inp_shexp, e));
  }
  SPILL_FAIL_IF(e, c->shared_gate && c->n_shared == 0, SPILL_E_FORMAT,
                "arch.moe.shared_gate: set without shared experts (n_shared 0)");
  if (m->expert_dtype == SPILL_DT_RVQ3) {
    static const char *const cb[SPILL_SEC_COUNT] = {
        "ffn_gate_exps.codebook", "ffn_up_exps.codebook", "ffn_down_exps.codebook"};
    for (int s = 0; s < SPILL_SEC_COUNT; s++)
      SPILL_TRY(get_f32(ld, l, cb[s], SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES, SPILL_RVQ_DIM,
                        &L->codebook[s], e));
  }
  return SPILL_OK;
}

/* Checks the expert record layout against the arch. */
static int check_experts(spill_model *m, spill_err *e) {
  const spill_manifest *mf = &m->c.m;
  const spill_arch *a = &m->a;
  if (spill_arch_n_moe(a) == 0) return SPILL_OK;
  const uint32_t din = (uint32_t)m->d_in, de = (uint32_t)a->moe.d_expert;
  const uint32_t want[SPILL_SEC_COUNT][2] = {{de, din}, {de, din}, {din, de}};
  static const char *const nm[SPILL_SEC_COUNT] = {"gate", "up", "down"};
  if (mf->expert_dtype == SPILL_DT_RVQ3 && ((din % 8) != 0 || (de % 8) != 0))
    return spill_err_set(e, SPILL_E_FORMAT, "rvq3 experts need d_in %u and d_expert %u divisible by 8",
                         din, de);
  for (int s = 0; s < SPILL_SEC_COUNT; s++) {
    const spill_section_info *si = &mf->sect[s];
    if (si->rows != want[s][0] || si->cols != want[s][1])
      return spill_err_set(e, SPILL_E_FORMAT,
                           "expert section %s: shape (%u, %u), arch expects (%u, %u)", nm[s],
                           si->rows, si->cols, want[s][0], want[s][1]);
    if ((uint64_t)si->offset + si->bytes > mf->record_bytes)
      return spill_err_set(e, SPILL_E_FORMAT, "expert section %s: outside the record", nm[s]);
  }
  if (a->moe.top_k < 1 || a->moe.top_k > SPILL_MAX_TOPK || a->moe.top_k > a->moe.n_experts)
    return spill_err_set(e, SPILL_E_FORMAT, "moe.top_k %d out of range (1..%d, <= n_experts %d)",
                         a->moe.top_k, SPILL_MAX_TOPK, a->moe.n_experts);
  return SPILL_OK;
}

int spill_model_load_trunk(spill_model *m, spill_err *e) {
  const spill_manifest *mf = &m->c.m;
  SPILL_FAIL_IF(e, m->c.trunk_bytes > (uint64_t)SIZE_MAX, SPILL_E_NOMEM, "trunk too large");
  m->trunk_bytes = (size_t)m->c.trunk_bytes;
  if (m->o.trunk_mode == 1 && m->trunk_bytes > 0) {
    /* file-backed: pages come and go with memory pressure like any file */
    void *p = mmap(NULL, m->trunk_bytes, PROT_READ, MAP_SHARED, m->c.trunk_fd, 0);
    SPILL_FAIL_IF(e, p == MAP_FAILED, SPILL_E_IO, "trunk.bin: mmap of %zu bytes failed: %s",
                  m->trunk_bytes, strerror(errno));
    m->trunk = p;
    m->trunk_mapped = 1;
  } else {
    m->trunk = spill_alloc_nozero(m->trunk_bytes ? m->trunk_bytes : 1, 4096);
    SPILL_FAIL_IF(e, !m->trunk, SPILL_E_NOMEM, "trunk: cannot allocate %zu bytes", m->trunk_bytes);
  }
  for (int i = 0; i < mf->n_tensors; i++) {
    const spill_tensor_info *t = &mf->tensors[i];
    SPILL_FAIL_IF(e, t->offset > m->trunk_bytes || t->bytes > m->trunk_bytes - t->offset,
                  SPILL_E_FORMAT, "tensor %s: [%" PRIu64 ", +%" PRIu64 ") outside trunk.bin (%zu B)",
                  t->name, t->offset, t->bytes, m->trunk_bytes);
    if (m->trunk_mapped) {
      /* Checked at open in every trunk mode, like read and mlock (one
       * sequential pass over the mapping, the bytes read mode reads anyway;
       * the pages stay evictable afterwards), not only with verify. */
      uint32_t crc = spill_crc32(0, m->trunk + t->offset, (size_t)t->bytes);
      if (crc != t->crc32)
        return spill_err_set(e, SPILL_E_CHECKSUM,
                             "trunk.bin: tensor %s: crc32 mismatch (stored 0x%08x, computed "
                             "0x%08x)", t->name, t->crc32, crc);
      continue;
    }
    SPILL_TRY(spill_container_read_tensor(&m->c, t, m->trunk + t->offset,
                                          m->trunk_bytes - t->offset, e));
  }
  if (m->o.trunk_mode == 2 && m->trunk_bytes > 0) {
    SPILL_FAIL_IF(e, mlock(m->trunk, m->trunk_bytes) != 0, SPILL_E_NOMEM,
                  "trunk: mlock of %zu bytes refused (%s; see RLIMIT_MEMLOCK / ulimit -l)",
                  m->trunk_bytes, strerror(errno));
    m->trunk_locked = 1;
  }
  m->expert_dtype = mf->expert_dtype;
  m->d_in = m->a.moe.d_latent > 0 ? m->a.moe.d_latent : m->a.d_model;
  SPILL_TRY(check_experts(m, e));

  loader ld = {.m = m};
  const uint64_t D = (uint64_t)m->a.d_model, V = (uint64_t)m->a.vocab_size;
  SPILL_TRY(get_mat(&ld, -1, "tok_embd", V, D, &m->tok_embd, e));
  SPILL_TRY(get_f32(&ld, -1, "output_norm", D, 0, &m->output_norm, e));
  SPILL_TRY(get_mat(&ld, -1, "output", V, D, &m->output, e));
  if (m->a.attn_res_block > 0)
    SPILL_TRY(get_f32(&ld, -1, "output_res_score", D, 0, &m->output_res_score, e));
  return SPILL_OK;
}

int spill_model_load_norms(spill_model *m, int l, spill_err *e) {
  loader ld = {.m = m};
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)m->a.d_model;
  SPILL_TRY(get_f32(&ld, l, "attn_norm", D, 0, &L->attn_norm, e));
  SPILL_TRY(get_f32(&ld, l, "ffn_norm", D, 0, &L->ffn_norm, e));
  if (m->a.attn_res_block > 0) { /* AttnRes score vectors (docs/MODEL.md MIX) */
    SPILL_TRY(get_f32(&ld, l, "attn_res_score", D, 0, &L->attn_res_score, e));
    SPILL_TRY(get_f32(&ld, l, "ffn_res_score", D, 0, &L->ffn_res_score, e));
  }
  return SPILL_OK;
}
