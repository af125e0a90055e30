// The engine's memory stays within the RAM budget during decode (issue: the
// engine stays inside its budget; everything it allocates is counted).
// Its own binary, so VmHWM covers only this test. What the process held
// before the engine opened is not the engine's: libc/libstdc++/gtest text and
// data (~4 MB) and heap the model generator (run first, in this process) left
// behind (7-12 MB measured, varying with how its threads' malloc arenas were
// used: under load the old whole-process check saw 102.5% and 106.2% of the
// budget). So: free heap is returned (malloc_trim), the peak is reset (write
// "5" to /proc/self/clear_refs), and the bound is
//   peak RSS <= budget + RSS before open + 1 MiB
// (1 MiB: the kernel's per-CPU RSS counters are approximate by up to 32
// pages per CPU). The model is mini with 24 experts per layer (~200 MB on
// disk, a few seconds to write).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <malloc.h>

#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

uint64_t StatusBytes(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t v = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) v = strtoull(line + strlen(key), nullptr, 10) * 1024;
  fclose(f);
  return v;
}

bool ResetPeak() {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

TEST(RssBudgetTest, PeakRssStaysWithinBudgetDuringDecode) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(t ? t : "/tmp") + "/mini24";
  spill_gen_request r = {};
  r.preset = "mini";
  r.experts = 24;
  spill_err e = {};
  ASSERT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
#if !defined(__OPTIMIZE__) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer configs build -O0 with instrumented code and runtimes
  // (ASan/TSan shadow memory, UBSan's larger text): their RSS is not the
  // engine's. The optimised build (./lab test) is the one judged.
  GTEST_SKIP() << "peak RSS is judged on the optimised, unsanitised build only";
#endif
  for (int ws : {1, 2}) {
    spill_config cfg;
    spill_config_default(&cfg);
    spill_plan p;
    ASSERT_EQ(spill_plan_model(dir.c_str(), cfg.ctx, cfg.threads, 0, 0, &p, &e), SPILL_OK);
    cfg.budget_bytes = p.floor + (uint64_t)ws * p.ws;
    malloc_trim(0);
    if (!ResetPeak()) GTEST_SKIP() << "cannot reset VmHWM (/proc/self/clear_refs)";
    uint64_t before = StatusBytes("VmRSS:");
    spill_engine *eng = nullptr;
    ASSERT_EQ(spill_engine_open(dir.c_str(), &cfg, &eng, &e), SPILL_OK) << e.msg;
    int toks[64], n = 0;
    ASSERT_EQ(spill_tokenize(eng, "The quick brown fox jumps", 1, toks, 64, &n, &e), SPILL_OK);
    spill_sampling s = {0.0f, 0, 1.0f, 1};
    spill_run_stats st;
    ASSERT_EQ(spill_generate(eng, toks, n, 48, &s, nullptr, nullptr, nullptr, &st, &e), SPILL_OK)
        << e.msg;
    uint64_t peak = StatusBytes("VmHWM:");
    const spill_plan *ep = spill_engine_plan(eng);
    // the cache really filled: more misses than slots
    EXPECT_GT(st.demand_misses, ep->cache_slots);
    std::printf("budget floor+%dws = %.1f MiB, RSS before open %.1f MiB, peak RSS %.1f MiB: "
                "engine %.1f MiB (%.2f%% of budget), %llu slots\n",
                ws, cfg.budget_bytes / 1048576.0, before / 1048576.0, peak / 1048576.0,
                (peak - before) / 1048576.0,
                100.0 * (double)(peak - before) / (double)cfg.budget_bytes,
                (unsigned long long)ep->cache_slots);
    EXPECT_LE(peak, cfg.budget_bytes + before + (1u << 20));
    spill_engine_close(eng);
  }
}

}  // namespace
