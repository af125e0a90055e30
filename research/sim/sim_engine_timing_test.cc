// research/sim/sim_engine_timing_test.cc: the simulator's decode tok/s against
// the real engine's, within 15%.
//
// Compute time on a shared 2-core machine is noisy, so the runs are made
// I/O-bound with a deterministic I/O time: the engine reads through its
// bandwidth cap (io_throttle, a token bucket with a 50 ms burst, engine/io),
// set so that one expert record costs kReadMs, many times a token's compute.
// The simulator gets the engine's own router trace (routing and lookahead
// predictions), slot count, policy and seed, the cap as its bandwidth with
// the same token-bucket model (io.bucket_burst_ms), per-read latency 0, and
// the compute the engine's profile measured in the same run (mean per decode
// token, split as results/published/k3-twin-analyze.py does). Cases:
// lookahead off and on (depth 1, 8 experts) at two cache sizes. The engine
// runs on the page cache (a small container in TEST_TMPDIR), so the cap, not
// the disk, sets the I/O time.
//
// What this checks and what it does not: compute gaps shorter than the
// bucket's burst refill it, so an I/O-bound token costs its reads x record /
// rate whatever the compute; the agreement is then the engine really
// sustaining the cap (no stall, no serialisation, its read count) and the sim
// counting the same reads (demand + prefetch, which with lookahead depend on
// when pins drop). A wrong bandwidth (1.2x) or a sim without the lookahead
// fails it; the compute-overlap part of the timing model is not exercised
// (docs/SIM.md "Timing part"). Each case decodes 64 tokens of 25-90 ms so a
// scheduling hiccup on a loaded machine is a few percent at most.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "research/sim/sim_engine_testutil.h"
#include "research/sim/sim_profile_testutil.h"

extern "C" {
#include "research/sim/sim.h"
#include "engine/spill.h"
#include "engine/trace/router_trace.h"
}

namespace {

constexpr double kReadMs = 20.0;       // the cap: one record per kReadMs (5 ms left the
                                       // slots-40 case at 1.3x of "I/O-bound" in a loaded CI run)
constexpr double kBucketBurstMs = 50;  // SPILL_IO_THROTTLE_BURST_NS (engine/io/reader_internal.h)
constexpr double kTolerance = 0.15;    // tok/s, relative (issue 6)
constexpr int kPrompt = 20, kDecode = 64;

using spill_sim_test::TmpDir;

struct Case {
  int slots, la;
};

struct Outcome {
  spill_run_stats st = {};
  spill_sim_test::DecodeProfile comp;
  spill_sim_result sim = {};
};

Outcome RunCase(const std::string &model, const spill_info &info, const spill_plan &pl,
                uint64_t rate, const Case &k, int n) {
  Outcome out;
  const std::string trace = TmpDir() + "/trace" + std::to_string(n) + ".jsonl";
  const std::string prof = TmpDir() + "/profile" + std::to_string(n) + ".jsonl";
  spill_config cfg;
  spill_config_default(&cfg);
  spill_err e = {};
  EXPECT_EQ(spill_config_set(&cfg, "cache_slots", std::to_string(k.slots).c_str(), &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "policy", "lfru", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead", std::to_string(k.la).c_str(), &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead_depth", "1", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "storage", "pagecache", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "io_backend", "pread", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "io_threads", "4", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "io_throttle", std::to_string(rate).c_str(), &e), 0) << e.msg;
  cfg.trace_path = trace.c_str();
  cfg.profile_path = prof.c_str();
  spill_engine *eng = nullptr;
  EXPECT_EQ(spill_engine_open(model.c_str(), &cfg, &eng, &e), 0) << e.msg;
  if (!eng) return out;
  int prompt[kPrompt];
  for (int i = 0; i < kPrompt; i++) prompt[i] = 40 + (i * 7) % 60;
  spill_sampling smp = {0.0f, 0, 1.0f, 1};
  EXPECT_EQ(spill_generate(eng, prompt, kPrompt, kDecode, &smp, nullptr, nullptr, nullptr,
                           &out.st, &e),
            0)
      << e.msg;
  spill_engine_close(eng);
  out.comp = spill_sim_test::ReadDecodeProfile(prof);

  const uint32_t L = (uint32_t)info.n_moe_layers, K = (uint32_t)info.top_k;
  spill_sim_config c;
  spill_sim_config_default(&c);
  spill_sim_set_plan(&c, L, (uint32_t)info.n_experts, K, pl.record_bytes, pl.trunk, pl.floor,
                     pl.min_cache);
  c.routing = SPILL_SIM_ROUTING_TRACE;
  snprintf(c.trace_path, sizeof c.trace_path, "%s", trace.c_str());
  snprintf(c.policy, sizeof c.policy, "lfru");
  c.policy_seed = 1;
  c.cache_slots = k.slots;
  c.la_width = k.la;
  c.la_source = SPILL_SIM_LA_TRACE;
  c.prefill_chunk = 16;
  c.io_threads = 4;
  c.io_bandwidth = (double)rate;
  c.io_latency_s = 0;
  c.io_bucket_burst_s = kBucketBurstMs * 1e-3;
  const spill_sim_test::DecodeProfile &m = out.comp;
  c.t_expert_s = m.expert_ms / (L * K) * 1e-3;
  c.t_layer_s = m.layer_ms / L * 1e-3;
  c.t_token_s = m.token_ms * 1e-3;
  c.n_budgets = 1;
  c.budgets[0] = pl.floor;
  spill_trace t;
  EXPECT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
  EXPECT_EQ(spill_sim_run(&c, &t, &out.sim, &e), 0) << e.msg;
  spill_trace_free(&t);
  return out;
}

TEST(SimEngineTimingTest, IoBoundDecodeTokPerSecondAgreesWithin15Percent) {
  spill_sim_test::Nano48 nano;
  ASSERT_NO_FATAL_FAILURE(spill_sim_test::MakeNano48(&nano));
  const std::string &model = nano.model;
  const spill_info &info = nano.info;
  const spill_plan &pl = nano.plan;
  const uint64_t rate = (uint64_t)std::llround((double)pl.record_bytes / (kReadMs * 1e-3));
  std::printf("record %llu bytes, cap %llu bytes/s (%.2f ms per record)\n",
              (unsigned long long)pl.record_bytes, (unsigned long long)rate, kReadMs);

  const Case cases[] = {{16, 0}, {16, 8}, {40, 0}, {40, 8}};
  int n = 0;
  for (const Case &k : cases) {
    SCOPED_TRACE("slots " + std::to_string(k.slots) + " lookahead " + std::to_string(k.la));
    Outcome o = RunCase(model, info, pl, rate, k, n++);
    ASSERT_EQ(o.st.tokens_decode, kDecode);
    ASSERT_EQ(o.comp.rows, kDecode);
    const spill_sim_result &r = o.sim;
    const double eh = (double)o.st.decode_hits / (double)(o.st.decode_hits + o.st.decode_misses);
    const double compute_ms = o.comp.compute_ms();
    const double eng_ms = 1e3 / o.st.decode_tok_per_s, sim_ms = 1e3 / r.tok_per_s;
    std::printf("slots %d la %d: hit engine %.4f sim %.4f; decode reads engine %llu sim %llu "
                "(spec %llu); compute %.3f ms/token (wall %.3f); s/token engine %.3f ms sim "
                "%.3f ms (sim stall %.3f); tok/s engine %.2f sim %.2f, error %+.1f%%\n",
                k.slots, k.la, eh, r.hit_rate, (unsigned long long)o.comp.reads,
                (unsigned long long)r.reads, (unsigned long long)r.spec_issued, compute_ms,
                o.comp.wall_ms, eng_ms, sim_ms, r.io_stall_s * 1e3, o.st.decode_tok_per_s,
                r.tok_per_s, 100 * (r.tok_per_s / o.st.decode_tok_per_s - 1));
    EXPECT_EQ(r.tokens, (uint32_t)o.st.tokens_decode);
    // With lookahead the engine's hits depend on timing (when prefetches land and pins drop, see
    // the header): at 16 slots, lookahead 8, on the same
    // binary the engine gave 0.5859 in most runs, 0.5807 once and 0.6068-0.6081 in 2 of 8 (a loaded
    // machine, 2026-12-02, 1103799), the sim 0.5859. 0.03 covers that spread; a sim without the
    // lookahead (no-lookahead hit rate 0.668 here) still fails it. Without lookahead they matched exactly in every run.
    EXPECT_NEAR(r.hit_rate, eh, k.la ? 0.03 : 0.02);
    // the regime the test relies on: I/O-bound, compute a small share. A machine
    // loaded by other work inflates compute past it (helpers' builds did, 2026-12-07):
    // then the timing claim cannot be checked here, and the case says so rather than
    // failing for the load (hit rates and read counts above are still checked).
    if (5 * compute_ms >= eng_ms)
      GTEST_SKIP() << "not I/O-bound on this machine now: compute " << compute_ms
                   << " ms/token x5 >= " << eng_ms << " ms/token (loaded by other work?)";
    EXPECT_NEAR(o.st.decode_tok_per_s / r.tok_per_s, 1.0, kTolerance);
  }
}

}  // namespace
