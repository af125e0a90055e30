// engine/model/spec_verify_test.cc: a verify chunk (spill_model_forward_verify)
// gives every position the logits of a forward one token at a time, and
// keeping any prefix of it (spill_model_verify_keep) leaves the state of a
// model that ran only that prefix: every later logit is bit-identical, for
// every attention kind (GQA, MLA, KDA, K3's KDA + MLA mix), f32 and q8
// matvec inputs, at every keep position.
#include <cstring>

#include "engine/model/model_test_util.h"

namespace {

using spill_test::Nano;
using spill_test::Prompt;

struct Case {
  const char *mix;
  int act_q8;
};

class SpecVerify : public ::testing::TestWithParam<Case> {};

spill_model *OpenSpec(const std::string &dir, int act_q8, int spec_max) {
  spill_model_opts o = {};
  o.par_min_weights = 1;
  o.task_max_weights = 256;
  o.n_threads = 2;
  o.ctx = 64;
  o.max_chunk = 8;
  o.act_q8 = act_q8;
  o.spec_max = spec_max;
  spill_model *m = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_model_open(dir.c_str(), &o, &m, &e), SPILL_OK) << e.msg;
  return m;
}

TEST_P(SpecVerify, KeepingAnyPrefixIsBitIdenticalToRunningOnlyThatPrefix) {
  const Case c = GetParam();
  const std::string dir = Nano(c.mix, SPILL_GEN_TRUNK_Q4, SPILL_DT_Q8);
  const int kSpec = 5, kPre = 9;
  std::vector<int> seq = Prompt(kPre + kSpec + 6);
  for (size_t i = kPre; i < seq.size(); i++) seq[i] = (int)((i * 37) % 250); // not the prompt text
  const int N = (int)seq.size();
  spill_err e = {};

  // reference: one token at a time, every position's logits
  spill_test::ModelHandle ref;
  ref.m = OpenSpec(dir, c.act_q8, 0);
  ASSERT_NE(ref.m, nullptr);
  const int V = spill_model_arch(ref.m)->vocab_size;
  std::vector<float> want((size_t)N * V);
  for (int p = 0; p < N; p++)
    ASSERT_EQ(spill_model_forward(ref.m, &seq[p], 1, p, want.data() + (size_t)p * V, &e), SPILL_OK)
        << e.msg;

  spill_test::ModelHandle h;
  h.m = OpenSpec(dir, c.act_q8, kSpec);
  ASSERT_NE(h.m, nullptr);
  std::vector<float> lg(V);
  for (int keep = 1; keep <= kSpec; keep++) {
    SCOPED_TRACE(std::string(c.mix) + (c.act_q8 ? " q8" : " f32") + " keep " + std::to_string(keep));
    ASSERT_EQ(spill_model_forward(h.m, seq.data(), kPre, 0, lg.data(), &e), SPILL_OK) << e.msg;
    ASSERT_EQ(spill_model_forward_verify(h.m, &seq[kPre], kSpec, &e), SPILL_OK) << e.msg;
    const float *vl = spill_model_verify_logits(h.m);
    for (int t = 0; t < kSpec; t++)
      EXPECT_EQ(memcmp(vl + (size_t)t * V, want.data() + (size_t)(kPre + t) * V, (size_t)V * 4), 0)
          << "verify position " << kPre + t;
    ASSERT_EQ(spill_model_verify_keep(h.m, keep, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(spill_model_n_past(h.m), kPre + keep);
    // a second keep needs a new verify
    EXPECT_EQ(spill_model_verify_keep(h.m, 1, &e), SPILL_E_INVALID_ARG);
    for (int p = kPre + keep; p < N; p++) {
      ASSERT_EQ(spill_model_forward(h.m, &seq[p], 1, p, lg.data(), &e), SPILL_OK) << e.msg;
      ASSERT_EQ(memcmp(lg.data(), want.data() + (size_t)p * V, (size_t)V * 4), 0)
          << "position " << p << " after keeping " << keep;
    }
  }
  // two verifies in a row, the first cut at 2: the second starts from the kept state
  ASSERT_EQ(spill_model_forward(h.m, seq.data(), kPre, 0, lg.data(), &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_model_forward_verify(h.m, &seq[kPre], kSpec, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_model_verify_keep(h.m, 2, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_model_forward_verify(h.m, &seq[kPre + 2], 4, &e), SPILL_OK) << e.msg;
  const float *vl = spill_model_verify_logits(h.m);
  for (int t = 0; t < 4; t++)
    EXPECT_EQ(memcmp(vl + (size_t)t * V, want.data() + (size_t)(kPre + 2 + t) * V, (size_t)V * 4), 0)
        << "second verify position " << kPre + 2 + t;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, SpecVerify,
                         ::testing::Values(Case{"gqa", 0}, Case{"mla", 0}, Case{"kda", 0},
                                           Case{"k3", 0}, Case{"gqa", 1}, Case{"k3", 1},
                                           Case{"qwen35", 0}, Case{"qwen35", 1},
                                           Case{"gqa-swa", 0}, Case{"gqa-swa", 1}),
                         [](const ::testing::TestParamInfo<Case> &i) {
                           std::string n = std::string(i.param.mix) + (i.param.act_q8 ? "_q8" : "_f32");
                           for (char &ch : n) ch = ch == '-' ? '_' : ch;  // gqa-swa: a valid name
                           return n;
                         });

TEST(SpecVerifyTest, RefusesChunksBeyondSpecMaxAndKeepsWithoutAVerify) {
  spill_test::ModelHandle h;
  h.m = OpenSpec(Nano("k3"), 0, 3);
  ASSERT_NE(h.m, nullptr);
  spill_err e = {};
  const std::vector<int> p = Prompt(6);
  std::vector<float> lg(spill_model_arch(h.m)->vocab_size);
  ASSERT_EQ(spill_model_forward(h.m, p.data(), 2, 0, lg.data(), &e), SPILL_OK);
  EXPECT_EQ(spill_model_forward_verify(h.m, p.data() + 2, 4, &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("spec_max 3"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_model_verify_keep(h.m, 1, &e), SPILL_E_INVALID_ARG);
  spill_model_opts o = {};
  o.max_chunk = 4;
  o.spec_max = 5;
  spill_model *m = nullptr;
  EXPECT_EQ(spill_model_open(Nano("k3").c_str(), &o, &m, &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(m, nullptr);
}

}  // namespace
