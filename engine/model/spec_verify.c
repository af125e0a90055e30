/* engine/model/spec_verify.c: verifying drafted tokens in one chunk and
 * keeping only the accepted ones (docs/MODEL.md "Drafts").
 *
 * A verify chunk is an ordinary forward chunk (forward.c), so its experts
 * are requested once per layer for all its tokens and every position's
 * numbers are those of a forward of the same tokens one at a time; it only
 * adds the lm head of every position. Rolling back to the first n_keep
 * tokens:
 * - positional caches (GQA keys/values, MLA latents) are written at their
 *   position and read only below n_past, so lowering n_past is exact (a
 *   sliding-window ring of W - 1 + max_chunk rows, spill_gqa_kv_rows, still
 *   holds the window of any kept prefix of a chunk);
 * - AttnRes keeps no state across positions (its bank is per-chunk scratch);
 * - recurrent layers (KDA: S and the conv rings) cannot be run backwards.
 *   Their state is copied before the chunk, and the chunk records each such
 *   layer's attention input per token (forward.c); a rollback restores the
 *   copy and re-runs only those layers' attention on the kept tokens' inputs.
 *   A recurrent layer's update depends on nothing but its input and its own
 *   state, so this reproduces the state bit for bit, reads no expert and
 *   costs n_keep tokens of recurrent attention, not a forward. (The other
 *   choice, a state copy after every chunk token, costs spec_max copies of
 *   the recurrent state: ~4 MiB per KDA layer for K3, times 69 layers.)
 * Depends on forward.c (chunk, lm head) and the attention table.
 */
#include <string.h>

#include "engine/base/clock.h"
#include "engine/model/model_internal.h"

/* Copies every recurrent layer's state into (to_snap = 1) or out of the snapshot. */
static void snap_recurrent(spill_model *m, int to_snap) {
  float *p = m->s.spec_snap;
  for (int l = 0; l < m->a.n_layers; l++) {
    spill_layer_weights *L = &m->L[l];
    if (!L->attn->reset_zero) continue;
    const size_t bytes = (size_t)L->state_floats * sizeof(float);
    if (to_snap) memcpy(p, L->state, bytes);
    else memcpy(L->state, p, bytes);
    p += L->state_floats;
  }
}

int spill_model_forward_verify(spill_model *m, const int *tokens, int n, spill_err *e) {
  SPILL_FAIL_IF(e, !m || !tokens || n < 1 || n > m->o.spec_max, SPILL_E_INVALID_ARG,
                "verify: %d tokens outside [1, spec_max %d]", n, m ? m->o.spec_max : 0);
  const int pos = m->n_past;
  SPILL_FAIL_IF(e, pos > m->o.ctx - n, SPILL_E_RANGE, "verify: positions %d..%d exceed ctx %d",
                pos, pos + n - 1, m->o.ctx);
  for (int i = 0; i < n; i++)
    SPILL_FAIL_IF(e, tokens[i] < 0 || tokens[i] >= m->a.vocab_size, SPILL_E_RANGE,
                  "verify: token %d at index %d out of range (vocab %d)", tokens[i], i,
                  m->a.vocab_size);
  memset(&m->stats, 0, sizeof m->stats);
  const uint64_t t_start = spill_clock_ns(), par0 = spill_pool_dispatches(m->pool);
  const int rec = m->s.spec_snap != NULL;
  if (rec) snap_recurrent(m, 1);
  m->spec_rec = rec;
  m->spec_n = 0;
  const int rc = spill_model_forward_chunk(m, tokens, n, pos, e);
  m->spec_rec = 0;
  if (rc < 0) {
    m->n_past = 0; /* partial state: only a reset is accepted next */
    return rc;
  }
  m->n_past = pos + n;
  m->spec_pos = pos;
  m->spec_n = n;
  const uint64_t t0 = spill_clock_ns();
  const size_t V = (size_t)m->a.vocab_size;
  for (int t = 0; t < n; t++) spill_model_lm_head(m, t, n, m->s.spec_logits + (size_t)t * V);
  m->stats.ns_lm_head += spill_clock_ns() - t0;
  m->stats.n_tokens = n;
  m->stats.n_parallel = spill_pool_dispatches(m->pool) - par0;
  m->stats.ns_total = spill_clock_ns() - t_start;
  const uint64_t named = m->stats.ns_attn + m->stats.ns_router + m->stats.ns_lut +
                         m->stats.ns_expert + m->stats.ns_expert_wait + m->stats.ns_lm_head;
  m->stats.ns_other = m->stats.ns_total > named ? m->stats.ns_total - named : 0;
  return SPILL_OK;
}

const float *spill_model_verify_logits(const spill_model *m) {
  return m ? m->s.spec_logits : NULL;
}

int spill_model_verify_keep(spill_model *m, int n_keep, spill_err *e) {
  SPILL_FAIL_IF(e, !m || m->spec_n < 1 || n_keep < 1 || n_keep > m->spec_n, SPILL_E_INVALID_ARG,
                "verify keep: %d tokens of a verify chunk of %d", n_keep, m ? m->spec_n : 0);
  const int n = m->spec_n, pos = m->spec_pos;
  m->spec_n = 0;
  if (n_keep == n) return SPILL_OK;
  m->n_past = pos + n_keep;
  if (!m->s.spec_snap) return SPILL_OK;
  snap_recurrent(m, 0);
  const int D = m->a.d_model;
  int ri = 0;
  for (int l = 0; l < m->a.n_layers; l++) {
    const spill_layer_weights *L = &m->L[l];
    if (!L->attn->reset_zero) continue;
    for (int t = 0; t < n_keep; t++) {
      const float *h = m->s.spec_h + ((size_t)ri * (size_t)m->o.spec_max + (size_t)t) * D;
      const int rc = L->attn->run(m, l, h, pos + t, m->s.attn_out, e); /* output unused */
      if (rc < 0) {
        m->n_past = 0;
        return rc;
      }
    }
    ri++;
  }
  return SPILL_OK;
}
