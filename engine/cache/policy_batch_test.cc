// Policies under the engine's access pattern: a layer's misses are all
// claimed (pinned, LOADING) before any of them is ready, and released only
// when the layer is done. Replayed one access at a time the same stream gives
// the policy's textbook behaviour; batched, a policy must not degrade to LRU.
// Regression: W-TinyLFU's 1-slot window (1% of 96) was always the previous
// pinned miss, so every admission went through unfiltered (0% hits through
// the engine on the OLMoE trace vs 33.5% replayed).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/cache/expert_cache.h"

namespace {

constexpr int kLayers = 16, kExperts = 64, kTopK = 8, kTokens = 300;

// Routing with the two properties that matter here: per-layer popularity is
// skewed (a few experts take most activations) and a token's top-k are
// distinct. The total loop (16 x 8 = 128 accesses a token) exceeds 96 slots,
// so recency alone gets nothing.
std::vector<std::vector<uint32_t>> Routing() {
  uint64_t x = 0x2545F4914F6CDD1Dull;
  auto rnd = [&x]() {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  std::vector<std::vector<uint32_t>> tok(kTokens * kLayers);
  for (int t = 0; t < kTokens; t++)
    for (int l = 0; l < kLayers; l++) {
      auto &ids = tok[t * kLayers + l];
      while ((int)ids.size() < kTopK) {
        // ~half the draws from the layer's 6 hot experts, the rest uniform
        uint32_t e = (rnd() & 1) ? (uint32_t)((l * 7 + rnd() % 6) % kExperts)
                                 : (uint32_t)(rnd() % kExperts);
        bool dup = false;
        for (uint32_t d : ids) dup |= d == e;
        if (!dup) ids.push_back(e);
      }
    }
  return tok;
}

// A simulation-mode cache (no slot memory), seed 1.
spill_cache *NewCache(const char *policy, uint32_t slots) {
  spill_cache_config cfg = {};
  cfg.n_slots = slots;
  cfg.slot_bytes = 0;
  cfg.policy = policy;
  cfg.seed = 1;
  spill_cache *c = nullptr;
  EXPECT_EQ(spill_cache_init(&c, &cfg, nullptr), SPILL_OK);
  return c;
}

// Acquires one batch of a layer's ids pinned together, then readies and
// releases them (the stream's request(), the reads, the layer's compute).
void RunBatch(spill_cache *c, int l, const std::vector<uint32_t> &ids) {
  std::vector<spill_cache_entry *> held;
  for (uint32_t e : ids) {
    spill_cache_entry *en = nullptr;
    const int o = spill_cache_acquire(c, l, e, &en);
    EXPECT_NE(o, SPILL_CACHE_ALL_PINNED);
    if (en) held.push_back(en);
  }
  for (auto *en : held) {
    if (spill_cache_entry_state(c, en) == SPILL_CACHE_LOADING) spill_cache_ready(c, en, 0);
    spill_cache_release(c, en);
  }
}

// Decode hit rate after a chunked prefill: the first `prompt` tokens go
// through a layer `chunk` tokens at a time (the union of their ids pinned
// together, as the engine's prefill does), the rest one token a batch;
// counters are reset when the decode starts.
double DecodeHitRate(const char *policy, uint32_t slots, int prompt, int chunk) {
  spill_cache *c = NewCache(policy, slots);
  if (!c) return -1;
  const auto routing = Routing();
  for (int t0 = 0; t0 < prompt; t0 += chunk)
    for (int l = 0; l < kLayers; l++) {
      std::vector<uint32_t> ids;
      for (int t = t0; t < t0 + chunk && t < prompt; t++)
        for (uint32_t e : routing[t * kLayers + l]) {
          bool dup = false;
          for (uint32_t d : ids) dup |= d == e;
          if (!dup) ids.push_back(e);
        }
      RunBatch(c, l, ids);
    }
  spill_cache_reset_counters(c);
  for (int t = prompt; t < kTokens; t++)
    for (int l = 0; l < kLayers; l++) RunBatch(c, l, routing[t * kLayers + l]);
  spill_cache_counters k;
  spill_cache_get_counters(c, &k);
  spill_cache_free(c);
  return (double)k.demand_hits / (double)(k.demand_hits + k.demand_misses);
}

double HitRate(const char *policy, uint32_t slots, bool batched) {
  spill_cache *c = NewCache(policy, slots);
  if (!c) return -1;
  const auto routing = Routing();
  for (int t = 0; t < kTokens; t++)
    for (int l = 0; l < kLayers; l++) {
      const auto &ids = routing[t * kLayers + l];
      if (!batched) {
        for (uint32_t e : ids) spill_cache_access(c, l, e, 0, 0);
        continue;
      }
      RunBatch(c, l, ids);
    }
  spill_cache_counters k;
  spill_cache_get_counters(c, &k);
  spill_cache_free(c);
  return (double)k.demand_hits / (double)(k.demand_hits + k.demand_misses);
}

TEST(PolicyBatch, WTinyLfuKeepsItsFilterWhenMissesArePinned) {
  for (uint32_t slots : {96u, 200u}) {
    const double lru = HitRate("lru", slots, true);
    const double one = HitRate("wtinylfu", slots, false);
    const double batch = HitRate("wtinylfu", slots, true);
    EXPECT_GT(one, lru + 0.10) << slots << " slots: the stream is not frequency-friendly";
    EXPECT_GT(batch, lru + 0.10) << slots << " slots: batched W-TinyLFU degraded towards LRU ("
                                 << batch << " vs lru " << lru << ")";
    EXPECT_GT(batch, 0.8 * one) << slots << " slots: batched " << batch << " vs one at a time "
                                << one;
  }
}

// A chunked prefill pins the union of a chunk's experts in a layer, so
// W-TinyLFU's window grew to its cap (a quarter of the slots) while the
// protected segment kept 80% of the initial main region: it then took all of
// the shrunken main region, probation kept about one entry, and every
// admitted newcomer was the next victim (engine 24.72% vs replay 38.68%
// decode hits on mini at 188 slots, results/published/policy-compare). Here
// at 200 slots: 45.90% after the chunked prefill vs 50.86% after a
// sequential one before the fix, 48.20 vs 50.91% after. The rest of the gap
// is the window left at a quarter of the cache (docs/CACHE.md).
TEST(PolicyBatch, WTinyLfuDecodeSurvivesAChunkedPrefill) {
  const double seq = DecodeHitRate("wtinylfu", 200, 60, 1);
  const double chunked = DecodeHitRate("wtinylfu", 200, 60, 16);
  EXPECT_GT(chunked, seq - 0.04) << "after a 16-token-chunk prefill " << chunked << " vs " << seq
                                 << " after a sequential one";
}

// nextuse refused a cold newcomer by marking it as the next victim; pinned
// in a batch it could not be one, so each later miss of the layer evicted a
// warm resident. Admission now declines it without a slot.
TEST(PolicyBatch, NextuseKeepsItsAdmissionWhenMissesArePinned) {
  for (const char *p : {"nextuse", "nextuse-coact", "nextuse-opt"})
    for (uint32_t slots : {32u, 64u, 96u}) {
      const double one = HitRate(p, slots, false), batch = HitRate(p, slots, true);
      EXPECT_GT(batch, one - 0.005) << p << " " << slots << " slots: batched " << batch
                                    << " vs one at a time " << one;
    }
}

TEST(PolicyBatch, EveryPolicyBeatsLruBatchedOnASkewedLoop) {
  for (const char *p : {"lfru", "wtinylfu", "nextuse", "nextuse-coact", "nextuse-opt"}) {
    const double lru = HitRate("lru", 96, true), h = HitRate(p, 96, true);
    EXPECT_GT(h, lru + 0.10) << p << ": " << h << " vs lru " << lru;
  }
}

}  // namespace
