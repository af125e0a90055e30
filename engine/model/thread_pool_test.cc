// engine/model/thread_pool_test.cc: every task runs exactly once per job,
// across many back-to-back jobs (the pattern of a decode step); steps of
// one job run in order as one dispatch.
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

// spill_pool_run_steps: every task of every step runs once, no task of a
// step starts before the step before it has finished (each task checks the
// earlier step's full count), and the whole job is one dispatch, however
// many steps (with one thread, or no step of more than one task, none).
struct StepsJob {
  std::atomic<int> done[4];
  std::atomic<int> early{0};
  std::vector<std::atomic<int>> *hits;
  int n[4];
  int base[4];
};
template <int S>
void StepTask(void *ctx, int task, int thread) {
  (void)thread;
  StepsJob *j = static_cast<StepsJob *>(ctx);
  if (S > 0 && j->done[S - 1].load() != j->n[S - 1]) j->early++;
  // a little work so the threads overlap
  volatile double x = 0;
  for (int i = 0; i < 200 * (1 + task % 3); i++) x = x + i;
  (*j->hits)[j->base[S] + task]++;
  j->done[S]++;
}

TEST(ThreadPoolTest, StepsRunInOrderAsOneDispatch) {
  const spill_pool_fn fns[4] = {StepTask<0>, StepTask<1>, StepTask<2>, StepTask<3>};
  for (int nt : {1, 2, 3}) {
    spill_pool *p = nullptr;
    ASSERT_EQ(spill_pool_open(nt, &p, nullptr), SPILL_OK);
    for (int rep = 0; rep < 500; rep++) {
      StepsJob j;
      const int n[4] = {1 + rep % 9, 1, rep % 3, 2 + rep % 17};  // incl. 1-task and empty steps
      int total = 0;
      for (int s = 0; s < 4; s++) {
        j.done[s] = 0;
        j.n[s] = n[s];
        j.base[s] = total;
        total += n[s];
      }
      std::vector<std::atomic<int>> hits(total);
      for (auto &h : hits) h = 0;
      j.hits = &hits;
      spill_pool_step st[4];
      for (int s = 0; s < 4; s++) st[s] = {fns[s], &j, n[s]};
      const uint64_t d0 = spill_pool_dispatches(p);
      spill_pool_run_steps(p, st, 4);
      EXPECT_EQ(spill_pool_dispatches(p) - d0, nt == 1 ? 0u : 1u);
      for (int i = 0; i < total; i++) ASSERT_EQ(hits[i].load(), 1) << "rep " << rep << " task " << i;
      ASSERT_EQ(j.early.load(), 0) << "rep " << rep << ": a step started before the one before it ended";
    }
    // no step of more than one task: inline, no dispatch
    StepsJob j;
    std::vector<std::atomic<int>> hits(3);
    for (auto &h : hits) h = 0;
    for (int s = 0; s < 4; s++) j.done[s] = 0, j.n[s] = s < 3 ? 1 : 0, j.base[s] = s < 3 ? s : 3;
    j.hits = &hits;
    spill_pool_step st[4];
    for (int s = 0; s < 4; s++) st[s] = {fns[s], &j, j.n[s]};
    const uint64_t d0 = spill_pool_dispatches(p);
    spill_pool_run_steps(p, st, 4);
    EXPECT_EQ(spill_pool_dispatches(p), d0);
    for (int i = 0; i < 3; i++) EXPECT_EQ(hits[i].load(), 1);
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
