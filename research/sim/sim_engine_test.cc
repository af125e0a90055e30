// research/sim/sim_engine_test.cc: the simulator against the real engine.
//
// A nano model (48 experts per MoE layer) is generated into TEST_TMPDIR; the
// engine decodes with router lookahead and writes its router trace and
// profile; the trace (routing and the engine's own lookahead predictions)
// goes through the simulator with the engine's slot count, policy and seed,
// and the run's measured compute (profile) and read time, which decide when
// pins drop. The cache part must agree: decode hit rate within 2 pp (exact
// for lru, nextuse and wtinylfu; lfru samples victims among unpinned
// entries, and in the engine pins drop in real time), equal access counts,
// and equal lookahead predicted/correct counts. Timing is not asserted here
// (reads come from the page cache at an unthrottled, noisy speed); the tok/s
// agreement is sim_engine_timing_test, on runs made I/O-bound by the
// engine's bandwidth cap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "research/sim/sim_engine_testutil.h"
#include "research/sim/sim_profile_testutil.h"

extern "C" {
#include "research/sim/sim.h"
#include "engine/spill.h"
#include "engine/trace/router_trace.h"
}

namespace {

using spill_sim_test::TmpDir;

struct EngineRun {
  spill_run_stats st;
  uint32_t slots;
  std::string trace;
  spill_sim_test::DecodeProfile prof;
};

EngineRun RunEngine(const std::string &model, const char *slots, const char *policy, int la,
                    const std::string &trace) {
  EngineRun out = {};
  spill_config cfg;
  spill_config_default(&cfg);
  spill_err e = {};
  EXPECT_EQ(spill_config_set(&cfg, "cache_slots", slots, &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "policy", policy, &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead", std::to_string(la).c_str(), &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead_depth", "1", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "storage", "pagecache", &e), 0) << e.msg;
  cfg.trace_path = trace.c_str();
  const std::string prof = trace + ".profile.jsonl";
  cfg.profile_path = prof.c_str();
  spill_engine *eng = nullptr;
  EXPECT_EQ(spill_engine_open(model.c_str(), &cfg, &eng, &e), 0) << e.msg;
  if (!eng) return out;
  int prompt[20];
  for (int i = 0; i < 20; i++) prompt[i] = 40 + (i * 7) % 60;
  spill_sampling smp = {0.0f, 0, 1.0f, 1};
  EXPECT_EQ(spill_generate(eng, prompt, 20, 48, &smp, nullptr, nullptr, nullptr, &out.st, &e), 0)
      << e.msg;
  out.slots = (uint32_t)spill_engine_plan(eng)->cache_slots;
  spill_engine_close(eng);
  out.trace = trace;
  out.prof = spill_sim_test::ReadDecodeProfile(prof);
  return out;
}

TEST(SimEngineTest, SimulatorReproducesTheEnginesCacheCountersOnItsOwnTrace) {
  spill_sim_test::Nano48 nano;
  ASSERT_NO_FATAL_FAILURE(spill_sim_test::MakeNano48(&nano));
  const std::string &model = nano.model;
  const spill_info &info = nano.info;
  const spill_plan &pl = nano.plan;
  spill_err e = {};

  struct Case {
    const char *slots, *policy;
    int la;
  } cases[] = {{"16", "lfru", 2}, {"40", "lfru", 2}, {"80", "lru", 2},
               {"40", "nextuse", 3}, {"40", "wtinylfu", 0}};
  int n = 0;
  for (const Case &k : cases) {
    std::string trace = TmpDir() + "/trace" + std::to_string(n++) + ".jsonl";
    EngineRun run = RunEngine(model, k.slots, k.policy, k.la, trace);
    ASSERT_GT(run.st.tokens_decode, 10);
    ASSERT_EQ(run.prof.rows, run.st.tokens_decode);

    spill_sim_config c;
    spill_sim_config_default(&c);
    spill_sim_set_plan(&c, (uint32_t)info.n_moe_layers, (uint32_t)info.n_experts,
                       (uint32_t)info.top_k, pl.record_bytes, pl.trunk, pl.floor, pl.min_cache);
    c.routing = SPILL_SIM_ROUTING_TRACE;
    snprintf(c.trace_path, sizeof c.trace_path, "%s", trace.c_str());
    snprintf(c.policy, sizeof c.policy, "%s", k.policy);
    c.policy_seed = 1;
    c.cache_slots = std::atoi(k.slots); // the knob overrides the plan's slot count
    c.la_width = k.la;
    c.la_source = SPILL_SIM_LA_TRACE;
    c.prefill_chunk = 16;
    // when a prefetch's pin drops (and so which victims lfru samples) depends
    // on timing: feed the run's measured compute and read time (page cache
    // reads: the median read as latency, transfer negligible)
    const uint32_t L = (uint32_t)info.n_moe_layers, K = (uint32_t)info.top_k;
    c.t_expert_s = run.prof.expert_ms / (L * K) * 1e-3;
    c.t_layer_s = run.prof.layer_ms / L * 1e-3;
    c.t_token_s = run.prof.token_ms * 1e-3;
    c.io_latency_s = run.st.read_p50_ms * 1e-3;
    c.io_bandwidth = 10e9;
    c.n_budgets = 1;
    c.budgets[0] = pl.floor;
    spill_trace t;
    ASSERT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
    spill_sim_result r;
    ASSERT_EQ(spill_sim_run(&c, &t, &r, &e), 0) << e.msg;
    spill_trace_free(&t);

    const uint64_t eh = run.st.decode_hits, em = run.st.decode_misses;
    const double engine_hit = (double)eh / (double)(eh + em);
    SCOPED_TRACE(std::string("slots ") + k.slots + " policy " + k.policy + " lookahead " +
                 std::to_string(k.la));
    EXPECT_EQ(r.tokens, (uint32_t)run.st.tokens_decode);
    EXPECT_EQ(r.accesses, eh + em);
    EXPECT_NEAR(r.hit_rate, engine_hit, 0.02);
    std::printf("slots %s %-8s la %d: engine hit %.4f (%llu/%llu), sim %.4f (%llu/%llu); "
                "spec issued engine %llu sim %llu; read p50 %.3f ms\n",
                k.slots, k.policy, k.la, engine_hit, (unsigned long long)eh,
                (unsigned long long)(eh + em), r.hit_rate, (unsigned long long)r.hits,
                (unsigned long long)r.accesses, (unsigned long long)run.st.spec_issued,
                (unsigned long long)r.spec_issued, run.st.read_p50_ms);
    if (k.la > 0) {
      // the engine's own predictions were replayed: same precision
      EXPECT_EQ(r.la_predicted, run.st.lookahead_predicted);
      EXPECT_EQ(r.la_correct, run.st.lookahead_correct);
    }
  }
}

}  // namespace
