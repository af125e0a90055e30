// harness/emulate_ram_test.cc: the RAM-locking helper locks what it is asked
// to, releases it, refuses unsafe requests, and dies with its parent. The
// locks are 4 MiB: under the 8 MiB mlock cap of Bazel's sandbox, so they run there.
#include "harness/emulate_ram.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

// VmLck of pid in kB, or -1 when the process is gone (or a zombie, which
// holds no memory).
long VmLckKb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return -1;
  std::string line;
  long lck = -1;
  bool zombie = false;
  while (std::getline(f, line)) {
    if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) zombie = true;
    if (line.rfind("VmLck:", 0) == 0) lck = std::stol(line.substr(6));
  }
  return zombie ? -1 : lck;
}

}  // namespace

TEST(EmulateRamTest, LocksAndReleasesSmallSize) {
  spill_ramlock r;
  spill_err e = {};
  int rc = spill_ramlock_start(4ull << 20, &r, &e);
  if (rc == SPILL_E_IO && strstr(e.msg, "locking")) GTEST_SKIP() << "cannot mlock here: " << e.msg;
  ASSERT_EQ(rc, 0) << e.msg;
  EXPECT_GE(VmLckKb(r.pid), 4 * 1024);
  pid_t pid = r.pid;
  spill_ramlock_release(&r);
  EXPECT_EQ(r.pid, 0);
  EXPECT_EQ(VmLckKb(pid), -1);
}

TEST(EmulateRamTest, HelperDiesWhenTheRunnerIsKilled) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t runner = fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    close(p[0]);
    spill_ramlock r;
    spill_err e = {};
    pid_t helper = spill_ramlock_start(4ull << 20, &r, &e) == 0 ? r.pid : -1;
    if (write(p[1], &helper, sizeof helper) != sizeof helper) _exit(2);
    pause();  // until SIGKILL
    _exit(0);
  }
  close(p[1]);
  pid_t helper = -1;
  ASSERT_EQ(read(p[0], &helper, sizeof helper), (ssize_t)sizeof helper);
  close(p[0]);
  if (helper < 0) {
    kill(runner, SIGKILL);
    waitpid(runner, nullptr, 0);
    GTEST_SKIP() << "cannot mlock here";
  }
  EXPECT_GE(VmLckKb(helper), 4 * 1024);
  kill(runner, SIGKILL);
  waitpid(runner, nullptr, 0);
  long lck = 0;
  for (int i = 0; i < 200 && (lck = VmLckKb(helper)) != -1; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(lck, -1) << "helper " << helper << " outlived its runner";
  if (lck != -1) kill(helper, SIGKILL);
}

// The runner crashes (SIGABRT, as on an assert or a sanitizer report) while
// other threads of it are running, as the engine's I/O and compute threads
// would be: the helper still dies and nothing stays locked.
TEST(EmulateRamTest, HelperDiesWhenAMultiThreadedRunnerCrashes) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t runner = fork();
  ASSERT_GE(runner, 0);
  if (runner == 0) {
    close(p[0]);
    spill_ramlock r;
    spill_err e = {};
    pid_t helper = spill_ramlock_start(4ull << 20, &r, &e) == 0 ? r.pid : -1;
    std::thread worker([] {
      for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    if (write(p[1], &helper, sizeof helper) != sizeof helper) _exit(2);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    signal(SIGABRT, SIG_DFL);
    abort();  // the worker thread is still running
  }
  close(p[1]);
  pid_t helper = -1;
  ASSERT_EQ(read(p[0], &helper, sizeof helper), (ssize_t)sizeof helper);
  close(p[0]);
  if (helper < 0) {
    kill(runner, SIGKILL);
    waitpid(runner, nullptr, 0);
    GTEST_SKIP() << "cannot mlock here";
  }
  EXPECT_GE(VmLckKb(helper), 4 * 1024);
  int status = 0;
  waitpid(runner, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) << status;
  long lck = 0;
  for (int i = 0; i < 200 && (lck = VmLckKb(helper)) != -1; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(lck, -1) << "helper " << helper << " outlived its crashed runner";
  if (lck != -1) kill(helper, SIGKILL);
}

TEST(EmulateRamTest, RefusesToLeaveTheMachineWithoutMemory) {
  uint64_t lock = 0;
  spill_err e = {};
  // Emulating 256 MiB on any machine with more than ~1.3 GiB would lock
  // nearly all of it: refused.
  EXPECT_EQ(spill_ramlock_plan(256ull << 20, &lock, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("refusing"), std::string::npos) << e.msg;
  // Emulating more than the machine has is refused too.
  EXPECT_EQ(spill_ramlock_plan(1ull << 50, &lock, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("not below"), std::string::npos) << e.msg;
}

// A helper that dies (here SIGKILL, as the kernel's OOM killer sends it: the
// lock is the machine's largest process) is noticed: the check names the
// signal and clears the lock, so the runner records no run made without it.
TEST(EmulateRamTest, CheckNoticesAKilledHelper) {
  spill_ramlock r;
  spill_err e = {};
  // 4 MiB: under the 8 MiB mlock cap of Bazel's sandbox
  int rc = spill_ramlock_start(4ull << 20, &r, &e);
  if (rc == SPILL_E_IO && strstr(e.msg, "locking")) GTEST_SKIP() << "cannot mlock here: " << e.msg;
  ASSERT_EQ(rc, 0) << e.msg;
  EXPECT_EQ(spill_ramlock_check(&r, &e), 0) << e.msg;  // alive
  EXPECT_NE(r.pid, 0);
  pid_t pid = r.pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int got = 0;
  for (int i = 0; i < 500 && got == 0; i++) {  // the kill is asynchronous
    got = spill_ramlock_check(&r, &e);
    if (got == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got, SPILL_E_IO);
  EXPECT_NE(strstr(e.msg, "killed by signal 9"), nullptr) << e.msg;
  EXPECT_NE(strstr(e.msg, "OOM killer"), nullptr) << e.msg;
  EXPECT_EQ(r.pid, 0);
  EXPECT_EQ(VmLckKb(pid), -1);                 // reaped: no zombie left
  EXPECT_EQ(spill_ramlock_check(&r, &e), 0);  // nothing held: nothing to tell
  spill_ramlock_release(&r);                   // and releasing it is a no-op
}

TEST(EmulateRamTest, CheckWithoutAHelperIsQuiet) {
  spill_ramlock r = {};
  spill_err e = {};
  EXPECT_EQ(spill_ramlock_check(&r, &e), 0);
  EXPECT_EQ(spill_ramlock_check(nullptr, &e), 0);
}
