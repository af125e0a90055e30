// Tests for engine/cache: the pcache-style pin contract, counters, clear and
// resize, each policy's defining behaviour (LRU order, LFRU frequency across a
// scan, W-TinyLFU scan and loop resistance), determinism for a seed, and a
// two-thread smoke test (run it under --config=tsan too).
#include "engine/cache/expert_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/base/alloc.h"

namespace {

struct CacheDeleter {
  void operator()(spill_cache *c) const { spill_cache_free(c); }
};
using CachePtr = std::unique_ptr<spill_cache, CacheDeleter>;

CachePtr MakeCache(uint32_t n_slots, const char *policy, size_t slot_bytes = 0,
                   uint64_t seed = 1, unsigned flags = 0) {
  spill_cache_config cfg = {};
  cfg.n_slots = n_slots;
  cfg.slot_bytes = slot_bytes;
  cfg.policy = policy;
  cfg.seed = seed;
  cfg.flags = flags;
  spill_cache *c = nullptr;
  spill_err err = {};
  int rc = spill_cache_init(&c, &cfg, &err);
  EXPECT_EQ(rc, SPILL_OK) << err.msg;
  return CachePtr(c);
}

const char *const kPolicies[] = {"lru", "lfru", "wtinylfu"};

// One demand access through the multi-call API: acquire, fill, ready, release.
int Touch(spill_cache *c, uint32_t layer, uint32_t expert) {
  spill_cache_entry *e = nullptr;
  int rc = spill_cache_acquire(c, layer, expert, &e);
  if (rc == SPILL_CACHE_INSERTED) {
    if (e->data) std::memcpy(e->data, &e->key, sizeof(e->key));
    EXPECT_EQ(spill_cache_ready(c, e, 0), SPILL_OK);
  }
  if (e) spill_cache_release(c, e);
  return rc;
}

spill_cache_counters Counters(spill_cache *c) {
  spill_cache_counters k;
  spill_cache_get_counters(c, &k);
  return k;
}

TEST(ExpertCacheTest, EvictsLeastRecentlyUsedWhenFull) {
  CachePtr c = MakeCache(3, "lru");
  EXPECT_EQ(Touch(c.get(), 0, 0), SPILL_CACHE_INSERTED);
  EXPECT_EQ(Touch(c.get(), 0, 1), SPILL_CACHE_INSERTED);
  EXPECT_EQ(Touch(c.get(), 0, 2), SPILL_CACHE_INSERTED);
  EXPECT_EQ(Touch(c.get(), 0, 0), SPILL_CACHE_HIT);       // order now 1, 2, 0
  EXPECT_EQ(Touch(c.get(), 0, 3), SPILL_CACHE_INSERTED);  // evicts 1
  EXPECT_FALSE(spill_cache_contains(c.get(), 0, 1));
  EXPECT_TRUE(spill_cache_contains(c.get(), 0, 0));
  EXPECT_TRUE(spill_cache_contains(c.get(), 0, 2));
  EXPECT_TRUE(spill_cache_contains(c.get(), 0, 3));
  EXPECT_EQ(Touch(c.get(), 0, 4), SPILL_CACHE_INSERTED);  // evicts 2
  EXPECT_FALSE(spill_cache_contains(c.get(), 0, 2));
  spill_cache_counters k = Counters(c.get());
  EXPECT_EQ(k.evictions, 2u);
  EXPECT_EQ(k.demand_hits, 1u);
  EXPECT_EQ(k.demand_misses, 5u);
}

TEST(ExpertCacheTest, LruMatchesReferenceModelOnRandomStream) {
  // Exercises the key map (backward-shift deletion) against std::list LRU.
  const uint32_t kSlots = 16;
  CachePtr c = MakeCache(kSlots, "lru");
  std::list<uint64_t> ref;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos;
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; i++) {
    uint32_t layer = rng() % 4, expert = (rng() % 3 == 0) ? rng() % 64 : rng() % 8;
    uint64_t key = spill_cache_key(layer, expert);
    bool ref_hit = pos.count(key) != 0;
    if (ref_hit) {
      ref.erase(pos[key]);
    } else if (ref.size() == kSlots) {
      pos.erase(ref.back());
      ref.pop_back();
    }
    ref.push_front(key);
    pos[key] = ref.begin();
    int rc = (i % 2) ? Touch(c.get(), layer, expert)
                     : spill_cache_access(c.get(), layer, expert, 0, 0);
    ASSERT_EQ(rc, ref_hit ? SPILL_CACHE_HIT : SPILL_CACHE_INSERTED) << "access " << i;
  }
  for (uint64_t k : ref)
    EXPECT_TRUE(spill_cache_contains(c.get(), spill_cache_key_layer(k), spill_cache_key_expert(k)));
  EXPECT_EQ(spill_cache_n_resident(c.get()), kSlots);
}

TEST(ExpertCacheTest, PinnedEntryIsNeverEvicted) {
  for (const char *policy : kPolicies) {
    SCOPED_TRACE(policy);
    CachePtr c = MakeCache(4, policy, 4096);
    spill_cache_entry *pinned = nullptr;
    ASSERT_EQ(spill_cache_acquire(c.get(), 7, 7, &pinned), SPILL_CACHE_INSERTED);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pinned->data) % 4096, 0u);
    std::memcpy(pinned->data, &pinned->key, sizeof(pinned->key));
    ASSERT_EQ(spill_cache_ready(c.get(), pinned, 0), SPILL_OK);
    for (uint32_t i = 0; i < 200; i++) Touch(c.get(), i % 5, i % 37);
    EXPECT_TRUE(spill_cache_contains(c.get(), 7, 7));
    uint64_t seen;
    std::memcpy(&seen, pinned->data, sizeof(seen));
    EXPECT_EQ(seen, spill_cache_key(7, 7));  // nobody loaded into its slot
    spill_cache_release(c.get(), pinned);
  }
}

TEST(ExpertCacheTest, ClaimFailsCleanlyWhenAllPinned) {
  for (const char *policy : kPolicies) {
    SCOPED_TRACE(policy);
    CachePtr c = MakeCache(2, policy);
    spill_cache_entry *a = nullptr, *b = nullptr, *x = nullptr;
    ASSERT_EQ(spill_cache_acquire(c.get(), 0, 1, &a), SPILL_CACHE_INSERTED);
    ASSERT_EQ(spill_cache_ready(c.get(), a, 0), SPILL_OK);  // ready but pinned
    // b stays LOADING: a loading entry is pinned by its claimer.
    ASSERT_EQ(spill_cache_claim(c.get(), 0, 2, 0, &b), SPILL_CACHE_INSERTED);
    EXPECT_EQ(spill_cache_acquire(c.get(), 0, 3, &x), SPILL_CACHE_ALL_PINNED);
    EXPECT_EQ(x, nullptr);
    EXPECT_EQ(spill_cache_claim(c.get(), 0, 3, SPILL_CACHE_SPECULATIVE, &x),
              SPILL_CACHE_ALL_PINNED);
    EXPECT_EQ(spill_cache_access(c.get(), 0, 3, 0, 0), SPILL_CACHE_ALL_PINNED);
    spill_cache_counters k = Counters(c.get());
    EXPECT_EQ(k.all_pinned, 3u);
    EXPECT_EQ(k.evictions, 0u);
    EXPECT_EQ(k.spec_issued, 0u);
    EXPECT_TRUE(spill_cache_contains(c.get(), 0, 1));
    EXPECT_TRUE(spill_cache_contains(c.get(), 0, 2));
    spill_cache_release(c.get(), a);
    EXPECT_EQ(spill_cache_acquire(c.get(), 0, 3, &x), SPILL_CACHE_INSERTED);
    EXPECT_FALSE(spill_cache_contains(c.get(), 0, 1));  // the only evictable one
    EXPECT_EQ(spill_cache_ready(c.get(), b, 0), SPILL_OK);
    spill_cache_release(c.get(), b);
    EXPECT_EQ(spill_cache_ready(c.get(), x, 0), SPILL_OK);
    spill_cache_release(c.get(), x);
  }
}

TEST(ExpertCacheTest, OneReleasePerGetAccounting) {
  CachePtr c = MakeCache(1, "lru");
  EXPECT_EQ(Touch(c.get(), 1, 1), SPILL_CACHE_INSERTED);
  spill_cache_entry *e1 = spill_cache_get(c.get(), 1, 1);
  spill_cache_entry *e2 = spill_cache_get(c.get(), 1, 1);
  ASSERT_NE(e1, nullptr);
  ASSERT_EQ(e1, e2);
  EXPECT_EQ(e1->layer, 1u);
  EXPECT_EQ(e1->expert, 1u);
  spill_cache_release(c.get(), e1);
  // Still pinned by the second get.
  EXPECT_EQ(spill_cache_access(c.get(), 2, 2, 0, 0), SPILL_CACHE_ALL_PINNED);
  spill_cache_release(c.get(), e2);
  EXPECT_EQ(spill_cache_access(c.get(), 2, 2, 0, 0), SPILL_CACHE_INSERTED);
  EXPECT_FALSE(spill_cache_contains(c.get(), 1, 1));
  // A miss returns NULL and pins nothing; release(NULL) is a no-op.
  EXPECT_EQ(spill_cache_get(c.get(), 9, 9), nullptr);
  spill_cache_release(c.get(), nullptr);
  EXPECT_EQ(spill_cache_access(c.get(), 3, 3, 0, 0), SPILL_CACHE_INSERTED);
  // An extra release must not unpin anything it does not own.
  spill_cache_entry *e3 = spill_cache_get(c.get(), 3, 3);
  ASSERT_NE(e3, nullptr);
  spill_cache_release(c.get(), e3);
  spill_cache_release(c.get(), e3);  // unbalanced: ignored
  EXPECT_EQ(spill_cache_access(c.get(), 4, 4, 0, 0), SPILL_CACHE_INSERTED);
}

TEST(ExpertCacheTest, HitsPlusMissesEqualAccesses) {
  for (const char *policy : kPolicies) {
    SCOPED_TRACE(policy);
    const uint32_t kSlots = 32;
    CachePtr c = MakeCache(kSlots, policy);
    std::mt19937 rng(11);
    uint64_t accesses = 0, inserted = 0, hits = 0;
    for (int i = 0; i < 10000; i++) {
      uint32_t layer = rng() % 8, expert = rng() % 25;
      int rc;
      switch (i % 3) {
        case 0: rc = Touch(c.get(), layer, expert); break;
        case 1: rc = spill_cache_access(c.get(), layer, expert, 0, 0); break;
        default: {
          spill_cache_entry *e = spill_cache_get(c.get(), layer, expert);
          if (e) {
            rc = SPILL_CACHE_HIT;
          } else {
            rc = spill_cache_claim(c.get(), layer, expert, 0, &e);
            ASSERT_EQ(rc, SPILL_CACHE_INSERTED);
            ASSERT_EQ(spill_cache_ready(c.get(), e, 0), SPILL_OK);
          }
          spill_cache_release(c.get(), e);
        }
      }
      accesses++;
      inserted += rc == SPILL_CACHE_INSERTED;
      hits += rc == SPILL_CACHE_HIT;
    }
    spill_cache_counters k = Counters(c.get());
    EXPECT_EQ(k.demand_hits + k.demand_misses, accesses);
    EXPECT_EQ(k.demand_hits, hits);
    EXPECT_EQ(k.demand_misses, inserted);
    EXPECT_EQ(k.evictions, inserted - kSlots);
    EXPECT_EQ(k.all_pinned, 0u);
    EXPECT_GT(k.demand_hits, 0u);
    EXPECT_EQ(spill_cache_n_resident(c.get()), kSlots);
  }
}

TEST(ExpertCacheTest, SpeculativeUsedAndWastedAccounting) {
  CachePtr c = MakeCache(4, "lru");
  for (uint32_t e = 1; e <= 3; e++)
    EXPECT_EQ(spill_cache_access(c.get(), 0, e, SPILL_CACHE_SPECULATIVE, 1000),
              SPILL_CACHE_INSERTED);
  EXPECT_EQ(spill_cache_access(c.get(), 0, 1, SPILL_CACHE_SPECULATIVE, 1000),
            SPILL_CACHE_PRESENT);
  EXPECT_EQ(spill_cache_access(c.get(), 0, 1, 0, 0), SPILL_CACHE_HIT);
  EXPECT_EQ(spill_cache_access(c.get(), 0, 1, 0, 0), SPILL_CACHE_HIT);
  spill_cache_counters k = Counters(c.get());
  EXPECT_EQ(k.spec_issued, 3u);
  EXPECT_EQ(k.spec_used, 1u);  // only the first demand use counts
  EXPECT_EQ(k.spec_wasted, 0u);
  EXPECT_EQ(k.bytes_inserted_spec, 3000u);
  EXPECT_EQ(k.demand_hits, 2u);
  EXPECT_EQ(k.demand_misses, 0u);
  // A prefetch still loading when demand arrives is a hit on a loading entry.
  spill_cache_entry *p = nullptr, *d = nullptr;
  ASSERT_EQ(spill_cache_claim(c.get(), 0, 4, SPILL_CACHE_SPECULATIVE, &p), SPILL_CACHE_INSERTED);
  ASSERT_EQ(spill_cache_acquire(c.get(), 0, 4, &d), SPILL_CACHE_HIT);
  EXPECT_EQ(spill_cache_entry_state(c.get(), d), SPILL_CACHE_LOADING);
  ASSERT_EQ(spill_cache_ready(c.get(), p, 500), SPILL_OK);
  EXPECT_EQ(spill_cache_entry_state(c.get(), d), SPILL_CACHE_READY);
  spill_cache_release(c.get(), p);
  spill_cache_release(c.get(), d);
  // Demand traffic now evicts the two never-used prefetches (0,2) and (0,3).
  for (uint32_t e = 10; e < 14; e++) spill_cache_access(c.get(), 1, e, 0, 0);
  k = Counters(c.get());
  EXPECT_EQ(k.spec_issued, 4u);
  EXPECT_EQ(k.spec_used, 2u);
  EXPECT_EQ(k.spec_wasted, 2u);
  EXPECT_EQ(k.demand_hits_loading, 1u);
  EXPECT_EQ(k.bytes_inserted_spec, 3500u);
  EXPECT_EQ(k.bytes_inserted_demand, 0u);  // simulation mode: slot_bytes is 0
  EXPECT_EQ(k.evictions, 4u);
}

TEST(ExpertCacheTest, DiscardedLoadLeavesTheMapAndFreesTheSlot) {
  CachePtr c = MakeCache(2, "wtinylfu", 4096);
  spill_cache_entry *a = nullptr;
  ASSERT_EQ(spill_cache_acquire(c.get(), 3, 5, &a), SPILL_CACHE_INSERTED);
  spill_cache_entry *waiter = spill_cache_get(c.get(), 3, 5);
  ASSERT_EQ(waiter, a);
  EXPECT_EQ(spill_cache_discard(c.get(), a), SPILL_OK);  // the read failed
  EXPECT_FALSE(spill_cache_contains(c.get(), 3, 5));
  EXPECT_EQ(spill_cache_entry_state(c.get(), waiter), SPILL_CACHE_FAILED);
  EXPECT_EQ(spill_cache_ready(c.get(), a, 0), SPILL_E_INVALID_ARG);
  spill_cache_release(c.get(), a);
  spill_cache_release(c.get(), waiter);
  EXPECT_EQ(spill_cache_n_resident(c.get()), 0u);
  // Both slots are usable again without any eviction.
  EXPECT_EQ(Touch(c.get(), 3, 5), SPILL_CACHE_INSERTED);
  EXPECT_EQ(Touch(c.get(), 3, 6), SPILL_CACHE_INSERTED);
  EXPECT_EQ(Counters(c.get()).evictions, 0u);
  // Releasing a claim without ready() also discards it.
  spill_cache_entry *b = nullptr;
  ASSERT_EQ(spill_cache_claim(c.get(), 4, 4, 0, &b), SPILL_CACHE_INSERTED);
  spill_cache_release(c.get(), b);
  EXPECT_FALSE(spill_cache_contains(c.get(), 4, 4));
  EXPECT_EQ(spill_cache_n_resident(c.get()), 1u);
}

TEST(ExpertCacheTest, RejectsInvalidConfig) {
  spill_cache *c = nullptr;
  spill_err err = {};
  spill_cache_config cfg = {};
  cfg.n_slots = 4;
  cfg.policy = "fifo";
  EXPECT_EQ(spill_cache_init(&c, &cfg, &err), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(err.msg).find("unknown policy"), std::string::npos) << err.msg;
  EXPECT_EQ(c, nullptr);
  cfg.policy = "lru";
  cfg.n_slots = 0;
  EXPECT_EQ(spill_cache_init(&c, &cfg, &err), SPILL_E_INVALID_ARG);
  cfg.n_slots = 4;
  cfg.slot_bytes = 1000;  // not a whole number of pages
  EXPECT_EQ(spill_cache_init(&c, &cfg, &err), SPILL_E_INVALID_ARG);
  cfg.slot_bytes = 4096;
  alignas(4096) static unsigned char mem[5 * 4096];
  cfg.memory = mem + 8;
  EXPECT_EQ(spill_cache_init(&c, &cfg, &err), SPILL_E_INVALID_ARG);
  cfg.memory = mem;  // caller-provided memory is used as is
  ASSERT_EQ(spill_cache_init(&c, &cfg, &err), SPILL_OK) << err.msg;
  spill_cache_entry *e = nullptr;
  ASSERT_EQ(spill_cache_acquire(c, 0, 0, &e), SPILL_CACHE_INSERTED);
  EXPECT_GE(static_cast<unsigned char *>(e->data), mem);
  EXPECT_LT(static_cast<unsigned char *>(e->data), mem + 4 * 4096);
  spill_cache_release(c, e);
  spill_cache_free(c);
  spill_cache_free(nullptr);
}

TEST(ExpertCacheTest, ClearAndResize) {
  uint64_t live0 = spill_alloc_live_bytes();
  CachePtr c = MakeCache(8, "lfru", 4096);
  EXPECT_EQ(spill_alloc_live_bytes() - live0, 8u * 4096);
  for (uint32_t e = 0; e < 8; e++) Touch(c.get(), 0, e);
  spill_cache_entry *pinned = spill_cache_get(c.get(), 0, 3);
  ASSERT_NE(pinned, nullptr);
  spill_cache_clear(c.get(), 0);
  EXPECT_EQ(spill_cache_n_resident(c.get()), 1u);
  EXPECT_TRUE(spill_cache_contains(c.get(), 0, 3));
  EXPECT_EQ(Counters(c.get()).demand_misses, 8u);  // counters kept
  EXPECT_EQ(Counters(c.get()).evictions, 0u);      // clearing is not evicting
  spill_err err = {};
  EXPECT_EQ(spill_cache_resize(c.get(), 16, nullptr, 0, &err), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(err.msg).find("pinned"), std::string::npos) << err.msg;
  spill_cache_release(c.get(), pinned);
  spill_cache_clear(c.get(), SPILL_CACHE_CLEAR_COUNTERS);
  EXPECT_EQ(spill_cache_n_resident(c.get()), 0u);
  EXPECT_EQ(Counters(c.get()).demand_misses, 0u);

  for (uint32_t e = 0; e < 8; e++) Touch(c.get(), 1, e);
  ASSERT_EQ(spill_cache_resize(c.get(), 16, nullptr, SPILL_CACHE_CLEAR_COUNTERS, &err), SPILL_OK)
      << err.msg;
  EXPECT_EQ(spill_cache_n_slots(c.get()), 16u);
  EXPECT_EQ(spill_cache_n_resident(c.get()), 0u);
  EXPECT_EQ(spill_alloc_live_bytes() - live0, 16u * 4096);
  std::vector<spill_cache_entry *> held;
  for (uint32_t e = 0; e < 16; e++) {
    spill_cache_entry *x = nullptr;
    ASSERT_EQ(spill_cache_acquire(c.get(), 2, e, &x), SPILL_CACHE_INSERTED);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(x->data) % 4096, 0u);
    std::memset(x->data, static_cast<int>(e), 4096);  // whole slot is writable
    spill_cache_ready(c.get(), x, 0);
    held.push_back(x);
  }
  for (size_t i = 1; i < held.size(); i++) EXPECT_NE(held[i]->data, held[0]->data);
  for (auto *x : held) spill_cache_release(c.get(), x);
  spill_cache_counters k = Counters(c.get());
  EXPECT_EQ(k.evictions, 0u);
  EXPECT_EQ(k.bytes_inserted_demand, 16u * 4096);
  ASSERT_EQ(spill_cache_resize(c.get(), 2, nullptr, 0, &err), SPILL_OK);
  EXPECT_EQ(spill_alloc_live_bytes() - live0, 2u * 4096);
  EXPECT_EQ(spill_cache_resize(c.get(), 0, nullptr, 0, &err), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_cache_n_slots(c.get()), 2u);  // unchanged on failure
  c.reset();
  EXPECT_EQ(spill_alloc_live_bytes(), live0);
}

// A hot set is touched repeatedly, then a long scan of one-off keys passes.
// Returns how many hot keys survived the scan.
int HotKeysSurvivingScan(const char *policy, uint32_t slots, uint32_t hot, uint32_t rounds,
                         uint32_t scan) {
  CachePtr c = MakeCache(slots, policy, 0, 42, SPILL_CACHE_F_NOLOCK);
  for (uint32_t r = 0; r < rounds; r++)
    for (uint32_t e = 0; e < hot; e++) spill_cache_access(c.get(), 0, e, 0, 0);
  for (uint32_t e = 0; e < scan; e++) spill_cache_access(c.get(), 1, e, 0, 0);
  int alive = 0;
  for (uint32_t e = 0; e < hot; e++) alive += spill_cache_contains(c.get(), 0, e);
  return alive;
}

TEST(ExpertCacheTest, LfruKeepsFrequentEntriesAcrossScan) {
  EXPECT_EQ(HotKeysSurvivingScan("lru", 16, 8, 20, 100), 0);
  EXPECT_GE(HotKeysSurvivingScan("lfru", 16, 8, 20, 100), 7);
}

TEST(ExpertCacheTest, WTinyLfuResistsScanAndLoop) {
  EXPECT_EQ(HotKeysSurvivingScan("lru", 32, 20, 10, 200), 0);
  EXPECT_GE(HotKeysSurvivingScan("wtinylfu", 32, 20, 10, 200), 19);
  // A cyclic loop one quarter larger than the cache: LRU never hits; an
  // admission filter keeps most of the loop resident.
  for (const char *policy : {"lru", "wtinylfu"}) {
    CachePtr c = MakeCache(32, policy, 0, 42, SPILL_CACHE_F_NOLOCK);
    for (int lap = 0; lap < 50; lap++)
      for (uint32_t e = 0; e < 40; e++) spill_cache_access(c.get(), e % 16, e, 0, 0);
    spill_cache_counters k = Counters(c.get());
    double rate = static_cast<double>(k.demand_hits) / (k.demand_hits + k.demand_misses);
    if (std::string(policy) == "lru") EXPECT_EQ(k.demand_hits, 0u);
    else EXPECT_GT(rate, 0.6) << policy;
  }
}

// Frequency must not freeze the cache: when the popular set changes, the new
// one has to win admission once its (aged) counts overtake the old ones.
TEST(ExpertCacheTest, FrequencyPoliciesAdoptANewHotSet) {
  for (const char *policy : {"lfru", "wtinylfu"}) {
    SCOPED_TRACE(policy);
    CachePtr c = MakeCache(32, policy, 0, 42, SPILL_CACHE_F_NOLOCK);
    for (int r = 0; r < 10; r++)
      for (uint32_t e = 0; e < 20; e++) spill_cache_access(c.get(), 0, e, 0, 0);
    for (int r = 0; r < 60; r++)
      for (uint32_t e = 0; e < 20; e++) spill_cache_access(c.get(), 1, e, 0, 0);
    int alive = 0;
    for (uint32_t e = 0; e < 20; e++) alive += spill_cache_contains(c.get(), 1, e);
    EXPECT_GE(alive, 18);
  }
}

TEST(ExpertCacheTest, DeterministicForSeed) {
  for (const char *policy : kPolicies) {
    SCOPED_TRACE(policy);
    std::vector<int> runs[2];
    spill_cache_counters k[2];
    for (int run = 0; run < 2; run++) {
      CachePtr c = MakeCache(24, policy, 0, 1234, SPILL_CACHE_F_NOLOCK);
      std::mt19937 rng(5);
      for (int phase = 0; phase < 2; phase++) {  // also after a clear
        for (int i = 0; i < 5000; i++) {
          uint32_t layer = rng() % 6, expert = (rng() % 4 == 0) ? rng() % 64 : rng() % 10;
          unsigned flags = (i % 7 == 0) ? SPILL_CACHE_SPECULATIVE : 0;
          runs[run].push_back(spill_cache_access(c.get(), layer, expert, flags, 0));
        }
        spill_cache_clear(c.get(), 0);
      }
      k[run] = Counters(c.get());
    }
    EXPECT_EQ(runs[0], runs[1]);
    EXPECT_EQ(std::memcmp(&k[0], &k[1], sizeof(k[0])), 0);
    EXPECT_GT(k[0].evictions, 0u);
  }
}

TEST(ExpertCacheTest, TwoThreadsSmoke) {
  // Two "compute" threads share 16 slots over 64 keys. Each writes the key
  // into the slot before ready(); a reader that sees READY must find its own
  // key there, which fails if a pinned slot were ever reused.
  CachePtr c = MakeCache(16, "wtinylfu", 4096);
  const int kIters = 20000;
  std::atomic<int> bad{0}, all_pinned{0};
  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = 0; i < kIters; i++) {
      uint32_t layer = rng() % 4, expert = rng() % 16;
      spill_cache_entry *e = nullptr;
      int rc = spill_cache_acquire(c.get(), layer, expert, &e);
      if (rc == SPILL_CACHE_ALL_PINNED) {
        all_pinned++;
        continue;
      }
      if (rc == SPILL_CACHE_INSERTED) {
        std::memcpy(e->data, &e->key, sizeof(e->key));
        spill_cache_ready(c.get(), e, 0);
      } else {
        while (spill_cache_entry_state(c.get(), e) == SPILL_CACHE_LOADING) std::this_thread::yield();
        if (spill_cache_entry_state(c.get(), e) == SPILL_CACHE_READY) {
          uint64_t seen;
          std::memcpy(&seen, e->data, sizeof(seen));
          if (seen != spill_cache_key(layer, expert)) bad++;
        }
      }
      spill_cache_release(c.get(), e);
    }
  };
  std::thread t1(worker, 1u), t2(worker, 2u);
  t1.join();
  t2.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(all_pinned.load(), 0);  // 16 slots, at most 2 pins at a time
  spill_cache_counters k = Counters(c.get());
  EXPECT_EQ(k.demand_hits + k.demand_misses, 2u * kIters);
  spill_err err = {};
  EXPECT_EQ(spill_cache_resize(c.get(), 8, nullptr, 0, &err), SPILL_OK) << err.msg;  // no pins left
}

}  // namespace

namespace {

// A preload's bulk insert: consecutive keys land in consecutive slots (one
// contiguous range of memory), the run stops at a resident key, at max and at
// a full cache, nothing is evicted, and the counters keep preload apart from
// demand and prefetch.
TEST(ExpertCacheTest, ClaimRunFillsAdjacentSlotsWithoutEvicting) {
  const size_t sb = 4096;
  CachePtr c = MakeCache(8, "lfru", sb);
  ASSERT_EQ(Touch(c.get(), 0, 5), SPILL_CACHE_INSERTED);  // slot 0 holds (0, 5)
  spill_cache_entry *run[8] = {};
  uint32_t k = spill_cache_claim_run(c.get(), 0, 2, 8, run);
  ASSERT_EQ(k, 3u);  // (0,2) (0,3) (0,4), then (0,5) is resident
  for (uint32_t i = 0; i < k; i++) {
    EXPECT_EQ(run[i]->expert, 2 + i);
    EXPECT_EQ(run[i]->slot, 1 + i);
    EXPECT_EQ(static_cast<char *>(run[i]->data), static_cast<char *>(run[0]->data) + i * sb);
    EXPECT_EQ(spill_cache_entry_state(c.get(), run[i]), SPILL_CACHE_LOADING);
    EXPECT_EQ(spill_cache_ready(c.get(), run[i], 0), SPILL_OK);
    spill_cache_release(c.get(), run[i]);
  }
  EXPECT_EQ(spill_cache_claim_run(c.get(), 1, 0, 2, run), 2u);  // max
  for (int i = 0; i < 2; i++) spill_cache_discard(c.get(), run[i]), spill_cache_release(c.get(), run[i]);
  // the discarded slots went back to the free stack (in release order, so
  // not adjacent): runs get shorter but stay contiguous until the cache is full
  uint32_t next = 0, calls = 0;
  while (spill_cache_n_resident(c.get()) < 8 && calls++ < 8) {
    uint32_t got = spill_cache_claim_run(c.get(), 3, next, 100, run);
    ASSERT_GE(got, 1u);
    for (uint32_t i = 0; i < got; i++) {
      if (i > 0) EXPECT_EQ(run[i]->slot, run[i - 1]->slot + 1);
      EXPECT_EQ(run[i]->expert, next + i);
      EXPECT_EQ(spill_cache_ready(c.get(), run[i], 0), SPILL_OK);
      spill_cache_release(c.get(), run[i]);
    }
    next += got;
  }
  EXPECT_EQ(next, 4u);
  EXPECT_EQ(spill_cache_n_resident(c.get()), 8u);
  EXPECT_EQ(spill_cache_claim_run(c.get(), 4, 0, 4, run), 0u);  // full: never evicts
  spill_cache_counters k1 = Counters(c.get());
  EXPECT_EQ(k1.evictions, 0u);
  EXPECT_EQ(k1.preloaded, 9u);  // 3 + 2 (discarded) + 4
  EXPECT_EQ(k1.bytes_inserted_preload, (3 + 4) * sb);
  EXPECT_EQ(k1.bytes_inserted_demand, sb);
  EXPECT_EQ(k1.demand_misses, 1u);
  EXPECT_EQ(k1.spec_issued, 0u);
  // a preloaded record is a demand hit
  EXPECT_EQ(Touch(c.get(), 0, 3), SPILL_CACHE_HIT);
}

}  // namespace
