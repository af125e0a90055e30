/* engine/cache/policy_scan.c: two scan-resistant policies from CPU/web
 * caching, for the expert cache: "arc" (Megiddo & Modha, FAST 2003) and
 * "s3fifo" (Yang et al., SOSP 2023).
 *
 * arc keeps two LRU lists of residents, T1 (seen once recently) and T2 (seen
 * at least twice), and two ghost lists of evicted keys, B1 and B2. A miss
 * that finds its key in B1 grows the target size p of T1, one in B2 shrinks
 * it; the victim comes from T1 while T1 is above p, else from T2. A scan of
 * one-time keys only cycles through T1, so T2's keys survive it.
 *
 * s3fifo keeps a small FIFO S (10% of the slots), a main FIFO M and a ghost
 * FIFO G of keys evicted from S. Misses enter S (or M when G remembers
 * them); a key leaving S that was hit while there moves to M, else it is
 * evicted into G. M is a CLOCK: a key with hits left gets a second chance.
 *
 * Both see only the cache's calls (cache_policy.h); pinned slots are passed
 * over. Ghost lists are bounded by the slot count and hashed (O(1) lookups).
 * No PRNG: the seed is ignored. Single-threaded.
 */
#include <stdlib.h>

#include "engine/cache/cache_policy.h"

/* ------------------------------------------------------- ghost key lists */

/* Up to cap keys in n_lists LRU/FIFO lists (head = newest), hashed. */
typedef struct ghost_set {
  uint32_t cap, n_buckets; /* n_buckets: power of two >= 2 cap */
  uint64_t *key;           /* (cap) */
  uint32_t *prev, *next;   /* (cap) list links */
  uint32_t *hnext;         /* (cap) hash chain */
  uint8_t *list;           /* (cap) which list a node is in */
  uint32_t *bucket;        /* (n_buckets) first node, NIL if none */
  uint32_t *free_stack, n_free;
  spill_cache_list lists[2];
} ghost_set;

static void ghost_reset(ghost_set *g) {
  for (uint32_t b = 0; b < g->n_buckets; b++) g->bucket[b] = SPILL_CACHE_NIL;
  g->n_free = 0;
  for (uint32_t i = g->cap; i-- > 0;) g->free_stack[g->n_free++] = i;
  spill_cache_list_init(&g->lists[0]);
  spill_cache_list_init(&g->lists[1]);
}

static void ghost_free(ghost_set *g) {
  free(g->key);
  free(g->prev);
  free(g->next);
  free(g->hnext);
  free(g->list);
  free(g->bucket);
  free(g->free_stack);
}

static int ghost_alloc(ghost_set *g, uint32_t cap) {
  g->cap = cap;
  g->n_buckets = 1;
  while (g->n_buckets < 2 * cap) g->n_buckets <<= 1;
  g->key = (uint64_t *)calloc(cap, sizeof(uint64_t));
  g->prev = (uint32_t *)calloc(cap, sizeof(uint32_t));
  g->next = (uint32_t *)calloc(cap, sizeof(uint32_t));
  g->hnext = (uint32_t *)calloc(cap, sizeof(uint32_t));
  g->list = (uint8_t *)calloc(cap, 1);
  g->bucket = (uint32_t *)calloc(g->n_buckets, sizeof(uint32_t));
  g->free_stack = (uint32_t *)calloc(cap, sizeof(uint32_t));
  if (!g->key || !g->prev || !g->next || !g->hnext || !g->list || !g->bucket || !g->free_stack)
    return -1;
  ghost_reset(g);
  return 0;
}

static uint32_t ghost_hash(const ghost_set *g, uint64_t key) {
  return (uint32_t)(spill_cache_mix64(key) & (g->n_buckets - 1));
}

/* Node holding key, or NIL. */
static uint32_t ghost_find(const ghost_set *g, uint64_t key) {
  for (uint32_t i = g->bucket[ghost_hash(g, key)]; i != SPILL_CACHE_NIL; i = g->hnext[i])
    if (g->key[i] == key) return i;
  return SPILL_CACHE_NIL;
}

static void ghost_remove(ghost_set *g, uint32_t i) {
  uint32_t *pp = &g->bucket[ghost_hash(g, g->key[i])];
  while (*pp != i) pp = &g->hnext[*pp];
  *pp = g->hnext[i];
  spill_cache_list_unlink(&g->lists[g->list[i]], g->prev, g->next, i);
  g->free_stack[g->n_free++] = i;
}

/* Adds key at the head of list l; when full, the oldest node of list
 * (l's own if it has any, else the other) makes room. */
static void ghost_push(ghost_set *g, int l, uint64_t key) {
  if (g->cap == 0) return;
  if (g->n_free == 0) ghost_remove(g, g->lists[l].size ? g->lists[l].tail : g->lists[!l].tail);
  uint32_t i = g->free_stack[--g->n_free];
  g->key[i] = key;
  g->list[i] = (uint8_t)l;
  uint32_t h = ghost_hash(g, key);
  g->hnext[i] = g->bucket[h];
  g->bucket[h] = i;
  spill_cache_list_push_head(&g->lists[l], g->prev, g->next, i);
}

/* ------------------------------------------------------------------- arc */

typedef struct arc_state {
  uint32_t n_slots;
  uint32_t p;        /* target size of T1 */
  uint8_t *where;    /* (n_slots) 0 = absent, 1 = T1, 2 = T2 */
  uint32_t *prev, *next;
  spill_cache_list t[2]; /* T1, T2 */
  ghost_set g;           /* list 0 = B1, list 1 = B2, n_slots keys in all */
  uint64_t adapted_key;  /* choose_victim already adapted p for this key */
  int adapted;
} arc_state;

static void arc_reset(void *st) {
  arc_state *s = (arc_state *)st;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->where[i] = 0;
    s->prev[i] = s->next[i] = SPILL_CACHE_NIL;
  }
  spill_cache_list_init(&s->t[0]);
  spill_cache_list_init(&s->t[1]);
  ghost_reset(&s->g);
  s->p = 0;
  s->adapted = 0;
}

static void arc_destroy(void *st) {
  arc_state *s = (arc_state *)st;
  if (!s) return;
  free(s->where);
  free(s->prev);
  free(s->next);
  ghost_free(&s->g);
  free(s);
}

static void *arc_create(uint32_t n_slots, uint64_t seed) {
  (void)seed;
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 2)) return NULL;
  arc_state *s = (arc_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->where = (uint8_t *)calloc(n_slots, 1);
  s->prev = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->next = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  if (!s->where || !s->prev || !s->next || ghost_alloc(&s->g, n_slots)) {
    arc_destroy(s);
    return NULL;
  }
  arc_reset(s);
  return s;
}

/* ARC's adaptation on a miss of key: a B1 ghost hit grows p, a B2 one
 * shrinks it, each by the ratio of the ghost lists' sizes (at least 1). */
static void arc_adapt(arc_state *s, uint64_t key) {
  uint32_t i = ghost_find(&s->g, key);
  if (i == SPILL_CACHE_NIL) return;
  uint32_t b1 = s->g.lists[0].size, b2 = s->g.lists[1].size;
  if (s->g.list[i] == 0) {
    uint32_t d = b1 >= b2 ? 1 : b2 / b1;
    s->p = s->p + d > s->n_slots ? s->n_slots : s->p + d;
  } else {
    uint32_t d = b2 >= b1 ? 1 : b1 / b2;
    s->p = s->p > d ? s->p - d : 0;
  }
}

static void arc_on_hit(void *st, uint32_t slot, uint64_t key) {
  (void)key;
  arc_state *s = (arc_state *)st;
  if (!s->where[slot]) return;
  spill_cache_list_unlink(&s->t[s->where[slot] - 1], s->prev, s->next, slot);
  s->where[slot] = 2;
  spill_cache_list_push_head(&s->t[1], s->prev, s->next, slot);
}

static void arc_on_insert(void *st, uint32_t slot, uint64_t key) {
  arc_state *s = (arc_state *)st;
  if (s->where[slot]) return;
  if (!(s->adapted && s->adapted_key == key)) arc_adapt(s, key);
  s->adapted = 0;
  uint32_t i = ghost_find(&s->g, key);
  int t = 0;
  if (i != SPILL_CACHE_NIL) {
    ghost_remove(&s->g, i);
    t = 1; /* seen before, recently: frequent */
  }
  s->where[slot] = (uint8_t)(t + 1);
  spill_cache_list_push_head(&s->t[t], s->prev, s->next, slot);
}

static int64_t arc_choose_victim(void *st, uint64_t incoming_key, const uint8_t *evictable) {
  arc_state *s = (arc_state *)st;
  if (!(s->adapted && s->adapted_key == incoming_key)) {
    arc_adapt(s, incoming_key);
    s->adapted = 1;
    s->adapted_key = incoming_key;
  }
  uint32_t g = ghost_find(&s->g, incoming_key);
  int in_b2 = g != SPILL_CACHE_NIL && s->g.list[g] == 1;
  uint32_t t1 = s->t[0].size;
  int from = (t1 > 0 && (t1 > s->p || (in_b2 && t1 == s->p))) ? 0 : 1;
  uint32_t v = spill_cache_list_lru_evictable(&s->t[from], s->prev, evictable);
  if (v == SPILL_CACHE_NIL) v = spill_cache_list_lru_evictable(&s->t[!from], s->prev, evictable);
  return v == SPILL_CACHE_NIL ? -1 : (int64_t)v;
}

static void arc_on_evict(void *st, uint32_t slot, uint64_t key) {
  arc_state *s = (arc_state *)st;
  if (!s->where[slot]) return;
  int t = s->where[slot] - 1;
  spill_cache_list_unlink(&s->t[t], s->prev, s->next, slot);
  s->where[slot] = 0;
  /* ARC bounds |T1| + |B1| by the slot count: B1 drops its oldest first. */
  if (t == 0 && s->t[0].size + s->g.lists[0].size >= s->n_slots && s->g.lists[0].size)
    ghost_remove(&s->g, s->g.lists[0].tail);
  ghost_push(&s->g, t, key);
}

const spill_cache_policy spill_cache_policy_arc = {
    .name = "arc",
    .create = arc_create,
    .destroy = arc_destroy,
    .reset = arc_reset,
    .on_hit = arc_on_hit,
    .on_insert = arc_on_insert,
    .choose_victim = arc_choose_victim,
    .on_evict = arc_on_evict,
};

/* ---------------------------------------------------------------- s3fifo */

#define S3_FREQ_MAX 3

typedef struct s3_state {
  uint32_t n_slots, small_cap;
  uint8_t *where; /* (n_slots) 0 = absent, 1 = S, 2 = M */
  uint8_t *freq;  /* (n_slots) hits since entering the queue, capped */
  uint32_t *prev, *next;
  spill_cache_list q[2]; /* S, M (head = newest) */
  ghost_set g;           /* list 0 only: keys evicted from S */
} s3_state;

static void s3_reset(void *st) {
  s3_state *s = (s3_state *)st;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->where[i] = s->freq[i] = 0;
    s->prev[i] = s->next[i] = SPILL_CACHE_NIL;
  }
  spill_cache_list_init(&s->q[0]);
  spill_cache_list_init(&s->q[1]);
  ghost_reset(&s->g);
}

static void s3_destroy(void *st) {
  s3_state *s = (s3_state *)st;
  if (!s) return;
  free(s->where);
  free(s->freq);
  free(s->prev);
  free(s->next);
  ghost_free(&s->g);
  free(s);
}

static void *s3_create(uint32_t n_slots, uint64_t seed) {
  (void)seed;
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 2)) return NULL;
  s3_state *s = (s3_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->small_cap = (n_slots + 5) / 10;
  if (s->small_cap < 1) s->small_cap = 1;
  s->where = (uint8_t *)calloc(n_slots, 1);
  s->freq = (uint8_t *)calloc(n_slots, 1);
  s->prev = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->next = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  if (!s->where || !s->freq || !s->prev || !s->next || ghost_alloc(&s->g, n_slots)) {
    s3_destroy(s);
    return NULL;
  }
  s3_reset(s);
  return s;
}

static void s3_on_hit(void *st, uint32_t slot, uint64_t key) {
  (void)key;
  s3_state *s = (s3_state *)st;
  if (s->where[slot] && s->freq[slot] < S3_FREQ_MAX) s->freq[slot]++;
}

static void s3_on_insert(void *st, uint32_t slot, uint64_t key) {
  s3_state *s = (s3_state *)st;
  if (s->where[slot]) return;
  uint32_t i = ghost_find(&s->g, key);
  int q = 0;
  if (i != SPILL_CACHE_NIL) {
    ghost_remove(&s->g, i);
    q = 1;
  }
  s->where[slot] = (uint8_t)(q + 1);
  s->freq[slot] = 0;
  spill_cache_list_push_head(&s->q[q], s->prev, s->next, slot);
}

static void s3_move(s3_state *s, uint32_t slot, int to) {
  spill_cache_list_unlink(&s->q[s->where[slot] - 1], s->prev, s->next, slot);
  s->where[slot] = (uint8_t)(to + 1);
  spill_cache_list_push_head(&s->q[to], s->prev, s->next, slot);
}

/* The FIFO pass of S3-FIFO over queue q: returns the first evictable key at
 * the tail without hits; keys with hits move on (S -> M) or get a second
 * chance in M (a hit spent). Pinned keys rotate to the head unchanged. At
 * most one pass over the queue's entries plus their hits. */
static uint32_t s3_pass(s3_state *s, int q, const uint8_t *evictable) {
  uint32_t budget = s->q[q].size * (S3_FREQ_MAX + 1) + 1;
  while (s->q[q].size && budget--) {
    uint32_t v = s->q[q].tail;
    if (!evictable[v]) {
      s3_move(s, v, q);
      continue;
    }
    if (s->freq[v] == 0) return v;
    if (q == 0) {
      s->freq[v] = 0;
      s3_move(s, v, 1);
    } else {
      s->freq[v]--;
      s3_move(s, v, 1);
    }
  }
  return SPILL_CACHE_NIL;
}

static int64_t s3_choose_victim(void *st, uint64_t incoming_key, const uint8_t *evictable) {
  (void)incoming_key;
  s3_state *s = (s3_state *)st;
  uint32_t v = SPILL_CACHE_NIL;
  if (s->q[0].size >= s->small_cap || s->q[1].size == 0) v = s3_pass(s, 0, evictable);
  if (v == SPILL_CACHE_NIL) v = s3_pass(s, 1, evictable);
  if (v == SPILL_CACHE_NIL) v = s3_pass(s, 0, evictable);
  if (v == SPILL_CACHE_NIL) { /* every evictable key still had hits: oldest of either */
    v = spill_cache_list_lru_evictable(&s->q[1], s->prev, evictable);
    if (v == SPILL_CACHE_NIL) v = spill_cache_list_lru_evictable(&s->q[0], s->prev, evictable);
  }
  return v == SPILL_CACHE_NIL ? -1 : (int64_t)v;
}

static void s3_on_evict(void *st, uint32_t slot, uint64_t key) {
  s3_state *s = (s3_state *)st;
  if (!s->where[slot]) return;
  int q = s->where[slot] - 1;
  spill_cache_list_unlink(&s->q[q], s->prev, s->next, slot);
  s->where[slot] = 0;
  if (q == 0) ghost_push(&s->g, 0, key);
}

const spill_cache_policy spill_cache_policy_s3fifo = {
    .name = "s3fifo",
    .create = s3_create,
    .destroy = s3_destroy,
    .reset = s3_reset,
    .on_hit = s3_on_hit,
    .on_insert = s3_on_insert,
    .choose_victim = s3_choose_victim,
    .on_evict = s3_on_evict,
};
