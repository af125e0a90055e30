/* engine/model/forward.c: the forward pass, top to bottom (docs/MODEL.md).
 *
 * spill_model_forward splits the tokens into chunks of max_chunk; a chunk
 * runs layer by layer: attention token by token in order (each token sees
 * the cache up to itself; the layer's kind picks its row of the attention
 * table, attention_table.c), then the FFN of the whole chunk (dense per
 * token, MoE through moe.c so each distinct expert is fetched once per layer
 * and chunk). Only the last token's logits are computed. The maths shared
 * with attention and MoE (matvecs on the pool, RoPE, softmax, SwiGLU) is in
 * model_math.c, below all three. With attention residuals (Kimi K3,
 * attn_res_block > 0) each sub-block and the output norm read a softmax mix
 * of the chunk's banked layer inputs and the stream (spill_model_res_mix)
 * instead of the stream itself.
 */
#include <string.h>

#include "engine/base/clock.h"
#include "engine/model/model_internal.h"

/* out (D) = DENSE(l)(h (D)) */
static void dense_ffn(spill_model *m, int l, const float *h, float *out) {
  const spill_layer_weights *L = &m->L[l];
  spill_model_glu(m, &L->ffn_gate, &L->ffn_up, &L->ffn_down, h, out);
}

/* ---- forward ---- */

int spill_model_forward_chunk(spill_model *m, const int *tokens, int T, int pos0, spill_err *e) {
  const spill_arch *a = &m->a;
  const int D = a->d_model;
  const float eps = (float)a->norm_eps;
  spill_model_scratch *s = &m->s;
  float *x = s->x;               /* (T, D) residual stream */
  float *h = s->h;               /* (T, D) normed sub-block input */
  float *attn_out = s->attn_out; /* (D) */
  float *ffn_out = s->ffn_out;   /* (T, D) */

  /* the chunk writes positions pos0..pos0+T-1 into the sliding-window rings,
   * over the rows of positions below pos0+T-rows (spill_model_rewind_min) */
  if (m->swa_rows > 0 && pos0 + T - m->swa_rows > m->swa_lo) m->swa_lo = pos0 + T - m->swa_rows;

  for (int t = 0; t < T; t++) spill_k_dequant_row(&m->tok_embd, (uint32_t)tokens[t], x + (size_t)t * D);
  /* AttnRes (attn_res_block bs > 0): the bank of each token's raw layer
   * inputs at layers 0, bs, 2 bs, ... (entry i of token t at bank + (i T + t) D) */
  const int bs = a->attn_res_block;
  const size_t bstride = (size_t)T * D;
  int nb = 0;
  m->bank_T = T;
  int ri = 0; /* recurrent layers so far (speculation records their inputs) */

  for (int l = 0; l < a->n_layers; l++) {
    /* a long prefill chunk on a big model takes seconds: stop between
     * layers (before this layer issues any expert read) */
    if (m->stop && *m->stop)
      return spill_err_set(e, SPILL_E_INTERRUPTED, "forward: stopped before layer %d", l);
    const spill_layer_weights *L = &m->L[l];
    /* attention, token by token in order */
    const int banked = bs > 0 && l % bs == 0;
    uint64_t t0 = spill_clock_ns();
    for (int t = 0; t < T; t++) {
      float *xt = x + (size_t)t * D;
      if (bs > 0) { /* c = MIX(bank, x); the raw x is banked; h = rmsnorm(c) */
        spill_model_res_mix(m, s->bank + (size_t)t * D, bstride, nb, xt, L->attn_res_score, h);
        if (banked) memcpy(s->bank + (size_t)nb * bstride + (size_t)t * D, xt, (size_t)D * sizeof(float));
        spill_k_rmsnorm(h, L->attn_norm, h, (uint32_t)D, eps);
      } else {
        spill_k_rmsnorm(xt, L->attn_norm, h, (uint32_t)D, eps);
      }
      if (m->spec_rec && L->attn->reset_zero) /* spec_verify.c replays from these */
        memcpy(s->spec_h + ((size_t)ri * (size_t)m->o.spec_max + (size_t)t) * D, h,
               (size_t)D * sizeof(float));
      const int rc = L->attn->run(m, l, h, pos0 + t, attn_out, e); /* (D) */
      if (rc < 0) return rc;
      if (banked) /* a checkpoint layer restarts the stream from its attention output */
        memcpy(xt, attn_out, (size_t)D * sizeof(float));
      else
        for (int i = 0; i < D; i++) xt[i] += attn_out[i];
    }
    nb += banked;
    m->bank_n = nb; /* the bank as this layer's FFN sees it (the lookahead reads it) */
    ri += L->attn->reset_zero;
    m->stats.ns_attn += spill_clock_ns() - t0;

    /* FFN of the whole chunk */
    for (int t = 0; t < T; t++) {
      float *ht = h + (size_t)t * D; /* (D) */
      if (bs > 0) {
        spill_model_res_mix(m, s->bank + (size_t)t * D, bstride, nb, x + (size_t)t * D, L->ffn_res_score, ht);
        spill_k_rmsnorm(ht, L->ffn_norm, ht, (uint32_t)D, eps);
      } else {
        spill_k_rmsnorm(x + (size_t)t * D, L->ffn_norm, ht, (uint32_t)D, eps);
      }
    }
    if (!L->is_moe) {
      t0 = spill_clock_ns();
      for (int t = 0; t < T; t++)
        dense_ffn(m, l, h + (size_t)t * D, ffn_out + (size_t)t * D);
      m->stats.ns_expert += spill_clock_ns() - t0;
    } else {
      const uint64_t p0 = spill_pool_dispatches(m->pool);
      const int rc = spill_model_moe(m, l, x, h, T, pos0, ffn_out, e);
      const uint64_t dp = spill_pool_dispatches(m->pool) - p0;
      m->par_moe += dp;
      m->stats.n_parallel_moe += dp;
      if (rc < 0) return rc;
    }
    for (size_t i = 0; i < (size_t)T * D; i++) x[i] += ffn_out[i];
  }
  m->bank_n = nb;
  return SPILL_OK;
}

void spill_model_lm_head(spill_model *m, int t, int T, float *logits) {
  const int D = m->a.d_model;
  float *xl = m->s.x + (size_t)t * D; /* (D) token t of the last chunk */
  float *h = m->s.h;                  /* (D) */
  if (m->a.attn_res_block > 0) { /* the output mix over token t's bank */
    spill_model_res_mix(m, m->s.bank + (size_t)t * D, (size_t)T * D, m->bank_n, xl,
                        m->output_res_score, h);
    spill_k_rmsnorm(h, m->output_norm, h, (uint32_t)D, (float)m->a.norm_eps);
  } else {
    spill_k_rmsnorm(xl, m->output_norm, h, (uint32_t)D, (float)m->a.norm_eps);
  }
  spill_model_matvec(m, &m->output, h, logits); /* (vocab) */
}

void spill_model_set_stop(spill_model *m, volatile int *stop) {
  if (m) m->stop = stop;
}

int spill_model_forward(spill_model *m, const int *tokens, int n, int pos, float *logits_last,
                        spill_err *e) {
  SPILL_FAIL_IF(e, !m || !tokens || n < 1, SPILL_E_INVALID_ARG, "forward: no tokens");
  SPILL_FAIL_IF(e, pos != 0 && pos != m->n_past, SPILL_E_INVALID_ARG,
                "forward: pos %d but %d tokens run since reset (pos must be 0 or %d)", pos,
                m->n_past, m->n_past);
  SPILL_FAIL_IF(e, pos > m->o.ctx - n, SPILL_E_RANGE,
                "forward: positions %d..%d exceed ctx %d", pos, pos + n - 1, m->o.ctx);
  for (int i = 0; i < n; i++)
    SPILL_FAIL_IF(e, tokens[i] < 0 || tokens[i] >= m->a.vocab_size, SPILL_E_RANGE,
                  "forward: token %d at index %d out of range (vocab %d)", tokens[i], i,
                  m->a.vocab_size);
  if (pos == 0) spill_model_reset(m);
  memset(&m->stats, 0, sizeof m->stats);
  const uint64_t t_start = spill_clock_ns(), par0 = spill_pool_dispatches(m->pool);
  m->spec_n = 0; /* a verify's chunk is no longer the last one */

  int T = 0;
  for (int c = 0; c < n; c += T) {
    T = n - c < m->o.max_chunk ? n - c : m->o.max_chunk;
    int rc = spill_model_forward_chunk(m, tokens + c, T, pos + c, e);
    if (rc < 0) {
      m->n_past = 0; /* state is partial: only pos 0 (a reset) is accepted next */
      return rc;
    }
    m->n_past = pos + c + T;
  }

  if (logits_last) {
    const uint64_t t0 = spill_clock_ns();
    spill_model_lm_head(m, T - 1, T, logits_last); /* (vocab) */
    m->stats.ns_lm_head += spill_clock_ns() - t0;
  }
  m->stats.n_tokens = n;
  m->stats.n_parallel = spill_pool_dispatches(m->pool) - par0;
  m->stats.ns_total = spill_clock_ns() - t_start;
  const uint64_t named = m->stats.ns_attn + m->stats.ns_router + m->stats.ns_lut +
                         m->stats.ns_expert + m->stats.ns_expert_wait + m->stats.ns_lm_head;
  m->stats.ns_other = m->stats.ns_total > named ? m->stats.ns_total - named : 0;
  return SPILL_OK;
}
