// harness/exp_files_enospc_test.cc: results writing when the disk is full.
//
// A full disk is provoked without root or a special filesystem: a forked
// child lowers RLIMIT_FSIZE and ignores SIGXFSZ, so writes past the limit
// fail with EFBIG exactly where ENOSPC would (a short write, then an
// error). The child does the writes and reports what it saw through a pipe;
// the parent (the gtest process, whose own output must not hit the limit)
// checks the files: an atomic write that fails leaves the old content and
// no temporary file; an append that fails leaves only whole lines, and the
// next append after space returns lands as a whole line, with no row lost
// or duplicated.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "harness/exp_files.h"

namespace {

std::string Dir(const std::string &name) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/" + name;
  std::string cmd = "rm -rf '" + d + "' && mkdir -p '" + d + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
  return d;
}

std::string ReadAll(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int CountEntries(const std::string &dir) {
  int n = 0;
  DIR *d = opendir(dir.c_str());
  while (struct dirent *e = readdir(d))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

// Runs fn in a child whose files may not grow past `limit` bytes; returns
// the status fn returned and its message.
template <class F>
std::pair<int, std::string> WithFileSizeLimit(rlim_t limit, F fn) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    spill_err e = {};
    int rc = fn(&e);
    char msg[sizeof e.msg + 16];
    int len = snprintf(msg, sizeof msg, "%d|%s", rc, e.msg);
    if (write(p[1], msg, (size_t)len) != len) _exit(4);
    _exit(0);
  }
  close(p[1]);
  char buf[1024] = {0};
  ssize_t n = read(p[0], buf, sizeof buf - 1);
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  if (n <= 0) return {1, "child reported nothing"};
  std::string s(buf, (size_t)n);
  size_t bar = s.find('|');
  return {std::atoi(s.substr(0, bar).c_str()), s.substr(bar + 1)};
}

TEST(ExpFilesEnospcTest, FailedAtomicWriteKeepsOldContentAndNoTemp) {
  std::string d = Dir("enospc-atomic");
  std::string f = d + "/table.md";
  spill_err e = {};
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "old\n", 4, &e), SPILL_OK) << e.msg;
  std::string big(64 * 1024, 'x');
  auto r = WithFileSizeLimit(16 * 1024, [&](spill_err *ce) {
    return spill_write_file_atomic(f.c_str(), big.data(), big.size(), ce);
  });
  EXPECT_EQ(r.first, SPILL_E_IO) << r.second;
  EXPECT_NE(r.second.find("File too large"), std::string::npos) << r.second;
  EXPECT_EQ(ReadAll(f), "old\n");
  EXPECT_EQ(CountEntries(d), 1) << "a temporary file was left behind";
}

TEST(ExpFilesEnospcTest, FailedAppendLeavesOnlyWholeLinesAndResumes) {
  std::string d = Dir("enospc-append");
  std::string f = d + "/runs.jsonl";
  spill_err e = {};
  ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"run\":0}", &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"run\":1}", &e), SPILL_OK) << e.msg;
  std::string before = ReadAll(f);
  // The third row crosses the limit in the middle: a short write, then EFBIG.
  std::string row2 = "{\"run\":2,\"pad\":\"" + std::string(4000, 'p') + "\"}";
  auto r = WithFileSizeLimit(before.size() + 100, [&](spill_err *ce) {
    return spill_exp_append_line(f.c_str(), row2.c_str(), ce);
  });
  EXPECT_EQ(r.first, SPILL_E_IO) << r.second;
  EXPECT_EQ(ReadAll(f), before) << "a torn row was left on disk";
  char **lines = nullptr;
  int n = 0;
  ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(n, 2);
  spill_exp_lines_free(lines, n);
  // Space is back: the row is appended whole, once.
  ASSERT_EQ(spill_exp_append_line(f.c_str(), row2.c_str(), &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(n, 3);
  EXPECT_EQ(std::string(lines[2]), row2);
  spill_exp_lines_free(lines, n);
}

}  // namespace
