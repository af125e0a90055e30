// Tests for engine/base/safe_file: FIFOs and directories are refused by kind
// without blocking, writes never follow a symlink, paths are never cut.
#include "engine/base/safe_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace {

std::string TmpDir(const char *name) {
  const char *t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/safe_file_" + name;
  mkdir(d.c_str(), 0755);
  return d;
}

void Put(const std::string &p, const std::string &s) {
  FILE *f = fopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fwrite(s.data(), 1, s.size(), f);
  fclose(f);
}

std::string Get(const std::string &p) {
  FILE *f = fopen(p.c_str(), "rb");
  if (!f) return "<absent>";
  std::string s;
  char b[256];
  size_t n;
  while ((n = fread(b, 1, sizeof b, f)) > 0) s.append(b, n);
  fclose(f);
  return s;
}

// A hang is a failure: the alarm kills the test instead of Bazel's timeout.
struct NoHang {
  NoHang() { alarm(20); }
  ~NoHang() { alarm(0); }
};

TEST(SafeFileTest, FifoIsRefusedByKindWithoutBlocking) {
  NoHang guard;
  std::string d = TmpDir("fifo");
  std::string f = d + "/experts-000.bin";
  unlink(f.c_str());
  ASSERT_EQ(mkfifo(f.c_str(), 0644), 0);
  spill_err e = {};
  int fd = -1;
  EXPECT_EQ(spill_file_open_read(f.c_str(), 0, &fd, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), f + ": is a FIFO, not a regular file");
  EXPECT_EQ(fd, -1);
  char *buf = nullptr;
  EXPECT_EQ(spill_read_file(f.c_str(), 1 << 20, &buf, nullptr, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("is a FIFO"), std::string::npos) << e.msg;
  // writing: no reader (ENXIO) and with a reader, both refused by kind
  EXPECT_EQ(spill_file_open_write(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644, &fd, &e),
            SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("is a FIFO"), std::string::npos) << e.msg;
  int rd = open(f.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0);
  EXPECT_EQ(spill_file_open_write(f.c_str(), O_WRONLY | O_APPEND, 0644, &fd, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("is a FIFO"), std::string::npos) << e.msg;
  close(rd);
  EXPECT_EQ(spill_write_file_atomic((d + "/x").c_str(), "a", 1, &e), SPILL_OK);
}

TEST(SafeFileTest, DirectoryAndMissingFileAreNamed) {
  std::string d = TmpDir("dir");
  spill_err e = {};
  int fd = -1;
  EXPECT_EQ(spill_file_open_read(d.c_str(), 0, &fd, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), d + ": is a directory, not a regular file");
  EXPECT_EQ(spill_file_open_read((d + "/none").c_str(), 0, &fd, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("No such file"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_file_open_read("/dev/null", 0, &fd, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), "/dev/null: is a character device, not a regular file");
}

TEST(SafeFileTest, ReadFileGivesTheRealLengthAndCapsTheSize) {
  std::string d = TmpDir("read");
  std::string f = d + "/runs.jsonl";
  Put(f, std::string("ab\0cd\n", 6));
  char *buf = nullptr;
  size_t n = 0;
  spill_err e = {};
  ASSERT_EQ(spill_read_file(f.c_str(), 100, &buf, &n, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(n, 6u);
  EXPECT_EQ(std::string(buf, n), std::string("ab\0cd\n", 6));
  EXPECT_EQ(buf[n], '\0');
  free(buf);
  EXPECT_EQ(spill_read_file(f.c_str(), 5, &buf, &n, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), f + ": larger than 5 bytes");
  Put(f, "");
  ASSERT_EQ(spill_read_file(f.c_str(), 5, &buf, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 0u);
  free(buf);
}

TEST(SafeFileTest, WritesNeverFollowASymlink) {
  std::string d = TmpDir("link");
  std::string victim = d + "/victim", lk = d + "/runs.jsonl.lock";
  Put(victim, "precious");
  unlink(lk.c_str());
  ASSERT_EQ(symlink(victim.c_str(), lk.c_str()), 0);
  spill_err e = {};
  int fd = -1;
  EXPECT_EQ(spill_file_open_write(lk.c_str(), O_RDWR | O_CREAT, 0644, &fd, &e), SPILL_E_IO);
  EXPECT_EQ(std::string(e.msg), lk + ": is a symbolic link; spill does not write through links");
  EXPECT_EQ(spill_file_open_write(lk.c_str(), O_WRONLY | O_APPEND, 0644, &fd, &e), SPILL_E_IO);
  EXPECT_EQ(Get(victim), "precious");
  // a new file: O_EXCL refuses what exists
  std::string nf = d + "/new";
  unlink(nf.c_str());
  ASSERT_EQ(spill_file_open_write(nf.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, &fd, &e),
            SPILL_OK);
  close(fd);
  EXPECT_EQ(spill_file_open_write(nf.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644, &fd, &e),
            SPILL_E_IO);
  // an atomic write replaces the link itself, not what it points at
  EXPECT_EQ(spill_write_file_atomic(lk.c_str(), "new", 3, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(Get(victim), "precious");
  EXPECT_EQ(Get(lk), "new");
  struct stat st;
  ASSERT_EQ(lstat(lk.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST(SafeFileTest, AtomicWriteLeavesNoTempAndReplacesWholeFiles) {
  std::string d = TmpDir("atomic");
  std::string f = d + "/summary.md";
  spill_err e = {};
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "one", 3, &e), SPILL_OK);
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "two!", 4, &e), SPILL_OK);
  EXPECT_EQ(Get(f), "two!");
  EXPECT_EQ(spill_write_file_atomic((d + "/no/such/dir/f").c_str(), "x", 1, &e), SPILL_E_IO);
}

TEST(SafeFileTest, PathsAreNeverCut) {
  char buf[64];
  spill_err e = {};
  EXPECT_EQ(spill_path_fmt(buf, sizeof buf, &e, "%s/%s", "results", "exp"), SPILL_OK);
  EXPECT_STREQ(buf, "results/exp");
  std::string long_dir(70, 'd');
  EXPECT_EQ(spill_path_fmt(buf, sizeof buf, &e, "%s/runs.jsonl", long_dir.c_str()),
            SPILL_E_INVALID_ARG);
  EXPECT_STREQ(buf, "");
  EXPECT_NE(std::string(e.msg).find("path too long (81 bytes, the limit is 63)"),
            std::string::npos)
      << e.msg;
  // longer than PATH_MAX even in a big enough buffer
  std::string huge(5000, 'p');
  static char big[8192];
  EXPECT_EQ(spill_path_fmt(big, sizeof big, &e, "%s", huge.c_str()), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("the limit is 4095"), std::string::npos) << e.msg;
  int fd = -1;
  EXPECT_EQ(spill_file_open_read(huge.c_str(), 0, &fd, &e), SPILL_E_INVALID_ARG);
  EXPECT_EQ(spill_file_open_write(huge.c_str(), O_WRONLY | O_CREAT, 0644, &fd, &e),
            SPILL_E_INVALID_ARG);
}

}  // namespace
