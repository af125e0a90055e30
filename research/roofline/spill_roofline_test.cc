// Tests for spill_roofline_measure (spill_roofline.h) on a nano model: the
// report's arithmetic (bound = min of the legs, fraction = achieved / bound,
// the disk leg counts demand + prefetch bytes), the resident run really
// being resident, the prompt option, and bad input. Timing is not asserted:
// only relations the code guarantees and deterministic counters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/plan/ram_plan.h"
#include "engine/spill.h"
#include "research/gen/spill_gen.h"
#include "research/roofline/spill_roofline.h"

namespace {

const std::string &Nano() {
  static std::string dir;
  if (dir.empty()) {
    const char *t = std::getenv("TEST_TMPDIR");
    dir = std::string(t ? t : "/tmp") + "/roofline-nano";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  }
  return dir;
}

spill_roofline_opts Quick() {
  spill_roofline_opts o = {};
  o.probe_threads = 2;
  o.probe_seconds = 0.2;
  o.mem_probe_bytes = 16ull << 20;
  o.n_tokens = 4;
  o.repeats = 2;
  return o;
}

TEST(Roofline, ReportIsConsistent) {
  spill_config cfg;
  spill_config_default(&cfg);
  ASSERT_EQ(spill_config_set(&cfg, "cache_slots", "8", nullptr), SPILL_OK);
  ASSERT_EQ(spill_config_set(&cfg, "lookahead", "4", nullptr), SPILL_OK);
  spill_roofline_opts o = Quick();
  spill_roofline r;
  spill_err e = {};
  ASSERT_EQ(spill_roofline_measure(Nano().c_str(), &cfg, &o, &r, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(r.tokens, 4);
  EXPECT_EQ(r.cache_slots, 8u);
  EXPECT_GT(r.prompt_tokens, 1);
  EXPECT_GT(r.disk_probe1_bytes_per_s, 0);
  EXPECT_GT(r.disk_probe2_bytes_per_s, 0);
  // the workload probe ran over the records the first run routed to: nano
  // has 3 MoE layers, so at least top_k and at most 3 x n_experts of them
  EXPECT_GT(r.workload_records, 0u);
  EXPECT_GT(r.disk_workload_bytes_per_s, 0);
  EXPECT_DOUBLE_EQ(r.disk_bytes_per_s,
                   std::fmax(std::fmax(r.disk_probe1_bytes_per_s, r.disk_probe2_bytes_per_s),
                             r.disk_workload_bytes_per_s));
  EXPECT_GT(r.mem_bytes_per_s, 0);
  EXPECT_GT(r.compute_s_per_token, 0);
  EXPECT_LE(r.compute_s_per_token, r.compute_max_s_per_token);
  // 8 slots cannot hold a token's experts: every decode token misses
  EXPECT_GT(r.misses_per_token, 0);
  EXPECT_GT(r.missed_bytes_per_token, 0);
  // lookahead 4 prefetches: the disk leg includes those bytes
  EXPECT_GT(r.spec_bytes_per_token, 0);
  EXPECT_DOUBLE_EQ(r.read_bytes_per_token, r.missed_bytes_per_token + r.spec_bytes_per_token);
  EXPECT_NEAR(r.bound_disk_tok_s, r.disk_bytes_per_s / r.read_bytes_per_token,
              1e-9 * r.bound_disk_tok_s);
  EXPECT_NEAR(r.bound_compute_tok_s, 1.0 / r.compute_s_per_token, 1e-9 * r.bound_compute_tok_s);
  EXPECT_DOUBLE_EQ(r.bound_tok_s, std::fmin(r.bound_disk_tok_s, r.bound_compute_tok_s));
  EXPECT_NEAR(r.fraction, r.achieved_tok_s / r.bound_tok_s, 1e-9);
  EXPECT_LE(r.achieved_min_tok_s, r.achieved_tok_s);
  EXPECT_LE(r.achieved_tok_s, r.achieved_max_tok_s);
  EXPECT_GT(r.paired_fraction, 0);
  EXPECT_LE(r.paired_fraction_min, r.paired_fraction);
  EXPECT_LE(r.paired_fraction, r.paired_fraction_max);
  // the resident run holds every expert the workload touches
  EXPECT_DOUBLE_EQ(r.resident_hit_rate, 1.0);
  EXPECT_GT(r.resident_budget, r.budget);
}

// On a shared machine the resident run must not take memory other processes
// hold: with MemAvailable at 64 KiB the resident budget is cut to the cfg
// run's cache plus 7/8 of it, and the report says so (without the cut it holds
// every expert the workload touches, as ReportIsConsistent checks).
TEST(Roofline, ResidentRunFitsTheMemoryAvailableNow) {
  const char *t = std::getenv("TEST_TMPDIR");
  const std::string meminfo = std::string(t ? t : "/tmp") + "/roofline-meminfo";
  FILE *f = std::fopen(meminfo.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("MemTotal:       25000000 kB\nMemFree:          100000 kB\nMemAvailable:         64 kB\n", f);
  std::fclose(f);
  spill_config cfg;
  spill_config_default(&cfg);
  ASSERT_EQ(spill_config_set(&cfg, "cache_slots", "8", nullptr), SPILL_OK);
  spill_roofline_opts o = Quick();
  o.repeats = 1;
  spill_roofline r, full;
  spill_err e = {};
  spill_plan_test_meminfo_path(meminfo.c_str());
  ASSERT_EQ(spill_roofline_measure(Nano().c_str(), &cfg, &o, &r, &e), SPILL_OK) << e.msg;
  spill_plan_test_meminfo_path(nullptr);
  EXPECT_EQ(r.resident_capped, 1);
  ASSERT_EQ(spill_roofline_measure(Nano().c_str(), &cfg, &o, &full, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(full.resident_capped, 0);
  EXPECT_GT(full.resident_budget, r.resident_budget);
}

TEST(Roofline, PromptOptionChangesTheWorkload) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_roofline_opts o = Quick();
  o.repeats = 1;
  o.prompt = "Hi";
  spill_roofline a, b;
  spill_err e = {};
  ASSERT_EQ(spill_roofline_measure(Nano().c_str(), &cfg, &o, &a, &e), SPILL_OK) << e.msg;
  o.prompt = "A somewhat longer prompt than that";
  ASSERT_EQ(spill_roofline_measure(Nano().c_str(), &cfg, &o, &b, &e), SPILL_OK) << e.msg;
  EXPECT_LT(a.prompt_tokens, b.prompt_tokens);
  // lookahead off by default: nothing speculative, the disk leg is the misses
  EXPECT_EQ(a.spec_bytes_per_token, 0);
  EXPECT_DOUBLE_EQ(a.read_bytes_per_token, a.missed_bytes_per_token);
}

TEST(Roofline, BadInputIsRefused) {
  spill_roofline r;
  spill_err e = {};
  spill_roofline_opts o = Quick();
  o.prompt = "";
  EXPECT_EQ(spill_roofline_measure(Nano().c_str(), nullptr, &o, &r, &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("prompt"), std::string::npos) << e.msg;
  e = {};
  EXPECT_LT(spill_roofline_measure("/nonexistent/model", nullptr, nullptr, &r, &e), 0);
  EXPECT_NE(e.msg[0], '\0');
  EXPECT_EQ(spill_roofline_measure(nullptr, nullptr, nullptr, &r, &e), SPILL_E_INVALID_ARG);
}

}  // namespace
