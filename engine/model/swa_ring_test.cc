// engine/model/swa_ring_test.cc: sliding-window layers keep a ring of
// W - 1 + max_chunk key/value rows (attention_gqa.c, docs/MODEL.md
// "Sliding-window KV"), and their logits are those of a cache of every
// position bit for bit. The reference is the same nano gqa-swa container
// (W = 8 on layers 0 and 2, sinks) opened with swa_full_kv, whose windowed
// layers then keep ctx rows (position t in row t: the full-cache path as it
// was before the rings), run one token at a time. Against it, over 64
// positions (8 windows): prefill in chunks of every size the rings allow and
// decode, on 1 and 2 threads, f32 and q8 inputs; verify chunks cut back at
// every position, over and over (the rollback the ring's max_chunk - 1
// spare rows are for); cuts back through spill_model_rewind exactly as far
// as the rings hold the window, and anywhere with swa_full_kv.
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/model_memory.h"
#include "engine/model/model_test_util.h"

namespace {

using spill_test::Nano;

constexpr int kCtx = 64, kW = 8;

spill_model *OpenSwa(int threads, int max_chunk, int spec_max = 0, int act_q8 = 0, int full = 0) {
  spill_model_opts o = {};
  o.par_min_weights = 1;
  o.task_max_weights = 256;
  o.n_threads = threads;
  o.ctx = kCtx;
  o.max_chunk = max_chunk;
  o.spec_max = spec_max;
  o.act_q8 = act_q8;
  o.swa_full_kv = full;
  spill_model *m = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_model_open(Nano("gqa-swa", SPILL_GEN_TRUNK_Q4, SPILL_DT_Q8).c_str(), &o, &m, &e),
            SPILL_OK)
      << e.msg;
  return m;
}

std::vector<int> Seq() {
  std::vector<int> s = spill_test::Prompt(kCtx);
  for (int i = 20; i < kCtx; i++) s[i] = (i * 37 + 11) % 250;  // not only the prompt text
  return s;
}

// Logits of every position, one token at a time, on the full-cache path
// (swa_full_kv: ctx rows, position t in row t, as before the rings).
std::vector<float> Reference(int act_q8) {
  spill_test::ModelHandle h;
  h.m = OpenSwa(1, 16, 0, act_q8, 1);
  EXPECT_NE(h.m, nullptr);
  if (!h.m) return {};
  const int V = spill_model_arch(h.m)->vocab_size;
  const std::vector<int> s = Seq();
  std::vector<float> want((size_t)kCtx * V);
  spill_err e = {};
  for (int p = 0; p < kCtx; p++)
    EXPECT_EQ(spill_model_forward(h.m, &s[p], 1, p, want.data() + (size_t)p * V, &e), SPILL_OK)
        << e.msg;
  return want;
}

bool Same(const float *a, const float *b, int V) { return memcmp(a, b, (size_t)V * 4) == 0; }

TEST(SwaRingTest, TheFixtureHasWindowsAndTheirRingsDoNotGrowWithContext) {
  const spill_arch *a = nullptr;
  spill_test::ModelHandle h;
  h.m = OpenSwa(1, 4);
  ASSERT_NE(h.m, nullptr);
  a = spill_model_arch(h.m);
  ASSERT_EQ(a->gqa.swa_window, kW);
  ASSERT_EQ(a->gqa.swa_pattern, 2);
  ASSERT_TRUE(a->gqa.sinks);
  // 2 full layers of ctx rows, 2 windowed of W - 1 + 4, keys and values of 2 x 16
  const uint64_t row = 2 * 2 * 16 * 4;
  EXPECT_EQ(spill_model_state_bytes(a, kCtx, 4), (2 * kCtx + 2 * (kW - 1 + 4)) * row);
  EXPECT_EQ(spill_model_state_bytes(a, 4 * kCtx, 4) - spill_model_state_bytes(a, kCtx, 4),
            2 * 3 * kCtx * row);  // only the full layers grow
  EXPECT_EQ(spill_model_state_bytes(a, kCtx, kCtx), 4 * kCtx * row);  // a ring as long as ctx
  spill_model_mem mem;
  const spill_model_mem_opts mo = {kCtx, 1, 4, 0, 0, 0, 1};  // swa_full_kv: ctx rows
  spill_model_memory(a, &mo, &mem);
  EXPECT_EQ(mem.state_total, 4 * kCtx * row);
  EXPECT_EQ(mem.state[SPILL_ATTN_GQA][1], 2 * kCtx * row);
}

TEST(SwaRingTest, ChunkedPrefillAndDecodeEqualAFullCacheOnOneAndTwoThreads) {
  for (int act_q8 : {0, 1}) {
    const std::vector<float> want = Reference(act_q8);
    ASSERT_FALSE(want.empty());
    const std::vector<int> s = Seq();
    // segments of the sequence fed as one forward each (cut into max_chunk
    // chunks inside), ending at positions all over the rings
    const int segs[] = {1, 5, 11, 3, 17, 2, 9, 1, 1, 14};
    for (int threads : {1, 2}) {
      for (int chunk : {1, 3, 5, 16}) {
        SCOPED_TRACE("act_q8 " + std::to_string(act_q8) + " threads " + std::to_string(threads) +
                     " chunk " + std::to_string(chunk));
        spill_test::ModelHandle h;
        h.m = OpenSwa(threads, chunk, 0, act_q8);
        ASSERT_NE(h.m, nullptr);
        const int V = spill_model_arch(h.m)->vocab_size;
        std::vector<float> lg(V);
        spill_err e = {};
        int pos = 0;
        for (int n : segs) {
          ASSERT_EQ(spill_model_forward(h.m, &s[pos], n, pos, lg.data(), &e), SPILL_OK) << e.msg;
          pos += n;
          EXPECT_TRUE(Same(lg.data(), want.data() + (size_t)(pos - 1) * V, V)) << "position " << pos - 1;
        }
        ASSERT_EQ(pos, kCtx);
      }
    }
  }
}

// A verify chunk of max_chunk tokens (the ring's whole slack) cut back at
// every position, repeatedly: each chunk starts where the last keep left
// off, so rejected rows are overwritten by the next chunk.
TEST(SwaRingTest, VerifyChunksCutBackAtEveryPositionEqualAFullCache) {
  const std::vector<float> want = Reference(0);
  ASSERT_FALSE(want.empty());
  const std::vector<int> s = Seq();
  for (int threads : {1, 2}) {
    for (int spec : {2, 5}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " spec " + std::to_string(spec));
      spill_test::ModelHandle h;
      h.m = OpenSwa(threads, spec, spec);  // max_chunk = spec_max: W - 1 + spec rows
      ASSERT_NE(h.m, nullptr);
      const int V = spill_model_arch(h.m)->vocab_size;
      std::vector<float> lg(V);
      spill_err e = {};
      ASSERT_EQ(spill_model_forward(h.m, s.data(), 3, 0, lg.data(), &e), SPILL_OK) << e.msg;
      int pos = 3, round = 0, cuts = 0;
      while (pos + spec <= kCtx) {
        ASSERT_EQ(spill_model_forward_verify(h.m, &s[pos], spec, &e), SPILL_OK) << e.msg;
        const float *vl = spill_model_verify_logits(h.m);
        for (int t = 0; t < spec; t++)
          ASSERT_TRUE(Same(vl + (size_t)t * V, want.data() + (size_t)(pos + t) * V, V))
              << "verify position " << pos + t;
        const int keep = 1 + round++ % spec;  // 1, 2, .., spec, 1, ..
        cuts += keep < spec;
        ASSERT_EQ(spill_model_verify_keep(h.m, keep, &e), SPILL_OK) << e.msg;
        pos += keep;
        ASSERT_EQ(spill_model_n_past(h.m), pos);
      }
      EXPECT_GT(pos, 4 * kW);  // the rings wrapped many times
      EXPECT_GT(cuts, 8);
      // and plain decode goes on from the last keep
      for (; pos < kCtx; pos++) {
        ASSERT_EQ(spill_model_forward(h.m, &s[pos], 1, pos, lg.data(), &e), SPILL_OK) << e.msg;
        ASSERT_TRUE(Same(lg.data(), want.data() + (size_t)pos * V, V)) << "position " << pos;
      }
    }
  }
}

// Rings of W - 1 + 5 = 12 rows: after 40 tokens they hold positions 28..39,
// so a cut back to n needs n - (W - 1) >= 28: n >= 35. Before they wrap
// (n_past <= 12) any cut is possible.
TEST(SwaRingTest, RewindGoesExactlyAsFarAsTheRingsHoldTheWindow) {
  const std::vector<float> want = Reference(0);
  ASSERT_FALSE(want.empty());
  const std::vector<int> s = Seq();
  spill_test::ModelHandle h;
  h.m = OpenSwa(2, 5);
  ASSERT_NE(h.m, nullptr);
  const int V = spill_model_arch(h.m)->vocab_size;
  std::vector<float> lg(V);
  spill_err e = {};
  ASSERT_EQ(spill_model_forward(h.m, s.data(), 12, 0, lg.data(), &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_model_rewind_min(h.m), 0);
  ASSERT_EQ(spill_model_rewind(h.m, 2, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_model_forward(h.m, &s[2], 38, 2, lg.data(), &e), SPILL_OK) << e.msg;
  EXPECT_TRUE(Same(lg.data(), want.data() + (size_t)39 * V, V));
  EXPECT_EQ(spill_model_rewind_min(h.m), 35);
  EXPECT_EQ(spill_model_rewind(h.m, 34, &e), SPILL_E_RANGE);
  EXPECT_NE(std::string(e.msg).find("35 is the shortest prefix held"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_model_n_past(h.m), 40);  // a refused rewind changes nothing
  EXPECT_EQ(spill_model_rewind(h.m, 41, &e), SPILL_E_RANGE);
  ASSERT_EQ(spill_model_rewind(h.m, 35, &e), SPILL_OK) << e.msg;
  for (int pos = 35; pos < kCtx; pos++) {
    ASSERT_EQ(spill_model_forward(h.m, &s[pos], 1, pos, lg.data(), &e), SPILL_OK) << e.msg;
    ASSERT_TRUE(Same(lg.data(), want.data() + (size_t)pos * V, V)) << "position " << pos;
  }
  // swa_full_kv: ctx rows, so any cut back is possible, with the same logits
  spill_test::ModelHandle fk;
  fk.m = OpenSwa(2, 5, 0, 0, 1);
  ASSERT_NE(fk.m, nullptr);
  ASSERT_EQ(spill_model_forward(fk.m, s.data(), 40, 0, lg.data(), &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_model_rewind_min(fk.m), 0);
  ASSERT_EQ(spill_model_rewind(fk.m, 2, &e), SPILL_OK) << e.msg;
  for (int pos = 2; pos < 12; pos++) {
    ASSERT_EQ(spill_model_forward(fk.m, &s[pos], 1, pos, lg.data(), &e), SPILL_OK) << e.msg;
    ASSERT_TRUE(Same(lg.data(), want.data() + (size_t)pos * V, V)) << "full, position " << pos;
  }
  // a full-attention model cuts back anywhere; a recurrent one nowhere
  spill_test::ModelHandle g, k;
  g.m = spill_test::Open(Nano("gqa"), 1, 5, nullptr, kCtx);
  k.m = spill_test::Open(Nano("kda"), 1, 5, nullptr, kCtx);
  ASSERT_TRUE(g.m && k.m);
  for (spill_model *m : {g.m, k.m}) {
    std::vector<float> l2(spill_model_arch(m)->vocab_size);
    ASSERT_EQ(spill_model_forward(m, s.data(), 40, 0, l2.data(), &e), SPILL_OK) << e.msg;
  }
  EXPECT_EQ(spill_model_rewind_min(g.m), 0);
  EXPECT_EQ(spill_model_rewind_min(k.m), 40);
  EXPECT_EQ(spill_model_rewind(k.m, 39, &e), SPILL_E_RANGE);
}

}  // namespace
