/* engine/model/model.c: model lifetime, state and scratch.
 *
 * spill_model_open: container -> trunk and tensor views (weights.c) ->
 * sequence state for ctx tokens (one allocation, carved per layer) ->
 * forward scratch (one allocation carved by the same plan that
 * spill_model_scratch_bytes measures, so the RAM planner's numbers are the
 * real ones) -> thread pool -> built-in expert source. Nothing here runs per
 * token except spill_model_router_topk (the lookahead hook), which uses its
 * own scratch.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/model/model_internal.h"

#include <sys/mman.h>

#define MAXI(a, b) ((a) > (b) ? (a) : (b))

/* ---- state ---- */

static uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return spill_mul_u64(a, b, &r) ? r : UINT64_MAX;
}
static uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return spill_add_u64(a, b, &r) ? r : UINT64_MAX;
}

/* Floats of state of layer kind `kind` for ctx tokens. */
static uint64_t layer_state_floats(const spill_arch *a, spill_attn_kind kind, uint64_t ctx) {
  switch (kind) {
    case SPILL_ATTN_MLA:
      return sat_mul(ctx, (uint64_t)a->mla.kv_lora_rank + (uint64_t)a->mla.qk_rope_dim);
    case SPILL_ATTN_GQA:
      return sat_mul(ctx, 2 * (uint64_t)a->gqa.n_kv_heads * (uint64_t)a->gqa.head_dim);
    case SPILL_ATTN_KDA: {
      const uint64_t hd = (uint64_t)a->kda.n_heads * (uint64_t)a->kda.head_dim;
      const uint64_t K1 = a->kda.conv_kernel > 1 ? (uint64_t)a->kda.conv_kernel - 1 : 0;
      return sat_add(sat_mul(hd, (uint64_t)a->kda.head_dim), sat_mul(3 * K1, hd));
    }
  }
  return 0;
}

uint64_t spill_model_state_bytes(const spill_arch *a, int ctx) {
  if (!a || ctx < 0) return 0;
  uint64_t f = 0;
  for (int l = 0; l < a->n_layers && l < SPILL_MAX_LAYERS; l++)
    f = sat_add(f, layer_state_floats(a, a->layer_attn[l], (uint64_t)ctx));
  return sat_mul(f, sizeof(float));
}

static int alloc_state(spill_model *m, spill_err *e) {
  const uint64_t bytes = spill_model_state_bytes(&m->a, m->o.ctx);
  SPILL_FAIL_IF(e, bytes == UINT64_MAX || bytes > SIZE_MAX, SPILL_E_NOMEM,
                "state for ctx %d overflows", m->o.ctx);
  m->state_bytes = (size_t)bytes;
  m->state = spill_alloc_nozero(m->state_bytes ? m->state_bytes : 64, 64);
  SPILL_FAIL_IF(e, !m->state, SPILL_E_NOMEM, "state: cannot allocate %zu bytes for ctx %d",
                m->state_bytes, m->o.ctx);
  float *p = m->state;
  const spill_arch *a = &m->a;
  for (int l = 0; l < a->n_layers; l++) {
    spill_layer_weights *L = &m->L[l];
    const size_t n = (size_t)layer_state_floats(a, L->kind, (uint64_t)m->o.ctx);
    if (L->kind == SPILL_ATTN_MLA) {
      L->cache = p;
    } else if (L->kind == SPILL_ATTN_GQA) {
      L->cache = p;
      L->cache_v = p + n / 2;
    } else {
      L->kda_s = p;
      L->kda_ring = p + (size_t)a->kda.n_heads * a->kda.head_dim * a->kda.head_dim;
    }
    p += n;
  }
  spill_model_reset(m);
  return SPILL_OK;
}

void spill_model_reset(spill_model *m) {
  if (!m) return;
  /* MLA/GQA caches are only read below n_past, so they are never cleared
   * (their pages are touched only as the context grows); the KDA state and
   * conv rings must start at zero. */
  for (int l = 0; l < m->a.n_layers && m->state; l++) {
    if (m->L[l].kind != SPILL_ATTN_KDA) continue;
    /* S (H, d, d) then the rings (3, K-1, H*d), contiguous */
    memset(m->L[l].kda_s, 0, (size_t)layer_state_floats(&m->a, SPILL_ATTN_KDA, 0) * sizeof(float));
  }
  m->n_past = 0;
}

/* ---- scratch: one plan for measuring and carving ---- */

typedef struct carver {
  uint8_t *base; /* NULL: measure only */
  uint64_t off;
} carver;

static void *carve(carver *cv, uint64_t n_elems, uint64_t elem) {
  uint64_t bytes = sat_mul(n_elems ? n_elems : 1, elem);
  bytes = sat_add(bytes, 63) & ~(uint64_t)63;
  void *p = cv->base ? cv->base + cv->off : NULL;
  cv->off = sat_add(cv->off, bytes);
  return p;
}

static void plan_scratch(const spill_arch *a, int ctx, int n_threads, int T, int qlut, int xq,
                         carver *cv, spill_model_scratch *s) {
  const uint64_t D = (uint64_t)a->d_model, V = (uint64_t)a->vocab_size;
  int has[3] = {0, 0, 0};
  for (int l = 0; l < a->n_layers; l++)
    if ((int)a->layer_attn[l] >= 0 && (int)a->layer_attn[l] < 3) has[a->layer_attn[l]] = 1;
  uint64_t q = 1, kv = 1, heads = 1, ohead = 1, rope = 2, cq = 1, dc = 1, kda = 1, fa = 1, kd = 1;
  if (has[SPILL_ATTN_GQA]) {
    const spill_gqa_cfg *g = &a->gqa;
    q = MAXI(q, (uint64_t)g->n_heads * g->head_dim);
    kv = MAXI(kv, (uint64_t)g->n_kv_heads * g->head_dim);
    heads = MAXI(heads, (uint64_t)g->n_heads);
    ohead = MAXI(ohead, (uint64_t)g->n_heads * g->head_dim);
    rope = MAXI(rope, (uint64_t)g->head_dim);
  }
  if (has[SPILL_ATTN_MLA]) {
    const spill_mla_cfg *c = &a->mla;
    q = MAXI(q, (uint64_t)c->n_heads * (c->qk_nope_dim + c->qk_rope_dim));
    kv = MAXI(kv, (uint64_t)c->kv_lora_rank + c->qk_rope_dim);
    heads = MAXI(heads, (uint64_t)c->n_heads);
    ohead = MAXI(ohead, (uint64_t)c->n_heads * c->v_head_dim);
    rope = MAXI(rope, (uint64_t)c->qk_rope_dim);
    cq = MAXI(cq, (uint64_t)c->q_lora_rank);
    dc = MAXI(dc, (uint64_t)c->kv_lora_rank);
  }
  if (has[SPILL_ATTN_KDA]) {
    const spill_kda_cfg *c = &a->kda;
    kda = (uint64_t)c->n_heads * c->head_dim;
    q = MAXI(q, kda);
    kv = MAXI(kv, kda);
    heads = MAXI(heads, (uint64_t)c->n_heads);
    ohead = MAXI(ohead, kda);
    fa = MAXI((uint64_t)c->gate_rank, (uint64_t)c->out_gate_rank);
    kd = (uint64_t)c->head_dim;
  }
  const uint64_t Tn = (uint64_t)T, nt = (uint64_t)n_threads;
  s->x = carve(cv, Tn * D, 4);
  s->h = carve(cv, Tn * D, 4);
  s->attn_out = carve(cv, D, 4);
  s->ffn_out = carve(cv, Tn * D, 4);
  s->shared_out = carve(cv, Tn * D, 4);
  s->q = carve(cv, q, 4);
  s->k = carve(cv, kv, 4);
  s->v = carve(cv, kv, 4);
  s->cq = carve(cv, cq, 4);
  s->att = carve(cv, sat_mul(nt, (uint64_t)ctx), 4);
  s->qa = carve(cv, MAXI(heads * dc, kda), 4);
  s->ol = carve(cv, heads * dc, 4);
  s->o = carve(cv, ohead, 4);
  s->rowtmp = carve(cv, nt * dc, 4);
  s->rope_cs = carve(cv, rope, 4);
  s->kq = carve(cv, kda, 4);
  s->kk = carve(cv, kda, 4);
  s->kv = carve(cv, kda, 4);
  s->kfa = carve(cv, fa, 4);
  s->kalpha = carve(cv, kda, 4);
  s->kbeta = carve(cv, heads, 4);
  s->ku = carve(cv, nt * kd, 4);
  uint64_t ff = (uint64_t)a->d_ff;
  const int n_moe = spill_arch_n_moe(a);
  uint64_t E = 1, K = 1, din = D, de = 1;
  if (n_moe > 0) {
    const spill_moe_cfg *c = &a->moe;
    E = (uint64_t)c->n_experts;
    K = (uint64_t)c->top_k;
    din = c->d_latent > 0 ? (uint64_t)c->d_latent : D;
    de = (uint64_t)c->d_expert;
    ff = MAXI(ff, (uint64_t)c->n_shared * c->d_shared);
    ff = MAXI(ff, de);
  }
  s->ff_g = carve(cv, ff, 4);
  s->ff_u = carve(cv, ff, 4);
  s->router = carve(cv, Tn * E, 4);
  s->router_sel = carve(cv, E, 4);
  s->sel = carve(cv, Tn * K, 4);
  s->selw = carve(cv, Tn * K, 4);
  s->u = carve(cv, Tn * din, 4);
  /* rvq3 LUTs are always planned (the arch does not carry the expert dtype),
   * so for other dtypes this is an upper bound of 2*T*96*d_in floats. */
  const uint64_t lut_in = (din / 8) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  const uint64_t lut_de = (de / 8) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  s->lut_g = carve(cv, n_moe ? Tn * lut_in : 0, 4);
  s->lut_u = carve(cv, n_moe ? Tn * lut_in : 0, 4);
  s->lut_d = carve(cv, n_moe ? lut_de : 0, 4);
  /* int16 LUTs of the VBMI path: carved only when the model uses it (qlut;
   * spill_model_scratch_bytes counts them, an upper bound) */
  const int nq = n_moe && qlut;
  s->qlut_g = nq ? carve(cv, Tn * spill_k_qlut_rvq3_i16_bytes((uint32_t)din), 1) : NULL;
  s->qlut_u = nq ? carve(cv, Tn * spill_k_qlut_rvq3_i16_bytes((uint32_t)din), 1) : NULL;
  s->qlut_d = nq ? carve(cv, spill_k_qlut_rvq3_i16_bytes((uint32_t)de), 1) : NULL;
  /* act_q8 inputs: per-token expert inputs, and a pair sized for the widest
   * matvec input (rounded up to 256: spill_k_xq_bytes grows with n) */
  uint64_t maxc = MAXI(MAXI(MAXI(D, din), MAXI(de, ff)), MAXI(MAXI(q, kv), MAXI(ohead, cq)));
  maxc = MAXI(maxc, MAXI(MAXI(heads * dc, kda), fa));
  maxc = (maxc + 255) / 256 * 256;
  s->xq_u_bytes = xq ? spill_k_xq_bytes((uint32_t)din) : 0;
  s->xq_cap = xq && maxc <= UINT32_MAX ? spill_k_xq_bytes((uint32_t)maxc) : 0;
  s->xq_u = xq ? carve(cv, Tn * s->xq_u_bytes, 1) : NULL;
  s->xq0 = xq ? carve(cv, s->xq_cap, 1) : NULL;
  s->xq1 = xq ? carve(cv, s->xq_cap, 1) : NULL;
  s->eg = carve(cv, de, 4);
  s->eu = carve(cv, de, 4);
  s->slot = carve(cv, Tn * K * din, 4);
  s->y = carve(cv, din, 4);
  s->uniq = carve(cv, Tn * K, 4);
  s->use_start = carve(cv, Tn * K + 1, 4);
  s->use = carve(cv, Tn * K, 4);
  s->use_fill = carve(cv, Tn * K, 4);
  s->stamp = carve(cv, E, 4);
  s->stamp_idx = carve(cv, E, 4);
  s->delivered = carve(cv, Tn * K, 1);
  s->logits = carve(cv, V, 4);
  s->la_h = carve(cv, D, 4);
  s->la_s = carve(cv, E, 4);
}

uint64_t spill_model_scratch_bytes(const spill_arch *a, int ctx, int n_threads, int max_chunk) {
  if (!a || ctx < 0) return 0;
  carver cv = {NULL, 0};
  spill_model_scratch s;
  plan_scratch(a, ctx, n_threads > 0 ? n_threads : 1, max_chunk > 0 ? max_chunk : 16, 1, 1, &cv,
               &s);
  return cv.off;
}

/* ---- open / close ---- */

static int open_impl(spill_model *m, const char *dir, spill_err *e) {
  SPILL_TRY(spill_container_open(dir, &m->c, e));
  m->container_open = 1;
  m->a = m->c.m.arch;
  m->L = calloc((size_t)(m->a.n_layers > 0 ? m->a.n_layers : 1), sizeof *m->L);
  SPILL_FAIL_IF(e, !m->L, SPILL_E_NOMEM, "layer table");
  SPILL_TRY(spill_model_load_weights(m, e));
  SPILL_TRY(alloc_state(m, e));
  /* rvq3 through int16 LUTs (engine/quant/kernels.h) only on request
   * (SPILL_RVQ3_QLUT=1) and where VBMI makes it fast: its rounding moves the
   * logits ~1e-4 relative, past the reference agreement tolerance on the
   * nano models (see refuted/0301), so the f32-LUT path stays the default. */
  const char *ql = getenv("SPILL_RVQ3_QLUT");
  m->rvq_q =
      m->expert_dtype == SPILL_DT_RVQ3 && ql && !strcmp(ql, "1") && spill_k_apply_rvq3_i16_fast();
  carver cv = {NULL, 0};
  plan_scratch(&m->a, m->o.ctx, m->o.n_threads, m->o.max_chunk, m->rvq_q, m->o.act_q8, &cv,
               &m->s);
  SPILL_FAIL_IF(e, cv.off > SIZE_MAX, SPILL_E_NOMEM, "scratch overflows");
  m->scratch_bytes = (size_t)cv.off;
  m->scratch_mem = spill_alloc(m->scratch_bytes, 64);
  SPILL_FAIL_IF(e, !m->scratch_mem, SPILL_E_NOMEM, "scratch: cannot allocate %zu bytes",
                m->scratch_bytes);
  cv.base = m->scratch_mem;
  cv.off = 0;
  plan_scratch(&m->a, m->o.ctx, m->o.n_threads, m->o.max_chunk, m->rvq_q, m->o.act_q8, &cv,
               &m->s);
  SPILL_TRY(spill_pool_open(m->o.n_threads, &m->pool, e));
  if (spill_arch_n_moe(&m->a) > 0) {
    SPILL_TRY(spill_expert_source_sync_open(&m->c, m->o.verify, 2, &m->builtin, e));
    m->builtin_open = 1;
  }
  m->src = m->o.experts ? *m->o.experts : m->builtin;
  return SPILL_OK;
}

int spill_model_open(const char *dir, const spill_model_opts *o, spill_model **out,
                     spill_err *e) {
  SPILL_FAIL_IF(e, !dir || !out, SPILL_E_INVALID_ARG, "spill_model_open: NULL argument");
  *out = NULL;
  spill_k_init();
  spill_model *m = calloc(1, sizeof *m);
  SPILL_FAIL_IF(e, !m, SPILL_E_NOMEM, "model");
  if (o) m->o = *o;
  if (m->o.n_threads <= 0) m->o.n_threads = 1;
  if (m->o.ctx <= 0) m->o.ctx = 4096;
  if (m->o.max_chunk <= 0) m->o.max_chunk = 16;
  if (m->o.par_min_weights <= 0) m->o.par_min_weights = 32768;
  if (m->o.task_max_weights <= 0) m->o.task_max_weights = 262144;
  if (m->o.observer) {
    m->obs = *m->o.observer;
    m->has_obs = 1;
  }
  m->o.observer = NULL;
  int rc = open_impl(m, dir, e);
  if (rc < 0) {
    spill_model_close(m);
    return rc;
  }
  *out = m;
  return SPILL_OK;
}

void spill_model_close(spill_model *m) {
  if (!m) return;
  spill_pool_close(m->pool);
  if (m->builtin_open) spill_expert_source_sync_close(&m->builtin);
  spill_free(m->scratch_mem, m->scratch_bytes);
  spill_free(m->state, m->state_bytes ? m->state_bytes : 64);
  if (m->trunk_mapped) {
    munmap(m->trunk, m->trunk_bytes);
  } else {
    if (m->trunk_locked) munlock(m->trunk, m->trunk_bytes);
    spill_free(m->trunk, m->trunk_bytes ? m->trunk_bytes : 1);
  }
  free(m->L);
  if (m->container_open) spill_container_close(&m->c);
  free(m);
}

void spill_model_set_expert_source(spill_model *m, const spill_expert_source *src) {
  m->src = src ? *src : m->builtin;
}

int spill_model_set_forced_routing(spill_model *m, const uint32_t *ids, int n_pos,
                                   spill_err *e) {
  SPILL_FAIL_IF(e, !m, SPILL_E_INVALID_ARG, "forced routing: NULL model");
  if (!ids) {
    m->force_ids = NULL;
    m->force_n = m->force_n_moe = 0;
    return SPILL_OK;
  }
  const int n_moe = spill_arch_n_moe(&m->a);
  SPILL_FAIL_IF(e, n_moe == 0, SPILL_E_INVALID_ARG, "forced routing: the model has no MoE layer");
  SPILL_FAIL_IF(e, n_pos < 1, SPILL_E_INVALID_ARG, "forced routing: %d positions", n_pos);
  const int E = m->a.moe.n_experts, K = m->a.moe.top_k;
  for (int p = 0; p < n_pos; p++)
    for (int i = 0; i < n_moe; i++) {
      const uint32_t *r = ids + ((size_t)p * (size_t)n_moe + (size_t)i) * (size_t)K;
      for (int j = 0; j < K; j++) {
        SPILL_FAIL_IF(e, r[j] >= (uint32_t)E, SPILL_E_RANGE,
                      "forced routing: position %d MoE layer %d slot %d: expert %u out of [0, %d)",
                      p, i, j, r[j], E);
        for (int q = 0; q < j; q++)
          SPILL_FAIL_IF(e, r[q] == r[j], SPILL_E_RANGE,
                        "forced routing: position %d MoE layer %d: expert %u in slots %d and %d",
                        p, i, r[j], q, j);
      }
    }
  m->force_ids = ids;
  m->force_n = n_pos;
  m->force_n_moe = n_moe;
  return SPILL_OK;
}

void spill_model_set_observer(spill_model *m, const spill_model_observer *obs) {
  m->has_obs = obs != NULL;
  if (obs) m->obs = *obs;
}

const spill_arch *spill_model_arch(const spill_model *m) { return &m->a; }
const spill_container *spill_model_container(const spill_model *m) { return &m->c; }
const spill_model_stats *spill_model_last_stats(const spill_model *m) { return &m->stats; }
int spill_model_n_past(const spill_model *m) { return m->n_past; }
int spill_model_ctx(const spill_model *m) { return m->o.ctx; }
uint64_t spill_model_trunk_bytes(const spill_model *m) { return m->trunk_bytes; }

int spill_model_trunk_residency(const spill_model *m) {
  return m->trunk_locked ? 2 : m->trunk_mapped ? 1 : 0;
}

uint64_t spill_model_parallel_runs(const spill_model *m) { return spill_pool_dispatches(m->pool); }

/* ---- lookahead ---- */

int spill_model_router_topk(spill_model *m, int layer, const float *hidden, int k,
                            uint32_t *ids_out, float *scores_out, spill_err *e) {
  SPILL_FAIL_IF(e, !m || !hidden || !ids_out, SPILL_E_INVALID_ARG, "router_topk: NULL argument");
  SPILL_FAIL_IF(e, layer < 0 || layer >= m->a.n_layers || !m->L[layer].is_moe, SPILL_E_RANGE,
                "router_topk: layer %d is not a MoE layer", layer);
  const int E = m->a.moe.n_experts;
  SPILL_FAIL_IF(e, k < 1 || k > E || k > SPILL_MAX_TOPK, SPILL_E_RANGE,
                "router_topk: k %d out of range (1..%d)", k, E < SPILL_MAX_TOPK ? E : SPILL_MAX_TOPK);
  const spill_layer_weights *L = &m->L[layer];
  float *h = m->s.la_h; /* (D) */
  float *s = m->s.la_s; /* (E) */
  spill_k_rmsnorm(hidden, L->ffn_norm, h, (uint32_t)m->a.d_model, (float)m->a.norm_eps);
  spill_k_matvec(&L->ffn_gate_inp, h, s, 0, (uint32_t)E); /* single-threaded: may run inside a forward */
  if (m->a.moe.router == SPILL_ROUTER_SIGMOID) {
    for (int i = 0; i < E; i++) s[i] = spill_model_sigmoid(s[i]) + L->exp_probs_b[i];
  } else {
    spill_model_softmax(s, E);
  }
  spill_model_group_mask(&m->a.moe, s);
  float vals[SPILL_MAX_TOPK];
  spill_model_topk(s, E, k, ids_out, vals);
  if (scores_out) memcpy(scores_out, vals, (size_t)k * sizeof(float));
  return SPILL_OK;
}
