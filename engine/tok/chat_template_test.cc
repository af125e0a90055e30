// engine/tok/chat_template_test.cc: the Jinja interpreter against Python
// jinja2 (tools/tok/jinja_oracle.py, transformers' environment): every real
// template in testdata/chat (Qwen3, DeepSeek-V3, Llama 3, Llama 2, Mixtral,
// OLMoE) x every conversation there renders to identical bytes, or both
// fail. Plus the simple messages API, and errors for bad templates.
#include <gtest/gtest.h>

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tok/spill_tok.h"
#include "engine/tok/tok_corpus_test_util.h"

namespace {

std::string Runfile(const std::string &rel) {
  const char *srcdir = getenv("TEST_SRCDIR");
  const char *ws = getenv("TEST_WORKSPACE");
  if (srcdir && ws) return std::string(srcdir) + "/" + ws + "/" + rel;
  return rel;
}

std::string Slurp(const std::string &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Rendered {
  std::string tmpl, ctx, out;
  bool ok;
};

// One Python process renders every template x context pair.
std::vector<Rendered> OracleBatch(const std::string &dir) {
  std::string cmd = "/usr/bin/python3 '" + Runfile("tools/tok/jinja_oracle.py") + "' --batch '" + dir + "'";
  std::vector<Rendered> r;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::string all;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) all.append(buf, n);
  if (pclose(p) != 0) return {};
  size_t i = 0;
  auto field = [](const std::string &line, const std::string &key) {
    size_t a = line.find("\"" + key + "\": \"");
    if (a == std::string::npos) return std::string();
    a += key.size() + 5;
    return line.substr(a, line.find('"', a) - a);
  };
  while (i < all.size()) {
    size_t j = all.find('\n', i);
    if (j == std::string::npos) j = all.size();
    std::string line = all.substr(i, j - i);
    i = j + 1;
    if (line.empty()) continue;
    r.push_back({field(line, "template"), field(line, "context"), tok_test::Base64Decode(field(line, "out")),
                 line.find("\"ok\": true") != std::string::npos});
  }
  return r;
}

std::vector<std::string> List(const std::string &dir, const std::string &suffix) {
  std::vector<std::string> v;
  DIR *d = opendir(dir.c_str());
  if (!d) return v;
  while (struct dirent *de = readdir(d)) {
    std::string n = de->d_name;
    if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
      v.push_back(n);
  }
  closedir(d);
  std::sort(v.begin(), v.end());
  return v;
}

// Every template x context in dir rendered by us and by jinja2: identical
// bytes, or both fail. Returns the number rendered identically.
int CompareDirWithJinja2(const std::string &dir, size_t n_pairs) {
  std::vector<Rendered> want = OracleBatch(dir);
  EXPECT_EQ(want.size(), n_pairs) << "the jinja2 oracle did not run on " << dir;
  int rendered = 0, both_failed = 0;
  for (const auto &w : want) {
    std::string tmpl = Slurp(dir + "/" + w.tmpl);
    char *got = nullptr;
    spill_err e{};
    int rc = spill_chat_render_json(tmpl.c_str(), Slurp(dir + "/" + w.ctx).c_str(), &got, &e);
    if (!w.ok) {
      EXPECT_NE(rc, SPILL_OK) << w.tmpl << " x " << w.ctx << ": jinja2 failed (" << w.out
                              << ") but we rendered:\n" << got;
      both_failed++;
    } else {
      EXPECT_EQ(rc, SPILL_OK) << w.tmpl << " x " << w.ctx << ": " << e.msg;
      if (rc == SPILL_OK) EXPECT_EQ(std::string(got), w.out) << w.tmpl << " x " << w.ctx;
      if (rc == SPILL_OK && std::string(got) == w.out) rendered++;
    }
    free(got);
  }
  printf("%s: %d renderings identical, %d failing in both\n", dir.c_str(), rendered, both_failed);
  return rendered;
}

TEST(ChatTemplateTest, RealTemplatesMatchJinja2ByteForByte) {
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = Runfile("engine/tok/testdata/chat");
  std::vector<std::string> tmpls = List(dir, ".jinja"), ctxs = List(dir, ".json");
  ASSERT_GE(tmpls.size(), 6u);
  ASSERT_GE(ctxs.size(), 5u);
  EXPECT_GT(CompareDirWithJinja2(dir, tmpls.size() * ctxs.size()), 30);
}

// The XTML constructs (Kimi K3's chat format) in a template of our own:
// macros with defaults, keyword arguments and recursion, a namespace
// carried through macro calls, dictsort, tojson(ensure_ascii=false).
TEST(ChatTemplateTest, XtmlTemplateMatchesJinja2) {
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = Runfile("engine/tok/testdata/chat_k3");
  std::vector<std::string> ctxs = List(dir, ".json");
  ASSERT_GE(ctxs.size(), 5u);
  EXPECT_EQ(CompareDirWithJinja2(dir, ctxs.size()), 5);  // every context renders (xtml.jinja raises nothing)
}

// Kimi K3's own template (llama.cpp's models/templates/Kimi-K3.jinja, read
// from the peer's source tree at test time: the released checkpoint ships
// its chat format as Python, llama.cpp as this Jinja) over the same
// conversations: system/user/assistant with the think channel, tool calls
// (arguments as mapping and as JSON text), tool results matched by id,
// tools declared, thinking off, response_format, an unresolvable tool name
// (raises in both). Skips when the peer is not built.
TEST(ChatTemplateTest, KimiK3TemplateMatchesJinja2) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  std::string src = peer ? std::string(peer) : "";
  src = src.substr(0, src.rfind('/'));                       // .../bin
  src = src.substr(0, src.rfind('/')) + "/src/models/templates/Kimi-K3.jinja";
  if (!peer || Slurp(src).empty())
    GTEST_SKIP() << "llama.cpp peer source not found (run ./lab peers; SPILL_LLAMA_PEER='"
                 << (peer ? peer : "") << "', looked for " << src << ")";
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/k3tmpl";
  std::string ctxdir = Runfile("engine/tok/testdata/chat_k3");
  ASSERT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && cp '" + src + "' '" + dir +
                    "/Kimi-K3.jinja' && cp '" + ctxdir + "'/ctx_*.json '" + dir + "'/")
                       .c_str()),
            0);
  std::vector<std::string> ctxs = List(dir, ".json");
  ASSERT_GE(ctxs.size(), 5u);
  EXPECT_EQ(CompareDirWithJinja2(dir, ctxs.size()), (int)ctxs.size() - 1);  // ctx_k3_bad raises
  // the generation prompt opens the assistant's think channel
  char *got = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_chat_render_json(Slurp(src).c_str(), Slurp(ctxdir + "/ctx_k3_basic.json").c_str(), &got, &e),
            SPILL_OK)
      << e.msg;
  std::string out = got;
  free(got);
  const std::string tail = "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  EXPECT_NE(out.find("<|open|>message role=\"user\"<|sep|>Hello \"there\" & <you><|close|>message<|sep|><|end_of_msg|>"),
            std::string::npos)
      << out;
}

// GLM-4.6's and GLM-4.7-Flash's own templates (llama.cpp's
// models/templates/GLM-4.6.jinja and GLM-4.7-Flash.jinja, read from the
// peer's source tree at test time, not stored here) over every conversation
// of testdata/chat, ctx_glm.json included (content as a list of parts,
// reasoning_content, tool calls with mapping arguments, runs of tool
// results, enable_thinking false): identical bytes to jinja2, or both fail
// (string tool-call arguments raise in both). testdata/chat/glm_style.jinja
// (our own, in GLM's style) runs in RealTemplatesMatchJinja2ByteForByte
// without the peer. Skips when the peer is not built.
TEST(ChatTemplateTest, GlmTemplatesMatchJinja2) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  std::string src = peer ? std::string(peer) : "";
  src = src.substr(0, src.rfind('/'));
  src = src.substr(0, src.rfind('/')) + "/src/models/templates/";
  if (!peer || Slurp(src + "GLM-4.6.jinja").empty())
    GTEST_SKIP() << "llama.cpp peer source not found (run ./lab peers; looked in " << src << ")";
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/glmtmpl";
  std::string ctxdir = Runfile("engine/tok/testdata/chat");
  ASSERT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && cp '" + src + "GLM-4.6.jinja' '" + src +
                    "GLM-4.7-Flash.jinja' '" + dir + "'/ && cp '" + ctxdir + "'/ctx_*.json '" + dir + "'/")
                       .c_str()),
            0);
  std::vector<std::string> ctxs = List(dir, ".json");
  ASSERT_GE(ctxs.size(), 8u);
  EXPECT_GE(CompareDirWithJinja2(dir, 2 * ctxs.size()), 2 * ((int)ctxs.size() - 1));
  // the GLM conversation: the prefix, reasoning kept after the last user turn
  // only, tool results under one observation, the generation prompt
  char *got = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_chat_render_json(Slurp(src + "GLM-4.6.jinja").c_str(), Slurp(ctxdir + "/ctx_glm.json").c_str(),
                                   &got, &e),
            SPILL_OK)
      << e.msg;
  std::string out = got;
  free(got);
  EXPECT_EQ(out.rfind("[gMASK]<sop>", 0), 0u) << out;
  EXPECT_NE(out.find("<|observation|>\n<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("<arg_value>[\"C\", \"F\"]</arg_value>"), std::string::npos) << out;
  const std::string tail = "<|user|>\nThanks/nothink<|assistant|>\n<think></think>";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail) << out;
}

// gpt-oss's harmony template (llama.cpp's models/templates/
// openai-gpt-oss-120b.jinja, the one the checkpoints ship; read from the
// peer's source tree at test time, not stored here) over testdata/chat_oss's
// conversations (our own: system / developer, reasoning_effort and
// model_identity, earlier turns' thinking dropped, typed tool namespaces with
// builtin browser/python tools, tool calls with and without their analysis,
// the training form ending in <|return|>) and the generic ones of
// testdata/chat: identical bytes to jinja2 (the date strftime_now writes
// included), or both raise (channel tags in content, a tool result with no
// call, and generic conversations the template refuses).
TEST(ChatTemplateTest, GptOssHarmonyTemplateMatchesJinja2) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  std::string src = peer ? std::string(peer) : "";
  src = src.substr(0, src.rfind('/'));
  src = src.substr(0, src.rfind('/')) + "/src/models/templates/openai-gpt-oss-120b.jinja";
  if (!peer || Slurp(src).empty())
    GTEST_SKIP() << "llama.cpp peer source not found (run ./lab peers; looked for " << src << ")";
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/osstmpl";
  std::string ctxdir = Runfile("engine/tok/testdata/chat_oss");
  ASSERT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && cp '" + src + "' '" + dir +
                    "/gpt-oss.jinja' && cp '" + ctxdir + "'/ctx_*.json '" + Runfile("engine/tok/testdata/chat") +
                    "'/ctx_*.json '" + dir + "'/")
                       .c_str()),
            0);
  std::vector<std::string> ctxs = List(dir, ".json");
  ASSERT_GE(ctxs.size(), 15u);
  // the five good harmony conversations and five of testdata/chat render;
  // the two bad ones and three generic ones raise in both
  EXPECT_GE(CompareDirWithJinja2(dir, ctxs.size()), 10);  // 10 identical at 7 + 8 conversations
  char *got = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_chat_render_json(Slurp(src).c_str(), Slurp(ctxdir + "/ctx_oss_tools.json").c_str(), &got, &e),
            SPILL_OK)
      << e.msg;
  std::string out = got;
  free(got);
  EXPECT_EQ(out.rfind("<|start|>system<|message|>You are ChatGPT", 0), 0u) << out;
  EXPECT_NE(out.find("type get_weather = (_: {\n"), std::string::npos) << out;
  EXPECT_NE(out.find("<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                     "{\"city\": \"Paris\", \"days\": 2}<|call|>"),
            std::string::npos)
      << out;
  const std::string tail = "<|start|>functions.now to=assistant<|channel|>commentary<|message|>\"12:00\"<|end|>"
                           "<|start|>assistant";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail) << out;
}

// Qwen3.5's template (llama.cpp's models/templates/Qwen3.5-4B.jinja, the
// template the Qwen3.5 checkpoints ship, read from the peer's source at
// test time) over the testdata conversations: identical bytes to jinja2, or
// both fail. Then the Qwen3.5 conversation's shape: tools declared in
// <tools>, reasoning kept after the last user turn, the generation prompt
// opening a think block. Skips when the peer is not built.
TEST(ChatTemplateTest, Qwen35TemplateMatchesJinja2) {
  const char *peer = getenv("SPILL_LLAMA_PEER");
  std::string src = peer ? std::string(peer) : "";
  src = src.substr(0, src.rfind('/'));
  src = src.substr(0, src.rfind('/')) + "/src/models/templates/";
  if (!peer || Slurp(src + "Qwen3.5-4B.jinja").empty())
    GTEST_SKIP() << "llama.cpp peer source not found (run ./lab peers; looked in " << src << ")";
  if (system("/usr/bin/python3 -c 'import jinja2' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-jinja2 is not installed (./lab installs it)";
  std::string dir = std::string(getenv("TEST_TMPDIR")) + "/qwen35tmpl";
  std::string ctxdir = Runfile("engine/tok/testdata/chat");
  ASSERT_EQ(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && cp '" + src + "Qwen3.5-4B.jinja' '" + dir +
                    "'/ && cp '" + ctxdir + "'/ctx_*.json '" + dir + "'/")
                       .c_str()),
            0);
  std::vector<std::string> ctxs = List(dir, ".json");
  ASSERT_GE(ctxs.size(), 8u);
  EXPECT_GE(CompareDirWithJinja2(dir, ctxs.size()), (int)ctxs.size() - 2);
  char *got = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_chat_render_json(Slurp(src + "Qwen3.5-4B.jinja").c_str(),
                                   Slurp(ctxdir + "/ctx_qwen_tools.json").c_str(), &got, &e),
            SPILL_OK)
      << e.msg;
  std::string out = got;
  free(got);
  EXPECT_EQ(out.rfind("<|im_start|>system\n", 0), 0u) << out;
  EXPECT_NE(out.find("<tools>"), std::string::npos) << out;
  const std::string tail = "18 degrees.<|im_end|>\n<|im_start|>assistant\n<think>\n";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail) << out;
}

TEST(ChatTemplateTest, MessagesApiEqualsTheJsonForm) {
  std::string tmpl = Slurp(Runfile("engine/tok/testdata/chat/qwen3.jinja"));
  spill_chat_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
  char *a = nullptr, *b = nullptr;
  spill_err e{};
  ASSERT_EQ(spill_chat_render(tmpl.c_str(), msgs, 2, 1, "", "<|im_end|>", &a, &e), SPILL_OK) << e.msg;
  EXPECT_STREQ(a, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\n");
  ASSERT_EQ(spill_chat_render_json(tmpl.c_str(),
                                   "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                   "{\"role\":\"user\",\"content\":\"Hi\"}],"
                                   "\"add_generation_prompt\":true,\"bos_token\":\"\","
                                   "\"eos_token\":\"<|im_end|>\"}",
                                   &b, &e),
            SPILL_OK)
      << e.msg;
  EXPECT_STREQ(a, b);
  free(a);
  free(b);
}

TEST(ChatTemplateTest, WhitespaceControlAndScoping) {
  struct Case { const char *tmpl, *want; } cases[] = {
      {"a  {%- if true %}\n  b\n  {%- endif %}  c", "a  b  c"},
      {"x\n    {% if true %}\ny\n    {% endif %}\nz", "x\ny\nz"},
      {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}", "1"},
      {"{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}{% endfor %}{{ ns.x }}",
       "2"},
      {"{{ [1, 2, 3][::-1] }} {{ 'abc'[1:] }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 2 }} {{ 2.0 }}",
       "[3, 2, 1] bc 3 2 0.5 2.0"},
      {"{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}"
       "{% endfor %}",
       "1/2,2/2"},
      {"{{ {'a': [1, none, true], 'b': 'q\"'} | tojson }}", "{\"a\": [1, null, true], \"b\": \"q\\\"\"}"},
      {"{{ '  x y  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}", "x y|['a', 'b', '', 'c']|['a', 'b']"},
      {"{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
       "02"},
      {"{{ x is defined }} {{ none is none }} {{ 'é' | length }} {{ 'ab' ~ 1 }}", "False True 1 ab1"},
      // macros: late-bound template variables, no loop variables, defaults
      // evaluated per call (after the parameters before them), keywords
      {"{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}", "2"},
      {"{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}", "[]"},
      {"{% macro m(a, b=a + 1) %}{{ a }}{{ b }}{% set a = 9 %}{{ a }}{% endmacro %}{{ m(1) }}{{ m(1, 5) }}"
       "{{ m(b=3, a=2) }}",
       "129159239"},
      {"{% macro m(a) %}{{ a is defined }}{% endmacro %}{{ m() }}{{ m is callable }}", "FalseTrue"},
      {"{% for k, v in {'b': 1, 'A': 2, 'a': 3} | dictsort %}{{ k }}{{ v }}{% endfor %}|"
       "{% for k, v in {'b': 1, 'A': 2, 'a': 3} | dictsort(reverse=true) %}{{ k }}{% endfor %}|"
       "{% for k, v in {'x': 2, 'y': 1} | dictsort(by='value') %}{{ k }}{% endfor %}",
       "A2a3b1|bAa|yx"},
      // powers by squaring: exact up to 64 bits, odd exponents keep their sign
      {"{{ 3 ** 39 }} {{ (-1) ** 101 }} {{ 2 ** 62 }} {{ 7 // -2 }}", "4052555153018976267 -1 4611686018427387904 -4"},
  };
  for (const auto &c : cases) {
    char *out = nullptr;
    spill_err e{};
    ASSERT_EQ(spill_chat_render_json(c.tmpl, "{}", &out, &e), SPILL_OK) << c.tmpl << ": " << e.msg;
    EXPECT_EQ(std::string(out), c.want) << c.tmpl;
    free(out);
  }
}

TEST(ChatTemplateTest, BadTemplatesGetNamedErrors) {
  struct Case { const char *tmpl; int code; const char *needle; } cases[] = {
      {"{% if x %}no end", SPILL_E_FORMAT, "endif"},
      {"{{ 'unterminated }}", SPILL_E_FORMAT, "line 1"},
      {"{% call m() %}{% endcall %}", SPILL_E_UNSUPPORTED, "call"},
      {"{% for i in [1] %}{% macro m() %}{% endmacro %}{% endfor %}", SPILL_E_UNSUPPORTED, "inside a loop"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", SPILL_E_CONFIG, "not more than 1"},
      {"{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", SPILL_E_CONFIG, "no keyword argument 'b'"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", SPILL_E_CONFIG, "multiple values"},
      {"{% macro m(a=1, b) %}{% endmacro %}", SPILL_E_FORMAT, "without a default"},
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", SPILL_E_TMPL_EVAL_DEPTH, "depth"},
      {"{{ {'a': 1, 2: 3} | dictsort }}", SPILL_E_CONFIG, "not supported between"},
      {"{{ 'x' | tojson(ensure_ascii=true) }}", SPILL_E_UNSUPPORTED, "ensure_ascii"},
      {"{{ raise_exception('nope') }}", SPILL_E_CONFIG, "nope"},
      {"{{ x.y }}", SPILL_E_CONFIG, "undefined"},
      {"{{ [1] | sort }}", SPILL_E_UNSUPPORTED, "sort"},
      {"{{ 1 + 'a' }}", SPILL_E_CONFIG, "operand"},
      // jinja2's integers are unbounded, ours 64-bit: overflow is an error
      // (the fuzzer found a signed-overflow UB here: fuzz/regressions/tok)
      {"{{ 9223372036854775807 * 791024275 }}", SPILL_E_CONFIG, "integer overflow"},
      {"{{ 9223372036854775807 + 1 }}", SPILL_E_CONFIG, "integer overflow"},
      {"{{ -9223372036854775807 - 2 }}", SPILL_E_CONFIG, "integer overflow"},
      {"{{ 3 ** 41 }}", SPILL_E_CONFIG, "integer overflow"},
      {"{{ 11110000000000000000791024275 }}", SPILL_E_FORMAT, "64 bits"},
      {"{{ 1e300 | int }}", SPILL_E_CONFIG, "64-bit"},
      {"{{ '99999999999999999999' | int }}", SPILL_E_CONFIG, "64-bit"},
  };
  for (const auto &c : cases) {
    char *out = nullptr;
    spill_err e{};
    EXPECT_EQ(spill_chat_render_json(c.tmpl, "{}", &out, &e), c.code) << c.tmpl;
    EXPECT_NE(std::string(e.msg).find(c.needle), std::string::npos) << c.tmpl << ": " << e.msg;
    EXPECT_EQ(out, nullptr);
  }
  char *out = nullptr;
  spill_err e{};
  EXPECT_EQ(spill_chat_render_json("x", "[1]", &out, &e), SPILL_E_FORMAT);
}

// The context is parsed by the one JSON layer (docs/RELIABILITY.md): a
// repeated key (cJSON rendered the first copy, jinja2 given Python's dict the
// last) and a \u0000 are refused by name.
TEST(ChatTemplateTest, ContextWithRepeatedKeysOrNulsIsRefusedByName) {
  char *out = nullptr;
  spill_err e{};
  EXPECT_EQ(spill_chat_render_json("{{ bos_token }}", R"({"bos_token": "<s>", "bos_token": "<b>"})", &out, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("chat context: bos_token: duplicate key"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_chat_render_json("{{ bos_token }}", R"({"bos_token": "<s>\u0000x"})", &out, &e),
            SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("(NUL) inside a string"), std::string::npos) << e.msg;
  ASSERT_EQ(spill_chat_render_json("{{ bos_token }}", R"({"bos_token": "<s>"})", &out, &e), SPILL_OK)
      << e.msg;
  EXPECT_STREQ(out, "<s>");
  free(out);
}

}  // namespace
