// engine/model/state_test.cc: sequence-state accounting (the RAM planner's
// input). An MLA token costs exactly kv_lora_rank + qk_rope_dim floats per
// MLA layer; KDA state does not grow with context; K3's published state at
// 4K context is reproduced.
#include "engine/model/model_test_util.h"

namespace {

spill_arch PlanArch(const char *mix) {
  spill_gen_opts o;
  spill_gen_opts_init(&o);
  o.attn_mix = mix;
  spill_manifest m = {};
  spill_err e = {};
  EXPECT_EQ(spill_gen_plan(&o, &m, &e), SPILL_OK) << e.msg;
  spill_arch a = m.arch;
  spill_manifest_free(&m);
  return a;
}

TEST(StateTest, MlaTokenCostsLatentPlusRopeFloatsPerLayer) {
  const spill_arch a = PlanArch("mla");
  const uint64_t per_tok = (uint64_t)a.n_layers * (a.mla.kv_lora_rank + a.mla.qk_rope_dim) * 4;
  EXPECT_EQ(spill_model_state_bytes(&a, 1, 16), per_tok);
  EXPECT_EQ(spill_model_state_bytes(&a, 1001, 16) - spill_model_state_bytes(&a, 1000, 16), per_tok);
  EXPECT_EQ(spill_model_state_bytes(&a, 4096, 16), 4096 * per_tok);
}

TEST(StateTest, KdaStateIsIndependentOfContext) {
  const spill_arch a = PlanArch("kda");
  const uint64_t H = a.kda.n_heads, d = a.kda.head_dim, K = a.kda.conv_kernel;
  const uint64_t per_layer = (H * d * d + 3 * (K - 1) * H * d) * 4;
  EXPECT_EQ(spill_model_state_bytes(&a, 1, 16), a.n_layers * per_layer);
  EXPECT_EQ(spill_model_state_bytes(&a, 1 << 20, 16), a.n_layers * per_layer);
}

TEST(StateTest, MixedModelAddsMlaAndKdaParts) {
  const spill_arch a = PlanArch("k3");
  int n_mla = 0;
  for (int l = 0; l < a.n_layers; l++) n_mla += a.layer_attn[l] == SPILL_ATTN_MLA;
  ASSERT_GT(n_mla, 0);
  EXPECT_EQ(spill_model_state_bytes(&a, 101, 16) - spill_model_state_bytes(&a, 100, 16),
            (uint64_t)n_mla * (a.mla.kv_lora_rank + a.mla.qk_rope_dim) * 4);
}

TEST(StateTest, ReproducesK3PublishedStateAt4K) {
  // k3-published.md: 659 MiB at 4K = 414 KDA recurrent + 216 MLA latent + ~30 conv.
  spill_arch a = {};
  a.n_layers = 93;
  for (int l = 0; l < 93; l++) a.layer_attn[l] = (l % 4 == 3 || l == 92) ? SPILL_ATTN_MLA : SPILL_ATTN_KDA;
  a.kda.n_heads = 96;
  a.kda.head_dim = 128;
  a.kda.conv_kernel = 4;
  a.mla.kv_lora_rank = 512;
  a.mla.qk_rope_dim = 64;
  int n_mla = 0;
  for (int l = 0; l < 93; l++) n_mla += a.layer_attn[l] == SPILL_ATTN_MLA;
  ASSERT_EQ(n_mla, 24);
  const double mib = 1024.0 * 1024.0;
  const double mla = 24.0 * 4096 * 576 * 4 / mib, kda = 69.0 * 96 * 128 * 128 * 4 / mib;
  EXPECT_NEAR(mla, 216, 0.5);
  EXPECT_NEAR(kda, 414, 0.5);
  const double total = spill_model_state_bytes(&a, 4096, 16) / mib;
  EXPECT_NEAR(total, 659, 1.5);
}

TEST(StateTest, ScratchGrowsWithContextOnlyByOneScoreRowPerThread) {
  const spill_arch a = PlanArch("k3");
  const uint64_t s1 = spill_model_scratch_bytes(&a, 1000, 2, 16);
  const uint64_t s2 = spill_model_scratch_bytes(&a, 2000, 2, 16);
  EXPECT_GT(s2, s1);
  EXPECT_LE(s2 - s1, (uint64_t)2 * 1000 * 4 + 64);  // one score row per thread
}

}  // namespace
