// engine/model/model_memory_test.cc: the one memory formula. The RAM plan
// (engine/plan) reports the state and scratch a model allocates: for every
// attention kind (gqa, mla, kda and the k3 mix), expert dtype, thread count,
// prefill chunk and act_q8, the bytes spill_model_open really allocates
// (measured by spill_alloc's live tally, independent of the model's own
// bookkeeping) equal the plan's state + scratch totals.
#include <gtest/gtest.h>

#include "engine/base/alloc.h"
#include "engine/model/model_memory.h"
#include "engine/model/model_test_util.h"
#include "engine/plan/ram_plan.h"

namespace {

using spill_test::Nano;

struct Case {
  const char *mix;
  spill_dtype edt;
  int threads, chunk, act_q8, ctx;
  int spec = 0; /* spec_max: a verify chunk's logits, recurrent copy and inputs */
};

TEST(ModelMemoryTest, PlanEqualsWhatTheModelAllocates) {
  const Case cases[] = {
      {"gqa", SPILL_DT_RVQ3, 1, 16, 0, 256}, {"gqa", SPILL_DT_Q8, 2, 5, 1, 100},
      {"mla", SPILL_DT_RVQ3, 2, 1, 0, 300},  {"mla", SPILL_DT_Q8, 1, 7, 1, 64},
      {"kda", SPILL_DT_RVQ3, 3, 16, 0, 200}, {"kda", SPILL_DT_F32, 1, 3, 1, 32},
      {"k3", SPILL_DT_RVQ3, 2, 16, 0, 512},  {"k3", SPILL_DT_Q4, 2, 9, 1, 128},
      {"k3", SPILL_DT_F32, 1, 1, 0, 1},
      {"gqa", SPILL_DT_Q8, 2, 5, 1, 100, 5},  {"kda", SPILL_DT_RVQ3, 1, 16, 0, 64, 9},
      {"k3", SPILL_DT_Q4, 2, 9, 1, 128, 4},
      // sliding-window layers: rings of W - 1 + chunk rows (W = 8), one wider
      // than ctx (then ctx rows), with and without speculation
      {"gqa-swa", SPILL_DT_Q8, 2, 5, 1, 100}, {"gqa-swa", SPILL_DT_RVQ3, 1, 16, 0, 20},
      {"gqa-swa", SPILL_DT_Q8, 1, 4, 1, 64, 4},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.mix) + " " + spill_dtype_name(c.edt) + " threads " +
                 std::to_string(c.threads) + " chunk " + std::to_string(c.chunk) + " act_q8 " +
                 std::to_string(c.act_q8) + " ctx " + std::to_string(c.ctx) +
                 " spec " + std::to_string(c.spec));
    const std::string dir = Nano(c.mix, SPILL_GEN_TRUNK_Q4, c.edt);
    spill_container ct;
    spill_err e = {};
    ASSERT_EQ(spill_container_open(dir.c_str(), &ct, &e), SPILL_OK) << e.msg;
    const spill_arch arch = ct.m.arch;
    const uint64_t rec = ct.m.record_bytes, trunk = ct.trunk_bytes;
    const int edt = ct.m.expert_dtype;
    spill_container_close(&ct);

    spill_model_opts o = {};
    o.n_threads = c.threads;
    o.ctx = c.ctx;
    o.max_chunk = c.chunk;
    o.act_q8 = c.act_q8;
    o.spec_max = c.spec;
    o.trunk_mode = 1;  // trunk mapped: not spill_alloc'ed
    const uint64_t live0 = spill_alloc_live_bytes();
    spill_model *m = nullptr;
    ASSERT_EQ(spill_model_open(dir.c_str(), &o, &m, &e), SPILL_OK) << e.msg;
    uint64_t allocated = spill_alloc_live_bytes() - live0;
    spill_model_close(m);
    // the built-in expert source's record buffers (threads + 1, at least 2,
    // at most 9: model.c) are not model memory
    const uint64_t n_buf = c.threads < 2 ? 2 : c.threads < 8 ? c.threads + 1 : 9;
    if (spill_arch_n_moe(&arch) > 0) allocated -= n_buf * rec;

    const spill_model_mem_opts mo = {c.ctx, c.threads, c.chunk, c.act_q8,
                                     spill_model_rvq3_qlut(edt), c.spec, 0};
    spill_plan p;
    ASSERT_EQ(spill_plan_compute_run(&arch, rec, trunk, &mo, &p, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(p.state.total + p.scratch.total, allocated);
    EXPECT_EQ(p.state.total, spill_model_state_bytes(&arch, c.ctx, c.chunk));
    EXPECT_EQ(p.scratch.total, p.scratch.activations + p.scratch.attn_scores +
                                   p.scratch.moe_buffers + p.scratch.rvq_luts + p.scratch.logits);
    EXPECT_EQ(p.state.total,
              p.state.mla_latent + p.state.kda_state + p.state.kda_conv + p.state.gqa_kv +
                  p.state.gqa_swa_kv + p.state.gdn_state);
    const uint64_t row = 4ull * 2 * 2 * 16; /* keys and values, 2 kv heads x 16, f32 */
    if (!strcmp(c.mix, "gqa-swa")) { /* layers 0, 2 sliding (W = 8), 1, 3 full */
      const uint64_t rows = std::min<uint64_t>((uint64_t)c.ctx, 8 - 1 + (uint64_t)c.chunk);
      EXPECT_EQ(p.state.gqa_swa_kv, 2 * rows * row);
      EXPECT_EQ(p.state.gqa_kv, 2ull * (uint64_t)c.ctx * row);
    } else {
      EXPECT_EQ(p.state.gqa_swa_kv, 0u);
    }
  }
}

// The state terms by kind, written out as docs/PLAN.md gives them, for
// hand-built archs of every imported family (whose containers research/gen
// cannot write): Qwen3-MoE / OLMoE / Mixtral (GQA), DeepSeek-V3 (MLA with
// q LoRA), Kimi-Linear (KDA + NoPE MLA) and K3 (KDA + MLA).
TEST(ModelMemoryTest, StateTermsByKindForEveryFamily) {
  struct Fam {
    const char *name;
    int n_gqa, n_mla, n_kda;
  };
  const Fam fams[] = {{"qwen3_moe", 4, 0, 0}, {"olmoe", 3, 0, 0},   {"mixtral", 2, 0, 0},
                      {"deepseek_v3", 0, 3, 0}, {"kimi_linear", 0, 1, 3}, {"k3", 0, 1, 3}};
  for (const Fam &f : fams) {
    SCOPED_TRACE(f.name);
    spill_arch a = {};
    a.n_layers = f.n_gqa + f.n_mla + f.n_kda;
    a.n_dense_layers = 1;
    a.d_model = 64;
    a.d_ff = 96;
    a.vocab_size = 300;
    int l = 0;
    for (int i = 0; i < f.n_kda; i++) a.layer_attn[l++] = SPILL_ATTN_KDA;
    for (int i = 0; i < f.n_mla; i++) a.layer_attn[l++] = SPILL_ATTN_MLA;
    for (int i = 0; i < f.n_gqa; i++) a.layer_attn[l++] = SPILL_ATTN_GQA;
    a.gqa.n_heads = 8;
    a.gqa.n_kv_heads = 2;
    a.gqa.head_dim = 16;
    a.gqa.rope_theta = 10000.0;
    a.mla.n_heads = 4;
    a.mla.q_lora_rank = !strcmp(f.name, "deepseek_v3") ? 24 : 0;
    a.mla.kv_lora_rank = 32;
    a.mla.qk_nope_dim = 16;
    a.mla.qk_rope_dim = !strcmp(f.name, "kimi_linear") ? 0 : 8;
    a.mla.v_head_dim = 16;
    a.kda = {};
    a.kda.n_heads = 4;
    a.kda.head_dim = 16;
    a.kda.conv_kernel = 4;
    a.kda.gate_rank = 8;
    a.moe.n_experts = 16;
    a.moe.top_k = 4;
    a.moe.d_expert = 32;
    a.moe.d_latent = !strcmp(f.name, "k3") ? 32 : 0;
    a.moe.n_shared = !strcmp(f.name, "qwen3_moe") || !strcmp(f.name, "mixtral") ? 0 : 1;
    a.moe.d_shared = 32;
    const int ctx = 77;
    spill_plan p;
    spill_err e = {};
    ASSERT_EQ(spill_plan_compute(&a, 4096, 1 << 20, ctx, 2, &p, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(p.state.gqa_kv, 4ull * f.n_gqa * ctx * 2 * 2 * 16);
    EXPECT_EQ(p.state.mla_latent, 4ull * f.n_mla * ctx * (32 + a.mla.qk_rope_dim));
    EXPECT_EQ(p.state.kda_state, 4ull * f.n_kda * 4 * 16 * 16);
    EXPECT_EQ(p.state.kda_conv, 4ull * f.n_kda * 3 * 3 * 4 * 16);
    spill_model_mem mem;
    const spill_model_mem_opts mo = {ctx, 2, 16, 1, 1, 0, 0}; /* spill_plan_compute's upper bound */
    spill_model_memory(&a, &mo, &mem);
    EXPECT_EQ(p.scratch.total, mem.scratch_total);
    EXPECT_EQ(p.scratch.attn_scores, 2ull * ctx * 4 + (64 - (2 * ctx * 4) % 64) % 64);
  }
}

}  // namespace

namespace {

// act_quant q8 is the default (issue 28 item 2), and only a container
// holding a matrix with an integer path (q8, q4, K-quants, MXFP4) runs with
// it: an f32 / f16 / bf16 / rvq3 container resolves to f32 and allocates no
// quantised-input buffers.
TEST(ModelMemoryTest, ActQ8OnlyWhereSomeMatrixHasAnIntegerPath) {
  spill_tensor_info t[2] = {};
  t[0].ndim = 2;
  t[0].dtype = SPILL_DT_F32;
  t[1].ndim = 1;  // a norm vector never runs a matvec
  t[1].dtype = SPILL_DT_Q8;
  spill_bank_info b = {};
  spill_manifest m = {};
  m.n_tensors = 2;
  m.tensors = t;
  m.n_banks = 1;
  m.banks = &b;
  for (spill_dtype dt : {SPILL_DT_F32, SPILL_DT_F16, SPILL_DT_BF16, SPILL_DT_RVQ3}) {
    m.expert_dtype = dt;
    for (int s = 0; s < SPILL_SEC_COUNT; s++) b.sect_dtype[s] = dt;
    EXPECT_EQ(spill_model_act_q8(&m, 1), 0) << dt;
  }
  for (spill_dtype dt : {SPILL_DT_Q8, SPILL_DT_Q4, SPILL_DT_Q4_K, SPILL_DT_Q5_K, SPILL_DT_Q6_K,
                         SPILL_DT_MXFP4}) {
    m.expert_dtype = dt;  // experts of that dtype
    for (int s = 0; s < SPILL_SEC_COUNT; s++) b.sect_dtype[s] = dt;
    EXPECT_EQ(spill_model_act_q8(&m, 1), 1) << dt;
    EXPECT_EQ(spill_model_act_q8(&m, 0), 0) << dt;  // act_quant f32 asked for
    m.expert_dtype = SPILL_DT_RVQ3;  // one section of a mixed bank
    b.sect_dtype[0] = b.sect_dtype[1] = SPILL_DT_RVQ3;
    EXPECT_EQ(spill_model_act_q8(&m, 1), 1) << dt;
    b.sect_dtype[2] = SPILL_DT_RVQ3;  // the trunk's matrix
    t[0].dtype = dt;
    EXPECT_EQ(spill_model_act_q8(&m, 1), 1) << dt;
    t[0].dtype = SPILL_DT_F32;
  }
}

}  // namespace
