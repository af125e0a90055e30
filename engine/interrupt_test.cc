// engine/interrupt_test.cc: the stop flag (SIGINT in `spill run`, `spill
// exp`) is honoured during prefill, between chunks and between layers, so a
// long prompt stops within a second (it once ran on for minutes: the flag
// was only read between decoded tokens), with stats of what was done; the
// engine is usable afterwards (issue 19 item 5).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

std::string Nano() {
  static std::string dir;
  if (dir.empty()) {
    const char *t = std::getenv("TEST_TMPDIR");
    dir = std::string(t ? t : "/tmp") + "/nano-interrupt";
    spill_gen_request r = {};
    r.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen(dir.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  }
  return dir;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TEST(InterruptTest, StopDuringALongPrefillReturnsWithinASecond) {
  spill_config c;
  spill_config_default(&c);
  c.ctx = 8192;
  c.storage = SPILL_STORAGE_PAGECACHE;
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  // 6000 prompt tokens: several seconds of prefill on nano (attention over
  // a growing context), far more than the 0.3 s before the stop.
  std::vector<int> prompt(6000);
  for (size_t i = 0; i < prompt.size(); i++) prompt[i] = 32 + (int)(i * 7 % 200);
  volatile int stop = 0;
  std::atomic<double> t_stop{0};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    t_stop = Now();
    stop = 1;
  });
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  spill_run_stats st;
  int rc = spill_generate(eng, prompt.data(), (int)prompt.size(), 4, &s, nullptr, nullptr, &stop,
                          &st, &e);
  double t_ret = Now();
  stopper.join();
  EXPECT_EQ(rc, SPILL_E_INTERRUPTED) << e.msg;
  EXPECT_LT(t_ret - t_stop, 1.0) << "returned " << t_ret - t_stop << " s after the stop";
  EXPECT_NE(std::string(e.msg).find("of 6000 prompt tokens"), std::string::npos) << e.msg;
  EXPECT_LT(st.tokens_prefill, 6000);
  EXPECT_EQ(st.tokens_decode, 0);
  // The engine runs the next request from a clean state: same tokens as a
  // fresh engine.
  int short_prompt[5] = {40, 41, 42, 43, 44};
  std::vector<int> a, b;
  auto collect = [](void *u, int tok, const char *, const spill_run_stats *) {
    static_cast<std::vector<int> *>(u)->push_back(tok);
    return 0;
  };
  ASSERT_EQ(spill_generate(eng, short_prompt, 5, 8, &s, collect, &a, nullptr, &st, &e), SPILL_OK)
      << e.msg;
  spill_engine_close(eng);
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_generate(eng, short_prompt, 5, 8, &s, collect, &b, nullptr, &st, &e), SPILL_OK)
      << e.msg;
  EXPECT_EQ(a, b);
  spill_engine_close(eng);
}

TEST(InterruptTest, OneBigChunkIsAbandonedBetweenLayers) {
  // One chunk holds the whole prompt, so only the between-layers check can
  // stop it: the chunk is abandoned (no prompt token counted as done)
  // instead of finishing its layers.
  spill_config c;
  spill_config_default(&c);
  c.ctx = 4096;
  c.prefill_chunk = 4096;
  c.storage = SPILL_STORAGE_PAGECACHE;
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(Nano().c_str(), &c, &eng, &e), SPILL_OK) << e.msg;
  std::vector<int> prompt(4000);
  for (size_t i = 0; i < prompt.size(); i++) prompt[i] = 32 + (int)(i * 11 % 200);
  volatile int stop = 0;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = 1;
  });
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  spill_run_stats st;
  EXPECT_EQ(spill_generate(eng, prompt.data(), 4000, 4, &s, nullptr, nullptr, &stop, &st, &e),
            SPILL_E_INTERRUPTED);
  stopper.join();
  EXPECT_EQ(st.tokens_prefill, 0) << e.msg;
  EXPECT_NE(std::string(e.msg).find("stopped after 0 of 4000 prompt tokens"), std::string::npos)
      << e.msg;
  spill_engine_close(eng);
}

}  // namespace
