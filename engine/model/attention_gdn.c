/* engine/model/attention_gdn.c: Gated DeltaNet (Qwen3.5-MoE's linear
 * attention layers), docs/MODEL.md "ATTN GDN". A relative of KDA
 * (attention_kda.c) with a fixed-size state per layer: per v head a (d, d)
 * matrix S (rows = key channels) and one ring with the K-1 previous
 * pre-conv inputs of the fused q, k, v projection. Per token: the fused
 * projection and the output gate z, one causal conv + SiLU over q, k and v,
 * l2-normalised q and k (q also times 1/sqrt(d)), a scalar decay per v head
 * alpha = exp(ssm_a softplus(ssm_alpha h + ssm_dt_bias)) and beta =
 * sigmoid(ssm_beta h), then per v head j (q/k head j mod n_k_heads, llama.cpp's
 * tiled order) the delta rule of spill_k_gdn_step and a SiLU-gated RMSNorm.
 * Heads run in parallel on the pool, each by one thread in a fixed order.
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* y[c] = silu(sum_{i<K} w[c][i] * x_{pos-K+1+i}[c]) with the ring holding the
 * K-1 previous inputs (slot = position mod (K-1)); then stores x. */
static void gdn_conv(const float *x, const float *w, float *ring, int n, int K, int pos, float *y) {
  const int K1 = K - 1;
  for (int c = 0; c < n; c++) {
    float acc = 0.0f;
    for (int i = 0; i < K1; i++) {
      const int t = pos - K1 + i;
      if (t >= 0) acc += w[(size_t)c * K + i] * ring[(size_t)(t % K1) * n + c];
    }
    acc += w[(size_t)c * K + K1] * x[c];
    y[c] = spill_model_silu(acc);
  }
  if (K1 > 0) memcpy(ring + (size_t)(pos % K1) * n, x, (size_t)n * sizeof(float));
}

typedef struct gdn_job {
  const float *q, *k; /* (Hk*d) normalised: qh = l2norm(q) / sqrt(d), kh = l2norm(k) */
  const float *v;     /* (Hv*d) after conv */
  const float *alpha; /* (Hv) decay */
  const float *beta;  /* (Hv) */
  const float *z;     /* (Hv*d) output gate pre-SiLU */
  const float *norm;  /* (d) ssm_norm */
  float *S;           /* (Hv, d, d) */
  float *tmp;         /* (n_threads, d) */
  float *o;           /* (Hv*d) */
  int d, n_k;
  float eps;
} gdn_job;

static void gdn_head(void *ctx, int j, int thread) {
  const gdn_job *g = ctx;
  const int d = g->d, kh = j % g->n_k;
  const size_t off = (size_t)j * d;
  float *o = g->o + off; /* (d) */
  spill_k_gdn_step(g->S + (size_t)j * d * d, (uint32_t)d, g->alpha[j], g->k + (size_t)kh * d,
                   g->q + (size_t)kh * d, g->beta[j], g->v + off, g->tmp + (size_t)thread * d, o);
  /* o = rmsnorm(o, ssm_norm) * silu(z) */
  spill_k_rmsnorm(o, g->norm, o, (uint32_t)d, g->eps);
  for (int b = 0; b < d; b++) o[b] *= spill_model_silu(g->z[off + b]);
}

/* x (n) = x / sqrt(sum(x^2) + eps) * scale: the GDN l2norm (llama.cpp: an
 * rms_norm with eps / n, times 1/sqrt(n), the same value) */
static void l2norm_scaled(float *x, int n, float eps, float scale) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += x[i] * x[i];
  const float r = scale / sqrtf(s + eps);
  for (int i = 0; i < n; i++) x[i] *= r;
}

static int gdn_run(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e) {
  (void)e;
  const spill_gdn_cfg *c = &m->a.gdn;
  const spill_layer_weights *L = &m->L[l];
  const int Hk = c->n_k_heads, Hv = c->n_v_heads, d = c->head_dim, K = c->conv_kernel;
  const int nk = Hk * d, nv = Hv * d, C = 2 * nk + nv;
  spill_model_scratch *s = &m->s;
  float *qkv = s->q;       /* (C) pre-conv projection: q (Hk*d), k (Hk*d), v (Hv*d) */
  float *cv = s->kq;       /* (C) after conv + silu */
  float *z = s->qa;        /* (Hv*d) */
  float *alpha = s->kalpha; /* (Hv) */
  float *beta = s->kbeta;  /* (Hv) */

  /* the projections of h in one dispatch: qkv, z, alpha, beta */
  const spill_qmat *ws[4] = {&L->attn_qkv, &L->attn_gate, &L->ssm_alpha, &L->attn_b};
  float *const ys[4] = {qkv, z, alpha, beta};
  spill_model_matvec_n(m, 4, ws, h, ys);
  gdn_conv(qkv, L->ssm_conv, L->gdn_ring, C, K, pos, cv);
  const float eps = (float)m->a.norm_eps, qs = 1.0f / sqrtf((float)d);
  for (int j = 0; j < Hk; j++) {
    l2norm_scaled(cv + (size_t)j * d, d, eps, qs);
    l2norm_scaled(cv + nk + (size_t)j * d, d, eps, 1.0f);
  }
  for (int j = 0; j < Hv; j++) {
    alpha[j] = expf(softplus(alpha[j] + L->attn_dt_bias[j]) * L->ssm_a[j]);
    beta[j] = spill_model_sigmoid(beta[j]);
  }
  gdn_job g = {cv, cv + nk, cv + 2 * nk, alpha, beta, z, L->attn_o_norm, L->kda_s, s->ku, s->o,
               d, Hk, eps};
  spill_model_run_tasks(m, gdn_head, &g, Hv, (uint64_t)Hv * 4u * (uint64_t)d * (uint64_t)d);
  spill_model_matvec(m, &L->attn_output, s->o, out); /* (D) from (Hv*d) */
  return SPILL_OK;
}

/* ---- the GDN row of the attention table ---- */

static int gdn_check(const spill_arch *a, spill_err *e) {
  const spill_gdn_cfg *c = &a->gdn;
  SPILL_FAIL_IF(e, c->n_k_heads <= 0 || c->n_v_heads <= 0 || c->head_dim <= 0 || c->conv_kernel < 1 ||
                       c->n_v_heads % c->n_k_heads,
                SPILL_E_FORMAT, "arch.gdn: k heads %d, v heads %d, head_dim %d, conv_kernel %d inconsistent",
                c->n_k_heads, c->n_v_heads, c->head_dim, c->conv_kernel);
  return SPILL_OK;
}

static uint64_t gdn_channels(const spill_gdn_cfg *c) {
  return (2 * (uint64_t)c->n_k_heads + (uint64_t)c->n_v_heads) * (uint64_t)c->head_dim;
}

/* S (Hv, d, d), then the ring (K-1, C); independent of ctx */
static void gdn_state_floats(const spill_arch *a, const spill_state_geom *g, uint64_t part[2]) {
  (void)g;
  const spill_gdn_cfg *c = &a->gdn;
  const uint64_t K1 = c->conv_kernel > 1 ? (uint64_t)c->conv_kernel - 1 : 0;
  part[0] = spill_sat_mul((uint64_t)c->n_v_heads, spill_sat_mul((uint64_t)c->head_dim, (uint64_t)c->head_dim));
  part[1] = spill_sat_mul(K1, gdn_channels(c));
}

static void gdn_bind_state(const spill_arch *a, const spill_state_geom *g, spill_layer_weights *L) {
  (void)g;
  L->kda_s = L->state;
  L->gdn_ring = L->state + (size_t)a->gdn.n_v_heads * a->gdn.head_dim * a->gdn.head_dim;
}

static void gdn_scratch(const spill_arch *a, spill_attn_dims *d) {
  const spill_gdn_cfg *c = &a->gdn;
  const uint64_t C = gdn_channels(c), nv = (uint64_t)c->n_v_heads * c->head_dim;
#define RAISE(f, v) d->f = d->f > (uint64_t)(v) ? d->f : (uint64_t)(v)
  RAISE(q, C);
  RAISE(kda, C);
  RAISE(heads, c->n_v_heads);
  RAISE(ohead, nv);
  RAISE(kd, c->head_dim);
#undef RAISE
}

static int gdn_load(spill_model *m, int l, spill_err *e) {
  const spill_arch *a = &m->a;
  spill_layer_weights *L = &m->L[l];
  const uint64_t D = (uint64_t)a->d_model;
  const spill_gdn_cfg *c = &a->gdn;
  const uint64_t Hv = c->n_v_heads, d = c->head_dim, C = gdn_channels(c);
  SPILL_TRY(spill_model_get_mat(m, l, "attn_qkv", C, D, &L->attn_qkv, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_gate", Hv * d, D, &L->attn_gate, e));
  SPILL_TRY(spill_model_get_f32(m, l, "ssm_conv", C, (uint64_t)c->conv_kernel, &L->ssm_conv, e));
  SPILL_TRY(spill_model_get_mat(m, l, "ssm_alpha", Hv, D, &L->ssm_alpha, e));
  SPILL_TRY(spill_model_get_mat(m, l, "ssm_beta", Hv, D, &L->attn_b, e));
  SPILL_TRY(spill_model_get_f32(m, l, "ssm_dt_bias", Hv, 0, &L->attn_dt_bias, e));
  SPILL_TRY(spill_model_get_f32(m, l, "ssm_a", Hv, 0, &L->ssm_a, e));
  SPILL_TRY(spill_model_get_f32(m, l, "ssm_norm", d, 0, &L->attn_o_norm, e));
  SPILL_TRY(spill_model_get_mat(m, l, "attn_output", D, Hv * d, &L->attn_output, e));
  return SPILL_OK;
}

/* All of it (S and the ring, indexed by position modulo K-1), whatever n_past. */
static int gdn_live_state(const spill_arch *a, const spill_state_geom *g, uint64_t n_past,
                          uint64_t off[SPILL_MODEL_STATE_SPANS], uint64_t n[SPILL_MODEL_STATE_SPANS]) {
  (void)n_past;
  uint64_t part[2];
  gdn_state_floats(a, g, part);
  off[0] = 0;
  n[0] = part[0] + part[1];
  off[1] = n[1] = 0;
  return 1;
}

const spill_attn_ops spill_attn_gdn_ops = {
    "gdn", gdn_check, gdn_state_floats, gdn_bind_state, 1, gdn_scratch, gdn_load, gdn_run,
    gdn_live_state,
};
