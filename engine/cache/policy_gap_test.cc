// Tests of "gap-hd" (policy_gap.c) and "mix-hd-opt" (policy_mix.c, LeCaR
// over gap-hd and nextuse-opt): the cache contract for both (fills free
// slots first, never evicts pinned entries, exact counts, determinism,
// reset forgets history) and the behaviours they were designed for: gap-hd
// keeps the key whose gaps say it comes back next token over one that comes
// back every few tokens; the mixture gets most of its better expert's hits.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/cache/expert_cache.h"

namespace {

spill_cache *Make(uint32_t slots, const char *policy = "gap-hd") {
  spill_cache_config cfg = {};
  cfg.n_slots = slots;
  cfg.policy = policy;
  cfg.seed = 1;
  cfg.flags = SPILL_CACHE_F_NOLOCK;
  spill_cache *c = nullptr;
  EXPECT_EQ(spill_cache_init(&c, &cfg, nullptr), SPILL_OK);
  return c;
}


uint64_t Replay(spill_cache *c, const std::vector<uint64_t> &acc) {
  for (uint64_t key : acc)
    spill_cache_access(c, spill_cache_key_layer(key), spill_cache_key_expert(key), 0, 0);
  spill_cache_counters k;
  spill_cache_get_counters(c, &k);
  return k.demand_hits;
}

// n_tok tokens x n_layers layers x k of n_exp experts; skew: the minimum of
// `draws` uniform ids (more draws, more skew).
std::vector<uint64_t> StreamOf(uint64_t seed, int n_tok, uint32_t n_layers, uint32_t n_exp, int k,
                               int draws) {
  std::vector<uint64_t> acc;
  uint64_t rng = seed;
  for (int t = 0; t < n_tok; t++)
    for (uint32_t l = 0; l < n_layers; l++) {
      std::vector<bool> used(n_exp, false);
      for (int n = 0; n < k;) {
        uint32_t e = n_exp;
        for (int d = 0; d < draws; d++) {
          uint32_t x = spill_cache_rng_below(&rng, n_exp);
          if (x < e) e = x;
        }
        if (used[e]) continue;
        used[e] = true;
        n++;
        acc.push_back(spill_cache_key(l, e));
      }
    }
  return acc;
}

uint64_t Hits(const char *policy, uint32_t slots, const std::vector<uint64_t> &acc) {
  spill_cache *c = Make(slots, policy);
  uint64_t h = Replay(c, acc);
  spill_cache_free(c);
  return h;
}

const char *const kPolicies[] = {"gap-hd", "mix-hd-opt"};

TEST(GapPolicyTest, IsRegisteredByName) {
  for (const char *pol : kPolicies) {
    ASSERT_NE(spill_cache_policy_find(pol), nullptr);
    bool listed = false;
    for (const char *const *n = spill_cache_policy_names(); *n; n++) listed |= !strcmp(*n, pol);
    EXPECT_TRUE(listed) << pol;
  }
}

TEST(GapPolicyTest, DeterministicAndCountsExactly) {
  for (const char *pol : kPolicies) {
    std::vector<uint64_t> acc = StreamOf(3, 300, 8, 16, 4, 2);
    spill_cache_counters k[2];
    for (int run = 0; run < 2; run++) {
      spill_cache *c = Make(20, pol);
      Replay(c, acc);
      spill_cache_get_counters(c, &k[run]);
      spill_cache_free(c);
    }
    EXPECT_EQ(k[0].demand_hits, k[1].demand_hits);
    EXPECT_EQ(k[0].bypassed, k[1].bypassed);
    EXPECT_EQ(k[0].demand_hits + k[0].demand_misses, acc.size());
    EXPECT_GT(k[0].demand_hits, 0u);
    EXPECT_EQ(k[0].evictions + k[0].bypassed, k[0].demand_misses - 20);
  }
}

TEST(GapPolicyTest, FillsFreeSlotsBeforeEvicting) {
  for (const char *pol : kPolicies) {
    spill_cache *c = Make(8, pol);
    for (uint32_t e = 0; e < 8; e++)
      EXPECT_EQ(spill_cache_access(c, 0, e, 0, 0), SPILL_CACHE_INSERTED);
    for (uint32_t e = 0; e < 8; e++) EXPECT_EQ(spill_cache_access(c, 0, e, 0, 0), SPILL_CACHE_HIT);
    spill_cache_counters k;
    spill_cache_get_counters(c, &k);
    EXPECT_EQ(k.evictions, 0u);
    spill_cache_free(c);
  }
}

TEST(GapPolicyTest, NeverEvictsPinnedEntries) {
  for (const char *pol : kPolicies) {
    spill_cache *c = Make(4, pol);
    spill_cache_entry *pinned[3];
    for (uint32_t e = 0; e < 3; e++) {
      ASSERT_EQ(spill_cache_acquire(c, 1, e, &pinned[e]), SPILL_CACHE_INSERTED);
      ASSERT_EQ(spill_cache_ready(c, pinned[e], 0), SPILL_OK);
    }
    for (uint32_t e = 10; e < 30; e++) {
      int r = spill_cache_access(c, 2, e, 0, 0);
      EXPECT_TRUE(r == SPILL_CACHE_INSERTED || r == SPILL_CACHE_BYPASSED) << r;
    }
    for (uint32_t e = 0; e < 3; e++) EXPECT_TRUE(spill_cache_contains(c, 1, e));
    for (auto *p : pinned) spill_cache_release(c, p);
    spill_cache_free(c);
  }
}

// 4 layers. Layer 0: expert 0 is used by every token, expert 1 by every
// fourth; layers 1-3 use two fresh experts each. Both recurring keys have
// been used about as recently at the point layer 1's misses need a slot
// right after a token where both were used. With 2 slots, a hit-density
// ranking must hold expert 0 (one token per hit) rather than expert 1 (four
// tokens per hit): expert 0 hits in nearly every token.
TEST(GapPolicyTest, KeepsTheKeyThatComesBackNextToken) {
  spill_cache *c = Make(2);
  uint32_t fresh = 100;
  int every_hits = 0, tokens = 200;
  for (int t = 0; t < tokens; t++) {
    if (spill_cache_access(c, 0, 0, 0, 0) == SPILL_CACHE_HIT) every_hits++;
    if (t % 4 == 0) spill_cache_access(c, 0, 1, 0, 0);
    for (uint32_t l = 1; l < 4; l++) {
      spill_cache_access(c, l, fresh++, 0, 0);
      spill_cache_access(c, l, fresh++, 0, 0);
    }
  }
  EXPECT_GE(every_hits, tokens - 10);
  spill_cache_free(c);
}

TEST(GapPolicyTest, ClearAndResizeForgetHistory) {
  for (const char *pol : kPolicies) {
    std::vector<uint64_t> acc = StreamOf(5, 80, 8, 16, 4, 2);
    spill_cache *c = Make(16, pol);
    uint64_t first = Replay(c, acc);
    spill_cache_clear(c, SPILL_CACHE_CLEAR_COUNTERS);
    EXPECT_EQ(spill_cache_n_resident(c), 0u);
    EXPECT_EQ(Replay(c, acc), first);
    ASSERT_EQ(spill_cache_resize(c, 8, nullptr, SPILL_CACHE_CLEAR_COUNTERS, nullptr), SPILL_OK);
    spill_cache *d = Make(8, pol);
    EXPECT_EQ(Replay(c, acc), Replay(d, acc));
    spill_cache_free(c);
    spill_cache_free(d);
  }
}

// On a skewed loop longer than the cache, gap-hd beats LRU (0%) and LFRU:
// the property docs/CACHE.md measures on real traces, here on a fixture.
TEST(GapPolicyTest, BeatsLruAndLfruBelowOneTokensWorkingSet) {
  std::vector<uint64_t> acc = StreamOf(9, 400, 8, 16, 4, 2);
  uint64_t hits[3];
  const char *pols[3] = {"gap-hd", "lru", "lfru"};
  for (int i = 0; i < 3; i++) {
    spill_cache *c = Make(12, pols[i]);
    hits[i] = Replay(c, acc);
    spill_cache_free(c);
  }
  EXPECT_GT(hits[0], hits[1]);
  EXPECT_GT(hits[0], hits[2]);
}

// Two streams on which the experts differ (gap-hd ahead by 9-14%); the
// mixture must keep at least 40% of the better expert's lead over the worse
// (it kept 50% and 71% when written: 2737 between 2561 and 2912, 4167
// between 3906 and 4273). A mixture stuck on the worse expert fails.
TEST(GapPolicyTest, MixGetsMostOfTheBetterExpertsHits) {
  struct Case {
    uint64_t seed;
    uint32_t layers, experts, slots;
    int k, draws;
  } cases[] = {{7, 8, 16, 12, 4, 2}, {9, 16, 32, 24, 4, 3}};
  for (const Case &cs : cases) {
    std::vector<uint64_t> acc = StreamOf(cs.seed, 600, cs.layers, cs.experts, cs.k, cs.draws);
    uint64_t hd = Hits("gap-hd", cs.slots, acc), opt = Hits("nextuse-opt", cs.slots, acc);
    uint64_t mix = Hits("mix-hd-opt", cs.slots, acc);
    uint64_t lo = hd < opt ? hd : opt, hi = hd < opt ? opt : hd;
    EXPECT_GE(10 * (mix - lo), 4 * (hi - lo)) << "seed " << cs.seed;
    EXPECT_GT(mix, lo) << "seed " << cs.seed;
  }
}

}  // namespace
