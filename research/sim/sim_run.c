/* research/sim/sim_run.c: the simulated decode loop, per budget.
 *
 * Cache part (exact): each forward call walks the MoE layers; a layer's
 * distinct experts (first-use order over the call's tokens) are acquired
 * through spill_cache_acquire, pinned, and released once consumed; in
 * decode, lookahead then claims the next layer's predictions with
 * SPILL_CACHE_SPECULATIVE (skipping residents, as engine/stream does), pinned
 * until the stream would reap their completion (it reaps only when the
 * compute thread waits on a demand read). A demand access that finds every
 * slot pinned is retried once the layer's other experts are consumed (then
 * a slot or a bounce buffer), as the stream defers it. This is the engine's
 * call sequence, so on the engine's own trace the counters match the
 * engine's, up to when a pin is dropped in real time.
 *
 * Timing part (a model): a reader of N threads in front of one device (a
 * read holds a thread for latency + bytes / bandwidth, and the device
 * transfers one read at a time: bandwidth is shared, latency overlaps);
 * reads are issued in call order, so prefetches queue behind the demand
 * reads of their layer. Compute per layer: (1 - overlap) x t_layer before the
 * request, overlap x t_layer while reads fly, then t_expert per use in
 * arrival order, stalling on reads not yet in. With io_bucket_burst_s >= 0
 * the device is the engine's bandwidth cap instead (io_throttle, a GCRA
 * token bucket): a read reserves bytes / bandwidth on a shared timeline when
 * a reader thread takes it and completes at max(start + latency, reservation
 * end - burst), so compute gaps shorter than the burst refill the bucket.
 *
 * Memory part (a model): physical RAM minus what the OS and others hold is
 * an LRU over trunk pieces (touched when their layer runs) and cache slots
 * (touched on hit and when a read fills them). Past capacity the least
 * recently touched unit is evicted: anonymous memory only with swap; the
 * trunk always when file-backed. Touching an evicted unit pages it in at
 * the stated cost: on the compute thread (trunk, hits) or on the reader
 * thread (a read into an evicted slot faults it in first). First touches of
 * slots are zero-fill and free. Without swap, anonymous memory that does not
 * fit is an OOM (reported, not simulated).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/cache/cache_policy.h"
#include "engine/cache/expert_cache.h"
#include "research/sim/sim.h"

/* ------------------------------------------------------- recorded preds */

typedef struct preds {
  uint32_t w;    /* entries per (token, layer) */
  uint32_t *ids; /* (n_tokens, n_layers, w) */
  uint8_t *n;    /* (n_tokens, n_layers) valid entries */
} preds;

/* Reads the "pred" arrays of a router-format trace that t was read from. */
static int preds_read(const char *file, const spill_trace *t, uint32_t w, preds *out,
                      spill_err *e) {
  memset(out, 0, sizeof *out);
  SPILL_FAIL_IF(e, t->format != SPILL_TRACE_ROUTER, SPILL_E_CONFIG,
                "%s: lookahead.source \"trace\" needs a router-format trace (with \"pred\")", file);
  char *buf = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(file, (size_t)4 << 30, &buf, &len, e));
  out->w = w;
  out->ids = calloc((size_t)t->n_tokens * t->n_layers * (w ? w : 1), sizeof *out->ids);
  out->n = calloc((size_t)t->n_tokens * t->n_layers, 1);
  int rc = SPILL_OK;
  if (!out->ids || !out->n) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "sim: out of memory");
    goto done;
  }
  /* tok value -> token index: values are usually consecutive; search from a cursor */
  uint32_t cursor = 0;
  char *line = buf;
  while (line < buf + len) {
    char *nl = memchr(line, '\n', (size_t)(buf + len - line));
    char *end = nl ? nl : buf + len;
    char save = *end;
    *end = 0;
    cJSON *o = spill_json_parse_quiet(line); /* the one reading layer */
    *end = save;
    line = end + 1;
    if (!o) continue; /* blank (the trace reader validated everything else) */
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tok");
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layer");
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "pred");
    if (cJSON_IsNumber(tk) && cJSON_IsNumber(ly) && cJSON_IsArray(pr)) {
      int64_t tv = (int64_t)tk->valuedouble;
      uint32_t ti = UINT32_MAX;
      for (uint32_t k = 0; k < t->n_tokens; k++) {
        uint32_t i = (cursor + k) % t->n_tokens;
        if (t->tok[i] == tv) {
          ti = i;
          cursor = i;
          break;
        }
      }
      uint32_t li = UINT32_MAX;
      for (uint32_t l = 0; l < t->n_layers; l++)
        if (t->layer_ids[l] == (uint32_t)ly->valuedouble) li = l;
      if (ti != UINT32_MAX && li != UINT32_MAX) {
        size_t at = (size_t)ti * t->n_layers + li;
        uint32_t k = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, pr) {
          if (k >= w) break;
          if (cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < t->n_experts)
            out->ids[at * w + k++] = (uint32_t)x->valuedouble;
        }
        out->n[at] = (uint8_t)k;
      }
    }
    cJSON_Delete(o);
  }
done:
  free(buf);
  return rc;
}

static void preds_free(preds *p) {
  free(p->ids);
  free(p->n);
}

/* ------------------------------------------------------------ the state */

typedef struct unitlist {
  spill_cache_list lru; /* evictable resident units, head = most recent */
  uint32_t *prev, *next;
  uint64_t *bytes;
  uint8_t *resident, *touched, *evictable;
  uint32_t n;
  uint64_t cap, resident_bytes, pinned_bytes;
  int oom;
} unitlist;

typedef struct pend {
  spill_cache_entry *ent;
  double done;
} pend;

typedef struct sim {
  const spill_sim_config *c;
  const spill_trace *t;
  spill_cache *cache;
  double *ready_t;     /* (layers x experts) data-ready time of a resident key */
  double *thread_free; /* (io_threads) */
  double dev_free;
  pend *pending;       /* prefetches in flight (pinned until done) */
  uint32_t n_pending, cap_pending;
  int mem_on;
  unitlist u;
  uint32_t pieces;     /* trunk pieces: units 0..pieces-1; slot s is unit pieces + s */
  /* per-run accumulators (decode only when counting) */
  int counting;
  double paging_s, stall_s, compute_s, pagein_bytes, faults;
  uint64_t reads, bytes_read, bytes_spec, la_pred, la_correct;
  /* scratch */
  uint32_t *uniq, *uses;
  spill_cache_entry **ents;
  double *ready;
  uint32_t *order;
  uint8_t *stamp;
  uint8_t *qflag;      /* per distinct id of the layer: Q_HANDED, Q_DEFERRED */
} sim;

static double pagein_cost(const sim *s, uint64_t bytes) {
  const spill_sim_config *c = s->c;
  double pages = ceil((double)bytes / (double)c->page_bytes);
  return (double)bytes / c->pagein_bandwidth + pages * c->fault_latency_s;
}

/* Touches unit i; returns the page-in seconds it costs (0 if resident or a
 * first, zero-filled touch). */
static double touch(sim *s, uint32_t i) {
  if (!s->mem_on) return 0;
  unitlist *u = &s->u;
  if (u->resident[i]) {
    if (u->evictable[i]) {
      spill_cache_list_unlink(&u->lru, u->prev, u->next, i);
      spill_cache_list_push_head(&u->lru, u->prev, u->next, i);
    }
    return 0;
  }
  double cost = 0;
  if (u->touched[i]) {
    cost = pagein_cost(s, u->bytes[i]);
    if (s->counting) {
      s->pagein_bytes += (double)u->bytes[i];
      s->faults += ceil((double)u->bytes[i] / (double)s->c->page_bytes);
    }
  }
  u->touched[i] = 1;
  u->resident[i] = 1;
  if (u->evictable[i]) {
    spill_cache_list_push_head(&u->lru, u->prev, u->next, i);
    u->resident_bytes += u->bytes[i];
  } else {
    u->pinned_bytes += u->bytes[i];
  }
  while (u->resident_bytes + u->pinned_bytes > u->cap && u->lru.size > 1) {
    uint32_t v = u->lru.tail;
    spill_cache_list_unlink(&u->lru, u->prev, u->next, v);
    u->resident[v] = 0;
    u->resident_bytes -= u->bytes[v];
  }
  if (u->pinned_bytes > u->cap) u->oom = 1;
  return cost;
}

static double reader_issue(sim *s, double t, double extra_s) {
  const spill_sim_config *c = s->c;
  int k = 0;
  for (int i = 1; i < c->io_threads; i++)
    if (s->thread_free[i] < s->thread_free[k]) k = i;
  double start = t > s->thread_free[k] ? t : s->thread_free[k];
  double cost = (double)c->record_bytes / c->io_bandwidth;
  double end;
  if (c->io_bucket_burst_s >= 0) {
    /* the engine's io_throttle (engine/io, GCRA): the reader thread reserves
     * cost on a shared timeline when it takes the read, does the read
     * (latency), then holds the read until the reservation minus the burst */
    double tat = (s->dev_free > start ? s->dev_free : start) + cost;
    s->dev_free = tat;
    end = start + c->io_latency_s;
    if (tat - c->io_bucket_burst_s > end) end = tat - c->io_bucket_burst_s;
  } else {
    double xs = start + c->io_latency_s;
    if (s->dev_free > xs) xs = s->dev_free;
    end = xs + cost;
    s->dev_free = end;
  }
  s->thread_free[k] = end + extra_s;
  if (s->counting) {
    s->reads++;
    s->bytes_read += c->record_bytes;
  }
  return end + extra_s;
}

/* Releases the pins of prefetches whose read has landed by time now. */
static void settle(sim *s, double now) {
  uint32_t w = 0;
  for (uint32_t i = 0; i < s->n_pending; i++) {
    if (s->pending[i].done <= now) spill_cache_release(s->cache, s->pending[i].ent);
    else s->pending[w++] = s->pending[i];
  }
  s->n_pending = w;
}

static void settle_all(sim *s) {
  for (uint32_t i = 0; i < s->n_pending; i++) spill_cache_release(s->cache, s->pending[i].ent);
  s->n_pending = 0;
}

/* Lookahead predictions for layer li of token tk (precision model): rank r
 * is right with probability prec[r] (the next true id in selection order),
 * else a uniformly drawn expert the router did not pick. */
static uint32_t predict(const sim *s, uint32_t tk, uint32_t li, uint32_t *out) {
  const spill_sim_config *c = s->c;
  const spill_trace *t = s->t;
  const uint32_t *act = spill_trace_ids(t, tk, li);
  uint64_t rng = spill_cache_mix64(c->synth_seed * 0x9E3779B97F4A7C15ull ^
                                   ((uint64_t)tk << 20) ^ li ^ 0xA5A5ull);
  uint32_t n = 0, next_true = 0;
  for (int r = 0; r < c->la_width && r < (int)t->n_experts; r++) {
    double u = (double)(spill_cache_rng_next(&rng) >> 11) * (1.0 / 9007199254740992.0);
    uint32_t id = UINT32_MAX;
    if (u < c->la_precision[r] && next_true < t->top_k) id = act[next_true++];
    for (int tries = 0; id == UINT32_MAX && tries < 1000; tries++) {
      uint32_t cand = spill_cache_rng_below(&rng, t->n_experts);
      int bad = 0;
      for (uint32_t j = 0; j < t->top_k; j++) bad |= act[j] == cand;
      for (uint32_t j = 0; j < n; j++) bad |= out[j] == cand;
      if (!bad) id = cand;
    }
    if (id == UINT32_MAX) break;
    out[n++] = id;
  }
  return n;
}

enum { Q_HANDED = 1, Q_DEFERRED = 2 };

static int pending_has(const sim *s, const spill_cache_entry *ent) {
  for (uint32_t i = 0; i < s->n_pending; i++)
    if (s->pending[i].ent == ent) return 1;
  return 0;
}

/* Delivery order key: hits handed over at request time first (the stream's
 * ready queue holds them before any read is reaped), then by completion. */
static double qkey(const sim *s, uint32_t q) {
  return (s->qflag[q] & Q_HANDED) ? -INFINITY : s->ready[q];
}

/* Sorts order[from, nu) by delivery (stable insertion sort; nu is small). */
static void sort_ready(sim *s, uint32_t from, uint32_t nu) {
  for (uint32_t a = from + 1; a < nu; a++) {
    uint32_t v = s->order[a];
    uint32_t b = a;
    while (b > from && qkey(s, s->order[b - 1]) > qkey(s, v)) {
      s->order[b] = s->order[b - 1];
      b--;
    }
    s->order[b] = v;
  }
}

/* The deferred demand reads of layer li (order[from, nu), all deferred:
 * they sort last), retried at time tt once the layer's other experts are
 * consumed, as engine/stream does: a slot if one is evictable now, else a
 * bounce buffer (no slot). The stream has 2 bounce buffers and makes a
 * third such read wait for one; the sim does not (residual). */
static void retry_deferred(sim *s, uint32_t li, uint32_t from, uint32_t nu, double tt) {
  const spill_sim_config *c = s->c;
  const uint32_t E = s->t->n_experts, layer = s->t->layer_ids[li];
  for (uint32_t a = from; a < nu; a++) {
    uint32_t q = s->order[a];
    size_t key = (size_t)li * E + s->uniq[q];
    spill_cache_entry *ent = NULL;
    int out = spill_cache_claim(s->cache, layer, s->uniq[q], 0, &ent);
    if (out == SPILL_CACHE_PRESENT) {
      ent = spill_cache_get(s->cache, layer, s->uniq[q]);
      out = ent ? SPILL_CACHE_HIT : SPILL_CACHE_ALL_PINNED;
    }
    s->ents[q] = ent;
    s->qflag[q] = 0;
    if (out == SPILL_CACHE_HIT) {
      s->ready[q] = s->ready_t[key] > tt ? s->ready_t[key] : tt;
    } else if (out == SPILL_CACHE_INSERTED) {
      double wcost = touch(s, s->pieces + ent->slot);
      s->ready[q] = reader_issue(s, tt, wcost);
      s->ready_t[key] = s->ready[q];
      spill_cache_ready(s->cache, ent, c->record_bytes);
    } else {
      s->ready[q] = reader_issue(s, tt, 0);
    }
  }
  sort_ready(s, from, nu);
}

/* Trunk pieces of layer li: touched when the layer runs; returns the
 * compute-thread paging time. */
static double touch_trunk(sim *s, uint32_t li, uint32_t L) {
  double tt = 0;
  if (!s->mem_on) return 0;
  uint32_t p0 = (uint32_t)((uint64_t)li * s->pieces / L);
  uint32_t p1 = (uint32_t)((uint64_t)(li + 1) * s->pieces / L);
  for (uint32_t p = p0; p < p1; p++) {
    double pc = touch(s, p);
    tt += pc;
    if (s->counting) s->paging_s += pc;
  }
  return tt;
}

/* Distinct ids of layer li over tokens [t0, t0 + T) in first-use order,
 * with their use counts (s->uniq, s->uses); returns their number. */
static uint32_t distinct_ids(sim *s, uint32_t t0, uint32_t T, uint32_t li) {
  const spill_trace *t = s->t;
  uint32_t nu = 0;
  memset(s->stamp, 0, t->n_experts);
  for (uint32_t k = 0; k < T; k++) {
    const uint32_t *ids = spill_trace_ids(t, t0 + k, li);
    for (uint32_t j = 0; j < t->top_k; j++) {
      uint32_t id = ids[j];
      if (!s->stamp[id]) {
        s->stamp[id] = 1;
        s->uniq[nu] = id;
        s->uses[nu] = 0;
        nu++;
      }
      for (uint32_t q = 0; q < nu; q++)
        if (s->uniq[q] == id) {
          s->uses[q]++;
          break;
        }
    }
  }
  return nu;
}

/* The demand requests of layer li at time tt: hits, reads, deferrals. */
static void demand(sim *s, uint32_t li, uint32_t nu, double tt) {
  const spill_sim_config *c = s->c;
  const uint32_t E = s->t->n_experts;
  uint32_t layer = s->t->layer_ids[li];
  for (uint32_t q = 0; q < nu; q++) {
    spill_cache_entry *ent = NULL;
    int out = spill_cache_acquire(s->cache, layer, s->uniq[q], &ent);
    size_t key = (size_t)li * E + s->uniq[q];
    s->ents[q] = ent;
    s->qflag[q] = 0;
    if (out == SPILL_CACHE_HIT) {
      s->ready[q] = s->ready_t[key] > tt ? s->ready_t[key] : tt;
      /* a hit on a prefetch not yet reaped waits for that read's
       * completion like a miss; any other hit is handed over at once */
      if (!pending_has(s, ent)) s->qflag[q] = Q_HANDED;
    } else if (out == SPILL_CACHE_INSERTED) {
      /* a read into an evicted slot faults it in on the reader thread:
       * it delays that read (seen as stall), not the compute thread */
      double wcost = touch(s, s->pieces + ent->slot);
      s->ready[q] = reader_issue(s, tt, wcost);
      s->ready_t[key] = s->ready[q];
      spill_cache_ready(s->cache, ent, c->record_bytes);
    } else if (out == SPILL_CACHE_BYPASSED) {
      /* the policy declined to cache it: a bounce read at once, as the
       * stream does with overlapped reads */
      s->ready[q] = reader_issue(s, tt, 0);
    } else {
      /* every slot pinned: the stream defers the read until the layer's
       * other experts are consumed (their pins gone), then claims again */
      s->ready[q] = INFINITY;
      s->qflag[q] = Q_DEFERRED;
    }
  }
}

/* Decode lookahead from layer li for layer li + 1 of token t0, queued behind
 * this layer's reads (issued at tt). */
static int lookahead(sim *s, uint32_t t0, uint32_t li, const preds *pr, double tt,
                     spill_err *e) {
  const spill_sim_config *c = s->c;
  const spill_trace *t = s->t;
  const uint32_t L = t->n_layers, K = t->top_k, E = t->n_experts;
  uint32_t pid[SPILL_SIM_MAX_RANKS > 64 ? SPILL_SIM_MAX_RANKS : 64];
  uint32_t np = 0;
  if (c->la_source == SPILL_SIM_LA_TRACE) {
    size_t at = (size_t)t0 * L + li + 1;
    np = pr->n[at];
    memcpy(pid, pr->ids + at * pr->w, np * sizeof *pid);
  } else {
    np = predict(s, t0, li + 1, pid);
  }
  if (s->counting) {
    const uint32_t *act = spill_trace_ids(t, t0, li + 1);
    for (uint32_t i = 0; i < np; i++)
      for (uint32_t j = 0; j < K; j++) s->la_correct += act[j] == pid[i];
    s->la_pred += np;
  }
  uint32_t nlayer = t->layer_ids[li + 1];
  for (uint32_t i = 0; i < np; i++) {
    if (spill_cache_contains(s->cache, nlayer, pid[i])) continue;
    spill_cache_entry *ent = NULL;
    if (spill_cache_claim(s->cache, nlayer, pid[i], SPILL_CACHE_SPECULATIVE, &ent) !=
        SPILL_CACHE_INSERTED)
      continue;
    double wcost = touch(s, s->pieces + ent->slot);
    double done = reader_issue(s, tt, wcost);
    if (s->counting) s->bytes_spec += c->record_bytes;
    s->ready_t[(size_t)(li + 1) * E + pid[i]] = done;
    spill_cache_ready(s->cache, ent, c->record_bytes);
    if (s->n_pending == s->cap_pending) {
      uint32_t nc = s->cap_pending ? 2 * s->cap_pending : 256;
      pend *np2 = realloc(s->pending, nc * sizeof *np2);
      SPILL_FAIL_IF(e, !np2, SPILL_E_NOMEM, "sim: out of memory");
      s->pending = np2;
      s->cap_pending = nc;
    }
    s->pending[s->n_pending++] = (pend){ent, done};
  }
  return SPILL_OK;
}

/* Layer li's experts in arrival order from time tt: waits for reads (I/O
 * stall), computes each; returns the time after the last one. */
static double consume(sim *s, uint32_t li, uint32_t nu, double tt) {
  const spill_sim_config *c = s->c;
  for (uint32_t q = 0; q < nu; q++) s->order[q] = q;
  sort_ready(s, 0, nu);
  double reaped = -INFINITY; /* time of the layer's last reap */
  for (uint32_t a = 0; a < nu; a++) {
    uint32_t q = s->order[a];
    if (s->qflag[q] & Q_DEFERRED) {
      retry_deferred(s, li, a, nu, tt);
      q = s->order[a];
    }
    /* the stream reaps completions only when its ready queue is empty:
     * at max(now, this read's completion) it takes every read landed by
     * then, and prefetches release their pins there, not when they land */
    if (!(s->qflag[q] & Q_HANDED) && !(s->ready[q] <= reaped)) {
      reaped = s->ready[q] > tt ? s->ready[q] : tt;
      settle(s, reaped);
    }
    if (s->ready[q] > tt) {
      if (s->counting) s->stall_s += s->ready[q] - tt;
      tt = s->ready[q];
    }
    if (s->ents[q] && s->mem_on) {
      double pc = touch(s, s->pieces + s->ents[q]->slot); /* reading the slot */
      tt += pc;
      if (s->counting) s->paging_s += pc;
    }
    tt += c->t_expert_s * s->uses[q];
    if (s->ents[q]) spill_cache_release(s->cache, s->ents[q]);
    s->ents[q] = NULL;
  }
  return tt;
}

/* One forward call over tokens [t0, t0 + T) (one decode token, or a prefill
 * chunk: layer-major, no lookahead). Advances *now. */
static int forward(sim *s, uint32_t t0, uint32_t T, int decode, const preds *pr, double *now,
                   spill_err *e) {
  const spill_sim_config *c = s->c;
  const uint32_t L = s->t->n_layers;
  double tt = *now;
  for (uint32_t li = 0; li < L; li++) {
    /* trunk pieces of this layer, then the compute before the request */
    tt += touch_trunk(s, li, L);
    tt += c->t_layer_s * (1 - c->layer_overlap) * T;
    uint32_t nu = distinct_ids(s, t0, T, li);
    demand(s, li, nu, tt);
    if (decode && c->la_width > 0 && li + 1 < L) SPILL_TRY(lookahead(s, t0, li, pr, tt, e));
    tt += c->t_layer_s * c->layer_overlap * T;
    tt = consume(s, li, nu, tt);
  }
  tt += c->t_token_s * T;
  *now = tt;
  return SPILL_OK;
}

static void sim_free(sim *s) {
  if (s->cache) {
    settle_all(s);
    spill_cache_free(s->cache);
  }
  free(s->ready_t);
  free(s->thread_free);
  free(s->pending);
  free(s->u.prev);
  free(s->u.next);
  free(s->u.bytes);
  free(s->u.resident);
  free(s->u.touched);
  free(s->u.evictable);
  free(s->uniq);
  free(s->uses);
  free(s->ents);
  free(s->ready);
  free(s->order);
  free(s->stamp);
  free(s->qflag);
}

/* The memory model (machine.ram): the trunk pieces and the slots as units
 * of one LRU, the trunk loaded at open. */
static int mem_init(sim *s, uint64_t slots, uint64_t fixed, spill_sim_result *r, spill_err *e) {
  const spill_sim_config *c = s->c;
  const uint32_t L = s->t->n_layers;
  uint64_t hot = fixed > c->trunk_bytes ? fixed - c->trunk_bytes : 0; /* state + scratch */
  uint64_t avail = c->ram_bytes - c->reserved_bytes - c->extra_bytes;
  s->mem_on = 1;
  s->pieces = c->trunk_pieces ? c->trunk_pieces : L;
  if (!c->trunk_bytes) s->pieces = 0;
  unitlist *u = &s->u;
  u->n = s->pieces + (uint32_t)slots;
  u->cap = avail > hot ? avail - hot : 0;
  u->prev = malloc(u->n * sizeof *u->prev);
  u->next = malloc(u->n * sizeof *u->next);
  u->bytes = malloc(u->n * sizeof *u->bytes);
  u->resident = calloc(u->n, 1);
  u->touched = calloc(u->n, 1);
  u->evictable = calloc(u->n, 1);
  if (!u->prev || !u->next || !u->bytes || !u->resident || !u->touched || !u->evictable)
    return spill_err_set(e, SPILL_E_NOMEM, "sim: out of memory");
  spill_cache_list_init(&u->lru);
  for (uint32_t i = 0; i < u->n; i++) {
    u->prev[i] = u->next[i] = SPILL_CACHE_NIL;
    if (i < s->pieces) {
      u->bytes[i] = c->trunk_bytes / s->pieces + (i < c->trunk_bytes % s->pieces);
      u->evictable[i] = c->trunk_file || c->swap;
    } else {
      u->bytes[i] = c->record_bytes;
      u->evictable[i] = (uint8_t)c->swap;
    }
  }
  /* the trunk is loaded at open: resident, in layer order */
  for (uint32_t i = 0; i < s->pieces; i++) touch(s, i);
  uint64_t engine = c->trunk_bytes + (uint64_t)slots * c->record_bytes;
  r->over_bytes = engine > u->cap ? engine - u->cap : 0;
  uint64_t anon = (uint64_t)slots * c->record_bytes + (c->trunk_file ? 0 : c->trunk_bytes);
  if (!c->swap && anon > u->cap) u->oom = 1;
  return SPILL_OK;
}

/* The decode figures of one budget from the counters of the walk. */
static void fill_result(const sim *s, const spill_cache_counters *acc, uint32_t n_decode,
                        double t_decode, spill_sim_result *r) {
  r->tokens = n_decode;
  r->hits = acc->demand_hits;
  r->misses = acc->demand_misses;
  r->accesses = r->hits + r->misses;
  r->hit_rate = r->accesses ? (double)r->hits / (double)r->accesses : 0;
  r->spec_issued = acc->spec_issued;
  r->spec_used = acc->spec_used;
  r->spec_wasted = acc->spec_wasted;
  r->reads = s->reads;
  r->bytes_read = s->bytes_read;
  r->bytes_read_spec = s->bytes_spec;
  r->la_predicted = s->la_pred;
  r->la_correct = s->la_correct;
  r->oom = s->u.oom;
  if (n_decode) {
    r->s_per_token = t_decode / n_decode;
    r->tok_per_s = r->s_per_token > 0 && !r->oom ? 1.0 / r->s_per_token : 0;
    r->io_stall_s = s->stall_s / n_decode;
    r->paging_s = s->paging_s / n_decode;
    r->pagein_bytes = s->pagein_bytes / n_decode;
    r->faults = s->faults / n_decode;
    r->compute_s = r->s_per_token - r->io_stall_s - r->paging_s;
  }
}

static int run_budget(const spill_sim_config *c, const spill_trace *t, const preds *pr,
                      uint64_t budget, spill_sim_result *r, spill_err *e) {
  memset(r, 0, sizeof *r);
  r->budget = budget;
  const uint32_t L = t->n_layers, E = t->n_experts, K = t->top_k;
  uint64_t fixed = c->floor_bytes - c->min_cache_bytes; /* trunk + state + scratch */
  int64_t slots = c->cache_slots;
  if (slots < 0) slots = budget > fixed ? (int64_t)((budget - fixed) / c->record_bytes) : 0;
  if (slots < 1) slots = 1;
  r->slots = (uint32_t)slots;
  uint32_t tb = c->tok_begin, te = c->tok_end ? c->tok_end : t->n_tokens;
  SPILL_FAIL_IF(e, tb >= t->n_tokens || te > t->n_tokens, SPILL_E_CONFIG,
                "routing.tokens: window [%u, %u) outside the trace's %u tokens", tb, te, t->n_tokens);
  sim s;
  memset(&s, 0, sizeof s);
  s.c = c;
  s.t = t;
  int rc = SPILL_OK;
  spill_cache_config cc = {(uint32_t)slots, 0, NULL, c->policy, c->policy_seed, SPILL_CACHE_F_NOLOCK};
  if ((rc = spill_cache_init(&s.cache, &cc, e)) < 0) return rc;
  uint32_t maxu = K * (uint32_t)(c->prefill_chunk > 1 ? c->prefill_chunk : 1);
  if (maxu > E) maxu = E;
  s.ready_t = calloc((size_t)L * E, sizeof *s.ready_t);
  s.thread_free = calloc((size_t)c->io_threads, sizeof *s.thread_free);
  s.uniq = malloc(maxu * sizeof *s.uniq);
  s.uses = malloc(maxu * sizeof *s.uses);
  s.ents = calloc(maxu, sizeof *s.ents);
  s.ready = malloc(maxu * sizeof *s.ready);
  s.order = malloc(maxu * sizeof *s.order);
  s.stamp = malloc(E);
  s.qflag = malloc(maxu);
  if (!s.ready_t || !s.thread_free || !s.uniq || !s.uses || !s.ents || !s.ready || !s.order ||
      !s.stamp || !s.qflag) {
    sim_free(&s);
    return spill_err_set(e, SPILL_E_NOMEM, "sim: out of memory");
  }
  /* memory model */
  if (c->ram_bytes && (rc = mem_init(&s, (uint64_t)slots, fixed, r, e)) < 0) {
    sim_free(&s);
    return rc;
  }
  /* walk the window: prefill chunks (a position that is a multiple of
   * prefill_chunk starts one) and decode tokens; only decode calls count */
  double now = 0, t_decode = 0;
  spill_cache_counters c0, c1, acc;
  memset(&acc, 0, sizeof acc);
  uint32_t n_decode = 0;
  for (uint32_t tk = tb; tk < te && rc == SPILL_OK;) {
    int decode = t->phase[tk] != SPILL_TRACE_PHASE_PREFILL;
    uint32_t T = 1;
    if (!decode) {
      while (tk + T < te && (int)T < c->prefill_chunk && t->phase[tk + T] == SPILL_TRACE_PHASE_PREFILL &&
             !(t->pos[tk + T] >= 0 && c->prefill_chunk > 0 && t->pos[tk + T] % c->prefill_chunk == 0))
        T++;
    }
    s.counting = decode;
    double before = now;
    spill_cache_get_counters(s.cache, &c0);
    rc = forward(&s, tk, T, decode, pr, &now, e);
    if (decode) {
      spill_cache_get_counters(s.cache, &c1);
      acc.demand_hits += c1.demand_hits - c0.demand_hits;
      acc.demand_misses += c1.demand_misses - c0.demand_misses;
      acc.spec_issued += c1.spec_issued - c0.spec_issued;
      acc.spec_used += c1.spec_used - c0.spec_used;
      acc.spec_wasted += c1.spec_wasted - c0.spec_wasted;
      t_decode += now - before;
      n_decode++;
    }
    tk += T;
  }
  if (rc == SPILL_OK) fill_result(&s, &acc, n_decode, t_decode, r);
  sim_free(&s);
  return rc;
}

int spill_sim_run(const spill_sim_config *c, const spill_trace *t, spill_sim_result *res,
                  spill_err *e) {
  SPILL_FAIL_IF(e, !c->record_bytes || !c->n_budgets, SPILL_E_CONFIG,
                "sim: the model shape (record_bytes) and budgets are required");
  SPILL_FAIL_IF(e, t->n_layers != c->moe_layers || t->top_k != c->top_k || t->n_experts > c->n_experts,
                SPILL_E_TRACE,
                "sim: routing has %u layers x top-%u over %u experts; the model %u x top-%u over %u",
                t->n_layers, t->top_k, t->n_experts, c->moe_layers, c->top_k, c->n_experts);
  SPILL_FAIL_IF(e, c->floor_bytes < c->min_cache_bytes, SPILL_E_CONFIG, "sim: floor below min cache");
  preds pr;
  memset(&pr, 0, sizeof pr);
  if (c->la_width > 0 && c->la_source == SPILL_SIM_LA_TRACE)
    SPILL_TRY(preds_read(c->trace_path, t, (uint32_t)c->la_width, &pr, e));
  /* the routing's expert count may be inferred smaller than the model's */
  spill_trace tt = *t;
  tt.n_experts = c->n_experts;
  int rc = SPILL_OK;
  for (int i = 0; i < c->n_budgets && rc == SPILL_OK; i++)
    rc = run_budget(c, &tt, &pr, c->budgets[i], &res[i], e);
  preds_free(&pr);
  return rc;
}
