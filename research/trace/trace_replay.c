/* research/trace/trace_replay.c: replays a trace through the expert cache and
 * through Belady's MIN.
 *
 * Online policies run in the engine's own spill_cache (simulation mode: no
 * slot memory, SPILL_CACHE_F_NOLOCK), one spill_cache_access per (layer,
 * expert) demand access, so the replayer measures exactly the code the
 * streaming engine runs. Belady's MIN is computed here: next-use positions in
 * one backward pass, then a max-heap of (next use, key) with lazy deletion
 * (an entry is stale once its key left the cache or was used again), so a
 * replay costs O(n log n) whatever the slot count. Without bypass a missing
 * key is always inserted (the classic MIN a demand cache can reach); with
 * bypass it is not inserted when its own next use is farther than every
 * resident's, which is the true optimum when caching is optional.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/cache/expert_cache.h"
#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

typedef struct heap_ent {
  uint64_t next; /* position of the next use; UINT64_MAX = never */
  uint32_t key;
} heap_ent;

static void heap_push(heap_ent *h, size_t *n, heap_ent v) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].next >= v.next) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = v;
}

static void heap_pop(heap_ent *h, size_t *n) {
  heap_ent v = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && h[c + 1].next > h[c].next) c++;
    if (h[c].next <= v.next) break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0) h[i] = v;
}

int64_t spill_trace_belady_hits(const uint32_t *keys, size_t n, uint32_t n_keys,
                                uint32_t n_slots, int bypass) {
  if (n_slots == 0 || (n && !keys)) return -1;
  uint64_t *next = (uint64_t *)malloc((n ? n : 1) * sizeof(uint64_t));
  uint64_t *seen = (uint64_t *)malloc((size_t)(n_keys ? n_keys : 1) * sizeof(uint64_t));
  uint64_t *cur = (uint64_t *)malloc((size_t)(n_keys ? n_keys : 1) * sizeof(uint64_t));
  uint8_t *res = (uint8_t *)calloc(n_keys ? n_keys : 1, 1);
  /* Every access pushes at most one entry. */
  heap_ent *h = (heap_ent *)malloc((n ? n : 1) * sizeof(heap_ent));
  int64_t hits = -1;
  if (!next || !seen || !cur || !res || !h) goto out;
  for (uint32_t k = 0; k < n_keys; k++) seen[k] = UINT64_MAX;
  for (size_t i = n; i-- > 0;) {
    if (keys[i] >= n_keys) goto out;
    next[i] = seen[keys[i]];
    seen[keys[i]] = i;
  }
  hits = 0;
  size_t hn = 0;
  uint32_t used = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t k = keys[i];
    if (res[k]) {
      hits++;
    } else {
      if (used == n_slots) {
        /* Drop stale heap tops: the top is then the resident used farthest. */
        while (hn > 0 && (!res[h[0].key] || cur[h[0].key] != h[0].next)) heap_pop(h, &hn);
        if (bypass && next[i] > h[0].next) continue;
        res[h[0].key] = 0;
        heap_pop(h, &hn);
        used--;
      }
      res[k] = 1;
      used++;
    }
    cur[k] = next[i];
    heap_push(h, &hn, (heap_ent){next[i], k});
  }
out:
  free(next);
  free(seen);
  free(cur);
  free(res);
  free(h);
  return hits;
}

const char *spill_trace_policy_name_at(size_t i) {
  const char *const *names = spill_cache_policy_names();
  size_t n = 0;
  while (names[n]) n++;
  if (i < n) return names[i];
  if (i == n) return "belady";
  if (i == n + 1) return "belady-bypass";
  return NULL;
}

/* Online policy through spill_cache: one access at a time, or (batch) a
 * layer's ids acquired pinned together, then readied and released. */
static int replay_online(const spill_trace *t, const char *policy, uint32_t n_slots,
                         uint64_t seed, uint32_t tok_begin, uint32_t tok_end, int batch,
                         uint64_t *hits, uint64_t *accesses, spill_err *e) {
  const uint32_t L = t->n_layers, K = t->top_k;
  SPILL_FAIL_IF(e, !spill_cache_policy_find(policy), SPILL_E_INVALID_ARG,
                "replay: unknown policy \"%s\"", policy);
  spill_cache_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.n_slots = n_slots;
  cfg.policy = policy;
  cfg.seed = seed;
  cfg.flags = SPILL_CACHE_F_NOLOCK;
  spill_cache_entry **ents = (spill_cache_entry **)calloc(K ? K : 1, sizeof(*ents));
  if (!ents) return spill_err_set(e, SPILL_E_NOMEM, "replay: out of memory");
  spill_cache *c = NULL;
  int rc = spill_cache_init(&c, &cfg, e);
  if (rc) {
    free(ents);
    return rc;
  }
  for (uint32_t tok = tok_begin; tok < tok_end; tok++)
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *ids = spill_trace_ids(t, tok, l);
      if (!batch) {
        for (uint32_t k = 0; k < K; k++) spill_cache_access(c, t->layer_ids[l], ids[k], 0, 0);
        continue;
      }
      for (uint32_t k = 0; k < K; k++) {
        ents[k] = NULL;
        int out = spill_cache_acquire(c, t->layer_ids[l], ids[k], &ents[k]);
        if (out == SPILL_CACHE_INSERTED) spill_cache_ready(c, ents[k], 0);
      }
      for (uint32_t k = 0; k < K; k++) spill_cache_release(c, ents[k]);
    }
  spill_cache_counters ctr;
  spill_cache_get_counters(c, &ctr);
  spill_cache_free(c);
  free(ents);
  *hits = ctr.demand_hits;
  *accesses = ctr.demand_hits + ctr.demand_misses;
  return SPILL_OK;
}

int spill_trace_replay(const spill_trace *t, const char *policy, uint32_t n_slots, uint64_t seed,
                       uint32_t tok_begin, uint32_t tok_end, unsigned flags,
                       spill_trace_replay_result *out, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !policy || !out, SPILL_E_INVALID_ARG, "replay: NULL argument");
  memset(out, 0, sizeof(*out));
  if (tok_end == 0) tok_end = t->n_tokens;
  SPILL_FAIL_IF(e, tok_begin >= tok_end || tok_end > t->n_tokens, SPILL_E_INVALID_ARG,
                "replay: token window [%u, %u) is empty or beyond the %u tokens", tok_begin,
                tok_end, t->n_tokens);
  SPILL_FAIL_IF(e, n_slots == 0, SPILL_E_INVALID_ARG, "replay: slots must be >= 1");
  const uint32_t L = t->n_layers, K = t->top_k, E = t->n_experts;
  const size_t n = (size_t)(tok_end - tok_begin) * L * K;
  int bypass = strcmp(policy, "belady-bypass") == 0;
  if (bypass || strcmp(policy, "belady") == 0) {
    SPILL_FAIL_IF(e, (uint64_t)L * E > UINT32_MAX, SPILL_E_INVALID_ARG,
                  "replay: %u layers x %u experts is too many keys", L, E);
    uint32_t *keys = (uint32_t *)malloc((n ? n : 1) * sizeof(uint32_t));
    if (!keys) return spill_err_set(e, SPILL_E_NOMEM, "replay: out of memory");
    size_t i = 0;
    for (uint32_t tok = tok_begin; tok < tok_end; tok++)
      for (uint32_t l = 0; l < L; l++) {
        const uint32_t *ids = spill_trace_ids(t, tok, l);
        for (uint32_t k = 0; k < K; k++) keys[i++] = l * E + ids[k];
      }
    int64_t hits = spill_trace_belady_hits(keys, n, L * E, n_slots, bypass);
    free(keys);
    if (hits < 0) return spill_err_set(e, SPILL_E_NOMEM, "replay: out of memory");
    out->hits = (uint64_t)hits;
  } else {
    uint64_t acc = 0;
    SPILL_TRY(replay_online(t, policy, n_slots, seed, tok_begin, tok_end,
                            (flags & SPILL_TRACE_REPLAY_BATCH) != 0, &out->hits, &acc, e));
    if (acc != n)
      return spill_err_set(e, SPILL_E_INTERNAL, "replay: cache counted %llu accesses, expected %zu",
                           (unsigned long long)acc, n);
  }
  out->accesses = n;
  out->hit_rate = n ? (double)out->hits / (double)n : 0.0;
  return SPILL_OK;
}
