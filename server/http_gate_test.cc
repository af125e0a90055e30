// server/http_gate_test.cc: the gate's request-head parser (http_gate.h):
// what it passes to libmicrohttpd, what it answers itself and with which
// status, and that an incomplete head is waited for.
#include "server/http_gate.h"

#include <gtest/gtest.h>

#include <string>

namespace {

int parse(const std::string &h, spill_srv_head *out = nullptr, size_t max_head = 8192) {
  spill_srv_head tmp;
  char why[160];
  return spill_srv_head_parse(h.data(), h.size(), max_head, 1 << 20, out ? out : &tmp, why,
                              sizeof why);
}

TEST(HttpGateTest, AWellFramedHeadIsParsed) {
  spill_srv_head h;
  std::string r = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization:  Bearer k \r\n"
                  "Content-Length: 2\r\n\r\n{}";
  ASSERT_EQ(parse(r, &h), 0);
  EXPECT_EQ(std::string(h.method, h.method_len), "POST");
  EXPECT_EQ(std::string(h.path, h.path_len), "/v1/completions?x=1");
  EXPECT_EQ(std::string(h.auth, h.auth_len), "Bearer k");
  EXPECT_EQ(h.content_length, 2u);
  EXPECT_EQ(h.head_len, r.size() - 2);
  EXPECT_EQ(parse("GET /health HTTP/1.0\n\n"), 0);  // bare LF lines
}

TEST(HttpGateTest, AnIncompleteHeadIsWaitedForUntilItIsTooLarge) {
  EXPECT_EQ(parse("GET /health HTTP/1.1\r\nHost: a\r\n"), 1);
  EXPECT_EQ(parse(""), 1);
  EXPECT_EQ(parse("GET /health HTTP/1.1\r\nX: " + std::string(100, 'a'), nullptr, 64), 431);
}

TEST(HttpGateTest, FramingErrorsGetTheirStatus) {
  const std::string g = "POST /v1/completions HTTP/1.1\r\n";
  EXPECT_EQ(parse(g + "Content-Length: abc\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "Content-Length: -1\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "Content-Length: \r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "Content-Length: 1\r\nContent-Length: 1\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "Content-Length: 99999999999999999999\r\n\r\n"), 413);
  EXPECT_EQ(parse(g + "Content-Length: 1048577\r\n\r\n"), 413);
  EXPECT_EQ(parse(g + "Transfer-Encoding: chunked\r\n\r\n"), 411);
  EXPECT_EQ(parse(g + "transfer-encoding: gzip\r\n\r\n"), 411);
  EXPECT_EQ(parse(g + "\r\n"), 411);  // a POST without Content-Length
  EXPECT_EQ(parse(g + "No colon\r\nContent-Length: 0\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + " folded: x\r\nContent-Length: 0\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "X: a\x01" "b\r\nContent-Length: 0\r\n\r\n"), 400);
  EXPECT_EQ(parse(g + "X: a\rb\r\nContent-Length: 0\r\n\r\n"), 400);
  EXPECT_EQ(parse("GET  /health HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(parse("GET health HTTP/1.1\r\n\r\n"), 400);
  EXPECT_EQ(parse("GET /health HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(parse("GET /health\r\n\r\n"), 400);
  EXPECT_EQ(parse("GET /health HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n"), 400);
}

}  // namespace
