// engine/model/thread_pool_test.cc: every task runs exactly once per job,
// across many back-to-back jobs (the pattern of a decode step).
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "engine/model/thread_pool.h"

namespace {

struct Job {
  std::vector<std::atomic<int>> *hits;
  std::atomic<int> *bad_thread;
  int n_threads;
};

void Task(void *ctx, int task, int thread) {
  Job *j = static_cast<Job *>(ctx);
  (*j->hits)[task]++;
  if (thread < 0 || thread >= j->n_threads) (*j->bad_thread)++;
}

TEST(ThreadPoolTest, RunsEveryTaskExactlyOnceOverManyJobs) {
  for (int nt : {1, 2, 3}) {
    spill_pool *p = nullptr;
    ASSERT_EQ(spill_pool_open(nt, &p, nullptr), SPILL_OK);
    EXPECT_EQ(spill_pool_n_threads(p), nt);
    std::atomic<int> bad{0};
    for (int rep = 0; rep < 2000; rep++) {
      const int n = 1 + rep % 37;
      std::vector<std::atomic<int>> hits(n);
      for (auto &h : hits) h = 0;
      Job j = {&hits, &bad, nt};
      spill_pool_run(p, Task, &j, n);
      for (int i = 0; i < n; i++) ASSERT_EQ(hits[i].load(), 1) << "rep " << rep << " task " << i;
    }
    EXPECT_EQ(bad.load(), 0);
    spill_pool_close(p);
  }
}

TEST(ThreadPoolTest, RejectsBadThreadCount) {
  spill_pool *p = nullptr;
  spill_err e = {};
  EXPECT_EQ(spill_pool_open(0, &p, &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(p, nullptr);
}

}  // namespace
