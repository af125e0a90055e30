// engine/import/gguf_test.cc: the GGUF reader on valid files (metadata of
// every kind, tensors, split files, the metadata API the tokenizer uses) and
// hostile ones: bad magic/version/alignment, truncation at every byte,
// 2^40-byte strings, huge array counts, overlapping or misaligned offsets,
// absurd dimensions, unknown types, duplicates, nested arrays.
#include <gtest/gtest.h>

#include <string>

#include "engine/base/half.h"
#include "engine/import/gguf.h"
#include "engine/import/import_test_util.h"

using namespace spill_test;

namespace {

int Parse(const std::string &b, spill_gguf *g, spill_err *e) {
  return spill_gguf_parse_mem((const uint8_t *)b.data(), b.size(), "t.gguf", g, e);
}

std::string Q8Block(float d, int base) {
  std::string s;
  uint16_t h = spill_f32_to_f16(d);
  Put(s, &h, 2);
  for (int j = 0; j < 32; j++) s.push_back((char)(int8_t)(base + j - 16));
  return s;
}

Gguf Valid() {
  Gguf g;
  g.KvStr("general.architecture", "qwen3moe");
  g.KvU32("qwen3moe.block_count", 2);
  g.KvF32("qwen3moe.rope.freq_base", 1e6f);
  g.KvBool("tokenizer.ggml.add_bos_token", false);
  g.KvStrArr("tokenizer.ggml.tokens", {"a", "b", std::string("c\0d", 3)});
  g.KvI32Arr("tokenizer.ggml.token_type", {1, 1, 3});
  g.t.push_back({"w", {4, 2}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8})});
  g.t.push_back({"q", {32, 1}, 8, Q8Block(0.5f, 0)});
  return g;
}

TEST(GgufTest, ParsesMetadataAndTensors) {
  spill_gguf g;
  spill_err e = {};
  std::string b = Valid().Bytes();
  ASSERT_EQ(Parse(b, &g, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(g.version, 3u);
  EXPECT_EQ(spill_gguf_n_kv(&g), 6);
  const char *s;
  uint64_t n;
  ASSERT_EQ(spill_gguf_get_str(&g, "general.architecture", &s, &n, &e), SPILL_OK);
  EXPECT_STREQ(s, "qwen3moe");
  uint64_t u;
  ASSERT_EQ(spill_gguf_get_u64(&g, "qwen3moe.block_count", &u, &e), SPILL_OK);
  EXPECT_EQ(u, 2u);
  double f;
  ASSERT_EQ(spill_gguf_get_f64(&g, "qwen3moe.rope.freq_base", &f, &e), SPILL_OK);
  EXPECT_EQ(f, 1e6);
  int bo = 1;
  ASSERT_EQ(spill_gguf_get_bool(&g, "tokenizer.ggml.add_bos_token", &bo, &e), SPILL_OK);
  EXPECT_EQ(bo, 0);
  const spill_gguf_kv *tok = spill_gguf_find_kv(&g, "tokenizer.ggml.tokens");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->type, SPILL_GGUF_ARRAY);
  EXPECT_EQ(tok->elem, SPILL_GGUF_STRING);
  ASSERT_EQ(tok->n, 3u);
  EXPECT_EQ(std::string(tok->str[2], tok->str_len[2]), std::string("c\0d", 3));
  const spill_gguf_kv *tt = spill_gguf_find_kv(&g, "tokenizer.ggml.token_type");
  int64_t iv;
  ASSERT_EQ(spill_gguf_arr_i64(tt, 2, &iv, &e), SPILL_OK);
  EXPECT_EQ(iv, 3);
  EXPECT_EQ(spill_gguf_arr_i64(tt, 3, &iv, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_gguf_get_u64(&g, "general.architecture", &u, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_gguf_get_u64(&g, "missing", &u, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("missing"), std::string::npos);
  EXPECT_STREQ(spill_gguf_kv_at(&g, 0)->key, "general.architecture");
  EXPECT_EQ(spill_gguf_kv_at(&g, 6), nullptr);
  const spill_src_tensor *w = spill_gguf_find(&g, "w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->ndim, 2);
  EXPECT_EQ(w->shape[0], 2u);  // numpy order: ggml ne reversed
  EXPECT_EQ(w->shape[1], 4u);
  const spill_src_tensor *q = spill_gguf_find(&g, "q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, SPILL_SRC_Q8_0);
  EXPECT_EQ(q->bytes, 34u);
  EXPECT_EQ(q->begin % 32, 0u);
  float v[32];
  ASSERT_EQ(spill_src_dequant(q->dtype, b.data() + q->begin, 32, v, &e), SPILL_OK);
  for (int j = 0; j < 32; j++) EXPECT_EQ(v[j], 0.5f * (j - 16));
  spill_gguf_close(&g);
}

// ggml Q5_0 (type 6) and Q5_1 (type 7), which llama-quantize writes for
// matrices whose columns are not whole 256-blocks: read with their sizes and
// dequantised as ggml does. The block holds u = e for element e (nibbles in
// qs, fifth bits in the qh word).
std::string Q5Block(bool one, float d, float m) {
  std::string s;
  uint16_t h = spill_f32_to_f16(d);
  Put(s, &h, 2);
  if (one) {
    h = spill_f32_to_f16(m);
    Put(s, &h, 2);
  }
  uint32_t qh = 0xFFFF0000u;  // elements 16..31 have the fifth bit
  Put(s, &qh, 4);
  for (int j = 0; j < 16; j++) s.push_back((char)(j | (j << 4)));
  return s;
}

TEST(GgufTest, ReadsQ5_0AndQ5_1) {
  Gguf w;
  w.KvStr("general.architecture", "qwen3moe");
  w.t.push_back({"a", {32, 1}, 6, Q5Block(false, 0.5f, 0)});
  w.t.push_back({"b", {32, 1}, 7, Q5Block(true, 0.25f, -1.0f)});
  std::string b = w.Bytes();
  spill_gguf g;
  spill_err e = {};
  ASSERT_EQ(Parse(b, &g, &e), SPILL_OK) << e.msg;
  const spill_src_tensor *a = spill_gguf_find(&g, "a"), *c = spill_gguf_find(&g, "b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(a->dtype, SPILL_SRC_Q5_0);
  EXPECT_EQ(a->bytes, 22u);
  EXPECT_EQ(c->dtype, SPILL_SRC_Q5_1);
  EXPECT_EQ(c->bytes, 24u);
  float v[32];
  ASSERT_EQ(spill_src_dequant(a->dtype, b.data() + a->begin, 32, v, &e), SPILL_OK);
  for (int j = 0; j < 32; j++) EXPECT_EQ(v[j], 0.5f * (j - 16)) << j;
  ASSERT_EQ(spill_src_dequant(c->dtype, b.data() + c->begin, 32, v, &e), SPILL_OK);
  for (int j = 0; j < 32; j++) EXPECT_EQ(v[j], 0.25f * j - 1.0f) << j;
  uint64_t n = 0;
  EXPECT_EQ(spill_src_bytes(SPILL_SRC_Q5_1, 1408, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 44u * 24);
  EXPECT_EQ(spill_src_bytes(SPILL_SRC_Q5_0, 48, &n, &e), SPILL_E_FORMAT);  // not whole blocks
  spill_gguf_close(&g);
}

TEST(GgufTest, OpensFilesAndSplits) {
  std::string d = TmpDir();
  WriteFile(d + "/one.gguf", Valid().Bytes());
  spill_gguf g;
  spill_err e = {};
  ASSERT_EQ(spill_gguf_open((d + "/one.gguf").c_str(), &g, &e), SPILL_OK) << e.msg;
  const spill_src_tensor *w = spill_gguf_find(&g, "w");
  float x[8];
  ASSERT_EQ(spill_gguf_read(&g, w, 0, x, 32, &e), SPILL_OK);
  EXPECT_EQ(x[7], 8.0f);
  EXPECT_EQ(spill_gguf_read(&g, w, 4, x, 32, &e), SPILL_E_RANGE);
  spill_gguf_close(&g);

  Gguf a = Valid(), b;
  a.t.pop_back();
  a.KvU32("split.no", 0);
  a.KvU32("split.count", 2);
  a.KvU32("split.tensors.count", 2);
  b.KvU32("split.no", 1);
  b.KvU32("split.count", 2);
  b.t.push_back({"q", {32, 1}, 8, Q8Block(0.25f, 3)});
  WriteFile(d + "/m-00001-of-00002.gguf", a.Bytes());
  WriteFile(d + "/m-00002-of-00002.gguf", b.Bytes());
  ASSERT_EQ(spill_gguf_open((d + "/m-00001-of-00002.gguf").c_str(), &g, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(g.n_files, 2);
  EXPECT_EQ(g.n_tensors, 2);
  const spill_src_tensor *q = spill_gguf_find(&g, "q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->file, 1);
  std::string blk(34, 0);
  ASSERT_EQ(spill_gguf_read(&g, q, 0, &blk[0], 34, &e), SPILL_OK);
  EXPECT_EQ(blk, Q8Block(0.25f, 3));
  spill_gguf_close(&g);
  // a split whose split.no lies, a missing split, duplicate tensors across splits
  Gguf b2 = b;
  b2.kv[0].clear();
  b2.kv.erase(b2.kv.begin());
  b2.KvU32("split.no", 0);
  WriteFile(d + "/m-00002-of-00002.gguf", b2.Bytes());
  EXPECT_EQ(spill_gguf_open((d + "/m-00001-of-00002.gguf").c_str(), &g, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("split.no"), std::string::npos) << e.msg;
  Gguf b3 = b;
  b3.t.push_back({"w", {4, 2}, 0, F32Bytes({1, 2, 3, 4, 5, 6, 7, 8})});
  WriteFile(d + "/m-00002-of-00002.gguf", b3.Bytes());
  EXPECT_EQ(spill_gguf_open((d + "/m-00001-of-00002.gguf").c_str(), &g, &e), SPILL_E_FORMAT);
  unlink((d + "/m-00002-of-00002.gguf").c_str());
  EXPECT_EQ(spill_gguf_open((d + "/m-00001-of-00002.gguf").c_str(), &g, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("m-00002-of-00002.gguf"), std::string::npos) << e.msg;
}

TEST(GgufTest, TruncationAtEveryByteIsAnError) {
  std::string b = Valid().Bytes();
  spill_gguf g;
  spill_err e = {};
  for (size_t n = 0; n < b.size(); n++) {
    int rc = Parse(b.substr(0, n), &g, &e);
    EXPECT_NE(rc, SPILL_OK) << n;
    if (rc == SPILL_OK) spill_gguf_close(&g);
  }
}

// x must be refused with code and a message naming needle.
void ExpectError(const Gguf &x, int code, const char *needle) {
  spill_gguf g;
  spill_err e = {};
  std::string b = x.Bytes();
  int rc = Parse(b, &g, &e);
  EXPECT_EQ(rc, code) << needle << ": " << e.msg;
  if (rc == SPILL_OK) spill_gguf_close(&g);
  EXPECT_NE(std::string(e.msg).find(needle), std::string::npos) << e.msg;
}

// The header: magic, version, alignment.
TEST(GgufTest, HostileHeadersAreNamedErrors) {
  spill_gguf g;
  spill_err e = {};
  Gguf x = Valid();
  x.magic = 0x46554746;
  ExpectError(x, SPILL_E_FORMAT, "magic");
  x = Valid();
  x.version = 1;
  ExpectError(x, SPILL_E_VERSION, "version");
  x = Valid();
  x.version = 4;
  ExpectError(x, SPILL_E_VERSION, "version");
  // alignment: not a power of two, zero, wrong type
  x = Valid();
  x.KvU32("general.alignment", 48);
  ExpectError(x, SPILL_E_FORMAT, "alignment");
  x = Valid();
  x.KvU32("general.alignment", 0);
  ExpectError(x, SPILL_E_FORMAT, "alignment");
  x = Valid();
  x.KvF32("general.alignment", 32);
  ExpectError(x, SPILL_E_FORMAT, "alignment");
  // a valid non-default alignment works
  x = Valid();
  x.KvU32("general.alignment", 64);
  x.align = 64;
  {
    std::string b = x.Bytes();
    ASSERT_EQ(Parse(b, &g, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(g.alignment, 64u);
    spill_gguf_close(&g);
  }
}

// Metadata: huge strings, keys and arrays, nested arrays, unknown types,
// duplicates, more key/values than the file holds.
TEST(GgufTest, HostileMetadataIsANamedError) {
  // a 2^40-byte metadata string
  Gguf x = Valid();
  {
    std::string s;
    PutStr(s, "general.name");
    PutU32(s, 8);
    PutU64(s, 1ull << 40);
    s += "abc";
    x.kv.push_back(s);
  }
  ExpectError(x, SPILL_E_FORMAT, "past the end");
  // a 2^40-byte key
  x = Valid();
  {
    std::string s;
    PutU64(s, 1ull << 40);
    x.kv.insert(x.kv.begin(), s);
  }
  ExpectError(x, SPILL_E_FORMAT, "past the end");
  // a huge array count
  x = Valid();
  {
    std::string s;
    PutStr(s, "big");
    PutU32(s, 9);
    PutU32(s, 4);
    PutU64(s, 1ull << 61);
    x.kv.push_back(s);
  }
  ExpectError(x, SPILL_E_FORMAT, "cannot fit");
  // nested arrays, unknown value type, duplicate keys, more kvs than the file holds
  x = Valid();
  {
    std::string s;
    PutStr(s, "nest");
    PutU32(s, 9);
    PutU32(s, 9);
    PutU64(s, 1);
    x.kv.push_back(s);
  }
  ExpectError(x, SPILL_E_FORMAT, "nested");
  x = Valid();
  {
    std::string s;
    PutStr(s, "k");
    PutU32(s, 13);
    x.kv.push_back(s);
  }
  ExpectError(x, SPILL_E_FORMAT, "unknown value type");
  x = Valid();
  x.KvU32("qwen3moe.block_count", 3);
  ExpectError(x, SPILL_E_FORMAT, "twice");
  x = Valid();
  x.n_kv_extra = 1000000;
  ExpectError(x, SPILL_E_FORMAT, "metadata");
}

// A string value is read as a C string (the architecture, tokenizer.ggml.pre,
// the chat template): a NUL inside would cut it to another value, so it is
// refused by key and byte (issue 26 item 17). Array elements (token texts,
// merges) keep their length and may hold any byte.
TEST(GgufTest, NulInsideAStringValueIsRefusedByKey) {
  Gguf x = Valid();
  x.kv.erase(x.kv.begin());
  x.KvStr("general.architecture", std::string("qwen3moe\0llama", 14));
  ExpectError(x, SPILL_E_FORMAT, "key general.architecture: a NUL byte at byte 8 of its string");
  x = Valid();
  x.KvStr("tokenizer.ggml.pre", std::string("\0", 1));
  ExpectError(x, SPILL_E_FORMAT, "key tokenizer.ggml.pre: a NUL byte at byte 0 of its string");
  // the Valid() vocabulary holds "c\0d": still accepted, by length
  spill_gguf g;
  spill_err e = {};
  std::string b = Valid().Bytes();
  ASSERT_EQ(Parse(b, &g, &e), SPILL_OK) << e.msg;
  spill_gguf_close(&g);
}

// Tensors: overlapping, misaligned, absurd dims, unknown type, partial
// blocks, past EOF, duplicate and oversized names.
TEST(GgufTest, HostileTensorsAreNamedErrors) {
  Gguf x = Valid();
  x.t[1].offset = 0;
  ExpectError(x, SPILL_E_FORMAT, "overlap");
  x = Valid();
  x.t[1].offset = 40;
  ExpectError(x, SPILL_E_FORMAT, "alignment");
  x = Valid();
  x.t[0].ne = {1ull << 40, 1ull << 40};
  ExpectError(x, SPILL_E_FORMAT, "absurd");
  x = Valid();
  x.t[0].ne = {0, 2};
  ExpectError(x, SPILL_E_FORMAT, "absurd");
  x = Valid();
  x.t[0].ne = {1, 1, 1, 1, 8};
  ExpectError(x, SPILL_E_FORMAT, "dimensions");
  x = Valid();
  x.t[0].type = 99;
  ExpectError(x, SPILL_E_UNSUPPORTED, "ggml type 99");
  x = Valid();
  x.t[1].ne = {16, 2};
  ExpectError(x, SPILL_E_FORMAT, "blocks");
  x = Valid();
  x.t[0].ne = {4, 2000};  // dtype/shape disagree with the bytes present
  ExpectError(x, SPILL_E_FORMAT, "past the end");
  x = Valid();
  x.t[1].name = "w";
  ExpectError(x, SPILL_E_FORMAT, "twice");
  x = Valid();
  x.t[0].name = std::string(300, 'a');
  ExpectError(x, SPILL_E_FORMAT, "string of 300 bytes");
}

}  // namespace
