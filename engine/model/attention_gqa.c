/* engine/model/attention_gqa.c: grouped-query attention (OLMoE/Qwen/GLM
 * style), docs/MODEL.md "ATTN GQA". Per token: q, k, v projections (plus
 * their biases with arch.gqa.qkv_bias), optional q/k RMSNorm (per head or
 * over the whole projection, arch.gqa.qk_norm), RoPE (rotate-half) on the
 * first rope_dim dims of every q and k head (all of them when rope_dim is
 * 0), append k and v to the layer's cache
 * (kv_rows, Hk*d) each, then per query head softmax(q . k_t / sqrt(d)) over
 * t = 0..pos and the weighted sum of v; with arch.gqa.out_gate (Qwen3.5)
 * attn_q gives each head's query then its gate, and the head's output is
 * multiplied by sigmoid(gate) before attn_output. Heads run in parallel on the pool;
 * each head's result is computed by one thread in a fixed order.
 * gpt-oss adds: YaRN frequencies and a cos/sin scale (rope_table), a
 * learned sink logit per head in the softmax denominator, and a sliding
 * window on some layers: such a layer reads only keys pos+1-W..pos, so its
 * cache is a ring of W - 1 + max_chunk rows (spill_gqa_kv_rows; position t
 * in row t mod rows) instead of ctx rows. The keys are visited in position
 * order whatever the row they sit in, with the same arithmetic as a cache
 * of ctx rows (which a full layer is: t mod ctx = t), so the logits are
 * those of a full cache bit for bit (docs/MODEL.md "Sliding-window KV").
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

typedef struct gqa_job {
  const float *q;       /* (H*d) */
  const float *kc, *vc; /* (rows, Hk*d): position t in row t mod rows */
  float *att;           /* (n_threads, ctx): one row per thread */
  float *o;             /* (H*d) */
  const float *sinks;   /* (H) or NULL */
  int d, qs, group, kvw, t0, n_t, ctx, rows; /* qs: head stride of q (d, or 2d with the gate) */
  float scale;
} gqa_job;

static void gqa_head(void *ctx, int j, int thread) {
  const gqa_job *g = ctx;
  const int d = g->d, kh = j / g->group;
  const float *qj = g->q + (size_t)j * g->qs;
  float *att = g->att + (size_t)thread * g->ctx; /* (n_t) this thread's row: keys t0.. */
  const int n = g->n_t - g->t0, r0 = g->t0 % g->rows; /* the row of key t0 */
  /* keys t0..n_t-1 in position order; row r of key t0 + i wraps at rows */
  for (int i = 0, r = r0; i < n; i++, r = r + 1 == g->rows ? 0 : r + 1)
    att[i] = spill_k_dot(qj, g->kc + (size_t)r * g->kvw + (size_t)kh * d, (uint32_t)d) * g->scale;
  if (g->sinks)
    spill_model_softmax_sink(att, n, g->sinks[j]);
  else
    spill_model_softmax(att, n);
  float *oj = g->o + (size_t)j * d; /* (d) */
  memset(oj, 0, (size_t)d * sizeof(float));
  for (int i = 0, r = r0; i < n; i++, r = r + 1 == g->rows ? 0 : r + 1) {
    const float *vt = g->vc + (size_t)r * g->kvw + (size_t)kh * d;
    const float at = att[i];
    for (int x = 0; x < d; x++) oj[x] += at * vt[x];
  }
  if (g->qs != d) { /* out_gate: the gate follows the head's query */
    const float *gate = qj + d;
    for (int i = 0; i < d; i++) oj[i] *= spill_model_sigmoid(gate[i]);
  }
}

static int gqa_run(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e) {
  (void)e;
  const spill_gqa_cfg *c = &m->a.gqa;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, Hk = c->n_kv_heads, d = c->head_dim, kvw = Hk * d;
  const int qs = c->out_gate ? 2 * d : d;      /* q head stride */
  float *q = m->s.q;                           /* (H*qs): per head query (d) [then gate (d)] */
  const int rows = (int)L->kv_rows, row = pos % rows; /* position pos's row of the cache */
  float *kc = L->cache + (size_t)row * kvw;    /* (Hk*d) this position's key slot */
  float *vc = L->cache_v + (size_t)row * kvw;  /* (Hk*d) */
  const int rd = c->rope_dim > 0 ? c->rope_dim : d; /* rotated dims of each head */
  float *cs = m->s.rope_cs;                    /* (rd/2 cos, rd/2 sin) */
  float *o = m->s.o;                           /* (H*d) */

  const spill_qmat *ws[3] = {&L->attn_q, &L->attn_k, &L->attn_v};
  float *const ys[3] = {q, kc, vc};
  spill_model_matvec_n(m, 3, ws, h, ys); /* q, k, v in one dispatch */
  if (c->qkv_bias) {
    for (int i = 0; i < H * qs; i++) q[i] += L->attn_q_bias[i];
    for (int i = 0; i < kvw; i++) kc[i] += L->attn_k_bias[i];
    for (int i = 0; i < kvw; i++) vc[i] += L->attn_v_bias[i];
  }
  const float eps = (float)m->a.norm_eps;
  if (c->qk_norm == SPILL_QK_NORM_HEAD) { /* Qwen3: each head over its d dims */
    for (int j = 0; j < H; j++) spill_k_rmsnorm(q + (size_t)j * qs, L->attn_q_norm, q + (size_t)j * qs, (uint32_t)d, eps);
    for (int j = 0; j < Hk; j++) spill_k_rmsnorm(kc + (size_t)j * d, L->attn_k_norm, kc + (size_t)j * d, (uint32_t)d, eps);
  } else if (c->qk_norm == SPILL_QK_NORM_FULL) { /* OLMoE: over the whole projection */
    spill_k_rmsnorm(q, L->attn_q_norm, q, (uint32_t)(H * d), eps);
    spill_k_rmsnorm(kc, L->attn_k_norm, kc, (uint32_t)kvw, eps);
  }
  if (c->yarn_factor != 0 || c->rope_mscale != 0)
    spill_model_rope_table_yarn(cs, rd, pos, c->rope_theta, c->yarn_factor, c->yarn_orig_ctx, c->yarn_beta_fast,
                                c->yarn_beta_slow, c->rope_mscale != 0 ? c->rope_mscale : 1.0, c->yarn_unrounded);
  else
    spill_model_rope_table(cs, rd, pos, c->rope_theta);
  for (int j = 0; j < H; j++) spill_model_rope_apply(q + (size_t)j * qs, rd, cs);
  for (int j = 0; j < Hk; j++) spill_model_rope_apply(kc + (size_t)j * d, rd, cs);

  /* a sliding layer sees keys t with pos - t < swa_window (its ring holds them: rows >= W) */
  const int t0 = spill_gqa_layer_swa(c, l) && pos + 1 > c->swa_window ? pos + 1 - c->swa_window : 0;
  gqa_job g = {q, L->cache, L->cache_v, m->s.att, o, c->sinks ? L->attn_sinks : NULL, d, qs, H / Hk, kvw, t0,
               pos + 1, m->o.ctx, rows, 1.0f / sqrtf((float)d)};
  spill_model_run_tasks(m, gqa_head, &g, H, (uint64_t)H * (uint64_t)(pos + 1 - t0) * 2u * (uint64_t)d);
  spill_model_matvec(m, &L->attn_output, o, out); /* (D) */
  if (c->o_bias)
    for (int i = 0; i < m->a.d_model; i++) out[i] += L->attn_output_bias[i];
  return SPILL_OK;
}

/* ---- the GQA row of the attention table ---- */

static int gqa_check(const spill_arch *a, spill_err *e) {
  const spill_gqa_cfg *g = &a->gqa;
  SPILL_FAIL_IF(e, g->n_heads <= 0 || g->n_kv_heads <= 0 || g->head_dim <= 0 ||
                       (g->head_dim & 1) || g->n_heads % g->n_kv_heads,
                SPILL_E_FORMAT, "arch.gqa: heads %d, kv heads %d, head_dim %d inconsistent",
                g->n_heads, g->n_kv_heads, g->head_dim);
  SPILL_FAIL_IF(e, g->out_gate && g->qk_norm == SPILL_QK_NORM_FULL, SPILL_E_FORMAT,
                "arch.gqa: out_gate with qk_norm \"full\" (a gated query is normed per head)");
  SPILL_FAIL_IF(e, g->rope_dim < 0 || g->rope_dim > g->head_dim || (g->rope_dim & 1), SPILL_E_FORMAT,
                "arch.gqa: rope_dim %d not an even number in [0, head_dim %d]", g->rope_dim, g->head_dim);
  SPILL_FAIL_IF(e, g->yarn_factor != 0 && (!(g->yarn_factor >= 1.0) || g->yarn_orig_ctx < 1 ||
                                           !(g->yarn_beta_fast > 0) || !(g->yarn_beta_slow > 0)),
                SPILL_E_FORMAT, "arch.gqa.yarn_*: factor %g, orig_ctx %d, betas %g/%g out of range",
                g->yarn_factor, g->yarn_orig_ctx, g->yarn_beta_fast, g->yarn_beta_slow);
  SPILL_FAIL_IF(e, g->swa_window == 0 && g->swa_pattern != 0, SPILL_E_FORMAT,
                "arch.gqa.swa_pattern: %d without a swa_window", g->swa_pattern);
  return SPILL_OK;
}

/* keys then values: (rows, Hk*d) each; a full layer's in part[0], a
 * sliding-window layer's ring in part[1] (the plan reports them apart) */
static void gqa_state_floats(const spill_arch *a, const spill_state_geom *g, uint64_t part[2]) {
  const uint64_t f = spill_sat_mul(spill_gqa_kv_rows(a, g), 2 * (uint64_t)a->gqa.n_kv_heads * (uint64_t)a->gqa.head_dim);
  const int ring = spill_gqa_layer_swa(&a->gqa, g->layer);
  part[0] = ring ? 0 : f;
  part[1] = ring ? f : 0;
}

static void gqa_bind_state(const spill_arch *a, const spill_state_geom *g, spill_layer_weights *L) {
  L->kv_rows = spill_gqa_kv_rows(a, g);
  L->cache = L->state;
  L->cache_v = L->state + L->kv_rows * (uint64_t)a->gqa.n_kv_heads * (uint64_t)a->gqa.head_dim;
}

static void gqa_scratch(const spill_arch *a, spill_attn_dims *d) {
  const spill_gqa_cfg *g = &a->gqa;
  const uint64_t H = (uint64_t)g->n_heads, hd = (uint64_t)g->head_dim;
  const uint64_t qw = (g->out_gate ? 2 : 1) * H * hd; /* query (and gate) rows */
  if (d->q < qw) d->q = qw;
  if (d->kv < (uint64_t)g->n_kv_heads * hd) d->kv = (uint64_t)g->n_kv_heads * hd;
  if (d->heads < H) d->heads = H;
  if (d->ohead < H * hd) d->ohead = H * hd;
  if (d->rope < hd) d->rope = hd;
}

static int gqa_load(spill_model *m, int l, spill_err *e) {
  const spill_arch *a = &m->a;
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)a->d_model;
  const uint64_t H = a->gqa.n_heads, Hk = a->gqa.n_kv_heads, d = a->gqa.head_dim;
  const uint64_t qg = a->gqa.out_gate ? 2 : 1;
  SPILL_TRY(spill_model_get_mat(m, l, "attn_q", qg * H * d, D, &L->attn_q, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_k", Hk * d, D, &L->attn_k, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_v", Hk * d, D, &L->attn_v, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_output", D, H * d, &L->attn_output, e));
  if (a->gqa.qk_norm == SPILL_QK_NORM_HEAD) {
    SPILL_TRY(spill_model_get_f32(m, l, "attn_q_norm", d, 0, &L->attn_q_norm, e));
    SPILL_TRY(spill_model_get_f32(m, l, "attn_k_norm", d, 0, &L->attn_k_norm, e));
  } else if (a->gqa.qk_norm == SPILL_QK_NORM_FULL) {
    SPILL_TRY(spill_model_get_f32(m, l, "attn_q_norm", H * d, 0, &L->attn_q_norm, e));
    SPILL_TRY(spill_model_get_f32(m, l, "attn_k_norm", Hk * d, 0, &L->attn_k_norm, e));
  }
  if (a->gqa.qkv_bias) {
    SPILL_TRY(spill_model_get_f32(m, l, "attn_q_bias", qg * H * d, 0, &L->attn_q_bias, e));
    SPILL_TRY(spill_model_get_f32(m, l, "attn_k_bias", Hk * d, 0, &L->attn_k_bias, e));
    SPILL_TRY(spill_model_get_f32(m, l, "attn_v_bias", Hk * d, 0, &L->attn_v_bias, e));
  }
  if (a->gqa.o_bias) SPILL_TRY(spill_model_get_f32(m, l, "attn_output_bias", D, 0, &L->attn_output_bias, e));
  if (a->gqa.sinks) SPILL_TRY(spill_model_get_f32(m, l, "attn_sinks", H, 0, &L->attn_sinks, e));
  return SPILL_OK;
}

/* Keys then values of the positions a continuation after n_past tokens
 * reads: [0, n_past) on a full layer (the head of each half); on a
 * sliding-window layer the last W - 1, [n_past - min(n_past, W - 1),
 * n_past), in position order: from their first row to the ring's end, then
 * from row 0 when they wrap (so a session does not depend on the ring's
 * size, i.e. on max_chunk). */
static int gqa_live_state(const spill_arch *a, const spill_state_geom *g, uint64_t n_past,
                          uint64_t off[SPILL_MODEL_STATE_SPANS], uint64_t n[SPILL_MODEL_STATE_SPANS]) {
  const uint64_t row = (uint64_t)a->gqa.n_kv_heads * (uint64_t)a->gqa.head_dim;
  const uint64_t rows = spill_gqa_kv_rows(a, g);
  if (!spill_gqa_layer_swa(&a->gqa, g->layer)) {
    off[0] = 0;
    n[0] = n_past * row;
    off[1] = rows * row;
    n[1] = n_past * row;
    return 2;
  }
  const uint64_t keep = (uint64_t)a->gqa.swa_window - 1;
  const uint64_t cnt = n_past < keep ? n_past : keep; /* positions p0 .. n_past-1 */
  const uint64_t r0 = (n_past - cnt) % rows;
  const uint64_t head = cnt < rows - r0 ? cnt : rows - r0; /* rows r0 .. before the wrap */
  for (int h = 0; h < 2; h++) { /* keys, then values (rows further on) */
    off[2 * h] = (h * rows + r0) * row;
    n[2 * h] = head * row;
    off[2 * h + 1] = h * rows * row;
    n[2 * h + 1] = (cnt - head) * row;
  }
  return 4;
}

const spill_attn_ops spill_attn_gqa_ops = {
    "gqa", gqa_check, gqa_state_floats, gqa_bind_state, 0, gqa_scratch, gqa_load, gqa_run,
    gqa_live_state,
};
