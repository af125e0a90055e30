// engine/spill_engine_tok_test.cc: a model directory holding a
// tokenizer.json speaks through it (spill_tokenize, spill_token_to_text,
// spill_generate's streamed text); one without keeps the byte tokenizer; a
// tokenizer larger than the model's vocabulary is refused at open.
#include <gtest/gtest.h>

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

}  // namespace
