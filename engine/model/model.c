/* engine/model/model.c: model lifetime and sequence state.
 *
 * spill_model_open: container -> arch checks (generic, then each attention
 * kind's row of the table) -> trunk and tensor views (weights.c; each
 * layer's attention through its kind's loader) -> sequence state for ctx
 * tokens (one allocation, each layer's part bound by its kind) -> forward
 * scratch (one allocation measured and carved by model_memory.c, the
 * formula the RAM planner reports) -> thread pool -> built-in expert
 * source. Nothing here runs per token.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/model/model_internal.h"
#include "engine/model/model_memory.h"

#include <sys/mman.h>

/* ---- state ---- */

static int alloc_state(spill_model *m, spill_err *e) {
  /* the one memory formula (model_memory.h), for these options */
  const spill_model_mem_opts mo = {m->o.ctx, 1, m->o.max_chunk, 0, 0, 0, m->o.swa_full_kv};
  spill_model_mem mem;
  spill_model_memory(&m->a, &mo, &mem);
  const uint64_t bytes = mem.state_total;
  SPILL_FAIL_IF(e, bytes == UINT64_MAX || bytes > SIZE_MAX, SPILL_E_NOMEM,
                "state for ctx %d overflows", m->o.ctx);
  m->state_bytes = (size_t)bytes;
  m->state = spill_alloc_nozero(m->state_bytes ? m->state_bytes : 64, 64);
  SPILL_FAIL_IF(e, !m->state, SPILL_E_NOMEM, "state: cannot allocate %zu bytes for ctx %d",
                m->state_bytes, m->o.ctx);
  float *p = m->state;
  for (int l = 0; l < m->a.n_layers; l++) {
    spill_layer_weights *L = &m->L[l];
    const spill_state_geom g = {l, (uint64_t)m->o.ctx, (uint64_t)m->o.max_chunk, m->o.swa_full_kv};
    uint64_t part[2] = {0, 0};
    L->attn->state_floats(&m->a, &g, part);
    L->state = p;
    L->state_floats = part[0] + part[1];
    L->attn->bind_state(&m->a, &g, L);
    p += L->state_floats;
    if (L->kind == SPILL_ATTN_GQA && spill_gqa_layer_swa(&m->a.gqa, l)) { /* all alike */
      m->swa_w = m->a.gqa.swa_window;
      m->swa_rows = (int)L->kv_rows;
    }
  }
  spill_model_reset(m);
  return SPILL_OK;
}

int spill_model_state_spans(spill_model *m, int l, int n_past, float *ptr[SPILL_MODEL_STATE_SPANS],
                            uint64_t n[SPILL_MODEL_STATE_SPANS]) {
  if (!m || l < 0 || l >= m->a.n_layers || n_past < 0 || n_past > m->o.ctx || !m->state) return 0;
  const spill_layer_weights *L = &m->L[l];
  const spill_state_geom g = {l, (uint64_t)m->o.ctx, (uint64_t)m->o.max_chunk, m->o.swa_full_kv};
  uint64_t off[SPILL_MODEL_STATE_SPANS] = {0};
  for (int i = 0; i < SPILL_MODEL_STATE_SPANS; i++) n[i] = 0;
  const int k = L->attn->live_state(&m->a, &g, (uint64_t)n_past, off, n);
  for (int i = 0; i < k; i++) ptr[i] = L->state + off[i];
  return k;
}

int spill_model_recurrent(const spill_model *m) {
  for (int l = 0; l < m->a.n_layers; l++)
    if (m->L[l].attn->reset_zero) return 1;
  return 0;
}

int spill_model_state_restore(spill_model *m, int n_past, spill_err *e) {
  SPILL_FAIL_IF(e, !m || n_past < 0 || n_past > m->o.ctx, SPILL_E_RANGE,
                "state restore: %d tokens outside ctx %d", n_past, m ? m->o.ctx : 0);
  m->n_past = n_past;
  m->spec_n = 0;
  /* the spans filled hold a sliding-window layer's last W - 1 positions */
  m->swa_lo = m->swa_rows && n_past > m->swa_w - 1 ? n_past - (m->swa_w - 1) : 0;
  return SPILL_OK;
}

int spill_model_rewind_min(const spill_model *m) {
  if (!m) return 0;
  if (spill_model_recurrent(m)) return m->n_past;
  if (!m->swa_rows || m->swa_lo == 0) return 0;
  const int lo = m->swa_lo + m->swa_w - 1; /* keys n+1-W.. of a next token at n held */
  return lo < m->n_past ? lo : m->n_past;
}

int spill_model_rewind(spill_model *m, int n, spill_err *e) {
  SPILL_FAIL_IF(e, !m || n < 0 || n > m->n_past, SPILL_E_RANGE,
                "rewind to %d tokens: the model holds %d", n, m ? m->n_past : 0);
  const int lo = spill_model_rewind_min(m);
  SPILL_FAIL_IF(e, n < lo, SPILL_E_RANGE,
                "rewind to %d tokens of %d: %s; %d is the shortest prefix held", n, m->n_past,
                spill_model_recurrent(m) ? "a recurrent layer's state cannot run backwards"
                                         : "the sliding-window rings no longer hold its window",
                lo);
  m->n_past = n;
  m->spec_n = 0;
  return SPILL_OK;
}

void spill_model_reset(spill_model *m) {
  if (!m) return;
  /* Caches read only below n_past (MLA, GQA) are never cleared (their pages
   * are touched only as the context grows); recurrent state (KDA: S and the
   * conv rings) must start at zero. */
  for (int l = 0; l < m->a.n_layers && m->state; l++)
    if (m->L[l].attn->reset_zero)
      memset(m->L[l].state, 0, (size_t)m->L[l].state_floats * sizeof(float));
  m->n_past = 0;
  m->spec_n = 0;
  m->swa_lo = 0;
}

/* Arch limits the forward pass relies on beyond the manifest's own checks:
 * the generic ones, each present attention kind's (its table row), the
 * MoE group limit. */
static int check_arch(const spill_arch *a, spill_err *e) {
  SPILL_FAIL_IF(e, a->d_model <= 0 || a->vocab_size < 1 || a->n_layers < 1 ||
                       a->n_layers > SPILL_MAX_LAYERS,
                SPILL_E_FORMAT, "arch: bad d_model %d / vocab %d / n_layers %d", a->d_model,
                a->vocab_size, a->n_layers);
  int has[SPILL_ATTN_KINDS] = {0};
  for (int l = 0; l < a->n_layers; l++) {
    SPILL_FAIL_IF(e, !spill_attn_kind_ops(a->layer_attn[l]), SPILL_E_FORMAT,
                  "layer %d: unknown attention kind %d", l, (int)a->layer_attn[l]);
    has[a->layer_attn[l]] = 1;
  }
  for (int k = 0; k < SPILL_ATTN_KINDS; k++)
    if (has[k]) SPILL_TRY(spill_attn_kind_ops(k)->check(a, e));
  if (a->n_layers > a->n_dense_layers && a->moe.n_group > 1) {
    const spill_moe_cfg *c = &a->moe;
    SPILL_FAIL_IF(e, c->n_experts % c->n_group || c->topk_group < 1 || c->topk_group > c->n_group ||
                         c->top_k > c->topk_group * (c->n_experts / c->n_group),
                  SPILL_E_FORMAT, "arch.moe: n_group %d / topk_group %d inconsistent with %d experts, top-%d",
                  c->n_group, c->topk_group, c->n_experts, c->top_k);
  }
  return SPILL_OK;
}

/* Trunk, then per layer: norms, attention (its kind's loader), FFN. */
static int load_weights(spill_model *m, spill_err *e) {
  SPILL_TRY(check_arch(&m->a, e));
  SPILL_TRY(spill_model_load_trunk(m, e));
  for (int l = 0; l < m->a.n_layers; l++) {
    spill_layer_weights *L = &m->L[l];
    L->kind = m->a.layer_attn[l];
    L->attn = spill_attn_kind_ops(L->kind);
    L->is_moe = spill_arch_is_moe(&m->a, l);
    SPILL_TRY(spill_model_load_norms(m, l, e));
    SPILL_TRY(L->attn->load(m, l, e));
    SPILL_TRY(spill_model_load_ffn(m, l, e));
  }
  return SPILL_OK;
}

/* ---- open / close ---- */

static int open_impl(spill_model *m, const char *dir, spill_err *e) {
  SPILL_TRY(spill_container_open(dir, &m->c, e));
  m->container_open = 1;
  m->a = m->c.m.arch;
  m->o.act_q8 = spill_model_act_q8(&m->c.m, m->o.act_q8);
  m->L = calloc((size_t)(m->a.n_layers > 0 ? m->a.n_layers : 1), sizeof *m->L);
  SPILL_FAIL_IF(e, !m->L, SPILL_E_NOMEM, "layer table");
  SPILL_TRY(load_weights(m, e));
  SPILL_TRY(alloc_state(m, e));
  m->rvq_q = spill_model_rvq3_qlut(m->expert_dtype);
  const uint64_t scratch = spill_model_carve_scratch(m, NULL); /* measure */
  SPILL_FAIL_IF(e, scratch == UINT64_MAX || scratch > SIZE_MAX, SPILL_E_NOMEM, "scratch overflows");
  m->scratch_bytes = (size_t)scratch;
  m->scratch_mem = spill_alloc(m->scratch_bytes, 64);
  SPILL_FAIL_IF(e, !m->scratch_mem, SPILL_E_NOMEM, "scratch: cannot allocate %zu bytes",
                m->scratch_bytes);
  spill_model_carve_scratch(m, m->scratch_mem);
  SPILL_TRY(spill_pool_open(m->o.n_threads, &m->pool, e));
  if (spill_arch_n_moe(&m->a) > 0) {
    /* a record per thread being computed and one being read (moe.c) */
    const int n_buf = m->o.n_threads < 2 ? 2 : m->o.n_threads < 8 ? m->o.n_threads + 1 : 9;
    SPILL_TRY(spill_expert_source_sync_open(&m->c, m->o.verify, n_buf, &m->builtin, e));
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
  pthread_mutex_init(&m->sched_mu, NULL);
  pthread_cond_init(&m->sched_cv, NULL);
  m->sched_init = 1;
  if (o) m->o = *o;
  if (m->o.n_threads <= 0) m->o.n_threads = 1;
  if (m->o.ctx <= 0) m->o.ctx = 4096;
  if (m->o.max_chunk <= 0) m->o.max_chunk = 16;
  if (m->o.spec_max < 0 || m->o.spec_max > m->o.max_chunk) {
    spill_err_set(e, SPILL_E_INVALID_ARG, "model: spec_max %d outside [0, max_chunk %d]",
                  m->o.spec_max, m->o.max_chunk);
    free(m);
    return SPILL_E_INVALID_ARG;
  }
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
  if (m->sched_init) {
    pthread_mutex_destroy(&m->sched_mu);
    pthread_cond_destroy(&m->sched_cv);
  }
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
uint64_t spill_model_trunk_bytes(const spill_model *m) { return m->trunk_bytes; }

int spill_model_trunk_residency(const spill_model *m) {
  return m->trunk_locked ? 2 : m->trunk_mapped ? 1 : 0;
}

uint64_t spill_model_parallel_runs(const spill_model *m) { return spill_pool_dispatches(m->pool); }
uint64_t spill_model_moe_regions(const spill_model *m) { return m->sched_regions; }
uint64_t spill_model_parallel_runs_moe(const spill_model *m) { return m->par_moe; }
uint64_t spill_model_moe_sleeps(const spill_model *m) { return m->sched_sleeps; }
uint64_t spill_model_moe_wait_threads_ns(const spill_model *m) { return m->sched_wait_threads_ns; }
