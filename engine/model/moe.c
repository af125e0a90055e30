/* engine/model/moe.c: the routed mixture of experts of one layer for a chunk
 * of T tokens (docs/MODEL.md "MOE(l)" and "Chunked prefill").
 *
 * 1. Route every token: router logits, sigmoid (+ selection-only bias) or
 *    softmax scores, optional group limit (spill_model_group_mask), top-k in selection order (descending, lower id on
 *    ties), optional renormalisation, routed_scale. With forced routing
 *    (spill_model_set_forced_routing) the table's ids replace the top-k and
 *    take their own scores as weights; the rest is unchanged.
 * 2. Expert input u: the latent projection rmsnorm(down_proj h) (or
 *    down_proj h when the latent norm is on the output: Kimi K3) or h; for
 *    rvq3 experts the LUTs of u for the gate and up codebooks are built once
 *    per token and layer and shared by all selected experts.
 * 3. The distinct experts of the chunk (first-use order) are requested from
 *    the expert source at once; each arriving expert is applied to every
 *    (token, slot) that chose it, its output kept in that slot's own buffer.
 * 4. Per token the slots are summed in selection order (then, for Kimi K3,
 *    RMS-normalised before up_proj), so arrival order,
 *    placement and thread count never change a bit of the result.
 * No allocation: all buffers are scratch sized at open for max_chunk tokens.
 */
#include <math.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/model/model_internal.h"

void spill_model_group_mask(const spill_moe_cfg *c, float *sel) {
  if (c->n_group <= 1) return;
  const int G = c->n_group, per = c->n_experts / G;
  float gsc[SPILL_MAX_EXPERTS];
  uint32_t gid[SPILL_MAX_EXPERTS];
  for (int g = 0; g < G; g++) {
    const float *x = sel + (size_t)g * per;
    float b1 = x[0], b2 = -INFINITY;
    for (int i = 1; i < per; i++) {
      if (x[i] > b1) {
        b2 = b1;
        b1 = x[i];
      } else if (x[i] > b2) {
        b2 = x[i];
      }
    }
    gsc[g] = c->group_score == SPILL_GROUP_TOP2 ? b1 + b2 : b1;
  }
  spill_k_topk(gsc, (uint32_t)G, (uint32_t)c->topk_group, gid);
  uint8_t keep[SPILL_MAX_EXPERTS];
  memset(keep, 0, (size_t)G);
  for (int i = 0; i < c->topk_group; i++) keep[gid[i]] = 1;
  for (int g = 0; g < G; g++)
    if (!keep[g])
      for (int i = 0; i < per; i++) sel[(size_t)g * per + i] = c->group_mask_zero ? 0.0f : -INFINITY;
}

/* ---- the router: the one selection rule (docs/MODEL.md "MOE(l)") ---- */

/* s (E): router logits in, routing scores out: sigmoid or softmax. */
static void router_scores(const spill_moe_cfg *c, float *s) {
  const int E = c->n_experts;
  if (c->router == SPILL_ROUTER_SIGMOID)
    for (int i = 0; i < E; i++) s[i] = spill_model_sigmoid(s[i]);
  else
    spill_model_softmax(s, E);
}

/* Selection from the scores s (E): sel (E) = s + bias (sigmoid routers;
 * bias (E) is selection-only) or s, then the group limit
 * (spill_model_group_mask), then the k best of sel into ids in selection
 * order (spill_k_topk: descending, lower id on ties, NaN last). sel may be
 * s itself when the scores are not needed afterwards (the lookahead). */
static void router_select(const spill_moe_cfg *c, const float *bias, float *s, float *sel, int k,
                          uint32_t *ids) {
  const int E = c->n_experts;
  if (c->router == SPILL_ROUTER_SIGMOID)
    for (int i = 0; i < E; i++) sel[i] = s[i] + bias[i];
  else if (sel != s)
    memcpy(sel, s, (size_t)E * sizeof *sel);
  spill_model_group_mask(c, sel);
  spill_k_topk(sel, (uint32_t)E, (uint32_t)k, ids);
}

/* Router of one token: ids/w (K) from h (D). forced (K) != NULL replaces the
 * top-k selection (forced routing): the forced ids take their own scores as
 * weights, then the same renormalisation and routed_scale. A selected id's
 * weight is its score s[id] (never the biased selection score). */
static void route(spill_model *m, const spill_layer_weights *L, const float *h, float *s,
                  const uint32_t *forced, uint32_t *ids, float *w) {
  const spill_moe_cfg *c = &m->a.moe;
  const int K = c->top_k;
  spill_model_matvec(m, &L->ffn_gate_inp, h, s); /* (E) router logits */
  router_scores(c, s);                           /* (E) scores */
  if (forced)
    memcpy(ids, forced, (size_t)K * sizeof *ids);
  else
    router_select(c, L->exp_probs_b, s, m->s.router_sel, K, ids);
  for (int i = 0; i < K; i++) w[i] = s[ids[i]];
  if (c->norm_topk) {
    float sum = 0.0f;
    for (int i = 0; i < K; i++) sum += w[i];
    if (c->norm_min > 0) { /* llama.cpp: w / max(sum, norm_min) */
      const float nm = (float)c->norm_min;
      if (sum < nm) sum = nm;
    }
    if (sum > 0.0f)
      for (int i = 0; i < K; i++) w[i] /= sum;
  }
  const float rs = (float)c->routed_scale;
  for (int i = 0; i < K; i++) w[i] *= rs;
}

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
  router_scores(&m->a.moe, s);
  router_select(&m->a.moe, L->exp_probs_b, s, s, k, ids_out); /* s becomes the selection scores */
  if (scores_out)
    for (int i = 0; i < k; i++) scores_out[i] = s[ids_out[i]];
  return SPILL_OK;
}

/* After a failure, take and release whatever is still outstanding so the
 * source is left clean for the next request (errors are ignored here). */
static void drain(spill_model *m, int l, const uint32_t *uniq, int remaining) {
  for (; remaining > 0; remaining--) {
    int idx;
    const uint8_t *rec;
    spill_err e2 = {0};
    if (m->src.next_ready(m->src.ctx, &idx, &rec, &e2) < 0) return;
    m->src.release(m->src.ctx, l, uniq[idx]);
  }
}

/* One expert applied to one token: slot (d_in) = down(silu(gate u) * (up u)).
 * rvq3 uses the layer's shared LUTs of u: f32 (lut_g/lut_u) or, on the int16
 * path (m->rvq_q), their quantised copies (q_g/q_u). */
static void expert_apply(spill_model *m, const spill_layer_weights *L, const spill_qmat *G,
                         const spill_qmat *U, const spill_qmat *Dn, const float *u,
                         const float *lut_g, const float *lut_u, const void *q_g,
                         const void *q_u, const uint8_t *xq_u, float *slot) {
  const int de = m->a.moe.d_expert;
  float *eg = m->s.eg; /* (d_expert) */
  float *eu = m->s.eu; /* (d_expert) */
  uint64_t t0 = spill_clock_ns();
  if (m->expert_dtype == SPILL_DT_RVQ3) {
    if (q_g)
      spill_model_rvq3_apply2_q(m, G, q_g, eg, U, q_u, eu);
    else
      spill_model_matvec2(m, G, NULL, lut_g, eg, U, NULL, lut_u, eu);
    spill_model_act_mul(m, eg, eu, (uint32_t)de);
    uint64_t t1 = spill_clock_ns();
    if (q_g)
      spill_model_lut_q(m, L->codebook[SPILL_SEC_DOWN], eg, (uint32_t)de, m->s.lut_d, m->s.qlut_d);
    else
      spill_model_lut(m, L->codebook[SPILL_SEC_DOWN], eg, (uint32_t)de, m->s.lut_d);
    uint64_t t2 = spill_clock_ns();
    if (q_g)
      spill_model_rvq3_apply2_q(m, Dn, m->s.qlut_d, slot, NULL, NULL, NULL);
    else
      spill_model_rvq3_apply(m, Dn, m->s.lut_d, slot);
    m->stats.ns_lut += t2 - t1;
    m->stats.ns_expert += (t1 - t0) + (spill_clock_ns() - t2);
  } else {
    spill_k_xq xq; /* act_q8: u as quantised once per layer (overlap_work) */
    if (xq_u) spill_k_xq_init(&xq, (void *)(uintptr_t)xq_u, (uint32_t)m->d_in);
    spill_model_matvec2_xq(m, G, u, xq_u ? &xq : NULL, eg, U, u, xq_u ? &xq : NULL, eu);
    spill_model_act_mul(m, eg, eu, (uint32_t)de);
    spill_model_matvec(m, Dn, eg, slot);
    m->stats.ns_expert += spill_clock_ns() - t0;
  }
}

/* Forced routing: row (position, MoE layer index) of the table, or NULL
 * when the model routes by itself; *stride is the table's row length. */
static int forced_rows(spill_model *m, int l, int T, int pos0, const uint32_t **forced,
                       size_t *stride, spill_err *e) {
  const int K = m->a.moe.top_k;
  *forced = NULL;
  *stride = 0;
  if (!m->force_ids) return SPILL_OK;
  if (pos0 + T > m->force_n)
    return spill_err_set(e, SPILL_E_RANGE,
                         "layer %d: forced routing covers positions 0..%d; position %d has none",
                         l, m->force_n - 1, pos0 > m->force_n ? pos0 : m->force_n);
  int mi = 0; /* index of this layer among the MoE layers */
  for (int j = 0; j < l; j++) mi += m->L[j].is_moe;
  *stride = (size_t)m->force_n_moe * (size_t)K;
  *forced = m->force_ids + (size_t)pos0 * *stride + (size_t)mi * (size_t)K;
  return SPILL_OK;
}

/* 3. The distinct experts of sel (n = T * K ids) in first-use order
 * (s->uniq), with their (token, slot) uses in CSR form (s->use_start,
 * s->use); returns their count. */
static int group_uses(spill_model *m, const uint32_t *sel, int n) {
  spill_model_scratch *s = &m->s;
  const int E = m->a.moe.n_experts;
  if (++m->epoch == 0) {
    memset(s->stamp, 0, (size_t)E * sizeof *s->stamp);
    m->epoch = 1;
  }
  int n_u = 0;
  for (int i = 0; i < n; i++) {
    const uint32_t id = sel[i];
    if (s->stamp[id] != m->epoch) {
      s->stamp[id] = m->epoch;
      s->stamp_idx[id] = n_u;
      s->uniq[n_u] = id;
      s->use_start[n_u + 1] = 0;
      n_u++;
    }
    s->use_start[s->stamp_idx[id] + 1]++;
  }
  s->use_start[0] = 0;
  for (int i = 0; i < n_u; i++) {
    s->use_start[i + 1] += s->use_start[i];
    s->use_fill[i] = s->use_start[i];
  }
  for (int i = 0; i < n; i++) s->use[s->use_fill[s->stamp_idx[sel[i]]]++] = i;
  return n_u;
}

/* Shared experts of MoE layer L for one token, added to out (D). */
static void shared_experts(spill_model *m, const spill_layer_weights *L, const float *h,
                           float *out) {
  float *tmp = m->s.attn_out; /* (D), free during the FFN */
  spill_model_glu(m, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, h, tmp);
  for (int i = 0; i < m->a.d_model; i++) out[i] += tmp[i];
}

/* While the reads fly: the shared experts (they need no routed expert)
 * and, for rvq3 experts, the gate/up LUTs of every token's input; with
 * act_q8, every token's input quantised (once per layer, for all experts). */
static void overlap_work(spill_model *m, const spill_layer_weights *L, const float *h,
                         const float *u, int T) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model, din = m->d_in;
  const int rvq3 = m->expert_dtype == SPILL_DT_RVQ3;
  const int rq = rvq3 && m->rvq_q;
  const size_t lut_n = (size_t)(din / SPILL_RVQ_DIM) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  const size_t qlut_n = spill_k_qlut_rvq3_i16_bytes((uint32_t)din);
  uint64_t t0;
  if (c->n_shared > 0) {
    t0 = spill_clock_ns();
    for (int t = 0; t < T; t++) {
      float *sh = s->shared_out + (size_t)t * D; /* (D) */
      memset(sh, 0, (size_t)D * sizeof(float));
      shared_experts(m, L, h + (size_t)t * D, sh);
    }
    m->stats.ns_expert += spill_clock_ns() - t0;
  }
  if (rvq3) {
    t0 = spill_clock_ns();
    for (int t = 0; t < T; t++) {
      const float *ut = u + (size_t)t * din;
      if (rq) {
        spill_model_lut_q(m, L->codebook[SPILL_SEC_GATE], ut, (uint32_t)din,
                          s->lut_g + (size_t)t * lut_n, s->qlut_g + (size_t)t * qlut_n);
        spill_model_lut_q(m, L->codebook[SPILL_SEC_UP], ut, (uint32_t)din,
                          s->lut_u + (size_t)t * lut_n, s->qlut_u + (size_t)t * qlut_n);
      } else {
        spill_model_lut(m, L->codebook[SPILL_SEC_GATE], ut, (uint32_t)din, s->lut_g + (size_t)t * lut_n);
        spill_model_lut(m, L->codebook[SPILL_SEC_UP], ut, (uint32_t)din, s->lut_u + (size_t)t * lut_n);
      }
    }
    m->stats.ns_lut += spill_clock_ns() - t0;
  } else if (m->o.act_q8) {
    for (int t = 0; t < T; t++) {
      spill_k_xq xq;
      spill_k_xq_init(&xq, s->xq_u + (size_t)t * s->xq_u_bytes, (uint32_t)din);
      spill_k_xq_quantize(u + (size_t)t * din, &xq);
    }
  }
}

/* Takes the n_u requested experts in arrival order and applies each to
 * the tokens that routed to it, into its own slot; every record is checked
 * against (layer, expert, dtype) and released after use. On an error the
 * outstanding experts are drained. */
static int consume_experts(spill_model *m, int l, const spill_layer_weights *L, const float *u,
                           float *slot, int n_u, spill_err *e) {
  spill_model_scratch *s = &m->s;
  const int K = m->a.moe.top_k, din = m->d_in;
  const int rvq3 = m->expert_dtype == SPILL_DT_RVQ3;
  const int rq = rvq3 && m->rvq_q;
  const size_t lut_n = (size_t)(din / SPILL_RVQ_DIM) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  const size_t qlut_n = spill_k_qlut_rvq3_i16_bytes((uint32_t)din);
  uint64_t t0;
  int rc;
  memset(s->delivered, 0, (size_t)n_u);
  for (int got = 0; got < n_u; got++) {
    int idx = -1;
    const uint8_t *rec = NULL;
    t0 = spill_clock_ns();
    rc = m->src.next_ready(m->src.ctx, &idx, &rec, e);
    m->stats.ns_expert_wait += spill_clock_ns() - t0;
    if (rc < 0) return rc;
    if (idx < 0 || idx >= n_u || s->delivered[idx] || !rec) {
      if (idx >= 0 && idx < n_u && rec) m->src.release(m->src.ctx, l, s->uniq[idx]);
      drain(m, l, s->uniq, n_u - got - 1);
      return spill_err_set(e, SPILL_E_INTERNAL,
                           "layer %d: expert source returned index %d (of %d) twice or out of range",
                           l, idx, n_u);
    }
    s->delivered[idx] = 1;
    const uint32_t id = s->uniq[idx];
    spill_record_header rh;
    spill_record_header_decode(rec, &rh);
    if (rh.magic != SPILL_RECORD_MAGIC || rh.layer != (uint32_t)l || rh.expert != id ||
        rh.dtype != (uint16_t)m->expert_dtype) {
      m->src.release(m->src.ctx, l, id);
      drain(m, l, s->uniq, n_u - got - 1);
      return spill_err_set(e, SPILL_E_FORMAT,
                           "layer %d expert %u: source delivered a record of layer %u expert %u "
                           "(magic 0x%08x dtype %u)", l, id, rh.layer, rh.expert, rh.magic, rh.dtype);
    }
    spill_qmat G, U, Dn;
    spill_model_expert_qmat(m, l, rec, SPILL_SEC_GATE, &G);
    spill_model_expert_qmat(m, l, rec, SPILL_SEC_UP, &U);
    spill_model_expert_qmat(m, l, rec, SPILL_SEC_DOWN, &Dn);
    for (int k = s->use_start[idx]; k < s->use_start[idx + 1]; k++) {
      const int ts = s->use[k], t = ts / K;
      expert_apply(m, L, &G, &U, &Dn, u + (size_t)t * din,
                   rvq3 ? s->lut_g + (size_t)t * lut_n : NULL,
                   rvq3 ? s->lut_u + (size_t)t * lut_n : NULL,
                   rq ? s->qlut_g + (size_t)t * qlut_n : NULL,
                   rq ? s->qlut_u + (size_t)t * qlut_n : NULL,
                   !rvq3 && m->o.act_q8 ? s->xq_u + (size_t)t * s->xq_u_bytes : NULL,
                   slot + (size_t)ts * din);
    }
    m->stats.n_expert_uses += (uint64_t)(s->use_start[idx + 1] - s->use_start[idx]);
    m->src.release(m->src.ctx, l, id);
  }

  return SPILL_OK;
}

/* 4. combine in selection order, latent up-projection, shared experts */
static void combine(spill_model *m, const spill_layer_weights *L, const float *slot,
                    const float *selw, int T, float *out) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model, K = c->top_k, din = m->d_in;
  float *y = s->y; /* (d_in) */
  uint64_t t0 = spill_clock_ns();
  for (int t = 0; t < T; t++) {
    const float *wt = selw + (size_t)t * K;
    memset(y, 0, (size_t)din * sizeof(float));
    for (int i = 0; i < K; i++) {
      const float *st = slot + ((size_t)t * K + i) * din;
      const float wi = wt[i];
      for (int j = 0; j < din; j++) y[j] += wi * st[j];
    }
    float *ot = out + (size_t)t * D; /* (D) */
    if (c->d_latent > 0 && c->latent_norm == SPILL_LATENT_NORM_OUTPUT) /* Kimi K3: the sum is normed */
      spill_k_rmsnorm(y, L->moe_latent_norm, y, (uint32_t)din, (float)m->a.norm_eps);
    if (c->d_latent > 0)
      spill_model_matvec(m, &L->moe_up_proj, y, ot);
    else
      memcpy(ot, y, (size_t)D * sizeof(float));
    if (c->n_shared > 0) {
      const float *sh = s->shared_out + (size_t)t * D;
      for (int i = 0; i < D; i++) ot[i] += sh[i];
    }
  }
  m->stats.ns_expert += spill_clock_ns() - t0;
}

int spill_model_moe(spill_model *m, int l, const float *x, const float *h, int T, int pos0,
                    float *out, spill_err *e) {
  const spill_moe_cfg *c = &m->a.moe;
  const spill_layer_weights *L = &m->L[l];
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model, E = c->n_experts, K = c->top_k, din = m->d_in;
  float *router = s->router; /* (T, E) */
  uint32_t *sel = s->sel;    /* (T, K) */
  float *selw = s->selw;     /* (T, K) */
  float *u = s->u;           /* (T, d_in) */
  float *slot = s->slot;     /* (T, K, d_in) */
  const uint32_t *forced;
  size_t forced_stride;
  SPILL_TRY(forced_rows(m, l, T, pos0, &forced, &forced_stride, e));

  /* 1-2. routing and expert input */
  uint64_t t0 = spill_clock_ns();
  for (int t = 0; t < T; t++) {
    const float *ht = h + (size_t)t * D;
    route(m, L, ht, router + (size_t)t * E, forced ? forced + (size_t)t * forced_stride : NULL,
          sel + (size_t)t * K, selw + (size_t)t * K);
    float *ut = u + (size_t)t * din;
    if (c->d_latent > 0) {
      spill_model_matvec(m, &L->moe_down_proj, ht, ut);
      if (c->latent_norm == SPILL_LATENT_NORM_INPUT)
        spill_k_rmsnorm(ut, L->moe_latent_norm, ut, (uint32_t)din, (float)m->a.norm_eps);
    } else {
      memcpy(ut, ht, (size_t)D * sizeof(float));
    }
  }

  /* 3. distinct experts in first-use order, with their (token, slot) uses (CSR) */
  const int n_u = group_uses(m, sel, T * K);
  m->stats.ns_router += spill_clock_ns() - t0;

  /* 3'. request everything at once, build the shared LUTs while the reads
   * are in flight, then apply experts in arrival order */
  int rc = m->src.request(m->src.ctx, l, s->uniq, n_u, e);
  if (rc < 0) return rc;
  m->stats.n_expert_requests += (uint64_t)n_u;
  /* The observer runs after the demand request (so lookahead prefetches it
   * issues queue behind it) and before the experts are consumed. */
  if (m->has_obs && m->obs.on_route) {
    rc = m->obs.on_route(m->obs.ctx, l, pos0, T, x, sel, selw, K);
    if (rc < 0) {
      drain(m, l, s->uniq, n_u);
      return spill_err_set(e, rc, "layer %d: stopped by the route observer", l);
    }
  }
  overlap_work(m, L, h, u, T);
  SPILL_TRY(consume_experts(m, l, L, u, slot, n_u, e));
  combine(m, L, slot, selw, T, out);
  return SPILL_OK;
}
