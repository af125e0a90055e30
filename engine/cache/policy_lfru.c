/* engine/cache/policy_lfru.c: sampled least-frequently / least-recently used.
 *
 * Victim: sample LFRU_SAMPLES slots with the seeded PRNG (Redis-style
 * approximated LFU), take the evictable one with the lowest frequency, ties
 * broken by the older last access. When the cache has no more slots than the
 * sample size, or no sampled slot is evictable (many pins), every slot is
 * scanned instead, so a victim is found whenever one exists.
 *
 * Frequency survives eviction: an evicted key's count goes to a bounded
 * 4-way set-associative history table (8 entries per slot); a returning key
 * resumes from it. When a set is full the smallest count is replaced, and
 * only by a count at least as large. Every LFRU_AGE_FACTOR * n_slots accesses
 * all counts (resident and history) are halved, so popularity that faded
 * ages out. No allocation after create; single-threaded; see cache_policy.h.
 */
#include <stdlib.h>

#include "engine/cache/cache_policy.h"

#define LFRU_SAMPLES 12u
#define LFRU_WAYS 4u
#define LFRU_AGE_FACTOR 16u
#define LFRU_AGE_MIN 1024u
#define LFRU_EMPTY_KEY UINT64_MAX

typedef struct lfru_state {
  uint32_t n_slots;
  uint64_t seed, rng;
  uint8_t *resident; /* (n_slots) */
  uint32_t *freq;    /* (n_slots) */
  uint64_t *last;    /* (n_slots) tick of the last access */
  uint64_t tick;
  uint64_t age_period, since_age;
  uint32_t n_sets;     /* power of two */
  uint64_t *hist_key;  /* (n_sets * LFRU_WAYS), LFRU_EMPTY_KEY = free way */
  uint32_t *hist_cnt;  /* (n_sets * LFRU_WAYS) */
} lfru_state;

static void lfru_reset(void *p) {
  lfru_state *s = (lfru_state *)p;
  s->rng = s->seed;
  s->tick = 0;
  s->since_age = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->resident[i] = 0;
    s->freq[i] = 0;
    s->last[i] = 0;
  }
  for (uint32_t i = 0; i < s->n_sets * LFRU_WAYS; i++) {
    s->hist_key[i] = LFRU_EMPTY_KEY;
    s->hist_cnt[i] = 0;
  }
}

static void lfru_destroy(void *p) {
  lfru_state *s = (lfru_state *)p;
  if (!s) return;
  free(s->resident);
  free(s->freq);
  free(s->last);
  free(s->hist_key);
  free(s->hist_cnt);
  free(s);
}

static void *lfru_create(uint32_t n_slots, uint64_t seed) {
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 4)) return NULL;
  lfru_state *s = (lfru_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->seed = seed;
  uint64_t period = (uint64_t)LFRU_AGE_FACTOR * n_slots;
  s->age_period = period < LFRU_AGE_MIN ? LFRU_AGE_MIN : period;
  /* 2 sets (8 ways) per slot, at least 16 sets. */
  uint32_t sets = 16;
  while (sets < 2 * n_slots) sets <<= 1;
  s->n_sets = sets;
  s->resident = (uint8_t *)calloc(n_slots, 1);
  s->freq = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->last = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->hist_key = (uint64_t *)calloc((size_t)sets * LFRU_WAYS, sizeof(uint64_t));
  s->hist_cnt = (uint32_t *)calloc((size_t)sets * LFRU_WAYS, sizeof(uint32_t));
  if (!s->resident || !s->freq || !s->last || !s->hist_key || !s->hist_cnt) {
    lfru_destroy(s);
    return NULL;
  }
  lfru_reset(s);
  return s;
}

static uint32_t *hist_set(lfru_state *s, uint64_t key, uint64_t **keys) {
  uint32_t set = (uint32_t)(spill_cache_mix64(key) & (s->n_sets - 1));
  *keys = &s->hist_key[(size_t)set * LFRU_WAYS];
  return &s->hist_cnt[(size_t)set * LFRU_WAYS];
}

/* Removes key from the history and returns its count (0 if unknown). */
static uint32_t hist_take(lfru_state *s, uint64_t key) {
  uint64_t *keys;
  uint32_t *cnt = hist_set(s, key, &keys);
  for (uint32_t w = 0; w < LFRU_WAYS; w++) {
    if (keys[w] == key) {
      uint32_t c = cnt[w];
      keys[w] = LFRU_EMPTY_KEY;
      cnt[w] = 0;
      return c;
    }
  }
  return 0;
}

static void hist_put(lfru_state *s, uint64_t key, uint32_t count) {
  if (count == 0) return;
  uint64_t *keys;
  uint32_t *cnt = hist_set(s, key, &keys);
  uint32_t victim = 0;
  for (uint32_t w = 0; w < LFRU_WAYS; w++) {
    if (keys[w] == LFRU_EMPTY_KEY || keys[w] == key) {
      victim = w;
      break;
    }
    if (cnt[w] < cnt[victim]) victim = w;
  }
  if (keys[victim] != LFRU_EMPTY_KEY && keys[victim] != key && cnt[victim] > count) return;
  keys[victim] = key;
  cnt[victim] = count;
}

static void lfru_tick(lfru_state *s, uint32_t slot) {
  s->last[slot] = ++s->tick;
  if (++s->since_age < s->age_period) return;
  s->since_age = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) s->freq[i] >>= 1;
  for (uint32_t i = 0; i < s->n_sets * LFRU_WAYS; i++) {
    if (s->hist_key[i] == LFRU_EMPTY_KEY) continue;
    s->hist_cnt[i] >>= 1;
    if (s->hist_cnt[i] == 0) s->hist_key[i] = LFRU_EMPTY_KEY;
  }
}

static void lfru_on_hit(void *p, uint32_t slot, uint64_t key) {
  (void)key;
  lfru_state *s = (lfru_state *)p;
  if (!s->resident[slot]) return;
  if (s->freq[slot] < UINT32_MAX) s->freq[slot]++;
  lfru_tick(s, slot);
}

static void lfru_on_insert(void *p, uint32_t slot, uint64_t key) {
  lfru_state *s = (lfru_state *)p;
  uint32_t f = hist_take(s, key);
  s->resident[slot] = 1;
  s->freq[slot] = f < UINT32_MAX ? f + 1 : f;
  lfru_tick(s, slot);
}

static void lfru_on_evict(void *p, uint32_t slot, uint64_t key) {
  lfru_state *s = (lfru_state *)p;
  if (!s->resident[slot]) return;
  hist_put(s, key, s->freq[slot]);
  s->resident[slot] = 0;
  s->freq[slot] = 0;
}

/* 1 if slot a is a better victim than slot b. */
static int lfru_worse(const lfru_state *s, uint32_t a, uint32_t b) {
  if (s->freq[a] != s->freq[b]) return s->freq[a] < s->freq[b];
  return s->last[a] < s->last[b];
}

static int64_t lfru_choose_victim(void *p, uint64_t incoming_key, const uint8_t *evictable) {
  (void)incoming_key;
  lfru_state *s = (lfru_state *)p;
  uint32_t best = SPILL_CACHE_NIL;
  if (s->n_slots > LFRU_SAMPLES) {
    for (uint32_t i = 0; i < LFRU_SAMPLES; i++) {
      uint32_t c = spill_cache_rng_below(&s->rng, s->n_slots);
      if (!evictable[c]) continue;
      if (best == SPILL_CACHE_NIL || lfru_worse(s, c, best)) best = c;
    }
  }
  if (best == SPILL_CACHE_NIL) {
    for (uint32_t c = 0; c < s->n_slots; c++) {
      if (!evictable[c]) continue;
      if (best == SPILL_CACHE_NIL || lfru_worse(s, c, best)) best = c;
    }
  }
  return best == SPILL_CACHE_NIL ? -1 : (int64_t)best;
}

const spill_cache_policy spill_cache_policy_lfru = {
    .name = "lfru",
    .create = lfru_create,
    .destroy = lfru_destroy,
    .reset = lfru_reset,
    .on_hit = lfru_on_hit,
    .on_insert = lfru_on_insert,
    .choose_victim = lfru_choose_victim,
    .on_evict = lfru_on_evict,
};
