/* engine/spill_engine.c: the engine behind spill.h: plans the RAM budget,
 * opens the model with the streaming expert source, runs router lookahead,
 * and writes the per-token profile and the router trace.
 *
 * Lookahead: when MoE layer L has routed (observer on_route), the routers of
 * layers L+1..L+depth are run on L's residual stream and their top-n
 * experts are prefetched. on_route runs after layer L's demand request, so
 * the prefetches queue behind the reads the current layer is waiting for.
 * The source wrapper records each request's ids and hit flags for the trace. The real router still decides, so
 * logits do not depend on lookahead (tested). Predictions are scored by rank
 * when their layer routes.
 *
 * Forced routing (cfg.routing_trace): the trace's ids drive the model's
 * routers (spill_model_set_forced_routing); the observer, lookahead and trace
 * writer see the forced ids like any routing, so a replayed run's router
 * trace reproduces the input trace's ids.
 *
 * Profile rows are one per forward call (one per decoded token; one per
 * prefill chunk); trace rows are one per (token, layer), schema in
 * docs/TRACE.md. Both go to files opened at spill_engine_open. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/cpu_cores.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"
#include "engine/plan/ram_plan.h"
#include "engine/spill.h"
#include "engine/spill_draft.h"
#include "engine/spill_internal.h"
#include "engine/spill_knob_apply.h"
#include "engine/spill_routing_internal.h"
#include "engine/stream/expert_stream.h"

#define MAX_PRED 64

typedef struct layer_rec {
  /* routing of the current forward call: (n_tok, k) */
  int n_tok;
  uint32_t *ids;
  float *w;
  /* the distinct ids requested and their hit flags: n_req valid entries
   * of cap_req allocated */
  int n_req, cap_req;
  uint32_t *req;
  uint8_t *hit;
  /* lookahead predictions made for this layer (by the layer before) and,
   * once scored, kept for the trace row */
  int n_pred, n_tpred;
  uint32_t pred[MAX_PRED], tpred[MAX_PRED];
  /* depth-2 predictions made for this layer (by the layer two before) */
  int n_pred2;
  uint32_t pred2[MAX_PRED];
} layer_rec;

struct spill_engine {
  spill_config cfg;
  char *dir;
  spill_plan plan;
  spill_info info;
  spill_model *m;
  spill_stream *st;
  spill_expert_source inner; /* the stream's source */
  spill_expert_source outer; /* wrapper recording requests for the trace */
  const spill_arch *a;
  int vocab, top_k, cap_tok;
  layer_rec *L;
  uint32_t hint_ids[MAX_PRED]; /* union of a chunk's predictions for one layer */
  int in_prefill;
  /* lookahead scoring by rank */
  uint64_t la2_predicted, la2_correct; /* depth-2 predictions scored */
  uint64_t la_rank_total[MAX_PRED], la_rank_hit[MAX_PRED];
  uint64_t la_predicted, la_correct;
  FILE *profile;
  spill_trace_writer trace; /* router rows (engine/trace) */
  int tok_counter; /* token index for trace rows */
  float *logits;
  char warnings[1024];
  char io_why[320]; /* why cfg.io_backend (spill_io_backend_choose) */
  spill_err last;
  /* forced routing (cfg.routing_trace): the trace the model's table points
   * into, and the engine's own copy of its path */
  spill_trace route_trace;
  char *route_trace_path;
  /* the checkpoint's own tokenizer (tokenizer.json / tiktoken.model in the
   * model directory, engine/tok), or NULL: the byte tokenizer */
  spill_tok *tok;
  /* the last expert preload (cfg.preload all): engine/stream's stats */
  spill_stream_preload_stats pre;
  int pre_fresh; /* the cache is as the last preload left it (no forward call since) */
  /* the conversation (spill_generate_next, spill_session_*): the tokens
   * whose state the model holds, the last logits, the sampler's generator */
  spill_engine_conv conv;
  /* spill_engine_set_draft_source: drafts come from this conversation
   * (owned; NULL: the context's n-grams) */
  int *draft_seq;
  int draft_seq_n;
};

/* ------------------------------------------------------------ wrappers */

/* Test hook (spill_internal.h): the nth reallocation of the engine's
 * per-layer tables from now fails. Tests only; not thread-safe. */
static int g_realloc_fail_in;
void spill_engine_test_fail_realloc(int nth) { g_realloc_fail_in = nth > 0 ? nth : 0; }
static void *tables_realloc(void *p, size_t bytes) {
  if (g_realloc_fail_in > 0 && --g_realloc_fail_in == 0) return NULL;
  return realloc(p, bytes);
}

static int wrap_request(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
  spill_engine *g = ctx;
  layer_rec *r = &g->L[layer];
  /* Grow the bookkeeping before the request, so a failure leaves nothing
   * requested; each table is stored the moment realloc returns it (the old
   * pointer may be gone), so close frees what is live, once. */
  if (n > r->cap_req) {
    uint32_t *q = tables_realloc(r->req, (size_t)n * sizeof *q);
    SPILL_FAIL_IF(e, !q, SPILL_E_NOMEM, "engine: out of memory (layer %d request table)", layer);
    r->req = q;
    uint8_t *h = tables_realloc(r->hit, (size_t)n);
    SPILL_FAIL_IF(e, !h, SPILL_E_NOMEM, "engine: out of memory (layer %d hit table)", layer);
    r->hit = h;
    r->cap_req = n;
  }
  SPILL_TRY(g->inner.request(g->inner.ctx, layer, ids, n, e));
  memcpy(r->req, ids, (size_t)n * sizeof *ids);
  r->n_req = spill_stream_last_hits(g->st, r->hit, n);
  return SPILL_OK;
}
static int wrap_next(void *ctx, int *idx, const uint8_t **rec, spill_err *e) {
  spill_engine *g = ctx;
  return g->inner.next_ready(g->inner.ctx, idx, rec, e);
}
static int wrap_poll(void *ctx, int wait, int *idx, const uint8_t **rec, spill_err *e) {
  spill_engine *g = ctx;
  return g->inner.poll_ready(g->inner.ctx, wait, idx, rec, e);
}
static void wrap_release(void *ctx, int layer, uint32_t id) {
  spill_engine *g = ctx;
  g->inner.release(g->inner.ctx, layer, id);
}
static int wrap_prefetch(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
  spill_engine *g = ctx;
  return g->inner.prefetch(g->inner.ctx, layer, ids, n, e);
}

static int on_route(void *ctx, int layer, int pos0, int n_tok, const float *x,
                    const uint32_t *ids, const float *weights, int k) {
  (void)pos0;
  spill_engine *g = ctx;
  layer_rec *r = &g->L[layer];
  if (n_tok > g->cap_tok) n_tok = g->cap_tok; /* trace keeps the first cap_tok tokens */
  r->n_tok = n_tok;
  memcpy(r->ids, ids, (size_t)n_tok * (size_t)k * sizeof *ids);
  memcpy(r->w, weights, (size_t)n_tok * (size_t)k * sizeof *weights);
  /* score the predictions made for this layer (decode: one token) */
  if (r->n_pred > 0 && n_tok >= 1) {
    const uint32_t *sel = ids + (size_t)(n_tok - 1) * (size_t)k;
    for (int p = 0; p < r->n_pred; p++) {
      int hit = 0;
      for (int j = 0; j < k; j++) hit |= (sel[j] == r->pred[p]);
      g->la_rank_total[p]++;
      g->la_rank_hit[p] += (uint64_t)hit;
      g->la_predicted++;
      g->la_correct += (uint64_t)hit;
    }
  }
  if (r->n_pred2 > 0 && n_tok >= 1) {
    const uint32_t *sel = ids + (size_t)(n_tok - 1) * (size_t)k;
    for (int p = 0; p < r->n_pred2; p++) {
      int hit = 0;
      for (int j = 0; j < k; j++) hit |= (sel[j] == r->pred2[p]);
      g->la2_predicted++;
      g->la2_correct += (uint64_t)hit;
    }
  }
  r->n_pred2 = 0;
  r->n_tpred = r->n_pred;
  memcpy(r->tpred, r->pred, (size_t)r->n_pred * sizeof *r->pred);
  r->n_pred = 0;
  int width = g->cfg.lookahead;
  if (width <= 0 || (g->in_prefill && !g->cfg.lookahead_prefill)) return SPILL_OK;
  if (width > MAX_PRED) width = MAX_PRED;
  if (width > g->a->moe.n_experts) width = g->a->moe.n_experts;
  spill_err e = {0};
  for (int d = 1; d <= g->cfg.lookahead_depth && d <= 2; d++) {
    int nl = layer + d;
    if (nl >= g->a->n_layers || !spill_arch_is_moe(g->a, nl)) break;
    /* every token of the chunk predicts; hints are their union */
    int nh = 0;
    uint32_t tmp[MAX_PRED];
    for (int t = 0; t < n_tok; t++) {
      int rc = spill_model_router_topk(g->m, nl, x + (size_t)t * (size_t)g->a->d_model, t,
                                       width, tmp, NULL, &e);
      if (rc < 0) return rc;
      for (int i = 0; i < width && nh < MAX_PRED; i++) {
        int dup = 0;
        for (int j = 0; j < nh; j++) dup |= (g->hint_ids[j] == tmp[i]);
        if (!dup) g->hint_ids[nh++] = tmp[i];
      }
    }
    if (n_tok == 1 && d == 1) { /* depth-1 predictions are scored when nl routes */
      memcpy(g->L[nl].pred, tmp, (size_t)width * sizeof *tmp);
      g->L[nl].n_pred = width;
    } else if (n_tok == 1 && d == 2) { /* and depth-2 ones, separately */
      memcpy(g->L[nl].pred2, tmp, (size_t)width * sizeof *tmp);
      g->L[nl].n_pred2 = width;
    }
    /* on_route runs after layer's demand request: these reads queue behind it */
    int rc = g->inner.prefetch(g->inner.ctx, nl, g->hint_ids, nh, &e);
    if (rc < 0) return rc;
  }
  return SPILL_OK;
}

/* ------------------------------------------------------------ open/close */

/* cfg.routing_trace: read and check the trace, hand its ids to the model. */
static int open_routing_trace(spill_engine *g, spill_err *e) {
  if (!g->cfg.routing_trace) return SPILL_OK;
  g->route_trace_path = strdup(g->cfg.routing_trace);
  g->cfg.routing_trace = g->route_trace_path; /* the caller's string is not kept */
  SPILL_FAIL_IF(e, !g->route_trace_path, SPILL_E_NOMEM, "engine: out of memory");
  SPILL_TRY(spill_routing_trace_load(g->route_trace_path, g->a, &g->route_trace, e));
  return spill_model_set_forced_routing(g->m, g->route_trace.ids, (int)g->route_trace.n_tokens,
                                        e);
}

/* A run of n positions from 0 must stay within the routing trace. */
static int check_routing_positions(spill_engine *g, const char *what, int n, spill_err *e) {
  if (!g->route_trace_path || n <= (int)g->route_trace.n_tokens) return SPILL_OK;
  return spill_err_set(e, SPILL_E_RANGE,
                       "%s: %d positions, but routing trace %s drives %u (one per traced token; "
                       "no wrap-around)",
                       what, n, g->route_trace_path, g->route_trace.n_tokens);
}

static void warn(spill_engine *g, const char *msg) {
  size_t n = strlen(g->warnings);
  snprintf(g->warnings + n, sizeof g->warnings - n, "%s\n", msg);
}

static int open_outputs(spill_engine *g, spill_err *e) {
  if (g->cfg.profile_path) {
    int fd;
    SPILL_TRY(spill_file_open_write(g->cfg.profile_path, O_WRONLY | O_CREAT | O_TRUNC, 0644, &fd, e));
    g->profile = fdopen(fd, "w");
    if (!g->profile) close(fd);
    SPILL_FAIL_IF(e, !g->profile, SPILL_E_IO, "profile %s: %s", g->cfg.profile_path,
                  strerror(errno));
  }
  if (g->cfg.trace_path)
    SPILL_TRY(spill_trace_writer_open(&g->trace, g->cfg.trace_path, g->cfg.trace_max_bytes, e));
  g->cfg.profile_path = g->cfg.trace_path = NULL; /* not owned past open */
  return SPILL_OK;
}

/* A model directory holding tokenizer.json or tiktoken.model (an imported
 * checkpoint) speaks through that tokenizer; synthetic models keep the byte
 * tokenizer (docs/MODEL.md). Its ids must fit the model's vocabulary. The
 * one loader (spill_import.c) is also what import and verify check with. */
static int open_tokenizer(spill_engine *g, const char *model_dir, spill_err *e) {
  return spill_model_tokenizer(model_dir, g->vocab, &g->tok, e);
}

/* The byte audit, then everything spill_engine_open checks beyond the
 * container: the model's tensors resolved and shape-checked against the
 * architecture (spill_model_open, ctx 1, one thread) and the tokenizer it
 * carries (spill_model_tokenizer), so verify never calls clean what run
 * refuses. */
int spill_verify(const char *model_dir, spill_progress_cb progress, void *user, spill_err *e) {
  SPILL_TRY(spill_container_verify(model_dir, progress, user, e));
  spill_info info;
  SPILL_TRY(spill_info_read(model_dir, &info, e));
  spill_model_opts mo = {0};
  mo.n_threads = 1;
  mo.ctx = 1;
  mo.max_chunk = 1;
  spill_model *m = NULL;
  SPILL_TRY(spill_model_open(model_dir, &mo, &m, e));
  spill_model_close(m);
  spill_tok *t = NULL; /* the tokenizer, loaded as spill_engine_open loads it */
  SPILL_TRY(spill_model_tokenizer(model_dir, info.vocab_size, &t, e));
  spill_tok_free(t);
  return SPILL_OK;
}

/* preload all needs a cache of every expert record (spill.h spill_preload).
 * With the default budget rule, p becomes the plan of budget model_max (if
 * that fits the cap, or force_budget is set); an explicit budget or
 * cache_slots that holds fewer records, and storage mmap, are refused with
 * the budget or slots that would do. budget: the one asked for (0 = the rule). */
static int plan_preload(const spill_engine *g, spill_plan *p, uint64_t budget, int64_t slots,
                        spill_err *e) {
  if (g->cfg.preload != SPILL_PRELOAD_ALL) return SPILL_OK;
  SPILL_FAIL_IF(e, g->cfg.storage == SPILL_STORAGE_MMAP, SPILL_E_CONFIG,
                "preload all: storage mmap has no expert cache to fill (use direct or pagecache)");
  const unsigned long long n = (unsigned long long)p->model_records;
  if (slots >= 0) {
    SPILL_FAIL_IF(e, (uint64_t)slots < p->model_records, SPILL_E_CONFIG,
                  "preload all: cache_slots %lld holds fewer than the model's %llu expert "
                  "records (set cache_slots to %llu or auto)",
                  (long long)slots, n, n);
    return SPILL_OK;
  }
  if (!budget) {
    int rc = spill_plan_budget(p, p->usable_ram, p->model_max, g->cfg.force_budget, e);
    if (rc < 0) spill_err_prefix(e, "preload all: %llu expert records need a budget of %llu bytes", n,
                                 (unsigned long long)p->model_max);
    return rc;
  }
  SPILL_FAIL_IF(e, p->cache_slots < p->model_records, SPILL_E_RAM_BUDGET,
                "preload all: budget %llu bytes gives %llu cache slots, fewer than the model's "
                "%llu expert records (needs a budget of %llu bytes, or the default)",
                (unsigned long long)p->budget, (unsigned long long)p->cache_slots, n,
                (unsigned long long)p->model_max);
  return SPILL_OK;
}

/* Reads every expert record into the cache (cfg.preload all) and keeps the
 * stats for spill_run_stats; with preload none, zeroes them. The demand,
 * prefetch and hit counters are not touched by a preload. */
static int run_preload(spill_engine *g, spill_err *e) {
  memset(&g->pre, 0, sizeof g->pre);
  g->pre_fresh = 0;
  if (g->cfg.preload != SPILL_PRELOAD_ALL) return SPILL_OK;
  SPILL_TRY(spill_stream_preload(g->st, 0, &g->pre, e));
  g->pre_fresh = 1;
  SPILL_FAIL_IF(e, g->pre.no_slot > 0, SPILL_E_INTERNAL,
                "preload all: %llu expert records found no cache slot (%u slots)",
                (unsigned long long)g->pre.no_slot, spill_stream_cache_slots(g->st));
  return SPILL_OK;
}

/* The streaming expert source over the model's banks, with the expert read
 * backend io_backend asks for (auto: io_uring where the kernel gives a ring,
 * else the pread pool; spill_io_backend_choose) and why in g->io_why. */
static int open_stream(spill_engine *g, spill_err *e) {
  spill_stream_opts so = {0};
  so.storage = (int)g->cfg.storage;
  const spill_io_backend_kind asked = g->cfg.io_backend;
  g->cfg.io_backend = spill_io_backend_choose(asked, g->cfg.storage, g->cfg.io_depth, g->io_why,
                                              sizeof g->io_why);
  so.backend = (int)g->cfg.io_backend;
  so.io_threads = g->cfg.io_threads;
  so.io_depth = g->cfg.io_depth;
  so.throttle = g->cfg.io_throttle;
  int64_t slots = g->cfg.cache_slots >= 0 ? g->cfg.cache_slots : (int64_t)g->plan.cache_slots;
  if (slots > 0x7fffffff) slots = 0x7fffffff;
  so.cache_slots = g->cfg.storage == SPILL_STORAGE_MMAP ? 0 : (uint32_t)slots;
  so.policy = g->cfg.policy;
  so.seed = g->cfg.seed;
  so.verify = g->cfg.verify;
  so.overlap = g->cfg.overlap;
  int rc = spill_stream_open(spill_model_container(g->m), &so, &g->st, e);
  if (rc == SPILL_E_UNSUPPORTED && asked == SPILL_IO_AUTO && so.backend == SPILL_IO_URING) {
    /* the probe's ring opened, the stream's did not (e.g. the memlock limit) */
    snprintf(g->io_why, sizeof g->io_why, "auto: io_uring refused at open: %s", e ? e->msg : "");
    g->cfg.io_backend = SPILL_IO_PREAD;
    so.backend = SPILL_IO_PREAD;
    if (e) spill_err_clear(e);
    rc = spill_stream_open(spill_model_container(g->m), &so, &g->st, e);
  }
  return rc;
}

int spill_engine_open(const char *model_dir, const spill_config *cfg, spill_engine **out,
                      spill_err *e) {
  spill_engine *g = calloc(1, sizeof *g);
  SPILL_FAIL_IF(e, !g, SPILL_E_NOMEM, "engine: out of memory");
  int rc;
  if (cfg) g->cfg = *cfg;
  else spill_config_default(&g->cfg);
  if (g->cfg.threads <= 0) g->cfg.threads = spill_cpu_physical_cores(); /* threads auto */
  g->dir = strdup(model_dir);
  if (!g->dir) {
    free(g);
    return spill_err_set(e, SPILL_E_NOMEM, "engine: out of memory");
  }
  if ((rc = spill_info_read(model_dir, &g->info, e)) < 0) goto fail;
  if (g->cfg.draft < 0 || g->cfg.draft > SPILL_DRAFT_MAX ||
      (g->cfg.draft > 0 && g->cfg.prefill_chunk < g->cfg.draft + 1)) {
    rc = spill_err_set(e, SPILL_E_CONFIG,
                       "draft %d: needs 0..%d and prefill_chunk >= draft + 1 (a verify chunk "
                       "holds the token and its drafts; prefill_chunk is %d)",
                       g->cfg.draft, SPILL_DRAFT_MAX, g->cfg.prefill_chunk);
    goto fail;
  }
  /* the plan counts the state and scratch the model will allocate with
   * these knobs (model_memory.h) */
  const int spec_max = g->cfg.draft > 0 ? g->cfg.draft + 1 : 0;
  const spill_model_mem_opts mem = {g->cfg.ctx, g->cfg.threads, g->cfg.prefill_chunk,
                                    g->cfg.act_quant == SPILL_ACT_Q8, 0, spec_max, g->cfg.swa_kv};
  rc = spill_plan_model_run(model_dir, &mem, g->cfg.budget_bytes, g->cfg.usable_ram, &g->plan, e);
  /* above the machine's cap: refused unless forced (the plan is filled) */
  if (rc == SPILL_E_RAM_BUDGET && g->cfg.force_budget && g->plan.budget >= g->plan.floor)
    rc = spill_plan_budget(&g->plan, g->plan.usable_ram, g->cfg.budget_bytes, 1, e);
  if (rc == SPILL_OK) rc = plan_preload(g, &g->plan, g->cfg.budget_bytes, g->cfg.cache_slots, e);
  if (rc < 0) goto fail;
  if (g->plan.budget_above_model) {
    char w[200];
    snprintf(w, sizeof w,
             "budget: %llu bytes is more than the model can use (%llu: every expert record "
             "cached); the cache holds all %llu records",
             (unsigned long long)g->plan.budget, (unsigned long long)g->plan.model_max,
             (unsigned long long)g->plan.model_records);
    warn(g, w);
  }
  if (g->plan.budget_forced)
    warn(g, "budget: above 7/8 of usable RAM, accepted because force_budget is set");
  if (g->plan.below_recommended_warning)
    warn(g, "budget: the default rule fell back to the RAM floor (less than floor + 1 ws fits)");
  spill_model_opts mo = {0};
  mo.n_threads = g->cfg.threads;
  mo.ctx = g->cfg.ctx;
  mo.max_chunk = g->cfg.prefill_chunk;
  mo.verify = g->cfg.verify;
  mo.trunk_mode = (int)g->cfg.trunk;
  mo.act_q8 = g->cfg.act_quant == SPILL_ACT_Q8;
  mo.spec_max = spec_max;
  /* swa_kv: the plan's (auto is decided there, by the budget) */
  g->cfg.swa_kv = g->plan.swa_kv;
  mo.swa_full_kv = g->plan.swa_kv == SPILL_SWA_KV_FULL;
  if ((rc = spill_model_open(model_dir, &mo, &g->m, e)) < 0) goto fail;
  g->a = spill_model_arch(g->m);
  if ((rc = open_routing_trace(g, e)) < 0) goto fail;
  g->vocab = g->a->vocab_size;
  if ((rc = open_tokenizer(g, model_dir, e)) < 0) goto fail;
  g->top_k = spill_arch_n_moe(g->a) ? g->a->moe.top_k : 0;
  g->cap_tok = g->cfg.prefill_chunk > 0 ? g->cfg.prefill_chunk : 16;
  g->L = calloc((size_t)g->a->n_layers, sizeof *g->L);
  g->logits = malloc((size_t)g->vocab * sizeof(float));
  g->conv.tokens = malloc((size_t)g->cfg.ctx * sizeof(int));
  g->conv.logits = g->logits;
  g->conv.logits_pos = -1;
  if (!g->L || !g->logits || !g->conv.tokens) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "engine: out of memory");
    goto fail;
  }
  for (int l = 0; l < g->a->n_layers; l++) {
    size_t n = (size_t)g->cap_tok * (size_t)(g->top_k ? g->top_k : 1);
    g->L[l].ids = calloc(n, sizeof(uint32_t));
    g->L[l].w = calloc(n, sizeof(float));
    if (!g->L[l].ids || !g->L[l].w) {
      rc = spill_err_set(e, SPILL_E_NOMEM, "engine: out of memory");
      goto fail;
    }
  }
  if ((rc = open_stream(g, e)) < 0) goto fail;
  if (spill_stream_direct_fallback(g->st))
    warn(g, "storage: the filesystem refused O_DIRECT; expert reads are buffered");
  spill_stream_source(g->st, &g->inner);
  g->outer = (spill_expert_source){g, wrap_request, wrap_next, wrap_release, wrap_prefetch,
                                   g->inner.poll_ready ? wrap_poll : NULL};
  spill_model_set_expert_source(g->m, &g->outer);
  spill_model_observer obs = {g, on_route};
  spill_model_set_observer(g->m, &obs);
  if ((rc = open_outputs(g, e)) < 0) goto fail;
  if ((rc = run_preload(g, e)) < 0) goto fail;
  *out = g;
  return SPILL_OK;
fail:
  spill_engine_close(g);
  return rc;
}

void spill_engine_close(spill_engine *g) {
  if (!g) return;
  if (g->m) spill_model_set_expert_source(g->m, NULL);
  spill_stream_close(g->st);
  /* g->a points into the model: free the per-layer tables before closing it. */
  if (g->L)
    for (int l = 0; g->a && l < g->a->n_layers; l++) {
      free(g->L[l].ids);
      free(g->L[l].w);
      free(g->L[l].req);
      free(g->L[l].hit);
    }
  free(g->L);
  spill_model_close(g->m);
  spill_trace_free(&g->route_trace); /* after the model: it borrowed the ids */
  free(g->route_trace_path);
  free(g->logits);
  free(g->conv.tokens);
  free(g->draft_seq);
  if (g->profile) fclose(g->profile);
  spill_trace_writer_close(&g->trace);
  free(g->dir);
  spill_tok_free(g->tok);
  free(g);
}

const spill_plan *spill_engine_plan(const spill_engine *g) { return &g->plan; }
const spill_info *spill_engine_info(const spill_engine *g) { return &g->info; }
const spill_config *spill_engine_config(const spill_engine *g) { return &g->cfg; }
const char *spill_engine_warnings(const spill_engine *g) { return g->warnings; }
const char *spill_engine_io_backend_why(const spill_engine *g) { return g->io_why; }
int spill_vocab_size(const spill_engine *g) { return g->vocab; }

int spill_tokenize(spill_engine *g, const char *text, int add_bos, int *tokens, int max,
                   int *n_out, spill_err *e) {
  if (!g->tok) return spill_tokenizer_encode(g->a, text, strlen(text), add_bos, tokens, max, n_out, e);
  spill_tok_ids ids = {0};
  int rc = spill_tok_encode(g->tok, text, strlen(text),
                            SPILL_TOK_SPECIAL | (add_bos ? SPILL_TOK_ADD_BOS : 0), &ids, e);
  if (rc == SPILL_OK && ids.n > (size_t)(max > 0 ? max : 0))
    rc = spill_err_set(e, SPILL_E_RANGE, "tokenize: %zu tokens do not fit in %d", ids.n, max);
  if (rc == SPILL_OK) {
    for (size_t i = 0; i < ids.n; i++) tokens[i] = ids.ids[i];
    *n_out = (int)ids.n;
  }
  spill_tok_ids_free(&ids);
  return rc;
}

const spill_tok *spill_engine_tokenizer(const spill_engine *g) { return g->tok; }

int spill_token_to_text(spill_engine *g, int token, char *buf, size_t n) {
  if (g->tok) {
    int32_t id = token;
    char *s = NULL;
    size_t len = 0;
    if (spill_tok_decode(g->tok, &id, 1, 0, &s, &len, NULL) != SPILL_OK) len = 0;
    if (n && len >= n) len = n - 1;
    if (n) {
      if (s) memcpy(buf, s, len);
      buf[len] = 0;
    }
    free(s);
    return (int)len;
  }
  char tmp[16];
  int len = spill_tokenizer_decode_token(g->a, token, tmp);
  if (len < 0) len = 0;
  if ((size_t)len >= n) len = n ? (int)n - 1 : 0;
  memcpy(buf, tmp, (size_t)len);
  if (n) buf[len] = 0;
  return len;
}

/* ------------------------------------------------------------ running */

typedef struct snap {
  uint64_t t_ns;
  spill_stream_counters k;
  uint64_t majflt;
  uint64_t nvcsw, nivcsw; /* the process's context switches (all threads) */
  uint64_t io_direct, io_buffered, io_mmap; /* reader bytes by path */
  uint64_t par, par_moe;                    /* pool dispatches: all, inside MoE layers */
  uint64_t wait_threads_ns;                 /* compute threads' waits in MoE regions */
} snap;

/* Major faults and context switches of the process (RUSAGE_SELF: every
 * thread of it, the pool's, the reader's and the checker's included). */
static void rusage_now(snap *s) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  s->majflt = (uint64_t)ru.ru_majflt;
  s->nvcsw = (uint64_t)ru.ru_nvcsw;
  s->nivcsw = (uint64_t)ru.ru_nivcsw;
}

static uint64_t status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  size_t kl = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl)) {
      v = strtoull(line + kl, NULL, 10);
      break;
    }
  fclose(f);
  return v * 1024;
}

static void take(spill_engine *g, snap *s) {
  s->t_ns = spill_clock_ns();
  spill_stream_get_counters(g->st, &s->k);
  rusage_now(s);
  spill_io_stats io;
  spill_stream_io_stats(g->st, &io);
  s->io_direct = io.bytes_direct;
  s->io_buffered = io.bytes_buffered;
  s->io_mmap = io.bytes_mmap;
  s->par = spill_model_parallel_runs(g->m);
  s->par_moe = spill_model_parallel_runs_moe(g->m);
  s->wait_threads_ns = spill_model_moe_wait_threads_ns(g->m);
}

/* Adds the difference b - a into st. */
static void accumulate(spill_run_stats *st, const snap *a, const snap *b) {
  st->experts_requested += b->k.requested - a->k.requested;
  st->demand_hits += b->k.demand_hits - a->k.demand_hits;
  st->demand_misses += b->k.demand_misses - a->k.demand_misses;
  st->spec_issued += b->k.spec_issued - a->k.spec_issued;
  st->spec_used += b->k.spec_used - a->k.spec_used;
  st->spec_wasted += b->k.spec_wasted - a->k.spec_wasted;
  st->reads += b->k.reads - a->k.reads;
  st->bytes_read_demand += b->k.bytes_read_demand - a->k.bytes_read_demand;
  st->bytes_read_spec += b->k.bytes_read_spec - a->k.bytes_read_spec;
  st->bytes_read = st->bytes_read_demand + st->bytes_read_spec;
  st->evictions += b->k.evictions - a->k.evictions;
  st->major_faults += b->majflt - a->majflt;
  st->ctx_switches_voluntary += b->nvcsw - a->nvcsw;
  st->ctx_switches_involuntary += b->nivcsw - a->nivcsw;
  st->io_wait_s += (double)(b->k.wait_ns - a->k.wait_ns) / 1e9;
  st->expert_wait_threads_s += (double)(b->wait_threads_ns - a->wait_threads_ns) / 1e9;
  st->bytes_read_direct += b->io_direct - a->io_direct;
  st->bytes_read_buffered += b->io_buffered - a->io_buffered;
  st->bytes_read_mapped += b->io_mmap - a->io_mmap;
  st->compute_parallel_sections += b->par - a->par;
  st->compute_parallel_sections_moe += b->par_moe - a->par_moe;
  if (b->k.max_waiting > st->max_reads_in_flight) st->max_reads_in_flight = b->k.max_waiting;
}

/* One profile row (schema and writer: engine/trace, spill_profile_row). */
static void write_profile(spill_engine *g, int pos, int n_tok, int prefill, const snap *a,
                          const snap *b, int drafted, int accepted, int generated) {
  if (!g->profile) return;
  const spill_model_stats *ms = spill_model_last_stats(g->m);
  uint64_t p50 = 0, p99 = 0;
  spill_stream_read_latency(g->st, &p50, &p99);
  spill_profile_row row = {
      .pos = pos,
      .phase = prefill ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE,
      .n_tokens = n_tok,
      .wall_ms = (double)(b->t_ns - a->t_ns) / 1e6,
      .attention_ms = ms->ns_attn / 1e6,
      .router_ms = ms->ns_router / 1e6,
      .expert_matmul_ms = ms->ns_expert / 1e6,
      .table_build_ms = ms->ns_lut / 1e6,
      .lm_head_ms = ms->ns_lm_head / 1e6,
      .other_ms = ms->ns_other / 1e6,
      .io_wait_ms = (double)(b->k.wait_ns - a->k.wait_ns) / 1e6,
      .expert_wait_threads_ms = (double)(b->wait_threads_ns - a->wait_threads_ns) / 1e6,
      .reads = b->k.reads - a->k.reads,
      .bytes_read = b->k.bytes_read_demand + b->k.bytes_read_spec - a->k.bytes_read_demand -
                    a->k.bytes_read_spec,
      .demand_hits = b->k.demand_hits - a->k.demand_hits,
      .demand_misses = b->k.demand_misses - a->k.demand_misses,
      .spec_issued = b->k.spec_issued - a->k.spec_issued,
      .spec_used = b->k.spec_used - a->k.spec_used,
      .spec_wasted = b->k.spec_wasted - a->k.spec_wasted,
      .read_p50_ms = p50 / 1e6,
      .read_p99_ms = p99 / 1e6,
      .major_faults = b->majflt - a->majflt,
      .rss_bytes = status_kb("VmRSS:"),
      .drafted = (uint64_t)drafted,
      .accepted = (uint64_t)accepted,
      .generated = (uint64_t)generated,
      .ctx_switches_voluntary = b->nvcsw - a->nvcsw,
      .ctx_switches_involuntary = b->nivcsw - a->nivcsw,
      .parallel_regions = b->par - a->par,
      .parallel_regions_moe = b->par_moe - a->par_moe,
  };
  snprintf(row.io_backend, sizeof row.io_backend, "%s",
           spill_io_backend_kind_name(g->cfg.io_backend));
  snprintf(row.io_backend_why, sizeof row.io_backend_why, "%s", g->io_why);
  spill_profile_write_row(g->profile, &row);
}

/* Router rows of the last forward call: one per (token, MoE layer), tokens
 * in order (schema and writer: engine/trace, spill_trace_row); the tokens
 * from n_kept on (a verify chunk's rolled-back drafts) are marked rejected. */
static void write_trace(spill_engine *g, int pos, int prefill, int n_kept) {
  if (!g->trace.f || g->trace.capped) return;
  const int k = g->top_k;
  uint8_t hit[SPILL_MAX_TOPK];
  for (int t = 0;; t++) {
    int any = 0;
    for (int l = 0; l < g->a->n_layers; l++) {
      layer_rec *r = &g->L[l];
      if (!spill_arch_is_moe(g->a, l) || t >= r->n_tok) continue;
      any = 1;
      const uint32_t *ids = r->ids + (size_t)t * (size_t)k;
      for (int j = 0; j < k; j++) {
        hit[j] = 0;
        for (int q = 0; q < r->n_req; q++)
          if (r->req[q] == ids[j]) hit[j] = r->hit[q];
      }
      const spill_trace_row row = {
          .tok = g->tok_counter + t,
          .pos = pos + t,
          .phase = prefill ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE,
          .layer = l,
          .k = k,
          .ids = ids,
          .weights = r->w + (size_t)t * (size_t)k,
          .n_pred = r->n_tok == 1 ? r->n_tpred : 0,
          .pred = r->tpred,
          .hit = hit,
          .rejected = t >= n_kept,
      };
      if (!spill_trace_writer_row(&g->trace, &row)) return; /* capped */
    }
    if (!any) break;
  }
  spill_trace_writer_flush(&g->trace);
}

/* One forward call with bookkeeping. */
static int step(spill_engine *g, const int *toks, int n, int pos, int prefill, float *logits,
                spill_run_stats *st, spill_err *e) {
  snap a, b;
  for (int l = 0; l < g->a->n_layers; l++) g->L[l].n_tok = g->L[l].n_tpred = 0;
  spill_stream_latency_reset(g->st);
  take(g, &a);
  g->in_prefill = prefill;
  int rc = spill_model_forward(g->m, toks, n, pos, logits, e);
  g->in_prefill = 0;
  take(g, &b);
  g->conv.logits_pos = -1;
  if (rc < 0) return rc;
  /* the conversation: tokens [0, n_past) are the model's state */
  memcpy(g->conv.tokens + pos, toks, (size_t)n * sizeof(int));
  if (logits == g->logits) g->conv.logits_pos = pos + n;
  if (st) accumulate(st, &a, &b);
  write_profile(g, pos, n, prefill, &a, &b, 0, 0, prefill ? 0 : n);
  write_trace(g, pos, prefill, n);
  g->tok_counter += n;
  return SPILL_OK;
}

static void finish_stats(spill_engine *g, spill_run_stats *st) {
  /* the run window: every read since spill_generate began (the per-call
   * window that step() resets is only the profile row's) */
  uint64_t p50 = 0, p99 = 0;
  spill_stream_run_latency(g->st, &p50, &p99);
  st->read_p50_ms = p50 / 1e6;
  st->read_p99_ms = p99 / 1e6;
  st->peak_rss_bytes = status_kb("VmHWM:");
  st->preload_s = (double)g->pre.ns / 1e9;
  st->preload_records = g->pre.records;
  st->preload_bytes = g->pre.bytes;
  st->trunk_mode = spill_model_trunk_residency(g->m);
  st->lookahead_depth2_predicted = g->la2_predicted;
  st->lookahead_depth2_correct = g->la2_correct;
  st->lookahead_predicted = g->la_predicted;
  st->lookahead_correct = g->la_correct;
  for (int r = 0; r < SPILL_LA_RANKS; r++) {
    st->lookahead_rank_made[r] = g->la_rank_total[r];
    st->lookahead_rank_correct[r] = g->la_rank_hit[r];
  }
  st->decode_tok_per_s = st->decode_s > 0 ? st->tokens_decode / st->decode_s : 0;
}

int spill_eval(spill_engine *g, const int *tokens, int n, int chunked, float *logits_last,
               float *logits_all, spill_err *e) {
  SPILL_FAIL_IF(e, n < 1, SPILL_E_INVALID_ARG, "eval: no tokens");
  SPILL_TRY(check_routing_positions(g, "eval", n, e));
  g->pre_fresh = 0;
  g->conv.rng_valid = 0;
  spill_model_reset(g->m);
  g->tok_counter = 0;
  if (logits_all || !chunked) {
    for (int i = 0; i < n; i++) {
      float *out = logits_all ? logits_all + (size_t)i * (size_t)g->vocab : g->logits;
      SPILL_TRY(step(g, tokens + i, 1, i, 1, out, NULL, e));
    }
    if (logits_last)
      memcpy(logits_last, logits_all ? logits_all + (size_t)(n - 1) * (size_t)g->vocab : g->logits,
             (size_t)g->vocab * sizeof(float));
    return SPILL_OK;
  }
  return step(g, tokens, n, 0, 1, logits_last ? logits_last : g->logits, NULL, e);
}

/* Zeroes the per-run state: the latency window, token counter and
 * lookahead scores (and the model's position unless keep_seq). */
static void reset_run(spill_engine *g, int keep_seq) {
  if (!keep_seq) spill_model_reset(g->m);
  spill_stream_run_latency_reset(g->st);
  g->tok_counter = 0;
  g->la_predicted = g->la_correct = 0;
  g->la2_predicted = g->la2_correct = 0;
  for (int l = 0; l < g->a->n_layers; l++) g->L[l].n_pred = g->L[l].n_pred2 = 0;
  memset(g->la_rank_total, 0, sizeof g->la_rank_total);
  memset(g->la_rank_hit, 0, sizeof g->la_rank_hit);
}

/* The prompt: one forward call (and one profile row) per prefill chunk; the
 * stop flag is checked between chunks and, inside a forward, between
 * layers. Fills st's prefill time and tokens. */
static int run_prefill(spill_engine *g, const int *prompt, int start, int n_prompt,
                       volatile int *stop_flag, spill_run_stats *st, spill_err *e) {
  int rc = SPILL_OK;
  uint64_t t0 = spill_clock_ns();
  int chunk = g->cfg.prefill_chunk > 0 ? g->cfg.prefill_chunk : 1;
  int prefilled = start;
  for (int i = start; i < n_prompt && rc == SPILL_OK; i += chunk) {
    if (stop_flag && *stop_flag) {
      rc = spill_err_set(e, SPILL_E_INTERRUPTED, "generate: stopped after %d of %d prompt tokens",
                         i, n_prompt);
      break;
    }
    int n = n_prompt - i < chunk ? n_prompt - i : chunk;
    rc = step(g, prompt + i, n, i, 1, g->logits, st, e);
    if (rc == SPILL_OK) prefilled = i + n;
    else if (rc == SPILL_E_INTERRUPTED)
      spill_err_set(e, SPILL_E_INTERRUPTED, "generate: stopped after %d of %d prompt tokens",
                    prefilled, n_prompt);
  }
  st->prefill_s = (double)(spill_clock_ns() - t0) / 1e9;
  st->tokens_prefill = prefilled - start;
  return rc;
}

/* Folds one decode token's counters (tok_stats, already filled from its
 * snapshots) into the run, including the paging detector:
 * SPILL_PAGING_TOKENS decode tokens in a row at or above the fault
 * threshold; token i is the run's i-th decode token. */
static void fold_token(spill_run_stats *st, spill_run_stats *tok_stats, int *paging_streak,
                       int i) {
  tok_stats->decode_hits = tok_stats->demand_hits;
  tok_stats->decode_misses = tok_stats->demand_misses;
  if (tok_stats->major_faults >= SPILL_PAGING_FAULTS_PER_TOKEN) {
    st->paging_tokens++;
    if (++*paging_streak >= SPILL_PAGING_TOKENS && !st->paging) {
      st->paging = 1;
      st->paging_token = i;
    }
  } else {
    *paging_streak = 0;
  }
  tok_stats->paging = st->paging;
  tok_stats->paging_token = st->paging_token;
  tok_stats->paging_tokens = st->paging_tokens;
  st->decode_hits += tok_stats->demand_hits;
  st->decode_misses += tok_stats->demand_misses;
}

/* How many of the n logits are NaN or Inf (0 for all finite); *first is
 * the lowest such id. A sampler handed them would pick by comparisons that
 * are all false (argmax keeps id 0; softmax gives NaN probabilities). */
static int logits_nonfinite(const float *x, int n, int *first) {
  float acc = 0.0f;
  for (int i = 0; i < n; i++) acc += x[i] * 0.0f;
  if (acc == 0.0f) return 0;
  int bad = 0;
  *first = -1;
  for (int i = 0; i < n; i++)
    if (!isfinite(x[i])) {
      if (!bad++) *first = i;
    }
  return bad;
}

/* Decodes up to n_new tokens after the prompt (sampling from g->logits,
 * which holds the last prompt position's), calling cb per token with its
 * text; stops at EOS, the stop flag or a non-zero cb. rc is the prefill's
 * status: no token is decoded unless it is SPILL_OK (decode_s is still
 * timed). */
static int run_decode(spill_engine *g, spill_sampler *smp, int pos, int n_new, spill_token_cb cb,
                      void *user, volatile int *stop_flag, spill_run_stats *st, int rc,
                      spill_err *e) {
  int paging_streak = 0;
  /* streaming detokenisation of a real tokenizer */
  spill_tok_stream tstream = {0};
  size_t tcap = g->tok ? spill_tok_max_piece(g->tok) + 72 : 0;
  char *tbuf = g->tok ? malloc(tcap) : NULL;
  if (g->tok && !tbuf) rc = spill_err_set(e, SPILL_E_NOMEM, "generate: out of memory");
  uint64_t t1 = spill_clock_ns();
  for (int i = 0; i < n_new && rc == SPILL_OK; i++) {
    if (stop_flag && *stop_flag) {
      rc = spill_err_set(e, SPILL_E_INTERRUPTED, "generate: stopped after %d tokens", i);
      break;
    }
    int first, bad = logits_nonfinite(g->logits, g->vocab, &first);
    if (bad) {
      st->nonfinite_pos = pos - 1;
      rc = spill_err_set(e, SPILL_E_NONFINITE,
                         "generate: the logits at position %d are not finite (%d of %d are NaN or "
                         "Inf, the first at id %d): the model's weights or activations overflowed; "
                         "refusing to sample from them",
                         pos - 1, bad, g->vocab, first);
      break;
    }
    int tok = spill_sampler_sample(smp, g->logits);
    spill_run_stats tok_stats;
    memset(&tok_stats, 0, sizeof tok_stats);
    snap a, b;
    take(g, &a);
    uint64_t ts = spill_clock_ns();
    if (tok != g->a->eos_id || g->a->eos_id < 0) {
      rc = step(g, &tok, 1, pos, 0, g->logits, &tok_stats, e);
      if (rc < 0) break;
      st->decode_forwards++;
    }
    take(g, &b);
    tok_stats.tokens_decode = 1;
    tok_stats.decode_s = (double)(spill_clock_ns() - ts) / 1e9;
    /* fold this token into the run */
    st->tokens_decode++;
    accumulate(st, &a, &b);
    fold_token(st, &tok_stats, &paging_streak, i);
    pos++;
    char small[16];
    const char *text = small;
    if (g->tok) { /* only whole UTF-8 characters; special tokens print nothing */
      int k = spill_tok_stream_push(g->tok, &tstream, tok, 1, tbuf, tcap, NULL);
      tbuf[k > 0 ? k : 0] = 0;
      text = tbuf;
    } else {
      spill_token_to_text(g, tok, small, sizeof small);
    }
    if (cb && cb(user, tok, text, &tok_stats)) break;
    if (tok == g->a->eos_id && g->a->eos_id >= 0) break;
  }
  st->decode_s = (double)(spill_clock_ns() - t1) / 1e9;
  free(tbuf);
  return rc;
}

int spill_engine_set_draft_source(spill_engine *g, const int *seq, int n, spill_err *e) {
  if (!g) return spill_err_set(e, SPILL_E_INVALID_ARG, "set_draft_source: no engine");
  if (!seq || n <= 0) {
    free(g->draft_seq);
    g->draft_seq = NULL;
    g->draft_seq_n = 0;
    return SPILL_OK;
  }
  if (n > g->cfg.ctx)
    return spill_err_set(e, SPILL_E_RANGE,
                         "set_draft_source: %d tokens, more than the engine's ctx (%d)", n,
                         g->cfg.ctx);
  for (int i = 0; i < n; i++)
    if (seq[i] < 0 || seq[i] >= g->vocab)
      return spill_err_set(e, SPILL_E_RANGE,
                           "set_draft_source: token %d at index %d is outside the vocabulary "
                           "(0..%d)",
                           seq[i], i, g->vocab - 1);
  int *copy = malloc((size_t)n * sizeof *copy);
  if (!copy) return spill_err_set(e, SPILL_E_NOMEM, "set_draft_source: out of memory");
  memcpy(copy, seq, (size_t)n * sizeof *copy);
  free(g->draft_seq);
  g->draft_seq = copy;
  g->draft_seq_n = n;
  return SPILL_OK;
}

/* The text the token callback gets for tok (whole UTF-8 characters of a
 * real tokenizer; the byte tokenizer's bytes). */
static const char *token_text(spill_engine *g, spill_tok_stream *ts, int tok, char *tbuf,
                              size_t tcap, char *small, size_t n_small) {
  if (g->tok) {
    int k = spill_tok_stream_push(g->tok, ts, tok, 1, tbuf, tcap, NULL);
    tbuf[k > 0 ? k : 0] = 0;
    return tbuf;
  }
  spill_token_to_text(g, tok, small, n_small);
  return small;
}

/* Drafts up to `want` tokens after toks[0] at position pos into toks[1..]:
 * the context's n-grams (or spill_engine_set_draft_source's sequence);
 * returns how many. */
static int draft_tokens(spill_engine *g, int *toks, int pos, int want) {
  const int eos = g->a->eos_id;
  g->conv.tokens[pos] = toks[0]; /* the context the draft continues */
  if (!g->draft_seq) return spill_draft_lookup(g->conv.tokens, pos + 1, want, eos, toks + 1);
  int k = 0;
  while (k < want && pos + 1 + k < g->draft_seq_n && g->draft_seq[pos + 1 + k] != eos) {
    toks[1 + k] = g->draft_seq[pos + 1 + k];
    k++;
  }
  return k;
}

/* Runs [toks[0], k drafts] as one verify chunk at pos and counts into *acc
 * the drafts accepted: d_i is while the greedy choice before it is d_i (a
 * non-finite row is never accepted from: the next step refuses it), and at
 * most cfg.draft_accept_max of them (-1: no cap; the rest are rejected as
 * if the model disagreed). */
static int verify_drafts(spill_engine *g, spill_sampler *smp, const int *toks, int k, int pos,
                         int *acc, spill_err *e) {
  for (int l = 0; l < g->a->n_layers; l++) g->L[l].n_tok = g->L[l].n_tpred = 0;
  spill_stream_latency_reset(g->st);
  int rc = spill_model_forward_verify(g->m, toks, k + 1, e);
  g->conv.logits_pos = -1;
  if (rc < 0) return rc;
  memcpy(g->conv.tokens + pos, toks, (size_t)(k + 1) * sizeof(int));
  const float *vl = spill_model_verify_logits(g->m);
  int first;
  *acc = 0;
  while (*acc < k && *acc != g->cfg.draft_accept_max) {
    const float *row = vl + (size_t)*acc * (size_t)g->vocab;
    if (logits_nonfinite(row, g->vocab, &first)) break;
    if (spill_sampler_sample(smp, row) != toks[*acc + 1]) break;
    (*acc)++;
  }
  return SPILL_OK;
}

/* Greedy decode with drafts (cfg.draft, docs/MODEL.md "Drafts"). Each step
 * takes the greedy token t0 from the held logits and drafts up to k tokens
 * from the context's n-grams (spill_draft_lookup); with a draft, [t0,
 * d1..dk] run as one verify chunk (each distinct expert read once per layer
 * for all of them) and d_i is accepted while the greedy choice at the
 * position before it is d_i. The step generates t0 and the accepted drafts;
 * the model keeps exactly those (spill_model_verify_keep rolls the rest
 * back) and the logits after the last one, whose greedy choice is the next
 * step's t0. Every token is the greedy choice from logits bit-identical to
 * a run without drafts, so the output is the same token for token. The
 * step's counters go to its first token's callback stats; the profile row
 * of a verify chunk has drafted, accepted and generated. */
static int run_decode_draft(spill_engine *g, spill_sampler *smp, int pos, int n_new,
                            spill_token_cb cb, void *user, volatile int *stop_flag,
                            spill_run_stats *st, int rc, spill_err *e) {
  int paging_streak = 0;
  spill_tok_stream tstream = {0};
  size_t tcap = g->tok ? spill_tok_max_piece(g->tok) + 72 : 0;
  char *tbuf = g->tok ? malloc(tcap) : NULL;
  if (g->tok && !tbuf) rc = spill_err_set(e, SPILL_E_NOMEM, "generate: out of memory");
  const int V = g->vocab, eos = g->a->eos_id;
  const uint64_t rec = g->plan.record_bytes;
  spill_draft_rule rule;
  spill_draft_rule_init(&rule, g->cfg.draft, g->cfg.draft_adaptive,
                        (uint64_t)g->top_k * (uint64_t)spill_arch_n_moe(g->a) * rec);
  int toks[SPILL_DRAFT_MAX + 1];
  uint64_t t1 = spill_clock_ns();
  int i = 0; /* tokens generated */
  while (i < n_new && rc == SPILL_OK) {
    if (stop_flag && *stop_flag) {
      rc = spill_err_set(e, SPILL_E_INTERRUPTED, "generate: stopped after %d tokens", i);
      break;
    }
    int first, bad = logits_nonfinite(g->logits, V, &first);
    if (bad) {
      st->nonfinite_pos = pos - 1;
      rc = spill_err_set(e, SPILL_E_NONFINITE,
                         "generate: the logits at position %d are not finite (%d of %d are NaN or "
                         "Inf, the first at id %d): the model's weights or activations overflowed; "
                         "refusing to sample from them",
                         pos - 1, bad, V, first);
      break;
    }
    toks[0] = spill_sampler_sample(smp, g->logits);
    const int is_eos = eos >= 0 && toks[0] == eos;
    int k = 0;
    if (!is_eos) {
      int want = spill_draft_rule_len(&rule);
      if (want > n_new - i - 1) want = n_new - i - 1;
      if (want > 0) k = draft_tokens(g, toks, pos, want);
    }
    spill_run_stats step_stats;
    memset(&step_stats, 0, sizeof step_stats);
    snap a, b;
    take(g, &a);
    const uint64_t ts = spill_clock_ns();
    int acc = 0;
    const float *vl = NULL;
    if (!is_eos && k == 0) {
      rc = step(g, toks, 1, pos, 0, g->logits, NULL, e);
    } else if (k > 0) {
      rc = verify_drafts(g, smp, toks, k, pos, &acc, e);
      vl = spill_model_verify_logits(g->m);
    }
    if (rc < 0) break;
    take(g, &b);
    accumulate(&step_stats, &a, &b);
    accumulate(st, &a, &b);
    step_stats.decode_s = (double)(spill_clock_ns() - ts) / 1e9;
    if (!is_eos) st->decode_forwards++;
    /* generate t0 and the accepted drafts, each with its callback */
    int kept = 0, stop = 0;
    for (int j = 0; j <= acc; j++) {
      spill_run_stats tok_stats;
      if (j == 0) tok_stats = step_stats;
      else memset(&tok_stats, 0, sizeof tok_stats);
      tok_stats.tokens_decode = 1;
      st->tokens_decode++;
      fold_token(st, &tok_stats, &paging_streak, i);
      i++;
      kept++;
      char small[16];
      const char *text = token_text(g, &tstream, toks[j], tbuf, tcap, small, sizeof small);
      /* the held logits are those after this token, as without drafts */
      if (k > 0) memcpy(g->logits, vl + (size_t)j * (size_t)V, (size_t)V * sizeof(float));
      if (cb && cb(user, toks[j], text, &tok_stats)) stop = 1;
      if (stop || is_eos) break;
    }
    if (k > 0) { /* keep what was generated; the rest of the chunk is rolled back */
      rc = spill_model_verify_keep(g->m, kept, e);
      if (rc < 0) break;
      g->conv.logits_pos = pos + kept; /* g->logits: the last kept token's */
      write_profile(g, pos, k + 1, 0, &a, &b, k, acc, kept);
      /* trace rows of the whole chunk; those past the kept tokens are rejected
       * (their routing ran and their experts were read) */
      write_trace(g, pos, 0, kept);
      g->tok_counter += k + 1;
      st->draft_tokens += (uint64_t)k;
      st->draft_accepted += (uint64_t)acc;
      spill_draft_rule_verify(&rule, k, acc, acc + 1, step_stats.experts_requested * rec);
    } else {
      spill_draft_rule_plain(&rule, 1);
    }
    pos += kept;
    if (stop || is_eos) break;
  }
  st->draft_switched_off = rule.switched_off;
  st->decode_s = (double)(spill_clock_ns() - t1) / 1e9;
  free(tbuf);
  return rc;
}

/* How many leading prompt tokens the model's state can keep
 * (SPILL_GEN_REUSE): the common prefix of the conversation and the prompt,
 * at most n_prompt - 1 so the last prompt token is run for its logits,
 * unless the prompt is the whole conversation and its last logits are
 * still held (then n_prompt: nothing to run). Positional caches (GQA, MLA)
 * are cut back to any shorter prefix; a recurrent state (KDA) cannot be, so
 * a model with one keeps the prefix only when it is the whole conversation;
 * a sliding-window ring (W - 1 + prefill_chunk positions) only to a prefix
 * whose last W - 1 positions it still holds. Otherwise nothing is kept. */
static int reusable_prefix(const spill_engine *g, const int *prompt, int n_prompt) {
  const int n_cur = spill_model_n_past(g->m);
  int k = 0;
  while (k < n_cur && k < n_prompt && g->conv.tokens[k] == prompt[k]) k++;
  if (k == n_cur && k == n_prompt && g->conv.logits_pos == n_cur) return k;
  if (k >= n_prompt) k = n_prompt - 1;
  /* a recurrent layer cannot be cut back, a sliding-window ring only as far
   * as it still holds the window (spill_model_rewind_min): else prefill all */
  if (k < spill_model_rewind_min(g->m)) return 0;
  return k;
}

int spill_generate(spill_engine *g, const int *prompt, int n_prompt, int n_new,
                   const spill_sampling *s, spill_token_cb cb, void *user,
                   volatile int *stop_flag, spill_run_stats *stats, spill_err *e) {
  return spill_generate_next(g, prompt, n_prompt, n_new, s, 0, cb, user, stop_flag, stats, e);
}

int spill_generate_next(spill_engine *g, const int *prompt, int n_prompt, int n_new,
                        const spill_sampling *s, int flags, spill_token_cb cb, void *user,
                        volatile int *stop_flag, spill_run_stats *stats, spill_err *e) {
  spill_run_stats local;
  spill_run_stats *st = stats ? stats : &local;
  memset(st, 0, sizeof *st);
  st->nonfinite_pos = -1;
  SPILL_FAIL_IF(e, n_prompt < 1, SPILL_E_INVALID_ARG, "generate: empty prompt");
  g->pre_fresh = 0;
  SPILL_FAIL_IF(e, n_prompt + n_new > g->cfg.ctx, SPILL_E_RANGE,
                "generate: %d prompt + %d new tokens exceed ctx %d", n_prompt, n_new, g->cfg.ctx);
  if (g->route_trace_path) {
    char what[80];
    snprintf(what, sizeof what, "generate: %d prompt + %d new tokens", n_prompt, n_new);
    SPILL_TRY(check_routing_positions(g, what, n_prompt + n_new, e));
  }
  spill_sampler_opts so = {0};
  if (s) {
    so.temperature = s->temperature;
    so.top_k = s->top_k;
    so.top_p = s->top_p;
    so.seed = s->seed;
  }
  for (int i = 0; i < n_prompt; i++)
    SPILL_FAIL_IF(e, prompt[i] < 0 || prompt[i] >= g->vocab, SPILL_E_RANGE,
                  "generate: token %d at index %d out of range (vocab %d)", prompt[i], i, g->vocab);
  spill_sampler smp;
  SPILL_TRY(spill_sampler_init(&smp, &so, g->vocab, e));
  const int n_cur = spill_model_n_past(g->m);
  const int keep = flags & SPILL_GEN_REUSE ? reusable_prefix(g, prompt, n_prompt) : 0;
  /* the sampler goes on with the conversation's generator when the whole
   * conversation is kept and the seed is the one it was drawn with */
  if (flags & SPILL_GEN_CONTINUE_RNG && keep > 0 && keep == n_cur && g->conv.rng_valid &&
      g->conv.seed == so.seed)
    smp.rng = g->conv.rng;
  reset_run(g, keep > 0);
  int rc = keep > 0 ? spill_model_rewind(g->m, keep, e) : SPILL_OK;
  st->tokens_cached = keep;
  st->paging_token = -1;
  spill_model_set_stop(g->m, stop_flag);
  if (rc == SPILL_OK) rc = run_prefill(g, prompt, keep, n_prompt, stop_flag, st, e);
  const uint64_t bytes_prefill = st->bytes_read;
  /* drafts only under greedy decoding (docs/MODEL.md "Drafts": sampling draws without) */
  if (g->cfg.draft > 0 && so.temperature <= 0)
    rc = run_decode_draft(g, &smp, n_prompt, n_new, cb, user, stop_flag, st, rc, e);
  else
    rc = run_decode(g, &smp, n_prompt, n_new, cb, user, stop_flag, st, rc, e);
  g->conv.seed = so.seed;
  g->conv.rng = smp.rng;
  g->conv.rng_valid = 1;
  /* prefetches still in flight belong to this run: wait for them so the
   * counters are exact (reads == misses + prefetches issued) */
  snap qa, qb;
  take(g, &qa);
  int qrc = spill_stream_quiesce(g->st, rc == SPILL_OK ? e : NULL);
  if (rc == SPILL_OK) rc = qrc;
  take(g, &qb);
  accumulate(st, &qa, &qb);
  st->bytes_read_decode = st->bytes_read - bytes_prefill; /* decode and its prefetches */
  finish_stats(g, st);
  spill_sampler_free(&smp);
  spill_model_set_stop(g->m, NULL);
  return rc;
}

/* ------------------------------------------------------------ experiment support */

/* With preload all, a cleared cache is filled again: the state after open.
 * A cache no forward call has used since its preload is already in that
 * state: only the counters are reset (a reopen followed by a clear, as the
 * experiment runner does, reads the model once, not twice). */
int spill_engine_clear_cache(spill_engine *g, int reset_counters, spill_err *e) {
  if (g->pre_fresh) {
    if (reset_counters) spill_stream_reset_counters(g->st);
    return SPILL_OK;
  }
  SPILL_TRY(spill_stream_clear(g->st, reset_counters, e));
  return run_preload(g, e);
}

int spill_engine_set_budget(spill_engine *g, uint64_t budget_bytes, spill_err *e) {
  spill_plan p = g->plan;
  SPILL_TRY(spill_plan_budget(&p, g->cfg.usable_ram ? g->cfg.usable_ram : spill_plan_usable_ram(),
                              budget_bytes, g->cfg.force_budget, e));
  SPILL_TRY(plan_preload(g, &p, budget_bytes, -1, e));
  if (g->cfg.storage != SPILL_STORAGE_MMAP) {
    uint64_t slots = p.cache_slots > 0x7fffffffull ? 0x7fffffffull : p.cache_slots;
    SPILL_TRY(spill_stream_resize(g->st, (uint32_t)slots, e));
  }
  g->plan = p;
  g->cfg.budget_bytes = budget_bytes;
  return run_preload(g, e);
}

int spill_engine_evict_page_cache(spill_engine *g, spill_err *e) {
  return spill_stream_evict_page_cache(g->st, e);
}

int spill_engine_set_knob(spill_engine *g, const char *key, const char *value, spill_err *e) {
  spill_config c = g->cfg;
  SPILL_TRY(spill_config_set(&c, key, value, e));
  /* the knob table says which knobs are live and what a change does
   * (its apply column, engine/spill_knob_apply.h) */
  if (!spill_knob_find(key)->live)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "knob '%s' cannot change on an open engine (reopen it)", key);
  switch (spill_knob_apply_of(key)) {
    case SPILL_KNOB_APPLY_FIELD:
      g->cfg = c;
      return SPILL_OK;
    case SPILL_KNOB_APPLY_VERIFY:
      g->cfg = c;
      spill_stream_set_verify(g->st, c.verify);
      return SPILL_OK;
    case SPILL_KNOB_APPLY_BUDGET:
      return spill_engine_set_budget(g, c.budget_bytes, e);
    case SPILL_KNOB_APPLY_CACHE_SLOTS:
      /* explicit slots (or "auto": the plan's) without reopening; drops every
       * cached expert, like a budget change */
      if (g->cfg.storage != SPILL_STORAGE_MMAP) {
        const uint64_t want = c.cache_slots >= 0 ? (uint64_t)c.cache_slots : g->plan.cache_slots;
        SPILL_FAIL_IF(e, want > 0x7fffffffull, SPILL_E_CONFIG, "cache_slots %llu: too many",
                      (unsigned long long)want);
        spill_plan p = g->plan;
        SPILL_TRY(plan_preload(g, &p, g->cfg.budget_bytes, (int64_t)want, e));
        if (spill_stream_cache_slots(g->st) == (uint32_t)want)
          SPILL_TRY(spill_stream_clear(g->st, 0, e)); /* same size: no reallocation */
        else
          SPILL_TRY(spill_stream_resize(g->st, (uint32_t)want, e));
      }
      g->cfg.cache_slots = c.cache_slots;
      return g->cfg.storage != SPILL_STORAGE_MMAP ? run_preload(g, e) : SPILL_OK;
    case SPILL_KNOB_APPLY_TRACE:
      spill_trace_writer_close(&g->trace);
      return *value ? spill_trace_writer_open(&g->trace, value, g->cfg.trace_max_bytes, e)
                    : SPILL_OK;
    case SPILL_KNOB_APPLY_PROFILE:
      if (g->profile) fclose(g->profile);
      g->profile = NULL;
      if (!*value) return SPILL_OK;
      g->profile = fopen(value, "w");
      SPILL_FAIL_IF(e, !g->profile, SPILL_E_IO, "%s %s: %s", key, value, strerror(errno));
      return SPILL_OK;
    case SPILL_KNOB_APPLY_NONE:
      break;
  }
  /* a row marked live without an apply kind: our bug */
  return spill_err_set(e, SPILL_E_INTERNAL, "knob '%s' is marked live but has no handler", key);
}

/* ------------------------------------------------------------ conversation */

int spill_engine_tokens(const spill_engine *g, const int **tokens) {
  if (tokens) *tokens = g->conv.tokens;
  return spill_model_n_past(g->m);
}

spill_engine_conv *spill_engine_conv_of(spill_engine *g) { return &g->conv; }
spill_model *spill_engine_model_of(spill_engine *g) { return g->m; }
const char *spill_engine_dir_of(const spill_engine *g) { return g->dir; }
