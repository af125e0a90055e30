// Quick local experiment: replays a recorded router trace (one JSON object a
// line, {"tok": n, "layers": [[top_k ids], ...]}; accesses are the (layer,
// expert) pairs in file order) through every cache policy and through Belady's
// MIN (offline optimal without bypass, computed here), at 32, 64 and 128 slots,
// and prints the demand hit rates. The parser is test-only and minimal; the
// trace module replaces it. The trace is the repository's
// traces/olmoe-1b-7b-299.jsonl (a data dependency; SPILL_TRACE overrides):
//   bazel test //engine/cache:expert_cache_trace_test --test_output=all
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/cache/expert_cache.h"

namespace {

// Parses the "layers" array of one line; false with a reason on bad input.
bool ParseLine(const std::string &line, std::vector<std::vector<int>> *layers, std::string *why) {
  size_t p = line.find("\"layers\"");
  if (p == std::string::npos) return *why = "no \"layers\" key", false;
  p = line.find('[', p);
  if (p == std::string::npos) return *why = "no layers array", false;
  int depth = 0;
  layers->clear();
  for (size_t i = p; i < line.size(); i++) {
    char ch = line[i];
    if (ch == '[') {
      if (++depth == 2) layers->emplace_back();
      if (depth > 2) return *why = "nested too deep", false;
    } else if (ch == ']') {
      if (--depth == 0) return true;
    } else if (std::isdigit(static_cast<unsigned char>(ch))) {
      if (depth != 2) return *why = "number outside a layer list", false;
      char *end = nullptr;
      long v = std::strtol(line.c_str() + i, &end, 10);
      if (v < 0 || v > 1000000) return *why = "expert id out of range", false;
      layers->back().push_back(static_cast<int>(v));
      i = static_cast<size_t>(end - line.c_str()) - 1;
    } else if (ch != ',' && !std::isspace(static_cast<unsigned char>(ch))) {
      return *why = std::string("unexpected character '") + ch + "'", false;
    }
  }
  return *why = "unterminated layers array", false;
}

uint64_t BeladyHits(const std::vector<uint64_t> &acc, size_t slots) {
  const size_t n = acc.size();
  std::vector<size_t> next(n);
  std::unordered_map<uint64_t, size_t> seen;
  for (size_t i = n; i-- > 0;) {
    auto it = seen.find(acc[i]);
    next[i] = it == seen.end() ? SIZE_MAX : it->second;
    seen[acc[i]] = i;
  }
  std::set<std::pair<size_t, uint64_t>> by_next;  // (next use, key)
  std::unordered_map<uint64_t, size_t> resident;  // key -> its next use
  uint64_t hits = 0;
  for (size_t i = 0; i < n; i++) {
    auto it = resident.find(acc[i]);
    if (it != resident.end()) {
      hits++;
      by_next.erase({it->second, acc[i]});
    } else if (resident.size() == slots) {
      auto victim = std::prev(by_next.end());  // used furthest in the future
      resident.erase(victim->second);
      by_next.erase(victim);
    }
    resident[acc[i]] = next[i];
    by_next.insert({next[i], acc[i]});
  }
  return hits;
}

TEST(ExpertCacheTraceTest, ReplayOlmoeTraceThroughPolicies) {
  std::string where;
  if (const char *env = std::getenv("SPILL_TRACE")) {
    where = env;
  } else {  // the runfiles copy of //traces:olmoe-1b-7b-299.jsonl
    const char *src = std::getenv("TEST_SRCDIR"), *ws = std::getenv("TEST_WORKSPACE");
    ASSERT_TRUE(src && ws) << "not run by bazel test and SPILL_TRACE not set";
    where = std::string(src) + "/" + ws + "/traces/olmoe-1b-7b-299.jsonl";
  }
  const char *path = where.c_str();
  std::ifstream in(path);
  ASSERT_TRUE(in) << "trace not readable: " << path;
  std::vector<uint64_t> acc;
  std::string line, why;
  std::vector<std::vector<int>> layers;
  size_t tokens = 0, n_layers = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ASSERT_TRUE(ParseLine(line, &layers, &why)) << "line " << tokens + 1 << ": " << why;
    if (tokens == 0) n_layers = layers.size();
    ASSERT_EQ(layers.size(), n_layers) << "line " << tokens + 1;
    for (size_t l = 0; l < layers.size(); l++)
      for (int e : layers[l]) acc.push_back(spill_cache_key(static_cast<uint32_t>(l), e));
    tokens++;
  }
  ASSERT_GT(acc.size(), 0u);
  std::set<uint64_t> distinct(acc.begin(), acc.end());
  std::printf("trace %s: %zu tokens, %zu layers, %zu accesses, %zu distinct keys\n", path, tokens,
              n_layers, acc.size(), distinct.size());
  std::printf("%-10s %8s %8s %8s\n", "policy", "32", "64", "128");
  const uint32_t kSlots[] = {32, 64, 128};
  std::unordered_map<std::string, std::vector<uint64_t>> hits;
  for (const char *policy : {"lru", "lfru", "wtinylfu"}) {
    std::printf("%-10s", policy);
    for (uint32_t slots : kSlots) {
      spill_cache_config cfg = {};
      cfg.n_slots = slots;
      cfg.policy = policy;
      cfg.seed = 1;
      cfg.flags = SPILL_CACHE_F_NOLOCK;
      spill_cache *c = nullptr;
      ASSERT_EQ(spill_cache_init(&c, &cfg, nullptr), SPILL_OK);
      for (uint64_t k : acc)
        spill_cache_access(c, spill_cache_key_layer(k), spill_cache_key_expert(k), 0, 0);
      spill_cache_counters k;
      spill_cache_get_counters(c, &k);
      spill_cache_free(c);
      EXPECT_EQ(k.demand_hits + k.demand_misses, acc.size());
      hits[policy].push_back(k.demand_hits);
      std::printf(" %7.2f%%", 100.0 * k.demand_hits / acc.size());
    }
    std::printf("\n");
  }
  std::printf("%-10s", "belady");
  std::vector<uint64_t> belady;
  for (size_t j = 0; j < 3; j++) {
    belady.push_back(BeladyHits(acc, kSlots[j]));
    std::printf(" %7.2f%%", 100.0 * belady[j] / acc.size());
    for (auto &kv : hits)
      EXPECT_LE(kv.second[j], belady[j]) << kv.first << " beat MIN at " << kSlots[j];
  }
  std::printf("\n");
  EXPECT_GT(belady[2], hits["lru"][2]);
}

}  // namespace
