/* engine/model/attention_kda.c: Kimi Delta Attention, docs/MODEL.md
 * "ATTN KDA". A linear attention with a fixed-size state per layer: per head
 * a (d, d) matrix S (rows = key channels) plus rings with the K-1 previous
 * pre-conv q, k, v inputs for the short causal convolution. Nothing grows
 * with context. Per token: projections, causal conv + SiLU, per-channel decay
 * alpha = exp(max(-exp(A_log) softplus(f_b f_a h + dt_bias), floor)) (Kimi K3,
 * kda.gate_lower_bound lb < 0: alpha = exp(lb sigmoid(exp(A_log) (f_b f_a h +
 * dt_bias)))), then
 * per head the gated delta rule
 *   S = diag(alpha) S;  S += kh (beta (vh - S^T kh))^T;  o = S^T qh
 * and an rmsnorm'd, sigmoid-gated output. Heads run in parallel on the pool,
 * each by one thread in a fixed order (rows of S ascending).
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* y[c] = silu(sum_{i<K} w[c][i] * x_{pos-K+1+i}[c]) with the ring holding
 * the K-1 previous inputs (slot = position mod (K-1)); then stores x. */
static void causal_conv_range(const float *x, const float *w, float *ring, int n, int K, int pos,
                              float *y, int c0, int c1) {
  const int K1 = K - 1;
  for (int c = c0; c < c1; c++) {
    float acc = 0.0f;
    for (int i = 0; i < K1; i++) {
      const int t = pos - K1 + i;
      if (t >= 0) acc += w[(size_t)c * K + i] * ring[(size_t)(t % K1) * n + c];
    }
    acc += w[(size_t)c * K + K1] * x[c];
    y[c] = spill_model_silu(acc);
  }
  /* channel c reads only channel c of the ring: a range can be stored as
   * soon as it is convolved (any split of the channels gives these bits) */
  if (K1 > 0)
    memcpy(ring + (size_t)(pos % K1) * n + c0, x + c0, (size_t)(c1 - c0) * sizeof(float));
}

static void causal_conv(const float *x, const float *w, float *ring, int n, int K, int pos,
                        float *y) {
  causal_conv_range(x, w, ring, n, K, pos, y, 0, n);
}

/* alpha[ch] for ch in [c0, c1) from f_b f_a h (in alpha): the decay of
 * kda_run, channel by channel */
static void kda_decay(const spill_kda_cfg *c, const spill_layer_weights *L, float *alpha, int c0,
                      int c1) {
  const int d = c->head_dim;
  if (c->gate_lower_bound < 0) { /* Kimi K3: g = lb * sigmoid(exp(A_log) f), no softplus, no floor */
    const float lb = (float)c->gate_lower_bound;
    for (int ch = c0; ch < c1; ch++) {
      const float nA = expf(L->attn_a_log[ch / d]); /* -A */
      alpha[ch] = expf(lb * spill_model_sigmoid(nA * (alpha[ch] + L->attn_dt_bias[ch])));
    }
    return;
  }
  for (int ch = c0; ch < c1; ch++) {
    const float A = -expf(L->attn_a_log[ch / d]);
    float g = A * softplus(alpha[ch] + L->attn_dt_bias[ch]);
    if (c->decay_floor < 0 && g < (float)c->decay_floor) g = (float)c->decay_floor;
    alpha[ch] = expf(g);
  }
}

typedef struct kda_job {
  const float *q, *k, *v; /* (H*d) after conv */
  const float *alpha;     /* (H*d) */
  const float *beta;      /* (H) */
  const float *gate;      /* (H*d) output gate pre-sigmoid */
  const float *o_norm;    /* (d) */
  float *S;               /* (H, d, d) */
  float *tmp;             /* (n_threads, d) */
  float *o;               /* (H*d) */
  int d;
  float eps;    /* o_norm's rmsnorm eps */
  float l2_eps; /* q/k l2norm eps */
} kda_job;

static void kda_head(void *ctx, int j, int thread) {
  const kda_job *g = ctx;
  const int d = g->d;
  const size_t off = (size_t)j * d;
  float *S = g->S + (size_t)j * d * d; /* (d, d) */
  float *u = g->tmp + (size_t)thread * d; /* (d) */
  float *o = g->o + off;                  /* (d) */
  const float *alpha = g->alpha + off;

  /* qh = l2norm(q_j) / sqrt(d), kh = l2norm(k_j), l2norm(x) = x / sqrt(|x|^2 + l2_eps):
   * applied as scalars on the fly */
  const float *qj = g->q + off, *kj = g->k + off, *vj = g->v + off;
  float qs = 0.0f, ks = 0.0f;
  for (int i = 0; i < d; i++) {
    qs += qj[i] * qj[i];
    ks += kj[i] * kj[i];
  }
  const float qn = 1.0f / (sqrtf(qs + g->l2_eps) * sqrtf((float)d));
  const float kn = 1.0f / sqrtf(ks + g->l2_eps);

  /* pass 1: decay rows, u = S^T kh */
  memset(u, 0, (size_t)d * sizeof(float));
  for (int a = 0; a < d; a++) {
    float *row = S + (size_t)a * d;
    const float al = alpha[a], kh = kj[a] * kn;
    for (int b = 0; b < d; b++) {
      row[b] *= al;
      u[b] += row[b] * kh;
    }
  }
  const float beta = g->beta[j];
  for (int b = 0; b < d; b++) u[b] = beta * (vj[b] - u[b]);
  /* pass 2: S += kh u^T; o = S^T qh */
  memset(o, 0, (size_t)d * sizeof(float));
  for (int a = 0; a < d; a++) {
    float *row = S + (size_t)a * d;
    const float kh = kj[a] * kn, qh = qj[a] * qn;
    for (int b = 0; b < d; b++) {
      row[b] += kh * u[b];
      o[b] += row[b] * qh;
    }
  }
  /* o = rmsnorm(o, o_norm) * sigmoid(gate) */
  spill_k_rmsnorm(o, g->o_norm, o, (uint32_t)d, g->eps);
  for (int b = 0; b < d; b++) o[b] *= spill_model_sigmoid(g->gate[off + b]);
}

/* The layer as row-split fork-joins, one per matvec set and one for the
 * heads (o.attn_outside_region; kda_run's bits). */
static int kda_run_split(spill_model *m, int l, const float *h, int pos, float *out) {
  const spill_kda_cfg *c = &m->a.kda;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, d = c->head_dim, K = c->conv_kernel, n = H * d;
  const size_t ring_n = (size_t)(K - 1) * n;
  spill_model_scratch *s = &m->s;
  float *q = s->q, *k = s->k, *v = s->v;    /* (H*d) pre-conv projections */
  float *qc = s->kq, *kc = s->kk, *vc = s->kv; /* (H*d) after conv + silu */
  float *fa = s->kfa;                        /* (max(r, og)) */
  float *alpha = s->kalpha;                  /* (H*d) */
  float *beta = s->kbeta;                    /* (H) */
  float *gate = s->qa;                       /* (H*d) */

  /* the projections of h in one dispatch: q, k, v, f_a, b and (without the
   * low-rank output gate) g; g_a would share fa with f_a: it runs below */
  const spill_qmat *ws[6] = {&L->attn_q,   &L->attn_k, &L->attn_v,
                             &L->attn_f_a, &L->attn_b, &L->attn_g};
  float *const ys[6] = {q, k, v, fa, beta, gate};
  spill_model_matvec_n(m, c->out_gate_rank == 0 ? 6 : 5, ws, h, ys);
  causal_conv(q, L->attn_q_conv, L->kda_ring, n, K, pos, qc);
  causal_conv(k, L->attn_k_conv, L->kda_ring + ring_n, n, K, pos, kc);
  causal_conv(v, L->attn_v_conv, L->kda_ring + 2 * ring_n, n, K, pos, vc);

  /* decay: alpha = exp(max(-exp(A_log_j) * softplus(f_b f_a h + dt_bias), floor)) */
  spill_model_matvec(m, &L->attn_f_b, fa, alpha);
  if (c->gate_lower_bound < 0) { /* Kimi K3: g = lb * sigmoid(exp(A_log) f), no softplus, no floor */
    const float lb = (float)c->gate_lower_bound;
    for (int j = 0; j < H; j++) {
      const float nA = expf(L->attn_a_log[j]); /* -A */
      for (int i = 0; i < d; i++) {
        const int ch = j * d + i;
        alpha[ch] = expf(lb * spill_model_sigmoid(nA * (alpha[ch] + L->attn_dt_bias[ch])));
      }
    }
  }
  for (int j = 0; j < H && c->gate_lower_bound >= 0; j++) {
    const float A = -expf(L->attn_a_log[j]);
    for (int i = 0; i < d; i++) {
      const int ch = j * d + i;
      float g = A * softplus(alpha[ch] + L->attn_dt_bias[ch]);
      if (c->decay_floor < 0 && g < (float)c->decay_floor) g = (float)c->decay_floor;
      alpha[ch] = expf(g);
    }
  }
  for (int j = 0; j < H; j++) beta[j] = spill_model_sigmoid(beta[j]);
  if (c->out_gate_rank > 0) { /* else g came with the projections above */
    spill_model_matvec(m, &L->attn_g_a, h, fa);
    spill_model_matvec(m, &L->attn_g_b, fa, gate);
  }

  /* l2norm eps: 0 = 1e-6 (fla / the HF code; a GGUF import writes llama.cpp's) */
  const float l2_eps = c->l2norm_eps > 0 ? (float)c->l2norm_eps : 1e-6f;
  kda_job g = {qc, kc, vc, alpha, beta, gate, L->attn_o_norm, L->kda_s, s->ku, s->o, d,
               (float)m->a.norm_eps, l2_eps};
  spill_model_run_tasks(m, kda_head, &g, H, (uint64_t)H * 4u * (uint64_t)d * (uint64_t)d);
  spill_model_matvec(m, &L->attn_output, s->o, out); /* (D) from (H*d) */
  return SPILL_OK;
}

/* ---- the layer as one parallel region ----
 * Steps (spill_model_run_steps; each waits for the one before):
 *   0 proj   q, k, v, f_a, b (and g) rows of h (quantised before the region)
 *   1 prep   one task: f_a quantised for f_b (act_q8), beta = sigmoid(b)
 *   2 mix    f_b rows, each task's channels' decay right after its rows;
 *            the causal conv of q, k and v by channel blocks
 *   3 heads  one task per head (kda_head)
 *   4 oq     one task: the head outputs quantised for the output matrix
 *   5 out    the output matrix's rows
 * Every row and channel is computed whole by one thread with the operations
 * of kda_run_split, so the bits are its bits. The low-rank output gate
 * (out_gate_rank > 0) would share f_a's scratch: it runs before the region. */
#define KDA_CONV_BLOCK 256 /* channels of one conv task */

typedef struct kda_region {
  spill_model *m;
  const spill_kda_cfg *c;
  const spill_layer_weights *L;
  spill_model_mvs proj, fb, outp;
  const float *beta_in; /* (H) b h, made sigmoid in place */
  float *beta;
  const float *pre[3]; /* (H*d) q, k, v before the conv */
  float *post[3];      /* (H*d) after conv + silu */
  int n, K, pos, conv_tasks;
  kda_job heads;
} kda_region;

static void kda_prep_task(void *ctx, int task, int thread) {
  (void)task;
  (void)thread;
  kda_region *r = ctx;
  spill_model_mvs_quantise(&r->fb);
  for (int j = 0; j < r->c->n_heads; j++) r->beta[j] = spill_model_sigmoid(r->beta[j]);
}

static void kda_mix_task(void *ctx, int task, int thread) {
  const kda_region *r = ctx;
  if (task < r->conv_tasks) {
    const int per = (r->n + KDA_CONV_BLOCK - 1) / KDA_CONV_BLOCK;
    const int vec = task / per, c0 = (task % per) * KDA_CONV_BLOCK;
    const int c1 = c0 + KDA_CONV_BLOCK < r->n ? c0 + KDA_CONV_BLOCK : r->n;
    const float *conv = vec == 0 ? r->L->attn_q_conv : vec == 1 ? r->L->attn_k_conv : r->L->attn_v_conv;
    causal_conv_range(r->pre[vec], conv, r->L->kda_ring + (size_t)vec * (size_t)(r->K - 1) * r->n,
                      r->n, r->K, r->pos, r->post[vec], c0, c1);
    return;
  }
  const int t = task - r->conv_tasks;
  spill_model_mvs_task((void *)&r->fb, t, thread);
  if (r->fb.whole) {
    kda_decay(r->c, r->L, r->fb.y[0], 0, r->n);
  } else {
    int mi;
    uint32_t r0, r1;
    spill_model_mvs_task_rows(&r->fb, t, &mi, &r0, &r1);
    kda_decay(r->c, r->L, r->fb.y[0], (int)r0, (int)r1);
  }
}

static void kda_oq_task(void *ctx, int task, int thread) {
  (void)task;
  (void)thread;
  spill_model_mvs_quantise(&((kda_region *)ctx)->outp);
}

static int kda_run(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e) {
  (void)e;
  if (m->o.attn_outside_region) return kda_run_split(m, l, h, pos, out);
  const spill_kda_cfg *c = &m->a.kda;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, d = c->head_dim, n = H * d;
  spill_model_scratch *s = &m->s;
  float *gate = s->qa; /* (H*d) */
  if (c->out_gate_rank > 0) { /* g_a would overwrite f_a's output (s->kfa) */
    spill_model_matvec(m, &L->attn_g_a, h, s->kfa);
    spill_model_matvec(m, &L->attn_g_b, s->kfa, gate);
  }
  kda_region r;
  r.m = m;
  r.c = c;
  r.L = L;
  r.n = n;
  r.K = c->conv_kernel;
  r.pos = pos;
  r.beta = s->kbeta;
  r.pre[0] = s->q, r.pre[1] = s->k, r.pre[2] = s->v;
  r.post[0] = s->kq, r.post[1] = s->kk, r.post[2] = s->kv;
  r.conv_tasks = r.K > 0 ? 3 * ((n + KDA_CONV_BLOCK - 1) / KDA_CONV_BLOCK) : 0;

  const spill_qmat *ws[6] = {&L->attn_q,   &L->attn_k, &L->attn_v,
                             &L->attn_f_a, &L->attn_b, &L->attn_g};
  float *const ys[6] = {s->q, s->k, s->v, s->kfa, s->kbeta, gate};
  spill_pool_step st[6];
  st[0].n_tasks = spill_model_mvs_plan(m, &r.proj, c->out_gate_rank == 0 ? 6 : 5, ws, h, ys, s->xq0);
  spill_model_mvs_quantise(&r.proj); /* h is ready */
  const spill_qmat *wfb = &L->attn_f_b;
  float *yfb = s->kalpha;
  const int fb_tasks = spill_model_mvs_plan(m, &r.fb, 1, &wfb, s->kfa, &yfb, s->xq1);
  const spill_qmat *wo = &L->attn_output;
  float *yo = out;
  const int out_tasks = spill_model_mvs_plan(m, &r.outp, 1, &wo, s->o, &yo, s->xq1);
  /* l2norm eps: 0 = 1e-6 (fla / the HF code; a GGUF import writes llama.cpp's) */
  const float l2_eps = c->l2norm_eps > 0 ? (float)c->l2norm_eps : 1e-6f;
  kda_job g = {s->kq, s->kk, s->kv, s->kalpha, s->kbeta, gate, L->attn_o_norm, L->kda_s, s->ku, s->o, d,
               (float)m->a.norm_eps, l2_eps};
  r.heads = g;
  /* heads split only where spill_model_run_tasks would split them */
  const int head_par = m->o.n_threads > 1 &&
                       (uint64_t)H * 4u * (uint64_t)d * (uint64_t)d >= (uint64_t)m->o.par_min_weights;
  st[0].fn = spill_model_mvs_task, st[0].ctx = &r.proj;
  st[1] = (spill_pool_step){kda_prep_task, &r, 1};
  st[2] = (spill_pool_step){kda_mix_task, &r, r.conv_tasks + fb_tasks};
  st[3] = (spill_pool_step){kda_head, &r.heads, H};
  st[4] = (spill_pool_step){kda_oq_task, &r, spill_model_mvs_needs_xq(&r.outp)};
  st[5] = (spill_pool_step){spill_model_mvs_task, &r.outp, out_tasks};
  /* a layer whose matvecs and heads are all too small to split (tiny
   * models) runs on the caller, as kda_run_split would */
  spill_model_run_steps(m, st, 6, !r.proj.whole || !r.fb.whole || !r.outp.whole || head_par);
  return SPILL_OK;
}

/* ---- the KDA row of the attention table ---- */

static int kda_check(const spill_arch *a, spill_err *e) {
  const spill_kda_cfg *c = &a->kda;
  SPILL_FAIL_IF(e, c->n_heads <= 0 || c->head_dim <= 0 || c->conv_kernel < 1 ||
                       c->gate_rank <= 0 || c->out_gate_rank < 0,
                SPILL_E_FORMAT, "arch.kda: dimensions out of range");
  return SPILL_OK;
}

/* S (H, d, d), then the rings (3, K-1, H*d); independent of ctx */
static void kda_state_floats(const spill_arch *a, const spill_state_geom *g, uint64_t part[2]) {
  (void)g;
  const uint64_t hd = (uint64_t)a->kda.n_heads * (uint64_t)a->kda.head_dim;
  const uint64_t K1 = a->kda.conv_kernel > 1 ? (uint64_t)a->kda.conv_kernel - 1 : 0;
  part[0] = spill_sat_mul(hd, (uint64_t)a->kda.head_dim);
  part[1] = spill_sat_mul(3 * K1, hd);
}

static void kda_bind_state(const spill_arch *a, const spill_state_geom *g, spill_layer_weights *L) {
  (void)g;
  L->kda_s = L->state;
  L->kda_ring = L->state + (size_t)a->kda.n_heads * a->kda.head_dim * a->kda.head_dim;
}

static void kda_scratch(const spill_arch *a, spill_attn_dims *d) {
  const spill_kda_cfg *c = &a->kda;
  const uint64_t hd = (uint64_t)c->n_heads * c->head_dim;
#define RAISE(f, v) d->f = d->f > (uint64_t)(v) ? d->f : (uint64_t)(v)
  RAISE(kda, hd);
  RAISE(q, hd);
  RAISE(kv, hd);
  RAISE(heads, c->n_heads);
  RAISE(ohead, hd);
  RAISE(fa, c->gate_rank > c->out_gate_rank ? c->gate_rank : c->out_gate_rank);
  RAISE(kd, c->head_dim);
#undef RAISE
}

static int kda_load(spill_model *m, int l, spill_err *e) {
  const spill_arch *a = &m->a;
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)a->d_model;
  const spill_kda_cfg *c = &a->kda;
  const uint64_t H = c->n_heads, d = c->head_dim, K = c->conv_kernel, r = c->gate_rank,
                 og = c->out_gate_rank;
  SPILL_TRY(spill_model_get_mat(m, l, "attn_q", H * d, D, &L->attn_q, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_k", H * d, D, &L->attn_k, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_v", H * d, D, &L->attn_v, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_q_conv", H * d, K, &L->attn_q_conv, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_k_conv", H * d, K, &L->attn_k_conv, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_v_conv", H * d, K, &L->attn_v_conv, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_f_a", r, D, &L->attn_f_a, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_f_b", H * d, r, &L->attn_f_b, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_dt_bias", H * d, 0, &L->attn_dt_bias, e));
  SPILL_TRY(spill_model_get_f32(m, l, "attn_a_log", H, 0, &L->attn_a_log, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_b", H, D, &L->attn_b, e));
  if (og == 0) {
    SPILL_TRY(spill_model_get_mat(m, l, "attn_g", H * d, D, &L->attn_g, e));
  } else {
    SPILL_TRY(spill_model_get_mat(m, l, "attn_g_a", og, D, &L->attn_g_a, e));
    SPILL_TRY(spill_model_get_mat(m, l, "attn_g_b", H * d, og, &L->attn_g_b, e));
  }
  SPILL_TRY(spill_model_get_f32(m, l, "attn_o_norm", d, 0, &L->attn_o_norm, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_output", D, H * d, &L->attn_output, e));
  return SPILL_OK;
}

/* All of it (S and the rings, indexed by position modulo K-1), whatever n_past. */
static int kda_live_state(const spill_arch *a, const spill_state_geom *g, uint64_t n_past,
                          uint64_t off[SPILL_MODEL_STATE_SPANS], uint64_t n[SPILL_MODEL_STATE_SPANS]) {
  (void)n_past;
  uint64_t part[2];
  kda_state_floats(a, g, part);
  off[0] = 0;
  n[0] = part[0] + part[1];
  off[1] = n[1] = 0;
  return 1;
}

const spill_attn_ops spill_attn_kda_ops = {
    "kda", kda_check, kda_state_floats, kda_bind_state, 1, kda_scratch, kda_load, kda_run,
    kda_live_state,
};
