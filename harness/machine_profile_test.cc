// harness/machine_profile_test.cc: the machine profile (cgroup + wired
// ballast + swap) set up around a process that exceeds it, and cleaned up
// after a runner killed with SIGKILL. Needs root and a writable memory
// cgroup: the target runs outside Bazel's sandbox (tag no-sandbox), where
// the cgroup tree is read-only; elsewhere each case skips and says why.
#include "harness/machine_profile.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace {

std::string TmpDir(const char *leaf) {
  const char *t = getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/" + leaf;
  mkdir(d.c_str(), 0700);
  return d;
}

std::string ReadFile(const std::string &path) {
  std::string out;
  FILE *f = fopen(path.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

bool HasPid(const std::string &procs, pid_t pid) {
  std::string p = std::to_string(pid);
  size_t at = 0;
  while ((at = procs.find(p, at)) != std::string::npos) {
    bool start = at == 0 || procs[at - 1] == '\n';
    bool end = at + p.size() == procs.size() || procs[at + p.size()] == '\n';
    if (start && end) return true;
    at += p.size();
  }
  return false;
}

// Why the profile cannot be set up here ("" = it can): probes with a
// profile that needs no swap and no ballast.
std::string Unavailable() {
  if (geteuid() != 0) return "not root";
  spill_machine m;
  spill_machine_spec s = {256ull << 20, 0, 0, -1};
  spill_err e = {};
  if (spill_machine_open(&s, ".", &m, &e) < 0) return e.msg;
  spill_machine_close(&m);
  return "";
}

bool SwapActive(const char *path) {
  FILE *f = fopen("/proc/swaps", "r");
  if (!f) return false;
  char line[4096];
  bool found = false;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, path, strlen(path)) && (line[strlen(path)] == ' ' || line[strlen(path)] == '\t'))
      found = true;
  fclose(f);
  return found;
}

TEST(MachineProfileTest, RefusesImpossibleSpecsByName) {
  spill_machine m;
  spill_err e = {};
  spill_machine_spec s = {64ull << 20, 64ull << 20, 0, -1};
  EXPECT_EQ(spill_machine_open(&s, ".", &m, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("machine.wired"), std::string::npos) << e.msg;
  s = {0, 0, 0, -1};
  EXPECT_EQ(spill_machine_open(&s, ".", &m, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("machine.ram"), std::string::npos) << e.msg;
  s = {64ull << 20, 0, 0, 300};
  EXPECT_EQ(spill_machine_open(&s, ".", &m, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("swappiness"), std::string::npos) << e.msg;
}

// A 64 MiB machine with 16 MiB wired and 256 MiB of swap: touching 160 MiB
// inside it must push pages out to swap (and not kill the process), and
// closing must leave no cgroup, swap file or state file behind.
TEST(MachineProfileTest, ProcessAboveTheLimitSwapsAndCloseUndoesAll) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  std::string state = TmpDir("state-swap");
  setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
  std::string swapdir = TmpDir("swap");
  spill_machine m;
  spill_err e = {};
  spill_machine_spec s = {64ull << 20, 16ull << 20, 256ull << 20, 60};
  ASSERT_EQ(spill_machine_open(&s, swapdir.c_str(), &m, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(m.limit_ram, 64ull << 20);
  EXPECT_EQ(m.limit_ram_swap, m.cg_version == 1 ? (320ull << 20) : (320ull << 20));
  EXPECT_GE(m.swap_total, 256ull << 20);
  EXPECT_GT(m.ballast.pid, 0);
  std::string cg = m.cg_dir, sw = m.swap_file;
  struct stat st;
  EXPECT_EQ(stat(cg.c_str(), &st), 0);
  // the ballast is inside; the caller is not inside until it enters, and
  // then it is the OOM killer's first choice
  std::string procs = ReadFile(cg + "/cgroup.procs");
  EXPECT_TRUE(HasPid(procs, m.ballast.pid)) << procs;
  EXPECT_FALSE(HasPid(procs, getpid())) << procs;
  ASSERT_EQ(spill_machine_enter(&m, &e), SPILL_OK) << e.msg;
  EXPECT_TRUE(HasPid(ReadFile(cg + "/cgroup.procs"), getpid()));
  EXPECT_EQ(ReadFile("/proc/self/oom_score_adj"), "1000\n");
  spill_machine_counters a, b;
  ASSERT_EQ(spill_machine_sample(&m, &a, &e), SPILL_OK) << e.msg;
  const size_t n = 160u << 20;
  volatile char *p = static_cast<volatile char *>(malloc(n));
  ASSERT_NE(p, nullptr);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < n; i += 4096) p[i] = static_cast<char>(i >> 12);
  ASSERT_EQ(spill_machine_sample(&m, &b, &e), SPILL_OK) << e.msg;
  // every page still holds what was written (swapped out and back in)
  size_t bad = 0;
  for (size_t i = 0; i < n; i += 4096) bad += p[i] != static_cast<char>(i >> 12);
  EXPECT_EQ(bad, 0u);
  free(const_cast<char *>(p));
  EXPECT_GT(b.swap_outs - a.swap_outs, 0u) << "no page went to swap";
  EXPECT_GT(b.failcnt, a.failcnt) << "the limit was never reached";
  EXPECT_LE(b.usage, 64ull << 20);
  EXPECT_GT(b.usage_swap, b.usage) << "nothing of the cgroup is in swap";
  spill_machine_close(&m);
  EXPECT_NE(stat(cg.c_str(), &st), 0) << cg << " left behind";
  if (!sw.empty()) {
    EXPECT_FALSE(SwapActive(sw.c_str()));
    EXPECT_NE(stat(sw.c_str(), &st), 0) << sw << " left behind";
  }
  char what[1024];
  EXPECT_EQ(spill_machine_reap_stale(what, sizeof what, &e), 0) << what;
}

// A swap file the kernel will not let go of (here: a path that cannot be
// unlinked, a non-empty directory) is not forgotten: close keeps the state
// file for the next reap and says what it left.
TEST(MachineProfileTest, CloseKeepsTheStateOfWhatItCouldNotRemove) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  std::string state = TmpDir("state-left");
  setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
  std::string stuck = TmpDir("stuck-swap");
  std::string inner = stuck + "/x";
  ASSERT_EQ(mkdir(inner.c_str(), 0700), 0);
  spill_machine m;
  spill_err e = {};
  spill_machine_spec s = {64ull << 20, 0, 0, -1};
  ASSERT_EQ(spill_machine_open(&s, ".", &m, &e), SPILL_OK) << e.msg;
  std::string st = m.state_file;
  snprintf(m.swap_file, sizeof m.swap_file, "%s", stuck.c_str());
  spill_machine_close(&m);
  EXPECT_NE(std::string(m.leftover).find(stuck), std::string::npos) << m.leftover;
  struct stat sb;
  EXPECT_EQ(stat(st.c_str(), &sb), 0) << "the state file should stay for the next reap";
  unlink(st.c_str());
  rmdir(inner.c_str());
  // a close that removes everything leaves nothing to say
  ASSERT_EQ(spill_machine_open(&s, ".", &m, &e), SPILL_OK) << e.msg;
  st = m.state_file;
  spill_machine_close(&m);
  EXPECT_STREQ(m.leftover, "");
  EXPECT_NE(stat(st.c_str(), &sb), 0);
}

// A runner killed with SIGKILL while its machine is up leaves a cgroup, a
// ballast and a swap file; the next reap removes them and says so.
TEST(MachineProfileTest, KilledRunnerIsCleanedUpByTheNextReap) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  std::string state = TmpDir("state-kill");
  setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
  std::string swapdir = TmpDir("swap-kill");
  int pfd[2];
  ASSERT_EQ(pipe(pfd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pfd[0]);
    spill_machine m;
    spill_err e = {};
    // more swap than the machine has free, so a file is made
    spill_machine_spec s = {64ull << 20, 8ull << 20, 64ull << 30, -1};
    uint64_t t = 0;
    FILE *f = fopen("/proc/swaps", "r");
    char line[512];
    unsigned long long sz, used;
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "%*s %*s %llu %llu", &sz, &used) == 2) t += (sz - used) * 1024ull;
    if (f) fclose(f);
    s.swap = t + (32ull << 20);
    if (spill_machine_open(&s, swapdir.c_str(), &m, &e) < 0) {
      dprintf(pfd[1], "E%s\n", e.msg);
      _exit(1);
    }
    dprintf(pfd[1], "%s\n%s\n%d\n", m.cg_dir, m.swap_file, (int)m.ballast.pid);
    for (;;) pause();
  }
  close(pfd[1]);
  char buf[8192] = {0};
  size_t got = 0;
  ssize_t r;
  while ((r = read(pfd[0], buf + got, sizeof buf - 1 - got)) > 0) {
    got += static_cast<size_t>(r);
    if (std::string(buf).find('\n') != std::string::npos && std::count(buf, buf + got, '\n') >= 3) break;
    if (buf[0] == 'E' && strchr(buf, '\n')) break;
  }
  close(pfd[0]);
  ASSERT_NE(buf[0], 'E') << buf + 1;
  std::string s(buf);
  std::string cg = s.substr(0, s.find('\n'));
  s = s.substr(s.find('\n') + 1);
  std::string sw = s.substr(0, s.find('\n'));
  pid_t ballast = atoi(s.substr(s.find('\n') + 1).c_str());
  ASSERT_FALSE(sw.empty());
  ASSERT_TRUE(SwapActive(sw.c_str()));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  spill_err e = {};
  char what[2048];
  EXPECT_EQ(spill_machine_reap_stale(what, sizeof what, &e), 1) << e.msg;
  EXPECT_NE(std::string(what).find("cleaned up after runner pid " + std::to_string(child)), std::string::npos)
      << what;
  EXPECT_NE(std::string(what).find("removed"), std::string::npos) << what;
  EXPECT_NE(std::string(what).find("turned off and deleted"), std::string::npos) << what;
  struct stat st;
  EXPECT_NE(stat(cg.c_str(), &st), 0) << cg;
  EXPECT_FALSE(SwapActive(sw.c_str()));
  EXPECT_NE(stat(sw.c_str(), &st), 0) << sw;
  // the ballast died with its runner (PR_SET_PDEATHSIG) or with the cgroup
  for (int i = 0; i < 100 && kill(ballast, 0) == 0; i++) usleep(10000);
  EXPECT_NE(kill(ballast, 0), 0) << "ballast " << ballast << " survived";
  EXPECT_EQ(spill_machine_reap_stale(what, sizeof what, &e), 0) << what;
}

// A swap directory given relative to the working directory (as the runner
// gives its results directory): the area is still turned off and deleted at
// close (a relative name once left a 16 GiB swap file on).
TEST(MachineProfileTest, RelativeSwapDirectoryIsTurnedOffAndDeleted) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  std::string state = TmpDir("state-rel");
  setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
  std::string base = TmpDir("rel");
  char old[4096];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  ASSERT_EQ(chdir(base.c_str()), 0);
  mkdir("swaprel", 0700);
  uint64_t total, used;
  spill_machine_swaps(&total, &used, nullptr, 0);
  spill_machine m;
  spill_err e = {};
  spill_machine_spec s = {64ull << 20, 0, total - used + (32ull << 20), -1};
  int rc = spill_machine_open(&s, "swaprel", &m, &e);
  std::string sw = m.swap_file;
  spill_machine_close(&m);
  ASSERT_EQ(chdir(old), 0);
  ASSERT_EQ(rc, SPILL_OK) << e.msg;
  ASSERT_FALSE(sw.empty());
  EXPECT_EQ(sw[0], '/') << sw;
  EXPECT_FALSE(SwapActive(sw.c_str())) << sw << " still active";
  struct stat st;
  EXPECT_NE(stat(sw.c_str(), &st), 0) << sw << " left behind";
}

// A cgroup of ours whose runner died and whose state file is gone (a killed
// test's temporary state directory) is found and removed by the next reap.
TEST(MachineProfileTest, OrphanCgroupWithoutStateFileIsReaped) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  std::string state = TmpDir("state-orphan");
  setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
  int ver;
  char home[4096];
  spill_err e = {};
  ASSERT_EQ(spill_machine_probe(&ver, home, sizeof home, &e), SPILL_OK) << e.msg;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  std::string cg = std::string(home) + "/spill-machine-" + std::to_string(dead) + "-7";
  ASSERT_EQ(mkdir(cg.c_str(), 0755), 0) << cg;
  char what[2048];
  EXPECT_GE(spill_machine_reap_stale(what, sizeof what, &e), 1) << e.msg;
  EXPECT_NE(std::string(what).find(cg), std::string::npos) << what;
  struct stat st;
  EXPECT_NE(stat(cg.c_str(), &st), 0) << cg << " left behind";
}

}  // namespace
