/* engine/cache/cache_policy.h: the replacement-policy interface of the expert
 * cache, plus small helpers shared by the policies (hash, seeded PRNG,
 * intrusive slot lists).
 *
 * Role: a policy decides which occupied slot to give up when the cache needs
 * room. It sees only slot indices (0..n_slots-1) and 64-bit keys; it never
 * touches slot memory, never locks, never allocates after create, and is fully
 * deterministic for a given seed and call sequence. The same code therefore
 * runs inside the streaming engine (called by spill_cache under its mutex)
 * and inside the trace replayer (single-threaded, no slot memory).
 *
 * Invariants the cache guarantees to a policy: on_insert(s) is only called for
 * a slot that is not resident in the policy; on_hit/on_evict only for resident
 * slots; choose_victim is only called when every slot is occupied, and
 * evictable[s] != 0 implies slot s is resident. Depends on libc only.
 */
#ifndef SPILL_CACHE_CACHE_POLICY_H
#define SPILL_CACHE_CACHE_POLICY_H

#include <stdint.h>

#include "engine/base/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_cache_policy {
  const char *name; /* "lru", "lfru", "wtinylfu", ... (spill_cache_policy_names) */
  /* Creates state for n_slots (>= 1) slots, deterministic in seed; NULL on
   * allocation failure. The caller owns the state; destroy accepts NULL. */
  void *(*create)(uint32_t n_slots, uint64_t seed);
  void (*destroy)(void *st);
  /* Forgets every resident slot and all history, reseeds: as if just created. */
  void (*reset)(void *st);
  /* A demand hit (or the first demand use of a prefetched entry) on slot. */
  void (*on_hit)(void *st, uint32_t slot, uint64_t key);
  /* key now occupies slot (a miss or a prefetch filled it). */
  void (*on_insert)(void *st, uint32_t slot, uint64_t key);
  /* Picks the slot to free so that incoming_key can be inserted. Only slots
   * with evictable[slot] != 0 may be returned; -1 if there is none. Does not
   * remove the slot: the cache then calls on_evict on it. */
  int64_t (*choose_victim)(void *st, uint64_t incoming_key, const uint8_t *evictable);
  /* slot leaves the cache (eviction, clear or a discarded load). */
  void (*on_evict)(void *st, uint32_t slot, uint64_t key);
  /* Optional (NULL: every miss is admitted). Asked on a demand miss of key
   * when every slot is occupied, before choose_victim: 0 refuses to cache
   * key (the caller reads it into a bounce buffer, the cache counts it as
   * bypassed and no slot changes), nonzero admits it. A refusing policy has
   * recorded the access itself (no on_insert follows); asking again for the
   * same key before any other access must give the same answer and record
   * nothing more (the engine re-claims deferred reads). evictable as for
   * choose_victim. */
  int (*admit)(void *st, uint64_t key, const uint8_t *evictable);
} spill_cache_policy;

/* The built-in policies. */
extern const spill_cache_policy spill_cache_policy_lru;
extern const spill_cache_policy spill_cache_policy_lfru;
extern const spill_cache_policy spill_cache_policy_wtinylfu;
extern const spill_cache_policy spill_cache_policy_nextuse;       /* policy_nextuse.c */
extern const spill_cache_policy spill_cache_policy_nextuse_coact; /* policy_nextuse.c */
extern const spill_cache_policy spill_cache_policy_nextuse_opt;   /* policy_nextuse.c */
extern const spill_cache_policy spill_cache_policy_arc;           /* policy_scan.c */
extern const spill_cache_policy spill_cache_policy_s3fifo;        /* policy_scan.c */
extern const spill_cache_policy spill_cache_policy_gap_hd;        /* policy_gap.c */
extern const spill_cache_policy spill_cache_policy_mix_hd_opt;    /* policy_mix.c */

/* Policy by name ("lru", "lfru", "wtinylfu", "nextuse", "nextuse-coact", "nextuse-opt",
 * "arc", "s3fifo", "gap-hd", "mix-hd-opt"); NULL if unknown. */
const spill_cache_policy *spill_cache_policy_find(const char *name);
/* NULL-terminated list of the built-in policy names, for help texts. */
const char *const *spill_cache_policy_names(void);

/* ---- helpers shared by the policies (header-only, no state) ---- */

#define SPILL_CACHE_NIL UINT32_MAX

/* A strong 64-bit mixer (splitmix64's finaliser): keys are dense small
 * integers, so every hash in the cache goes through it. */
static inline uint64_t spill_cache_mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* splitmix64 (engine/base/rng.h): a tiny deterministic PRNG; state is one
 * uint64_t. */
static inline uint64_t spill_cache_rng_next(uint64_t *state) { return spill_rng_splitmix(state); }

/* Uniform integer in [0, n) (n >= 1), Lemire's multiply-shift. */
static inline uint32_t spill_cache_rng_below(uint64_t *state, uint32_t n) {
  return (uint32_t)(((spill_cache_rng_next(state) >> 32) * (uint64_t)n) >> 32);
}

/* The token clock of the MoE-aware policies (nextuse, gap-hd): a decode
 * step touches layers 0..L-1 in order, so a new token starts when the layer
 * of an access falls below the current token's highest layer by more than
 * the lookahead slack (prefetches run up to 2 layers ahead of demand; no
 * slack until 5 layers have been seen). */
typedef struct spill_cache_token_clock {
  uint64_t tok;       /* tokens started so far */
  uint32_t hi_layer;  /* highest layer seen in the current token */
  uint32_t max_layer; /* highest layer ever seen */
  uint32_t cur_layer; /* layer of the last access */
  int seen_any;
} spill_cache_token_clock;

/* Advances the clock on an access of layer l; 1 if a new token started. */
static inline int spill_cache_token_tick(spill_cache_token_clock *c, uint32_t l) {
  int started = 0;
  if (!c->seen_any) {
    c->seen_any = 1;
    c->hi_layer = c->max_layer = c->cur_layer = l;
    return 0;
  }
  uint32_t slack = c->max_layer >= 4 ? 2 : 0;
  if (l < c->hi_layer && c->hi_layer - l > slack) {
    c->tok++;
    c->hi_layer = l;
    started = 1;
  }
  if (l > c->hi_layer) c->hi_layer = l;
  if (l > c->max_layer) c->max_layer = l;
  c->cur_layer = l;
  return started;
}

/* Doubly-linked list of slots threaded through caller-owned prev/next arrays
 * (a slot is in at most one list at a time). head is the most recent end. */
typedef struct spill_cache_list {
  uint32_t head, tail, size;
} spill_cache_list;

static inline void spill_cache_list_init(spill_cache_list *l) {
  l->head = l->tail = SPILL_CACHE_NIL;
  l->size = 0;
}

static inline void spill_cache_list_push_head(spill_cache_list *l, uint32_t *prev,
                                              uint32_t *next, uint32_t s) {
  prev[s] = SPILL_CACHE_NIL;
  next[s] = l->head;
  if (l->head != SPILL_CACHE_NIL) prev[l->head] = s;
  l->head = s;
  if (l->tail == SPILL_CACHE_NIL) l->tail = s;
  l->size++;
}

static inline void spill_cache_list_unlink(spill_cache_list *l, uint32_t *prev, uint32_t *next,
                                           uint32_t s) {
  if (prev[s] != SPILL_CACHE_NIL) next[prev[s]] = next[s];
  else l->head = next[s];
  if (next[s] != SPILL_CACHE_NIL) prev[next[s]] = prev[s];
  else l->tail = prev[s];
  prev[s] = next[s] = SPILL_CACHE_NIL;
  l->size--;
}

/* First evictable slot walking from the tail (least recent) towards the
 * head, or SPILL_CACHE_NIL. Cost: 1 + the number of pinned slots skipped. */
static inline uint32_t spill_cache_list_lru_evictable(const spill_cache_list *l,
                                                      const uint32_t *prev,
                                                      const uint8_t *evictable) {
  for (uint32_t s = l->tail; s != SPILL_CACHE_NIL; s = prev[s])
    if (evictable[s]) return s;
  return SPILL_CACHE_NIL;
}

#ifdef __cplusplus
}
#endif
#endif
