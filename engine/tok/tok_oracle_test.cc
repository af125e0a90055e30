// engine/tok/tok_oracle_test.cc: our tokenizers against the reference ones
// on npm (transformers.js via @lenml/tokenizers, js-tiktoken), run under
// node by tools/tok/oracle.js: identical ids for 100% of the documents and
// decode(ids) == the reference's decode, and decode(encode(x)) == the
// normalised x wherever the reference round-trips.
//
// The npm packages live in the git-ignored cache/npm (./lab deps installs
// them); ./lab test passes its path as SPILL_TOK_NPM. Without it (or without
// node) the test skips with the reason printed. The corpus is small so the
// test stays fast: the hand-written edge cases below (every script, emoji
// and ZWJ, whitespace and digit runs, special-token lookalikes, invalid
// UTF-8) plus slices of /usr/share/common-licenses. The 5 MB corpus runs
// as tools/tok/oracle_corpus.sh. gptoss: gpt-oss's o200k_harmony as its
// checkpoint ships it (tools/tok/gptoss_tokenizer.js writes the files from
// js-tiktoken's ranks) and as the GGUF (pre gpt-4o), against js-tiktoken
// with harmony's special tokens. qwen35: Qwen3's vocabulary with Qwen3.5's
// split (tools/tok/qwen35_tokenizer.js), as tokenizer.json and as the GGUF
// (pre qwen35), against transformers.js loading the same tokenizer.json.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tok/spill_tok.h"
#include "engine/tok/tok_corpus_test_util.h"

namespace {

std::string NpmDir() {
  const char *d = getenv("SPILL_TOK_NPM");
  return d ? d : "";
}

bool Exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string OracleScript() {
  const char *srcdir = getenv("TEST_SRCDIR");
  const char *ws = getenv("TEST_WORKSPACE");
  if (srcdir && ws) {
    std::string p = std::string(srcdir) + "/" + ws + "/tools/tok/oracle.js";
    if (Exists(p)) return p;
  }
  return "tools/tok/oracle.js";
}

// Runs the oracle; returns one (ids, normalised text) per document.
struct Expect {
  std::vector<int32_t> ids;
  std::string norm, dec;
};

bool RunOracle(const std::string &family, const std::string &corpus, std::vector<Expect> *out,
               std::string *why, const std::string &extra = "") {
  std::string cmd = "node '" + OracleScript() + "' '" + NpmDir() + "' " + family + " '" + corpus +
                    "'" + (extra.empty() ? "" : " '" + extra + "'");
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) {
    *why = "popen failed";
    return false;
  }
  std::string all;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) all.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) {
    *why = "oracle exited with " + std::to_string(rc);
    return false;
  }
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line)) {
    Expect e;
    size_t a = line.find("\"ids\":[");
    size_t b = line.find(']', a);
    size_t c = line.find("\"norm\":\"");
    if (a == std::string::npos || b == std::string::npos || c == std::string::npos) {
      *why = "bad oracle line";
      return false;
    }
    const char *s = line.c_str() + a + 7;
    while (*s && *s != ']') {
      e.ids.push_back((int32_t)strtol(s, (char **)&s, 10));
      if (*s == ',') s++;
    }
    size_t d = line.find('"', c + 8);
    e.norm = tok_test::Base64Decode(line.substr(c + 8, d - c - 8));
    size_t f = line.find("\"dec\":\"");
    if (f == std::string::npos) {
      *why = "oracle line without dec";
      return false;
    }
    size_t g = line.find('"', f + 7);
    e.dec = tok_test::Base64Decode(line.substr(f + 7, g - f - 7));
    out->push_back(std::move(e));
  }
  return true;
}

// qwen35: the corpus must be one where the split matters: the reference
// with Qwen2's split (qwen3: the same vocabulary) gives other ids for some
// documents (Thai and other text with combining marks), so a spill that
// ignored tokenizer.json's regex would not match the qwen35 reference.
void ExpectTheSplitMatters(const std::string &corpus, const std::vector<Expect> &want) {
  std::vector<Expect> q2;
  std::string why;
  ASSERT_TRUE(RunOracle("qwen3", corpus, &q2, &why)) << why;
  ASSERT_EQ(q2.size(), want.size());
  size_t split_matters = 0;
  for (size_t i = 0; i < want.size(); i++) split_matters += q2[i].ids != want[i].ids;
  EXPECT_GT(split_matters, 0u) << "no document tells Qwen3.5's split from Qwen2's";
  printf("qwen35: %zu of %zu documents have other ids under Qwen2's split\n", split_matters,
         want.size());
}

class OracleTest : public ::testing::TestWithParam<const char *> {};

TEST_P(OracleTest, IdsAndRoundTripMatchTheReference) {
  std::string family = GetParam();
  std::string npm = NpmDir();
  if (npm.empty() || !Exists(npm + "/node_modules")) {
    GTEST_SKIP() << "SPILL_TOK_NPM is not set or has no node_modules (./lab deps installs the "
                    "npm oracle into cache/npm; ./lab test passes it)";
  }
  if (system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  std::string src, extra;
  std::string tools = OracleScript().substr(0, OracleScript().rfind('/'));
  if (family == "gptoss") {
    // gpt-oss's checkpoint files (tokenizer.json + tokenizer_config.json),
    // written from js-tiktoken's o200k_base ranks and the harmony specials
    src = std::string(getenv("TEST_TMPDIR")) + "/gptoss";
    std::string cmd = "node '" + tools + "/gptoss_tokenizer.js' '" + npm + "' '" + src + "' >/dev/null";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    extra = src + "/specials.json";
  } else if (family == "qwen35") {
    // Qwen3's vocabulary with Qwen3.5's split (combining marks kept in
    // words), loaded by spill through the HF tokenizer.json path and by the
    // reference through @lenml/tokenizers
    src = std::string(getenv("TEST_TMPDIR")) + "/qwen35";
    std::string cmd = "node '" + tools + "/qwen35_tokenizer.js' '" + npm + "' '" + src + "'";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    extra = src;
  } else if (family == "o200k" || family == "cl100k") {
    src = std::string(getenv("TEST_TMPDIR")) + "/" + family + "_base.tiktoken";
    std::string cmd = "node '" + OracleScript().substr(0, OracleScript().rfind('/')) +
                      "/jstiktoken_ranks.js' '" + npm + "' " + family + " '" + src + "'";
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
  } else {
    src = npm + "/node_modules/@lenml/tokenizer-" + family + "/models";
  }
  spill_tok *t = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_tok_load(src.c_str(), &t, &e), SPILL_OK) << e.msg;
  std::vector<std::string> docs = tok_test::SmallCorpus();
  std::string corpus = std::string(getenv("TEST_TMPDIR")) + "/corpus-" + family + ".bin";
  tok_test::WriteCorpus(corpus, docs);
  std::vector<Expect> want;
  std::string why;
  ASSERT_TRUE(RunOracle(family, corpus, &want, &why, extra)) << why;
  ASSERT_EQ(want.size(), docs.size());
  size_t same = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    spill_tok_ids ids{};
    ASSERT_EQ(spill_tok_encode(t, docs[i].data(), docs[i].size(), SPILL_TOK_SPECIAL, &ids, &e),
              SPILL_OK)
        << e.msg;
    std::vector<int32_t> got(ids.ids, ids.ids + ids.n);
    if (got == want[i].ids) same++;
    else {
      size_t k = 0;
      while (k < got.size() && k < want[i].ids.size() && got[k] == want[i].ids[k]) k++;
      ADD_FAILURE() << family << " doc " << i << " (" << docs[i].size() << " bytes, \""
                    << docs[i].substr(0, 60) << "\"): ids differ at " << k << " of "
                    << want[i].ids.size() << " (ours " << (k < got.size() ? got[k] : -1)
                    << ", reference " << (k < want[i].ids.size() ? want[i].ids[k] : -1) << ")";
    }
    char *dec = nullptr;
    size_t dlen = 0;
    ASSERT_EQ(spill_tok_decode(t, ids.ids, ids.n, 0, &dec, &dlen, &e), SPILL_OK) << e.msg;
    // decode equals the reference's decode of the same ids; and where the
    // reference round-trips (everything but SentencePiece text holding U+2581
    // or special tokens), so do we: decode(encode(x)) == normalize(x).
    EXPECT_EQ(std::string(dec, dlen), want[i].dec) << family << " doc " << i << " decode";
    if (want[i].dec == want[i].norm)
      EXPECT_EQ(std::string(dec, dlen), want[i].norm) << family << " doc " << i << " round trip";
    else
      EXPECT_EQ(family, "llama2") << "doc " << i << ": the reference does not round-trip";
    char *norm = nullptr;
    size_t nlen = 0;
    ASSERT_EQ(spill_tok_normalize(t, docs[i].data(), docs[i].size(), &norm, &nlen, &e), SPILL_OK);
    EXPECT_EQ(std::string(norm, nlen), want[i].norm) << family << " doc " << i << " normalize";
    free(norm);
    free(dec);
    spill_tok_ids_free(&ids);
  }
  printf("%s: %zu of %zu documents identical\n", family.c_str(), same, docs.size());
  spill_tok_free(t);
  if (family == "qwen35") ExpectTheSplitMatters(corpus, want);

  // The same vocabulary as a GGUF (tokenizer.ggml.*, written the way
  // llama.cpp's converter does) must tokenize identically.
  const char *pre = family == "qwen3" ? "qwen2" : family == "qwen35" ? "qwen35"
                    : family == "deepseek_v3" ? "deepseek-v3"
                    : family == "llama3" ? "llama-bpe" : family == "gptoss" ? "gpt-4o" : nullptr;
  if (!pre) return;
  std::string gguf = std::string(getenv("TEST_TMPDIR")) + "/" + family + ".gguf";
  std::string script = tools + "/hf_to_gguf_tokenizer.py";
  std::string cmd = "/usr/bin/python3 '" + script + "' '" + src + "/tokenizer.json' " + pre + " '" + gguf + "'";
  ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
  spill_tok *g = nullptr;
  ASSERT_EQ(spill_tok_load(gguf.c_str(), &g, &e), SPILL_OK) << e.msg;
  size_t gsame = 0;
  for (size_t i = 0; i < docs.size(); i++) {
    spill_tok_ids ids{};
    ASSERT_EQ(spill_tok_encode(g, docs[i].data(), docs[i].size(), SPILL_TOK_SPECIAL, &ids, &e),
              SPILL_OK)
        << e.msg;
    if (std::vector<int32_t>(ids.ids, ids.ids + ids.n) == want[i].ids) gsame++;
    else ADD_FAILURE() << family << " GGUF doc " << i << ": ids differ from the reference";
    spill_tok_ids_free(&ids);
  }
  printf("%s (GGUF, pre %s): %zu of %zu documents identical\n", family.c_str(), pre, gsame,
         docs.size());
  spill_tok_free(g);
}

INSTANTIATE_TEST_SUITE_P(Families, OracleTest,
                         ::testing::Values("qwen3", "qwen35", "deepseek_v3", "llama3", "llama2",
                                           "o200k", "cl100k", "gptoss"));

}  // namespace
