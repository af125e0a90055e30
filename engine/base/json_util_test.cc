// Tests for engine/base/json_util: each wrong type, missing key and range
// violation gives its path and reason; atomic writes replace whole files.
#include "engine/base/json_util.h"

#include <cjson/cJSON.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
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

// The reading layer: what readers would disagree on is refused, by name.
struct Parsed {
  cJSON *root = nullptr;
  spill_err e = {};
  int rc;
  Parsed(const std::string &t, const char *src = "config.json")
      : rc(spill_json_parse(t.data(), t.size(), src, SPILL_E_CONFIG, &root, &e)) {}
  ~Parsed() { cJSON_Delete(root); }
};

TEST(JsonParseTest, DuplicateKeysAreRefusedWithTheirPath) {
  // cJSON keeps the first, transformers the last: top-k 2 or 8
  Parsed a(R"({"num_experts_per_tok": 2, "x": 1, "num_experts_per_tok": 8})");
  EXPECT_EQ(a.rc, SPILL_E_CONFIG);
  EXPECT_STREQ(a.e.msg, "config.json: num_experts_per_tok: duplicate key");
  EXPECT_EQ(a.root, nullptr);
  Parsed b(R"({"l": [{"x": 1}, {"y": {"k": 1, "k": 2}}]})");
  EXPECT_EQ(b.rc, SPILL_E_CONFIG);
  EXPECT_STREQ(b.e.msg, "config.json: l[1].y.k: duplicate key");
  // a big object (a tokenizer's vocabulary) is checked by hashing
  std::string big = "{\"model\": {\"vocab\": {";
  for (int i = 0; i < 50000; i++) big += "\"t" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  Parsed ok(big.substr(0, big.size() - 1) + "}}}");
  EXPECT_EQ(ok.rc, SPILL_OK) << ok.e.msg;
  Parsed dup(big + "\"t49999\": 7}}}");
  EXPECT_EQ(dup.rc, SPILL_E_CONFIG);
  EXPECT_STREQ(dup.e.msg, "config.json: model.vocab.t49999: duplicate key");
  // the same key in sibling objects is not a duplicate
  Parsed sib(R"({"a": {"k": 1}, "b": {"k": 1}, "c": [{"k": 1}, {"k": 2}]})");
  EXPECT_EQ(sib.rc, SPILL_OK) << sib.e.msg;
}

TEST(JsonParseTest, NulBytesAndEscapesAreRefused) {
  // "max_tokens\u0000zz" must not be read as max_tokens
  Parsed a(R"({"max_tokens\u0000zz": 5})", "request");
  EXPECT_EQ(a.rc, SPILL_E_CONFIG);
  EXPECT_STREQ(a.e.msg, "request: byte 12: \\u0000 (NUL) inside a string");
  Parsed b(R"({"name": "a\u0000b"})");
  EXPECT_EQ(b.rc, SPILL_E_CONFIG);
  Parsed raw(std::string("{\"a\": 1}\0 ", 10));
  EXPECT_EQ(raw.rc, SPILL_E_CONFIG);
  EXPECT_STREQ(raw.e.msg, "config.json: byte 8: NUL byte");
  // an escaped backslash before u0000 is text, not a NUL
  Parsed text(R"({"a": "\\u0000", "b": "\"\\"})");
  EXPECT_EQ(text.rc, SPILL_OK) << text.e.msg;
  EXPECT_STREQ(cJSON_GetObjectItem(text.root, "a")->valuestring, "\\u0000");
  Parsed other(R"({"a": "\u0001\u00e9"})");
  EXPECT_EQ(other.rc, SPILL_OK) << other.e.msg;
}

TEST(JsonParseTest, InvalidUtf8TrailingBytesAndBadJsonAreNamed) {
  Parsed u("{\"a\": \"\xff\"}");
  EXPECT_STREQ(u.e.msg, "config.json: byte 7: invalid UTF-8");
  Parsed t(R"({"a": 1} {"b": 2})");
  EXPECT_STREQ(t.e.msg, "config.json: trailing bytes after the JSON value at byte 9");
  Parsed ws("{\"a\": 1}\n \t");
  EXPECT_EQ(ws.rc, SPILL_OK);
  Parsed bad(R"({"a": })");
  EXPECT_EQ(bad.rc, SPILL_E_CONFIG);
  EXPECT_NE(std::string(bad.e.msg).find("not valid JSON"), std::string::npos) << bad.e.msg;
  Parsed empty("");
  EXPECT_EQ(empty.rc, SPILL_E_CONFIG);
  std::string deep(5000, '[');
  Parsed d(deep + std::string(5000, ']'));
  EXPECT_EQ(d.rc, SPILL_E_CONFIG);
  spill_err e = {};
  cJSON *r = nullptr;
  EXPECT_EQ(spill_json_parse(R"({"k": 1, "k": 2})", 16, nullptr, SPILL_E_FORMAT, &r, &e),
            SPILL_E_FORMAT);
  EXPECT_STREQ(e.msg, "k: duplicate key");
}

// The one escaper: always valid UTF-8, always valid JSON.
TEST(JsonEscapeTest, EscapesControlsAndReplacesInvalidUtf8) {
  std::string in = std::string("a\"b\\c\n\x01", 7) + "\xc3\xa9" + "\xff" + "\xe2\x82" + "z" +
                   std::string("\0", 1) + "\xf0\x9f\x98\x80";
  char buf[128];
  size_t n = spill_json_escape(buf, sizeof buf, in.data(), in.size());
  std::string want = "a\\\"b\\\\c\\u000a\\u0001\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz\\u0000"
                     "\xf0\x9f\x98\x80";
  EXPECT_EQ(std::string(buf), want);
  EXPECT_EQ(n, want.size());
  EXPECT_EQ(spill_json_utf8_check(buf, n), n);
  // snprintf-like: a short buffer is cut and terminated, the length is whole
  char small[5];
  EXPECT_EQ(spill_json_escape(small, sizeof small, in.data(), in.size()), want.size());
  EXPECT_STREQ(small, "a\\\"b");
  char *q = spill_json_quote("x\xff", 2);
  EXPECT_STREQ(q, "\"x\xef\xbf\xbd\"");
  Parsed back(std::string("{\"k\": ") + q + "}");
  EXPECT_EQ(back.rc, SPILL_OK) << back.e.msg;
  free(q);
}

TEST(JsonEscapeTest, PrintedTreesAreValidUtf8) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "model", "qwen\xff\xfe\xc3");
  cJSON_AddStringToObject(j, "ok", "\xc3\xa9");
  for (int f = 0; f < 2; f++) {
    char *t = spill_json_print(j, f);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(spill_json_utf8_check(t, strlen(t)), strlen(t)) << t;
    EXPECT_NE(std::string(t).find("qwen\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"), std::string::npos);
    EXPECT_NE(std::string(t).find("\xc3\xa9"), std::string::npos);
    Parsed back(t);
    EXPECT_EQ(back.rc, SPILL_OK) << back.e.msg;
    free(t);
  }
  cJSON_Delete(j);
}

}  // namespace
