// engine/spill_draft_test.cc: n-gram drafts (spill_draft.h) and greedy
// decoding with them (spill_config.draft, docs/MODEL.md "Drafts"):
// - prompt lookup finds the latest earlier occurrence of the longest suffix;
// - the adaptive rule switches drafting off when verify chunks request more
//   expert bytes per generated token than single steps, and backs off;
// - on nano models of every attention kind (GQA, MLA, KDA, K3's mix), with
//   drafts rejected at every position of a chunk by the test hook, the
//   generated tokens and the logits after every token are bit-identical to a
//   run without drafts, and so is the held state (a next turn's logits);
// - sampling never drafts; a draft longer than a chunk allows is refused.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/crc32.h"
#include "engine/spill.h"
#include "engine/spill_draft.h"
#include "engine/spill_internal.h"
#include "engine/trace/router_trace.h"
#include "research/gen/spill_gen.h"

namespace {

TEST(DraftLookupTest, LongestSuffixLatestOccurrenceFirst) {
  //                 0  1  2  3  4  5  6  7  8  9
  const int h[] = {1, 2, 3, 9, 1, 2, 3, 7, 2, 3};
  int out[8];
  // suffix (2,3) last seen at 5..6 -> followed by 7, 2, 3
  EXPECT_EQ(spill_draft_lookup(h, 10, 8, -1, out), 3);
  EXPECT_EQ(out[0], 7);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], 3);
  // max caps it; a stop token ends it
  EXPECT_EQ(spill_draft_lookup(h, 10, 1, -1, out), 1);
  EXPECT_EQ(spill_draft_lookup(h, 10, 8, 2, out), 1);
  // suffix (3,7) occurs nowhere earlier; a 1-gram is not enough
  EXPECT_EQ(spill_draft_lookup(h, 8, 8, -1, out), 0);
  // a longer suffix wins over a more recent shorter one: (1,2,3) at 0..2 -> 9
  const int h2[] = {1, 2, 3, 9, 5, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(spill_draft_lookup(h2, 11, 2, -1, out), 2);
  EXPECT_EQ(out[0], 9);
  EXPECT_EQ(out[1], 5);
  EXPECT_EQ(spill_draft_lookup(h2, 11, 0, -1, out), 0);
  EXPECT_EQ(spill_draft_lookup(h2, 2, 4, -1, out), 0);
}

TEST(DraftRuleTest, SwitchesOffWhenChunksRequestMoreThanSingleStepsAndBacksOff) {
  spill_draft_rule r;
  spill_draft_rule_init(&r, 4, 1, 100);
  EXPECT_EQ(spill_draft_rule_len(&r), 1); // starts short
  // a whole draft accepted, cheaper than two single steps: on, longer
  spill_draft_rule_verify(&r, 1, 1, 2, 150);
  EXPECT_EQ(spill_draft_rule_len(&r), 2);
  spill_draft_rule_verify(&r, 2, 2, 3, 200);
  EXPECT_EQ(spill_draft_rule_len(&r), 4);
  // a rejection falls back to accepted + 1; the window (150+200+190 bytes
  // for 2+3+1 tokens = 90 per token) still pays
  spill_draft_rule_verify(&r, 4, 0, 1, 190);
  EXPECT_EQ(r.switched_off, 0u);
  EXPECT_EQ(spill_draft_rule_len(&r), 1);
  // ... until it does not (730 bytes for 7 tokens): off for 32 generated tokens
  spill_draft_rule_verify(&r, 1, 0, 1, 190);
  EXPECT_EQ(r.switched_off, 1u);
  EXPECT_EQ(spill_draft_rule_len(&r), 0);
  for (int i = 0; i < 31; i++) spill_draft_rule_plain(&r, 1);
  EXPECT_EQ(spill_draft_rule_len(&r), 0);
  spill_draft_rule_plain(&r, 1);
  EXPECT_EQ(spill_draft_rule_len(&r), 1); // a probe, on a fresh window
  spill_draft_rule_verify(&r, 1, 0, 1, 190);
  EXPECT_EQ(r.switched_off, 2u);
  for (int i = 0; i < 63; i++) spill_draft_rule_plain(&r, 1);
  EXPECT_EQ(spill_draft_rule_len(&r), 0); // the cooldown doubled
  spill_draft_rule_plain(&r, 1);
  EXPECT_EQ(spill_draft_rule_len(&r), 1);
  // a probe that pays keeps drafting
  spill_draft_rule_verify(&r, 1, 1, 2, 120);
  EXPECT_EQ(spill_draft_rule_len(&r), 2);
  EXPECT_EQ(r.switched_off, 2u);
  // not adaptive: always the maximum
  spill_draft_rule_init(&r, 3, 0, 100);
  spill_draft_rule_verify(&r, 3, 0, 1, 1000);
  EXPECT_EQ(spill_draft_rule_len(&r), 3);
  spill_draft_rule_init(&r, 0, 1, 100);
  EXPECT_EQ(spill_draft_rule_len(&r), 0);
}

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

const std::string &Nano(const std::string &mix) {
  static std::string dirs[7];
  static const char *kMixes[] = {"gqa", "mla", "kda", "k3", "qwen35", "k3-family", "gqa-swa"};
  for (int i = 0; i < 7; i++) {
    if (mix != kMixes[i]) continue;
    if (dirs[i].empty()) {
      std::string d = TmpDir() + "/draft-nano-" + mix;
      spill_gen_request r = {};
      r.preset = "nano";
      r.attn_mix = kMixes[i];
      spill_err e = {};
      EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
      dirs[i] = d;
    }
    return dirs[i];
  }
  static std::string none;
  return none;
}

spill_engine *Open(const std::string &mix, int draft, int adaptive = 0, int chunk = 5) {
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 256;
  cfg.prefill_chunk = chunk;
  cfg.act_quant = SPILL_ACT_F32; // compared with itself, but say which
  cfg.draft = draft;
  cfg.draft_adaptive = adaptive;
  cfg.swa_kv = SPILL_SWA_KV_RING; // gqa-swa: the rings are what a rollback must keep right
  spill_engine *g = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_engine_open(Nano(mix).c_str(), &cfg, &g, &e), SPILL_OK) << e.msg;
  return g;
}

struct GenRun {
  std::vector<int> toks;
  std::vector<uint32_t> crcs; // the logits after each generated token
  spill_run_stats st;
  spill_engine *g;
  uint32_t next_turn_crc = 0;
};

int Collect(void *user, int token, const char *, const spill_run_stats *) {
  GenRun *r = static_cast<GenRun *>(user);
  r->toks.push_back(token);
  r->crcs.push_back(spill_crc32(0, spill_engine_conv_of(r->g)->logits,
                                (size_t)spill_vocab_size(r->g) * 4));
  return 0;
}

// A repetitive prompt (the drafts find n-grams at once), 40 greedy tokens,
// then a next turn through prefix reuse: its logits tell the held state.
GenRun Generate(spill_engine *g, const spill_sampling *s = nullptr) {
  GenRun r;
  r.g = g;
  std::vector<int> p(256);
  int n = 0;
  spill_err e = {};
  EXPECT_EQ(spill_tokenize(g, "abc abd abc abd abc abd abc ab", 1, p.data(), 256, &n, &e), SPILL_OK);
  p.resize(n);
  spill_sampling greedy;
  spill_sampling_default(&greedy);
  EXPECT_EQ(spill_generate_next(g, p.data(), n, 40, s ? s : &greedy, 0, Collect, &r, nullptr,
                                &r.st, &e),
            SPILL_OK)
      << e.msg;
  const int *held = nullptr;
  const int nh = spill_engine_tokens(g, &held);
  std::vector<int> next(held, held + nh);
  for (int c : {'x', 'y', 'z'}) next.push_back(c);
  spill_run_stats st2;
  EXPECT_EQ(spill_generate_next(g, next.data(), (int)next.size(), 1, &greedy, SPILL_GEN_REUSE,
                                nullptr, nullptr, nullptr, &st2, &e),
            SPILL_OK)
      << e.msg;
  EXPECT_EQ(st2.tokens_cached, nh); // the whole held conversation was kept
  r.next_turn_crc = spill_crc32(0, spill_engine_conv_of(g)->logits, (size_t)spill_vocab_size(g) * 4);
  return r;
}

class DraftKinds : public ::testing::TestWithParam<const char *> {};

// The drafts are the reference run's own continuation
// (spill_engine_set_draft_source), so every chunk holds 4 drafts the model
// agrees with; the live knob draft_accept_max then cuts every chunk at j:
// the rollback runs at each position of a chunk.
TEST_P(DraftKinds, RejectionAtEveryPositionGivesTheTokensAndLogitsOfARunWithout) {
  const std::string mix = GetParam();
  spill_engine *ref_g = Open(mix, 0);
  ASSERT_NE(ref_g, nullptr);
  const GenRun ref = Generate(ref_g);
  const int *held = nullptr;
  const int nh = spill_engine_tokens(ref_g, &held);
  const std::vector<int> conv(held, held + nh); // after the next turn: prompt, reply, "xyz", 1
  spill_engine_close(ref_g);
  EXPECT_EQ(ref.st.draft_tokens, 0u);
  EXPECT_EQ(ref.st.decode_forwards, (uint64_t)ref.st.tokens_decode - (ref.toks.back() == 257));

  const int kDraft = 4;
  spill_engine *g = Open(mix, kDraft);
  ASSERT_NE(g, nullptr);
  spill_err e = {};
  ASSERT_EQ(spill_engine_set_draft_source(g, conv.data(), (int)conv.size(), &e), SPILL_OK) << e.msg;
  for (int j = -1; j < kDraft; j++) { // -1: the model's own verdicts (all accepted)
    SCOPED_TRACE(mix + " reject at " + std::to_string(j));
    ASSERT_EQ(spill_engine_set_knob(g, "draft_accept_max", j < 0 ? "off" : std::to_string(j).c_str(),
                                    &e),
              SPILL_OK)
        << e.msg;
    const GenRun r = Generate(g);
    EXPECT_EQ(r.toks, ref.toks);
    EXPECT_EQ(r.crcs, ref.crcs);
    EXPECT_EQ(r.next_turn_crc, ref.next_turn_crc);
    EXPECT_GT(r.st.draft_tokens, 0u);
    if (j >= 0) { // every chunk was cut at j
      EXPECT_LE(r.st.draft_accepted, r.st.decode_forwards * (uint64_t)j);
      EXPECT_LT(r.st.draft_accepted, r.st.draft_tokens);
    } else {
      EXPECT_EQ(r.st.draft_accepted, r.st.draft_tokens);
    }
    // every generated token came from a forward: t0 of each step + accepted drafts
    EXPECT_EQ(r.st.decode_forwards + r.st.draft_accepted,
              (uint64_t)r.st.tokens_decode - (r.toks.back() == 257));
  }
  ASSERT_EQ(spill_engine_set_draft_source(g, nullptr, 0, &e), SPILL_OK);
  spill_engine_close(g);
}

// Without the hook: the n-gram lookup drafts from the text itself; the nano
// GQA model's greedy reply to this prompt repeats, so drafts are accepted.
TEST(DraftEngineTest, LookupDraftsOfARepeatingReplyAreAcceptedLosslessly) {
  spill_engine *a = Open("gqa", 0);
  spill_engine *b = Open("gqa", 4);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const GenRun ra = Generate(a), rb = Generate(b);
  spill_engine_close(a);
  spill_engine_close(b);
  EXPECT_EQ(ra.toks, rb.toks);
  EXPECT_EQ(ra.crcs, rb.crcs);
  EXPECT_EQ(ra.next_turn_crc, rb.next_turn_crc);
  EXPECT_GT(rb.st.draft_accepted, 0u);
  EXPECT_LT(rb.st.decode_forwards, ra.st.decode_forwards);
}

// gqa-swa: sliding-window rings of W - 1 + prefill_chunk = 12 rows over ~75
// positions, each verify chunk's rejected rows overwritten by the next
INSTANTIATE_TEST_SUITE_P(AllKinds, DraftKinds,
                         ::testing::Values("gqa", "mla", "kda", "k3", "qwen35", "gqa-swa"));

// On the K3 family's nano (the released K3's nano routes consecutive tokens
// to the same experts so often that a rejected 1-token probe can cost no
// more bytes than a single step, which the rule rightly keeps: 4 probes in
// 40 tokens there).
TEST(DraftEngineTest, AdaptiveRuleStopsDraftsThatAreAllRejected) {
  spill_engine *g = Open("k3-family", 4, 1);
  ASSERT_NE(g, nullptr);
  spill_err e = {};
  ASSERT_EQ(spill_engine_set_knob(g, "draft_accept_max", "0", &e), SPILL_OK) << e.msg;
  const GenRun r = Generate(g);
  spill_engine_close(g);
  EXPECT_EQ(r.st.draft_accepted, 0u);
  EXPECT_GE(r.st.draft_switched_off, 1u);
  // one 1-token probe, then off for 32 tokens: at most 2 probes in 40 tokens
  EXPECT_GT(r.st.draft_tokens, 0u);
  EXPECT_LE(r.st.draft_tokens, 2u);
  EXPECT_EQ(r.st.decode_forwards, (uint64_t)r.st.tokens_decode - (r.toks.back() == 257));
}

TEST(DraftEngineTest, SamplingNeverDraftsAndDrawsAsWithout) {
  spill_sampling s;
  spill_sampling_default(&s);
  s.temperature = 0.9f;
  s.seed = 5;
  spill_engine *a = Open("gqa", 0);
  spill_engine *b = Open("gqa", 4);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const GenRun ra = Generate(a, &s), rb = Generate(b, &s);
  spill_engine_close(a);
  spill_engine_close(b);
  EXPECT_EQ(ra.toks, rb.toks);
  EXPECT_EQ(ra.crcs, rb.crcs);
  EXPECT_EQ(rb.st.draft_tokens, 0u);
}

TEST(DraftEngineTest, ADraftLongerThanAChunkIsRefusedByName) {
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.draft = 4;
  cfg.prefill_chunk = 4;
  spill_engine *g = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_engine_open(Nano("gqa").c_str(), &cfg, &g, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("prefill_chunk >= draft + 1"), std::string::npos) << e.msg;
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(spill_config_set(&cfg, "draft", "16", &e), SPILL_E_CONFIG);
  EXPECT_EQ(spill_config_set(&cfg, "draft", "off", &e), SPILL_OK);
  EXPECT_EQ(cfg.draft, 0);
}

// The draft source is checked and copied: tokens outside the vocabulary and
// sequences longer than ctx are refused by name; the caller's array may be
// freed at once; a source that ends at the prompt drafts nothing (the
// runner's greedy reference pass), NULL goes back to the n-gram lookup.
TEST(DraftEngineTest, DraftSourceIsCheckedCopiedAndEndsWhereItEnds) {
  spill_engine *g = Open("gqa", 4);
  ASSERT_NE(g, nullptr);
  spill_err e = {};
  std::vector<int> bad = {1, 2, 100000};
  EXPECT_EQ(spill_engine_set_draft_source(g, bad.data(), 3, &e), SPILL_E_RANGE);
  EXPECT_NE(std::string(e.msg).find("index 2"), std::string::npos) << e.msg;
  std::vector<int> longer(300, 1); // ctx 256
  EXPECT_EQ(spill_engine_set_draft_source(g, longer.data(), 300, &e), SPILL_E_RANGE);
  EXPECT_NE(std::string(e.msg).find("ctx"), std::string::npos) << e.msg;
  // the prompt alone (BOS + its bytes): no continuation to draft from
  std::vector<int> p(256);
  int n = 0;
  ASSERT_EQ(spill_tokenize(g, "abc abd abc abd abc abd abc ab", 1, p.data(), 256, &n, &e), SPILL_OK);
  {
    std::vector<int> tmp(p.begin(), p.begin() + n);
    ASSERT_EQ(spill_engine_set_draft_source(g, tmp.data(), n, &e), SPILL_OK) << e.msg;
  } // freed: the engine holds its own copy
  const GenRun none = Generate(g);
  EXPECT_EQ(none.st.draft_tokens, 0u); // the lookup would draft here (next test's prompt)
  ASSERT_EQ(spill_engine_set_draft_source(g, nullptr, 0, &e), SPILL_OK);
  const GenRun lookup = Generate(g);
  EXPECT_GT(lookup.st.draft_tokens, 0u);
  EXPECT_EQ(lookup.toks, none.toks);
  spill_engine_close(g);
}

// bytes_read_decode is the decode's share of bytes_read (the prompt's reads
// are not in it): with a cold cache both phases read, so it is smaller than
// bytes_read and equal to the sum of the token callbacks' bytes.
int SumBytes(void *user, int, const char *, const spill_run_stats *ts) {
  *static_cast<uint64_t *>(user) += ts->bytes_read;
  return 0;
}
TEST(DraftEngineTest, DecodeBytesAreTheDecodesShareOfTheBytesRead) {
  for (int draft : {0, 4}) {
    spill_engine *g = Open("k3", draft);
    ASSERT_NE(g, nullptr);
    spill_err e = {};
    ASSERT_EQ(spill_engine_set_knob(g, "cache_slots", "8", &e), SPILL_OK) << e.msg;
    std::vector<int> p(256);
    int n = 0;
    ASSERT_EQ(spill_tokenize(g, "abc abd abc abd abc abd abc ab", 1, p.data(), 256, &n, &e), SPILL_OK);
    spill_sampling greedy;
    spill_sampling_default(&greedy);
    spill_run_stats st;
    uint64_t sum = 0;
    ASSERT_EQ(spill_generate(g, p.data(), n, 24, &greedy, SumBytes, &sum, nullptr, &st, &e), SPILL_OK)
        << e.msg;
    EXPECT_GT(st.bytes_read_decode, 0u);
    EXPECT_LT(st.bytes_read_decode, st.bytes_read);
    EXPECT_EQ(st.bytes_read_decode, sum);
    spill_engine_close(g);
  }
}

// The router trace of a run with drafts: its sequence tokens (prompt and
// generated) are those of a run without drafts, id for id and position for
// position, and every rolled-back draft of a verify chunk has its rows too,
// marked rejected (one per MoE layer): its routing ran and its experts were
// read. The drafts are the model's own continuation, at most 1 accepted.
TEST(DraftEngineTest, TraceKeepsTheSequenceAndMarksRejectedDraftRows) {
  auto traced = [](spill_engine *g, const std::string &path, spill_run_stats *st) {
    spill_err e = {};
    EXPECT_EQ(spill_engine_set_knob(g, "trace", path.c_str(), &e), SPILL_OK) << e.msg;
    std::vector<int> p(256);
    int n = 0;
    EXPECT_EQ(spill_tokenize(g, "abc abd abc abd abc abd abc ab", 1, p.data(), 256, &n, &e), SPILL_OK);
    spill_sampling greedy;
    spill_sampling_default(&greedy);
    EXPECT_EQ(spill_generate(g, p.data(), n, 24, &greedy, nullptr, nullptr, nullptr, st, &e),
              SPILL_OK)
        << e.msg;
    EXPECT_EQ(spill_engine_set_knob(g, "trace", "", &e), SPILL_OK) << e.msg;
  };
  spill_engine *ref_g = Open("k3", 0);
  ASSERT_NE(ref_g, nullptr);
  spill_run_stats rst;
  const std::string ref_path = TmpDir() + "/trace-nodraft.jsonl";
  traced(ref_g, ref_path, &rst);
  const int *held = nullptr;
  const int nh = spill_engine_tokens(ref_g, &held);
  const std::vector<int> conv(held, held + nh);
  spill_engine_close(ref_g);

  spill_engine *g = Open("k3", 4);
  ASSERT_NE(g, nullptr);
  spill_err e = {};
  ASSERT_EQ(spill_engine_set_draft_source(g, conv.data(), (int)conv.size(), &e), SPILL_OK);
  ASSERT_EQ(spill_engine_set_knob(g, "draft_accept_max", "1", &e), SPILL_OK) << e.msg;
  spill_run_stats st;
  const std::string path = TmpDir() + "/trace-draft.jsonl";
  traced(g, path, &st);
  spill_engine_close(g);
  ASSERT_GT(st.draft_tokens, st.draft_accepted);

  spill_trace a = {}, b = {};
  ASSERT_EQ(spill_trace_read_file(ref_path.c_str(), nullptr, &a, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_trace_read_file(path.c_str(), nullptr, &b, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(a.n_rejected_rows, 0u);
  ASSERT_EQ(b.n_tokens, a.n_tokens);
  ASSERT_EQ(b.n_layers, a.n_layers);
  for (uint32_t t = 0; t < a.n_tokens; t++) {
    EXPECT_EQ(b.pos[t], a.pos[t]) << t;
    EXPECT_EQ(b.phase[t], a.phase[t]) << t;
    for (uint32_t l = 0; l < a.n_layers; l++)
      EXPECT_EQ(memcmp(spill_trace_ids(&b, t, l), spill_trace_ids(&a, t, l), a.top_k * 4), 0)
          << "token " << t << " layer " << l;
  }
  EXPECT_EQ(b.n_rejected_rows, (st.draft_tokens - st.draft_accepted) * a.n_layers);
  spill_trace_free(&a);
  spill_trace_free(&b);
}

}  // namespace
