// engine/spill_engine_tok_test.cc: a model directory holding a
// tokenizer.json speaks through it (spill_tokenize, spill_token_to_text,
// spill_generate's streamed text); so does one holding tokenizer.gguf (what
// `spill import` writes from a GGUF), its chat template included, and no
// other *.gguf beside it; one without keeps the byte tokenizer; a tokenizer
// larger than the model's vocabulary is refused at open.
#include <gtest/gtest.h>

#include <algorithm>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/spill.h"
#include "engine/tok/tok_test_util.h"
#include "research/gen/spill_gen.h"

namespace {

std::string NanoWithTokenizer(const std::string &name, const std::string &json) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/" + name;
  spill_gen_request r = {};
  r.preset = "nano";
  spill_err e = {};
  EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  if (!json.empty()) std::ofstream(d + "/tokenizer.json") << json;
  return d;
}

// A tokenizer-only GGUF v3 (tokenizer.ggml.*, as `spill import` writes
// DST/tokenizer.gguf): the 256 GPT-2 byte symbols, plus the merges
// "h e", "l l", "he ll", "hell o" (ids 256..259) when merges is set.
void PutU32(std::string &s, uint32_t v) { s.append(reinterpret_cast<const char *>(&v), 4); }
void PutU64(std::string &s, uint64_t v) { s.append(reinterpret_cast<const char *>(&v), 8); }
void PutStr(std::string &s, const std::string &v) {
  PutU64(s, v.size());
  s += v;
}
std::string ByteSymbol(int b) {
  auto printable = [](int c) {
    return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
  };
  unsigned cp = (unsigned)b;
  if (!printable(b)) {
    cp = 256;
    for (int c = 0; c < b; c++) cp += !printable(c);
  }
  if (cp < 0x80) return std::string(1, (char)cp);
  return std::string{(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F))};
}
void WriteTokenizerGguf(const std::string &path, bool merges, const std::string &chat_template) {
  std::vector<std::string> toks, mg;
  for (int b = 0; b < 256; b++) toks.push_back(ByteSymbol(b));
  if (merges) {
    mg = {"h e", "l l", "he ll", "hell o"};
    for (const char *t : {"he", "ll", "hell", "hello"}) toks.push_back(t);
  }
  std::string kv;
  uint64_t n_kv = 0;
  auto str = [&](const std::string &k, const std::string &v) {
    PutStr(kv, k), PutU32(kv, 8), PutStr(kv, v), n_kv++;
  };
  auto strs = [&](const std::string &k, const std::vector<std::string> &v) {
    PutStr(kv, k), PutU32(kv, 9), PutU32(kv, 8), PutU64(kv, v.size());
    for (const auto &x : v) PutStr(kv, x);
    n_kv++;
  };
  str("general.architecture", "tokenizer-only");
  str("tokenizer.ggml.model", "gpt2");
  str("tokenizer.ggml.pre", "gpt-2");
  strs("tokenizer.ggml.tokens", toks);
  strs("tokenizer.ggml.merges", mg);
  PutStr(kv, "tokenizer.ggml.token_type"), PutU32(kv, 9), PutU32(kv, 5), PutU64(kv, toks.size());
  for (size_t i = 0; i < toks.size(); i++) PutU32(kv, 1);
  n_kv++;
  PutStr(kv, "tokenizer.ggml.eos_token_id"), PutU32(kv, 4), PutU32(kv, 10), n_kv++;
  if (!chat_template.empty()) str("tokenizer.chat_template", chat_template);
  std::string f;
  PutU32(f, 0x46554747u), PutU32(f, 3), PutU64(f, 0), PutU64(f, n_kv);
  f += kv;
  f.resize((f.size() + 31) / 32 * 32, '\0');  // the (empty) data section is aligned
  std::ofstream(path, std::ios::binary) << f;
}

int OnToken(void *user, int token, const char *text, const spill_run_stats *) {
  auto *v = static_cast<std::pair<std::vector<int32_t>, std::string> *>(user);
  v->first.push_back(token);
  v->second += text;
  return 0;
}

TEST(EngineTokenizerTest, ModelDirectoryTokenizerIsUsed) {
  std::string d = NanoWithTokenizer("nano-tok", tok_test::ByteLevelJson("null", false));
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 64;
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(d.c_str(), &cfg, &eng, &e), SPILL_OK) << e.msg;
  ASSERT_NE(spill_engine_tokenizer(eng), nullptr);
  int toks[16], n = 0;
  ASSERT_EQ(spill_tokenize(eng, "hello<|end|> w", 0, toks, 16, &n, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(std::vector<int>(toks, toks + n), (std::vector<int>{260, 262, 259}));
  char buf[32];
  EXPECT_EQ(spill_token_to_text(eng, 258, buf, sizeof buf), 4);
  EXPECT_STREQ(buf, "hell");
  // generated text arrives as whole characters; it equals the decode of the
  // generated ids without special tokens (less a trailing partial character)
  std::pair<std::vector<int32_t>, std::string> got;
  spill_sampling s = {};
  ASSERT_EQ(spill_generate(eng, toks, n, 12, &s, OnToken, &got, nullptr, nullptr, &e), SPILL_OK)
      << e.msg;
  ASSERT_FALSE(got.first.empty());
  // the random model may sample ids beyond the tokenizer (vocabulary padding):
  // they print nothing
  std::vector<int32_t> real;
  for (int32_t id : got.first)
    if (spill_tok_piece(spill_engine_tokenizer(eng), id, nullptr)) real.push_back(id);
  char *dec = nullptr;
  size_t dl = 0;
  ASSERT_EQ(spill_tok_decode(spill_engine_tokenizer(eng), real.data(), real.size(), 1, &dec, &dl,
                             &e),
            SPILL_OK);
  std::string full(dec, dl);
  free(dec);
  // the token callback hands over C strings: a generated NUL byte (id 0) cannot
  // pass through it, so it is compared without NULs
  full.erase(std::remove(full.begin(), full.end(), '\0'), full.end());
  EXPECT_EQ(full.compare(0, got.second.size(), got.second), 0);
  EXPECT_LE(full.size() - got.second.size(), 3u);
  spill_engine_close(eng);
}

TEST(EngineTokenizerTest, NoTokenizerKeepsBytesAndTooLargeIsRefused) {
  std::string d = NanoWithTokenizer("nano-bytes", "");
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 64;
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(d.c_str(), &cfg, &eng, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_engine_tokenizer(eng), nullptr);
  int toks[8], n = 0;
  ASSERT_EQ(spill_tokenize(eng, "hi", 0, toks, 8, &n, &e), SPILL_OK);
  EXPECT_EQ(std::vector<int>(toks, toks + n), (std::vector<int>{'h', 'i'}));
  spill_engine_close(eng);
  // nano's vocabulary is 320: a tokenizer with id 400 does not fit
  std::string big = tok_test::ByteLevelJson("null", false);
  big.replace(big.find("\"id\":263"), 8, "\"id\":400");
  std::string d2 = NanoWithTokenizer("nano-bigtok", big);
  EXPECT_EQ(spill_engine_open(d2.c_str(), &cfg, &eng, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("vocabulary"), std::string::npos) << e.msg;
}

TEST(EngineTokenizerTest, ImportedGgufTokenizerIsUsed) {
  // what `spill import X.gguf` leaves: the model plus tokenizer.gguf; a stray
  // GGUF copied beside it (no merges) must not be taken
  std::string d = NanoWithTokenizer("nano-ggtok", "");
  const std::string tmpl = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}";
  WriteTokenizerGguf(d + "/tokenizer.gguf", true, tmpl);
  WriteTokenizerGguf(d + "/aaa.gguf", false, "");
  WriteTokenizerGguf(d + "/zzz.gguf", false, "");
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.ctx = 64;
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(d.c_str(), &cfg, &eng, &e), SPILL_OK) << e.msg;
  ASSERT_NE(spill_engine_tokenizer(eng), nullptr);
  int toks[16], n = 0;
  ASSERT_EQ(spill_tokenize(eng, "hello hi", 1, toks, 16, &n, &e), SPILL_OK) << e.msg;
  // the same ids as the tokenizer.gguf file loaded on its own (spill tokenize)
  spill_tok *t = nullptr;
  ASSERT_EQ(spill_tok_load((d + "/tokenizer.gguf").c_str(), &t, &e), SPILL_OK) << e.msg;
  spill_tok_ids ids = {};
  ASSERT_EQ(spill_tok_encode(t, "hello hi", 8, SPILL_TOK_SPECIAL | SPILL_TOK_ADD_BOS, &ids, &e),
            SPILL_OK);
  EXPECT_EQ(std::vector<int>(toks, toks + n), std::vector<int>(ids.ids, ids.ids + ids.n));
  EXPECT_EQ(std::vector<int>(toks, toks + n), (std::vector<int>{259, ' ', 'h', 'i'}));
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
  ASSERT_NE(spill_tok_chat_template(spill_engine_tokenizer(eng)), nullptr);
  EXPECT_EQ(std::string(spill_tok_chat_template(spill_engine_tokenizer(eng))), tmpl);
  spill_engine_close(eng);
  // the directory form (spill tokenize DIR) takes tokenizer.gguf too
  ASSERT_EQ(spill_tok_load(d.c_str(), &t, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_tok_encode(t, "hello", 5, 0, &ids, &e), SPILL_OK);
  EXPECT_EQ(std::vector<int>(ids.ids, ids.ids + ids.n), (std::vector<int>{259}));
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
}

}  // namespace
