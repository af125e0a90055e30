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
 *    (token, slot) that chose it, its output kept in that slot's own buffer,
 *    in one parallel region per layer: the threads take records as the
 *    source's readiness call hands them out and run one task per use (its
 *    gate/up, then its down; split by rows when the layer has few uses).
 * 4. Per token the slots are summed in selection order (then, for Kimi K3,
 *    RMS-normalised before up_proj), so arrival order,
 *    placement and thread count never change a bit of the result.
 * The LUT builds of 2. are tasks of the region of 3.; for a decode token so
 * are 1., the latent projections of 2. and 4. (its layer is one fork-join);
 * a chunk routes, projects and combines with row-split matvecs around it.
 * No allocation: all buffers are scratch sized at open for max_chunk tokens.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
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

/* s (E): router logits in (plus the router bias, bias (E) or NULL),
 * routing scores out: sigmoid, softmax, or the logits themselves
 * (softmax_topk: the softmax is over the selected ones, route()). */
static void router_scores(const spill_moe_cfg *c, const float *bias, float *s) {
  const int E = c->n_experts;
  if (bias)
    for (int i = 0; i < E; i++) s[i] += bias[i];
  if (c->router == SPILL_ROUTER_SIGMOID)
    for (int i = 0; i < E; i++) s[i] = spill_model_sigmoid(s[i]);
  else if (c->router == SPILL_ROUTER_SOFTMAX)
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

/* Router of one token: ids/w (K) from its logits s (E; the scores after).
 * forced (K) != NULL replaces the top-k selection (forced routing): the
 * forced ids take their own scores as weights, then the same
 * renormalisation and routed_scale. A selected id's weight is its score
 * s[id] (never the biased selection score). */
static void route_logits(spill_model *m, const spill_layer_weights *L, float *s,
                         const uint32_t *forced, uint32_t *ids, float *w) {
  const spill_moe_cfg *c = &m->a.moe;
  const int K = c->top_k;
  router_scores(c, L->ffn_gate_inp_bias, s); /* (E) scores */
  if (forced)
    memcpy(ids, forced, (size_t)K * sizeof *ids);
  else
    router_select(c, L->exp_probs_b, s, m->s.router_sel, K, ids);
  for (int i = 0; i < K; i++) w[i] = s[ids[i]];
  if (c->router == SPILL_ROUTER_SOFTMAX_TOPK) spill_model_softmax(w, K);
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

/* Router of one token from h (D), the logits as one row-split matvec. */
static void route(spill_model *m, const spill_layer_weights *L, const float *h, float *s,
                  const uint32_t *forced, uint32_t *ids, float *w) {
  spill_model_matvec(m, &L->ffn_gate_inp, h, s); /* (E) router logits */
  route_logits(m, L, s, forced, ids, w);
}

int spill_model_router_topk(spill_model *m, int layer, const float *hidden, int tok, int k,
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
  const int D = m->a.d_model;
  if (m->a.attn_res_block > 0 && tok >= 0) {
    /* AttnRes: the router reads rmsnorm(MIX(bank, stream)), not the stream:
     * the layer's own FFN mix over token tok's entries banked so far and
     * `hidden` as the stream (docs/MODEL.md "Lookahead under AttnRes") */
    SPILL_FAIL_IF(e, tok >= m->bank_T, SPILL_E_RANGE,
                  "router_topk: token %d outside the chunk of %d", tok, m->bank_T);
    spill_model_res_mix(m, m->s.bank + (size_t)tok * D, (size_t)m->bank_T * D, m->bank_n,
                        hidden, L->ffn_res_score, h);
    spill_k_rmsnorm(h, L->ffn_norm, h, (uint32_t)D, (float)m->a.norm_eps);
  } else {
    spill_k_rmsnorm(hidden, L->ffn_norm, h, (uint32_t)D, (float)m->a.norm_eps);
  }
  spill_k_matvec(&L->ffn_gate_inp, h, s, 0, (uint32_t)E); /* single-threaded: may run inside a forward */
  router_scores(&m->a.moe, L->ffn_gate_inp_bias, s);
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
  for (int i = 0; i < n; i++) {
    const int idx = s->stamp_idx[sel[i]], pos = s->use_fill[idx]++;
    s->use[pos] = i;
    s->use_owner[pos] = idx;
  }
  return n_u;
}

/* Shared experts of MoE layer L for one token, added to out (D); with
 * moe.shared_gate (Qwen3.5) scaled by sigmoid(ffn_gate_inp_shexp h). */
static void shared_experts(spill_model *m, const spill_layer_weights *L, const float *h,
                           float *out) {
  float *tmp = m->s.attn_out; /* (D), free during the FFN */
  spill_model_glu(m, &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp, h, tmp);
  if (m->a.moe.shared_gate) {
    float gs;
    spill_model_matvec(m, &L->ffn_gate_inp_shexp, h, &gs);
    gs = spill_model_sigmoid(gs);
    for (int i = 0; i < m->a.d_model; i++) tmp[i] *= gs;
  }
  for (int i = 0; i < m->a.d_model; i++) out[i] += tmp[i];
}

/* While the reads fly, before the region: the shared experts (they need no
 * routed expert; unless the region runs them: a decode token's,
 * shared_in_region), for rvq3 experts the gate/up LUTs of every token's
 * input (unless the region builds them, lut_in_region), and with act_q8
 * every token's input quantised once per layer for all experts (unless the
 * region projects a decode token's latent input itself, u_in_region). */
static void overlap_work(spill_model *m, const spill_layer_weights *L, const float *h,
                         const float *u, int T, int shared_in_region, int lut_in_region,
                         int u_in_region) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model, din = m->d_in;
  const int rvq3 = m->expert_dtype == SPILL_DT_RVQ3;
  const int rq = rvq3 && m->rvq_q;
  const size_t lut_n = (size_t)(din / SPILL_RVQ_DIM) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  const size_t qlut_n = spill_k_qlut_rvq3_i16_bytes((uint32_t)din);
  uint64_t t0;
  if (c->n_shared > 0 && !shared_in_region) {
    t0 = spill_clock_ns();
    for (int t = 0; t < T; t++) {
      float *sh = s->shared_out + (size_t)t * D; /* (D) */
      memset(sh, 0, (size_t)D * sizeof(float));
      shared_experts(m, L, h + (size_t)t * D, sh);
    }
    m->stats.ns_expert += spill_clock_ns() - t0;
  }
  if (rvq3 && !lut_in_region) {
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
  } else if (!rvq3 && m->o.act_q8 && !u_in_region) {
    for (int t = 0; t < T; t++) {
      spill_k_xq xq;
      spill_k_xq_init(&xq, s->xq_u + (size_t)t * s->xq_u_bytes, (uint32_t)din);
      spill_k_xq_quantize(u + (size_t)t * din, &xq);
    }
  }
}

/* ---- 3''. the experts of a layer as one parallel region ----
 *
 * One pool run per MoE layer: every thread loops over a task queue until
 * all (token, slot) uses are computed. Records come from the source's
 * readiness call (poll_ready): the thread that finds the queue short and
 * the source free polls it (blocking only when it has nothing else to do,
 * so the idle thread is the one waiting in the reader), checks the record
 * and queues its tasks; so whichever record is ready first is computed
 * first, by whichever thread is free. A use (an expert applied to one
 * token) is phase A, gate and up rows (split into parts when a layer has
 * fewer uses than 8 per thread, so two threads share a decode token's few
 * experts), then, when its last part is done, the activation (and, act_q8,
 * its quantisation; rvq3, its down LUT and the whole down matvec) on the
 * thread that finished it, then phase B, down rows into the use's own slot.
 * Each row is computed whole by one thread with the kernel's fixed order and
 * every use writes only its own slot, summed in selection order afterwards
 * (combine): arrival order, split and thread count never change a bit.
 * The steps around the experts are tasks of the same region ("steps",
 * taken before anything else; not with steps_outside_region): every
 * token's rvq3 gate/up LUT builds, split by groups (a group's entries
 * depend on that group alone), which gate the experts' tasks (those of
 * records that arrive earlier wait in the queue); and for a decode token
 * also the router's and the latent down-projection's rows, then on the
 * thread finishing the router's last part the selection, the request and
 * the observer (only then is the source polled), on the thread finishing
 * the latent's last part its norm (and act_q8 quantisation), and once
 * every use is done the slots' sum in selection order and the latent
 * up-projection's rows into the output. A decode token's whole MoE layer
 * is one fork-join (spill_model_stats.n_parallel_moe counts them).
 * Releases are queued and made by the thread holding the source. Idle
 * threads spin at most SCHED_SPIN polls, then sleep on the model's condition
 * variable (a core the reader's threads need is never spun on for long).
 * All queue state is under m->sched_mu; the source is called by one thread
 * at a time (the `polling` flag). */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SCHED_RELAX() _mm_pause()
#else
#define SCHED_RELAX() ((void)0)
#endif
#define SCHED_SPIN 256 /* pause polls before sleeping (~10-20 us) */

typedef struct moe_run {
  spill_model *m;
  int l;
  const spill_layer_weights *L;
  const float *u; /* (T, d_in) */
  float *slot;    /* (T, K, d_in) */
  int n_u, n_uses;
  int rvq3, rq;
  size_t lut_n, qlut_n;
  uint32_t rows_a, rows_b; /* rows per part of gate/up and of down */
  int parts_a, parts_b;
  size_t xq_d_bytes;
  /* under m->sched_mu */
  int q_head, q_tail;      /* s->tasks[q_head..q_tail) */
  int received, held, n_rel, polling, active, uses_done, waiters;
  int stalled; /* a waiting poll got nothing: no poll until a release is queued */
  int rc;
  spill_err err;
  /* the shared experts of a decode token as tasks of this region (sh): gate/up
   * rows into ff_g/ff_u, the activation, down rows into attn_out, then the
   * gate and the sum into shared_out; own queue sh_tasks[sh_head..sh_tail) */
  int sh;
  const float *sh_h; /* (D) the token's FFN input */
  float *sh_out;     /* (D) its shared_out row */
  const spill_k_xq *sh_xg; /* the activation quantised (act_q8), or NULL; h is xh */
  spill_k_xq sh_xg_v;
  uint32_t sh_rows_a, sh_rows_b;
  int sh_parts_a, sh_parts_b, sh_left, sh_done;
  int sh_tasks[2 * SPILL_MOE_MAX_PARTS], sh_head, sh_tail;
  /* the steps (see above); route: a decode token's router, latent down and
   * up projections are steps too. Under m->sched_mu but their inputs. */
  int route;
  const float *h, *x;      /* (T, D) the FFN input; the residual stream (observer) */
  float *out;              /* (T, D) the layer's output (route: the up rows) */
  int pos0;
  const uint32_t *forced;  /* (K) forced ids, or NULL */
  const spill_k_xq *xh;    /* h quantised (act_q8, in xq0), or NULL */
  spill_k_xq xh_v;
  uint32_t rt_rows, lt_rows, up_rows; /* rows per part: router, latent down, up */
  int rt_parts, lt_parts, up_parts;
  int pre_next, rt_left, lt_left; /* router then latent parts handed out; not done */
  int routed;  /* the experts are requested: n_u is final, the source may be polled */
  int u_ready; /* u (act_q8: its quantised form) is final: the LUT builds may start */
  int lut_parts, lut_total, lut_next, lut_left; /* LUT build parts (T x 2 x lut_parts) */
  uint32_t lut_groups;                          /* groups per LUT part */
  const spill_k_xq *xy;    /* the slots' sum quantised for up (act_q8, in xq_u), or NULL */
  spill_k_xq xy_v;
  int up_started, up_open, up_next, up_left, up_done;
  uint64_t ns_router0; /* the caller's router and latent steps */
  atomic_uint version;     /* bumped on every change an idle thread may act on */
  uint64_t ns_wait0, ns_lut0; /* the caller's (thread 0's) waits and LUT builds */
  uint64_t ns_wait_all;       /* every thread's waits, summed (under the lock) */
} moe_run;

/* task = (use position k in s->use, phase, part) */
#define TASK(k, ph, p) (((k) * 2 + (ph)) * SPILL_MOE_MAX_PARTS + (p))

static void sched_notify(spill_model *m, moe_run *R) {
  atomic_fetch_add_explicit(&R->version, 1, memory_order_release);
  if (R->waiters) pthread_cond_broadcast(&m->sched_cv);
}

/* The qmat views of a record's three matrices (s->rec_mat[idx * 3 + sec]). */
static void record_views(spill_model *m, int l, int idx, const uint8_t *rec) {
  spill_qmat *w = m->s.rec_mat + (size_t)idx * 3;
  spill_model_expert_qmat(m, l, rec, SPILL_SEC_GATE, &w[0]);
  spill_model_expert_qmat(m, l, rec, SPILL_SEC_UP, &w[1]);
  spill_model_expert_qmat(m, l, rec, SPILL_SEC_DOWN, &w[2]);
}

/* act_q8: down takes its input (the activation) quantised, as the old
 * row-split matvec did: where the matrix has the integer path and the
 * input fits the scratch. */
static int xq_down(const spill_model *m, const spill_qmat *Dn) {
  return m->o.act_q8 && m->s.xq_d && spill_k_matvec_xq_ok(Dn) &&
         spill_k_xq_bytes(Dn->cols) <= m->s.xq_cap;
}

/* Phase A part p of use k: rows [r0, r1) of gate and up into the use's eg/eu. */
static void task_gate_up(moe_run *R, int k, int p) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int K = m->a.moe.top_k, de = m->a.moe.d_expert;
  const int ts = s->use[k], t = ts / K;
  const spill_qmat *w = s->rec_mat + (size_t)s->use_owner[k] * 3;
  float *eg = s->eg + (size_t)ts * de, *eu = s->eu + (size_t)ts * de;
  const uint32_t r0 = (uint32_t)p * R->rows_a;
  const uint32_t r1 = r0 + R->rows_a < (uint32_t)de ? r0 + R->rows_a : (uint32_t)de;
  for (int mi = 0; mi < 2; mi++) {
    const spill_qmat *W = &w[mi];
    float *y = mi ? eu : eg;
    if (R->rq) {
      const uint8_t *q = (mi ? s->qlut_u : s->qlut_g) + (size_t)t * R->qlut_n;
      spill_k_apply_rvq3_i16(W, q, y, r0, r1);
    } else if (R->rvq3) {
      const float *lut = (mi ? s->lut_u : s->lut_g) + (size_t)t * R->lut_n;
      spill_k_apply_rvq3_f32(W, lut, y, r0, r1);
    } else if (m->o.act_q8 && s->xq_u && spill_k_matvec_xq_ok(W)) {
      spill_k_xq xq; /* u as quantised once per layer (overlap_work) */
      spill_k_xq_init(&xq, s->xq_u + (size_t)t * s->xq_u_bytes, (uint32_t)m->d_in);
      spill_k_matvec_xq(W, &xq, y, r0, r1);
    } else {
      spill_k_matvec(W, R->u + (size_t)t * m->d_in, y, r0, r1);
    }
  }
}

/* Phase B part p of use k: rows [r0, r1) of down into the use's slot. */
static void task_down(moe_run *R, int k, int p) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int ts = s->use[k], de = m->a.moe.d_expert;
  const spill_qmat *Dn = s->rec_mat + (size_t)s->use_owner[k] * 3 + 2;
  const uint32_t r0 = (uint32_t)p * R->rows_b;
  const uint32_t r1 = r0 + R->rows_b < Dn->rows ? r0 + R->rows_b : Dn->rows;
  float *y = R->slot + (size_t)ts * m->d_in;
  if (xq_down(m, Dn)) {
    spill_k_xq xq;
    spill_k_xq_init(&xq, s->xq_d + (size_t)ts * R->xq_d_bytes, (uint32_t)de);
    spill_k_matvec_xq(Dn, &xq, y, r0, r1);
  } else {
    spill_k_matvec(Dn, s->eg + (size_t)ts * de, y, r0, r1);
  }
}

/* After the last gate/up part of use k: the activation, then the input of
 * down (act_q8: quantised once; rvq3: the LUT, and down itself whole on
 * this thread). Returns 1 when the use is complete. */
static int finish_gate_up(moe_run *R, int k, int tid, uint64_t *ns_lut) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int ts = s->use[k], de = m->a.moe.d_expert;
  float *eg = s->eg + (size_t)ts * de;
  if (R->L->exps_bias[SPILL_SEC_GATE]) { /* expert_bias (gpt-oss): gate and up biases of this expert */
    const size_t ex = s->uniq[s->use_owner[k]];
    const float *bg = R->L->exps_bias[SPILL_SEC_GATE] + ex * (size_t)de;
    const float *bu = R->L->exps_bias[SPILL_SEC_UP] + ex * (size_t)de;
    float *eu = s->eu + (size_t)ts * de;
    for (int i = 0; i < de; i++) {
      eg[i] += bg[i];
      eu[i] += bu[i];
    }
  }
  spill_model_act_mul(m, eg, s->eu + (size_t)ts * de, (uint32_t)de);
  if (R->rvq3) {
    const spill_qmat *Dn = s->rec_mat + (size_t)s->use_owner[k] * 3 + 2;
    const float *cb = R->L->codebook[SPILL_SEC_DOWN];
    const uint32_t ng = (uint32_t)de / SPILL_RVQ_DIM;
    const size_t lut_de = (size_t)ng * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
    float *lut = s->lut_d + (size_t)tid * lut_de;
    const uint64_t t0 = spill_clock_ns();
    spill_k_lut_rvq3_f32(cb, eg, (uint32_t)de, lut, 0, ng);
    float *y = R->slot + (size_t)ts * m->d_in;
    if (R->rq) {
      uint8_t *q = s->qlut_d + (size_t)tid * spill_k_qlut_rvq3_i16_bytes((uint32_t)de);
      spill_k_qlut_rvq3_i16(lut, (uint32_t)de, q, 0, ng);
      *ns_lut += spill_clock_ns() - t0;
      spill_k_apply_rvq3_i16(Dn, q, y, 0, Dn->rows);
    } else {
      *ns_lut += spill_clock_ns() - t0;
      spill_k_apply_rvq3_f32(Dn, lut, y, 0, Dn->rows);
    }
    return 1;
  }
  if (xq_down(m, s->rec_mat + (size_t)s->use_owner[k] * 3 + 2)) {
    spill_k_xq xq;
    spill_k_xq_init(&xq, s->xq_d + (size_t)ts * R->xq_d_bytes, (uint32_t)de);
    spill_k_xq_quantize(eg, &xq);
  }
  if (R->parts_b == 1) {
    task_down(R, k, 0);
    return 1;
  }
  return 0;
}

/* Shared experts, phase A part p: rows [r0, r1) of gate and up. */
static void sh_gate_up(moe_run *R, int p) {
  const spill_layer_weights *L = R->L;
  spill_model_scratch *s = &R->m->s;
  const uint32_t F = L->ffn_gate_shexp.rows, r0 = (uint32_t)p * R->sh_rows_a;
  const uint32_t r1 = r0 + R->sh_rows_a < F ? r0 + R->sh_rows_a : F;
  spill_model_matvec_rows(&L->ffn_gate_shexp, R->sh_h, R->xh, s->ff_g, r0, r1);
  spill_model_matvec_rows(&L->ffn_up_shexp, R->sh_h, R->xh, s->ff_u, r0, r1);
}

/* Shared experts, phase B part p: rows [r0, r1) of down into attn_out. */
static void sh_down(moe_run *R, int p) {
  const spill_qmat *Dn = &R->L->ffn_down_shexp;
  spill_model_scratch *s = &R->m->s;
  const uint32_t r0 = (uint32_t)p * R->sh_rows_b;
  const uint32_t r1 = r0 + R->sh_rows_b < Dn->rows ? r0 + R->sh_rows_b : Dn->rows;
  spill_model_matvec_rows(Dn, s->ff_g, R->sh_xg, s->attn_out, r0, r1);
}

/* After the last gate/up part: the activation and down's input (quantised
 * with act_q8); down whole here when it has one part. Returns 1 when the
 * shared experts are complete. */
static int sh_finish_gate_up(moe_run *R) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const spill_qmat *Dn = &R->L->ffn_down_shexp;
  spill_model_glu_act(m, s->ff_g, s->ff_u, R->L->ffn_gate_shexp.rows);
  R->sh_xg = spill_model_xq_input(m, Dn, s->ff_g, s->xq1, &R->sh_xg_v);
  if (R->sh_parts_b > 1) return 0;
  sh_down(R, 0);
  return 1;
}

/* The end of shared_experts(): the Qwen3.5 gate, then the sum into the
 * token's shared_out row (zeroed, then added: the same bits). */
static void sh_finish(moe_run *R) {
  spill_model *m = R->m;
  const spill_layer_weights *L = R->L;
  float *tmp = m->s.attn_out; /* (D) */
  const int D = m->a.d_model;
  if (m->a.moe.shared_gate) {
    float gs;
    spill_model_matvec_rows(&L->ffn_gate_inp_shexp, R->sh_h, R->xh, &gs, 0, 1);
    gs = spill_model_sigmoid(gs);
    for (int i = 0; i < D; i++) tmp[i] *= gs;
  }
  memset(R->sh_out, 0, (size_t)D * sizeof(float));
  for (int i = 0; i < D; i++) R->sh_out[i] += tmp[i];
}

/* Runs shared-expert task `task` (phase, part) taken from sh_tasks; called
 * and returns without the lock. */
static void sh_run_task(moe_run *R, int task) {
  spill_model *m = R->m;
  const int p = task % SPILL_MOE_MAX_PARTS, ph = task / SPILL_MOE_MAX_PARTS;
  int complete = 0;
  if (ph == 0) {
    sh_gate_up(R, p);
    pthread_mutex_lock(&m->sched_mu);
    const int last_a = --R->sh_left == 0;
    pthread_mutex_unlock(&m->sched_mu);
    if (!last_a) return;
    complete = sh_finish_gate_up(R);
    if (!complete) {
      pthread_mutex_lock(&m->sched_mu);
      R->sh_left = R->sh_parts_b;
      for (int q = 0; q < R->sh_parts_b; q++)
        R->sh_tasks[R->sh_tail++] = SPILL_MOE_MAX_PARTS + q;
      pthread_mutex_unlock(&m->sched_mu);
      return;
    }
  } else {
    sh_down(R, p);
    pthread_mutex_lock(&m->sched_mu);
    complete = --R->sh_left == 0;
    pthread_mutex_unlock(&m->sched_mu);
  }
  if (complete) {
    sh_finish(R);
    pthread_mutex_lock(&m->sched_mu);
    R->sh_done = 1;
    pthread_mutex_unlock(&m->sched_mu);
  }
}

/* A delivered record (under the lock): checked against the request, its
 * views made and its gate/up tasks queued. */
static int accept_record(moe_run *R, int idx, const uint8_t *rec) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int l = R->l;
  if (idx < 0 || idx >= R->n_u || s->delivered[idx] || !rec) {
    if (idx >= 0 && idx < R->n_u && rec) m->src.release(m->src.ctx, l, s->uniq[idx]);
    return spill_err_set(&R->err, SPILL_E_INTERNAL,
                         "layer %d: expert source returned index %d (of %d) twice or out of range",
                         l, idx, R->n_u);
  }
  s->delivered[idx] = 1;
  R->received++;
  const uint32_t id = s->uniq[idx];
  spill_record_header rh;
  spill_record_header_decode(rec, &rh);
  if (rh.magic != SPILL_RECORD_MAGIC || rh.layer != (uint32_t)l || rh.expert != id ||
      rh.dtype != (uint16_t)m->expert_dtype) {
    m->src.release(m->src.ctx, l, id);
    s->delivered[idx] = 2; /* released */
    return spill_err_set(&R->err, SPILL_E_FORMAT,
                         "layer %d expert %u: source delivered a record of layer %u expert %u "
                         "(magic 0x%08x dtype %u)", l, id, rh.layer, rh.expert, rh.magic, rh.dtype);
  }
  R->held++;
  record_views(m, l, idx, rec);
  const int n_k = s->use_start[idx + 1] - s->use_start[idx];
  s->rec_left[idx] = n_k;
  m->stats.n_expert_uses += (uint64_t)n_k;
  for (int k = s->use_start[idx]; k < s->use_start[idx + 1]; k++) {
    s->parts_left[k] = R->parts_a;
    for (int p = 0; p < R->parts_a; p++) s->tasks[R->q_tail++] = TASK(k, 0, p);
  }
  return SPILL_OK;
}

/* Under the lock: use k is complete; a record whose uses are all complete
 * is queued for release. */
static void use_done(moe_run *R, int k) {
  spill_model_scratch *s = &R->m->s;
  const int idx = s->use_owner[k];
  R->uses_done++;
  if (--s->rec_left[idx] == 0) {
    s->rel[R->n_rel++] = idx;
    R->stalled = 0;
  }
}

/* Called with the lock held and the `polling` flag taken: makes the queued
 * releases, then asks the source for a record (wait: block until one is
 * ready or none can be; the time blocked is added to *waited). Returns with
 * the lock held. */
static void poll_source(moe_run *R, int wait, uint64_t *waited) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  int rel[SPILL_MAX_TOPK * 16];
  int n_rel = 0;
  for (;;) {
    while (R->n_rel > 0 && n_rel < (int)(sizeof rel / sizeof rel[0])) rel[n_rel++] = s->rel[--R->n_rel];
    pthread_mutex_unlock(&m->sched_mu);
    for (int i = 0; i < n_rel; i++) {
      m->src.release(m->src.ctx, R->l, s->uniq[rel[i]]);
      s->delivered[rel[i]] = 2;
    }
    int idx = -1, got;
    const uint8_t *rec = NULL;
    spill_err e = {0};
    const uint64_t t0 = wait ? spill_clock_ns() : 0;
    if (m->src.poll_ready) {
      got = m->src.poll_ready(m->src.ctx, wait, &idx, &rec, &e);
    } else { /* a source without it: next_ready only while nothing is held */
      pthread_mutex_lock(&m->sched_mu);
      const int free_ = R->held - n_rel == 0 && R->n_rel == 0;
      pthread_mutex_unlock(&m->sched_mu);
      got = wait && free_ ? m->src.next_ready(m->src.ctx, &idx, &rec, &e) : 0;
      if (got == SPILL_OK && wait && free_) got = 1;
    }
    if (t0) *waited += spill_clock_ns() - t0;
    pthread_mutex_lock(&m->sched_mu);
    R->held -= n_rel;
    n_rel = 0;
    if (got < 0) {
      if (R->rc == SPILL_OK) {
        R->rc = got;
        R->err = e;
      }
      break;
    }
    if (got == 1) {
      int rc = accept_record(R, idx, rec);
      if (rc < 0 && R->rc == SPILL_OK) R->rc = rc;
      break;
    }
    /* nothing delivered: retry at once only if releases came in meanwhile */
    if (!wait) break;
    if (R->n_rel == 0) {
      R->stalled = 1;
      if (R->held == 0) { /* nothing of ours can free a slot: it never will */
        R->rc = spill_err_set(&R->err, SPILL_E_INTERNAL,
                              "layer %d: the expert source can deliver none of the %d experts "
                              "still outstanding while none is held", R->l, R->n_u - R->received);
      }
      break;
    }
  }
  R->polling = 0;
  sched_notify(m, R);
}

/* ---- the steps around the experts, as tasks of the region ---- */

/* The slots of token t summed in selection order (with expert_bias) into
 * y (d_in), then, for Kimi K3, RMS-normalised: combine's first half. */
static void sum_slots(spill_model *m, const spill_layer_weights *L, const float *slot, int t,
                      float *y) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int K = c->top_k, din = m->d_in;
  const float *wt = s->selw + (size_t)t * K;
  memset(y, 0, (size_t)din * sizeof(float));
  for (int i = 0; i < K; i++) {
    const float *st = slot + ((size_t)t * K + i) * din;
    const float wi = wt[i];
    const float *bd = L->exps_bias[SPILL_SEC_DOWN]; /* expert_bias: (E, d_in) */
    if (bd) {
      bd += (size_t)s->sel[(size_t)t * K + i] * din;
      for (int j = 0; j < din; j++) y[j] += wi * (st[j] + bd[j]);
    } else {
      for (int j = 0; j < din; j++) y[j] += wi * st[j];
    }
  }
  if (c->d_latent > 0 && c->latent_norm == SPILL_LATENT_NORM_OUTPUT) /* Kimi K3: the sum is normed */
    spill_k_rmsnorm(y, L->moe_latent_norm, y, (uint32_t)din, (float)m->a.norm_eps);
}

/* Experts' tasks may run: u is final and its LUTs are built. */
static int experts_open(const moe_run *R) { return R->u_ready && R->lut_left == 0; }

/* Under the lock: steps any thread may take now. */
static int steps_queued(const moe_run *R) {
  return R->rt_parts + R->lt_parts - R->pre_next + (R->u_ready ? R->lut_total - R->lut_next : 0) +
         (R->up_open ? R->up_parts - R->up_next : 0);
}

enum { STEP_PRE = 1, STEP_LUT = 2, STEP_UP = 3 };
#define STEP(kind, i) ((kind) << 24 | (i))

/* Under the lock: takes the next step, or returns -1. */
static int pick_step(moe_run *R) {
  if (R->pre_next < R->rt_parts + R->lt_parts) return STEP(STEP_PRE, R->pre_next++);
  if (R->u_ready && R->lut_next < R->lut_total) return STEP(STEP_LUT, R->lut_next++);
  if (R->up_open && R->up_next < R->up_parts) return STEP(STEP_UP, R->up_next++);
  return -1;
}

/* After the router's last part (route): the selection from the logits, the
 * distinct experts, their request and the observer, as route_chunk does
 * them; then the source may be polled. Returns the observer's time (not the
 * router's: route_chunk leaves it out of ns_router too). */
static uint64_t route_finish(moe_run *R) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int K = m->a.moe.top_k;
  route_logits(m, R->L, s->router, R->forced, s->sel, s->selw);
  const int n_u = group_uses(m, s->sel, K);
  memset(s->delivered, 0, (size_t)n_u);
  spill_err e = {0};
  int rc = m->src.request(m->src.ctx, R->l, s->uniq, n_u, &e);
  const int requested = rc >= 0;
  /* after the demand request (lookahead prefetches queue behind it), before
   * any record is consumed */
  uint64_t ns_obs = 0;
  if (requested && m->has_obs && m->obs.on_route) {
    const uint64_t t0 = spill_clock_ns();
    rc = m->obs.on_route(m->obs.ctx, R->l, R->pos0, 1, R->x, s->sel, s->selw, K);
    ns_obs = spill_clock_ns() - t0;
    if (rc < 0) spill_err_set(&e, rc, "layer %d: stopped by the route observer", R->l);
  }
  pthread_mutex_lock(&m->sched_mu);
  if (requested) { /* a failed request leaves nothing to drain */
    R->n_u = n_u;
    m->stats.n_expert_requests += (uint64_t)n_u;
  }
  if (rc < 0 && R->rc == SPILL_OK) {
    R->rc = rc;
    R->err = e;
  }
  R->routed = 1;
  sched_notify(m, R);
  pthread_mutex_unlock(&m->sched_mu);
  return ns_obs;
}

/* After the latent down-projection's last part: its norm (latent norm on
 * the input) and, act_q8 without rvq3, u quantised for the experts. */
static void latent_finish(moe_run *R) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int din = m->d_in;
  if (m->a.moe.latent_norm == SPILL_LATENT_NORM_INPUT)
    spill_k_rmsnorm(s->u, R->L->moe_latent_norm, s->u, (uint32_t)din, (float)m->a.norm_eps);
  if (!R->rvq3 && m->o.act_q8) {
    spill_k_xq xq;
    spill_k_xq_init(&xq, s->xq_u, (uint32_t)din);
    spill_k_xq_quantize(s->u, &xq);
  }
  pthread_mutex_lock(&m->sched_mu);
  R->u_ready = 1;
  sched_notify(m, R);
  pthread_mutex_unlock(&m->sched_mu);
}

/* LUT part i: token i / (2 parts), gate or up, groups of part i % parts;
 * built then quantised (int16 path) as spill_model_lut(_q) builds them. */
static void lut_part(moe_run *R, int i) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const uint32_t din = (uint32_t)m->d_in, ng = din / SPILL_RVQ_DIM;
  const int t = i / (2 * R->lut_parts), up = (i / R->lut_parts) % 2, p = i % R->lut_parts;
  const uint32_t g0 = (uint32_t)p * R->lut_groups;
  const uint32_t g1 = g0 + R->lut_groups < ng ? g0 + R->lut_groups : ng;
  float *lut = (up ? s->lut_u : s->lut_g) + (size_t)t * R->lut_n;
  spill_k_lut_rvq3_f32(R->L->codebook[up ? SPILL_SEC_UP : SPILL_SEC_GATE], R->u + (size_t)t * din,
                       din, lut, g0, g1);
  if (R->rq)
    spill_k_qlut_rvq3_i16(lut, din, (up ? s->qlut_u : s->qlut_g) + (size_t)t * R->qlut_n, g0, g1);
}

/* Runs step `step` (from pick_step); called and returns without the lock. */
static void run_step(moe_run *R, int step, uint64_t *ns_lut, uint64_t *ns_router) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const spill_layer_weights *L = R->L;
  const int kind = step >> 24, i = step & 0xffffff;
  const uint64_t t0 = spill_clock_ns();
  if (kind == STEP_LUT) {
    lut_part(R, i);
    *ns_lut += spill_clock_ns() - t0;
    pthread_mutex_lock(&m->sched_mu);
    R->lut_left--;
  } else if (kind == STEP_UP) {
    const uint32_t r0 = (uint32_t)i * R->up_rows, D = L->moe_up_proj.rows;
    spill_model_matvec_rows(&L->moe_up_proj, s->y, R->xy, R->out, r0,
                            r0 + R->up_rows < D ? r0 + R->up_rows : D);
    pthread_mutex_lock(&m->sched_mu);
    R->up_done = --R->up_left == 0;
  } else { /* the router's rows, then the latent down-projection's */
    const int router = i < R->rt_parts, p = router ? i : i - R->rt_parts;
    const spill_qmat *w = router ? &L->ffn_gate_inp : &L->moe_down_proj;
    const uint32_t rows = router ? R->rt_rows : R->lt_rows, r0 = (uint32_t)p * rows;
    spill_model_matvec_rows(w, R->h, R->xh, router ? s->router : s->u, r0,
                            r0 + rows < w->rows ? r0 + rows : w->rows);
    pthread_mutex_lock(&m->sched_mu);
    const int last = router ? --R->rt_left == 0 : --R->lt_left == 0;
    pthread_mutex_unlock(&m->sched_mu);
    const uint64_t ns_obs = last && router ? route_finish(R) : 0;
    if (last && !router) latent_finish(R);
    *ns_router += spill_clock_ns() - t0 - ns_obs;
    pthread_mutex_lock(&m->sched_mu);
  }
  sched_notify(m, R);
  pthread_mutex_unlock(&m->sched_mu);
}

/* Under the lock, once every use is done (route): the slots' sum, then the
 * latent up-projection's rows as steps (without a latent the sum is the
 * output). Returns with the lock held. */
static void open_up(moe_run *R) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int lat = m->a.moe.d_latent > 0;
  R->up_started = 1;
  pthread_mutex_unlock(&m->sched_mu);
  sum_slots(m, R->L, R->slot, 0, s->y); /* (d_in) */
  if (lat) /* quantised as spill_model_matvec would (xq_u is free: every use is done) */
    R->xy = spill_model_xq_input(m, &R->L->moe_up_proj, s->y, s->xq_u, &R->xy_v);
  else
    memcpy(R->out, s->y, (size_t)m->a.d_model * sizeof(float));
  pthread_mutex_lock(&m->sched_mu);
  if (lat) {
    R->up_open = 1;
    R->up_left = R->up_parts;
  } else {
    R->up_done = 1;
  }
  sched_notify(m, R);
}

/* Under the lock: takes the next expert task and runs it (without the
 * lock); returns with the lock held. */
static void run_expert_task(moe_run *R, int tid, uint64_t *ns_lut) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int task = s->tasks[R->q_head++];
  R->active++;
  pthread_mutex_unlock(&m->sched_mu);
  const int p = task % SPILL_MOE_MAX_PARTS, ph = (task / SPILL_MOE_MAX_PARTS) % 2;
  const int k = task / SPILL_MOE_MAX_PARTS / 2;
  int complete = 0, last_a = 0;
  if (ph == 0) {
    task_gate_up(R, k, p);
    pthread_mutex_lock(&m->sched_mu);
    last_a = --s->parts_left[k] == 0;
    pthread_mutex_unlock(&m->sched_mu);
    if (last_a) complete = finish_gate_up(R, k, tid, ns_lut);
  } else {
    task_down(R, k, p);
  }
  pthread_mutex_lock(&m->sched_mu);
  R->active--;
  if (ph == 1) complete = --s->parts_left[k] == 0;
  if (last_a && !complete) {
    s->parts_left[k] = R->parts_b;
    for (int q = 0; q < R->parts_b; q++) s->tasks[R->q_tail++] = TASK(k, 1, q);
  }
  if (complete) use_done(R, k);
  if (R->route && R->uses_done == R->n_uses && !R->up_started) open_up(R);
  sched_notify(m, R);
}

/* Under the lock: nothing to run, a short spin, then sleep until something
 * changes; the time is added to *waited. Returns with the lock held. */
static void idle_wait(moe_run *R, uint64_t *waited) {
  spill_model *m = R->m;
  const unsigned v = atomic_load_explicit(&R->version, memory_order_acquire);
  pthread_mutex_unlock(&m->sched_mu);
  const uint64_t t0 = spill_clock_ns();
  int i = 0;
  while (i < SCHED_SPIN && atomic_load_explicit(&R->version, memory_order_acquire) == v) {
    SCHED_RELAX();
    i++;
  }
  pthread_mutex_lock(&m->sched_mu);
  if (i == SCHED_SPIN) {
    m->sched_sleeps++;
    R->waiters++;
    while (atomic_load_explicit(&R->version, memory_order_acquire) == v)
      pthread_cond_wait(&m->sched_cv, &m->sched_mu);
    R->waiters--;
  }
  *waited += spill_clock_ns() - t0;
}

static int region_done(const moe_run *R) {
  return R->rc < 0 || (R->routed && R->uses_done == R->n_uses && (!R->sh || R->sh_done) &&
                       (!R->route || R->up_done));
}

static void moe_region(void *ctx, int task_index, int tid) {
  (void)task_index;
  moe_run *R = ctx;
  spill_model *m = R->m;
  const int nt = m->o.n_threads;
  uint64_t ns_lut = 0, ns_router = 0, waited = 0; /* this thread's steps and waits */
  pthread_mutex_lock(&m->sched_mu);
  while (!region_done(R)) {
    const int sh_queued = R->sh_tail - R->sh_head;
    const int ex_queued = experts_open(R) ? R->q_tail - R->q_head : 0;
    const int queued = ex_queued + sh_queued + steps_queued(R);
    /* records are taken only once the experts may run (the steps done), as
     * before the steps were tasks: the cache sees the same claims and releases */
    if (R->routed && experts_open(R) && !R->polling && !R->stalled && R->received < R->n_u &&
        queued < nt) {
      R->polling = 1;
      poll_source(R, queued == 0, &waited);
      continue;
    }
    const int step = pick_step(R); /* steps first: everything else waits on them */
    if (step >= 0) {
      pthread_mutex_unlock(&m->sched_mu);
      run_step(R, step, &ns_lut, &ns_router);
      pthread_mutex_lock(&m->sched_mu);
      continue;
    }
    if (sh_queued > 0) { /* the shared experts next: they need no read */
      const int task = R->sh_tasks[R->sh_head++];
      R->active++;
      pthread_mutex_unlock(&m->sched_mu);
      sh_run_task(R, task);
      pthread_mutex_lock(&m->sched_mu);
      R->active--;
      sched_notify(m, R);
      continue;
    }
    if (ex_queued > 0) {
      run_expert_task(R, tid, &ns_lut);
      continue;
    }
    idle_wait(R, &waited);
  }
  if (tid == 0) {
    R->ns_lut0 += ns_lut;
    R->ns_router0 += ns_router;
    R->ns_wait0 += waited;
  }
  R->ns_wait_all += waited;
  pthread_mutex_unlock(&m->sched_mu);
}

/* Rows per part so a matrix of `rows` splits into about `parts` pieces,
 * each a multiple of 16 rows (whole rows: the split never changes a bit). */
static uint32_t part_rows(uint32_t rows, int parts) {
  uint32_t r = (rows + (uint32_t)parts - 1) / (uint32_t)parts;
  r = (r + 15) & ~15u;
  return r ? r : 16;
}

/* Parts a matrix of rows x cols is split into: one per thread (at most
 * SPILL_MOE_MAX_PARTS) when it has par_min_weights, else one. */
static int split_parts(const spill_model *m, uint64_t rows, uint64_t cols, uint32_t *rows_per) {
  const int nt = m->o.n_threads;
  int sp = 1;
  if (nt > 1 && rows * cols >= (uint64_t)m->o.par_min_weights)
    sp = nt < SPILL_MOE_MAX_PARTS ? nt : SPILL_MOE_MAX_PARTS;
  *rows_per = part_rows((uint32_t)rows, sp);
  return rows ? (int)(((uint32_t)rows + *rows_per - 1) / *rows_per) : 0;
}

/* The routed experts' split, and (shared_in_region) the shared experts' tasks. */
static void plan_experts(moe_run *R, int T, int shared_in_region) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const spill_layer_weights *L = R->L;
  const int K = m->a.moe.top_k, din = m->d_in, de = m->a.moe.d_expert;
  const int nt = m->o.n_threads;
  R->n_uses = T * K;
  R->rvq3 = m->expert_dtype == SPILL_DT_RVQ3;
  R->rq = R->rvq3 && m->rvq_q;
  R->lut_n = (size_t)(din / SPILL_RVQ_DIM) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  R->qlut_n = spill_k_qlut_rvq3_i16_bytes((uint32_t)din);
  /* split each use's rows when there are fewer than 8 uses per thread and
   * the expert is large enough to be worth a task (par_min_weights) */
  int parts = 1;
  if (nt > 1 && R->n_uses < 8 * nt && (uint64_t)de * (uint64_t)din >= (uint64_t)m->o.par_min_weights)
    parts = nt < SPILL_MOE_MAX_PARTS ? nt : SPILL_MOE_MAX_PARTS;
  R->rows_a = part_rows((uint32_t)de, parts);
  R->parts_a = (int)(((uint32_t)de + R->rows_a - 1) / R->rows_a);
  R->rows_b = part_rows((uint32_t)din, R->rvq3 ? 1 : parts);
  R->parts_b = R->rvq3 ? 1 : (int)(((uint32_t)din + R->rows_b - 1) / R->rows_b);
  R->xq_d_bytes = s->xq_d_bytes;
  if (shared_in_region) { /* one token (T == 1): its shared experts as tasks */
    R->sh = 1;
    R->sh_h = R->h;
    R->sh_out = s->shared_out;
    R->sh_parts_a = split_parts(m, L->ffn_gate_shexp.rows, L->ffn_gate_shexp.cols, &R->sh_rows_a);
    R->sh_parts_b = split_parts(m, L->ffn_down_shexp.rows, L->ffn_gate_shexp.rows, &R->sh_rows_b);
    R->sh_left = R->sh_parts_a;
    for (int p = 0; p < R->sh_parts_a; p++) R->sh_tasks[R->sh_tail++] = p;
  }
}

/* The steps' split: LUT builds (lut_in_region), a decode token's router,
 * latent down and up (route); h quantised once for every matrix reading it. */
static void plan_steps(moe_run *R, int T, int lut_in_region) {
  spill_model *m = R->m;
  const spill_layer_weights *L = R->L;
  const spill_moe_cfg *c = &m->a.moe;
  const uint32_t ng = (uint32_t)m->d_in / SPILL_RVQ_DIM;
  const int nt = m->o.n_threads;
  R->u_ready = 1;
  if (R->route || R->sh) { /* act_q8: h as spill_model_matvec would quantise it */
    const spill_qmat *ws[] = {&L->ffn_gate_inp, &L->moe_down_proj, &L->ffn_gate_shexp,
                              &L->ffn_up_shexp, &L->ffn_gate_inp_shexp};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !R->xh; i++)
      if (ws[i]->rows > 0 && ws[i]->cols == (uint32_t)m->a.d_model)
        R->xh = spill_model_xq_input(m, ws[i], R->h, m->s.xq0, &R->xh_v);
  }
  if (R->route) {
    R->rt_parts = R->rt_left =
        split_parts(m, L->ffn_gate_inp.rows, L->ffn_gate_inp.cols, &R->rt_rows);
    if (c->d_latent > 0) {
      R->lt_parts = R->lt_left =
          split_parts(m, L->moe_down_proj.rows, L->moe_down_proj.cols, &R->lt_rows);
      R->up_parts = split_parts(m, L->moe_up_proj.rows, L->moe_up_proj.cols, &R->up_rows);
      R->u_ready = 0;
    }
  } else {
    R->routed = 1;
  }
  if (R->rvq3 && lut_in_region) { /* the rule of spill_model_lut: split when worth it */
    int lp = 1;
    if (nt > 1 && (uint64_t)ng * 6144u >= (uint64_t)m->o.par_min_weights && ng >= 2)
      lp = (uint32_t)nt < ng ? nt : (int)ng;
    R->lut_groups = (ng + (uint32_t)lp - 1) / (uint32_t)lp;
    R->lut_parts = (int)((ng + R->lut_groups - 1) / R->lut_groups);
    R->lut_total = R->lut_left = T * 2 * R->lut_parts;
  }
}

/* Runs the region over the planned R (one pool run, or inline with one
 * thread), then releases every record. On an error the outstanding experts
 * are drained and the first error is returned. */
static int run_region(moe_run *R, spill_err *e) {
  spill_model *m = R->m;
  spill_model_scratch *s = &m->s;
  const int l = R->l;
  atomic_init(&R->version, 0);
  if (R->routed) memset(s->delivered, 0, (size_t)R->n_u);
  const uint64_t t0 = spill_clock_ns();
  if (m->o.n_threads == 1 || spill_pool_n_threads(m->pool) == 1) {
    moe_region(R, 0, 0);
  } else {
    spill_pool_run(m->pool, moe_region, R, m->o.n_threads);
    m->sched_regions++;
  }
  /* release what is still held (the queued releases; after an error also
   * the records whose tasks were abandoned), then drain the rest */
  for (int i = 0; i < R->n_u; i++)
    if (s->delivered[i] == 1) m->src.release(m->src.ctx, l, s->uniq[i]);
  const uint64_t wall = spill_clock_ns() - t0;
  m->stats.ns_expert_wait += R->ns_wait0;
  m->stats.ns_expert_wait_threads += R->ns_wait_all;
  m->sched_wait_threads_ns += R->ns_wait_all;
  m->stats.ns_lut += R->ns_lut0;
  m->stats.ns_router += R->ns_router0;
  const uint64_t named = R->ns_wait0 + R->ns_lut0 + R->ns_router0;
  m->stats.ns_expert += wall > named ? wall - named : 0;
  if (R->rc < 0) {
    drain(m, l, s->uniq, R->n_u - R->received);
    if (e) *e = R->err;
    return R->rc;
  }
  return SPILL_OK;
}

/* 4. combine in selection order, latent up-projection, shared experts */
static void combine(spill_model *m, const spill_layer_weights *L, const float *slot, int T,
                    float *out) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model;
  float *y = s->y; /* (d_in) */
  uint64_t t0 = spill_clock_ns();
  for (int t = 0; t < T; t++) {
    sum_slots(m, L, slot, t, y);
    float *ot = out + (size_t)t * D; /* (D) */
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

/* 1-3 for a chunk (or a decode token with steps_outside_region): every
 * token routed and its expert input made as row-split matvecs, the
 * distinct experts requested, the observer told; returns their count. */
static int route_chunk(spill_model *m, int l, const float *x, const float *h, int T, int pos0,
                       const uint32_t *forced, size_t forced_stride, spill_err *e) {
  const spill_moe_cfg *c = &m->a.moe;
  const spill_layer_weights *L = &m->L[l];
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model, E = c->n_experts, K = c->top_k, din = m->d_in;
  uint64_t t0 = spill_clock_ns();
  for (int t = 0; t < T; t++) {
    const float *ht = h + (size_t)t * D;
    route(m, L, ht, s->router + (size_t)t * E, forced ? forced + (size_t)t * forced_stride : NULL,
          s->sel + (size_t)t * K, s->selw + (size_t)t * K);
    float *ut = s->u + (size_t)t * din;
    if (c->d_latent > 0) {
      spill_model_matvec(m, &L->moe_down_proj, ht, ut);
      if (c->latent_norm == SPILL_LATENT_NORM_INPUT)
        spill_k_rmsnorm(ut, L->moe_latent_norm, ut, (uint32_t)din, (float)m->a.norm_eps);
    } else {
      memcpy(ut, ht, (size_t)D * sizeof(float));
    }
  }
  /* 3. distinct experts in first-use order, with their (token, slot) uses (CSR) */
  const int n_u = group_uses(m, s->sel, T * K);
  m->stats.ns_router += spill_clock_ns() - t0;
  /* 3'. request everything at once; the LUTs are built while the reads fly */
  int rc = m->src.request(m->src.ctx, l, s->uniq, n_u, e);
  if (rc < 0) return rc;
  m->stats.n_expert_requests += (uint64_t)n_u;
  /* The observer runs after the demand request (so lookahead prefetches it
   * issues queue behind it) and before the experts are consumed. */
  if (m->has_obs && m->obs.on_route) {
    rc = m->obs.on_route(m->obs.ctx, l, pos0, T, x, s->sel, s->selw, K);
    if (rc < 0) {
      drain(m, l, s->uniq, n_u);
      return spill_err_set(e, rc, "layer %d: stopped by the route observer", l);
    }
  }
  return n_u;
}

int spill_model_moe(spill_model *m, int l, const float *x, const float *h, int T, int pos0,
                    float *out, spill_err *e) {
  const spill_moe_cfg *c = &m->a.moe;
  spill_model_scratch *s = &m->s;
  const int D = m->a.d_model;
  const uint32_t *forced;
  size_t forced_stride;
  SPILL_TRY(forced_rows(m, l, T, pos0, &forced, &forced_stride, e));
  moe_run R;
  memset(&R, 0, sizeof R);
  R.m = m;
  R.l = l;
  R.L = &m->L[l];
  R.u = s->u;       /* (T, d_in) */
  R.slot = s->slot; /* (T, K, d_in) */
  R.h = h;
  R.x = x;
  R.out = out;
  R.pos0 = pos0;
  R.forced = forced;
  /* a decode token's router, latent projections and shared experts run as
   * tasks of the experts' region (no fork-joins of their own); a chunk's
   * before and after it, row-split */
  R.route = T == 1 && !m->o.steps_outside_region;
  const int shared_in_region = c->n_shared > 0 && T == 1 && !m->o.shared_outside_region;
  if (!R.route) {
    R.n_u = route_chunk(m, l, x, h, T, pos0, forced, forced_stride, e);
    if (R.n_u < 0) return R.n_u;
  } else if (c->d_latent == 0) {
    memcpy(s->u, h, (size_t)D * sizeof(float)); /* u = h */
  }
  /* before plan_steps: shared experts run here use xq0, where h is then
   * quantised for the region */
  overlap_work(m, R.L, h, s->u, T, shared_in_region, !m->o.steps_outside_region,
               R.route && c->d_latent > 0);
  plan_experts(&R, T, shared_in_region);
  plan_steps(&R, T, !m->o.steps_outside_region);
  SPILL_TRY(run_region(&R, e));
  if (!R.route) {
    combine(m, R.L, s->slot, T, out);
  } else if (c->n_shared > 0) { /* combine's last step: out += the shared experts */
    for (int i = 0; i < D; i++) out[i] += s->shared_out[i];
  }
  return SPILL_OK;
}
