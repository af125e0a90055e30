/* engine/model/attention_mla.c: multi-head latent attention with kv_b
 * absorbed (DeepSeek-V3 / Kimi), docs/MODEL.md "ATTN MLA".
 *
 * The cache holds per token only the normalised latent c (dc) and the shared
 * rope key kr (dr): dc + dr floats per token per layer. Per head j the query
 * is absorbed into latent space, qa_j = Wuk_j^T qn_j (dc), the scores are
 * qa_j . c_t + qr_j . kr_t, the latent output ol_j = sum_t a_t c_t and the
 * head output o_j = Wuv_j ol_j. Wuk_j^T qn_j is computed by dequantising the
 * dn rows of Wuk_j one at a time (any trunk dtype) and accumulating them in
 * row order. Heads run in parallel on the pool; each head is computed by one
 * thread in a fixed order, so results do not depend on the thread count.
 * RoPE on the dr dims is rotate-half with optional YaRN frequencies and
 * mscale (mla_rope_table); interleaved-pair sources are de-interleaved at
 * import (engine/import), which gives the same dot products. With
 * mla.out_gate (Kimi K3) the concatenated head outputs are multiplied by
 * sigmoid(attn_gate h) before attn_output.
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

/* a . b with 8 independent partial sums (fixed order, so any thread gives
 * the same bits): the score loop runs it once per cached position and head,
 * where spill_k_dot's single dependency chain cost ~4 cycles per element
 * (bench/model_bench BM_Attn_Mla_Ctx4K; docs/PERFORMANCE.md). */
static inline float dot8(const float *a, const float *b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

typedef struct mla_job {
  spill_model *m;
  const spill_layer_weights *L;
  const float *q;   /* (H, dn+dr) */
  const float *cache; /* (ctx, dc+dr) */
  float *qa;        /* (H, dc) */
  float *att;       /* (n_threads, ctx): one row per thread */
  float *ol;        /* (H, dc) */
  float *o;         /* (H, dv) */
  float *rowtmp;    /* (n_threads, dc) */
  int dn, dr, dv, dc, n_t, ctx;
  float scale;
} mla_job;

static void mla_head(void *ctx, int j, int thread) {
  const mla_job *g = ctx;
  const int dn = g->dn, dr = g->dr, dv = g->dv, dc = g->dc, w = dc + dr;
  const float *qn = g->q + (size_t)j * (dn + dr); /* (dn) */
  const float *qr = qn + dn;                     /* (dr) */
  float *qa = g->qa + (size_t)j * dc;            /* (dc) */
  float *row = g->rowtmp + (size_t)thread * dc;  /* (dc) */
  const uint32_t r0 = (uint32_t)j * (uint32_t)(dn + dv);

  /* qa = Wuk_j^T qn: rows r0 .. r0+dn of kv_b, accumulated in row order */
  memset(qa, 0, (size_t)dc * sizeof(float));
  for (int i = 0; i < dn; i++) {
    spill_k_dequant_row(&g->L->attn_kv_b, r0 + (uint32_t)i, row);
    const float s = qn[i];
    for (int c = 0; c < dc; c++) qa[c] += s * row[c];
  }
  /* scores over the cache */
  float *att = g->att + (size_t)thread * g->ctx; /* (n_t) this thread's row */
  for (int t = 0; t < g->n_t; t++) {
    const float *ct = g->cache + (size_t)t * w;
    float sc = dot8(qa, ct, dc);
    if (dr > 0) sc += dot8(qr, ct + dc, dr);
    att[t] = sc * g->scale;
  }
  spill_model_softmax(att, g->n_t);
  /* latent output, then o_j = Wuv_j ol_j */
  float *ol = g->ol + (size_t)j * dc; /* (dc) */
  /* blocks of 8 latent channels held in registers over all positions: each
   * ol[c] is still summed in position order (same bits as a plain loop),
   * without the store/reload per position a possibly aliased ol costs */
  int c0 = 0;
  for (; c0 + 8 <= dc; c0 += 8) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int t = 0; t < g->n_t; t++) {
      const float *ct = g->cache + (size_t)t * w + c0;
      const float at = att[t];
      for (int k = 0; k < 8; k++) acc[k] += at * ct[k];
    }
    memcpy(ol + c0, acc, sizeof acc);
  }
  for (; c0 < dc; c0++) {
    float acc = 0.0f;
    for (int t = 0; t < g->n_t; t++) acc += att[t] * g->cache[(size_t)t * w + c0];
    ol[c0] = acc;
  }
  const spill_qmat wuv = spill_model_qmat_rows(&g->L->attn_kv_b, r0 + (uint32_t)dn, (uint32_t)dv);
  spill_k_matvec(&wuv, ol, g->o + (size_t)j * dv, 0, (uint32_t)dv);
}

/* cos/sin of position pos for the dr rope dims (docs/MODEL.md "ATTN MLA",
 * YaRN): frequency i is f_i = theta^(-2i/dr); with YaRN factor s > 1 it
 * becomes f_i (1 - r_i) + (f_i / s) r_i, r_i = clamp((i - lo) / max(hi - lo,
 * 0.001), 0, 1), lo = max(floor(cd(beta_fast)), 0), hi = min(ceil(cd(beta_slow)),
 * dr - 1), cd(b) = dr ln(orig_ctx / (2 pi b)) / (2 ln theta) (DeepSeek's
 * modelling code and ggml's rope_yarn agree on this). cos and sin are then
 * multiplied by rope_mscale. */
static void mla_rope_table(float *cs, const spill_mla_cfg *c, int pos) {
  const int dr = c->qk_rope_dim, half = dr / 2;
  const double ms = c->rope_mscale != 0 ? c->rope_mscale : 1.0;
  double lo = 0, hi = 0;
  if (c->yarn_factor > 1.0) {
    const double lt = 2.0 * log(c->rope_theta), tp = 2.0 * 3.14159265358979323846;
    lo = floor(dr * log(c->yarn_orig_ctx / (tp * c->yarn_beta_fast)) / lt);
    hi = ceil(dr * log(c->yarn_orig_ctx / (tp * c->yarn_beta_slow)) / lt);
    lo = lo < 0 ? 0 : lo;
    hi = hi > dr - 1 ? dr - 1 : hi;
  }
  for (int i = 0; i < half; i++) {
    double f = pow(c->rope_theta, -2.0 * i / (double)dr);
    if (c->yarn_factor > 1.0) {
      double r = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
      r = r < 0 ? 0 : r > 1 ? 1 : r;
      f = f * (1.0 - r) + f / c->yarn_factor * r;
    }
    const double a = (double)pos * f;
    cs[i] = (float)(cos(a) * ms);
    cs[half + i] = (float)(sin(a) * ms);
  }
}

/* The layer as row-split fork-joins, one per matvec and one for the heads
 * (o.attn_outside_region; mla_run's bits). */
static int mla_run_split(spill_model *m, int l, const float *h, int pos, float *out) {
  const spill_mla_cfg *c = &m->a.mla;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim, dv = c->v_head_dim,
            dc = c->kv_lora_rank, w = dc + dr;
  const float eps = (float)m->a.norm_eps;
  float *q = m->s.q;                      /* (H, dn+dr) */
  float *kv = m->s.k;                     /* (dc+dr) */
  float *cache_t = L->cache + (size_t)pos * w; /* (dc+dr) this token's slot: [c, kr] */
  float *cs = m->s.rope_cs;               /* (dr/2 cos, dr/2 sin) */

  /* the projections of h (q_a or q, and kv_a) in one dispatch; the output
   * gate (Kimi K3) writes into q's buffer, so it waits for the heads */
  float *cq = m->s.cq; /* (q_lora) */
  const spill_qmat *ws[2] = {c->q_lora_rank > 0 ? &L->attn_q_a : &L->attn_q, &L->attn_kv_a};
  float *const ys[2] = {c->q_lora_rank > 0 ? cq : q, kv};
  spill_model_matvec_n(m, 2, ws, h, ys);
  if (c->q_lora_rank > 0) {
    spill_k_rmsnorm(cq, L->attn_q_a_norm, cq, (uint32_t)c->q_lora_rank, eps);
    spill_model_matvec(m, &L->attn_q_b, cq, q);
  }
  const float kv_eps = c->kv_norm_eps != 0 ? (float)c->kv_norm_eps : eps;
  spill_k_rmsnorm(kv, L->attn_kv_a_norm, cache_t, (uint32_t)dc, kv_eps); /* c: the cached latent */
  memcpy(cache_t + dc, kv + dc, (size_t)dr * sizeof(float));           /* kr: shared rope key */
  if (c->use_rope && dr > 0) {
    mla_rope_table(cs, c, pos);
    for (int j = 0; j < H; j++) spill_model_rope_apply(q + (size_t)j * (dn + dr) + dn, dr, cs);
    spill_model_rope_apply(cache_t + dc, dr, cs);
  }

  mla_job g = {m, L, q, L->cache, m->s.qa, m->s.att, m->s.ol, m->s.o, m->s.rowtmp,
               dn, dr, dv, dc, pos + 1, m->o.ctx,
               c->softmax_scale != 0 ? (float)c->softmax_scale : 1.0f / sqrtf((float)(dn + dr))};
  const uint64_t per_head = (uint64_t)dn * dc + (uint64_t)(pos + 1) * (2u * dc + dr) + (uint64_t)dv * dc;
  spill_model_run_tasks(m, mla_head, &g, H, (uint64_t)H * per_head);
  if (c->out_gate) { /* Kimi K3: o = o * sigmoid(attn_gate h); q is free after the heads */
    float *gt = m->s.q; /* (H*dv) */
    spill_model_matvec(m, &L->attn_gate, h, gt);
    for (int i = 0; i < H * dv; i++) m->s.o[i] *= spill_model_sigmoid(gt[i]);
  }
  spill_model_matvec(m, &L->attn_output, m->s.o, out); /* (D) from (H*dv) */
  return SPILL_OK;
}

/* ---- the layer as one parallel region ----
 * Steps (spill_model_run_steps; each waits for the one before):
 *   0 proj   q_a (or q) and kv_a rows of h (quantised before the region)
 *   1 prep   one task: q_a's rmsnorm and its act_q8 form for q_b; the
 *            latent's rmsnorm into the cache, the rope key, its RoPE
 *   2 q_b    q_b's rows (q_lora_rank > 0)
 *   3 heads  one task per head (its query's RoPE first, then mla_head)
 *   4 gate   the output gate's rows of h (mla.out_gate; into q's buffer,
 *            free once the heads are done; h's act_q8 form of step 0)
 *   5 oq     one task: o *= sigmoid(gate); o's act_q8 form for the output
 *   6 out    the output matrix's rows
 * Each row, head and element is computed whole by one thread with the
 * operations of mla_run_split, so the bits are its bits. */
typedef struct mla_region {
  spill_model *m;
  const spill_mla_cfg *c;
  const spill_layer_weights *L;
  spill_model_mvs proj, qb, gate, outp;
  float *cache_t; /* (dc+dr) */
  float *kv;      /* (dc+dr) */
  int pos;
  mla_job heads;
} mla_region;

static void mla_prep_task(void *ctx, int task, int thread) {
  (void)task;
  (void)thread;
  mla_region *r = ctx;
  const spill_mla_cfg *c = r->c;
  const float eps = (float)r->m->a.norm_eps;
  const int dc = c->kv_lora_rank, dr = c->qk_rope_dim;
  if (c->q_lora_rank > 0) {
    float *cq = r->m->s.cq;
    spill_k_rmsnorm(cq, r->L->attn_q_a_norm, cq, (uint32_t)c->q_lora_rank, eps);
    spill_model_mvs_quantise(&r->qb);
  }
  const float kv_eps = c->kv_norm_eps != 0 ? (float)c->kv_norm_eps : eps;
  spill_k_rmsnorm(r->kv, r->L->attn_kv_a_norm, r->cache_t, (uint32_t)dc, kv_eps);
  memcpy(r->cache_t + dc, r->kv + dc, (size_t)dr * sizeof(float));
  if (c->use_rope && dr > 0) {
    mla_rope_table(r->m->s.rope_cs, c, r->pos);
    spill_model_rope_apply(r->cache_t + dc, dr, r->m->s.rope_cs);
  }
}

static void mla_head_task(void *ctx, int j, int thread) {
  mla_region *r = ctx;
  const spill_mla_cfg *c = r->c;
  if (c->use_rope && c->qk_rope_dim > 0)
    spill_model_rope_apply(r->m->s.q + (size_t)j * (c->qk_nope_dim + c->qk_rope_dim) + c->qk_nope_dim,
                           c->qk_rope_dim, r->m->s.rope_cs);
  mla_head(&r->heads, j, thread);
}

static void mla_oq_task(void *ctx, int task, int thread) {
  (void)task;
  (void)thread;
  mla_region *r = ctx;
  if (r->c->out_gate) {
    const int n = r->c->n_heads * r->c->v_head_dim;
    const float *gt = r->m->s.q;
    for (int i = 0; i < n; i++) r->m->s.o[i] *= spill_model_sigmoid(gt[i]);
  }
  spill_model_mvs_quantise(&r->outp);
}

static int mla_run(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e) {
  (void)e;
  if (m->o.attn_outside_region) return mla_run_split(m, l, h, pos, out);
  const spill_mla_cfg *c = &m->a.mla;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim, dv = c->v_head_dim,
            dc = c->kv_lora_rank, w = dc + dr;
  spill_model_scratch *s = &m->s;
  mla_region r;
  r.m = m;
  r.c = c;
  r.L = L;
  r.kv = s->k;
  r.cache_t = L->cache + (size_t)pos * w;
  r.pos = pos;
  const int ql = c->q_lora_rank > 0;
  const spill_qmat *ws[2] = {ql ? &L->attn_q_a : &L->attn_q, &L->attn_kv_a};
  float *const ys[2] = {ql ? s->cq : s->q, s->k};
  spill_pool_step st[7];
  st[0] = (spill_pool_step){spill_model_mvs_task, &r.proj,
                            spill_model_mvs_plan(m, &r.proj, 2, ws, h, ys, s->xq0)};
  spill_model_mvs_quantise(&r.proj); /* h is ready */
  int qb_tasks = 0;
  if (ql) {
    const spill_qmat *wq = &L->attn_q_b;
    float *yq = s->q;
    qb_tasks = spill_model_mvs_plan(m, &r.qb, 1, &wq, s->cq, &yq, s->xq1);
  }
  int gate_tasks = 0;
  if (c->out_gate) {
    const spill_qmat *wg = &L->attn_gate;
    float *yg = s->q; /* (H*dv) */
    gate_tasks = spill_model_mvs_plan(m, &r.gate, 1, &wg, h, &yg, s->xq0);
    spill_model_mvs_share_xq(&r.gate, &r.proj);
  }
  const spill_qmat *wo = &L->attn_output;
  float *yo = out;
  const int out_tasks = spill_model_mvs_plan(m, &r.outp, 1, &wo, s->o, &yo, s->xq1);
  mla_job g = {m, L, s->q, L->cache, s->qa, s->att, s->ol, s->o, s->rowtmp,
               dn, dr, dv, dc, pos + 1, m->o.ctx,
               c->softmax_scale != 0 ? (float)c->softmax_scale : 1.0f / sqrtf((float)(dn + dr))};
  r.heads = g;
  const uint64_t per_head = (uint64_t)dn * dc + (uint64_t)(pos + 1) * (2u * dc + dr) + (uint64_t)dv * dc;
  const int head_par = m->o.n_threads > 1 && (uint64_t)H * per_head >= (uint64_t)m->o.par_min_weights;
  st[1] = (spill_pool_step){mla_prep_task, &r, 1};
  st[2] = (spill_pool_step){spill_model_mvs_task, &r.qb, qb_tasks};
  st[3] = (spill_pool_step){mla_head_task, &r, H};
  st[4] = (spill_pool_step){spill_model_mvs_task, &r.gate, gate_tasks};
  st[5] = (spill_pool_step){mla_oq_task, &r, c->out_gate || spill_model_mvs_needs_xq(&r.outp)};
  st[6] = (spill_pool_step){spill_model_mvs_task, &r.outp, out_tasks};
  const int split = !r.proj.whole || (ql && !r.qb.whole) || (c->out_gate && !r.gate.whole) ||
                    !r.outp.whole || head_par;
  spill_model_run_steps(m, st, 7, split);
  return SPILL_OK;
}

/* ---- the MLA row of the attention table ---- */

static int mla_check(const spill_arch *a, spill_err *e) {
  const spill_mla_cfg *c = &a->mla;
  SPILL_FAIL_IF(e, c->n_heads <= 0 || c->kv_lora_rank <= 0 || c->qk_nope_dim <= 0 ||
                       c->qk_rope_dim < 0 || (c->qk_rope_dim & 1) || c->v_head_dim <= 0 ||
                       c->q_lora_rank < 0,
                SPILL_E_FORMAT, "arch.mla: dimensions out of range");
  SPILL_FAIL_IF(e, c->yarn_factor != 0 && (!(c->yarn_factor >= 1.0) || c->yarn_orig_ctx < 1 ||
                                           !(c->yarn_beta_fast > 0) || !(c->yarn_beta_slow > 0)),
                SPILL_E_FORMAT, "arch.mla.yarn: factor %g, orig_ctx %d, betas %g/%g out of range",
                c->yarn_factor, c->yarn_orig_ctx, c->yarn_beta_fast, c->yarn_beta_slow);
  return SPILL_OK;
}

/* the latent cache: (ctx, dc + dr) */
static void mla_state_floats(const spill_arch *a, const spill_state_geom *g, uint64_t part[2]) {
  part[0] = spill_sat_mul(g->ctx, (uint64_t)a->mla.kv_lora_rank + (uint64_t)a->mla.qk_rope_dim);
  part[1] = 0;
}

static void mla_bind_state(const spill_arch *a, const spill_state_geom *g, spill_layer_weights *L) {
  (void)a;
  (void)g;
  L->cache = L->state;
}

static void mla_scratch(const spill_arch *a, spill_attn_dims *d) {
  const spill_mla_cfg *c = &a->mla;
  const uint64_t H = (uint64_t)c->n_heads;
#define RAISE(f, v) d->f = d->f > (uint64_t)(v) ? d->f : (uint64_t)(v)
  RAISE(q, H * (uint64_t)(c->qk_nope_dim + c->qk_rope_dim));
  if (c->out_gate) RAISE(q, H * (uint64_t)c->v_head_dim); /* the output gate's pre-activations */
  RAISE(kv, (uint64_t)c->kv_lora_rank + c->qk_rope_dim);
  RAISE(heads, H);
  RAISE(ohead, H * (uint64_t)c->v_head_dim);
  RAISE(rope, c->qk_rope_dim);
  RAISE(cq, c->q_lora_rank);
  RAISE(dc, c->kv_lora_rank);
#undef RAISE
}

static int mla_load(spill_model *m, int l, spill_err *e) {
  const spill_arch *a = &m->a;
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)a->d_model;
  const spill_mla_cfg *c = &a->mla;
  const uint64_t H = c->n_heads, dn = c->qk_nope_dim, dr = c->qk_rope_dim, dv = c->v_head_dim,
                 dc = c->kv_lora_rank, ql = c->q_lora_rank;
  if (ql > 0) {
    SPILL_TRY(spill_model_get_mat(m, l, "attn_q_a", ql, D, &L->attn_q_a, e));
    SPILL_TRY(spill_model_get_f32(m, l, "attn_q_a_norm", ql, 0, &L->attn_q_a_norm, e));
    SPILL_TRY(spill_model_get_mat(m, l, "attn_q_b", H * (dn + dr), ql, &L->attn_q_b, e));
  } else {
    SPILL_TRY(spill_model_get_mat(m, l, "attn_q", H * (dn + dr), D, &L->attn_q, e));
  }
  SPILL_TRY(spill_model_get_mat(m, l, "attn_kv_a", dc + dr, D, &L->attn_kv_a, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_kv_a_norm", dc, 0, &L->attn_kv_a_norm, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_kv_b", H * (dn + dv), dc, &L->attn_kv_b, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_output", D, H * dv, &L->attn_output, e));
  if (c->out_gate) SPILL_TRY(spill_model_get_mat(m, l, "attn_gate", H * dv, D, &L->attn_gate, e));
  return SPILL_OK;
}

/* Latent and rope key of positions [0, n_past). */
static int mla_live_state(const spill_arch *a, const spill_state_geom *g, uint64_t n_past,
                          uint64_t off[SPILL_MODEL_STATE_SPANS], uint64_t n[SPILL_MODEL_STATE_SPANS]) {
  (void)g;
  off[0] = 0;
  n[0] = n_past * ((uint64_t)a->mla.kv_lora_rank + (uint64_t)a->mla.qk_rope_dim);
  off[1] = n[1] = 0;
  return 1;
}

const spill_attn_ops spill_attn_mla_ops = {
    "mla", mla_check, mla_state_floats, mla_bind_state, 0, mla_scratch, mla_load, mla_run,
    mla_live_state,
};
