// The defining behaviours of the scan-resistant policies (policy_scan.c) on
// tiny hand-made access sequences, next to LRU on the same sequences: ARC
// keeps keys seen twice through a scan of one-time keys and adapts its
// recency share from ghost hits; S3-FIFO sends one-time keys through its
// small queue only and readmits a key its ghost remembers into the main one.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine/cache/expert_cache.h"

namespace {

// Demand accesses of keys (layer 0, expert = key) through a simulated cache;
// returns which of them hit.
std::vector<bool> Replay(const char *policy, uint32_t slots, const std::vector<uint32_t> &keys) {
  spill_cache_config cfg = {};
  cfg.n_slots = slots;
  cfg.slot_bytes = 0;  // simulation mode
  cfg.policy = policy;
  cfg.seed = 1;
  cfg.flags = SPILL_CACHE_F_NOLOCK;
  spill_cache *c = nullptr;
  std::vector<bool> hit;
  EXPECT_EQ(spill_cache_init(&c, &cfg, nullptr), SPILL_OK);
  if (!c) return hit;
  for (uint32_t k : keys) hit.push_back(spill_cache_access(c, 0, k, 0, 0) == SPILL_CACHE_HIT);
  spill_cache_free(c);
  return hit;
}

std::vector<uint32_t> Scan(uint32_t first, uint32_t n) {
  std::vector<uint32_t> v;
  for (uint32_t i = 0; i < n; i++) v.push_back(first + i);
  return v;
}

std::vector<uint32_t> Cat(std::vector<uint32_t> a, const std::vector<uint32_t> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

int Hits(const std::vector<bool> &h, size_t from = 0) {
  int n = 0;
  for (size_t i = from; i < h.size(); i++) n += h[i];
  return n;
}

TEST(PolicyScanTest, ArcKeepsTwiceSeenKeysThroughAScanLruDoesNot) {
  // A and B used twice, then 20 one-time keys, then A and B again: 4 slots.
  const std::vector<uint32_t> seq = Cat(Cat({1, 2, 1, 2}, Scan(100, 20)), {1, 2});
  const auto arc = Replay("arc", 4, seq), lru = Replay("lru", 4, seq);
  ASSERT_EQ(arc.size(), seq.size());
  EXPECT_TRUE(arc[seq.size() - 2] && arc[seq.size() - 1]) << "ARC lost T2 to the scan";
  EXPECT_FALSE(lru[seq.size() - 2] || lru[seq.size() - 1]) << "LRU kept a key through the scan";
  EXPECT_EQ(Hits(arc), 4);  // the two second uses and the two after the scan
}

TEST(PolicyScanTest, ArcAdaptsToARecencyPatternThroughItsGhosts) {
  // Frequent keys 1, 2, 3 fill T2 first; then each new key is reused 3
  // accesses after its first use (groups k, k+1, k+2, k, k+1, k+2). With T1's
  // target p at 0, T1 holds one slot and every reuse misses; B1 ghost hits
  // grow p until the groups fit. LRU (4 slots) hits every reuse.
  std::vector<uint32_t> seq = {1, 2, 3, 1, 2, 3};
  for (uint32_t g = 0; g < 60; g++) {
    uint32_t k = 100 + 3 * g;
    seq.insert(seq.end(), {k, k + 1, k + 2, k, k + 1, k + 2});
  }
  const auto arc = Replay("arc", 4, seq), lru = Replay("lru", 4, seq);
  const size_t tail = seq.size() - 6 * 20;  // the last 20 groups
  EXPECT_EQ(Hits(lru, tail), 60);
  EXPECT_GE(Hits(arc, tail), 57) << "ARC did not move its share to recency";
  const size_t head = 6;  // the first groups, before p has grown
  EXPECT_LT(Hits(arc, head) - Hits(arc, tail), Hits(lru, head) - Hits(lru, tail));
}

TEST(PolicyScanTest, S3FifoPromotesKeysHitInTheSmallQueueAndPassesScansThroughIt) {
  // 10 slots, small queue of 1: A and B hit while in S, so they move to M
  // when S is drained; a 40-key scan then only cycles through S.
  const std::vector<uint32_t> seq = Cat(Cat({1, 2, 1, 2}, Scan(100, 40)), {1, 2});
  const auto s3 = Replay("s3fifo", 10, seq), lru = Replay("lru", 10, seq);
  EXPECT_TRUE(s3[seq.size() - 2] && s3[seq.size() - 1]) << "S3-FIFO lost M to the scan";
  EXPECT_FALSE(lru[seq.size() - 2] || lru[seq.size() - 1]);
}

TEST(PolicyScanTest, S3FifoReadmitsAGhostKeyIntoTheMainQueue) {
  // X once, then 11 one-time keys: X leaves S without a hit (into the
  // ghost). X again: the ghost sends it to M, where it survives a 30-key scan
  // that evicts from S only. LRU loses it.
  std::vector<uint32_t> seq = Cat(Cat({7}, Scan(100, 11)), {7});
  seq = Cat(Cat(seq, Scan(200, 30)), {7});
  const auto s3 = Replay("s3fifo", 10, seq), lru = Replay("lru", 10, seq);
  EXPECT_FALSE(s3[12]) << "X came back before it was evicted";
  EXPECT_TRUE(s3.back()) << "the ghost did not send X to the main queue";
  EXPECT_FALSE(lru.back());
}

TEST(PolicyScanTest, PinnedSlotsAreNeverVictims) {
  // Every slot but one pinned: both policies must pick the unpinned one, and
  // report no victim once all are pinned.
  for (const char *p : {"arc", "s3fifo"}) {
    spill_cache_config cfg = {};
    cfg.n_slots = 3;
    cfg.policy = p;
    cfg.flags = SPILL_CACHE_F_NOLOCK;
    spill_cache *c = nullptr;
    ASSERT_EQ(spill_cache_init(&c, &cfg, nullptr), SPILL_OK) << p;
    spill_cache_entry *e[4] = {};
    for (uint32_t k = 0; k < 3; k++) {
      ASSERT_EQ(spill_cache_acquire(c, 0, k, &e[k]), SPILL_CACHE_INSERTED) << p;
      spill_cache_ready(c, e[k], 0);
    }
    spill_cache_release(c, e[1]);  // only expert 1 is evictable
    ASSERT_EQ(spill_cache_acquire(c, 0, 9, &e[3]), SPILL_CACHE_INSERTED) << p;
    EXPECT_EQ(spill_cache_contains(c, 0, 1), 0) << p;
    EXPECT_EQ(spill_cache_contains(c, 0, 0), 1) << p;
    spill_cache_entry *f = nullptr;
    EXPECT_EQ(spill_cache_acquire(c, 0, 10, &f), SPILL_CACHE_ALL_PINNED) << p;
    spill_cache_ready(c, e[3], 0);
    for (int k : {0, 2, 3}) spill_cache_release(c, e[k]);
    spill_cache_free(c);
  }
}

}  // namespace
