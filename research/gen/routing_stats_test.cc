// research/gen/routing_stats_test.cc: a generated model's own router trace
// reproduces the routing statistics its weights were solved for.
//
// Tiny models (nano attention, 8 MoE layers of 64 experts top-8: OLMoE's
// layer shape) are generated into TEST_TMPDIR for two parameter settings;
// the engine decodes with lookahead 6 (depth 1) and writes its router trace;
// research/trace's statistics of that trace are compared with what was asked
// (lookahead precision) and with what the planner's mean-field model predicts
// (co-activation, which a shape may not reach: docs/GEN.md). Tolerances are
// stated in docs/GEN.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "engine/spill.h"
#include "engine/trace/router_trace.h"
#include "research/gen/spill_gen.h"
#include "research/gen/synth.h"
#include "research/gen/synth_internal.h"
#include "research/trace/trace_analysis.h"

namespace {

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

struct Measured {
  double precision = -1, coact = -1, want_precision = 0, want_coact = 0;
  double model_coact = 0;
  double coact_popular = -1;
  double reuse = -1, want_reuse = 0, model_reuse = 0;  // reuse: decode tokens only
  float reuse_base = 0;
  double reuse_rho = 0, model_corr = 0;
};

// Generates the model, decodes with lookahead 6 and measures its own trace.
Measured GenerateAndMeasure(const std::string &name, double precision, double coact,
                            uint64_t seed, double reuse = 0) {
  Measured out;
  const std::string dir = TmpDir() + "/" + name;
  spill_gen_request req = {};
  req.preset = "nano";
  req.experts = 64;
  req.top_k = 8;
  req.moe_layers = 8;
  req.seed = seed;
  req.lookahead_precision = precision;
  req.coact = coact;
  req.reuse = reuse;
  spill_err e = {};
  EXPECT_EQ(spill_gen(dir.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;

  // What the planner solved for (the same options spill_gen used).
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  o.preset = "nano";
  o.n_experts = 64;
  o.top_k = 8;
  o.n_moe_layers = 8;
  o.seed = seed;
  o.la_precision = precision > 0 ? precision : -1;  // spill_gen's mapping of the request
  o.coact = coact > 0 ? coact : coact < 0 ? 0 : -1;
  o.reuse = reuse > 0 ? reuse : reuse < 0 ? 0 : -1;
  spill_gen_plan_full p;
  EXPECT_EQ(spill_gen_plan_full_make(&o, &p, &e), 0) << e.msg;
  out.want_precision = p.want_precision;
  out.want_coact = p.want_coact;
  out.model_coact = p.cal.coact;
  out.want_reuse = p.want_reuse;
  out.model_reuse = p.model_reuse;
  out.reuse_base = p.reuse_base;
  out.reuse_rho = p.reuse_rho;
  out.model_corr = p.model_corr;
  spill_gen_plan_full_free(&p);

  spill_config cfg;
  spill_config_default(&cfg);
  EXPECT_EQ(spill_config_set(&cfg, "lookahead", "6", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead_depth", "1", &e), 0) << e.msg;
  const std::string trace = dir + ".trace.jsonl";
  cfg.trace_path = trace.c_str();
  spill_engine *eng = nullptr;
  EXPECT_EQ(spill_engine_open(dir.c_str(), &cfg, &eng, &e), 0) << e.msg;
  if (!eng) return out;
  int prompt[24];
  for (int i = 0; i < 24; i++) prompt[i] = 33 + (i * 11) % 90;
  spill_sampling smp = {0.0f, 0, 1.0f, 1};
  spill_run_stats st = {};
  EXPECT_EQ(spill_generate(eng, prompt, 24, 96, &smp, nullptr, nullptr, nullptr, &st, &e), 0)
      << e.msg;
  spill_engine_close(eng);

  std::ifstream f(trace, std::ios::binary);
  std::string buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  spill_trace t;
  EXPECT_EQ(spill_trace_parse(buf.data(), buf.size(), nullptr, &t, &e), 0)
      << e.msg << "\n" << buf.substr(0, 600);
  spill_trace_stats s;
  EXPECT_EQ(spill_trace_compute_stats(&t, 0, 0, &s, &e), 0) << e.msg;
  out.precision = s.lookahead_precision;
  out.coact = s.coact_precision;
  out.coact_popular = s.coact_popular_precision;
  spill_trace_stats_free(&s);
  EXPECT_EQ(spill_trace_compute_stats(&t, 24, 0, &s, &e), 0) << e.msg;  // decode
  out.reuse = s.reuse_next;
  spill_trace_stats_free(&s);
  spill_trace_free(&t);
  return out;
}

void Report(const char *what, const Measured &m) {
  printf("%s: precision %.3f (asked %.3f); co-activation %.3f (asked %.3f, model %.3f, "
         "popular baseline %.3f); decode reuse %.3f (asked %.3f, model %.3f, base %.3f)\n",
         what, m.precision, m.want_precision, m.coact, m.want_coact, m.model_coact,
         m.coact_popular, m.reuse, m.want_reuse, m.model_reuse, m.reuse_base);
}

TEST(RoutingStatsTest, DefaultsReachTheCalibratedLookaheadPrecisionAndCoactivation) {
  Measured m = GenerateAndMeasure("defaults", 0, 0, 5);
  Report("defaults", m);
  EXPECT_NEAR(m.want_precision, 0.81, 1e-9);
  EXPECT_NEAR(m.want_coact, 0.575, 1e-9);
  EXPECT_NEAR(m.precision, m.want_precision, 0.05);
  // with reuse on (the default) consecutive tokens share experts, which the
  // online co-activation predictor also learns from: measured up to 0.07
  // above the planner's model (docs/GEN.md)
  EXPECT_NEAR(m.coact, m.model_coact, 0.08);
}

TEST(RoutingStatsTest, AnotherSettingIsReachedToo) {
  Measured m = GenerateAndMeasure("other", 0.65, 0.40, 9);
  Report("other", m);
  EXPECT_NEAR(m.precision, 0.65, 0.05);
  EXPECT_NEAR(m.coact, m.model_coact, 0.06);
}

TEST(RoutingStatsTest, CoactivationIsReachedWhereTheLookaheadLeavesRoom) {
  // reuse off: at precision 0.95 the writers are small and the reuse base
  // dominates the stream (docs/GEN.md: routing collapses through repetitive
  // greedy decoding), which is not what this test is about
  Measured hi = GenerateAndMeasure("coact", 0.95, 0.50, 13, -1);
  Report("coact", hi);
  EXPECT_NEAR(hi.precision, 0.95, 0.05);
  EXPECT_NEAR(hi.model_coact, 0.50, 0.02);
  EXPECT_NEAR(hi.coact, 0.50, 0.06);
  Measured lo = GenerateAndMeasure("independent", 0.95, -1, 13, -1);  // independent routers
  Report("independent", lo);
  EXPECT_LT(lo.coact, hi.coact - 0.08);
}

// Next-token reuse: SPILL_GEN_KDA_LAG1 was fitted on seeds 5-8 (docs/GEN.md);
// these seeds are held out. Tolerance 0.10 (the spread over seeds is about
// +-0.05, docs/GEN.md).
TEST(RoutingStatsTest, DefaultReuseIsReachedOnHeldOutSeeds) {
  for (uint64_t seed : {21, 23}) {
    Measured m = GenerateAndMeasure("reuse" + std::to_string(seed), 0, 0, seed);
    Report("reuse default", m);
    EXPECT_NEAR(m.want_reuse, 0.411, 1e-9);
    EXPECT_GT(m.reuse_base, 0.0f);
    EXPECT_NEAR(m.model_reuse, 0.411, 0.01);
    EXPECT_NEAR(m.reuse, 0.411, 0.10);
    EXPECT_NEAR(m.precision, m.want_precision, 0.05);
  }
}

TEST(RoutingStatsTest, ReuseIsOutOfReachAboveTheCapAndOffOnRequest) {
  Measured lo = GenerateAndMeasure("reuse_lo", 0, 0, 22);  // the default 0.411
  Report("reuse default", lo);
  Measured off = GenerateAndMeasure("reuse_off", 0, 0, 22, -1);
  Report("reuse off", off);
  EXPECT_NEAR(lo.reuse, 0.411, 0.10);
  // 0.55 needs more than the capped base gives at this shape: the plan says
  // so (the modelled correlation below the one asked)
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  o.n_experts = 64;
  o.top_k = 8;
  o.n_moe_layers = 8;
  o.seed = 22;
  o.reuse = 0.55;
  spill_gen_plan_full p;
  spill_err e = {};
  ASSERT_EQ(spill_gen_plan_full_make(&o, &p, &e), 0) << e.msg;
  EXPECT_NEAR(p.reuse_base, SPILL_GEN_MAX_REUSE_BASE, 1e-3);
  EXPECT_LT(p.model_corr, p.reuse_rho - 0.01);
  EXPECT_NE(strstr(p.sum.text, "out of reach at this shape (base capped)"), nullptr) << p.sum.text;
  spill_gen_plan_full_free(&p);
  EXPECT_EQ(off.reuse_base, 0.0f);
  EXPECT_LT(off.reuse, lo.reuse - 0.08);
}

}  // namespace
