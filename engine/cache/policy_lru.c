/* engine/cache/policy_lru.c: least-recently-used replacement.
 *
 * The baseline every other policy is measured against. One intrusive list of
 * resident slots, most recent at the head; a hit or insert moves the slot to
 * the head, the victim is the least recent evictable slot. All operations are
 * O(1) except choose_victim, which skips pinned slots at the tail (O(pinned)).
 * No PRNG: the seed is ignored. Single-threaded; see cache_policy.h.
 */
#include <stdlib.h>

#include "engine/cache/cache_policy.h"

typedef struct lru_state {
  uint32_t n_slots;
  uint8_t *resident; /* (n_slots) */
  uint32_t *prev;    /* (n_slots) */
  uint32_t *next;    /* (n_slots) */
  spill_cache_list list;
} lru_state;

static void lru_reset(void *p) {
  lru_state *s = (lru_state *)p;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->resident[i] = 0;
    s->prev[i] = s->next[i] = SPILL_CACHE_NIL;
  }
  spill_cache_list_init(&s->list);
}

static void lru_destroy(void *p) {
  lru_state *s = (lru_state *)p;
  if (!s) return;
  free(s->resident);
  free(s->prev);
  free(s->next);
  free(s);
}

static void *lru_create(uint32_t n_slots, uint64_t seed) {
  (void)seed;
  if (n_slots == 0) return NULL;
  lru_state *s = (lru_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->resident = (uint8_t *)calloc(n_slots, 1);
  s->prev = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->next = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  if (!s->resident || !s->prev || !s->next) {
    lru_destroy(s);
    return NULL;
  }
  lru_reset(s);
  return s;
}

static void lru_on_hit(void *p, uint32_t slot, uint64_t key) {
  (void)key;
  lru_state *s = (lru_state *)p;
  if (!s->resident[slot] || s->list.head == slot) return;
  spill_cache_list_unlink(&s->list, s->prev, s->next, slot);
  spill_cache_list_push_head(&s->list, s->prev, s->next, slot);
}

static void lru_on_insert(void *p, uint32_t slot, uint64_t key) {
  (void)key;
  lru_state *s = (lru_state *)p;
  if (s->resident[slot]) spill_cache_list_unlink(&s->list, s->prev, s->next, slot);
  s->resident[slot] = 1;
  spill_cache_list_push_head(&s->list, s->prev, s->next, slot);
}

static void lru_on_evict(void *p, uint32_t slot, uint64_t key) {
  (void)key;
  lru_state *s = (lru_state *)p;
  if (!s->resident[slot]) return;
  spill_cache_list_unlink(&s->list, s->prev, s->next, slot);
  s->resident[slot] = 0;
}

static int64_t lru_choose_victim(void *p, uint64_t incoming_key, const uint8_t *evictable) {
  (void)incoming_key;
  lru_state *s = (lru_state *)p;
  uint32_t v = spill_cache_list_lru_evictable(&s->list, s->prev, evictable);
  return v == SPILL_CACHE_NIL ? -1 : (int64_t)v;
}

const spill_cache_policy spill_cache_policy_lru = {
    .name = "lru",
    .create = lru_create,
    .destroy = lru_destroy,
    .reset = lru_reset,
    .on_hit = lru_on_hit,
    .on_insert = lru_on_insert,
    .choose_victim = lru_choose_victim,
    .on_evict = lru_on_evict,
};
