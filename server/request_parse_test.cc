// server/request_parse_test.cc: the request parser, the generated-text
// pipeline (UTF-8 repair, stop sequences) and the chat fallback rendering.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
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

TEST(RequestParseTest, AcceptsNeutralAndInformationalFields) {
  Parsed p(SPILL_SRV_CHAT,
           R"({"model":"m","messages":[{"role":"system","content":"s","name":"boss"},)"
           R"({"role":"user","content":[{"type":"text","text":"x"}],"name":"u1"},)"
           R"({"role":"assistant","content":null,"refusal":null,"tool_calls":null,"function_call":null,"audio":null},)"
           R"({"role":"tool","content":"r","tool_call_id":"c1"}],)"
           R"("n":1,"logprobs":false,"top_logprobs":null,"frequency_penalty":0,"presence_penalty":0,)"
           R"("logit_bias":{},"tools":[],"tool_choice":"none","functions":[],"function_call":"auto",)"
           R"("response_format":{"type":"text"},"modalities":["text"],"audio":null,"prediction":null,)"
           R"("reasoning_effort":null,"verbosity":null,"web_search_options":null,"store":false,)"
           R"("user":"u","metadata":{"k":"v"},"service_tier":"auto","prompt_cache_key":"pk",)"
           R"("safety_identifier":"s","parallel_tool_calls":true,"temperature":null,)"
           R"("stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}})");
  ASSERT_EQ(p.rc, 0) << p.e.message;
  EXPECT_EQ(p.r.n_messages, 4);
  EXPECT_FLOAT_EQ(p.r.temperature, 1.0f);
  EXPECT_TRUE(p.r.include_usage);
  Parsed c(SPILL_SRV_COMPLETION,
           R"({"model":"m","prompt":"x","n":1,"logprobs":null,"echo":false,"suffix":"",)"
           R"("best_of":1,"frequency_penalty":0,"presence_penalty":0,"logit_bias":{},"user":"u"})");
  ASSERT_EQ(c.rc, 0) << c.e.message;
}

TEST(RequestParseTest, RejectsUnknownFieldsNamingThem) {
  const std::string msg = R"("messages":[{"role":"user","content":"x"}])";
  struct Case {
    spill_srv_kind k;
    std::string body, param;
  } cases[] = {
      {SPILL_SRV_CHAT, R"({"model":"m",)" + msg + R"(,"temprature":0.5})", "temprature"},
      {SPILL_SRV_CHAT, R"({"whatever":{"a":[1,2]},"model":"m",)" + msg + "}", "whatever"},
      // a field of the other endpoint, or of neither
      {SPILL_SRV_CHAT, R"({"model":"m",)" + msg + R"(,"echo":false})", "echo"},
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"x","max_completion_tokens":4})", "max_completion_tokens"},
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"x","tools":[]})", "tools"},
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"x","min_p":0.1})", "min_p"},
      // null is still a field the endpoint does not know
      {SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"x","repeat_penalty":null})", "repeat_penalty"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"user","content":"y","nmae":"z"}]})",
       "messages[1].nmae"},
      // fields of another role
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x","tool_call_id":"c"}]})",
       "messages[0].tool_call_id"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"tool","content":"x","name":"n"}]})", "messages[0].name"},
      {SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{}}]}]})",
       "messages[0].content[1].cache_control"},
      {SPILL_SRV_CHAT, R"({"model":"m",)" + msg + R"(,"stream":true,"stream_options":{"include_usage":true,"chunk":1}})",
       "stream_options.chunk"},
  };
  for (const Case &c : cases) {
    Parsed p(c.k, c.body);
    EXPECT_EQ(p.rc, -1) << c.body;
    EXPECT_EQ(p.e.http_status, 400) << c.body;
    EXPECT_STREQ(p.e.type, "invalid_request_error");
    EXPECT_STREQ(p.e.code, "unknown_parameter") << c.body << ": " << p.e.message;
    EXPECT_EQ(p.e.param, c.param) << c.body;
    EXPECT_EQ(std::string(p.e.message), "Unknown parameter: '" + c.param + "'.");
  }
}

TEST(RequestParseTest, WrongTypedAndNonNeutralKnownFieldsAreRefused) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}],)";
  struct Case {
    std::string extra, param;
  } cases[] = {
      {R"("user":5)", "user"},
      {R"("metadata":{"k":1})", "metadata"},
      {R"("service_tier":"fastest")", "service_tier"},
      {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
      {R"("prompt_cache_key":[])", "prompt_cache_key"},
      {R"("store":true)", "store"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("functions":[{"name":"f"}])", "functions"},
      {R"("modalities":["text","audio"])", "modalities"},
      {R"("reasoning_effort":"low")", "reasoning_effort"},
      {R"("web_search_options":{})", "web_search_options"},
      {R"("stream":true,"stream_options":{"include_obfuscation":1})", "include_obfuscation"},
  };
  for (const Case &c : cases) {
    Parsed p(SPILL_SRV_CHAT, head + c.extra + "}");
    EXPECT_EQ(p.rc, -1) << c.extra;
    EXPECT_EQ(p.e.http_status, 400);
    EXPECT_EQ(p.e.param, c.param) << c.extra << ": " << p.e.message;
    EXPECT_STREQ(p.e.code, "") << c.extra;
  }
  Parsed m(SPILL_SRV_CHAT, R"({"model":"m","messages":[{"role":"user","content":"x","name":3}]})");
  EXPECT_EQ(m.rc, -1);
  EXPECT_STREQ(m.e.param, "messages");
}

// A client-chosen key is echoed as valid UTF-8 of bounded length.
TEST(RequestParseTest, UnknownKeyIsEchoedAsBoundedValidUtf8) {
  // invalid UTF-8 in a body is refused before any key is read (the one JSON
  // reading layer: DuplicateFieldsAndNulsAreRefusedByName); a long valid key
  // is echoed bounded, cut at a character boundary
  std::string key = "\xc3\xa9t" + std::string(200, 'k');
  Parsed p(SPILL_SRV_COMPLETION, "{\"model\":\"m\",\"prompt\":\"x\",\"" + key + "\":1}");
  ASSERT_EQ(p.rc, -1);
  std::string param = p.e.param;
  EXPECT_EQ(param.substr(0, 4), "\xc3\xa9tk");
  EXPECT_EQ(param.substr(param.size() - 3), "...");
  EXPECT_LT(param.size(), sizeof p.e.param);
}

// docs/SERVER.md lists each endpoint's accepted fields on one line,
// "- `/v1/...`: `a`, `b`, ..."; that list must be the parser's table.
TEST(RequestParseTest, DocsListTheAcceptedFields) {
  std::string path = std::string(getenv("TEST_SRCDIR")) + "/" + getenv("TEST_WORKSPACE") + "/docs/SERVER.md";
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  std::string line;
  std::map<std::string, std::set<std::string>> doc;
  while (std::getline(f, line)) {
    for (const char *ep : {"/v1/chat/completions", "/v1/completions"}) {
      std::string head = std::string("- `") + ep + "`: ";
      if (line.compare(0, head.size(), head) != 0) continue;
      for (size_t i = line.find('`', head.size()); i != std::string::npos;) {
        size_t j = line.find('`', i + 1);
        if (j == std::string::npos) break;
        doc[ep].insert(line.substr(i + 1, j - i - 1));
        i = line.find('`', j + 1);
      }
    }
  }
  for (auto [ep, kind] : {std::pair{"/v1/chat/completions", SPILL_SRV_CHAT},
                          std::pair{"/v1/completions", SPILL_SRV_COMPLETION}}) {
    std::set<std::string> table;
    for (int i = 0; spill_srv_request_field(kind, i); i++) table.insert(spill_srv_request_field(kind, i));
    EXPECT_GE(table.size(), 10u);
    EXPECT_EQ(doc[ep], table) << ep;
  }
}

// Issue 26 items 7 and 17: a repeated field resolved to the first copy (a
// gateway reading the last sees another request) and "max_tokens\u0000zz"
// was accepted as max_tokens.
TEST(RequestParseTest, DuplicateFieldsAndNulsAreRefusedByName) {
  Parsed dup(SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"a","max_tokens":1,"max_tokens":900})");
  EXPECT_EQ(dup.rc, -1);
  EXPECT_EQ(dup.e.http_status, 400);
  EXPECT_NE(std::string(dup.e.message).find("max_tokens: duplicate key"), std::string::npos)
      << dup.e.message;
  Parsed nested(SPILL_SRV_CHAT,
                R"({"model":"m","messages":[{"role":"user","role":"system","content":"x"}]})");
  EXPECT_EQ(nested.rc, -1);
  EXPECT_NE(std::string(nested.e.message).find("messages[0].role: duplicate key"),
            std::string::npos)
      << nested.e.message;
  Parsed nul(SPILL_SRV_COMPLETION, R"({"model":"m","prompt":"a","max_tokens\u0000zz":5})");
  EXPECT_EQ(nul.rc, -1);
  EXPECT_NE(std::string(nul.e.message).find("\\u0000 (NUL) inside a string"), std::string::npos)
      << nul.e.message;
  Parsed bad(SPILL_SRV_COMPLETION, "{\"model\":\"m\xff\",\"prompt\":\"a\"}");
  EXPECT_EQ(bad.rc, -1);
  EXPECT_NE(std::string(bad.e.message).find("invalid UTF-8"), std::string::npos) << bad.e.message;
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
