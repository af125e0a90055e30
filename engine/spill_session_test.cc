// Conversations and session files (spill.h spill_generate_next,
// spill_session_save / load) on nano models of every attention kind (GQA,
// MLA, KDA and K3's KDA + MLA mix):
// - a second turn after save, close, reopen and load gives the tokens and
//   the logits (bit for bit, at every generated position) of an engine that
//   never stopped, sampled with temperature (the sampler's generator is part
//   of the state);
// - a reused prefix gives the logits of a run that prefills the whole
//   prompt, and prefills only the new tokens (GQA/MLA also cut back to a
//   shorter common prefix; KDA re-runs everything then);
// - hostile files (truncated, trailing bytes, flipped bits, other model,
//   other ctx, other version, huge or out-of-range counts, a directory)
//   give their named error and leave an empty, working conversation.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/base/crc32.h"
#include "engine/spill.h"
#include "engine/spill_internal.h"
#include "research/gen/spill_gen.h"

namespace {

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// gqa-swa: GQA with gpt-oss's sliding window (8 tokens on layers 0 and 2)
const char *kMixes[] = {"gqa", "mla", "kda", "k3", "qwen35", "gqa-swa"};

const std::string &Nano(const char *mix) {
  static std::string dirs[6];
  for (int i = 0; i < 6; i++) {
    if (strcmp(mix, kMixes[i]) != 0) continue;
    if (dirs[i].empty()) {
      std::string d = TmpDir() + "/session-nano-" + mix;
      spill_gen_request r = {};
      r.preset = "nano";
      r.attn_mix = mix;
      spill_err e = {};
      EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
      dirs[i] = d;
    }
    return dirs[i];
  }
  static std::string none;
  return none;
}

// (gqa-swa: rings, whose cut-backs these tests check; swa_kv auto would
// give this small ctx full rows)
spill_engine *Open(const char *mix, int ctx = 256) {
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = ctx;
  cfg.prefill_chunk = 5;
  cfg.swa_kv = SPILL_SWA_KV_RING;
  spill_engine *g = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_engine_open(Nano(mix).c_str(), &cfg, &g, &e), SPILL_OK) << e.msg;
  return g;
}

std::vector<int> Tokens(spill_engine *g, const char *text, int bos) {
  std::vector<int> t(strlen(text) * 3 + 8);
  int n = 0;
  spill_err e = {};
  EXPECT_EQ(spill_tokenize(g, text, bos, t.data(), (int)t.size(), &n, &e), SPILL_OK) << e.msg;
  t.resize(n);
  return t;
}

// What a turn produced: tokens, and the crc32 of the logits after each one.
struct Turn {
  std::vector<int> toks;
  std::vector<uint32_t> logit_crcs;
  spill_run_stats st;
  spill_engine *g;
};

int Collect(void *user, int token, const char *, const spill_run_stats *) {
  Turn *t = static_cast<Turn *>(user);
  t->toks.push_back(token);
  const spill_engine_conv *cv = spill_engine_conv_of(t->g);
  t->logit_crcs.push_back(spill_crc32(0, cv->logits, (size_t)spill_vocab_size(t->g) * 4));
  return 0;
}

spill_sampling Sampled() {
  spill_sampling s;
  spill_sampling_default(&s);
  s.temperature = 0.9f;
  s.top_k = 20;
  s.seed = 7;
  return s;
}

Turn RunTurn(spill_engine *g, const std::vector<int> &prompt, int n_new, const spill_sampling &s,
         int flags) {
  Turn t;
  t.g = g;
  spill_err e = {};
  EXPECT_EQ(spill_generate_next(g, prompt.data(), (int)prompt.size(), n_new, &s, flags, Collect,
                                &t, nullptr, &t.st, &e),
            SPILL_OK)
      << e.msg;
  return t;
}

std::vector<int> Held(spill_engine *g) {
  const int *p = nullptr;
  const int n = spill_engine_tokens(g, &p);
  return std::vector<int>(p, p + n);
}

uint32_t LastLogitsCrc(spill_engine *g) {
  return spill_crc32(0, spill_engine_conv_of(g)->logits, (size_t)spill_vocab_size(g) * 4);
}

const int kBoth = SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG;

class SessionKinds : public ::testing::TestWithParam<const char *> {};

TEST_P(SessionKinds, ResumedTurnIsBitIdenticalToOneThatNeverStopped) {
  const char *mix = GetParam();
  const std::string file = TmpDir() + "/s-" + mix + ".session";
  const spill_sampling s = Sampled();
  // never stopped: two turns on one engine
  spill_engine *a = Open(mix);
  ASSERT_NE(a, nullptr);
  const Turn a1 = RunTurn(a, Tokens(a, "The first turn of a chat", 1), 12, s, kBoth);
  std::vector<int> p2 = Held(a);
  ASSERT_EQ(p2.size(), Tokens(a, "The first turn of a chat", 1).size() + a1.toks.size());
  const std::vector<int> more = Tokens(a, " and the second one", 0);
  p2.insert(p2.end(), more.begin(), more.end());
  const Turn a2 = RunTurn(a, p2, 12, s, kBoth);
  EXPECT_EQ(a2.st.tokens_cached, (int)(p2.size() - more.size()));
  EXPECT_EQ(a2.st.tokens_prefill, (int)more.size());
  // stopped after the first turn: saved, closed, a new engine loads it
  spill_engine *b = Open(mix);
  ASSERT_NE(b, nullptr);
  const Turn b1 = RunTurn(b, Tokens(b, "The first turn of a chat", 1), 12, s, kBoth);
  EXPECT_EQ(b1.toks, a1.toks);
  spill_err e = {};
  ASSERT_EQ(spill_session_save(b, file.c_str(), &e), SPILL_OK) << e.msg;
  spill_engine_close(b);
  spill_engine *c = Open(mix);
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(spill_session_load(c, file.c_str(), &e), SPILL_OK) << e.msg;
  EXPECT_EQ(Held(c), std::vector<int>(p2.begin(), p2.end() - (long)more.size()));
  const Turn c2 = RunTurn(c, p2, 12, s, kBoth);
  EXPECT_EQ(c2.toks, a2.toks) << mix;
  EXPECT_EQ(c2.logit_crcs, a2.logit_crcs) << mix;
  EXPECT_EQ(c2.st.tokens_cached, a2.st.tokens_cached);
  EXPECT_EQ(c2.st.tokens_prefill, (int)more.size());
  // without the sampler's state the second turn draws differently (so the
  // comparison above can fail): a fresh generator from the same seed
  spill_engine *d = Open(mix);
  ASSERT_EQ(spill_session_load(d, file.c_str(), &e), SPILL_OK) << e.msg;
  const Turn d2 = RunTurn(d, p2, 12, s, SPILL_GEN_REUSE);
  EXPECT_NE(d2.toks, a2.toks) << mix;
  spill_engine_close(a);
  spill_engine_close(c);
  spill_engine_close(d);
}

TEST_P(SessionKinds, ReusedPrefixGivesTheLogitsOfAFullPrefill) {
  const char *mix = GetParam();
  spill_sampling greedy;
  spill_sampling_default(&greedy);
  spill_engine *a = Open(mix), *f = Open(mix);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(f, nullptr);
  const Turn a1 = RunTurn(a, Tokens(a, "Tell me about disks.", 1), 9, greedy, SPILL_GEN_REUSE);
  EXPECT_EQ(a1.st.tokens_cached, 0);
  // the next turn extends everything held
  std::vector<int> p2 = Held(a);
  const size_t held = p2.size();
  const std::vector<int> more = Tokens(a, " And SSDs?", 0);
  p2.insert(p2.end(), more.begin(), more.end());
  const Turn a2 = RunTurn(a, p2, 9, greedy, SPILL_GEN_REUSE);
  const Turn f2 = RunTurn(f, p2, 9, greedy, 0);
  EXPECT_EQ(a2.st.tokens_cached, (int)held);
  EXPECT_EQ(a2.st.tokens_prefill, (int)more.size());
  EXPECT_EQ(f2.st.tokens_prefill, (int)p2.size());
  EXPECT_EQ(a2.toks, f2.toks);
  EXPECT_EQ(a2.logit_crcs, f2.logit_crcs);
  // the same prompt again: nothing to run if its last logits are held
  // (here they are not: decode moved on), else the last token
  const Turn a3 = RunTurn(a, p2, 4, greedy, SPILL_GEN_REUSE);
  const Turn f3 = RunTurn(f, p2, 4, greedy, 0);
  EXPECT_EQ(a3.toks, f3.toks);
  EXPECT_EQ(a3.logit_crcs, f3.logit_crcs);
  // recurrent layers cannot be cut back; gqa-swa's rings (W - 1 + prefill_chunk = 12
  // positions) no longer hold a window ~17 tokens back
  const bool whole_only = strcmp(mix, "gqa") != 0 && strcmp(mix, "mla") != 0;
  // a prompt that leaves the conversation after `cut` tokens
  const size_t cut = held - 3;
  std::vector<int> p4(p2.begin(), p2.begin() + (long)cut);
  const std::vector<int> other = Tokens(a, " Something else.", 0);
  p4.insert(p4.end(), other.begin(), other.end());
  const Turn a4 = RunTurn(a, p4, 6, greedy, SPILL_GEN_REUSE);
  const Turn f4 = RunTurn(f, p4, 6, greedy, 0);
  EXPECT_EQ(a4.st.tokens_cached, whole_only ? 0 : (int)cut) << mix;
  EXPECT_EQ(a4.toks, f4.toks);
  EXPECT_EQ(a4.logit_crcs, f4.logit_crcs);
  EXPECT_EQ(LastLogitsCrc(a), LastLogitsCrc(f));
  // a prompt equal to what is held, whose last logits are held: nothing runs
  const std::vector<int> h = Held(a);
  std::vector<int> p5 = h;
  spill_run_stats st;
  spill_err e = {};
  // an eval leaves its tokens and logits held
  std::vector<float> lg((size_t)spill_vocab_size(a));
  ASSERT_EQ(spill_eval(a, p5.data(), (int)p5.size(), 1, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  Turn a5;
  a5.g = a;
  ASSERT_EQ(spill_generate_next(a, p5.data(), (int)p5.size(), 3, &greedy, SPILL_GEN_REUSE, Collect,
                                &a5, nullptr, &st, &e),
            SPILL_OK);
  EXPECT_EQ(st.tokens_cached, (int)p5.size());
  EXPECT_EQ(st.tokens_prefill, 0);
  const Turn f5 = RunTurn(f, p5, 3, greedy, 0);
  EXPECT_EQ(a5.logit_crcs, f5.logit_crcs);
  spill_engine_close(a);
  spill_engine_close(f);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, SessionKinds, ::testing::ValuesIn(kMixes));

// ---- hostile files ----

std::vector<char> Slurp(const std::string &f) {
  std::ifstream in(f, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Spit(const std::string &f, const std::vector<char> &b) {
  std::ofstream out(f, std::ios::binary | std::ios::trunc);
  out.write(b.data(), (std::streamsize)b.size());
}

// Header crc over bytes [0, 124) rewritten, so a field change is judged by
// its meaning rather than by the checksum.
void Reseal(std::vector<char> &b) {
  const uint32_t crc = spill_crc32(0, b.data(), 124);
  memcpy(b.data() + 124, &crc, 4);
}

class SessionHostile : public ::testing::Test {
 protected:
  void SetUp() override {
    g = Open("k3");
    ASSERT_NE(g, nullptr);
    spill_sampling s = Sampled();
    RunTurn(g, Tokens(g, "Some history to keep.", 1), 6, s, 0);
    good = TmpDir() + "/hostile-good.session";
    bad = TmpDir() + "/hostile-bad.session";
    spill_err e = {};
    ASSERT_EQ(spill_session_save(g, good.c_str(), &e), SPILL_OK) << e.msg;
    bytes = Slurp(good);
    ASSERT_GT(bytes.size(), 128u);
  }
  void TearDown() override { spill_engine_close(g); }
  // Loads `b` as a file: the status and message; the conversation is then
  // empty and a generation still runs.
  int Load(const std::vector<char> &b, std::string *msg = nullptr) {
    Spit(bad, b);
    spill_err e = {};
    const int rc = spill_session_load(g, bad.c_str(), &e);
    if (msg) *msg = e.msg;
    if (rc != SPILL_OK) {
      EXPECT_EQ(spill_engine_tokens(g, nullptr), 0);
      spill_sampling s;
      spill_sampling_default(&s);
      const std::vector<int> p = Tokens(g, "x", 1);
      Turn t = RunTurn(g, p, 2, s, SPILL_GEN_REUSE);
      EXPECT_EQ(t.st.tokens_cached, 0);
    }
    return rc;
  }
  spill_engine *g = nullptr;
  std::string good, bad;
  std::vector<char> bytes;
};

TEST_F(SessionHostile, TheGoodFileLoads) { EXPECT_EQ(Load(bytes), SPILL_OK); }

TEST_F(SessionHostile, TruncatedOrTrailingIsAFormatError) {
  for (size_t n : {(size_t)0, (size_t)10, (size_t)127, (size_t)128, (size_t)129,
                   bytes.size() / 2, bytes.size() - 1}) {
    std::string msg;
    EXPECT_EQ(Load(std::vector<char>(bytes.begin(), bytes.begin() + (long)n), &msg),
              SPILL_E_FORMAT)
        << n << ": " << msg;
  }
  std::vector<char> longer = bytes;
  longer.push_back(0);
  std::string msg;
  EXPECT_EQ(Load(longer, &msg), SPILL_E_FORMAT);
  EXPECT_NE(msg.find("trailing bytes"), std::string::npos) << msg;
}

TEST_F(SessionHostile, EveryFlippedBitIsRefused) {
  // every bit of the header, and a spread of the body's bits
  std::vector<size_t> bits;
  for (size_t i = 0; i < 128 * 8; i++) bits.push_back(i);
  for (size_t i = 128 * 8; i < bytes.size() * 8; i += 997) bits.push_back(i);
  bits.push_back(bytes.size() * 8 - 1);
  for (size_t bit : bits) {
    std::vector<char> b = bytes;
    b[bit / 8] ^= (char)(1 << (bit % 8));
    std::string msg;
    const int rc = Load(b, &msg);
    EXPECT_TRUE(rc == SPILL_E_CHECKSUM || rc == SPILL_E_FORMAT || rc == SPILL_E_VERSION)
        << "bit " << bit << ": " << rc << " " << msg;
  }
}

TEST_F(SessionHostile, AnotherModelOrCtxIsRefusedByName) {
  for (const char *mix : {"gqa", "mla", "kda", "qwen35"}) {
    spill_engine *o = Open(mix);
    ASSERT_NE(o, nullptr);
    spill_err e = {};
    EXPECT_EQ(spill_session_load(o, good.c_str(), &e), SPILL_E_SESSION) << mix;
    EXPECT_NE(std::string(e.msg).find("saved for model"), std::string::npos) << e.msg;
    spill_engine_close(o);
  }
  spill_engine *o = Open("k3", 128);
  ASSERT_NE(o, nullptr);
  spill_err e = {};
  EXPECT_EQ(spill_session_load(o, good.c_str(), &e), SPILL_E_SESSION);
  EXPECT_NE(std::string(e.msg).find("saved at ctx 256, this engine runs ctx 128"),
            std::string::npos)
      << e.msg;
  spill_engine_close(o);
}

TEST_F(SessionHostile, ResealedLiesAreNamed) {
  std::vector<char> b = bytes;
  for (uint32_t v : {1u, 3u}) {  // version 1 (whole GQA caches) by name, a future one
    b = bytes;
    memcpy(b.data() + 8, &v, 4);
    Reseal(b);
    std::string msg;
    EXPECT_EQ(Load(b, &msg), SPILL_E_VERSION) << v;
    EXPECT_NE(msg.find("version " + std::to_string(v) + (v == 1 ? " (every GQA" : ", this")),
              std::string::npos)
        << msg;
  }
  for (uint32_t n : {257u, 0x7fffffffu, 0xffffffffu}) {  // huge token counts
    b = bytes;
    memcpy(b.data() + 28, &n, 4);
    Reseal(b);
    std::string msg;
    EXPECT_EQ(Load(b, &msg), SPILL_E_FORMAT) << n;
    EXPECT_NE(msg.find("exceed its ctx"), std::string::npos) << msg;
  }
  b = bytes;  // fewer tokens than the body holds: the size says so
  uint32_t n;
  memcpy(&n, b.data() + 28, 4);
  n -= 1;
  memcpy(b.data() + 28, &n, 4);
  Reseal(b);
  EXPECT_EQ(Load(b), SPILL_E_FORMAT);
  b = bytes;  // a token out of the vocabulary, body crc made to match
  const int32_t big = 1 << 30;
  memcpy(b.data() + 128, &big, 4);
  const uint32_t crc = spill_crc32(0, b.data() + 128, b.size() - 128 - 4);
  memcpy(b.data() + b.size() - 4, &crc, 4);
  std::string msg;
  EXPECT_EQ(Load(b, &msg), SPILL_E_FORMAT);
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  b = bytes;  // unknown flags
  uint32_t flags = 0x80;
  memcpy(b.data() + 44, &flags, 4);
  Reseal(b);
  EXPECT_EQ(Load(b), SPILL_E_FORMAT);
}

TEST_F(SessionHostile, MissingFileAndDirectory) {
  spill_err e = {};
  EXPECT_EQ(spill_session_load(g, (TmpDir() + "/no-such.session").c_str(), &e), SPILL_E_IO);
  EXPECT_EQ(spill_engine_tokens(g, nullptr), 0);
  EXPECT_EQ(spill_session_load(g, TmpDir().c_str(), &e), SPILL_E_FORMAT) << e.msg;
  // a save into a missing directory fails by name, the old file intact
  EXPECT_EQ(spill_session_save(g, (TmpDir() + "/no/such/dir.session").c_str(), &e), SPILL_E_IO);
}

TEST_F(SessionHostile, SaveIsAtomic) {
  // a second save replaces the file whole and leaves no temp file behind
  spill_err e = {};
  ASSERT_EQ(spill_session_save(g, good.c_str(), &e), SPILL_OK) << e.msg;
  EXPECT_EQ(Slurp(good), bytes);
  const std::string tmp = good + ".tmp." + std::to_string(getpid());
  struct stat sb;
  EXPECT_NE(stat(tmp.c_str(), &sb), 0);
}

// Sliding-window layers keep a ring of W - 1 + prefill_chunk positions
// (W = 8, chunk 5: 12). Past several windows: a prompt leaving the held
// conversation 3 tokens back is cut back within the ring (kept), 30 back is
// not (prefilled whole), both with the logits of a full prefill; a session
// saved mid-sequence past the window loads into an engine with another
// prefill chunk (another ring size: the file holds positions, not rows) and
// continues bit-identically.
TEST(SessionSlidingWindow, RingsCutBackWithinThemselvesAndSessionsHoldPositions) {
  spill_sampling greedy;
  spill_sampling_default(&greedy);
  spill_engine *a = Open("gqa-swa"), *f = Open("gqa-swa");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(f, nullptr);
  const std::vector<int> p1 = Tokens(a, "A sliding window sees eight tokens; this prompt is longer.", 1);
  ASSERT_GT(p1.size(), 40u);
  RunTurn(a, p1, 10, greedy, SPILL_GEN_REUSE);
  const std::vector<int> held = Held(a);
  for (size_t back : {(size_t)3, (size_t)30}) {
    SCOPED_TRACE(back);
    std::vector<int> p(held.begin(), held.end() - (long)back);
    const std::vector<int> more = Tokens(a, " Elsewhere.", 0);
    p.insert(p.end(), more.begin(), more.end());
    const Turn ar = RunTurn(a, p, 5, greedy, SPILL_GEN_REUSE);
    const Turn fr = RunTurn(f, p, 5, greedy, 0);
    size_t k = 0; /* the common prefix (a generated token may equal the new text's first) */
    while (k < held.size() && k < p.size() && held[k] == p[k]) k++;
    ASSERT_LT(k, held.size() - (back == 3 ? 0 : 12));
    EXPECT_EQ(ar.st.tokens_cached, back == 3 ? (int)k : 0);
    EXPECT_EQ(ar.toks, fr.toks);
    EXPECT_EQ(ar.logit_crcs, fr.logit_crcs);
    // back to the first conversation for the next case
    RunTurn(a, p1, 10, greedy, 0);
  }
  // save past the window, load with prefill chunk 3 (ring 10, not 12)
  const std::string file = TmpDir() + "/swa-mid.session";
  spill_err e = {};
  ASSERT_EQ(spill_session_save(a, file.c_str(), &e), SPILL_OK) << e.msg;
  std::vector<int> p2 = Held(a);
  const std::vector<int> more = Tokens(a, " and then some more words", 0);
  p2.insert(p2.end(), more.begin(), more.end());
  const Turn a2 = RunTurn(a, p2, 12, greedy, SPILL_GEN_REUSE);
  EXPECT_EQ(a2.st.tokens_prefill, (int)more.size());
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 256;
  cfg.prefill_chunk = 3;
  cfg.swa_kv = SPILL_SWA_KV_RING;
  spill_engine *c = nullptr;
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &c, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_session_load(c, file.c_str(), &e), SPILL_OK) << e.msg;
  const Turn c2 = RunTurn(c, p2, 12, greedy, SPILL_GEN_REUSE);
  EXPECT_EQ(c2.st.tokens_cached, a2.st.tokens_cached);
  EXPECT_EQ(c2.toks, a2.toks);
  EXPECT_EQ(c2.logit_crcs, a2.logit_crcs);
  // the file holds W - 1 = 7 positions of each sliding layer, all of each full one
  const int n = (int)(p2.size() - more.size());
  const size_t row = 2 * 2 * 16 * 4; /* keys and values of a position */
  const std::vector<char> bytes = Slurp(file);
  ASSERT_GT(bytes.size(), 48u);
  uint32_t flags = 0;
  memcpy(&flags, bytes.data() + 44, 4); /* bit 0: the last logits */
  const size_t want = 128 + 4 * (size_t)n + (2 * (size_t)n + 2 * 7) * row +
                      (flags & 1 ? 4 * (size_t)spill_vocab_size(a) : 0) + 4;
  EXPECT_EQ(bytes.size(), want);
  spill_engine_close(a);
  spill_engine_close(c);
  spill_engine_close(f);
}

// swa_kv full: the sliding-window layers keep ctx rows, so a prompt leaving
// the held conversation 30 tokens back keeps its prefix (the ring does not),
// with the logits of a full prefill; and it loads a session a ring engine
// saved (the file holds positions) and continues as that engine does.
TEST(SessionSlidingWindow, FullKvKeepsAnyPrefixAndLoadsRingSessions) {
  spill_sampling greedy;
  spill_sampling_default(&greedy);
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 256;
  cfg.prefill_chunk = 5;
  spill_err e = {};
  ASSERT_EQ(spill_config_set(&cfg, "swa_kv", "full", &e), SPILL_OK) << e.msg;
  spill_engine *a = nullptr, *f = Open("gqa-swa"), *r = Open("gqa-swa");
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &a, &e), SPILL_OK) << e.msg;
  ASSERT_NE(f, nullptr);
  ASSERT_NE(r, nullptr);
  const std::vector<int> p1 = Tokens(a, "A sliding window sees eight tokens; this prompt is longer.", 1);
  RunTurn(a, p1, 10, greedy, SPILL_GEN_REUSE);
  const std::vector<int> held = Held(a);
  std::vector<int> p(held.begin(), held.end() - 30);
  const std::vector<int> more = Tokens(a, " Elsewhere.", 0);
  p.insert(p.end(), more.begin(), more.end());
  size_t k = 0;
  while (k < held.size() && k < p.size() && held[k] == p[k]) k++;
  const Turn ar = RunTurn(a, p, 5, greedy, SPILL_GEN_REUSE);
  const Turn fr = RunTurn(f, p, 5, greedy, 0);
  EXPECT_EQ(ar.st.tokens_cached, (int)k);
  EXPECT_EQ(ar.toks, fr.toks);
  EXPECT_EQ(ar.logit_crcs, fr.logit_crcs);
  // a ring engine's session (past the window) into the full one
  RunTurn(r, p1, 10, greedy, SPILL_GEN_REUSE);
  const std::string file = TmpDir() + "/swa-ring-to-full.session";
  ASSERT_EQ(spill_session_save(r, file.c_str(), &e), SPILL_OK) << e.msg;
  std::vector<int> p2 = Held(r);
  const std::vector<int> tail = Tokens(r, " and on", 0);
  p2.insert(p2.end(), tail.begin(), tail.end());
  const Turn r2 = RunTurn(r, p2, 8, greedy, SPILL_GEN_REUSE);
  ASSERT_EQ(spill_session_load(a, file.c_str(), &e), SPILL_OK) << e.msg;
  const Turn a2 = RunTurn(a, p2, 8, greedy, SPILL_GEN_REUSE);
  EXPECT_EQ(a2.st.tokens_cached, r2.st.tokens_cached);
  EXPECT_EQ(a2.toks, r2.toks);
  EXPECT_EQ(a2.logit_crcs, r2.logit_crcs);
  spill_engine_close(a);
  spill_engine_close(f);
  spill_engine_close(r);
}

// swa_kv auto (the default) is decided by the planner at open and held in
// the engine's plan and config: at ctx 256 the sliding layers' extra rows
// (2 x 244 x 256 B) are far below 1/8 of a 64 MiB budget, so full, and a
// prompt leaving the conversation 30 tokens back keeps its prefix; at ctx
// 65536 with a budget of 8 x the extra rows less one byte, rings, and at
// exactly 8 x, full.
TEST(SessionSlidingWindow, AutoIsFullWhenItFitsAnEighthOfTheBudget) {
  spill_sampling greedy;
  spill_sampling_default(&greedy);
  spill_config cfg;
  spill_config_default(&cfg);
  ASSERT_EQ(cfg.swa_kv, SPILL_SWA_KV_AUTO);
  cfg.ctx = 256;
  cfg.prefill_chunk = 5;
  cfg.budget_bytes = 64ull << 20;
  spill_err e = {};
  spill_engine *a = nullptr;
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &a, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_plan(a)->swa_full_extra, 2u * (256 - 12) * 256);
  EXPECT_EQ(spill_engine_plan(a)->swa_kv, SPILL_SWA_KV_FULL);
  char v[16];
  ASSERT_EQ(spill_config_get(spill_engine_config(a), "swa_kv", v, sizeof v, &e), SPILL_OK) << e.msg;
  EXPECT_STREQ(v, "full");
  const std::vector<int> p1 = Tokens(a, "A sliding window sees eight tokens; this prompt is longer.", 1);
  RunTurn(a, p1, 10, greedy, SPILL_GEN_REUSE);
  const std::vector<int> held = Held(a);
  std::vector<int> p(held.begin(), held.end() - 30);
  const std::vector<int> more = Tokens(a, " Elsewhere.", 0);
  p.insert(p.end(), more.begin(), more.end());
  const Turn ar = RunTurn(a, p, 5, greedy, SPILL_GEN_REUSE);
  EXPECT_EQ(ar.st.tokens_cached, (int)held.size() - 30);
  spill_engine_close(a);

  const uint64_t row = 2 * 2 * 16 * 4; /* keys and values of a position */
  cfg.ctx = 65536;
  const uint64_t extra = 2 * (65536 - (8 - 1 + 5)) * row; /* 2 sliding layers */
  spill_engine *b = nullptr;
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &b, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_plan(b)->swa_full_extra, extra);
  const uint64_t budget = 8 * extra - 1;
  spill_engine_close(b);
  cfg.budget_bytes = budget;
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &b, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_plan(b)->swa_kv, SPILL_SWA_KV_RING);
  EXPECT_EQ(spill_engine_plan(b)->budget, budget);
  spill_engine_close(b);
  cfg.budget_bytes = budget + 1; /* exactly 8 x: full */
  ASSERT_EQ(spill_engine_open(Nano("gqa-swa").c_str(), &cfg, &b, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_plan(b)->swa_kv, SPILL_SWA_KV_FULL);
  spill_engine_close(b);
}

}  // namespace
