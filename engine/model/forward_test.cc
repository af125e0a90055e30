// engine/model/forward_test.cc: the forward pass on tiny nano containers:
// every attention mix and expert dtype loads and runs, thread count never
// changes a bit, chunked prefill equals token-by-token, stats add up, the
// KDA l2norm eps key is read, and the caller's misuse gets clear errors.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/model/model_test_util.h"

using spill_test::Nano;
using spill_test::Open;
using spill_test::Prompt;
using spill_test::RunSeq;

namespace {

const char *const kMixes[] = {"k3", "mla", "kda", "gqa", "qwen35", "gqa-swa"};

bool AllFinite(const std::vector<float> &v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

TEST(ForwardTest, LoadsEveryAttentionMixAndProducesFiniteLogits) {
  for (const char *mix : kMixes) {
    SCOPED_TRACE(mix);
    spill_test::ModelHandle h;
    h.m = Open(Nano(mix), 1);
    ASSERT_NE(h.m, nullptr);
    const spill_arch *a = spill_model_arch(h.m);
    EXPECT_EQ(a->d_model, 64);
    std::vector<float> lg = RunSeq(h.m, Prompt(6), 2);
    EXPECT_TRUE(AllFinite(lg));
    float mn = lg[0], mx = lg[0];
    for (float x : lg) mn = std::min(mn, x), mx = std::max(mx, x);
    EXPECT_GT(mx - mn, 1e-3f) << "logits are constant";
    EXPECT_EQ(spill_model_n_past(h.m), 8);
    EXPECT_GT(spill_model_trunk_bytes(h.m), 0u);
  }
}

TEST(ForwardTest, RunsEveryExpertDtypeOnBothTrunks) {
  const spill_dtype dts[] = {SPILL_DT_F32, SPILL_DT_Q8, SPILL_DT_Q4, SPILL_DT_RVQ3};
  for (spill_dtype dt : dts) {
    for (spill_gen_trunk tr : {SPILL_GEN_TRUNK_Q4, SPILL_GEN_TRUNK_F32}) {
      SCOPED_TRACE(std::string(spill_dtype_name(dt)) + (tr == SPILL_GEN_TRUNK_F32 ? " f32 trunk" : " q4 trunk"));
      spill_test::ModelHandle h;
      h.m = Open(Nano("k3", tr, dt), 2);
      ASSERT_NE(h.m, nullptr);
      EXPECT_TRUE(AllFinite(RunSeq(h.m, Prompt(5), 1)));
    }
  }
}

TEST(ForwardTest, OneAndTwoThreadsGiveBitIdenticalLogits) {
  for (const char *mix : kMixes) {
    SCOPED_TRACE(mix);
    spill_test::ModelHandle h1, h2, h3;
    h1.m = Open(Nano(mix), 1, 4);
    h2.m = Open(Nano(mix), 2, 4);
    h3.m = Open(Nano(mix), 3, 4);
    ASSERT_TRUE(h1.m && h2.m && h3.m);
    std::vector<float> a = RunSeq(h1.m, Prompt(11), 4);
    std::vector<float> b = RunSeq(h2.m, Prompt(11), 4);
    std::vector<float> c = RunSeq(h3.m, Prompt(11), 4);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(a.size(), c.size());
    EXPECT_EQ(0, memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "1 vs 2 threads";
    EXPECT_EQ(0, memcmp(a.data(), c.data(), a.size() * sizeof(float))) << "1 vs 3 threads";
  }
}

// The MoE region (moe.c) for every expert dtype, with f32 and act_q8
// inputs: 2 and 3 threads split decode experts by rows (few uses per
// thread) and share prefill chunks' uses; the logits equal one thread's.
// One MoE region per MoE layer and forward call, whatever the uses.
TEST(ForwardTest, MoeRegionIsBitIdenticalForEveryDtypeAndThreadCount) {
  const spill_dtype dts[] = {SPILL_DT_F32, SPILL_DT_Q8, SPILL_DT_Q4, SPILL_DT_RVQ3};
  for (spill_dtype dt : dts) {
    for (int q8 : {0, 1}) {
      SCOPED_TRACE(std::string(spill_dtype_name(dt)) + (q8 ? " act_q8" : " f32 inputs"));
      std::vector<float> want;
      for (int threads : {1, 2, 3}) {
        spill_model_opts o = {};
        o.par_min_weights = 1;
        o.task_max_weights = 256;
        o.n_threads = threads;
        o.ctx = 256;
        o.max_chunk = 4;
        o.act_q8 = q8;
        spill_test::ModelHandle h;
        spill_err e = {};
        ASSERT_EQ(spill_model_open(Nano("gqa", SPILL_GEN_TRUNK_Q4, dt).c_str(), &o, &h.m, &e),
                  SPILL_OK)
            << e.msg;
        std::vector<float> got = RunSeq(h.m, Prompt(9), 3);
        if (threads == 1) {
          want = got;
          continue;
        }
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << threads << " threads";
        const spill_arch *a = spill_model_arch(h.m);
        // 9 prompt tokens in chunks of 4 (3 calls of the prefill) + 3 decode steps
        EXPECT_EQ(spill_model_moe_regions(h.m), (uint64_t)(3 + 3) * (uint64_t)spill_arch_n_moe(a));
      }
    }
  }
}

// A decode token's shared experts are tasks of the MoE region (moe.c):
// the logits equal those of the shared experts run as their own row-split
// matvecs before the region (shared_outside_region), bit for bit, for every
// attention mix (qwen35: the shared-expert gate), expert dtype, f32 and
// act_q8 inputs, on both trunks, and 1/2/3 threads; with 2 and 3 threads
// each decode token's MoE layer makes exactly 2 fork-joins fewer (shared
// gate/up and down; the one-row shared gate is one task, never a fork-join),
// the prefill chunks' none.
TEST(ForwardTest, SharedExpertsInTheRegionGiveTheRowSplitBits) {
  struct Case {
    const char *mix;
    spill_dtype dt;
    spill_gen_trunk tr;
  };
  const Case cases[] = {{"k3", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_Q4},
                        {"gqa", SPILL_DT_Q4, SPILL_GEN_TRUNK_Q4},
                        {"gqa", SPILL_DT_F32, SPILL_GEN_TRUNK_F32},
                        {"mla", SPILL_DT_Q8, SPILL_GEN_TRUNK_Q4},
                        {"qwen35", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_Q4},
                        {"qwen35", SPILL_DT_Q4, SPILL_GEN_TRUNK_F32}};
  for (const Case &c : cases) {
    for (int q8 : {0, 1}) {
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(std::string(c.mix) + " " + spill_dtype_name(c.dt) +
                     (c.tr == SPILL_GEN_TRUNK_F32 ? " f32 trunk" : " q4 trunk") +
                     (q8 ? " act_q8 " : " f32 inputs ") + std::to_string(threads) + " threads");
        std::vector<float> got[2];
        uint64_t runs[2] = {0, 0};
        int n_moe = 0, n_shared = 0;
        for (int outside : {0, 1}) {
          spill_model_opts o = {};
          o.par_min_weights = 1;
          o.task_max_weights = 256;
          o.n_threads = threads;
          o.ctx = 256;
          o.max_chunk = 4;
          o.act_q8 = q8;
          o.shared_outside_region = outside;
          spill_test::ModelHandle h;
          spill_err e = {};
          ASSERT_EQ(spill_model_open(Nano(c.mix, c.tr, c.dt).c_str(), &o, &h.m, &e), SPILL_OK)
              << e.msg;
          got[outside] = RunSeq(h.m, Prompt(6), 4);
          runs[outside] = spill_model_parallel_runs(h.m);
          const spill_arch *a = spill_model_arch(h.m);
          n_moe = spill_arch_n_moe(a);
          n_shared = a->moe.n_shared;
        }
        ASSERT_GT(n_shared, 0) << "the case needs shared experts";
        ASSERT_EQ(got[0].size(), got[1].size());
        EXPECT_EQ(0, memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)))
            << "shared experts in the region vs row-split before it";
        // 4 decode steps (the prompt goes in as chunks of 4 and 2: unchanged)
        const uint64_t fewer = threads == 1 ? 0 : (uint64_t)4 * n_moe * 2;
        EXPECT_EQ(runs[1] - runs[0], fewer);
      }
    }
  }
}

// The steps around a MoE layer's routed experts are tasks of its region
// (moe.c): a decode token's router, latent down and up projections, and
// every token's rvq3 gate/up LUT builds (prefill chunks' too). The logits
// equal those of the steps run as their own row-split fork-joins
// (steps_outside_region), bit for bit, and with the steps inside and the
// shared experts outside, for every attention mix (k3/mla: the latent
// projections and their norm on either side; gqa/qwen35: none), expert
// dtype, f32 and act_q8 inputs, both trunks and 1/2/3 threads. With 2 and
// 3 threads a decode token's MoE layer is exactly one fork-join
// (n_parallel_moe), where the steps outside made more wherever a step was
// big enough to split; with one thread none.
TEST(ForwardTest, StepsInTheRegionGiveTheRowSplitBits) {
  struct Case {
    const char *mix;
    spill_dtype dt;
    spill_gen_trunk tr;
  };
  const Case cases[] = {{"k3", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_Q4},
                        {"k3", SPILL_DT_Q4, SPILL_GEN_TRUNK_F32},
                        {"mla", SPILL_DT_Q8, SPILL_GEN_TRUNK_Q4},
                        {"mla", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_F32},
                        {"gqa", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_Q4},
                        {"gqa", SPILL_DT_F32, SPILL_GEN_TRUNK_F32},
                        {"qwen35", SPILL_DT_Q4, SPILL_GEN_TRUNK_Q4}};
  for (const Case &c : cases) {
    for (int q8 : {0, 1}) {
      for (int threads : {1, 2, 3}) {
        const std::string name = std::string(c.mix) + " " + spill_dtype_name(c.dt) +
                                 (c.tr == SPILL_GEN_TRUNK_F32 ? " f32 trunk" : " q4 trunk") +
                                 (q8 ? " act_q8 " : " f32 inputs ") + std::to_string(threads) +
                                 " threads";
        // outside the region a step splits (par_min_weights 1, 16-row tasks)
        // where nano has one: rvq3's LUTs, k3/mla's latent projections (the
        // router's 16 rows are one task, run inline)
        const bool splits = c.dt == SPILL_DT_RVQ3 || !strcmp(c.mix, "k3") || !strcmp(c.mix, "mla");
        std::vector<float> want;
        for (int arm = 0; arm < 3; arm++) {
          const int steps_out = arm & 1, shared_out = arm >> 1;
          SCOPED_TRACE(name + (steps_out ? " steps outside" : " steps inside") +
                       (shared_out ? ", shared outside" : ", shared inside"));
          spill_model_opts o = {};
          o.par_min_weights = 1;
          o.task_max_weights = 256;
          o.n_threads = threads;
          o.ctx = 256;
          o.max_chunk = 4;
          o.act_q8 = q8;
          o.steps_outside_region = steps_out;
          o.shared_outside_region = shared_out;
          spill_test::ModelHandle h;
          spill_err e = {};
          ASSERT_EQ(spill_model_open(Nano(c.mix, c.tr, c.dt).c_str(), &o, &h.m, &e), SPILL_OK)
              << e.msg;
          const int n_moe = spill_arch_n_moe(spill_model_arch(h.m));
          const std::vector<int> prompt = Prompt(6);
          const int V = spill_model_arch(h.m)->vocab_size;
          std::vector<float> lg(V), got;
          ASSERT_EQ(spill_model_forward(h.m, prompt.data(), 6, 0, lg.data(), &e), SPILL_OK)
              << e.msg;
          got.insert(got.end(), lg.begin(), lg.end());
          for (int pos = 6; pos < 10; pos++) {  // 4 greedy decode tokens
            const int tok = (int)(std::max_element(lg.begin(), lg.end()) - lg.begin());
            ASSERT_EQ(spill_model_forward(h.m, &tok, 1, pos, lg.data(), &e), SPILL_OK) << e.msg;
            got.insert(got.end(), lg.begin(), lg.end());
            const spill_model_stats *st = spill_model_last_stats(h.m);
            EXPECT_LE(st->n_parallel_moe, st->n_parallel);
            if (threads == 1) {
              EXPECT_EQ(st->n_parallel, 0u);
            } else if (shared_out || (steps_out && splits)) {
              EXPECT_GT(st->n_parallel_moe, (uint64_t)n_moe) << "pos " << pos;
            } else {  // all inside, or only steps too small to split outside
              EXPECT_EQ(st->n_parallel_moe, (uint64_t)n_moe) << "pos " << pos;
            }
          }
          if (arm == 0) {
            want = got;
            continue;
          }
          ASSERT_EQ(got.size(), want.size());
          EXPECT_EQ(0, memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << "steps/shared outside the region vs inside";
        }
      }
    }
  }
}

// An MLA or KDA layer is one parallel region (spill_pool_run_steps): its
// projections, the prep between them, the heads and the output projection
// are steps of one fork-join. The logits equal those of the layer run as
// its own row-split fork-joins (attn_outside_region), bit for bit, over a
// chunked prefill (6 tokens in chunks of 4) and 4 decode tokens, for the
// mixes with MLA or KDA layers (k3: both, with K3's output gate, KDA's
// low-rank output gate and the gate lower bound; mla: RoPE, q without
// q_lora; kda: plain residuals), expert dtypes, both trunks, f32 and act_q8
// inputs, 1/2/3 threads. The fork-join count of a decode token is exact:
// one per MLA/KDA layer (plus KDA's low-rank output gate, g_a and g_b, run
// before the region where they split), one per MoE layer, two per dense FFN
// (gate/up, down), one for the output matrix; with one thread none.
TEST(ForwardTest, AttentionRegionGivesTheRowSplitBits) {
  struct Case {
    const char *mix;
    spill_dtype dt;
    spill_gen_trunk tr;
  };
  const Case cases[] = {{"k3", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_Q4},
                        {"k3", SPILL_DT_Q8, SPILL_GEN_TRUNK_F32},
                        {"mla", SPILL_DT_Q4, SPILL_GEN_TRUNK_Q4},
                        {"mla", SPILL_DT_RVQ3, SPILL_GEN_TRUNK_F32},
                        {"kda", SPILL_DT_Q4, SPILL_GEN_TRUNK_Q4},
                        {"kda", SPILL_DT_F32, SPILL_GEN_TRUNK_F32}};
  int regions_seen = 0;
  for (const Case &c : cases) {
    for (int q8 : {0, 1}) {
      for (int threads : {1, 2, 3}) {
        const std::string name = std::string(c.mix) + " " + spill_dtype_name(c.dt) +
                                 (c.tr == SPILL_GEN_TRUNK_F32 ? " f32 trunk" : " q4 trunk") +
                                 (q8 ? " act_q8 " : " f32 inputs ") + std::to_string(threads) +
                                 " threads";
        std::vector<float> want;
        uint64_t decode_runs[2] = {0, 0};
        for (int outside : {1, 0}) {
          SCOPED_TRACE(name + (outside ? " row-split" : " region"));
          spill_model_opts o = {};
          o.par_min_weights = 1;
          o.task_max_weights = 256;
          o.n_threads = threads;
          o.ctx = 256;
          o.max_chunk = 4;
          o.act_q8 = q8;
          o.attn_outside_region = outside;
          spill_test::ModelHandle h;
          spill_err e = {};
          ASSERT_EQ(spill_model_open(Nano(c.mix, c.tr, c.dt).c_str(), &o, &h.m, &e), SPILL_OK)
              << e.msg;
          const spill_arch *a = spill_model_arch(h.m);
          int expect = spill_arch_n_moe(a) + 2 * a->n_dense_layers + 1, n_region = 0;
          for (int l = 0; l < a->n_layers; l++) {
            const spill_attn_kind k = a->layer_attn[l];
            ASSERT_TRUE(k == SPILL_ATTN_MLA || k == SPILL_ATTN_KDA) << "layer " << l;
            n_region++;
            // KDA's low-rank output gate before the region: g_b (H*d rows) is
            // split, g_a only with more than one task's 16 rows
            const int og = k == SPILL_ATTN_KDA ? a->kda.out_gate_rank : 0;
            expect += 1 + (og > 0) + (og > 16);
          }
          const std::vector<int> prompt = Prompt(6);
          std::vector<float> lg(a->vocab_size), got;
          ASSERT_EQ(spill_model_forward(h.m, prompt.data(), 6, 0, lg.data(), &e), SPILL_OK)
              << e.msg;
          got.insert(got.end(), lg.begin(), lg.end());
          for (int pos = 6; pos < 10; pos++) {  // 4 greedy decode tokens
            const int tok = (int)(std::max_element(lg.begin(), lg.end()) - lg.begin());
            ASSERT_EQ(spill_model_forward(h.m, &tok, 1, pos, lg.data(), &e), SPILL_OK) << e.msg;
            got.insert(got.end(), lg.begin(), lg.end());
            const spill_model_stats *st = spill_model_last_stats(h.m);
            decode_runs[outside] += st->n_parallel;
            if (threads == 1) {
              EXPECT_EQ(st->n_parallel, 0u);
            } else if (!outside) {
              EXPECT_EQ(st->n_parallel, (uint64_t)expect) << "pos " << pos;
              EXPECT_EQ(st->n_parallel_moe, (uint64_t)spill_arch_n_moe(a)) << "pos " << pos;
            }
          }
          regions_seen += !outside && threads > 1 ? n_region : 0;
          if (outside) {
            want = got;
            continue;
          }
          ASSERT_EQ(got.size(), want.size());
          EXPECT_EQ(0, memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << "attention as one region vs row-split fork-joins";
        }
        // every MLA/KDA layer made at least 3 fork-joins row-split (projections,
        // heads, output), so the region saves at least 2 per layer and token
        if (threads > 1) EXPECT_GT(decode_runs[1], decode_runs[0] + 8);
      }
    }
  }
  EXPECT_GT(regions_seen, 0);
}

TEST(ForwardTest, ChunkedPrefillMatchesTokenByToken) {
  for (const char *mix : kMixes) {
    SCOPED_TRACE(mix);
    spill_test::ModelHandle hc, hs;
    hc.m = Open(Nano(mix), 1, 5);  // 13 tokens = chunks of 5, 5, 3
    hs.m = Open(Nano(mix), 1, 5);
    ASSERT_TRUE(hc.m && hs.m);
    const std::vector<int> p = Prompt(13);
    const int V = spill_model_arch(hc.m)->vocab_size;
    std::vector<float> lc(V), ls(V);
    spill_err e = {};
    ASSERT_EQ(spill_model_forward(hc.m, p.data(), 13, 0, lc.data(), &e), SPILL_OK) << e.msg;
    for (int i = 0; i < 13; i++)
      ASSERT_EQ(spill_model_forward(hs.m, &p[i], 1, i, ls.data(), &e), SPILL_OK) << e.msg;
    float scale = 0, diff = 0;
    for (int v = 0; v < V; v++) {
      scale = std::max(scale, std::fabs(ls[v]));
      diff = std::max(diff, std::fabs(lc[v] - ls[v]));
    }
    EXPECT_LE(diff, 1e-5f * scale);
    // and the next decode step agrees too
    int tok = 65;
    ASSERT_EQ(spill_model_forward(hc.m, &tok, 1, 13, lc.data(), &e), SPILL_OK);
    ASSERT_EQ(spill_model_forward(hs.m, &tok, 1, 13, ls.data(), &e), SPILL_OK);
    for (int v = 0; v < V; v++) EXPECT_NEAR(lc[v], ls[v], 1e-5f * scale);
  }
}

// A copy of the nano KDA container with arch.kda.l2norm_eps set to eps.
std::string WithL2normEps(const std::string &src, const char *tag, const char *eps) {
  namespace fs = std::filesystem;
  const std::string dir = src + "-l2eps-" + tag;
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  std::ifstream in(dir + "/manifest.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string m = ss.str();
  const size_t at = m.find("\"decay_floor\"");
  EXPECT_NE(at, std::string::npos);
  if (at == std::string::npos) return dir;
  m.insert(at, std::string("\"l2norm_eps\": ") + eps + ", ");
  std::ofstream(dir + "/manifest.json", std::ios::trunc) << m;
  return dir;
}

// arch.kda.l2norm_eps: absent = 1e-6 bit for bit (the K3 family's and the
// safetensors imports' containers are unchanged); another value changes
// the q/k normalisation and so the logits.
TEST(ForwardTest, KdaL2normEpsDefaultsTo1e6AndIsUsed) {
  const std::string base = Nano("kda", SPILL_GEN_TRUNK_F32, SPILL_DT_F32);
  const std::vector<int> p = Prompt(6);
  spill_test::ModelHandle h0, h1, h2;
  h0.m = Open(base, 1);
  h1.m = Open(WithL2normEps(base, "1e-6", "1e-6"), 1);
  h2.m = Open(WithL2normEps(base, "0.5", "0.5"), 1);
  ASSERT_TRUE(h0.m && h1.m && h2.m);
  EXPECT_EQ(spill_model_arch(h1.m)->kda.l2norm_eps, 1e-6);
  const std::vector<float> a = RunSeq(h0.m, p, 2), b = RunSeq(h1.m, p, 2), c = RunSeq(h2.m, p, 2);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), c.size());
  EXPECT_EQ(0, memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(0, memcmp(a.data(), c.data(), a.size() * sizeof(float)));
}

TEST(ForwardTest, StatsCountEveryExpertUseOnce) {
  spill_test::ModelHandle h;
  h.m = Open(Nano("k3"), 1, 16);
  ASSERT_NE(h.m, nullptr);
  const spill_arch *a = spill_model_arch(h.m);
  RunSeq(h.m, Prompt(7), 0);
  const spill_model_stats *s = spill_model_last_stats(h.m);
  const int n_moe = spill_arch_n_moe(a);
  EXPECT_EQ(s->n_tokens, 7);
  EXPECT_EQ(s->n_expert_uses, (uint64_t)7 * a->moe.top_k * n_moe);
  EXPECT_LE(s->n_expert_requests, s->n_expert_uses);
  EXPECT_GE(s->n_expert_requests, (uint64_t)a->moe.top_k * n_moe);
  EXPECT_GT(s->ns_total, 0u);
  EXPECT_GT(s->ns_attn, 0u);
  EXPECT_GT(s->ns_lut, 0u);  // rvq3 experts
  EXPECT_LE(s->ns_attn + s->ns_router + s->ns_lut + s->ns_expert + s->ns_expert_wait +
                s->ns_lm_head + s->ns_other,
            s->ns_total);
}

TEST(ForwardTest, RejectsBadPositionTokenAndContextOverflow) {
  spill_test::ModelHandle h;
  h.m = Open(Nano("k3"), 1, 16, nullptr, 8);
  ASSERT_NE(h.m, nullptr);
  std::vector<float> lg(spill_model_arch(h.m)->vocab_size);
  spill_err e = {};
  int t[9] = {256, 1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(spill_model_forward(h.m, t, 3, 0, lg.data(), &e), SPILL_OK);
  EXPECT_EQ(spill_model_forward(h.m, t, 1, 5, lg.data(), &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("pos 5"), std::string::npos) << e.msg;
  int bad = 320;
  EXPECT_EQ(spill_model_forward(h.m, &bad, 1, 3, lg.data(), &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_model_forward(h.m, t, 9, 0, lg.data(), &e), SPILL_E_RANGE);
  EXPECT_NE(std::string(e.msg).find("ctx 8"), std::string::npos) << e.msg;
  // pos 0 starts a new sequence: same logits as a fresh model
  std::vector<float> again(lg.size()), fresh(lg.size());
  ASSERT_EQ(spill_model_forward(h.m, t, 3, 0, again.data(), &e), SPILL_OK);
  spill_test::ModelHandle h2;
  h2.m = Open(Nano("k3"), 1, 16, nullptr, 8);
  ASSERT_EQ(spill_model_forward(h2.m, t, 3, 0, fresh.data(), &e), SPILL_OK);
  EXPECT_EQ(0, memcmp(again.data(), fresh.data(), lg.size() * sizeof(float)));
}

}  // namespace
