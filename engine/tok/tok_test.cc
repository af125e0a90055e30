// engine/tok/tok_test.cc: unit tests of engine/tok on tiny hand-made
// tokenizers built in memory (no vocabulary files): BPE merge order, added
// tokens, NFC, UTF-8 repair, SentencePiece byte fallback, tiktoken ranks,
// streaming decode, and clear errors on bad or unsupported input.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/tok/spill_tok.h"
#include "engine/tok/tok_test_util.h"

extern "C" {
#include "engine/tok/tok_internal.h"
}

namespace {

spill_tok *Load(const std::string &json) {
  spill_tok *t = nullptr;
  spill_err e{};
  EXPECT_EQ(spill_tok_load_hf(json.data(), json.size(), nullptr, 0, &t, &e), SPILL_OK) << e.msg;
  return t;
}

std::vector<int32_t> Enc(spill_tok *t, const std::string &s, unsigned flags = SPILL_TOK_SPECIAL) {
  spill_tok_ids ids{};
  spill_err e{};
  EXPECT_EQ(spill_tok_encode(t, s.data(), s.size(), flags, &ids, &e), SPILL_OK) << e.msg;
  std::vector<int32_t> v(ids.ids, ids.ids + ids.n);
  spill_tok_ids_free(&ids);
  return v;
}

std::string Dec(spill_tok *t, const std::vector<int32_t> &ids, int skip = 0) {
  char *out = nullptr;
  size_t n = 0;
  spill_err e{};
  EXPECT_EQ(spill_tok_decode(t, ids.data(), ids.size(), skip, &out, &n, &e), SPILL_OK) << e.msg;
  std::string s(out, n);
  free(out);
  return s;
}

TEST(TokBpeTest, MergesByRankLeftmostFirst) {
  spill_tok *t = Load(tok_test::ByteLevelJson("null", false));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Enc(t, "hello"), (std::vector<int32_t>{260}));
  // " w" -> Ġw; "hellllo": he, ll, ll, o -> hell + lo? rank: "he ll" (2) before "l o" (5)
  EXPECT_EQ(Enc(t, "hellllo w"), (std::vector<int32_t>{258, 257, 'o', 259}));
  EXPECT_EQ(Dec(t, Enc(t, "hellllo w")), "hellllo w");
  EXPECT_STREQ(spill_tok_kind(t), "bpe-bytelevel");
  spill_tok_free(t);
}

TEST(TokBpeTest, IgnoreMergesTakesWholeWords) {
  // "hello" is in the vocabulary; with ignore_merges a word that is a token
  // is emitted whole even when the merges would not reach it ("lo" alone).
  spill_tok *t = Load(tok_test::ByteLevelJson("null", true));
  EXPECT_EQ(Enc(t, "lo"), (std::vector<int32_t>{261}));
  EXPECT_EQ(Enc(t, "hello"), (std::vector<int32_t>{260}));
  spill_tok_free(t);
}

TEST(TokBpeTest, LongPieceUsesTheHeapAndAgreesWithTheScan) {
  spill_tok *t = Load(tok_test::ByteLevelJson("null", false));
  // 40 x "hello" in one piece (> 32 symbols: heap path) vs one at a time.
  std::string s;
  for (int i = 0; i < 40; i++) s += "hello";
  std::vector<int32_t> want(40, 260);
  EXPECT_EQ(Enc(t, s), want);
  std::string l(101, 'l');
  std::vector<int32_t> w2(50, 257);
  w2.push_back('l');
  EXPECT_EQ(Enc(t, l), w2);
  spill_tok_free(t);
}

TEST(TokBpeTest, AddedTokensMatchBeforeSplittingAndSpecialsCanBeText) {
  spill_tok *t = Load(tok_test::ByteLevelJson("null", false));
  EXPECT_EQ(Enc(t, "hello<|end|>"), (std::vector<int32_t>{260, 262}));
  // --no-special: the special one is text, the non-special added one still matches
  std::vector<int32_t> v = Enc(t, "<|end|><think>", 0);
  EXPECT_EQ(v.back(), 263);
  EXPECT_GT(v.size(), 2u);
  EXPECT_EQ(Dec(t, {260, 262}, 1), "hello");
  EXPECT_EQ(Dec(t, {260, 262}, 0), "hello<|end|>");
  EXPECT_EQ(spill_tok_find(t, "<|end|>", 7), 262);
  EXPECT_TRUE(spill_tok_is_special(t, 262));
  EXPECT_FALSE(spill_tok_is_special(t, 263));
  spill_tok_free(t);
}

TEST(TokBpeTest, InvalidUtf8BecomesReplacementCharacters) {
  spill_tok *t = Load(tok_test::ByteLevelJson("null", false));
  std::string bad = "a\xff" "b\xe2\x82" "c";
  EXPECT_EQ(Dec(t, Enc(t, bad)), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c");
  spill_tok_free(t);
}

TEST(TokBpeTest, NfcNormaliserComposes) {
  spill_tok *t = Load(tok_test::ByteLevelJson("{\"type\":\"NFC\"}", false));
  EXPECT_EQ(Dec(t, Enc(t, "e\xcc\x81")), "\xc3\xa9");
  char *n = nullptr;
  size_t nl = 0;
  spill_err e{};
  ASSERT_EQ(spill_tok_normalize(t, "A\xcc\x8a", 3, &n, &nl, &e), SPILL_OK);
  EXPECT_EQ(std::string(n, nl), "\xc3\x85");
  free(n);
  spill_tok_free(t);
}

TEST(TokStreamTest, NeverEmitsHalfACharacter) {
  spill_tok *t = Load(tok_test::ByteLevelJson("null", false));
  // "€" = E2 82 AC as three byte tokens
  std::vector<int32_t> ids = Enc(t, "x\xe2\x82\xac" "y");
  ASSERT_EQ(ids.size(), 5u);
  spill_tok_stream st{};
  char buf[256];
  spill_err e{};
  std::string got;
  std::vector<int> sizes;
  for (int32_t id : ids) {
    int n = spill_tok_stream_push(t, &st, id, 0, buf, sizeof buf, &e);
    ASSERT_GE(n, 0) << e.msg;
    sizes.push_back(n);
    got.append(buf, (size_t)n);
  }
  EXPECT_EQ(sizes, (std::vector<int>{1, 0, 0, 3, 1}));
  EXPECT_EQ(spill_tok_stream_flush(&st, buf, sizeof buf), 0);
  EXPECT_EQ(got, "x\xe2\x82\xac" "y");
  // a lead byte that never completes is released when the next character starts
  spill_tok_stream st2{};
  int n = spill_tok_stream_push(t, &st2, 0xE2, 0, buf, sizeof buf, &e);
  EXPECT_EQ(n, 0);
  n = spill_tok_stream_push(t, &st2, 'a', 0, buf, sizeof buf, &e);
  EXPECT_EQ(std::string(buf, (size_t)n), "\xe2" "a");
  spill_tok_free(t);
}

TEST(TokSentencePieceTest, ByteFallbackPrependAndStrip) {
  std::string json =
      "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":"
      "\"<s>\",\"special\":true}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":"
      "\"Prepend\",\"prepend\":\"\xE2\x96\x81\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
      "\"content\":\"\xE2\x96\x81\"}]},\"pre_tokenizer\":null,\"post_processor\":{\"type\":"
      "\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{"
      "\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
      "\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
      "\"Replace\",\"pattern\":{\"String\":\"\xE2\x96\x81\"},\"content\":\" \"},{\"type\":"
      "\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,"
      "\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
      "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,";
  for (int b = 0; b < 256; b++) {
    char name[16];
    snprintf(name, sizeof name, "\"<0x%02X>\":%d,", b, 2 + b);
    json += name;
  }
  json += "\"\xE2\x96\x81\":258,\"h\":259,\"i\":260,\"hi\":261,\"\xE2\x96\x81hi\":262},\"merges\":[\"h i\","
          "\"\xE2\x96\x81 hi\"]}}";
  spill_tok *t = Load(json);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(spill_tok_kind(t), "bpe-sentencepiece");
  EXPECT_EQ(Enc(t, "hi hi"), (std::vector<int32_t>{262, 262}));
  EXPECT_EQ(Enc(t, "hi", SPILL_TOK_SPECIAL | SPILL_TOK_ADD_BOS), (std::vector<int32_t>{1, 262}));
  // "é" is not in the vocabulary: two byte tokens C3 A9
  EXPECT_EQ(Enc(t, "\xc3\xa9"), (std::vector<int32_t>{258, 2 + 0xC3, 2 + 0xA9}));
  EXPECT_EQ(Dec(t, Enc(t, "hi \xc3\xa9 hi")), "hi \xc3\xa9 hi");
  EXPECT_EQ(spill_tok_bos(t), 1);
  // streaming strips the one leading space only once (fuzz regression: " b")
  std::vector<int32_t> ids = Enc(t, " hi");
  spill_tok_stream st{};
  std::string streamed;
  char buf[128];
  spill_err e{};
  for (int32_t id : ids) {
    int k = spill_tok_stream_push(t, &st, id, 0, buf, sizeof buf, &e);
    ASSERT_GE(k, 0);
    streamed.append(buf, (size_t)k);
  }
  EXPECT_EQ(streamed, Dec(t, ids));
  EXPECT_EQ(streamed, " hi");
  spill_tok_free(t);
}

TEST(TokTiktokenTest, RanksMergeByTheConcatenationsRank) {
  // bytes a=0 b=1 c=2, "ab"=3, "bc"=4, "abc"=5: "abc" is whole-word first;
  // "abcb": ab(3) < bc(4) -> ab, then ab+c -> abc(5); b stays.
  std::string ranks = "YQ== 0\nYg== 1\nYw== 2\nYWI= 3\nYmM= 4\nYWJj 5\n";
  const char *sp[] = {"<|eot|>"};
  int sid[] = {9};
  spill_tok *t = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_tok_load_tiktoken(ranks.data(), ranks.size(), "\\p{L}+|\\s+", sp, sid, 1, &t,
                                    &e),
            SPILL_OK)
      << e.msg;
  EXPECT_EQ(Enc(t, "abc"), (std::vector<int32_t>{5}));
  EXPECT_EQ(Enc(t, "abcb"), (std::vector<int32_t>{5, 1}));  // ab, then ab+c = abc
  EXPECT_EQ(Enc(t, "bc<|eot|>"), (std::vector<int32_t>{4, 9}));
  EXPECT_EQ(spill_tok_vocab_size(t), 10);
  spill_tok_free(t);
}

std::string B64(const std::string &in) {
  static const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
    o += a[v >> 18]; o += a[(v >> 12) & 63]; o += a[(v >> 6) & 63]; o += a[v & 63];
  }
  if (i + 1 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16;
    o += a[v >> 18]; o += a[(v >> 12) & 63]; o += "==";
  } else if (i + 2 == in.size()) {
    unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
    o += a[v >> 18]; o += a[(v >> 12) & 63]; o += a[(v >> 6) & 63]; o += '=';
  }
  return o;
}

TEST(TokTiktokenTest, KimiPatternSplitsHanFromOtherLetters) {
  // ranks: the 256 bytes, then "文a" (a token crossing the Han/Latin split)
  // and "文字" (Han only): the Kimi pattern must never produce "文a".
  std::string ranks;
  for (int b = 0; b < 256; b++) ranks += B64(std::string(1, (char)b)) + " " + std::to_string(b) + "\n";
  ranks += B64("\xe6\x96\x87" "a") + " 256\n";
  ranks += B64("\xe6\x96\x87\xe5\xad\x97") + " 257\n";
  for (const char *pat : {SPILL_TOK_PAT_KIMI, "\\p{L}+"}) {
    spill_tok *t = nullptr;
    spill_err e{};
    ASSERT_EQ(spill_tok_load_tiktoken(ranks.data(), ranks.size(), pat, nullptr, nullptr, 0, &t, &e),
              SPILL_OK)
        << e.msg;
    std::vector<int32_t> ids = Enc(t, "\xe6\x96\x87" "a");
    std::vector<int32_t> han = Enc(t, "\xe6\x96\x87\xe5\xad\x97");
    if (pat == SPILL_TOK_PAT_KIMI) {
      EXPECT_EQ(ids, (std::vector<int32_t>{0xe6, 0x96, 0x87, 'a'}));  // split: no 256
    } else {
      EXPECT_EQ(ids, (std::vector<int32_t>{256}));  // a plain letter run merges across
    }
    EXPECT_EQ(han, (std::vector<int32_t>{257}));
    spill_tok_free(t);
  }
}

// The loaders' byte-alphabet decoding (arithmetic) against the table
// definition (tok_byte_to_cp / tok_cp_to_byte), for every code point it can see.
TEST(TokByteMapTest, UnmapAgreesWithTheByteMap) {
  for (uint32_t cp = 0; cp < 0x800; cp++) {
    char u[2];
    size_t n = 0;
    if (cp < 0x80) u[n++] = (char)cp;
    else { u[n++] = (char)(0xC0 | cp >> 6); u[n++] = (char)(0x80 | (cp & 0x3F)); }
    char out[2];
    long got = tok_unmap_bytelevel(u, n, out);
    int want = tok_cp_to_byte(cp);
    if (want < 0) {
      EXPECT_EQ(got, -1) << "cp " << cp;
    } else {
      ASSERT_EQ(got, 1) << "cp " << cp;
      EXPECT_EQ((unsigned char)out[0], want) << "cp " << cp;
      EXPECT_EQ(tok_byte_to_cp((unsigned)want), cp);
    }
  }
}

// A rank file handed over without a terminating NUL (the public call takes
// a length): nothing past it is read (ASan would see the over-read).
TEST(TokTiktokenTest, RankFileNeedsNoTerminator) {
  const char text[] = "YQ== 0\nYg== 1\nYWI= 7";
  std::vector<char> ranks(text, text + sizeof text - 1);
  spill_tok *t = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_tok_load_tiktoken(ranks.data(), ranks.size(), nullptr, nullptr, nullptr, 0, &t, &e),
            SPILL_OK)
      << e.msg;
  EXPECT_EQ(spill_tok_vocab_size(t), 8);
  EXPECT_EQ(spill_tok_find(t, "ab", 2), 7);
  spill_tok_free(t);
}

void PutFile(const std::string &path, const std::string &text) {
  FILE *f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
}

TEST(TokLocateTest, OneSearchOrderForLoadAndEngine) {
  // tokenizer.json before tiktoken.model before tokenizer.gguf; any other
  // *.gguf only with SPILL_TOK_ANY_GGUF; what is found is what loads.
  const char *tmp = getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/tok_locate";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  char p[4096];
  spill_err e{};
  EXPECT_EQ(spill_tok_locate(dir.c_str(), SPILL_TOK_ANY_GGUF, p, sizeof p, &e), 0);
  EXPECT_STREQ(p, "");
  PutFile(dir + "/model.gguf", "not read");
  EXPECT_EQ(spill_tok_locate(dir.c_str(), 0, p, sizeof p, &e), 0);
  EXPECT_EQ(spill_tok_locate(dir.c_str(), SPILL_TOK_ANY_GGUF, p, sizeof p, &e), 1);
  EXPECT_EQ(std::string(p), dir + "/model.gguf");
  PutFile(dir + "/tokenizer.gguf", "not read");
  EXPECT_EQ(spill_tok_locate(dir.c_str(), SPILL_TOK_ANY_GGUF, p, sizeof p, &e), 1);
  EXPECT_EQ(std::string(p), dir + "/tokenizer.gguf");
  PutFile(dir + "/tiktoken.model", "YQ== 0\n");
  EXPECT_EQ(spill_tok_locate(dir.c_str(), 0, p, sizeof p, &e), 1);
  EXPECT_EQ(std::string(p), dir + "/tiktoken.model");
  PutFile(dir + "/tokenizer.json", tok_test::ByteLevelJson("null", false));
  EXPECT_EQ(spill_tok_locate(dir.c_str(), 0, p, sizeof p, &e), 1);
  EXPECT_EQ(std::string(p), dir + "/tokenizer.json");
  spill_tok *a = nullptr, *b = nullptr;
  ASSERT_EQ(spill_tok_load(dir.c_str(), &a, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_tok_load(p, &b, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(Enc(a, "hello"), (std::vector<int32_t>{260}));
  EXPECT_EQ(Enc(a, "hello"), Enc(b, "hello"));
  spill_tok_free(a);
  spill_tok_free(b);
  char tiny[8];
  EXPECT_EQ(spill_tok_locate(dir.c_str(), 0, tiny, sizeof tiny, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("path too long"), std::string::npos) << e.msg;
}

// Kimi K3's tokenizer as the checkpoint ships it: tiktoken.model (ranks
// only) + tokenizer_config.json (added_tokens_decoder names some of the 256
// slots after the ranks; the rest are <|reserved_token_ID|>, as
// tokenization_kimi.py and llama.cpp's converter make them) + the chat
// template file. Here 256 byte ranks and 4 merges, the XTML specials at
// K3's offsets (K3: [BOS] 163584 = the rank count, <|open|> = +3, ...).
std::string KimiDir(const std::string &name, const std::string &config) {
  const char *tmp = getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  EXPECT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  std::string ranks;
  for (int b = 0; b < 256; b++) ranks += B64(std::string(1, (char)b)) + " " + std::to_string(b) + "\n";
  ranks += B64("me") + " 256\n" + B64("ss") + " 257\n" + B64("mess") + " 258\n" + B64("message") + " 259\n";
  PutFile(dir + "/tiktoken.model", ranks);
  PutFile(dir + "/tokenizer_config.json", config);
  return dir;
}

const char kK3Config[] =
    "{\"added_tokens_decoder\": {"
    "\"260\": {\"content\": \"[BOS]\", \"special\": true},"
    "\"261\": {\"content\": \"[EOS]\", \"special\": true},"
    "\"262\": {\"content\": \"<|end_of_msg|>\", \"special\": true},"
    "\"263\": {\"content\": \"<|open|>\", \"special\": true},"
    "\"264\": {\"content\": \"<|close|>\", \"special\": true},"
    "\"265\": {\"content\": \"<|sep|>\", \"special\": true},"
    "\"515\": {\"content\": \"[PAD]\", \"special\": true},"
    "\"9999\": {\"content\": \"<|outside|>\", \"special\": true}},"
    "\"bos_token\": \"[BOS]\", \"eos_token\": \"[EOS]\", \"pad_token\": \"[PAD]\","
    "\"tokenizer_class\": \"TikTokenTokenizer\"}";

TEST(TokTiktokenTest, KimiK3SpecialsFromTheConfigAndTheReservedSlots) {
  std::string dir = KimiDir("k3tok", kK3Config);
  PutFile(dir + "/chat_template.jinja", "{{ '<|open|>' }}{{ messages[0].content }}");
  spill_tok *t = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_tok_load(dir.c_str(), &t, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_tok_vocab_size(t), 260 + 256);
  struct { const char *text; int32_t id; } named[] = {
      {"[BOS]", 260}, {"[EOS]", 261}, {"<|end_of_msg|>", 262}, {"<|open|>", 263},
      {"<|close|>", 264}, {"<|sep|>", 265}, {"<|reserved_token_266|>", 266}, {"[PAD]", 515}};
  for (const auto &n : named) {
    EXPECT_EQ(spill_tok_find(t, n.text, strlen(n.text)), n.id) << n.text;
    EXPECT_TRUE(spill_tok_is_special(t, n.id)) << n.text;
    EXPECT_EQ(Enc(t, n.text), (std::vector<int32_t>{n.id})) << n.text;
  }
  EXPECT_EQ(spill_tok_find(t, "<|outside|>", 11), -1);  // not one of the 256 slots
  EXPECT_EQ(spill_tok_bos(t), 260);
  EXPECT_EQ(spill_tok_eos(t), 261);
  // an XTML message: the markers are single special tokens; "message" is text
  std::string msg = "<|open|>message role=\"user\"<|sep|>Hi<|close|>message<|sep|><|end_of_msg|>";
  std::vector<int32_t> ids = Enc(t, msg);
  ASSERT_GE(ids.size(), 6u);
  EXPECT_EQ(ids[0], 263);
  EXPECT_EQ(ids[1], 259);  // "message"
  EXPECT_EQ(ids.back(), 262);
  EXPECT_EQ(Dec(t, ids), msg);
  EXPECT_EQ(Dec(t, ids, 1), "message role=\"user\"Himessage");
  // without SPECIAL the markers are text (bytes), and round-trip
  std::vector<int32_t> plain = Enc(t, msg, 0);
  for (int32_t id : plain) EXPECT_LT(id, 260);
  EXPECT_EQ(Dec(t, plain), msg);
  // no BOS added (the config does not ask), the template from chat_template.jinja
  EXPECT_EQ(Enc(t, "me", SPILL_TOK_ADD_BOS), (std::vector<int32_t>{256}));
  ASSERT_NE(spill_tok_chat_template(t), nullptr);
  EXPECT_STREQ(spill_tok_chat_template(t), "{{ '<|open|>' }}{{ messages[0].content }}");
  spill_tok_free(t);
}

TEST(TokTiktokenTest, KimiConfigErrorsAreNamed) {
  struct { const char *config, *needle; } cases[] = {
      {"[1]", "not a JSON object"},
      {"{\"added_tokens_decoder\": [1]}", "added_tokens_decoder is not an object"},
      {"{\"added_tokens_decoder\": {\"x7\": {\"content\": \"a\"}}}", "\"x7\" is not a token id"},
      {"{\"added_tokens_decoder\": {\"261\": {\"special\": true}}}", "[\"261\"] has no content"},
      // the one JSON reading layer (docs/RELIABILITY.md): a repeated key
      {"{\"added_tokens_decoder\": {\"261\": {\"content\": \"a\"}, \"261\": {\"content\": \"b\"}}}",
       "added_tokens_decoder.261: duplicate key"},
  };
  for (const auto &c : cases) {
    std::string dir = KimiDir("k3tok_bad", c.config);
    spill_tok *t = nullptr;
    spill_err e{};
    EXPECT_EQ(spill_tok_load(dir.c_str(), &t, &e), SPILL_E_FORMAT) << c.config;
    EXPECT_NE(std::string(e.msg).find(c.needle), std::string::npos) << c.config << ": " << e.msg;
    EXPECT_EQ(t, nullptr);
  }
  std::string dir = KimiDir("k3tok_tmpl", "{}");
  PutFile(dir + "/chat_template.jinja", std::string("a\xff", 2));
  spill_tok *t = nullptr;
  spill_err e{};
  EXPECT_EQ(spill_tok_load(dir.c_str(), &t, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("chat_template.jinja: not UTF-8"), std::string::npos) << e.msg;
}

TEST(TokErrorsTest, BadInputsGetNamedErrors) {
  spill_tok *t = nullptr;
  spill_err e{};
  EXPECT_EQ(spill_tok_load_hf("{", 1, nullptr, 0, &t, &e), SPILL_E_FORMAT);
  std::string wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
  EXPECT_EQ(spill_tok_load_hf(wp.data(), wp.size(), nullptr, 0, &t, &e), SPILL_E_UNSUPPORTED);
  EXPECT_NE(std::string(e.msg).find("WordPiece"), std::string::npos);
  std::string j = tok_test::ByteLevelJson("{\"type\":\"NFKC\"}", false);
  EXPECT_EQ(spill_tok_load_hf(j.data(), j.size(), nullptr, 0, &t, &e), SPILL_E_UNSUPPORTED);
  EXPECT_NE(std::string(e.msg).find("NFKC"), std::string::npos);
  std::string badmerge = tok_test::ByteLevelJson("null", false);
  badmerge.replace(badmerge.find("\"l o\""), 5, "\"q z9\"");
  EXPECT_EQ(spill_tok_load_hf(badmerge.data(), badmerge.size(), nullptr, 0, &t, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(spill_tok_load_tiktoken("!!! 0\n", 6, nullptr, nullptr, nullptr, 0, &t, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(spill_tok_load("/nonexistent/tokenizer.json", &t, &e), SPILL_E_IO);
  spill_tok *ok = Load(tok_test::ByteLevelJson("null", false));
  EXPECT_EQ(spill_tok_decode(ok, std::vector<int32_t>{99999}.data(), 1, 0, nullptr, nullptr, &e),
            SPILL_E_INVALID_ARG);
  char *out = nullptr;
  EXPECT_EQ(spill_tok_decode(ok, std::vector<int32_t>{99999}.data(), 1, 0, &out, nullptr, &e),
            SPILL_E_RANGE);
  spill_tok_free(ok);
}

// tokenizer.json's scanner keeps the one JSON layer's rules (docs/RELIABILITY.md):
// a repeated member, top-level or in "model" (cJSON kept the first copy,
// transformers the last: another vocabulary or set of added tokens), a NUL in
// a member key ("model\u0000x" read as "model") and a raw control byte in a
// string (Python's json refuses it) are refused by name.
TEST(TokErrorsTest, RepeatedMembersNulKeysAndRawControlBytesAreRefused) {
  const std::string good = tok_test::ByteLevelJson("null", false);
  struct {
    std::string json, needle;
  } cases[] = {
      {"{\"added_tokens\": [], " + good.substr(1), "tokenizer.json: added_tokens: duplicate key"},
      {good.substr(0, good.size() - 1) + ", \"model\": {\"type\": \"BPE\"}}", "tokenizer.json: model: duplicate key"},
      {std::string(good).insert(good.find("\"merges\""), "\"vocab\": {\"a\": 0}, "),
       "tokenizer.json: model.vocab: duplicate key"},
      {std::string(good).insert(good.find("\"vocab\""), "\"merges\": [], "),
       "tokenizer.json: model.merges: duplicate key"},
      {std::string(good).replace(good.find("\"normalizer\""), 12, "\"normalizer\\u0000x\""),
       "member \"normalizer\" holds a NUL"},
      {std::string(good).replace(good.find("\"hello\""), 7, std::string("\"hel\x01lo\"")),
       "a raw control byte inside a string"},
  };
  for (const auto &c : cases) {
    spill_tok *t = nullptr;
    spill_err e{};
    EXPECT_EQ(spill_tok_load_hf(c.json.data(), c.json.size(), nullptr, 0, &t, &e), SPILL_E_FORMAT)
        << c.needle;
    EXPECT_NE(std::string(e.msg).find(c.needle), std::string::npos) << c.needle << ": " << e.msg;
    spill_tok_free(t);
  }
  spill_tok_free(Load(good));
}

// An id is bounded by what the file holds (2 x its entries + 1024), checked
// before the per-id tables are sized: one vocab entry or added token with id
// 16777215 in a few KB made the loaders allocate tables for 16.8M ids
// (issue 26 item 11).
TEST(TokErrorsTest, IdsBoundedByTheFilesEntryCount) {
  spill_tok *t = nullptr;
  spill_err e{};
  std::string j = tok_test::ByteLevelJson("null", false);
  std::string far = j;
  far.replace(far.find("\"lo\":261"), 8, "\"lo\":16777215");
  EXPECT_EQ(spill_tok_load_hf(far.data(), far.size(), nullptr, 0, &t, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("id 16777215 is beyond what 264 entries can number"),
            std::string::npos) << e.msg;
  std::string added = j;
  added.replace(added.find("{\"id\":263"), 9, "{\"id\":9000000");
  EXPECT_EQ(spill_tok_load_hf(added.data(), added.size(), nullptr, 0, &t, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("id 9000000 is beyond"), std::string::npos) << e.msg;
  // holes up to the bound load: 264 entries, largest id 2 x 264 + 1023
  std::string holes = j;
  holes.replace(holes.find("{\"id\":263"), 9, "{\"id\":1551");
  spill_tok *ok = nullptr;
  EXPECT_EQ(spill_tok_load_hf(holes.data(), holes.size(), nullptr, 0, &ok, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_tok_vocab_size(ok), 1552);
  spill_tok_free(ok);
  // tiktoken: a special token's id, and a rank
  const char *sp[] = {"<s>"};
  const int sid[] = {16777215};
  std::string ranks = "IQ== 0\nIg== 1\n";
  EXPECT_EQ(spill_tok_load_tiktoken(ranks.data(), ranks.size(), nullptr, sp, sid, 1, &t, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("id 16777215 is beyond what 3 entries can number"),
            std::string::npos) << e.msg;
  std::string far_rank = "IQ== 0\nIg== 16000000\n";
  EXPECT_EQ(spill_tok_load_tiktoken(far_rank.data(), far_rank.size(), nullptr, nullptr, nullptr, 0,
                                    &t, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("id 16000000 is beyond"), std::string::npos) << e.msg;
}

}  // namespace
