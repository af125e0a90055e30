// Trace statistics on a hand-made trace whose values are computed by hand
// in the comments, and on the committed OLMoE trace against the reference
// figures of issue 6.
#include <gtest/gtest.h>

#include <string>

#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

namespace {

// 3 tokens, 2 layers, top-2, 4 experts.
const char kTrace[] =
    "{\"tok\": 0, \"layers\": [[0, 1], [2, 3]]}\n"
    "{\"tok\": 1, \"layers\": [[0, 2], [2, 0]]}\n"
    "{\"tok\": 2, \"layers\": [[0, 1], [1, 3]]}\n";

TEST(TraceStatsTest, HandComputedValues) {
  spill_trace t;
  spill_err e = {};
  ASSERT_EQ(spill_trace_parse(kTrace, sizeof kTrace - 1, nullptr, &t, &e), SPILL_OK) << e.msg;
  spill_trace_stats s;
  ASSERT_EQ(spill_trace_compute_stats(&t, 0, 0, &s, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(s.accesses, 12u);
  EXPECT_EQ(s.pool, 8u);
  EXPECT_DOUBLE_EQ(s.touched_per_token, 4.0);
  EXPECT_EQ(s.touched_total, 7u);  // every pair but layer 0 expert 3
  // tok 1 shares (0,0) and (1,2) with tok 0; tok 2 shares (0,0) with tok 1.
  EXPECT_DOUBLE_EQ(s.reuse_next, 3.0 / 8.0);
  // Counts sorted: 3 2 2 2 1 1 1 0 (total 12): 6 needs 3 pairs, 9.6 needs 5,
  // 11.4 needs 7.
  EXPECT_EQ(s.cover_pairs[0], 3u);
  EXPECT_EQ(s.cover_pairs[1], 5u);
  EXPECT_EQ(s.cover_pairs[2], 7u);
  EXPECT_DOUBLE_EQ(s.cover_frac[0], 3.0 / 8.0);
  // Layer 0 counts {3, 2, 1, 0}: Gini 2*20/(4*6) - 5/4 = 5/12; top-1 share 3/6.
  EXPECT_NEAR(s.layers[0].gini, 5.0 / 12.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.layers[0].top10_share, 0.5);
  EXPECT_EQ(s.layers[0].distinct, 3u);
  // Layer 1 counts {1, 1, 2, 2}: Gini 2*17/24 - 5/4 = 1/6; top-1 share 2/6.
  EXPECT_NEAR(s.layers[1].gini, 1.0 / 6.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.layers[1].top10_share, 2.0 / 6.0);
  EXPECT_NEAR(s.gini_mean, (5.0 / 12.0 + 1.0 / 6.0) / 2, 1e-12);
  EXPECT_EQ(s.recorded_hit_rate, -1.0);  // simple format records no outcomes
  // Per-layer reuse: layer 0 shares expert 0 at t1 and t2 (2 of 4 ids);
  // layer 1 shares expert 2 at t1 only (1 of 4).
  EXPECT_DOUBLE_EQ(s.layers[0].reuse_next, 0.5);
  EXPECT_DOUBLE_EQ(s.layers[1].reuse_next, 0.25);
  // Reuse distances: t1 (0,0), (1,2) and t2 (0,0) at 1; t2 (0,1), (1,3) at
  // 2; the other 7 accesses are first uses.
  EXPECT_EQ(s.reuse_dist[0], 3u);
  EXPECT_EQ(s.reuse_dist[1], 2u);
  EXPECT_EQ(s.reuse_dist[SPILL_TRACE_RD_BUCKETS - 1], 7u);
  // Co-activation, online: t1's layer 0 {0, 2} scores layer-1 experts 2 and 3
  // (counts from t0) -> predicts {2, 3}, 1 of {2, 0} right; t2's {0, 1}
  // scores 0:1 2:3 3:2 -> {2, 3}, 1 of {1, 3} right: 2/4. Popularity alone
  // predicts {2, 3} then {2, 0}: 1/4. The previous token's layer-1 ids: 1/4.
  EXPECT_DOUBLE_EQ(s.coact_precision, 0.5);
  EXPECT_DOUBLE_EQ(s.coact_popular_precision, 0.25);
  EXPECT_DOUBLE_EQ(s.coact_prev_token_precision, 0.25);
  EXPECT_EQ(s.layers[0].coact_precision, -1.0);
  EXPECT_DOUBLE_EQ(s.layers[1].coact_precision, 0.5);
  // A pool of 8: every Belady point rounds to 1 slot, and no key repeats
  // back to back.
  for (int p = 0; p < SPILL_TRACE_BELADY_POINTS; p++) {
    EXPECT_EQ(s.belady_slots[p], 1u);
    EXPECT_EQ(s.belady_hit_rate[p], 0.0);
  }
  spill_trace_stats_free(&s);

  // Window [1, 3): tok 2 vs tok 1 only.
  ASSERT_EQ(spill_trace_compute_stats(&t, 1, 3, &s, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(s.n_tokens, 2u);
  EXPECT_DOUBLE_EQ(s.reuse_next, 1.0 / 4.0);
  spill_trace_stats_free(&s);
  EXPECT_EQ(spill_trace_compute_stats(&t, 2, 2, &s, &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_trace_compute_stats(&t, 0, 4, &s, &e), SPILL_E_INVALID_ARG);
  spill_trace_free(&t);
}

// Verify chunks of the hand-made trace: k = 2 takes tokens 0-1 (token 2
// left over): layer 0 {0,1,2} = 3, layer 1 {2,3,0} = 3 -> 3 per layer of
// 2 x 2 = 4; k = 1 is a token's own top-2; k = 3 takes all: {0,1,2}, {0,1,2,3}.
TEST(TraceStatsTest, ChunkUnionHandComputed) {
  spill_trace t;
  spill_err e = {};
  ASSERT_EQ(spill_trace_parse(kTrace, sizeof kTrace - 1, nullptr, &t, &e), SPILL_OK) << e.msg;
  spill_trace_chunk_stats c;
  ASSERT_EQ(spill_trace_chunk_union(&t, 0, 0, 2, &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.chunks, 1u);
  EXPECT_DOUBLE_EQ(c.union_per_layer, 3.0);
  EXPECT_DOUBLE_EQ(c.ratio, 0.75);
  ASSERT_EQ(spill_trace_chunk_union(&t, 0, 0, 1, &c, &e), SPILL_OK);
  EXPECT_EQ(c.chunks, 3u);
  EXPECT_DOUBLE_EQ(c.ratio, 1.0);
  ASSERT_EQ(spill_trace_chunk_union(&t, 0, 0, 3, &c, &e), SPILL_OK);
  EXPECT_DOUBLE_EQ(c.union_per_layer, 3.5);
  ASSERT_EQ(spill_trace_chunk_union(&t, 1, 3, 2, &c, &e), SPILL_OK); // tokens 1-2
  EXPECT_DOUBLE_EQ(c.union_per_layer, 3.5); // {0,2,1}, {2,0,1,3}
  EXPECT_EQ(spill_trace_chunk_union(&t, 0, 4, 2, &c, &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_trace_chunk_union(&t, 0, 0, 0, &c, &e), SPILL_E_INVALID_ARG);
  spill_trace_free(&t);
}

TEST(TraceStatsTest, ReproducesOlmoeReferenceFigures) {
  spill_trace t;
  spill_err e = {};
  ASSERT_EQ(spill_trace_read_file("traces/olmoe-1b-7b-299.jsonl", nullptr, &t, &e), SPILL_OK)
      << e.msg;
  EXPECT_EQ(t.n_tokens, 299u);
  EXPECT_EQ(t.n_layers, 16u);
  EXPECT_EQ(t.n_experts, 64u);
  EXPECT_EQ(t.top_k, 8u);
  spill_trace_stats s;
  ASSERT_EQ(spill_trace_compute_stats(&t, 0, 0, &s, &e), SPILL_OK) << e.msg;
  EXPECT_DOUBLE_EQ(s.touched_per_token, 128.0);  // 12.5% of 1024
  EXPECT_NEAR(s.reuse_next, 0.435, 0.0005);
  EXPECT_NEAR(s.cover_frac[0], 0.21, 0.005);
  EXPECT_NEAR(s.cover_frac[1], 0.50, 0.005);
  EXPECT_NEAR(s.cover_frac[2], 0.73, 0.005);
  // Belady points are the replay's MIN at round(3/6/12% of 1024) slots.
  const uint32_t want_slots[3] = {31, 61, 123};
  for (int p = 0; p < SPILL_TRACE_BELADY_POINTS; p++) {
    EXPECT_EQ(s.belady_slots[p], want_slots[p]);
    spill_trace_replay_result r;
    ASSERT_EQ(spill_trace_replay(&t, "belady", want_slots[p], 1, 0, 0, 0, &r, &e), SPILL_OK);
    EXPECT_DOUBLE_EQ(s.belady_hit_rate[p], r.hit_rate);
  }
  uint64_t sum = 0;
  for (int i = 0; i < SPILL_TRACE_RD_BUCKETS; i++) sum += s.reuse_dist[i];
  EXPECT_EQ(sum, s.accesses);
  // next-token reuse is the distance-1 bucket
  EXPECT_NEAR((double)s.reuse_dist[0] / (double)(s.accesses - 128), s.reuse_next, 1e-12);
  spill_trace_stats_free(&s);
  spill_trace_free(&t);
}

}  // namespace
