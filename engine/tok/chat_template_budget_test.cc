// engine/tok/chat_template_budget_test.cc: chat templates are untrusted
// input (they come with downloaded models), so every render runs under a
// budget (spill_chat_budget, docs/RELIABILITY.md): the hostile templates of
// issue 26 (deep nesting that overflowed the C stack, runaway loops and
// growth) stop with their named status, cancellation stops a render within
// a bounded number of steps, and an allocation failure is out-of-memory.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/tok/spill_tok.h"

namespace {

std::string Repeat(const std::string &s, int n) {
  std::string r;
  r.reserve(s.size() * (size_t)n);
  for (int i = 0; i < n; i++) r += s;
  return r;
}

// Renders tmpl over {} with the default budget (or b); returns the status,
// e gets the detail.
int Render(const std::string &tmpl, spill_err *e, const spill_chat_budget *b = nullptr,
           std::string *out = nullptr) {
  char *o = nullptr;
  int rc = spill_chat_render_json_budget(tmpl.c_str(), "{}", b, &o, e);
  if (out && o) *out = o;
  if (rc != SPILL_OK) {
    EXPECT_EQ(o, nullptr) << tmpl.substr(0, 80);
  }
  free(o);
  return rc;
}

// The nesting of issue 26 item 1: each crashed spill run --chat / spill
// serve with SIGSEGV (stack overflow) before the budget.
TEST(ChatTemplateBudgetTest, DeepSyntaxFailsWithParseDepth) {
  const int N = 10000;
  std::string cases[] = {
      "{{ " + Repeat("(", 30000) + "1" + Repeat(")", 30000) + " }}",
      Repeat("{% if true %}", N) + "x" + Repeat("{% endif %}", N),
      Repeat("{% for i in [1] %}", N) + "x" + Repeat("{% endfor %}", N),
      "{{ 1" + Repeat(" + 1", N) + " }}",
      "{{ 'a'" + Repeat(" ~ 'a'", N) + " }}",
      "{{ x" + Repeat(".a", N) + " }}",
      "{{ 'a'" + Repeat(" | trim", N) + " }}",
      "{{ " + Repeat("-", 30000) + "1 }}",
      "{{ " + Repeat("not ", 30000) + "1 }}",
      "{{ " + Repeat("[", 30000) + Repeat("]", 30000) + " }}",
      "{{ " + Repeat("{'a': ", 30000) + "1" + Repeat("}", 30000) + " }}",
      "{{ " + Repeat("f(", 30000) + Repeat(")", 30000) + " }}",
      "{{ x" + Repeat("[0]", N) + " }}",
      "{{ 1" + Repeat(" if 1 else 1", N) + " }}",
  };
  for (const auto &t : cases) {
    spill_err e{};
    EXPECT_EQ(Render(t, &e), SPILL_E_TMPL_PARSE_DEPTH) << t.substr(0, 60) << ": " << e.msg;
    EXPECT_NE(std::string(e.msg).find("nested deeper than"), std::string::npos) << e.msg;
  }
}

// A list nested 50,000 deep, built one level per loop iteration (legal
// syntax, shallow tree), then printed, compared, searched or made JSON.
TEST(ChatTemplateBudgetTest, DeepValuesFailWithEvalDepth) {
  const std::string build =
      "{% set ns = namespace(l=[], m=[]) %}{% for i in range(50000) %}"
      "{% set ns.l = [ns.l] %}{% set ns.m = [ns.m] %}{% endfor %}";
  const char *uses[] = {"{{ ns.l }}", "{{ ns.l == ns.m }}", "{{ ns.l in [ns.m] }}",
                        "{{ ns.l | tojson }}", "{{ ns.l ~ '' }}", "{{ ns.l | string }}",
                        "{{ {ns.l: 1} }}", "{{ [ns.l] | join(',') }}",
                        "{{ [ns.l, 1] | tojson(indent=2) }}", "{{ ns.l != ns.m }}"};
  for (const char *u : uses) {
    spill_err e{};
    EXPECT_EQ(Render(build + u, &e), SPILL_E_TMPL_EVAL_DEPTH) << u << ": " << e.msg;
  }
  // shallow values are fine and match Python
  std::string out;
  spill_err e{};
  ASSERT_EQ(Render("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = [ns.l] %}"
                   "{% endfor %}{{ ns.l }} {{ ns.l | tojson }}",
                   &e, nullptr, &out),
            SPILL_OK)
      << e.msg;
  EXPECT_EQ(out, "[[[[]]]] [[[[]]]]");
}

// Issue 26 item 2: runaway templates stop with the named budget error
// instead of growing until something outside stops them.
TEST(ChatTemplateBudgetTest, RunawayTemplatesStopWithTheirBudget) {
  struct Case { const char *tmpl; int code; const char *needle; } cases[] = {
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
       SPILL_E_TMPL_STEPS, "steps"},
      {"{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% for j in range(100000) %}"
       "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxx' %}{% endfor %}{% endfor %}",
       SPILL_E_TMPL_MEMORY, "memory"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(100000) %}"
       "{% set ns.l = ns.l + ns.l %}{% endfor %}",
       SPILL_E_TMPL_MEMORY, "memory"},
      {"{% for i in range(100000) %}{% set s = 'x' * 16000000 %}{% endfor %}", SPILL_E_TMPL_MEMORY,
       "memory"},
      {"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", SPILL_E_TMPL_OUTPUT, "output"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{{ 'xxxxxxxxxxxx' }}{% endfor %}"
       "{% endfor %}",
       SPILL_E_TMPL_OUTPUT, "output"},
  };
  for (const auto &c : cases) {
    spill_err e{};
    EXPECT_EQ(Render(c.tmpl, &e), c.code) << c.tmpl << ": " << e.msg;
    EXPECT_NE(std::string(e.msg).find(c.needle), std::string::npos) << c.tmpl << ": " << e.msg;
  }
}

// Each limit is the caller's: a small budget stops a template the default
// budget renders, with that limit's status, and the limits are exact.
TEST(ChatTemplateBudgetTest, ExplicitLimitsAreHonouredExactly) {
  spill_chat_budget b{};
  b.max_output_bytes = 10;
  spill_err e{};
  std::string out;
  EXPECT_EQ(Render("{{ 'x' * 10 }}", &e, &b, &out), SPILL_OK) << e.msg;
  EXPECT_EQ(out, "xxxxxxxxxx");
  EXPECT_EQ(Render("{{ 'x' * 11 }}", &e, &b), SPILL_E_TMPL_OUTPUT);
  // a {% set %} block's capture counts against the output budget too
  EXPECT_EQ(Render("{% set x %}{{ 'x' * 11 }}{% endset %}", &e, &b), SPILL_E_TMPL_OUTPUT);

  spill_chat_budget d{};
  d.max_parse_depth = 5;
  EXPECT_EQ(Render("{{ ((1)) }}", &e, &d), SPILL_OK) << e.msg;
  EXPECT_EQ(Render("{{ ((((((1)))))) }}", &e, &d), SPILL_E_TMPL_PARSE_DEPTH);

  spill_chat_budget v{};
  v.max_eval_depth = 40;
  const std::string nest = "{% set ns = namespace(l=[]) %}{% for i in range(60) %}{% set ns.l = [ns.l] %}"
                           "{% endfor %}{{ ns.l }}";
  EXPECT_EQ(Render(nest, &e, nullptr), SPILL_OK) << e.msg;
  EXPECT_EQ(Render(nest, &e, &v), SPILL_E_TMPL_EVAL_DEPTH);
  EXPECT_NE(std::string(e.msg).find("40"), std::string::npos) << e.msg;

  spill_chat_budget s{};
  s.max_steps = 1000;
  EXPECT_EQ(Render("{% for i in range(10) %}{{ i }}{% endfor %}", &e, &s), SPILL_OK) << e.msg;
  EXPECT_EQ(Render("{% for i in range(5000) %}{% endfor %}", &e, &s), SPILL_E_TMPL_STEPS);

  spill_chat_budget m{};
  m.max_memory_bytes = 1 << 20;
  EXPECT_EQ(Render("{% set s = 'x' * 100000 %}{{ s | length }}", &e, &m), SPILL_OK) << e.msg;
  EXPECT_EQ(Render("{% set s = 'x' * 2000000 %}", &e, &m), SPILL_E_TMPL_MEMORY);
  // a big temporary (a list printed to a string) is bounded by the same figure
  EXPECT_EQ(Render("{% set s = 'x' * 300000 %}{% set l = [s, s, s, s, s] %}{{ l | length }}", &e, &m),
            SPILL_OK)
      << e.msg;
  EXPECT_EQ(Render("{% set s = 'x' * 300000 %}{% set l = [s, s, s, s, s] %}{% set t = l | string %}",
                   &e, &m),
            SPILL_E_TMPL_MEMORY);
}

// The report: an allocation failure inside rendering came back as
// "unsupported operand types for +: 'NoneType'" (the failed string became
// None). Exceeding the memory budget takes the same path as malloc failing.
TEST(ChatTemplateBudgetTest, AllocationFailureIsNamedNotATypeError) {
  spill_chat_budget m{};
  m.max_memory_bytes = 4 << 20;
  spill_err e{};
  const char *t =
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
      "{% set ns.s = (ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') + 'y' %}{% endfor %}";
  EXPECT_EQ(Render(t, &e, &m), SPILL_E_TMPL_MEMORY) << e.msg;
  EXPECT_EQ(std::string(e.msg).find("NoneType"), std::string::npos) << e.msg;
}

#if defined(__SANITIZE_ADDRESS__)
#define SPILL_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPILL_UNDER_ASAN 1
#endif
#endif

// A real malloc failure (address space capped in a child process) is
// SPILL_E_NOMEM with "out of memory", never a type error.
TEST(ChatTemplateBudgetTest, MallocFailureIsOutOfMemory) {
#ifdef SPILL_UNDER_ASAN
  GTEST_SKIP() << "ASan reserves terabytes of address space; RLIMIT_AS cannot cap it";
#else
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    // what the process maps now, plus 96 MiB
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) _exit(3);
    fclose(f);
    rl.rlim_cur = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (96ul << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
    spill_chat_budget big{};
    big.max_memory_bytes = (size_t)1 << 40;
    big.max_output_bytes = (size_t)1 << 40;
    spill_err e{};
    char *o = nullptr;
    int rc = spill_chat_render_json_budget(
        "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
        "{% set ns.s = (ns.s ~ 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') + 'y' %}"
        "{% endfor %}",
        "{}", &big, &o, &e);
    char msg[600];
    snprintf(msg, sizeof msg, "%d %s", rc, e.msg);
    if (write(fds[1], msg, strlen(msg)) < 0) _exit(5);
    _exit(0);
  }
  close(fds[1]);
  char buf[600] = {0};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  ASSERT_GT(n, 0);
  EXPECT_EQ(atoi(buf), SPILL_E_NOMEM) << buf;
  EXPECT_NE(std::string(buf).find("out of memory"), std::string::npos) << buf;
  EXPECT_EQ(std::string(buf).find("NoneType"), std::string::npos) << buf;
#endif
}

struct Poll {
  int calls = 0, stop_at = 0;
};
int CountingCancel(void *user) {
  Poll *p = static_cast<Poll *>(user);
  return ++p->calls >= p->stop_at;
}

// Cancellation is polled every SPILL_CHAT_POLL_STEPS steps: a callback that
// says stop on its 3rd call stops an endless render there; the steps a
// render may take between polls are bounded, whatever it does.
TEST(ChatTemplateBudgetTest, CancelCallbackStopsTheRenderAtItsPoll) {
  const char *loops[] = {
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
      "{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{% if s == s ~ '' %}{% endif %}"
      "{% endfor %}",
      "{% set s = 'x' * 16000000 %}{% for i in range(100000) %}{{ 'y' in s }}{% endfor %}",
  };
  for (const char *t : loops) {
    Poll p;
    p.stop_at = 3;
    spill_chat_budget b{};
    b.cancel = CountingCancel;
    b.cancel_user = &p;
    b.max_steps = 1ull << 60;
    b.max_output_bytes = (size_t)1 << 40;
    b.max_memory_bytes = (size_t)1 << 40;
    spill_err e{};
    EXPECT_EQ(Render(t, &e, &b), SPILL_E_INTERRUPTED) << t << ": " << e.msg;
    EXPECT_EQ(p.calls, 3) << t;
    EXPECT_NE(std::string(e.msg).find("cancelled"), std::string::npos) << e.msg;
  }
}

struct Flagger {
  volatile int *flag;
  int ms;
};
void *SetFlagLater(void *arg) {
  Flagger *f = static_cast<Flagger *>(arg);
  struct timespec ts = {0, f->ms * 1000000L};
  nanosleep(&ts, nullptr);
  *f->flag = 1;
  return nullptr;
}
double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// Ctrl-C in spill run --chat / spill chat sets a flag; the render sees it
// at its next poll. Timing on a loaded machine is loose: the test asks for
// the stop within 2 s of the flag (a poll is a few thousand steps, well
// under a millisecond when the machine is idle).
TEST(ChatTemplateBudgetTest, StopFlagFromAnotherThreadStopsTheRender) {
  volatile int flag = 0;
  spill_chat_budget b{};
  b.stop_flag = &flag;
  b.max_steps = 1ull << 60;
  b.max_output_bytes = (size_t)1 << 40;
  Flagger f{&flag, 50};
  pthread_t th;
  double t0 = Now();
  ASSERT_EQ(pthread_create(&th, nullptr, SetFlagLater, &f), 0);
  spill_err e{};
  int rc = Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                  &e, &b);
  double dt = Now() - t0;
  pthread_join(th, nullptr);
  EXPECT_EQ(rc, SPILL_E_INTERRUPTED) << e.msg;
  EXPECT_LT(dt, 2.0);
}

// The defaults leave real templates alone: the messages API under the
// default budget equals the budget-less call, and each limit has a default.
TEST(ChatTemplateBudgetTest, DefaultsAreFilledAndZeroMeansDefault) {
  spill_chat_budget d;
  spill_chat_budget_default(&d);
  EXPECT_GT(d.max_parse_depth, 0);
  EXPECT_GT(d.max_eval_depth, 0);
  EXPECT_GT(d.max_steps, 0u);
  EXPECT_GT(d.max_output_bytes, 0u);
  EXPECT_GT(d.max_memory_bytes, 0u);
  EXPECT_EQ(d.stop_flag, nullptr);
  EXPECT_EQ(d.cancel, nullptr);
  for (int c = SPILL_E_TMPL_PARSE_DEPTH; c >= SPILL_E_TMPL_MEMORY; c--)
    EXPECT_STRNE(spill_status_name(c), "SPILL_E_UNKNOWN");
}

}  // namespace
