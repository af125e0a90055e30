// harness/exp_files_test.cc: atomic writes replace whole files; appended
// rows survive; a torn last line is dropped and repaired.
#include "harness/exp_files.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
std::string Tmp(const char *name) {
  const char *d = getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}
std::string Read(const std::string &p) {
  char *t = nullptr;
  spill_err e = {};
  if (spill_read_file(p.c_str(), 1 << 20, &t, NULL, &e) < 0) return "<" + std::string(e.msg) + ">";
  std::string s = t;
  free(t);
  return s;
}
}  // namespace

TEST(ExpFilesTest, AtomicWriteReplacesAndLeavesNoTemp) {
  std::string dir = Tmp("atomic");
  spill_err e = {};
  ASSERT_EQ(spill_exp_mkdirs((dir + "/a/b").c_str(), &e), 0) << e.msg;
  std::string f = dir + "/a/b/x.json";
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "old", 3, &e), 0);
  ASSERT_EQ(spill_write_file_atomic(f.c_str(), "new content", 11, &e), 0);
  EXPECT_EQ(Read(f), "new content");
  DIR *d = opendir((dir + "/a/b").c_str());
  int n = 0;
  while (struct dirent *ent = readdir(d)) n += ent->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(n, 1);  // no temp file left behind
  EXPECT_EQ(spill_write_file_atomic((dir + "/missing/x").c_str(), "x", 1, &e), SPILL_E_IO);
}

TEST(ExpFilesTest, TornLastLineIsDroppedAndRepaired) {
  std::string f = Tmp("rows.jsonl");
  unlink(f.c_str());
  spill_err e = {};
  ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"key\": 1}", &e), 0);
  ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"key\": 2}", &e), 0);
  FILE *fp = fopen(f.c_str(), "a");
  fputs("{\"key\": 3, \"trunc", fp);  // a crash mid-row
  fclose(fp);
  char **lines;
  int n;
  ASSERT_EQ(spill_exp_read_lines(f.c_str(), 0, &lines, &n, &e), 0);
  EXPECT_EQ(n, 2);
  spill_exp_lines_free(lines, n);
  EXPECT_NE(Read(f).find("trunc"), std::string::npos);  // not repaired without repair
  ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), 0);
  EXPECT_EQ(n, 2);
  spill_exp_lines_free(lines, n);
  EXPECT_EQ(Read(f), "{\"key\": 1}\n{\"key\": 2}\n");
  ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"key\": 3}", &e), 0);
  ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), 0);
  EXPECT_EQ(n, 3);
  EXPECT_STREQ(lines[2], "{\"key\": 3}");
  spill_exp_lines_free(lines, n);
  ASSERT_EQ(spill_exp_read_lines(Tmp("none.jsonl").c_str(), 1, &lines, &n, &e), 0);
  EXPECT_EQ(n, 0);
}

namespace {
std::string Bytes(const std::string &p) {  // binary-safe
  char *t = nullptr;
  size_t n = 0;
  spill_err e = {};
  if (spill_read_file(p.c_str(), 1 << 24, &t, &n, &e) < 0) return "<" + std::string(e.msg) + ">";
  std::string s(t, n);
  free(t);
  return s;
}
void PutBytes(const std::string &p, const std::string &s) {
  FILE *f = fopen(p.c_str(), "wb");
  fwrite(s.data(), 1, s.size(), f);
  fclose(f);
}
std::string Rows(int n) {
  std::string s;
  for (int i = 1; i <= n; i++) s += "{\"key\": " + std::to_string(i) + "}\n";
  return s;
}
}  // namespace

// Issue 26 item 4: one NUL in row 3 of 12 made the reader (strlen) see two
// rows and the repair cut the other nine away. Now the line is named and
// nothing is deleted.
TEST(ExpFilesTest, NulInsideARowIsRefusedNamingTheLineAndNoRowIsDeleted) {
  std::string f = Tmp("nul-row.jsonl");
  std::string text = Rows(12);
  size_t row3 = text.find("{\"key\": 3}");
  text[row3 + 3] = '\0';
  PutBytes(f, text);
  char **lines;
  int n;
  spill_err e = {};
  EXPECT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find(f + ": line 3: a NUL byte inside a row"), std::string::npos)
      << e.msg;
  EXPECT_EQ(Bytes(f), text);  // all 12 rows still there, byte for byte
}

// A power loss can leave the file's new length with unwritten (zero) data:
// a NUL-filled tail, after part of a row or alone. It is a torn last line:
// dropped and repaired, so the rerun lands on a line of its own.
TEST(ExpFilesTest, NulFilledTailIsATornLastLineAndRepaired) {
  for (std::string tail : {std::string(4096, '\0'), "{\"key\": 6, \"wal" + std::string(700, '\0')}) {
    std::string f = Tmp("nul-tail.jsonl");
    PutBytes(f, Rows(5) + tail);
    char **lines;
    int n;
    spill_err e = {};
    ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(n, 5);
    spill_exp_lines_free(lines, n);
    EXPECT_EQ(Bytes(f), Rows(5));
    ASSERT_EQ(spill_exp_append_line(f.c_str(), "{\"key\": 6}", &e), SPILL_OK);
    ASSERT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_OK) << e.msg;
    EXPECT_EQ(n, 6);
    spill_exp_lines_free(lines, n);
    EXPECT_EQ(Bytes(f), Rows(6));
  }
}

// Random bytes are not a results file: refused, never read as zero rows and
// truncated away.
TEST(ExpFilesTest, RandomBytesAreRefusedNotTruncated) {
  std::string f = Tmp("random.jsonl");
  std::string junk(100000, '\0');
  uint64_t x = 88172645463325252ull;
  for (char &c : junk) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = (char)(x >> 32);
  }
  char **lines;
  int n;
  spill_err e = {};
  for (const std::string &text : {junk, std::string(3000, 'x'), Rows(2) + "garbage"}) {
    PutBytes(f, text);
    EXPECT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_E_FORMAT) << text.size();
    EXPECT_EQ(Bytes(f), text);
  }
  EXPECT_NE(std::string(e.msg).find(": line 3: 7 bytes without a newline"), std::string::npos)
      << e.msg;
}

// Issue 26 item 5: runs.jsonl as a symlink got the rows appended to the file
// it pointed at.
TEST(ExpFilesTest, RowsAreNeverWrittenThroughASymlink) {
  std::string victim = Tmp("victim.txt"), f = Tmp("linked-runs.jsonl");
  PutBytes(victim, "precious\n");
  unlink(f.c_str());
  ASSERT_EQ(symlink(victim.c_str(), f.c_str()), 0);
  spill_err e = {};
  EXPECT_EQ(spill_exp_append_line(f.c_str(), "{\"key\": 1}", &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("is a symbolic link"), std::string::npos) << e.msg;
  char **lines;
  int n;
  EXPECT_EQ(spill_exp_read_lines(f.c_str(), 1, &lines, &n, &e), SPILL_E_IO);
  EXPECT_EQ(Bytes(victim), "precious\n");
}
