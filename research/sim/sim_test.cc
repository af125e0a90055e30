// research/sim/sim_test.cc: the simulator's config validation, synthetic
// routing, the exactness of its cache part against trace replay, and the
// direction of its timing and memory models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "research/sim/sim.h"
#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"
}

namespace {

std::string Parse(const std::string &json, spill_sim_config *c) {
  spill_err e = {};
  int rc = spill_sim_config_parse(json.c_str(), "t.json", c, &e);
  return rc == 0 ? "" : std::string(e.msg);
}

const char *kBase =
    R"({"model": {"moe_layers": 4, "experts": 16, "top_k": 2, "record_bytes": 1048576,
        "trunk_bytes": "64M"},
       "routing": {"synthetic": {"tokens": 50, "zipf": 0.8, "reuse": 0.4, "seed": 3}},
       "cache": {"policy": "lru"},
       "io": {"threads": 2, "bandwidth": "1G", "latency_us": 50},
       "compute": {"per_layer_ms": 1, "per_expert_ms": 0.5},
       "budgets": ["70M", "80M"]})";

TEST(SimConfigTest, AcceptsAValidConfig) {
  spill_sim_config c;
  ASSERT_EQ(Parse(kBase, &c), "");
  EXPECT_EQ(c.moe_layers, 4u);
  EXPECT_EQ(c.n_budgets, 2);
  EXPECT_EQ(c.budgets[1], 80ull << 20);
  EXPECT_DOUBLE_EQ(c.io_bandwidth, 1073741824.0);
  EXPECT_NEAR(c.t_expert_s, 0.5e-3, 1e-12);
  EXPECT_EQ(c.min_cache_bytes, 2ull * 2 * 1048576);
}

TEST(SimConfigTest, ErrorsNameTheJsonPath) {
  spill_sim_config c;
  std::string b = kBase;
  auto with = [&](const std::string &from, const std::string &to) {
    std::string s = b;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return Parse(s, &c);
  };
  EXPECT_NE(with(R"("1G")", R"("fast")").find("io.bandwidth"), std::string::npos);
  EXPECT_NE(with(R"(["70M", "80M"])", R"(["70M", "9Q"])").find("budgets[1]"), std::string::npos);
  EXPECT_NE(with(R"(["70M", "80M"])", R"(["1M"])").find("below the floor"), std::string::npos);
  EXPECT_NE(with(R"("lru")", R"("fifo")").find("cache.policy"), std::string::npos);
  EXPECT_NE(with(R"("reuse": 0.4)", R"("reuse": 1.4)").find("reuse"), std::string::npos);
  EXPECT_NE(with(R"("cache")", R"("cachez")").find("cachez"), std::string::npos);
  EXPECT_NE(with(R"("io": {)", R"("lookahead": {"width": 7}, "io": {)").find("lookahead.precision"),
            std::string::npos);
  EXPECT_NE(with(R"("trunk_bytes": "64M")", R"("trunk_bytes": -3)").find("model.trunk_bytes"),
            std::string::npos);
  EXPECT_NE(Parse("{", &c).find("not valid JSON"), std::string::npos);
  EXPECT_NE(Parse("[]", &c).find("expected an object"), std::string::npos);
}


// "model": {"shape": NAME} takes engine/plan's table of published shapes: the
// gpt-oss-120b row gives its 36 MoE layers of 128 experts, top-4 and the
// MXFP4 record (13,221,888 B: ram_plan_test computes it by hand), so reads
// are counted in the bytes the engine reads for that model; a K-quant row
// its mixed record; an unknown name is refused with the known ones.
TEST(SimConfigTest, PublishedFamilyShapesGiveTheirRecordBytes) {
  spill_sim_config c;
  const std::string g = R"({"model": {"shape": "gpt-oss-120b"},
       "routing": {"synthetic": {"tokens": 50, "seed": 3}}, "cache": {"policy": "lru"},
       "budgets": ["3G"]})";
  ASSERT_EQ(Parse(g, &c), "");
  EXPECT_EQ(c.moe_layers, 36u);
  EXPECT_EQ(c.n_experts, 128u);
  EXPECT_EQ(c.top_k, 4u);
  EXPECT_EQ(c.record_bytes, 13221888u);
  EXPECT_EQ(c.trunk_bytes, 1945997568u);
  EXPECT_EQ(c.min_cache_bytes, 2ull * 4 * 13221888);
  std::string q = g;
  q.replace(q.find("gpt-oss-120b"), 12, "qwen3.5-397b-a17b");
  q.replace(q.find("\"3G\""), 4, "\"40G\"");
  ASSERT_EQ(Parse(q, &c), "");
  EXPECT_EQ(c.moe_layers, 60u);
  EXPECT_EQ(c.n_experts, 512u);
  EXPECT_EQ(c.top_k, 10u);
  std::string bad = g;
  bad.replace(bad.find("gpt-oss-120b"), 12, "gpt-oss-7b");
  const std::string err = Parse(bad, &c);
  EXPECT_NE(err.find("model.shape"), std::string::npos) << err;
  EXPECT_NE(err.find("qwen3.5-35b-a3b"), std::string::npos) << err;
}

// The one JSON reading layer (docs/RELIABILITY.md): a repeated key (cJSON
// kept the first copy, Python the last), a \u0000 and a raw NUL in the file
// are refused by name.
TEST(SimConfigTest, RepeatedKeysAndNulsAreRefusedByName) {
  spill_sim_config c;
  std::string dup = kBase;
  dup.replace(dup.find("\"cache\""), 0, "\"cache\": {\"policy\": \"fifo\"}, ");
  EXPECT_NE(Parse(dup, &c).find("t.json: (root): cache: duplicate key"), std::string::npos)
      << Parse(dup, &c);
  std::string nul = kBase;
  nul.replace(nul.find("\"lru\""), 5, "\"lru\\u0000x\"");
  EXPECT_NE(Parse(nul, &c).find("(NUL) inside a string"), std::string::npos) << Parse(nul, &c);
  std::string path = ::testing::TempDir() + "/sim_nul.json";
  FILE *f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::string raw = std::string(kBase) + std::string("\0\0", 2);
  fwrite(raw.data(), 1, raw.size(), f);
  fclose(f);
  spill_err e = {};
  EXPECT_EQ(spill_sim_config_load(path.c_str(), &c, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("NUL byte"), std::string::npos) << e.msg;
  ASSERT_EQ(Parse(kBase, &c), "");
}

TEST(SimRoutingTest, SyntheticRoutingHitsItsReuseTargetAndSkew) {
  spill_trace t;
  spill_err e = {};
  double s = spill_sim_zipf_for_top10(256, 0.342);
  ASSERT_GT(s, 0.0);
  std::vector<double> z(8, s);
  spill_sim_synth_params sp = {400, 8, 256, 8, z.data(), 0.435, 0.0, 0.0, 0, 0, 0};
  ASSERT_EQ(spill_sim_synth(&sp, 7, &t, &e), 0) << e.msg;
  spill_trace_stats st;
  ASSERT_EQ(spill_trace_compute_stats(&t, 0, 0, &st, &e), 0) << e.msg;
  EXPECT_NEAR(st.reuse_next, 0.435, 0.03);
  EXPECT_GT(st.top10_share_mean, 0.25);
  spill_trace_stats_free(&st);
  spill_trace_free(&t);
}

// The defaults (no skew, reuse or coact in the config) reproduce the OLMoE
// tuning half's statistics, measured by the same code as `spill trace
// stats --tokens 0:150` (docs/SIM.md states the numbers and tolerances):
// co-activation precision within 4 pp and the mean top-10% share within
// 4 pp on the first 150 tokens (the length the targets were measured on),
// next-token reuse within 3 pp over 600 tokens (its expectation does not
// depend on the length). Held-out shapes: other layer and expert counts
// than OLMoE's, and a seed the calibration pilot does not use. Fails when
// the calibration is off: with a topic weight or persistence of 0 the
// co-activation or reuse falls far outside (checked below).
TEST(SimRoutingTest, DefaultSyntheticRoutingReproducesTheOlmoeStatistics) {
  struct Shape { int layers, experts, top_k; };
  double top10 = 0;
  for (int i = 0; i < 8; i++) top10 += spill_sim_default_top10[i] / 8;  // the pilot's layers
  for (Shape sh : {Shape{16, 64, 8}, Shape{12, 128, 8}, Shape{24, 96, 6}}) {
    spill_sim_config c;
    std::string cfg = R"({"model": {"moe_layers": L, "experts": E, "top_k": K, "record_bytes": 4096},
        "routing": {"synthetic": {"tokens": 600, "seed": 11}}, "budgets": ["1G"]})";
    cfg.replace(cfg.find(" L,"), 3, " " + std::to_string(sh.layers) + ",");
    cfg.replace(cfg.find(" E,"), 3, " " + std::to_string(sh.experts) + ",");
    cfg.replace(cfg.find(" K,"), 3, " " + std::to_string(sh.top_k) + ",");
    ASSERT_EQ(Parse(cfg, &c), "");
    spill_trace t;
    spill_err e = {};
    ASSERT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
    spill_trace_stats st, all;
    ASSERT_EQ(spill_trace_compute_stats(&t, 0, 150, &st, &e), 0) << e.msg;
    ASSERT_EQ(spill_trace_compute_stats(&t, 0, 0, &all, &e), 0) << e.msg;
    SCOPED_TRACE(std::to_string(sh.layers) + "x" + std::to_string(sh.experts));
    EXPECT_NEAR(all.reuse_next, SPILL_SIM_DEFAULT_REUSE, 0.03);
    EXPECT_NEAR(st.coact_precision, SPILL_SIM_DEFAULT_COACT, 0.04);
    double layers_top10 = 0;  // over the first 8 layers, as calibrated
    for (int l = 0; l < 8; l++) layers_top10 += st.layers[l].top10_share / 8;
    EXPECT_NEAR(layers_top10, top10, 0.04);
    spill_trace_stats_free(&st);
    spill_trace_stats_free(&all);
    spill_trace_free(&t);
  }
  // without the co-activation and reuse targets the same shape is far off
  spill_sim_config c;
  ASSERT_EQ(Parse(R"({"model": {"moe_layers": 16, "experts": 64, "top_k": 8, "record_bytes": 4096},
      "routing": {"synthetic": {"tokens": 600, "seed": 11, "coact": 0, "reuse": 0}},
      "budgets": ["1G"]})", &c), "");
  spill_trace t;
  spill_err e = {};
  ASSERT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
  spill_trace_stats st;
  ASSERT_EQ(spill_trace_compute_stats(&t, 0, 150, &st, &e), 0) << e.msg;
  EXPECT_LT(st.coact_precision, SPILL_SIM_DEFAULT_COACT - 0.1);
  EXPECT_LT(st.reuse_next, SPILL_SIM_DEFAULT_REUSE - 0.1);
  spill_trace_stats_free(&st);
  spill_trace_free(&t);
}

// The cache part is the engine's cache code on the same sequence. The sim
// keeps a layer's demand entries pinned until consumed, as engine/stream
// does, while trace replay releases each access at once: LRU never picks a
// just-used entry, so it agrees exactly; sampling policies may pick a victim
// among different candidates, so they agree within 1 pp.
TEST(SimRunTest, CachePartMatchesTraceReplayOnTheOlmoeTrace) {
  spill_sim_config c;
  std::string cfg =
      R"({"model": {"moe_layers": 16, "experts": 64, "top_k": 8, "record_bytes": 4096},
          "routing": {"trace": "traces/olmoe-1b-7b-299.jsonl"},
          "cache": {"policy": "POL", "slots": 128}, "budgets": ["1G"]})";
  for (const char *pol : {"lru", "lfru", "nextuse"}) {
    std::string s = cfg;
    s.replace(s.find("POL"), 3, pol);
    ASSERT_EQ(Parse(s, &c), "");
    spill_trace t;
    spill_err e = {};
    ASSERT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
    spill_sim_result r;
    ASSERT_EQ(spill_sim_run(&c, &t, &r, &e), 0) << e.msg;
    spill_trace_replay_result rr;
    ASSERT_EQ(spill_trace_replay(&t, pol, 128, 1, 0, 0, 0, &rr, &e), 0) << e.msg;
    if (std::string(pol) == "lru") EXPECT_EQ(r.hits, rr.hits);
    EXPECT_NEAR(r.hit_rate, rr.hit_rate, 0.01) << pol;
    EXPECT_EQ(r.accesses, rr.accesses) << pol;
    EXPECT_EQ(r.reads, r.misses) << pol;  // no lookahead: one read per miss
    spill_trace_free(&t);
  }
}

spill_sim_result RunOne(const std::string &json) {
  spill_sim_config c;
  spill_sim_result r = {};
  EXPECT_EQ(Parse(json, &c), "");
  spill_trace t;
  spill_err e = {};
  EXPECT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0) << e.msg;
  EXPECT_EQ(spill_sim_run(&c, &t, &r, &e), 0) << e.msg;
  spill_trace_free(&t);
  return r;
}

TEST(SimRunTest, AColdTokenCostsItsReadsWhenIoBound) {
  // every access misses (1 slot), no compute: s/token = reads x record / bandwidth
  // (+ one latency), with one reader thread.
  spill_sim_result r = RunOne(
      R"({"model": {"moe_layers": 4, "experts": 64, "top_k": 2, "record_bytes": 1048576},
          "routing": {"synthetic": {"tokens": 10, "zipf": 0, "reuse": 0, "seed": 1}},
          "cache": {"policy": "lru", "slots": 1}, "io": {"threads": 1, "bandwidth": 1048576000,
          "latency_us": 0}, "budgets": ["1G"]})");
  ASSERT_EQ(r.tokens, 10u);
  double per_read = 1048576.0 / 1048576000.0;
  EXPECT_NEAR(r.s_per_token, (double)r.reads / r.tokens * per_read, 1e-9);
  EXPECT_NEAR(r.io_stall_s, r.s_per_token, 1e-9);
}

// The engine's bandwidth cap (io_throttle) is a token bucket with a burst:
// compute gaps shorter than the burst refill it, so an I/O-bound decode runs
// at bytes / rate with the compute hidden; a device (or a bucket with no
// burst) adds the compute to every token. One read per token (1 slot, 4096
// experts: a repeat is ~1/4096), 10 ms per read, 5 ms of compute per token.
TEST(SimRunTest, ATokenBucketWithABurstHidesComputeShorterThanTheBurst) {
  std::string base =
      R"({"model": {"moe_layers": 1, "experts": 4096, "top_k": 1, "record_bytes": 1048576},
          "routing": {"synthetic": {"tokens": 200, "zipf": 0, "reuse": 0, "seed": 1}},
          "cache": {"policy": "lru", "slots": 1},
          "io": {"threads": 1, "bandwidth": 104857600, "latency_us": 0 BURST},
          "compute": {"per_token_ms": 5}, "budgets": ["1G"]})";
  auto with = [&](const char *burst) {
    std::string s = base;
    s.replace(s.find("BURST"), 5, burst);
    return RunOne(s);
  };
  spill_sim_result bucket = with(R"(, "bucket_burst_ms": 50)");
  spill_sim_result bucket0 = with(R"(, "bucket_burst_ms": 0)");
  spill_sim_result device = with("");
  ASSERT_EQ(bucket.reads, 200u);
  // 200 reads x 10 ms, less the 50 ms the full bucket lends at the start
  EXPECT_NEAR(bucket.s_per_token, (200 * 0.010 - 0.050 + 0.005) / 200, 1e-3 * 0.010);
  EXPECT_NEAR(bucket0.s_per_token, 0.015, 1e-9);
  EXPECT_NEAR(device.s_per_token, 0.015, 1e-9);
  std::string bad = base;
  bad.replace(bad.find("BURST"), 5, R"(, "bucket_burst_ms": -1)");
  spill_sim_config c;
  EXPECT_NE(Parse(bad, &c).find("io.bucket_burst_ms"), std::string::npos);
}

TEST(SimRunTest, LookaheadWithPerfectPrecisionTurnsMissesIntoHits) {
  std::string base =
      R"({"model": {"moe_layers": 8, "experts": 64, "top_k": 4, "record_bytes": 65536},
          "routing": {"synthetic": {"tokens": 40, "zipf": 0.5, "reuse": 0.2, "seed": 2}},
          "cache": {"policy": "lru", "slots": 16}, LA "budgets": ["1G"]})";
  std::string off = base, on = base;
  off.replace(off.find("LA"), 2, "");
  on.replace(on.find("LA"), 2, R"("lookahead": {"width": 4, "precision": [1, 1, 1, 1]},)");
  spill_sim_result a = RunOne(off), b = RunOne(on);
  // every layer but the first of each token is predicted exactly
  EXPECT_GT(b.hit_rate, a.hit_rate + 0.5);
  EXPECT_EQ(b.la_correct, b.la_predicted);
  EXPECT_EQ(b.spec_wasted, 0u);
}

// Past RAM, hits become page faults: the same routing at a budget that does
// not fit pays page-ins and runs slower although it hits more.
TEST(SimRunTest, PastPhysicalRamHitsBecomePageFaults) {
  std::string json =
      R"({"model": {"moe_layers": 8, "experts": 64, "top_k": 4, "record_bytes": 1048576,
                    "trunk_bytes": "64M"},
          "routing": {"synthetic": {"tokens": 60, "zipf": 0.9, "reuse": 0.4, "coact": 0, "seed": 5}},
          "cache": {"policy": "lfru"}, "io": {"threads": 4, "bandwidth": "2G"},
          "compute": {"per_layer_ms": 2, "per_expert_ms": 0.2},
          "machine": {"ram": "256M", "reserved": "96M", "swap": true, "pagein_bandwidth": "200M",
                      "fault_latency_us": 20, "page_bytes": 16384},
          "budgets": ["100M", "150M", "200M"]})";
  spill_sim_config c;
  ASSERT_EQ(Parse(json, &c), "");
  spill_trace t;
  spill_err e = {};
  ASSERT_EQ(spill_sim_routing(&c, &t, nullptr, &e), 0);
  spill_sim_result r[3];
  ASSERT_EQ(spill_sim_run(&c, &t, r, &e), 0) << e.msg;
  spill_trace_free(&t);
  EXPECT_EQ(r[0].over_bytes, 0u);
  EXPECT_EQ(r[0].pagein_bytes, 0.0);
  EXPECT_GT(r[2].over_bytes, 0u);
  EXPECT_GT(r[2].hit_rate, r[0].hit_rate);
  EXPECT_GT(r[2].pagein_bytes, 0.0);
  EXPECT_LT(r[2].tok_per_s, 0.5 * r[0].tok_per_s);
  EXPECT_LT(r[2].bytes_read, r[0].bytes_read);  // fewer bytes read, slower: the cliff
}

TEST(SimRunTest, WithoutSwapAnonymousOverflowIsAnOom) {
  spill_sim_result r = RunOne(
      R"({"model": {"moe_layers": 2, "experts": 64, "top_k": 2, "record_bytes": 1048576,
                    "trunk_bytes": "16M"},
          "routing": {"synthetic": {"tokens": 5, "zipf": 0, "seed": 1}},
          "machine": {"ram": "64M", "reserved": "16M", "swap": false, "trunk": "file"},
          "budgets": ["80M"]})");
  EXPECT_EQ(r.oom, 1);
  EXPECT_EQ(r.tok_per_s, 0.0);
}

}  // namespace
