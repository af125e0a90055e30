// engine/model/sampler_test.cc: greedy is argmax (lowest id on ties); a seed
// fixes the draw sequence; top-k 1 is greedy; top-p keeps the smallest
// prefix with enough mass.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/model/sampler.h"

namespace {

std::vector<float> Logits() {
  std::vector<float> l(50);
  for (int i = 0; i < 50; i++) l[i] = (float)((i * 37) % 11) * 0.3f;
  return l;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  const float l[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.0f};
  EXPECT_EQ(spill_sampler_argmax(l, 5), 1);
  spill_sampler s;
  spill_sampler_opts o = {};
  ASSERT_EQ(spill_sampler_init(&s, &o, 5, nullptr), SPILL_OK);
  EXPECT_EQ(spill_sampler_sample(&s, l), 1);
  spill_sampler_free(&s);
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<float> l = Logits();
  spill_sampler_opts o = {};
  o.temperature = 1.0f;
  o.seed = 42;
  std::vector<int> a, b, c;
  spill_sampler s1, s2, s3;
  ASSERT_EQ(spill_sampler_init(&s1, &o, 50, nullptr), SPILL_OK);
  ASSERT_EQ(spill_sampler_init(&s2, &o, 50, nullptr), SPILL_OK);
  o.seed = 43;
  ASSERT_EQ(spill_sampler_init(&s3, &o, 50, nullptr), SPILL_OK);
  for (int i = 0; i < 64; i++) {
    a.push_back(spill_sampler_sample(&s1, l.data()));
    b.push_back(spill_sampler_sample(&s2, l.data()));
    c.push_back(spill_sampler_sample(&s3, l.data()));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  spill_sampler_free(&s1);
  spill_sampler_free(&s2);
  spill_sampler_free(&s3);
}

TEST(SamplerTest, TopKOneIsGreedyAndTopPRestrictsToTheHead) {
  const std::vector<float> l = Logits();
  spill_sampler_opts o = {};
  o.temperature = 0.8f;
  o.top_k = 1;
  o.seed = 7;
  spill_sampler s;
  ASSERT_EQ(spill_sampler_init(&s, &o, 50, nullptr), SPILL_OK);
  for (int i = 0; i < 20; i++) EXPECT_EQ(spill_sampler_sample(&s, l.data()), spill_sampler_argmax(l.data(), 50));
  spill_sampler_free(&s);
  // logits: one clear winner holding > 90% of the mass; top-p 0.5 keeps only it.
  std::vector<float> w(10, 0.0f);
  w[6] = 10.0f;
  o.top_k = 0;
  o.top_p = 0.5f;
  o.temperature = 1.0f;
  ASSERT_EQ(spill_sampler_init(&s, &o, 10, nullptr), SPILL_OK);
  for (int i = 0; i < 50; i++) EXPECT_EQ(spill_sampler_sample(&s, w.data()), 6);
  spill_sampler_free(&s);
}

TEST(SamplerTest, TopPAppliesToTheRenormalisedTopKList) {
  // p = (0.40, 0.35, 0.25): top-k 2 keeps (0.533, 0.467) after renormalising,
  // so top-p 0.5 keeps only token 0 (on the full list it would keep two).
  const float l[3] = {std::log(0.40f), std::log(0.35f), std::log(0.25f)};
  spill_sampler_opts o = {};
  o.temperature = 1.0f;
  o.top_k = 2;
  o.top_p = 0.5f;
  o.seed = 99;
  spill_sampler s;
  ASSERT_EQ(spill_sampler_init(&s, &o, 3, nullptr), SPILL_OK);
  for (int i = 0; i < 100; i++) EXPECT_EQ(spill_sampler_sample(&s, l), 0);
  spill_sampler_free(&s);
  o.top_p = 0.0f;  // top-k 2 alone draws both, never token 2
  ASSERT_EQ(spill_sampler_init(&s, &o, 3, nullptr), SPILL_OK);
  int seen[3] = {0, 0, 0};
  for (int i = 0; i < 400; i++) seen[spill_sampler_sample(&s, l)]++;
  EXPECT_GT(seen[0], 100);
  EXPECT_GT(seen[1], 100);
  EXPECT_EQ(seen[2], 0);
  spill_sampler_free(&s);
}

TEST(SamplerTest, XorshiftMatchesTheDefinition) {
  uint64_t st = 1;
  uint64_t x = 1;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  EXPECT_EQ(spill_sampler_next_u64(&st), x * 0x2545F4914F6CDD1Dull);
  EXPECT_EQ(st, x);
  for (int i = 0; i < 1000; i++) {
    const float f = spill_sampler_next_f32(&st);
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
}

}  // namespace
