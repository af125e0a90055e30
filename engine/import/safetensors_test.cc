// engine/import/safetensors_test.cc: the safetensors reader on valid files,
// shards with an index, dtypes (f32/f16/bf16/fp8) and hostile inputs:
// truncation, a header length past EOF, overlapping offsets, dtype/shape
// mismatch, absurd dimensions, duplicates, index disagreements.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/base/half.h"
#include "engine/import/import_test_util.h"
#include "engine/import/safetensors.h"

using namespace spill_test;

namespace {

int Parse(const std::string &b, spill_st_list *l, spill_err *e) {
  return spill_st_parse_header((const uint8_t *)b.data(), b.size(), b.size(), 0, "t.safetensors",
                               l, e);
}

std::string Mk(const std::string &dir) {
  std::string d = TmpDir() + "/" + dir;
  mkdir(d.c_str(), 0755);
  return d;
}

TEST(SafetensorsTest, ParsesValidFileAndReadsValues) {
  std::string d = Mk("st_valid");
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  uint16_t h[2] = {spill_f32_to_f16(1.5f), spill_f32_to_bf16(-2.0f)};
  std::string b = Safetensors({{"a.weight", "F32", {2, 3}, F32Bytes(w)},
                               {"b", "F16", {1}, std::string((char *)&h[0], 2)},
                               {"c", "BF16", {1}, std::string((char *)&h[1], 2)}},
                              "{\"format\":\"pt\"}");
  WriteFile(d + "/model.safetensors", b);
  spill_st_ckpt c;
  spill_err e = {};
  ASSERT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(c.n_tensors, 3);
  const spill_src_tensor *a = spill_st_find(&c, "a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ndim, 2);
  EXPECT_EQ(a->shape[0], 2u);
  EXPECT_EQ(a->shape[1], 3u);
  EXPECT_EQ(a->dtype, SPILL_SRC_F32);
  std::vector<float> got(6);
  ASSERT_EQ(spill_st_read(&c, a, 0, got.data(), 24, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(got, w);
  const spill_src_tensor *t = spill_st_find(&c, "b");
  uint16_t raw;
  float f;
  ASSERT_EQ(spill_st_read(&c, t, 0, &raw, 2, &e), SPILL_OK);
  ASSERT_EQ(spill_src_dequant(t->dtype, &raw, 1, &f, &e), SPILL_OK);
  EXPECT_EQ(f, 1.5f);
  t = spill_st_find(&c, "c");
  ASSERT_EQ(spill_st_read(&c, t, 0, &raw, 2, &e), SPILL_OK);
  ASSERT_EQ(spill_src_dequant(t->dtype, &raw, 1, &f, &e), SPILL_OK);
  EXPECT_EQ(f, -2.0f);
  EXPECT_EQ(spill_st_find(&c, "zz"), nullptr);
  EXPECT_EQ(spill_st_read(&c, a, 20, got.data(), 8, &e), SPILL_E_RANGE);
  spill_st_close(&c);
}

TEST(SafetensorsTest, Fp8E4m3DecodesEveryByte) {
  // exact values of e4m3fn: exponent bias 7, subnormals, 0x7f/0xff NaN, no inf
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0xB8), -1.0f);
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(spill_src_fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(spill_src_fp8_e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(spill_src_fp8_e4m3_to_f32(0xFF)));
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7F) == 0x7F) continue;
    float v = spill_src_fp8_e4m3_to_f32((uint8_t)b);
    int exp = (b >> 3) & 15, man = b & 7;
    double want = exp ? std::ldexp(1.0 + man / 8.0, exp - 7) : std::ldexp(man / 8.0, -6);
    EXPECT_EQ((double)v, (b & 0x80) ? -want : want) << b;
  }
}

TEST(SafetensorsTest, ShardsThroughTheIndex) {
  std::string d = Mk("st_shards");
  WriteFile(d + "/model-00001-of-00002.safetensors",
            Safetensors({{"x", "F32", {2}, F32Bytes({1, 2})}}));
  WriteFile(d + "/model-00002-of-00002.safetensors",
            Safetensors({{"y", "F32", {1}, F32Bytes({3})}}));
  WriteFile(d + "/model.safetensors.index.json",
            "{\"metadata\":{\"total_size\":12},\"weight_map\":{\"x\":\"model-00001-of-00002."
            "safetensors\",\"y\":\"model-00002-of-00002.safetensors\"}}");
  spill_st_ckpt c;
  spill_err e = {};
  ASSERT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(c.n_files, 2);
  const spill_src_tensor *y = spill_st_find(&c, "y");
  ASSERT_NE(y, nullptr);
  float v = 0;
  ASSERT_EQ(spill_st_read(&c, y, 0, &v, 4, &e), SPILL_OK);
  EXPECT_EQ(v, 3.0f);
  spill_st_close(&c);
  // the index names a tensor its shard does not hold
  WriteFile(d + "/model.safetensors.index.json",
            "{\"weight_map\":{\"x\":\"model-00002-of-00002.safetensors\",\"y\":\"model-00002-"
            "of-00002.safetensors\"}}");
  EXPECT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("x"), std::string::npos) << e.msg;
  // a shard tensor the index does not list
  WriteFile(d + "/model.safetensors.index.json",
            "{\"weight_map\":{\"x\":\"model-00001-of-00002.safetensors\"}}");
  WriteFile(d + "/model-00001-of-00002.safetensors",
            Safetensors({{"x", "F32", {2}, F32Bytes({1, 2})}, {"z", "F32", {1}, F32Bytes({1})}}));
  EXPECT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("z"), std::string::npos) << e.msg;
  // a shard name with a path
  WriteFile(d + "/model.safetensors.index.json", "{\"weight_map\":{\"x\":\"../etc/passwd\"}}");
  EXPECT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_E_FORMAT);
  // a missing shard
  WriteFile(d + "/model.safetensors.index.json", "{\"weight_map\":{\"x\":\"nope.safetensors\"}}");
  EXPECT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("nope.safetensors"), std::string::npos) << e.msg;
}

TEST(SafetensorsTest, HostileHeadersAreNamedErrors) {
  spill_st_list l;
  spill_err e = {};
  std::string good = Safetensors({{"a", "F32", {2, 2}, F32Bytes({1, 2, 3, 4})},
                                  {"b", "F32", {1}, F32Bytes({5})}});
  ASSERT_EQ(Parse(good, &l, &e), SPILL_OK) << e.msg;
  spill_st_list_free(&l);
  // truncated: every prefix fails cleanly
  for (size_t n = 0; n < good.size(); n++) {
    std::string b = good.substr(0, n);
    EXPECT_NE(Parse(b, &l, &e), SPILL_OK) << n;
  }
  // header length past EOF
  std::string b = good;
  uint64_t big = 1u << 20;
  memcpy(&b[0], &big, 8);
  EXPECT_EQ(Parse(b, &l, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("past the end"), std::string::npos) << e.msg;
  big = ~0ull;
  memcpy(&b[0], &big, 8);
  EXPECT_EQ(Parse(b, &l, &e), SPILL_E_FORMAT);
  // overlapping offsets
  auto hdr = [](const std::string &json, size_t data) {
    std::string s;
    PutU64(s, json.size());
    s += json;
    s += std::string(data, '\0');
    return s;
  };
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                      12),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("overlap"), std::string::npos) << e.msg;
  // dtype/shape mismatch
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8), &l,
                  &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("mismatch"), std::string::npos) << e.msg;
  // absurd dimensions
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                      "\"data_offsets\":[0,8]}}",
                      8),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
                      4),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4), &l,
                  &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4),
                  &l, &e),
            SPILL_E_FORMAT);
  // data past the end of the file
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8), &l,
                  &e),
            SPILL_E_FORMAT);
  // unknown dtype, unknown key, wrong types, duplicates, not JSON, trailing junk
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4), &l,
                  &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
                      4),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,4]}}", 4), &l, &e),
            SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      8),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("a: duplicate key"), std::string::npos) << e.msg;
  // issue 26 item 17: a NUL in a tensor name cut it ("a\u0000zz" read as "a")
  EXPECT_EQ(Parse(hdr("{\"a\\u0000zz\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                  &l, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("\\u0000 (NUL) inside a string"), std::string::npos) << e.msg;
  // padding with spaces or NULs after the object is the format's
  ASSERT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  ", 4), &l,
                  &e),
            SPILL_OK)
      << e.msg;
  spill_st_list_free(&l);
  EXPECT_EQ(Parse(hdr("[1,2]", 0), &l, &e), SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":", 0), &l, &e), SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{}xx", 0), &l, &e), SPILL_E_FORMAT);
  EXPECT_EQ(Parse(hdr("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8), &l,
                  &e),
            SPILL_E_FORMAT);
}

TEST(SafetensorsTest, TruncatedShardOnDiskIsAnError) {
  std::string d = Mk("st_trunc");
  std::string b = Safetensors({{"a", "F32", {4}, F32Bytes({1, 2, 3, 4})}});
  WriteFile(d + "/model.safetensors", b.substr(0, b.size() - 3));
  spill_st_ckpt c;
  spill_err e = {};
  EXPECT_EQ(spill_st_open(d.c_str(), &c, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("model.safetensors"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_st_open((d + "/none").c_str(), &c, &e), SPILL_E_IO);
}

}  // namespace

// compressed-tensors mxfp4-pack-quantized (the Kimi K3 checkpoint's experts)
// -> ggml MXFP4: a lossless byte repack. Back again gives the same bytes, and
// every dequantised value is the compressed-tensors definition, e2m1(code) x
// 2^(scale - 127), computed here without ggml's doubled table (scales 0, 1,
// 2 (small exponents), 127, 254 included).
TEST(SafetensorsTest, Mxfp4FromCompressedTensorsIsALosslessRepack) {
  const uint64_t rows = 3, cols = 96, nb = cols / 32;
  std::vector<uint8_t> packed(rows * cols / 2), scale(rows * nb), blocks(rows * nb * 17), p2(packed.size()),
      s2(scale.size());
  uint32_t x = 12345;
  for (auto &b : packed) b = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
  const uint8_t sc[] = {0, 1, 2, 127, 254, 120, 130, 125, 131};
  for (size_t i = 0; i < scale.size(); i++) scale[i] = sc[i % 9];
  spill_err e = {};
  ASSERT_EQ(spill_src_mxfp4_from_ct(packed.data(), scale.data(), rows, cols, blocks.data(), "t", &e), SPILL_OK)
      << e.msg;
  spill_src_mxfp4_to_ct(blocks.data(), rows, cols, p2.data(), s2.data());
  EXPECT_EQ(packed, p2);
  EXPECT_EQ(scale, s2);
  static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::vector<float> got(rows * cols);
  ASSERT_EQ(spill_src_dequant(SPILL_SRC_MXFP4, blocks.data(), rows * cols, got.data(), &e), SPILL_OK) << e.msg;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++) {
      const uint8_t code = (packed[r * cols / 2 + c / 2] >> (4 * (c & 1))) & 0xF;
      const float want = (code & 8 ? -1.0f : 1.0f) * e2m1[code & 7] *
                         std::ldexp(1.0f, (int)scale[r * nb + c / 32] - 127);
      ASSERT_EQ(got[r * cols + c], want) << "row " << r << " col " << c << " code " << (int)code;
    }
  // an e8m0 255 (NaN) is refused naming the tensor, row and block
  scale[1 * nb + 2] = 255;
  EXPECT_EQ(spill_src_mxfp4_from_ct(packed.data(), scale.data(), rows, cols, blocks.data(), "x.weight_scale", &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("x.weight_scale: e8m0 scale 255 (NaN) at row 1, block 2"), std::string::npos)
      << e.msg;
}
