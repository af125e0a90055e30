// Tests for engine/plan: the planner against the published K3 figures
// (../shared/reference/k3-published.md), the default budget rule, refusal
// below the floor, and size parsing.
#include "engine/plan/ram_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr double GiB = 1073741824.0;

class K3PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spill_err e = {};
    ASSERT_EQ(spill_plan_k3_shape(&arch_, &record_, &trunk_, &e), SPILL_OK) << e.msg;
  }
  spill_plan Plan(int ctx) {
    spill_plan p;
    spill_err e = {};
    EXPECT_EQ(spill_plan_compute(&arch_, record_, trunk_, ctx, 1, &p, &e), SPILL_OK) << e.msg;
    return p;
  }
  spill_arch arch_;
  uint64_t record_ = 0, trunk_ = 0;
};

TEST_F(K3PlanTest, RecordMatchesPublishedExactly) {
  // Published: 12,406,784 B (3029 pages of 4 KiB).
  EXPECT_EQ(record_, 12406784u);
}

// The released graph (../shared/reference/k3-released.md): 69 KDA + 24 MLA
// with every fourth layer and the last MLA, SiTU 4/25, attention residuals
// every 12 layers, the MLA output gate, the bounded KDA decay.
TEST_F(K3PlanTest, ShapeIsTheReleasedGraph) {
  int mla = 0;
  for (int l = 0; l < arch_.n_layers; l++) mla += arch_.layer_attn[l] == SPILL_ATTN_MLA;
  EXPECT_EQ(arch_.n_layers, 93);
  EXPECT_EQ(mla, 24);
  EXPECT_EQ(arch_.layer_attn[0], SPILL_ATTN_KDA);
  EXPECT_EQ(arch_.layer_attn[3], SPILL_ATTN_MLA);
  EXPECT_EQ(arch_.layer_attn[91], SPILL_ATTN_MLA);
  EXPECT_EQ(arch_.layer_attn[92], SPILL_ATTN_MLA);
  EXPECT_EQ(arch_.activation, SPILL_ACT_SITU);
  EXPECT_EQ(arch_.attn_res_block, 12);
  EXPECT_EQ(arch_.mla.out_gate, 1);
  EXPECT_EQ(arch_.kda.gate_lower_bound, -5.0);
  EXPECT_EQ(arch_.moe.latent_norm, SPILL_LATENT_NORM_OUTPUT);
}

// MXFP4 experts as shipped: 3 x 3072 x 3584 / 32 x 17 = 17,547,264 B of
// payload (4284 pages exactly), plus our 64-byte record header: one page more.
TEST(K3ShapeTest, Mxfp4RecordIsTheShippedBytesPlusOurHeaderPage) {
  spill_arch a;
  uint64_t rec = 0, trunk = 0, trunk_rvq = 0, rec_rvq = 0;
  spill_err e = {};
  ASSERT_EQ(spill_plan_k3_shape_dtype(SPILL_DT_MXFP4, &a, &rec, &trunk, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(rec, 17547264u + 4096u);
  ASSERT_EQ(spill_plan_k3_shape(&a, &rec_rvq, &trunk_rvq, &e), SPILL_OK);
  EXPECT_EQ(trunk, trunk_rvq);  // the trunk does not depend on the experts' dtype
  EXPECT_EQ(spill_plan_k3_shape_dtype(SPILL_DT_Q8, &a, &rec, &trunk, &e), SPILL_E_INVALID_ARG);
}


// gpt-oss-120b (config.json: hidden 2880, 36 layers, 64 heads x 64, 8 kv
// heads, 128 experts of 2880, top-4, vocab 201088), computed by hand here
// rather than through the estimator. Expert record: three 2880 x 2880 MXFP4
// matrices, 90 blocks of 17 B per row = 4,406,400 B each, at offsets 64,
// 4,406,464 and 8,812,864 (64-aligned), ending at 13,219,264: 3228 pages.
TEST(PublishedShapeTest, GptOss120bRecordAndTrunkByHand) {
  spill_arch a;
  uint64_t rec = 0, trunk = 0;
  spill_dtype dt = SPILL_DT_F32;
  spill_err e = {};
  ASSERT_EQ(spill_plan_shape_arch("gpt-oss-120b", &a, &rec, &trunk, &dt, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(dt, SPILL_DT_MXFP4);
  EXPECT_EQ(rec, 3228u * 4096u);
  EXPECT_EQ(rec, 13221888u);
  // Trunk: tok_embd and output in q8 (groups of 32: 2880 + 90 x 2 B per row),
  // output_norm f32; per layer two norms, q (4096 x 2880) k, v (512 x 2880)
  // in q4 with groups of 64 (2880 is not a multiple of 128: 1440 + 45 x 2 B
  // per row), attn_output (2880 x 4096) in q4 groups of 128 (2048 + 32 x 2),
  // f32 q/k/v biases (4096 + 512 + 512), output bias (2880), sinks (64),
  // router (128 x 2880) and its bias (128), expert biases 128 x (2880 x 3).
  const uint64_t embd = 201088ull * (2880 + 90 * 2);
  const uint64_t layer = 2 * 2880 * 4 + 4096ull * 1530 + 2 * 512ull * 1530 + 2880ull * 2112 +
                         (4096 + 512 + 512) * 4 + 2880 * 4 + 64 * 4 + 128ull * 2880 * 4 +
                         128 * 4 + 128ull * 2880 * 3 * 4;
  EXPECT_EQ(layer, 19870208u);
  EXPECT_EQ(trunk, 2 * embd + 2880 * 4 + 36 * layer);
  EXPECT_EQ(trunk, 1945997568u);
  // the graph the engine runs for it (docs/MODEL.md "gpt-oss")
  EXPECT_EQ(a.n_layers, 36);
  EXPECT_EQ(a.n_dense_layers, 0);
  EXPECT_EQ(a.moe.n_experts, 128);
  EXPECT_EQ(a.moe.top_k, 4);
  EXPECT_EQ(a.moe.router, SPILL_ROUTER_SOFTMAX_TOPK);
  EXPECT_EQ(a.activation, SPILL_ACT_SWIGLU_OAI);
  EXPECT_EQ(a.gqa.sinks, 1);
  EXPECT_EQ(a.gqa.swa_window, 128);
}

// Q4_K_M experts: Q4_K gate and up, a Q6_K-sized down section (the layers
// llama.cpp gives Q6_K set the shared layout). Qwen3.5-35B-A3B: gate and up
// 512 x 2048 in Q4_K (8 x 144 B per row) = 589,824 B, down 2048 x 512 in
// Q6_K (2 x 210 B per row) = 860,160 B: payload ends at 2,039,872, 499 pages.
// GLM-4.5-Air in q4 groups of 32: 1408 x 4096 (2048 + 128 x 2 B per row) and
// 4096 x 1408 (704 + 44 x 2 B per row), 3,244,032 B each: ends at 9,732,160.
TEST(PublishedShapeTest, KQuantAndQ4RecordsByHand) {
  spill_arch a;
  uint64_t rec = 0, trunk = 0;
  spill_err e = {};
  ASSERT_EQ(spill_plan_shape_arch("qwen3.5-35b-a3b", &a, &rec, &trunk, nullptr, &e), SPILL_OK)
      << e.msg;
  EXPECT_EQ(rec, 499u * 4096u);
  int gdn = 0;
  for (int l = 0; l < a.n_layers; l++) gdn += a.layer_attn[l] == SPILL_ATTN_GDN;
  EXPECT_EQ(gdn, 30);  // 40 layers, every 4th gated attention
  EXPECT_EQ(a.moe.shared_gate, 1);
  ASSERT_EQ(spill_plan_shape_arch("glm-4.5-air", &a, &rec, &trunk, nullptr, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(rec, 2377u * 4096u);
  EXPECT_EQ(a.n_dense_layers, 1);
  EXPECT_EQ(a.gqa.rope_dim, 64);
}

// Every row of the table plans, K3's rows keep the figures of the K3 planner,
// and an unknown name is refused with the known ones listed.
TEST(PublishedShapeTest, EveryRowPlansAndUnknownNamesAreRefused) {
  const char *name = nullptr, *about = nullptr;
  int n = 0;
  for (; spill_plan_shape_info(n, &name, &about, nullptr) == SPILL_OK; n++) {
    spill_arch a;
    spill_plan p;
    spill_err e = {};
    ASSERT_EQ(spill_plan_shape_compute(name, 4096, 1, &a, &p, &e), SPILL_OK) << name << ": " << e.msg;
    EXPECT_GT(p.floor, p.trunk) << name;
    EXPECT_EQ(p.ws, p.record_bytes * (uint64_t)a.moe.top_k * (uint64_t)spill_arch_n_moe(&a)) << name;
    EXPECT_NE(std::string(about), "") << name;
  }
  EXPECT_EQ(n, 8);
  spill_arch a, k;
  uint64_t rec = 0, trunk = 0, krec = 0, ktrunk = 0;
  spill_err e = {};
  ASSERT_EQ(spill_plan_shape_arch("k3", &a, &rec, &trunk, nullptr, &e), SPILL_OK);
  ASSERT_EQ(spill_plan_k3_shape(&k, &krec, &ktrunk, &e), SPILL_OK);
  EXPECT_EQ(rec, krec);
  EXPECT_EQ(trunk, ktrunk);
  EXPECT_EQ(spill_plan_shape_arch("gpt-oss-7b", &a, &rec, &trunk, nullptr, &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("gpt-oss-120b"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_plan_shape_info(n, &name, &about, nullptr), SPILL_E_RANGE);
}

TEST_F(K3PlanTest, WorkingSetWithinOnePercentOfPublished) {
  // Published true per-token set over 92 MoE layers: 17.0 GiB.
  spill_plan p = Plan(4096);
  EXPECT_NEAR(p.ws / GiB, 17.0, 17.0 * 0.01);
}

TEST_F(K3PlanTest, StateAt4KWithinTwoPercentOfPublished) {
  // Published: 659 MiB (414 KDA recurrent, 216 MLA latent, ~30 conv).
  spill_plan p = Plan(4096);
  EXPECT_NEAR(p.state.total / 1048576.0, 659.0, 659.0 * 0.02);
  EXPECT_NEAR(p.state.kda_state / 1048576.0, 414.0, 414.0 * 0.02);
  EXPECT_NEAR(p.state.mla_latent / 1048576.0, 216.0, 216.0 * 0.02);
  EXPECT_NEAR(p.state.kda_conv / 1048576.0, 30.0, 30.0 * 0.05);
}

TEST_F(K3PlanTest, FloorGrowthWithContextWithinTwoPercentOfPublished) {
  // Published floor: 29.06 GB at 4K, 30.54 at 32K, 35.64 at 128K, 83.22 at 1M:
  // growth +1.48 / +6.58 / +54.16 GB (the source's "GB" are GiB).
  double f4 = Plan(4096).floor / GiB;
  EXPECT_NEAR(Plan(32768).floor / GiB - f4, 1.48, 1.48 * 0.02);
  EXPECT_NEAR(Plan(131072).floor / GiB - f4, 6.58, 6.58 * 0.02);
  EXPECT_NEAR(Plan(1048576).floor / GiB - f4, 54.16, 54.16 * 0.02);
}

TEST_F(K3PlanTest, MlaLatentCostsKvLoraPlusRopeFloatsPerToken) {
  uint64_t a = Plan(1000).state.mla_latent, b = Plan(1001).state.mla_latent;
  EXPECT_EQ(b - a, (512u + 64u) * 4u * 24u);  // 24 MLA layers
  EXPECT_EQ(Plan(10).state.kda_state, Plan(100000).state.kda_state);
}

TEST_F(K3PlanTest, DefaultBudgetOn64GiBTakesOneWorkingSet) {
  spill_plan p = Plan(4096);
  spill_err e = {};
  ASSERT_EQ(spill_plan_budget(&p, (uint64_t)(64 * GiB), 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.cap, (uint64_t)(56 * GiB));
  // floor + 2ws > 56 GiB, floor + 1ws fits: the published rule's outcome.
  EXPECT_GT(p.floor + 2 * p.ws, p.cap);
  EXPECT_EQ(p.budget_ws, 1);
  EXPECT_EQ(p.budget, p.floor + p.ws);
  EXPECT_EQ(p.expert_cache, p.ws + p.min_cache);
  EXPECT_EQ(p.cache_slots, p.expert_cache / p.record_bytes);
}

TEST(RamPlanTest, DefaultRuleStepsDownInWholeWorkingSets) {
  spill_arch a = {};
  a.n_layers = 3;
  a.n_dense_layers = 1;
  a.d_model = 64;
  a.d_ff = 128;
  a.vocab_size = 256;
  for (int l = 0; l < 3; l++) a.layer_attn[l] = SPILL_ATTN_GQA;
  a.gqa = {4, 2, 16, 10000.0};
  a.moe.n_experts = 8;
  a.moe.top_k = 2;
  a.moe.d_expert = 32;
  spill_plan p;
  spill_err e = {};
  const uint64_t rec = 1 << 20, trunk = 100 << 20;
  ASSERT_EQ(spill_plan_compute(&a, rec, trunk, 128, 1, &p, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(p.ws, rec * 2 * 2);
  EXPECT_EQ(p.min_cache, 2 * 2 * rec);
  EXPECT_EQ(p.recommended, p.floor + 3 * p.ws);
  // Plenty of RAM: every record fits under the cap, the whole model.
  ASSERT_EQ(spill_plan_budget(&p, 8ull << 30, 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.budget_all, 1);
  EXPECT_EQ(p.budget_ws, 0);
  EXPECT_EQ(p.budget, p.model_max);
  EXPECT_EQ(p.cache_slots, p.model_records);
  EXPECT_EQ(p.budget_above_model, 0);
  // The cap exactly at the whole model still takes it; one byte less does not.
  uint64_t cap_ram = p.model_max / 7 * 8 + 8;
  while (cap_ram / 8 * 7 + (cap_ram % 8) * 7 / 8 > p.model_max) cap_ram--;
  ASSERT_EQ(spill_plan_budget(&p, cap_ram, 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.budget_all, 1);
  ASSERT_EQ(spill_plan_budget(&p, cap_ram - 2, 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.budget_all, 0);
  // 16 records of 1 MiB, min cache 4: the whole model is floor + 12 records
  // = floor + 3 ws, so below it the rule takes whole working sets.
  // Cap just below floor + 3ws but above floor + 2ws.
  uint64_t ram = (p.floor + 3 * p.ws - 1) * 8 / 7;
  ASSERT_EQ(spill_plan_budget(&p, ram, 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.budget_ws, 2);
  EXPECT_EQ(p.budget_all, 0);
  // Cap below floor + 1 ws: the floor with a warning.
  ram = (p.floor + p.ws / 2) * 8 / 7;
  ASSERT_EQ(spill_plan_budget(&p, ram, 0, 0, &e), SPILL_OK);
  EXPECT_EQ(p.budget_ws, 0);
  EXPECT_EQ(p.budget, p.floor);
  EXPECT_EQ(p.below_recommended_warning, 1);
}

TEST(RamPlanTest, ExplicitBudgetBelowFloorIsRefusedWithTheFloor) {
  spill_arch a = {};
  a.n_layers = 2;
  a.n_dense_layers = 1;
  a.d_model = 64;
  a.d_ff = 128;
  a.vocab_size = 256;
  a.layer_attn[0] = a.layer_attn[1] = SPILL_ATTN_GQA;
  a.gqa = {4, 2, 16, 10000.0};
  a.moe.n_experts = 8;
  a.moe.top_k = 2;
  a.moe.d_expert = 32;
  spill_plan p;
  spill_err e = {};
  ASSERT_EQ(spill_plan_compute(&a, 1 << 20, 1 << 30, 128, 1, &p, &e), SPILL_OK);
  EXPECT_EQ(spill_plan_budget(&p, 16ull << 30, p.floor - 1, 0, &e), SPILL_E_RAM_BUDGET);
  EXPECT_NE(std::string(e.msg).find("below the RAM floor"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_plan_budget(&p, 16ull << 30, p.floor, 0, &e), SPILL_OK);
  EXPECT_EQ(p.expert_cache, p.min_cache);
}

TEST(RamPlanTest, ParsesSizesAndRejectsGarbage) {
  EXPECT_EQ(spill_plan_parse_size("8G"), 8ull << 30);
  EXPECT_EQ(spill_plan_parse_size("512M"), 512ull << 20);
  EXPECT_EQ(spill_plan_parse_size("8GiB"), 8ull << 30);
  EXPECT_EQ(spill_plan_parse_size("1.5G"), 3ull << 29);
  EXPECT_EQ(spill_plan_parse_size("4096"), 4096u);
  EXPECT_EQ(spill_plan_parse_size("x"), 0u);
  EXPECT_EQ(spill_plan_parse_size("8Q"), 0u);
  EXPECT_EQ(spill_plan_parse_size("-1G"), 0u);
  EXPECT_EQ(spill_plan_parse_size(""), 0u);
  EXPECT_GT(spill_plan_usable_ram(), 0u);
}

TEST(RamPlanTest, OverflowingArchIsAnErrorNotAWrap) {
  spill_arch a = {};
  a.n_layers = 2;
  a.n_dense_layers = 1;
  a.d_model = 64;
  a.vocab_size = 256;
  a.layer_attn[0] = a.layer_attn[1] = SPILL_ATTN_MLA;
  a.mla.n_heads = 1 << 30;
  a.mla.kv_lora_rank = 1 << 30;
  a.moe.n_experts = 8;
  a.moe.top_k = 2;
  a.moe.d_expert = 32;
  spill_plan p;
  spill_err e = {};
  EXPECT_EQ(spill_plan_compute(&a, 1ull << 40, 1ull << 40, 1 << 30, 1, &p, &e), SPILL_E_RANGE);
}

// gpt-oss-120b's attention (36 layers, 8 kv heads of 64, a 128-token window
// on the even layers): a sliding-window layer's KV is a ring of
// W - 1 + prefill_chunk rows whatever ctx, so only the 18 full layers' KV
// grows with the context (model_memory_test: the rings are what a model
// allocates).
TEST(RamPlanTest, SlidingWindowKvDoesNotGrowWithContext) {
  spill_arch a = {};
  a.n_layers = 36;
  a.n_dense_layers = 0;
  a.d_model = 2880;
  a.vocab_size = 201088;
  for (int l = 0; l < a.n_layers; l++) a.layer_attn[l] = SPILL_ATTN_GQA;
  a.gqa.n_heads = 64;
  a.gqa.n_kv_heads = 8;
  a.gqa.head_dim = 64;
  a.gqa.rope_theta = 150000.0;
  a.gqa.sinks = 1;
  a.gqa.swa_window = 128;
  a.gqa.swa_pattern = 2;
  a.moe.n_experts = 128;
  a.moe.top_k = 4;
  a.moe.d_expert = 2880;
  const uint64_t row = 2ull * 8 * 64 * 4; /* keys and values of a position, f32 */
  spill_err e = {};
  uint64_t swa_prev = 0, total_prev = 0;
  for (int ctx : {256, 4096, 131072}) {
    SCOPED_TRACE(ctx);
    spill_plan p;
    ASSERT_EQ(spill_plan_compute(&a, 1 << 20, 1 << 30, ctx, 2, &p, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(p.state.gqa_swa_kv, 18 * (128 - 1 + 16) * row); /* prefill chunk 16 */
    EXPECT_EQ(p.state.gqa_kv, 18 * (uint64_t)ctx * row);
    EXPECT_EQ(p.state.total, p.state.gqa_kv + p.state.gqa_swa_kv);
    if (swa_prev) EXPECT_EQ(p.state.gqa_swa_kv, swa_prev);
    EXPECT_GT(p.state.total, total_prev);
    swa_prev = p.state.gqa_swa_kv;
    total_prev = p.state.total;
  }
  // the ring follows the prefill chunk (its slack for a verify's rollback)
  const spill_model_mem_opts o = {4096, 2, 5, 1, 1, 0, 0};
  spill_plan p;
  ASSERT_EQ(spill_plan_compute_run(&a, 1 << 20, 1 << 30, &o, &p, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(p.state.gqa_swa_kv, 18 * (128 - 1 + 5) * row);
  // a context shorter than the ring: ctx rows, as a full layer
  ASSERT_EQ(spill_plan_compute(&a, 1 << 20, 1 << 30, 100, 2, &p, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(p.state.gqa_swa_kv, 18 * 100 * row);
}

// swa_kv auto (the knob's default): the budget decides, once. With rings
// counted, full is taken when its extra rows (18 layers x (ctx - 143) rows)
// are at most 1/8 of the budget, and the plan is then the one swa_kv full
// counts, field for field; above 1/8 (a long context, or a small explicit
// budget) the rings stay; a later budget keeps the choice.
TEST(RamPlanTest, SwaKvAutoTakesFullWhenItFitsAnEighthOfTheBudget) {
  spill_arch a = {};
  a.n_layers = 36;
  a.d_model = 2880;
  a.vocab_size = 201088;
  for (int l = 0; l < a.n_layers; l++) a.layer_attn[l] = SPILL_ATTN_GQA;
  a.gqa.n_heads = 64;
  a.gqa.n_kv_heads = 8;
  a.gqa.head_dim = 64;
  a.gqa.swa_window = 128;
  a.gqa.swa_pattern = 2;
  a.moe.n_experts = 128;
  a.moe.top_k = 4;
  a.moe.d_expert = 2880;
  const uint64_t row = 2ull * 8 * 64 * 4, rec = 13221888, trunk = 256ull << 20;
  const uint64_t ram = 64ull << 30;
  spill_err e = {};
  auto plan = [&](int ctx, int swa, uint64_t budget, spill_plan *p) {
    const spill_model_mem_opts o = {ctx, 1, 16, 1, 0, 0, swa};
    ASSERT_EQ(spill_plan_compute_run(&a, rec, trunk, &o, p, &e), SPILL_OK) << e.msg;
    ASSERT_EQ(spill_plan_budget(p, ram, budget, 0, &e), SPILL_OK) << e.msg;
  };
  auto same = [](const spill_plan &x, const spill_plan &y) {
    EXPECT_EQ(x.state.gqa_kv, y.state.gqa_kv);
    EXPECT_EQ(x.state.gqa_swa_kv, y.state.gqa_swa_kv);
    EXPECT_EQ(x.state.total, y.state.total);
    EXPECT_EQ(x.scratch.total, y.scratch.total);
    EXPECT_EQ(x.floor, y.floor);
    EXPECT_EQ(x.recommended, y.recommended);
    EXPECT_EQ(x.model_max, y.model_max);
    EXPECT_EQ(x.budget, y.budget);
    EXPECT_EQ(x.budget_ws, y.budget_ws);
    EXPECT_EQ(x.budget_all, y.budget_all);
    EXPECT_EQ(x.expert_cache, y.expert_cache);
    EXPECT_EQ(x.cache_slots, y.cache_slots);
    EXPECT_EQ(x.swa_kv, y.swa_kv);
    EXPECT_EQ(x.swa_full_extra, y.swa_full_extra);
  };
  spill_plan ring, full, aut;
  // ctx 4096, default budget (floor + 3 ws, 7.6 GiB): 278 MiB of extra rows
  plan(4096, SPILL_SWA_KV_RING, 0, &ring);
  plan(4096, SPILL_SWA_KV_FULL, 0, &full);
  plan(4096, SPILL_SWA_KV_AUTO, 0, &aut);
  EXPECT_EQ(ring.swa_kv, SPILL_SWA_KV_RING);
  EXPECT_EQ(full.swa_kv, SPILL_SWA_KV_FULL);
  EXPECT_EQ(ring.swa_full_extra, 18 * (4096 - 143) * row);
  EXPECT_EQ(full.swa_full_extra, ring.swa_full_extra);
  EXPECT_EQ(full.state.total - ring.state.total, ring.swa_full_extra);
  EXPECT_LE(ring.swa_full_extra, ring.budget / 8);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_FULL);
  same(aut, full);
  // ctx 32768: 2.2 GiB of extra rows, above 1/8 of the budget: rings
  plan(32768, SPILL_SWA_KV_RING, 0, &ring);
  plan(32768, SPILL_SWA_KV_AUTO, 0, &aut);
  EXPECT_GT(ring.swa_full_extra, ring.budget / 8);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_RING);
  same(aut, ring);
  // an explicit budget: full at 8 x the extra rows, rings one byte below it
  plan(4096, SPILL_SWA_KV_RING, 0, &ring);
  const uint64_t b = 8 * ring.swa_full_extra;
  plan(4096, SPILL_SWA_KV_AUTO, b, &aut);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_FULL);
  plan(4096, SPILL_SWA_KV_FULL, b, &full);
  same(aut, full);
  plan(4096, SPILL_SWA_KV_AUTO, b - 8, &aut);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_RING);
  // decided once: a smaller budget later keeps full
  plan(4096, SPILL_SWA_KV_AUTO, 0, &aut);
  ASSERT_EQ(aut.swa_kv, SPILL_SWA_KV_FULL);
  ASSERT_EQ(spill_plan_budget(&aut, ram, aut.floor, 0, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_FULL);
  // a budget below the rings' floor fails as it does with rings, planned as rings
  const spill_model_mem_opts o = {4096, 1, 16, 1, 0, 0, SPILL_SWA_KV_AUTO};
  ASSERT_EQ(spill_plan_compute_run(&a, rec, trunk, &o, &aut, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_plan_budget(&aut, ram, aut.floor - 1, 0, &e), SPILL_E_RAM_BUDGET);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_RING);
  // no sliding layers: nothing to decide
  a.gqa.swa_window = 0;
  plan(4096, SPILL_SWA_KV_AUTO, 0, &aut);
  EXPECT_EQ(aut.swa_full_extra, 0u);
  EXPECT_EQ(aut.swa_kv, SPILL_SWA_KV_RING);
}

// MemAvailable read from a meminfo file: the value in bytes, 0 when the line
// is missing, the file is absent, or the value would overflow.
TEST(RamPlanTest, AvailableRamReadsMemAvailable) {
  const char *t = std::getenv("TEST_TMPDIR");
  const std::string dir = t ? t : "/tmp";
  auto write = [&](const char *name, const char *text) {
    const std::string path = dir + "/" + name;
    FILE *f = std::fopen(path.c_str(), "w");
    EXPECT_NE(f, nullptr);
    std::fputs(text, f);
    std::fclose(f);
    return path;
  };
  const std::string ok = write("mi-ok", "MemTotal: 100 kB\nMemFree: 7 kB\nMemAvailable:   2048 kB\n");
  const std::string none = write("mi-none", "MemTotal: 100 kB\nMemFree: 7 kB\n");
  const std::string big = write("mi-big", "MemAvailable: 18446744073709551615 kB\n");
  spill_plan_test_meminfo_path(ok.c_str());
  EXPECT_EQ(spill_plan_available_ram(), 2048u * 1024u);
  spill_plan_test_meminfo_path(none.c_str());
  EXPECT_EQ(spill_plan_available_ram(), 0u);
  spill_plan_test_meminfo_path(big.c_str());
  EXPECT_EQ(spill_plan_available_ram(), 0u);
  const std::string absent = dir + "/mi-absent";  // the hook keeps the pointer: not a temporary
  spill_plan_test_meminfo_path(absent.c_str());
  EXPECT_EQ(spill_plan_available_ram(), 0u);
  spill_plan_test_meminfo_path(nullptr);
  EXPECT_GT(spill_plan_available_ram(), 0u);  // this machine's /proc/meminfo
}

}  // namespace
