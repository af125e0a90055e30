/* engine/cache/expert_cache.h: the bounded expert cache.
 *
 * Role: n_slots fixed-size slots of memory, each holding one expert record,
 * keyed by (layer, expert). The streaming engine asks the cache for an expert;
 * on a miss it claims a slot (the policy picks a victim among unpinned, ready
 * entries), reads the record into the slot with O_DIRECT, marks it ready and
 * releases it. The cache knows nothing of the container format, the model or
 * I/O; replacement decisions are delegated to a spill_cache_policy
 * (cache_policy.h), which the trace replayer also drives through
 * spill_cache_access without any slot memory.
 *
 * Contract (SQLite pcache style): every successful get / claim / acquire
 * returns an entry pinned once; the caller calls spill_cache_release exactly
 * once for it. Pinned entries are never evicted and their memory never moves.
 * Counters are plain integers updated under the cache lock: deterministic for
 * a given call sequence. Depends on engine/base only.
 *
 * Thread safety: unless SPILL_CACHE_F_NOLOCK is set, every call takes one
 * internal mutex for a short, allocation-free critical section (hash lookup +
 * policy update); it is never held across I/O, so the compute thread and I/O
 * completion handlers may call any function concurrently. The entry's data
 * memory is the caller's to synchronise: the cache only guarantees a pinned
 * slot is not reused. spill_cache_init/free/resize must not race other calls.
 */
#ifndef SPILL_CACHE_EXPERT_CACHE_H
#define SPILL_CACHE_EXPERT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/cache/cache_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_CACHE_ALIGN 4096u

/* Keys pack (layer, expert) as layer << 32 | expert. */
static inline uint64_t spill_cache_key(uint32_t layer, uint32_t expert) {
  return ((uint64_t)layer << 32) | expert;
}
static inline uint32_t spill_cache_key_layer(uint64_t key) { return (uint32_t)(key >> 32); }
static inline uint32_t spill_cache_key_expert(uint64_t key) { return (uint32_t)key; }

/* Config flags. */
#define SPILL_CACHE_F_NOLOCK 1u /* no mutex: single-threaded use (simulator) */

typedef struct spill_cache_config {
  uint32_t n_slots;   /* >= 1 */
  size_t slot_bytes;  /* bytes per slot; 0 = simulation mode, no slot memory */
  /* Optional caller-owned memory of n_slots * slot_bytes bytes, aligned to
   * SPILL_CACHE_ALIGN, outliving the cache. NULL: the cache allocates it with
   * spill_alloc (zeroed, 4096-aligned) and frees it. */
  void *memory;
  const char *policy; /* "lru" | "lfru" | "wtinylfu"; NULL means "lru" */
  uint64_t seed;      /* PRNG / hash seed of the policy */
  unsigned flags;     /* SPILL_CACHE_F_* */
} spill_cache_config;

/* What a caller sees of an entry. Read-only for the caller; valid while the
 * entry is pinned. */
typedef struct spill_cache_entry {
  void *data;      /* slot memory: slot_bytes, 4096-aligned; NULL in simulation mode */
  uint64_t key;    /* spill_cache_key(layer, expert) */
  uint32_t layer;
  uint32_t expert;
  uint32_t slot;   /* 0..n_slots-1 */
} spill_cache_entry;

typedef struct spill_cache spill_cache;

/* Outcome of spill_cache_claim / spill_cache_acquire / spill_cache_access.
 * These are results, not errors: none of them is a spill_status. */
typedef enum spill_cache_outcome {
  SPILL_CACHE_HIT = 0,        /* key resident; acquire: *out pinned (maybe still loading) */
  SPILL_CACHE_INSERTED = 1,   /* key was absent: *out pinned, LOADING; fill, then ready */
  SPILL_CACHE_PRESENT = 2,    /* claim only: key already resident (or loading); *out NULL,
                                 nothing pinned or counted */
  SPILL_CACHE_ALL_PINNED = 3, /* key absent and no slot is evictable: *out NULL; read
                                 into a bounce buffer instead */
  SPILL_CACHE_BYPASSED = 4,   /* demand claim of an absent key the policy declined to
                                 cache (cache_policy.h admit): *out NULL; read into a
                                 bounce buffer */
} spill_cache_outcome;

/* Claim flags. */
#define SPILL_CACHE_SPECULATIVE 1u /* a prefetch, not a demand access */

/* State of an entry, for spill_cache_entry_state. */
typedef enum spill_cache_state {
  SPILL_CACHE_LOADING = 0, /* claimed, data not yet in */
  SPILL_CACHE_READY = 1,   /* data loaded */
  SPILL_CACHE_FAILED = 2,  /* its load was discarded; data is garbage */
} spill_cache_state;

typedef struct spill_cache_counters {
  uint64_t demand_hits;         /* demand accesses that found the key resident */
  uint64_t demand_hits_loading; /* ... of which the entry was still LOADING */
  uint64_t demand_misses;       /* demand accesses that did not */
  uint64_t spec_issued;         /* successful speculative claims */
  uint64_t spec_used;           /* speculative entries later hit by demand */
  uint64_t spec_wasted;         /* speculative entries evicted/dropped never used */
  uint64_t bytes_inserted_demand; /* bytes passed to ready (0 -> slot_bytes) */
  uint64_t bytes_inserted_spec;
  uint64_t bytes_inserted_preload; /* ... of entries claimed by spill_cache_claim_run */
  uint64_t preloaded;           /* entries claimed by spill_cache_claim_run */
  uint64_t evictions;           /* entries evicted to make room */
  uint64_t all_pinned;          /* claims that found no evictable slot */
  uint64_t bypassed;            /* demand claims the policy declined to cache */
} spill_cache_counters;

/* Creates a cache. On success *out is owned by the caller (spill_cache_free).
 * Errors: SPILL_E_INVALID_ARG (n_slots 0, unaligned memory, unknown policy
 * name, overflow of n_slots * slot_bytes), SPILL_E_NOMEM. err may be NULL. */
int spill_cache_init(spill_cache **out, const spill_cache_config *cfg, spill_err *err);
/* Frees the cache and, if it allocated them, the slots. Accepts NULL. No
 * entry may be in use. */
void spill_cache_free(spill_cache *c);

/* Demand lookup. Resident (ready or loading): returns the entry pinned and
 * counts a demand hit (and spec_used on the first demand use of a prefetched
 * entry). Absent: returns NULL and counts a demand miss; the caller then
 * claims. Never evicts. */
spill_cache_entry *spill_cache_get(spill_cache *c, uint32_t layer, uint32_t expert);

/* Reserves a slot for an absent key, evicting per policy if no slot is free.
 * Returns SPILL_CACHE_INSERTED with *out pinned and LOADING (counted as
 * spec_issued when flags has SPILL_CACHE_SPECULATIVE), SPILL_CACHE_PRESENT if
 * the key is already resident (e.g. a racing prefetch; a demand caller then
 * calls get again), SPILL_CACHE_ALL_PINNED, or (a demand claim with every
 * slot occupied) SPILL_CACHE_BYPASSED when the policy declines to cache the
 * key; prefetches are never declined. Does not count hits/misses:
 * the preceding get did. */
int spill_cache_claim(spill_cache *c, uint32_t layer, uint32_t expert, unsigned flags,
                      spill_cache_entry **out);

/* get-or-claim under one lock, for demand accesses: HIT (pinned entry, maybe
 * LOADING), INSERTED (pinned, LOADING: fill then ready), ALL_PINNED or
 * BYPASSED (NULL).
 * Counts exactly one demand hit or miss. */
int spill_cache_acquire(spill_cache *c, uint32_t layer, uint32_t expert, spill_cache_entry **out);

/* Marks a LOADING entry READY. bytes is the record size actually loaded, for
 * the byte counters; 0 means slot_bytes. The caller still holds its pin.
 * Returns SPILL_OK, or SPILL_E_INVALID_ARG if the entry is not LOADING. */
int spill_cache_ready(spill_cache *c, spill_cache_entry *e, uint64_t bytes);

/* Abandons a LOADING entry whose read failed: the key is removed at once (new
 * lookups miss), the slot is reused when the last pin goes. Other holders see
 * SPILL_CACHE_FAILED. Does not release the caller's pin. */
int spill_cache_discard(spill_cache *c, spill_cache_entry *e);

/* Drops one pin taken by get/claim/acquire. Releasing a LOADING entry's last
 * pin without ready() discards it. Accepts NULL. */
void spill_cache_release(spill_cache *c, spill_cache_entry *e);

/* spill_cache_state of a pinned entry (LOADING / READY / FAILED). */
int spill_cache_entry_state(spill_cache *c, const spill_cache_entry *e);

/* 1 if key is resident (ready or loading), without pinning or counting. */
int spill_cache_contains(spill_cache *c, uint32_t layer, uint32_t expert);

/* Simulation / one-shot access: acquire (or, with SPILL_CACHE_SPECULATIVE, a
 * prefetch claim) then ready(bytes) and release, under one lock. Returns the
 * outcome (HIT, INSERTED, PRESENT for a prefetch of a resident key,
 * ALL_PINNED). Counts exactly like the separate calls. */
int spill_cache_access(spill_cache *c, uint32_t layer, uint32_t expert, unsigned flags,
                       uint64_t bytes);

/* Bulk insert for a preload (engine/stream's spill_stream_preload): claims
 * the keys (layer, first), (layer, first + 1), ... into consecutive free
 * slots, so their data is one contiguous range of k * slot_bytes that one
 * read can fill (out[i]->data == out[0]->data + i * slot_bytes). Stops at
 * max, at the first key already resident, or where the next free slot is not
 * adjacent to the last (a fresh or cleared cache hands out free slots in
 * index order, so runs are long there). Never evicts and never asks the
 * policy to admit; the policy sees each insert. Counted as `preloaded`, not
 * as a demand access or a prefetch; ready() adds the bytes to
 * bytes_inserted_preload. out[0..k) are pinned and LOADING: ready (or
 * discard), then release each, as after a claim. Returns k (0: no free slot,
 * or the first key is resident). */
uint32_t spill_cache_claim_run(spill_cache *c, uint32_t layer, uint32_t first, uint32_t max,
                               spill_cache_entry **out);

/* Counter snapshot and reset. */
void spill_cache_get_counters(spill_cache *c, spill_cache_counters *out);
void spill_cache_reset_counters(spill_cache *c);

/* Drops every unpinned entry (not counted as evictions; unused prefetches
 * count as spec_wasted before a reset). Policy history is forgotten when no
 * pinned entry remains. flags: SPILL_CACHE_CLEAR_COUNTERS also resets them. */
#define SPILL_CACHE_CLEAR_COUNTERS 1u
void spill_cache_clear(spill_cache *c, unsigned flags);

/* Changes n_slots in place: drops every entry and the policy state, reallocates
 * slot memory (memory: new caller-owned memory, or NULL to let the cache
 * allocate; ignored in simulation mode). Fails with SPILL_E_INVALID_ARG if any
 * entry is pinned or n_slots is 0, SPILL_E_NOMEM (the cache is then unchanged).
 * flags: SPILL_CACHE_CLEAR_COUNTERS. */
int spill_cache_resize(spill_cache *c, uint32_t n_slots, void *memory, unsigned flags,
                       spill_err *err);

/* Introspection. */
uint32_t spill_cache_n_slots(const spill_cache *c);
uint32_t spill_cache_n_resident(spill_cache *c); /* entries in the map */

#ifdef __cplusplus
}
#endif
#endif
