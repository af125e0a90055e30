// server/request_parse_test.cc: the request parser, the generated-text
// pipeline (UTF-8 repair, stop sequences) and the chat fallback rendering.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "server/chat_prompt.h"
#include "server/completion_text.h"
#include "server/request_parse.h"
}

namespace {

struct Parsed {
  spill_srv_request r;
  spill_srv_error e;
  int rc;
  Parsed(spill_srv_kind k, const std::string &body) {
    rc = spill_srv_request_parse(k, body.data(), body.size(), &r, &e);
  }
  ~Parsed() { spill_srv_request_free(&r); }
};

TEST(RequestParseTest, ChatWithEveryKnob) {
  Parsed p(SPILL_SRV_CHAT,
           R"({"model":"nano","messages":[{"role":"system","content":"be brief"},)"
           R"({"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],)"
           R"("max_tokens":12,"temperature":0.5,"top_p":0.9,"top_k":40,"seed":7,)"
           R"("stop":["\n\n","END"],"stream":true,"stream_options":{"include_usage":true},"user":"u"})");
  ASSERT_EQ(p.rc, 0) << p.e.message;
  EXPECT_STREQ(p.r.model, "nano");
  ASSERT_EQ(p.r.n_messages, 2);
  EXPECT_STREQ(p.r.messages[1].role, "user");
  EXPECT_STREQ(p.r.messages[1].content, "hi there");
  EXPECT_EQ(p.r.max_tokens, 12);
  EXPECT_FLOAT_EQ(p.r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.r.top_p, 0.9f);
  EXPECT_EQ(p.r.top_k, 40);
  EXPECT_TRUE(p.r.has_seed);
  EXPECT_EQ(p.r.seed, 7u);
  ASSERT_EQ(p.r.n_stop, 2);
  EXPECT_STREQ(p.r.stop[1], "END");
  EXPECT_TRUE(p.r.stream);
  EXPECT_TRUE(p.r.include_usage);
}

TEST(RequestParseTest, CompletionDefaults) {
  Parsed p(SPILL_SRV_COMPLETION, R"({"model":"m","prompt":["Once"]})");
  ASSERT_EQ(p.rc, 0) << p.e.message;
  EXPECT_STREQ(p.r.prompt, "Once");
  EXPECT_EQ(p.r.max_tokens, -1);
  EXPECT_FLOAT_EQ(p.r.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.r.top_p, 1.0f);
  EXPECT_FALSE(p.r.has_seed);
  EXPECT_FALSE(p.r.stream);
}

TEST(RequestParseTest, RejectsBadBodiesWithTheField) {
  struct Case {
    spill_srv_kind k;
    const char *body;
    const char *param;
  } cases[] = {
      {SPILL_SRV_CHAT, "{", ""},
      {SPILL_SRV_CHAT, "[]", ""},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[]} x)", ""},
      {SPILL_SRV_CHAT, R"({"messages":[{"role":"user","content":"x"}]})", "model"},
      {SPILL_SRV_CHAT, R"({"model":3,"messages":[{"role":"user","content":"x"}]})", "model"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":"hi"})", "messages"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"9"})", "max_tokens"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5})", "max_tokens"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})", "max_tokens"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})", "temperature"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})", "top_p"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":[1]})", "stop"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]})", "stop"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2})", "n"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true})", "logprobs"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":1})", "presence_penalty"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})", "stream_options"},
      {SPILL_SRV_COMPLETION, R"({"model":"m"})", "prompt"},
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":["a","b"]})", "prompt"},
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"a","seed":"1"})", "seed"},
  };
  for (const Case &c : cases) {
    Parsed p(c.k, c.body);
    EXPECT_EQ(p.rc, -1) << c.body;
    EXPECT_EQ(p.e.http_status, 400) << c.body;
    EXPECT_STREQ(p.e.param, c.param) << c.body << ": " << p.e.message;
    EXPECT_STREQ(p.e.type, "invalid_request_error");
    EXPECT_NE(p.e.message[0], 0);
  }
}

TEST(RequestParseTest, IgnoresUnknownFieldsAndDefaultValuedUnsupportedOnes) {
  Parsed p(SPILL_SRV_CHAT,
           R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":1,"logprobs":false,)"
           R"("frequency_penalty":0,"tools":[],"whatever":{"a":[1,2]},"temperature":null})");
  ASSERT_EQ(p.rc, 0) << p.e.message;
  EXPECT_FLOAT_EQ(p.r.temperature, 1.0f);
}

TEST(RequestParseTest, BodyIsLengthBoundedNotNulTerminated) {
  std::string b = R"({"model":"m","prompt":"abc"})";
  std::string padded = b + "GARBAGE";
  spill_srv_request r;
  spill_srv_error e;
  ASSERT_EQ(spill_srv_request_parse(SPILL_SRV_COMPLETION, padded.data(), b.size(), &r, &e), 0);
  EXPECT_STREQ(r.prompt, "abc");
  spill_srv_request_free(&r);
}

static std::string push_all(spill_srv_text *t, const std::string &bytes) {
  for (char c : bytes) spill_srv_text_push(t, &c, 1);
  spill_srv_text_finish(t);
  const char *p;
  size_t n = spill_srv_text_take(t, &p);
  return std::string(p, n);
}

TEST(CompletionTextTest, RepairsUtf8LikeWhatwg) {
  struct {
    std::string in, out;
  } cases[] = {
      {"abc", "abc"},
      {"\xc3\xa9", "\xc3\xa9"},                         // é split over two tokens
      {"\xc3", "\xef\xbf\xbd"},                         // truncated at the end
      {"\xc3" "a", "\xef\xbf\xbd" "a"},                 // bad continuation: byte reprocessed
      {"\xff", "\xef\xbf\xbd"},
      {"\xe0\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // overlong: 3 x U+FFFD
      {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},  // surrogate
      {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
      {"\xf0\x9f\x98", "\xef\xbf\xbd"},                 // one U+FFFD for a truncated sequence
  };
  for (auto &c : cases) {
    spill_srv_text t;
    spill_srv_text_init(&t, nullptr, 0);
    EXPECT_EQ(push_all(&t, c.in), c.out);
    spill_srv_text_free(&t);
  }
}

TEST(CompletionTextTest, StopsAtTheEarliestStopAndHoldsBackPrefixes) {
  const char *stops[] = {"END", "\n\n"};
  spill_srv_text t;
  spill_srv_text_init(&t, stops, 2);
  const char *p;
  EXPECT_EQ(spill_srv_text_push(&t, "hello E", 7), 0);
  size_t n = spill_srv_text_take(&t, &p);
  EXPECT_EQ(std::string(p, n), "hello ");  // "E" may start "END"
  EXPECT_EQ(spill_srv_text_push(&t, "N", 1), 0);
  EXPECT_EQ(spill_srv_text_take(&t, &p), 0u);
  EXPECT_EQ(spill_srv_text_push(&t, "Dmore", 5), 1);
  EXPECT_EQ(spill_srv_text_push(&t, "ignored", 7), 1);
  spill_srv_text_finish(&t);
  n = spill_srv_text_take(&t, &p);
  EXPECT_EQ(std::string(p, n), "");
  EXPECT_STREQ(t.buf, "hello ");
  spill_srv_text_free(&t);

  spill_srv_text_init(&t, stops, 2);
  EXPECT_EQ(spill_srv_text_push(&t, "abEN", 4), 0);
  spill_srv_text_finish(&t);  // never completed: released at the end
  n = spill_srv_text_take(&t, &p);
  EXPECT_EQ(std::string(p, n), "abEN");
  spill_srv_text_free(&t);
}

TEST(ChatPromptTest, FallbackRendering) {
  spill_srv_message m[2] = {{(char *)"system", (char *)"S"}, {(char *)"user", (char *)"hi"}};
  char *s = spill_srv_chat_fallback(m, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_STREQ(s, "<|system|>\nS\n<|user|>\nhi\n<|assistant|>\n");
  free(s);
}

}  // namespace
