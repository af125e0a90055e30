// research/gen/routing_stats_test.cc: a generated model's own router trace
// reproduces the routing statistics its weights were solved for.
//
// Tiny models (nano attention, 8 MoE layers of 64 experts top-8: OLMoE's
// layer shape; the default mix, Kimi K3 as released, so with attention
// residuals and a lookahead that predicts the router's input through the
// next layer's mix: docs/MODEL.md "Lookahead under AttnRes") are generated
// into TEST_TMPDIR for several parameter settings;
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
#include <utility>
#include <vector>

#include "engine/base/crc32.h"
#include "engine/format/container.h"
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

void MeasureTrace(const std::string &dir, Measured *m);

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
  MeasureTrace(dir, &out);
  return out;
}

// Decodes 96 greedy tokens after a 24-token prompt with lookahead 6 (depth
// 1), writing the router trace, and measures research/trace's statistics.
void MeasureTrace(const std::string &dir, Measured *m) {
  Measured &out = *m;
  spill_err e = {};
  spill_config cfg;
  spill_config_default(&cfg);
  EXPECT_EQ(spill_config_set(&cfg, "lookahead", "6", &e), 0) << e.msg;
  EXPECT_EQ(spill_config_set(&cfg, "lookahead_depth", "1", &e), 0) << e.msg;
  const std::string trace = dir + ".trace.jsonl";
  cfg.trace_path = trace.c_str();
  spill_engine *eng = nullptr;
  EXPECT_EQ(spill_engine_open(dir.c_str(), &cfg, &eng, &e), 0) << e.msg;
  if (!eng) return;
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

namespace {

// crc32 of every file of a container directory (manifest, trunk, banks).
std::vector<std::pair<std::string, uint32_t>> FileCrcs(const std::string &dir) {
  std::vector<std::pair<std::string, uint32_t>> v;
  std::vector<std::string> names = {"manifest.json", "trunk.bin"};
  for (int l = 1; l < 93; l++) {
    char b[32];
    snprintf(b, sizeof b, "experts-%03d.bin", l);
    names.push_back(b);
  }
  for (const std::string &n : names) {
    std::ifstream f(dir + "/" + n, std::ios::binary);
    std::string buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    v.emplace_back(n + " " + std::to_string(buf.size()),
                   spill_crc32(0, buf.data(), buf.size()));
  }
  return v;
}

// `spill gen --like k3` at the smallest RAM the twin takes (50 MiB, an 80 MB
// disk cap: 74 experts per MoE layer) is Kimi K3 as released, scaled: 93
// layers, 69 KDA + 24 MLA with the last one MLA, AttnRes every 12 layers,
// SiTU, the MLA output gate, the KDA gate lower bound, the routed sum
// normed. At the default precision (0.81) it decodes to finite logits: at
// 74 experts top-16 that precision needs a writer ratio of 0.77, whose
// stream grows 2.2^46-fold over 93 layers, past the f16 scales of the late
// writers' weights (every logit was NaN); the plan holds the ratio where the
// stream grows 2^16-fold (spill_gen_max_write_rho, docs/GEN.md) and says so.
// Its own trace reaches the precision the capped ratio gives, and the same
// seed writes the same bytes (another seed does not).
TEST(RoutingStatsTest, LikeK3AtATinyRamIsTheReleasedArchitectureAndDecodesFiniteLogits) {
  const std::string dir = TmpDir() + "/like-k3";
  spill_gen_request req = {};
  req.preset = "twin";  // what `spill gen --like k3 --ram 50M --disk 80M` asks
  req.ram_bytes = 50ull << 20;
  req.disk_bytes = 80000000ull;
  req.seed = 7;
  spill_err e = {};
  ASSERT_EQ(spill_gen(dir.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;

  // The plan spill_gen used: the ratio capped, the growth bounded.
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  o.preset = "twin";
  o.ram_bytes = req.ram_bytes;
  o.disk_bytes = req.disk_bytes;
  o.seed = 7;
  spill_gen_plan_full p;
  ASSERT_EQ(spill_gen_plan_full_make(&o, &p, &e), 0) << e.msg;
  const double rho = p.write_rho, model_precision = p.cal.precision;
  const int capped = p.write_rho_capped, n_layers = p.m.arch.n_layers;
  spill_gen_plan_full_free(&p);
  EXPECT_EQ(capped, 1);
  EXPECT_NEAR(rho, spill_gen_max_write_rho(93), 1e-5);
  EXPECT_LE(std::pow(1.0 + 2.0 * rho * rho, 0.5 * n_layers), SPILL_GEN_MAX_STREAM_GROWTH * 1.001);
  EXPECT_GT(model_precision, 0.81);  // out of reach: the model says what it gives
  spill_container c;
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  const spill_arch &a = c.m.arch;
  EXPECT_STREQ(a.family, "kimi-k3");
  ASSERT_EQ(a.n_layers, 93);
  EXPECT_EQ(a.n_dense_layers, 1);
  int kda = 0, mla = 0;
  for (int l = 0; l < a.n_layers; l++) (a.layer_attn[l] == SPILL_ATTN_KDA ? kda : mla)++;
  EXPECT_EQ(kda, 69);
  EXPECT_EQ(mla, 24);
  EXPECT_EQ(a.layer_attn[92], SPILL_ATTN_MLA);
  EXPECT_EQ(a.attn_res_block, 12);
  EXPECT_EQ(a.activation, SPILL_ACT_SITU);
  EXPECT_EQ(a.mla.out_gate, 1);
  EXPECT_EQ(a.kda.gate_lower_bound, -5.0);
  EXPECT_EQ(a.moe.latent_norm, SPILL_LATENT_NORM_OUTPUT);
  EXPECT_EQ(a.moe.top_k, 16);
  EXPECT_EQ(a.moe.n_shared, 2);
  EXPECT_EQ(c.m.expert_dtype, SPILL_DT_RVQ3);
  EXPECT_NE(spill_manifest_find(&c.m, "blk.12.attn_res_score"), nullptr);
  EXPECT_NE(spill_manifest_find(&c.m, "blk.3.attn_gate"), nullptr);
  spill_container_close(&c);

  Measured m;
  MeasureTrace(dir, &m);  // fails on non-finite logits (spill_generate)
  printf("like k3 at 50 MiB: precision %.3f (asked 0.810, capped ratio %.4f: model %.3f)\n",
         m.precision, rho, model_precision);
  EXPECT_NEAR(m.precision, model_precision, 0.05);

  const auto first = FileCrcs(dir);
  const std::string again = TmpDir() + "/like-k3-again";
  ASSERT_EQ(spill_gen(again.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  EXPECT_EQ(FileCrcs(again), first);
  req.seed = 8;
  const std::string other = TmpDir() + "/like-k3-other";
  ASSERT_EQ(system(("rm -rf '" + again + "'").c_str()), 0);
  ASSERT_EQ(spill_gen(other.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  const auto third = FileCrcs(other);
  for (size_t i = 1; i < first.size(); i++) EXPECT_NE(third[i].second, first[i].second) << first[i].first;
}

// MXFP4 experts (the released checkpoint's dtype): a nano K3 with them
// verifies (every e8m0 exponent checked) and decodes to finite logits.
TEST(RoutingStatsTest, Mxfp4ExpertsGenerateVerifyAndRun) {
  const std::string dir = TmpDir() + "/nano-mxfp4";
  spill_gen_request req = {};
  req.preset = "nano";
  req.expert_dtype = "mxfp4";
  spill_err e = {};
  ASSERT_EQ(spill_gen(dir.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  ASSERT_EQ(spill_container_verify(dir.c_str(), nullptr, nullptr, &e), SPILL_OK) << e.msg;
  spill_container c;
  ASSERT_EQ(spill_container_open(dir.c_str(), &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.m.expert_dtype, SPILL_DT_MXFP4);
  // gate, up (32 x 32) and down (32 x 32): 32 rows of one 17-byte block each
  for (int s = 0; s < SPILL_SEC_COUNT; s++) EXPECT_EQ(c.m.sect[s].bytes, 32u * 17u);
  spill_container_close(&c);
  Measured m;
  MeasureTrace(dir, &m);
  EXPECT_GT(m.precision, 0.0);
}

}  // namespace
