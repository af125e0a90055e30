/* engine/cache/expert_cache.c: slots, key map, pins and counters of the
 * expert cache (the mechanism); victims are chosen by a spill_cache_policy.
 *
 * Data structures, all sized at init/resize and never allocated per call:
 * - slots[n_slots]: public entry + pin count + state + speculative bit;
 * - map: open addressing with linear probing over slot indices, capacity a
 *   power of two >= 2 * n_slots, deletion by backward shift (no tombstones),
 *   so lookups stay O(1) however long the run;
 * - free stack of unoccupied slots (popped lowest index first, so a fresh or
 *   cleared cache fills slots in a fixed order: determinism);
 * - evictable[n_slots]: 1 iff the slot is in the map, READY and unpinned;
 *   it is what the policy may pick from.
 * A slot whose load was discarded leaves the map at once but is only reused
 * when its last pin is released. One mutex guards everything (see header).
 */
#include "engine/cache/expert_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"

enum { SLOT_FREE = 0, SLOT_LOADING = 1, SLOT_READY = 2, SLOT_FAILED = 3 };

typedef struct cache_slot {
  spill_cache_entry pub; /* first member: entry pointers are slot pointers */
  uint32_t pins;
  uint8_t state;     /* SLOT_* */
  uint8_t spec;      /* prefetched and not yet used by demand */
  uint8_t spec_load; /* claimed speculatively (byte counters) */
  uint8_t pre_load;  /* claimed by spill_cache_claim_run (byte counters) */
  uint8_t in_map;
} cache_slot;

/* Everything whose size depends on n_slots: swapped as a unit by resize. */
typedef struct cache_store {
  uint32_t n_slots;
  void *memory; /* n_slots * slot_bytes, or NULL in simulation mode */
  size_t memory_bytes;
  int owns_memory;
  cache_slot *slots;   /* (n_slots) */
  uint8_t *evictable;  /* (n_slots) */
  uint32_t *free_stack; /* (n_slots) */
  uint32_t n_free;
  int32_t *map;        /* (map_mask + 1) slot index or -1 */
  uint32_t map_mask;
  void *pst;           /* policy state */
} cache_store;

struct spill_cache {
  size_t slot_bytes;
  const spill_cache_policy *pol;
  uint64_t seed;
  unsigned flags;
  cache_store st;
  uint32_t n_resident;
  spill_cache_counters ctr;
  pthread_mutex_t mu;
};

/* ---------------------------------------------------------------- policies */

static const spill_cache_policy *const k_policies[] = {
    &spill_cache_policy_lru, &spill_cache_policy_lfru, &spill_cache_policy_wtinylfu,
    &spill_cache_policy_nextuse, &spill_cache_policy_nextuse_coact,
    &spill_cache_policy_nextuse_opt, &spill_cache_policy_arc, &spill_cache_policy_s3fifo,
    &spill_cache_policy_gap_hd, &spill_cache_policy_mix_hd_opt};
static const char *const k_policy_names[] = {"lru",           "lfru",        "wtinylfu", "nextuse",
                                             "nextuse-coact", "nextuse-opt", "arc",     "s3fifo",   "gap-hd", "mix-hd-opt", NULL};

const spill_cache_policy *spill_cache_policy_find(const char *name) {
  if (!name) return NULL;
  for (size_t i = 0; i < sizeof(k_policies) / sizeof(k_policies[0]); i++)
    if (strcmp(k_policies[i]->name, name) == 0) return k_policies[i];
  return NULL;
}

const char *const *spill_cache_policy_names(void) { return k_policy_names; }

/* ------------------------------------------------------------------ locking */

static inline void cache_lock(spill_cache *c) {
  if (!(c->flags & SPILL_CACHE_F_NOLOCK)) pthread_mutex_lock(&c->mu);
}
static inline void cache_unlock(spill_cache *c) {
  if (!(c->flags & SPILL_CACHE_F_NOLOCK)) pthread_mutex_unlock(&c->mu);
}

/* -------------------------------------------------------------- store */

static void store_free(cache_store *s, const spill_cache_policy *pol) {
  if (s->pst) pol->destroy(s->pst);
  if (s->owns_memory) spill_free(s->memory, s->memory_bytes);
  free(s->slots);
  free(s->evictable);
  free(s->free_stack);
  free(s->map);
  memset(s, 0, sizeof(*s));
}

static void store_rebuild_free_stack(cache_store *s) {
  s->n_free = 0;
  for (uint32_t i = s->n_slots; i-- > 0;)
    if (s->slots[i].state == SLOT_FREE) s->free_stack[s->n_free++] = i;
}

static int store_alloc(cache_store *s, uint32_t n_slots, size_t slot_bytes, void *memory,
                       const spill_cache_policy *pol, uint64_t seed, spill_err *err) {
  memset(s, 0, sizeof(*s));
  SPILL_FAIL_IF(err, n_slots == 0, SPILL_E_INVALID_ARG, "cache: n_slots must be >= 1");
  SPILL_FAIL_IF(err, n_slots > (UINT32_MAX >> 3), SPILL_E_INVALID_ARG,
                "cache: n_slots %u is too large", n_slots);
  s->n_slots = n_slots;
  if (slot_bytes > 0) {
    size_t total;
    SPILL_FAIL_IF(err, !spill_mul_size(slot_bytes, n_slots, &total), SPILL_E_INVALID_ARG,
                  "cache: %u slots x %zu bytes overflows", n_slots, slot_bytes);
    if (memory) {
      SPILL_FAIL_IF(err, ((uintptr_t)memory % SPILL_CACHE_ALIGN) != 0, SPILL_E_INVALID_ARG,
                    "cache: caller memory is not %u-byte aligned", SPILL_CACHE_ALIGN);
      s->memory = memory;
    } else {
      /* Zeroed on purpose: the slot RAM is committed at init, so a budget
       * that does not fit fails here rather than in the middle of a run. */
      s->memory = spill_alloc(total, SPILL_CACHE_ALIGN);
      if (!s->memory)
        return spill_err_set(err, SPILL_E_NOMEM, "cache: cannot allocate %zu bytes of slots",
                             total);
      s->owns_memory = 1;
    }
    s->memory_bytes = total;
  }
  uint32_t cap = 16;
  while (cap < 2 * n_slots) cap <<= 1;
  s->map_mask = cap - 1;
  s->slots = (cache_slot *)calloc(n_slots, sizeof(cache_slot));
  s->evictable = (uint8_t *)calloc(n_slots, 1);
  s->free_stack = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  s->map = (int32_t *)malloc((size_t)cap * sizeof(int32_t));
  s->pst = (s->slots && s->evictable && s->free_stack && s->map) ? pol->create(n_slots, seed)
                                                                 : NULL;
  if (!s->pst) {
    store_free(s, pol);
    return spill_err_set(err, SPILL_E_NOMEM, "cache: cannot allocate metadata for %u slots",
                         n_slots);
  }
  for (uint32_t i = 0; i < cap; i++) s->map[i] = -1;
  for (uint32_t i = 0; i < n_slots; i++) {
    cache_slot *sl = &s->slots[i];
    sl->pub.slot = i;
    sl->pub.data = s->memory ? (char *)s->memory + (size_t)i * slot_bytes : NULL;
  }
  store_rebuild_free_stack(s);
  return SPILL_OK;
}

/* -------------------------------------------------------------- key map */

static inline uint32_t map_home(const cache_store *s, uint64_t key) {
  return (uint32_t)(spill_cache_mix64(key) & s->map_mask);
}

static int32_t map_find(const cache_store *s, uint64_t key) {
  for (uint32_t i = map_home(s, key);; i = (i + 1) & s->map_mask) {
    int32_t v = s->map[i];
    if (v < 0) return -1;
    if (s->slots[v].pub.key == key) return v;
  }
}

static void map_insert(cache_store *s, uint64_t key, uint32_t slot) {
  uint32_t i = map_home(s, key);
  while (s->map[i] >= 0) i = (i + 1) & s->map_mask;
  s->map[i] = (int32_t)slot;
}

/* Backward-shift deletion keeps every probe chain contiguous. */
static void map_remove(cache_store *s, uint64_t key) {
  uint32_t i = map_home(s, key);
  while (s->map[i] >= 0 && s->slots[s->map[i]].pub.key != key) i = (i + 1) & s->map_mask;
  if (s->map[i] < 0) return;
  uint32_t hole = i;
  for (uint32_t j = (hole + 1) & s->map_mask; s->map[j] >= 0; j = (j + 1) & s->map_mask) {
    uint32_t home = map_home(s, s->slots[s->map[j]].pub.key);
    /* Move j into the hole unless its home lies cyclically in (hole, j]. */
    int stays = (hole <= j) ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      s->map[hole] = s->map[j];
      hole = j;
    }
  }
  s->map[hole] = -1;
}

/* ------------------------------------------------------- slot transitions */

static inline void slot_update_evictable(spill_cache *c, uint32_t i) {
  const cache_slot *sl = &c->st.slots[i];
  c->st.evictable[i] = (uint8_t)(sl->in_map && sl->state == SLOT_READY && sl->pins == 0);
}

/* Takes an in-map slot out of the map and the policy (eviction, clear,
 * discard). Counts an unused prefetch as wasted. Leaves state/pins alone. */
static void slot_unmap(spill_cache *c, uint32_t i) {
  cache_slot *sl = &c->st.slots[i];
  map_remove(&c->st, sl->pub.key);
  c->pol->on_evict(c->st.pst, i, sl->pub.key);
  sl->in_map = 0;
  if (sl->spec) c->ctr.spec_wasted++;
  sl->spec = 0;
  c->n_resident--;
  c->st.evictable[i] = 0;
}

static void slot_make_free(spill_cache *c, uint32_t i) {
  cache_slot *sl = &c->st.slots[i];
  sl->state = SLOT_FREE;
  sl->pins = 0;
  sl->spec_load = 0;
  sl->pre_load = 0;
  c->st.evictable[i] = 0;
  c->st.free_stack[c->st.n_free++] = i;
}

/* Demand use of a resident slot: pin, count, tell the policy. */
static spill_cache_entry *slot_demand_hit(spill_cache *c, uint32_t i) {
  cache_slot *sl = &c->st.slots[i];
  sl->pins++;
  c->ctr.demand_hits++;
  if (sl->state == SLOT_LOADING) c->ctr.demand_hits_loading++;
  if (sl->spec) {
    c->ctr.spec_used++;
    sl->spec = 0;
  }
  c->pol->on_hit(c->st.pst, i, sl->pub.key);
  c->st.evictable[i] = 0;
  return &sl->pub;
}

/* Finds a slot for an absent key (free, else a policy victim). -1 if none. */
static int64_t slot_for_insert(spill_cache *c, uint64_t key) {
  cache_store *s = &c->st;
  if (s->n_free > 0) return s->free_stack[--s->n_free];
  int64_t v = c->pol->choose_victim(s->pst, key, s->evictable);
  if (v < 0 || v >= (int64_t)s->n_slots || !s->evictable[v]) {
    /* A policy bug must not corrupt a pinned slot: fall back to any
     * evictable slot (v >= 0 here means the policy broke its contract). */
    v = -1;
    for (uint32_t i = 0; i < s->n_slots; i++)
      if (s->evictable[i]) {
        v = i;
        break;
      }
    if (v < 0) return -1;
  }
  slot_unmap(c, (uint32_t)v);
  c->ctr.evictions++;
  return v;
}

/* Puts absent key into slot v (free or just evicted): pinned once, LOADING,
 * in the map and the policy. */
static spill_cache_entry *slot_fill(spill_cache *c, uint32_t v, uint64_t key, int spec) {
  cache_slot *sl = &c->st.slots[v];
  sl->pub.key = key;
  sl->pub.layer = spill_cache_key_layer(key);
  sl->pub.expert = spill_cache_key_expert(key);
  sl->pins = 1;
  sl->state = SLOT_LOADING;
  sl->spec = (uint8_t)spec;
  sl->spec_load = (uint8_t)spec;
  sl->pre_load = 0;
  sl->in_map = 1;
  map_insert(&c->st, key, v);
  c->n_resident++;
  c->pol->on_insert(c->st.pst, v, key);
  c->st.evictable[v] = 0;
  return &sl->pub;
}

/* Claim under the lock; the key is known to be absent. */
static int claim_absent(spill_cache *c, uint64_t key, unsigned flags, spill_cache_entry **out) {
  if (c->st.n_free == 0 && !(flags & SPILL_CACHE_SPECULATIVE) && c->pol->admit &&
      !c->pol->admit(c->st.pst, key, c->st.evictable)) {
    c->ctr.bypassed++;
    *out = NULL;
    return SPILL_CACHE_BYPASSED;
  }
  int64_t v = slot_for_insert(c, key);
  if (v < 0) {
    c->ctr.all_pinned++;
    *out = NULL;
    return SPILL_CACHE_ALL_PINNED;
  }
  int spec = (flags & SPILL_CACHE_SPECULATIVE) != 0;
  *out = slot_fill(c, (uint32_t)v, key, spec);
  if (spec) c->ctr.spec_issued++;
  return SPILL_CACHE_INSERTED;
}

/* Resolves a caller's entry pointer to its slot, or NULL if it is not ours. */
static cache_slot *slot_of(spill_cache *c, const spill_cache_entry *e) {
  if (!e || e->slot >= c->st.n_slots) return NULL;
  cache_slot *sl = &c->st.slots[e->slot];
  return &sl->pub == e ? sl : NULL;
}

static int ready_locked(spill_cache *c, cache_slot *sl, uint64_t bytes) {
  if (sl->state != SLOT_LOADING || sl->pins == 0) return SPILL_E_INVALID_ARG;
  sl->state = SLOT_READY;
  if (bytes == 0) bytes = c->slot_bytes;
  if (sl->spec_load) c->ctr.bytes_inserted_spec += bytes;
  else if (sl->pre_load) c->ctr.bytes_inserted_preload += bytes;
  else c->ctr.bytes_inserted_demand += bytes;
  slot_update_evictable(c, sl->pub.slot);
  return SPILL_OK;
}

static void release_locked(spill_cache *c, cache_slot *sl) {
  if (sl->pins == 0) return; /* unbalanced release: ignore rather than underflow */
  if (--sl->pins > 0) return;
  uint32_t i = sl->pub.slot;
  if (sl->state == SLOT_LOADING) {
    slot_unmap(c, i);
    sl->state = SLOT_FAILED;
  }
  if (sl->state == SLOT_FAILED) slot_make_free(c, i);
  else slot_update_evictable(c, i);
}

/* ------------------------------------------------------------- public API */

int spill_cache_init(spill_cache **out, const spill_cache_config *cfg, spill_err *err) {
  SPILL_FAIL_IF(err, !out || !cfg, SPILL_E_INVALID_ARG, "cache: NULL argument");
  *out = NULL;
  const char *pname = cfg->policy ? cfg->policy : "lru";
  const spill_cache_policy *pol = spill_cache_policy_find(pname);
  SPILL_FAIL_IF(err, !pol, SPILL_E_INVALID_ARG,
                "cache: unknown policy \"%s\" (known: lru, lfru, wtinylfu, nextuse, "
                "nextuse-coact, nextuse-opt, arc, s3fifo)",
                pname);
  SPILL_FAIL_IF(err, cfg->slot_bytes % SPILL_CACHE_ALIGN != 0, SPILL_E_INVALID_ARG,
                "cache: slot_bytes %zu is not a multiple of %u", cfg->slot_bytes,
                SPILL_CACHE_ALIGN);
  spill_cache *c = (spill_cache *)calloc(1, sizeof(*c));
  if (!c) return spill_err_set(err, SPILL_E_NOMEM, "cache: out of memory");
  c->slot_bytes = cfg->slot_bytes;
  c->pol = pol;
  c->seed = cfg->seed;
  c->flags = cfg->flags;
  int rc = store_alloc(&c->st, cfg->n_slots, cfg->slot_bytes, cfg->memory, pol, cfg->seed, err);
  if (rc < 0) {
    free(c);
    return rc;
  }
  if (!(c->flags & SPILL_CACHE_F_NOLOCK) && pthread_mutex_init(&c->mu, NULL) != 0) {
    store_free(&c->st, pol);
    free(c);
    return spill_err_set(err, SPILL_E_NOMEM, "cache: cannot create mutex");
  }
  *out = c;
  return SPILL_OK;
}

void spill_cache_free(spill_cache *c) {
  if (!c) return;
  store_free(&c->st, c->pol);
  if (!(c->flags & SPILL_CACHE_F_NOLOCK)) pthread_mutex_destroy(&c->mu);
  free(c);
}

spill_cache_entry *spill_cache_get(spill_cache *c, uint32_t layer, uint32_t expert) {
  uint64_t key = spill_cache_key(layer, expert);
  cache_lock(c);
  int32_t i = map_find(&c->st, key);
  spill_cache_entry *e = NULL;
  if (i >= 0) e = slot_demand_hit(c, (uint32_t)i);
  else c->ctr.demand_misses++;
  cache_unlock(c);
  return e;
}

int spill_cache_claim(spill_cache *c, uint32_t layer, uint32_t expert, unsigned flags,
                      spill_cache_entry **out) {
  uint64_t key = spill_cache_key(layer, expert);
  cache_lock(c);
  int rc;
  if (map_find(&c->st, key) >= 0) {
    *out = NULL;
    rc = SPILL_CACHE_PRESENT;
  } else {
    rc = claim_absent(c, key, flags, out);
  }
  cache_unlock(c);
  return rc;
}

int spill_cache_acquire(spill_cache *c, uint32_t layer, uint32_t expert,
                        spill_cache_entry **out) {
  uint64_t key = spill_cache_key(layer, expert);
  cache_lock(c);
  int rc;
  int32_t i = map_find(&c->st, key);
  if (i >= 0) {
    *out = slot_demand_hit(c, (uint32_t)i);
    rc = SPILL_CACHE_HIT;
  } else {
    c->ctr.demand_misses++;
    rc = claim_absent(c, key, 0, out);
  }
  cache_unlock(c);
  return rc;
}

int spill_cache_ready(spill_cache *c, spill_cache_entry *e, uint64_t bytes) {
  cache_lock(c);
  cache_slot *sl = slot_of(c, e);
  int rc = sl ? ready_locked(c, sl, bytes) : SPILL_E_INVALID_ARG;
  cache_unlock(c);
  return rc;
}

int spill_cache_discard(spill_cache *c, spill_cache_entry *e) {
  cache_lock(c);
  cache_slot *sl = slot_of(c, e);
  int rc = SPILL_E_INVALID_ARG;
  if (sl && sl->state == SLOT_LOADING && sl->pins > 0) {
    slot_unmap(c, sl->pub.slot);
    sl->state = SLOT_FAILED;
    rc = SPILL_OK;
  }
  cache_unlock(c);
  return rc;
}

void spill_cache_release(spill_cache *c, spill_cache_entry *e) {
  if (!c || !e) return;
  cache_lock(c);
  cache_slot *sl = slot_of(c, e);
  if (sl) release_locked(c, sl);
  cache_unlock(c);
}

int spill_cache_entry_state(spill_cache *c, const spill_cache_entry *e) {
  cache_lock(c);
  cache_slot *sl = slot_of(c, e);
  int st = SPILL_E_INVALID_ARG;
  if (sl) {
    switch (sl->state) {
      case SLOT_LOADING: st = SPILL_CACHE_LOADING; break;
      case SLOT_READY: st = SPILL_CACHE_READY; break;
      case SLOT_FAILED: st = SPILL_CACHE_FAILED; break;
      default: break;
    }
  }
  cache_unlock(c);
  return st;
}

int spill_cache_contains(spill_cache *c, uint32_t layer, uint32_t expert) {
  cache_lock(c);
  int r = map_find(&c->st, spill_cache_key(layer, expert)) >= 0;
  cache_unlock(c);
  return r;
}

int spill_cache_access(spill_cache *c, uint32_t layer, uint32_t expert, unsigned flags,
                       uint64_t bytes) {
  uint64_t key = spill_cache_key(layer, expert);
  cache_lock(c);
  int rc;
  int32_t i = map_find(&c->st, key);
  if (i >= 0) {
    if (flags & SPILL_CACHE_SPECULATIVE) {
      rc = SPILL_CACHE_PRESENT;
    } else {
      release_locked(c, (cache_slot *)slot_demand_hit(c, (uint32_t)i));
      rc = SPILL_CACHE_HIT;
    }
  } else {
    if (!(flags & SPILL_CACHE_SPECULATIVE)) c->ctr.demand_misses++;
    spill_cache_entry *e = NULL;
    rc = claim_absent(c, key, flags & SPILL_CACHE_SPECULATIVE, &e);
    if (rc == SPILL_CACHE_INSERTED) {
      ready_locked(c, (cache_slot *)e, bytes);
      release_locked(c, (cache_slot *)e);
    }
  }
  cache_unlock(c);
  return rc;
}

uint32_t spill_cache_claim_run(spill_cache *c, uint32_t layer, uint32_t first, uint32_t max,
                               spill_cache_entry **out) {
  cache_lock(c);
  cache_store *s = &c->st;
  uint32_t k = 0;
  for (; k < max && s->n_free > 0 && first + k >= first; k++) {
    uint32_t v = s->free_stack[s->n_free - 1];
    if (k > 0 && v != out[k - 1]->slot + 1) break; /* not adjacent: the run ends */
    uint64_t key = spill_cache_key(layer, first + k);
    if (map_find(s, key) >= 0) break;
    s->n_free--;
    out[k] = slot_fill(c, v, key, 0);
    c->st.slots[v].pre_load = 1;
    c->ctr.preloaded++;
  }
  cache_unlock(c);
  return k;
}

void spill_cache_get_counters(spill_cache *c, spill_cache_counters *out) {
  cache_lock(c);
  *out = c->ctr;
  cache_unlock(c);
}

void spill_cache_reset_counters(spill_cache *c) {
  cache_lock(c);
  memset(&c->ctr, 0, sizeof(c->ctr));
  cache_unlock(c);
}

void spill_cache_clear(spill_cache *c, unsigned flags) {
  cache_lock(c);
  cache_store *s = &c->st;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    cache_slot *sl = &s->slots[i];
    if (!sl->in_map || sl->pins > 0) continue;
    slot_unmap(c, i);
    sl->state = SLOT_FREE;
    sl->spec_load = 0;
    sl->pre_load = 0;
  }
  if (c->n_resident == 0) c->pol->reset(s->pst);
  store_rebuild_free_stack(s);
  if (flags & SPILL_CACHE_CLEAR_COUNTERS) memset(&c->ctr, 0, sizeof(c->ctr));
  cache_unlock(c);
}

int spill_cache_resize(spill_cache *c, uint32_t n_slots, void *memory, unsigned flags,
                       spill_err *err) {
  SPILL_FAIL_IF(err, !c, SPILL_E_INVALID_ARG, "cache: NULL cache");
  cache_lock(c);
  for (uint32_t i = 0; i < c->st.n_slots; i++) {
    if (c->st.slots[i].pins > 0) {
      cache_unlock(c);
      return spill_err_set(err, SPILL_E_INVALID_ARG,
                           "cache: cannot resize while slot %u (layer %u expert %u) is pinned", i,
                           c->st.slots[i].pub.layer, c->st.slots[i].pub.expert);
    }
  }
  cache_store fresh;
  int rc = store_alloc(&fresh, n_slots, c->slot_bytes, c->slot_bytes ? memory : NULL, c->pol,
                       c->seed, err);
  if (rc < 0) {
    cache_unlock(c);
    return rc;
  }
  for (uint32_t i = 0; i < c->st.n_slots; i++)
    if (c->st.slots[i].in_map && c->st.slots[i].spec) c->ctr.spec_wasted++;
  store_free(&c->st, c->pol);
  c->st = fresh;
  c->n_resident = 0;
  if (flags & SPILL_CACHE_CLEAR_COUNTERS) memset(&c->ctr, 0, sizeof(c->ctr));
  cache_unlock(c);
  return SPILL_OK;
}

uint32_t spill_cache_n_slots(const spill_cache *c) { return c->st.n_slots; }

uint32_t spill_cache_n_resident(spill_cache *c) {
  cache_lock(c);
  uint32_t n = c->n_resident;
  cache_unlock(c);
  return n;
}
