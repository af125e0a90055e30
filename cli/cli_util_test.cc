// cli/cli_util_test.cc: the CLI's paging warnings (issue 18). spill run
// warns once while it runs when the engine flags paging (the token
// callback's stats: EngineTest.PagingIsDetectedWhileRunning proves the flag
// comes up under real major faults), and the closing summary warns when a
// run took more major page faults than it decoded tokens. Each warning is
// checked to print its numbers and to stay silent below its threshold.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" {
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"
// cli_util.c asks the dispatcher (cli/spill_main.c) for the running command.
const cli_command *cli_current(void) { return nullptr; }
}

namespace {

// What fn printed to a FILE, and its return value.
template <typename Fn>
std::string Captured(Fn fn, int *ret) {
  char *buf = nullptr;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  *ret = fn(f);
  fclose(f);
  std::string s(buf, n);
  free(buf);
  return s;
}

TEST(CliUtilTest, PagingWarningAfterTheRunNeedsMoreMajorFaultsThanDecodedTokens) {
  spill_run_stats st = {};
  st.tokens_prefill = 4;
  st.tokens_decode = 10;
  int r = -1;
  for (uint64_t faults : {0ull, 9ull, 10ull}) {
    st.major_faults = faults;
    EXPECT_EQ(Captured([&](FILE *f) { return cli_warn_paging_after(f, &st); }, &r), "") << faults;
    EXPECT_EQ(r, 0) << faults;
  }
  st.major_faults = 11;
  std::string out = Captured([&](FILE *f) { return cli_warn_paging_after(f, &st); }, &r);
  EXPECT_EQ(r, 1);
  EXPECT_NE(out.find("WARNING: 11 major page faults during 14 tokens: the machine is paging"),
            std::string::npos)
      << out;
  st.tokens_decode = 0;  // nothing decoded: no per-token judgement
  st.major_faults = 1000;
  EXPECT_EQ(Captured([&](FILE *f) { return cli_warn_paging_after(f, &st); }, &r), "");
  EXPECT_EQ(r, 0);
}

TEST(CliUtilTest, PagingWarningWhileRunningComesOnceWhenTheEngineFlagsIt) {
  spill_run_stats ts = {};
  ts.paging_token = -1;
  int told = 0, r = -1;
  EXPECT_EQ(Captured([&](FILE *f) { return cli_warn_paging_live(f, nullptr, &told); }, &r), "");
  EXPECT_EQ(Captured([&](FILE *f) { return cli_warn_paging_live(f, &ts, &told); }, &r), "");
  EXPECT_EQ(r, 0);
  ts.paging = 1;
  ts.paging_token = 2;
  std::string out = Captured([&](FILE *f) { return cli_warn_paging_live(f, &ts, &told); }, &r);
  EXPECT_EQ(r, 1);
  EXPECT_EQ(told, 1);
  const std::string want = "WARNING: paging: " + std::to_string(SPILL_PAGING_TOKENS) +
                           " decode tokens in a row with >= " +
                           std::to_string(SPILL_PAGING_FAULTS_PER_TOKEN) +
                           " major page faults each (from token 2)";
  EXPECT_NE(out.find(want), std::string::npos) << out;
  // later tokens of the same run: said once
  EXPECT_EQ(Captured([&](FILE *f) { return cli_warn_paging_live(f, &ts, &told); }, &r), "");
  EXPECT_EQ(r, 0);
}

}  // namespace
