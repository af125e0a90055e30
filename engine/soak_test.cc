// engine/soak_test.cc: a soak of the whole engine (manual target; see
// docs/RELIABILITY.md): 10,000 decode tokens on the nano model through one
// engine, in generate calls of up to 1000 tokens with sampling (so routing
// varies and the expert cache keeps evicting), with a small cache.
//
// Checked: every call succeeds and RSS is flat: VmRSS after the first
// 1,000 tokens (warm: KV cache, slots and tables allocated) and at the end
// differ by less than 2 MiB. Leaks are checked by running the same target
// under --config=asan (LeakSanitizer at exit); there the RSS bound is not
// asserted (ASan's quarantine holds freed memory), only printed.
//   bazel test //engine:soak_test                 (RSS)
//   bazel test --config=asan //engine:soak_test   (leaks)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

uint64_t StatusBytes(const char *key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + strlen(key), nullptr, 10) * 1024;
  return 0;
}

int Count(void *user, int, const char *, const spill_run_stats *) {
  ++*static_cast<int *>(user);
  return 0;
}

TEST(SoakTest, TenThousandDecodeTokensWithFlatRss) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/soak-nano";
  spill_gen_request r = {};
  r.preset = "nano";
  spill_err e = {};
  ASSERT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  spill_config c;
  spill_config_default(&c);
  c.ctx = 1100;
  c.cache_slots = 12;  // of 48 experts: constant eviction
  c.lookahead = 2;
  c.verify = 1;
  spill_engine *eng = nullptr;
  ASSERT_EQ(spill_engine_open(dir.c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  int toks[64], n = 0;
  ASSERT_EQ(spill_tokenize(eng, "Soak: the same engine, token after token", 1, toks, 64, &n, &e),
            SPILL_OK);
  int total = 0, calls = 0;
  uint64_t rss_warm = 0;
  while (total < 10000) {
    spill_sampling s = {0.9f, 40, 0.95f, (uint64_t)calls + 1};
    spill_run_stats st;
    int made = 0;
    int rc = spill_generate(eng, toks, n, 1000, &s, Count, &made, nullptr, &st, &e);
    ASSERT_EQ(rc, SPILL_OK) << e.msg;
    ASSERT_GT(made, 0);
    total += st.tokens_decode;
    calls++;
    if (!rss_warm && total >= 1000) rss_warm = StatusBytes("VmRSS:");
  }
  uint64_t rss_end = StatusBytes("VmRSS:");
  std::printf("soak: %d decode tokens in %d calls; VmRSS after 1000 tokens %.2f MiB, at end "
              "%.2f MiB (delta %+.2f MiB), VmHWM %.2f MiB\n",
              total, calls, rss_warm / 1048576.0, rss_end / 1048576.0,
              ((double)rss_end - (double)rss_warm) / 1048576.0, StatusBytes("VmHWM:") / 1048576.0);
  spill_engine_close(eng);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT((double)rss_end, (double)rss_warm + 2.0 * 1048576.0) << "RSS grew during the soak";
#endif
}

}  // namespace
