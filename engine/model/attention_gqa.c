/* engine/model/attention_gqa.c: grouped-query attention (OLMoE/Qwen style),
 * docs/MODEL.md "ATTN GQA". Per token: q, k, v projections, optional q/k
 * RMSNorm (per head or over the whole projection, arch.gqa.qk_norm), RoPE
 * (rotate-half) on every q and k head, append k and v to the layer's cache
 * (ctx, Hk*d) each, then per query head softmax(q . k_t / sqrt(d)) over
 * t = 0..pos and the weighted sum of v. Heads run in parallel on the pool;
 * each head's result is computed by one thread in a fixed order.
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

typedef struct gqa_job {
  const float *q;       /* (H*d) */
  const float *kc, *vc; /* (ctx, Hk*d) */
  float *att;           /* (n_threads, ctx): one row per thread */
  float *o;             /* (H*d) */
  int d, group, kvw, n_t, ctx;
  float scale;
} gqa_job;

static void gqa_head(void *ctx, int j, int thread) {
  const gqa_job *g = ctx;
  const int d = g->d, kh = j / g->group;
  const float *qj = g->q + (size_t)j * d;
  float *att = g->att + (size_t)thread * g->ctx; /* (n_t) this thread's row */
  for (int t = 0; t < g->n_t; t++)
    att[t] = spill_k_dot(qj, g->kc + (size_t)t * g->kvw + (size_t)kh * d, (uint32_t)d) * g->scale;
  spill_model_softmax(att, g->n_t);
  float *oj = g->o + (size_t)j * d; /* (d) */
  memset(oj, 0, (size_t)d * sizeof(float));
  for (int t = 0; t < g->n_t; t++) {
    const float *vt = g->vc + (size_t)t * g->kvw + (size_t)kh * d;
    const float at = att[t];
    for (int i = 0; i < d; i++) oj[i] += at * vt[i];
  }
}

int spill_model_attn_gqa(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e) {
  (void)e;
  const spill_gqa_cfg *c = &m->a.gqa;
  const spill_layer_weights *L = &m->L[l];
  const int H = c->n_heads, Hk = c->n_kv_heads, d = c->head_dim, kvw = Hk * d;
  float *q = m->s.q;                           /* (H*d) */
  float *kc = L->cache + (size_t)pos * kvw;    /* (Hk*d) this position's key slot */
  float *vc = L->cache_v + (size_t)pos * kvw;  /* (Hk*d) */
  float *cs = m->s.rope_cs;                    /* (d/2 cos, d/2 sin) */
  float *o = m->s.o;                           /* (H*d) */

  spill_model_matvec(m, &L->attn_q, h, q);
  spill_model_matvec2(m, &L->attn_k, h, NULL, kc, &L->attn_v, h, NULL, vc);
  const float eps = (float)m->a.norm_eps;
  if (c->qk_norm == SPILL_QK_NORM_HEAD) { /* Qwen3: each head over its d dims */
    for (int j = 0; j < H; j++) spill_k_rmsnorm(q + (size_t)j * d, L->attn_q_norm, q + (size_t)j * d, (uint32_t)d, eps);
    for (int j = 0; j < Hk; j++) spill_k_rmsnorm(kc + (size_t)j * d, L->attn_k_norm, kc + (size_t)j * d, (uint32_t)d, eps);
  } else if (c->qk_norm == SPILL_QK_NORM_FULL) { /* OLMoE: over the whole projection */
    spill_k_rmsnorm(q, L->attn_q_norm, q, (uint32_t)(H * d), eps);
    spill_k_rmsnorm(kc, L->attn_k_norm, kc, (uint32_t)kvw, eps);
  }
  spill_model_rope_table(cs, d, pos, c->rope_theta);
  for (int j = 0; j < H; j++) spill_model_rope_apply(q + (size_t)j * d, d, cs);
  for (int j = 0; j < Hk; j++) spill_model_rope_apply(kc + (size_t)j * d, d, cs);

  gqa_job g = {q, L->cache, L->cache_v, m->s.att, o, d, H / Hk, kvw, pos + 1, m->o.ctx,
               1.0f / sqrtf((float)d)};
  spill_model_run_tasks(m, gqa_head, &g, H, (uint64_t)H * (uint64_t)(pos + 1) * 2u * (uint64_t)d);
  spill_model_matvec(m, &L->attn_output, o, out); /* (D) */
  return SPILL_OK;
}
