// Tests for engine/base/json_util: each wrong type, missing key and range
// violation gives its path and reason; atomic writes replace whole files.
#include "engine/base/json_util.h"

#include <cjson/cJSON.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {

struct Doc {
  cJSON *root;
  explicit Doc(const char *text) : root(cJSON_Parse(text)) {}
  ~Doc() { cJSON_Delete(root); }
};

TEST(JsonUtilTest, IntegerFieldsAreTypedAndBounded) {
  Doc d(R"({"a": 5, "b": 2.5, "c": "x", "d": 1e300, "big": 100})");
  spill_err e = {};
  int64_t v = 0;
  EXPECT_EQ(spill_json_int(d.root, "a", "m", 0, 10, &v, SPILL_E_FORMAT, &e), SPILL_OK);
  EXPECT_EQ(v, 5);
  EXPECT_EQ(spill_json_int(d.root, "b", "m.layers[3]", 0, 10, &v, SPILL_E_FORMAT, &e),
            SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "m.layers[3].b: expected integer");
  EXPECT_EQ(spill_json_int(d.root, "c", "m", 0, 10, &v, SPILL_E_CONFIG, &e), SPILL_E_CONFIG);
  EXPECT_STREQ(e.msg, "m.c: expected integer");
  EXPECT_EQ(spill_json_int(d.root, "d", "m", 0, 10, &v, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_json_int(d.root, "big", "m", 0, 10, &v, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "m.big: 100 out of range [0, 10]");
  EXPECT_EQ(spill_json_int(d.root, "zz", "m", 0, 10, &v, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "m.zz: missing key");
  EXPECT_EQ(spill_json_int_opt(d.root, "zz", "m", 0, 10, 7, &v, SPILL_E_FORMAT, &e), SPILL_OK);
  EXPECT_EQ(v, 7);
}

TEST(JsonUtilTest, StringsObjectsArraysAndUnknownKeys) {
  Doc d(R"({"s": "hello", "e": "", "o": {}, "a": [1,2,3], "n": null})");
  spill_err e = {};
  const char *s = nullptr;
  EXPECT_EQ(spill_json_str(d.root, "s", "m", 16, &s, SPILL_E_FORMAT, &e), SPILL_OK);
  EXPECT_STREQ(s, "hello");
  EXPECT_EQ(spill_json_str(d.root, "s", "m", 3, &s, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_json_str(d.root, "e", "m", 3, &s, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_json_str(d.root, "n", "m", 3, &s, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "m.n: expected string");
  const cJSON *o = nullptr;
  int n = 0;
  EXPECT_EQ(spill_json_obj(d.root, "o", "m", &o, SPILL_E_FORMAT, &e), SPILL_OK);
  EXPECT_EQ(spill_json_obj(d.root, "a", "m", &o, SPILL_E_FORMAT, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_json_arr(d.root, "a", "m", &o, &n, SPILL_E_FORMAT, &e), SPILL_OK);
  EXPECT_EQ(n, 3);
  const char *allowed[] = {"s", "e", "o", "a", nullptr};
  EXPECT_EQ(spill_json_only_keys(d.root, "cfg", allowed, SPILL_E_CONFIG, &e), SPILL_E_CONFIG);
  EXPECT_STREQ(e.msg, "cfg.n: unknown key");
}

TEST(JsonUtilTest, NumbersAndBools) {
  Doc d(R"({"x": 0.5, "t": true, "i": 1})");
  spill_err e = {};
  double x = 0;
  int b = 0;
  EXPECT_EQ(spill_json_num(d.root, "x", "m", 0, 1, &x, SPILL_E_CONFIG, &e), SPILL_OK);
  EXPECT_DOUBLE_EQ(x, 0.5);
  EXPECT_EQ(spill_json_num(d.root, "x", "m", 0.6, 1, &x, SPILL_E_CONFIG, &e), SPILL_E_CONFIG);
  EXPECT_EQ(spill_json_bool_opt(d.root, "t", "m", 0, &b, SPILL_E_CONFIG, &e), SPILL_OK);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(spill_json_bool_opt(d.root, "i", "m", 0, &b, SPILL_E_CONFIG, &e), SPILL_E_CONFIG);
  EXPECT_STREQ(e.msg, "m.i: expected true or false");
}

TEST(JsonUtilTest, AtomicWriteReplacesAndReadsBack) {
  std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  std::string f = dir + "/atomic.txt";
  spill_err e = {};
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "first", 5, &e), SPILL_OK);
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "second!", 7, &e), SPILL_OK);
  char *buf = nullptr;
  size_t n = 0;
  ASSERT_EQ(spill_read_file(f.c_str(), 100, &buf, &n, &e), SPILL_OK);
  EXPECT_EQ(std::string(buf, n), "second!");
  free(buf);
  EXPECT_EQ(spill_read_file(f.c_str(), 3, &buf, &n, &e), SPILL_E_FORMAT);
  EXPECT_EQ(spill_read_file((dir + "/nope").c_str(), 100, &buf, &n, &e), SPILL_E_IO);
  EXPECT_EQ(spill_write_file_atomic((dir + "/no/such/dir/x").c_str(), "a", 1, &e), SPILL_E_IO);
}

}  // namespace
