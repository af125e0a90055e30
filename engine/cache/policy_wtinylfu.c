/* engine/cache/policy_wtinylfu.c: W-TinyLFU (Einziger, Friedman, Manes 2017),
 * the adaptive, scan-resistant policy of the expert cache.
 *
 * Why this one for MoE routing: a decode step touches top_k experts in each
 * of L layers in a fixed cyclic order, so the stream is a loop over L*top_k
 * keys per token whose length is usually larger than the cache. Pure recency
 * (LRU, and ARC, which degenerates towards LRU on loops) then evicts exactly
 * what the next token needs. What does predict reuse is per-layer expert
 * popularity, which is skewed and drifts slowly. W-TinyLFU admits a key into
 * the main region only if its (aged) frequency beats the main region's victim,
 * so one-off experts cannot flush the popular ones, and its small LRU window
 * still catches short bursts where consecutive tokens pick the same experts.
 * The frequency sketch is bounded and independent of cache residency, which
 * matters because most keys are non-resident at any time. LIRS also resists
 * loops but needs an unbounded-ish non-resident stack; TinyLFU's sketch is a
 * fixed 16 bytes per slot.
 *
 * Layout: window LRU (1% of slots, >= 1) -> main SLRU (probation + protected,
 * protected = 80% of main). Frequency: count-min sketch, 4 rows of 8-bit
 * counters saturating at 15, conservative update, all counters halved after
 * 10 * n_slots increments. New keys always enter the window (the cache must
 * place them somewhere); when the window overflows, its LRU candidate
 * competes with the probation LRU victim and the less frequent one is evicted.
 * Deterministic for a seed (it seeds the sketch hashes). Single-threaded.
 *
 * Pinned windows. The engine claims a slot for every miss of a layer before
 * any of their reads lands, and those entries stay pinned until the layer has
 * consumed them. With a fixed 1% window (1 slot at 96) the window's only
 * entry is then always the previous, pinned miss: there is no window
 * candidate to contest, the main region gives up its victim unopposed, and
 * the window's overflow walks into the main region unfiltered, so the policy
 * degenerates to LRU (measured: 0% hits at 96 slots on the OLMoE trace
 * through the engine, 33.5% when the same trace is replayed one access at a
 * time; results/published/olmoe-trace-policies). So the window grows by one
 * slot whenever a miss finds every window entry pinned (up to a quarter of
 * the cache): it settles at the size of the batches the caller keeps in
 * flight, and every later admission is contested again. The protected
 * segment stays 80% of the main region as the window grows: left at 80% of
 * the initial main region, it took all of the main region that a chunked
 * prefill's pinned batches (the union of a chunk's experts per layer) had
 * shrunk by growing the window to its cap, probation kept about one entry,
 * and every admitted newcomer was the next victim (24.72% decode hits
 * through the engine vs 38.68% replayed on mini at 188 slots;
 * results/published/policy-compare). The window does not shrink back after
 * the prefill: docs/CACHE.md measures what that costs and why a shrink rule
 * was not kept. reset() restores the 1% window.
 */
#include <stdlib.h>

#include "engine/cache/cache_policy.h"

#define WT_ROWS 4u
#define WT_COUNTER_MAX 15u
#define WT_SAMPLE_FACTOR 10u
#define WT_MIN_WIDTH 256u

enum { SEG_NONE = 0, SEG_WINDOW = 1, SEG_PROBATION = 2, SEG_PROTECTED = 3 };

typedef struct wt_state {
  uint32_t n_slots;
  uint64_t seed;
  uint32_t window_cap, protected_cap;
  uint32_t window_cap0, window_max; /* initial (1%) and largest window */
  uint8_t *seg;   /* (n_slots) SEG_* */
  uint64_t *key;  /* (n_slots) */
  uint32_t *prev; /* (n_slots) */
  uint32_t *next; /* (n_slots) */
  spill_cache_list window, probation, protect;
  uint32_t pending; /* window slot admitted by the last choose_victim, or NIL */
  /* count-min sketch */
  uint32_t width; /* power of two */
  uint64_t row_salt[WT_ROWS];
  uint8_t *sketch; /* (WT_ROWS, width) */
  uint64_t sample_period, since_age;
} wt_state;

static void wt_reset(void *p) {
  wt_state *s = (wt_state *)p;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->seg[i] = SEG_NONE;
    s->key[i] = 0;
    s->prev[i] = s->next[i] = SPILL_CACHE_NIL;
  }
  spill_cache_list_init(&s->window);
  spill_cache_list_init(&s->probation);
  spill_cache_list_init(&s->protect);
  s->window_cap = s->window_cap0;
  s->protected_cap = (uint32_t)(((uint64_t)(s->n_slots - s->window_cap) * 4) / 5);
  s->pending = SPILL_CACHE_NIL;
  uint64_t rng = s->seed;
  for (uint32_t r = 0; r < WT_ROWS; r++) s->row_salt[r] = spill_cache_rng_next(&rng);
  for (size_t i = 0; i < (size_t)WT_ROWS * s->width; i++) s->sketch[i] = 0;
  s->since_age = 0;
}

static void wt_destroy(void *p) {
  wt_state *s = (wt_state *)p;
  if (!s) return;
  free(s->seg);
  free(s->key);
  free(s->prev);
  free(s->next);
  free(s->sketch);
  free(s);
}

static void *wt_create(uint32_t n_slots, uint64_t seed) {
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 4)) return NULL;
  wt_state *s = (wt_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->seed = seed;
  s->window_cap0 = s->window_cap = n_slots / 100 > 1 ? n_slots / 100 : 1;
  s->window_max = n_slots / 4 > s->window_cap0 ? n_slots / 4 : s->window_cap0;
  uint32_t main_cap = n_slots - s->window_cap;
  s->protected_cap = (uint32_t)(((uint64_t)main_cap * 4) / 5);
  uint32_t w = WT_MIN_WIDTH;
  while (w < 4 * n_slots) w <<= 1;
  s->width = w;
  s->sample_period = (uint64_t)WT_SAMPLE_FACTOR * n_slots;
  s->seg = (uint8_t *)calloc(n_slots, 1);
  s->key = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->prev = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->next = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->sketch = (uint8_t *)calloc((size_t)WT_ROWS * w, 1);
  if (!s->seg || !s->key || !s->prev || !s->next || !s->sketch) {
    wt_destroy(s);
    return NULL;
  }
  wt_reset(s);
  return s;
}

static inline uint8_t *wt_cell(wt_state *s, uint32_t row, uint64_t key) {
  uint64_t h = spill_cache_mix64(key ^ s->row_salt[row]);
  return &s->sketch[(size_t)row * s->width + (h & (s->width - 1))];
}

static uint32_t wt_estimate(wt_state *s, uint64_t key) {
  uint32_t m = WT_COUNTER_MAX;
  for (uint32_t r = 0; r < WT_ROWS; r++) {
    uint8_t c = *wt_cell(s, r, key);
    if (c < m) m = c;
  }
  return m;
}

/* Conservative update: raise only the counters equal to the minimum. */
static void wt_increment(wt_state *s, uint64_t key) {
  uint8_t *cell[WT_ROWS];
  uint8_t m = WT_COUNTER_MAX;
  for (uint32_t r = 0; r < WT_ROWS; r++) {
    cell[r] = wt_cell(s, r, key);
    if (*cell[r] < m) m = *cell[r];
  }
  if (m >= WT_COUNTER_MAX) return;
  for (uint32_t r = 0; r < WT_ROWS; r++)
    if (*cell[r] == m) (*cell[r])++;
  if (++s->since_age < s->sample_period) return;
  s->since_age = 0;
  for (size_t i = 0; i < (size_t)WT_ROWS * s->width; i++) s->sketch[i] >>= 1;
}

static spill_cache_list *wt_list(wt_state *s, uint8_t seg) {
  switch (seg) {
    case SEG_WINDOW: return &s->window;
    case SEG_PROBATION: return &s->probation;
    case SEG_PROTECTED: return &s->protect;
    default: return NULL;
  }
}

static void wt_move(wt_state *s, uint32_t slot, uint8_t to) {
  spill_cache_list *from = wt_list(s, s->seg[slot]);
  if (from) spill_cache_list_unlink(from, s->prev, s->next, slot);
  s->seg[slot] = to;
  spill_cache_list_push_head(wt_list(s, to), s->prev, s->next, slot);
}

static void wt_on_hit(void *p, uint32_t slot, uint64_t key) {
  wt_state *s = (wt_state *)p;
  wt_increment(s, key);
  switch (s->seg[slot]) {
    case SEG_WINDOW:
      wt_move(s, slot, SEG_WINDOW);
      break;
    case SEG_PROBATION:
      wt_move(s, slot, SEG_PROTECTED);
      while (s->protect.size > s->protected_cap && s->protect.tail != SPILL_CACHE_NIL)
        wt_move(s, s->protect.tail, SEG_PROBATION);
      break;
    case SEG_PROTECTED:
      wt_move(s, slot, SEG_PROTECTED);
      break;
    default:
      break;
  }
}

static void wt_on_insert(void *p, uint32_t slot, uint64_t key) {
  wt_state *s = (wt_state *)p;
  wt_increment(s, key);
  s->key[slot] = key;
  wt_move(s, slot, SEG_WINDOW);
  while (s->window.size > s->window_cap) {
    uint32_t out = s->window.tail;
    if (s->pending != SPILL_CACHE_NIL && s->seg[s->pending] == SEG_WINDOW && s->pending != slot)
      out = s->pending;
    s->pending = SPILL_CACHE_NIL;
    wt_move(s, out, SEG_PROBATION);
  }
  s->pending = SPILL_CACHE_NIL;
}

static void wt_on_evict(void *p, uint32_t slot, uint64_t key) {
  (void)key;
  wt_state *s = (wt_state *)p;
  spill_cache_list *l = wt_list(s, s->seg[slot]);
  if (!l) return;
  spill_cache_list_unlink(l, s->prev, s->next, slot);
  s->seg[slot] = SEG_NONE;
  if (s->pending == slot) s->pending = SPILL_CACHE_NIL;
}

/* Resizes the window; the protected segment stays 80% of the main region,
 * so that probation keeps its share (a protected cap left at 80% of the
 * initial main region would take all of a main region shrunk by a grown
 * window and freeze it). */
static void wt_set_window(wt_state *s, uint32_t cap) {
  s->window_cap = cap;
  s->protected_cap = (uint32_t)(((uint64_t)(s->n_slots - cap) * 4) / 5);
  while (s->protect.size > s->protected_cap && s->protect.tail != SPILL_CACHE_NIL)
    wt_move(s, s->protect.tail, SEG_PROBATION);
}

static int64_t wt_choose_victim(void *p, uint64_t incoming_key, const uint8_t *evictable) {
  (void)incoming_key;
  wt_state *s = (wt_state *)p;
  s->pending = SPILL_CACHE_NIL;
  uint32_t cand = spill_cache_list_lru_evictable(&s->window, s->prev, evictable);
  uint32_t vict = spill_cache_list_lru_evictable(&s->probation, s->prev, evictable);
  if (vict == SPILL_CACHE_NIL) vict = spill_cache_list_lru_evictable(&s->protect, s->prev, evictable);
  if (cand == SPILL_CACHE_NIL) {
    /* every window entry is pinned (or the window is empty): the newcomer
     * can only displace the main victim; grow the window so that it does not
     * also push a pinned entry into the main region unfiltered */
    if (vict != SPILL_CACHE_NIL && s->window.size >= s->window_cap &&
        s->window_cap < s->window_max) {
      wt_set_window(s, s->window_cap + 1);
    }
    return vict == SPILL_CACHE_NIL ? -1 : (int64_t)vict;
  }
  if (vict == SPILL_CACHE_NIL) return (int64_t)cand;
  /* The window has room for the newcomer: nothing is pushed out of it, so the
   * main region gives up its victim without a contest. */
  if (s->window.size < s->window_cap) return (int64_t)vict;
  if (wt_estimate(s, s->key[cand]) > wt_estimate(s, s->key[vict])) {
    s->pending = cand; /* admitted: moves to probation in on_insert */
    return (int64_t)vict;
  }
  return (int64_t)cand;
}

const spill_cache_policy spill_cache_policy_wtinylfu = {
    .name = "wtinylfu",
    .create = wt_create,
    .destroy = wt_destroy,
    .reset = wt_reset,
    .on_hit = wt_on_hit,
    .on_insert = wt_on_insert,
    .choose_victim = wt_choose_victim,
    .on_evict = wt_on_evict,
};
