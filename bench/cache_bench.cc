// bench/cache_bench.cc: cost of the expert cache's operations per policy
// (engine/cache/expert_cache.h), with no I/O.
//
// Workload: a fixed stream of decode-like accesses, token by token, layer by
// layer (92 MoE layers x 250 experts x top-16, the twin's shape), experts
// drawn with a skewed popularity (rank^-0.9 per layer, a different
// permutation per layer) so hits, misses and evictions all happen. Arg(0) is
// the slot count: 512 (mini's default cache is ~360 records), 4416 (the
// twin's floor + 3 ws at top-16 x 92) and 16384.
//   BM_CacheSim_<policy>:   spill_cache_access in simulation mode (no slot
//                           memory, SPILL_CACHE_F_NOLOCK), as the trace
//                           replayer drives it.
//   BM_CacheSlots_<policy>: the streaming engine's sequence with real slots
//                           (4 KiB each) and the mutex: acquire, on a miss
//                           ready, then release.
// Items = accesses; the label gives the hit rate of the stream.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "engine/cache/expert_cache.h"

namespace {

constexpr uint32_t kLayers = 92, kExperts = 250, kTopK = 16, kTokens = 512;

struct Access {
  uint32_t layer, expert;
};

const std::vector<Access> &Stream() {
  static std::vector<Access> s = [] {
    std::mt19937_64 rng(11);
    std::vector<double> cdf(kExperts);
    double acc = 0;
    for (uint32_t i = 0; i < kExperts; i++) cdf[i] = acc += std::pow(i + 1.0, -0.9);
    for (auto &c : cdf) c /= acc;
    std::vector<std::vector<uint32_t>> perm(kLayers, std::vector<uint32_t>(kExperts));
    for (auto &p : perm) {
      std::iota(p.begin(), p.end(), 0u);
      std::shuffle(p.begin(), p.end(), rng);
    }
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<Access> out;
    out.reserve((size_t)kTokens * kLayers * kTopK);
    std::vector<uint8_t> used(kExperts);
    for (uint32_t t = 0; t < kTokens; t++)
      for (uint32_t l = 0; l < kLayers; l++) {
        std::fill(used.begin(), used.end(), 0);
        for (uint32_t k = 0; k < kTopK;) {
          const uint32_t r = (uint32_t)(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
          const uint32_t e = perm[l][r < kExperts ? r : kExperts - 1];
          if (used[e]) continue;
          used[e] = 1;
          out.push_back({l, e});
          k++;
        }
      }
    return out;
  }();
  return s;
}

void Label(benchmark::State &state, spill_cache *c) {
  spill_cache_counters k;
  spill_cache_get_counters(c, &k);
  const double n = (double)(k.demand_hits + k.demand_misses);
  char buf[64];
  std::snprintf(buf, sizeof buf, "hit %.1f%%", n > 0 ? 100.0 * k.demand_hits / n : 0.0);
  state.SetLabel(buf);
}

void RunSim(benchmark::State &state, const char *policy) {
  const auto &s = Stream();
  spill_cache_config cfg{};
  cfg.n_slots = (uint32_t)state.range(0);
  cfg.slot_bytes = 0;
  cfg.policy = policy;
  cfg.seed = 1;
  cfg.flags = SPILL_CACHE_F_NOLOCK;
  spill_cache *c = nullptr;
  spill_err e{};
  if (spill_cache_init(&c, &cfg, &e) < 0) {
    state.SkipWithError(e.msg);
    return;
  }
  size_t i = 0;
  for (auto _ : state) {
    const Access &a = s[i];
    benchmark::DoNotOptimize(spill_cache_access(c, a.layer, a.expert, 0, 0));
    if (++i == s.size()) i = 0;
  }
  state.SetItemsProcessed((int64_t)state.iterations());
  Label(state, c);
  spill_cache_free(c);
}

void RunSlots(benchmark::State &state, const char *policy) {
  const auto &s = Stream();
  spill_cache_config cfg{};
  cfg.n_slots = (uint32_t)state.range(0);
  cfg.slot_bytes = 4096;
  cfg.policy = policy;
  cfg.seed = 1;
  spill_cache *c = nullptr;
  spill_err e{};
  if (spill_cache_init(&c, &cfg, &e) < 0) {
    state.SkipWithError(e.msg);
    return;
  }
  size_t i = 0;
  for (auto _ : state) {
    const Access &a = s[i];
    spill_cache_entry *en = nullptr;
    const int r = spill_cache_acquire(c, a.layer, a.expert, &en);
    if (r == SPILL_CACHE_INSERTED) spill_cache_ready(c, en, 0);
    spill_cache_release(c, en);
    if (++i == s.size()) i = 0;
  }
  state.SetItemsProcessed((int64_t)state.iterations());
  Label(state, c);
  spill_cache_free(c);
}

void BM_CacheSim_Lru(benchmark::State &s) { RunSim(s, "lru"); }
void BM_CacheSim_Lfru(benchmark::State &s) { RunSim(s, "lfru"); }
void BM_CacheSim_Wtinylfu(benchmark::State &s) { RunSim(s, "wtinylfu"); }
void BM_CacheSim_Nextuse(benchmark::State &s) { RunSim(s, "nextuse"); }
void BM_CacheSlots_Lru(benchmark::State &s) { RunSlots(s, "lru"); }
void BM_CacheSlots_Lfru(benchmark::State &s) { RunSlots(s, "lfru"); }
void BM_CacheSlots_Wtinylfu(benchmark::State &s) { RunSlots(s, "wtinylfu"); }
void BM_CacheSlots_Nextuse(benchmark::State &s) { RunSlots(s, "nextuse"); }

#define CB(fn) BENCHMARK(fn)->Arg(512)->Arg(4416)->Arg(16384)
CB(BM_CacheSim_Lru);
CB(BM_CacheSim_Lfru);
CB(BM_CacheSim_Wtinylfu);
CB(BM_CacheSim_Nextuse);
CB(BM_CacheSlots_Lru);
CB(BM_CacheSlots_Lfru);
CB(BM_CacheSlots_Wtinylfu);
CB(BM_CacheSlots_Nextuse);

}  // namespace
