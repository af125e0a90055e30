// harness/exp_files_test.cc: atomic writes replace whole files; appended
// rows survive; a torn last line is dropped and repaired.
#include "harness/exp_files.h"

#include <gtest/gtest.h>
#include <dirent.h>
#include <unistd.h>

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
  if (spill_exp_read_file(p.c_str(), 1 << 20, &t, &e) < 0) return "<" + std::string(e.msg) + ">";
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
  ASSERT_EQ(spill_exp_write_atomic(f.c_str(), "old", 3, &e), 0);
  ASSERT_EQ(spill_exp_write_atomic(f.c_str(), "new content", 11, &e), 0);
  EXPECT_EQ(Read(f), "new content");
  DIR *d = opendir((dir + "/a/b").c_str());
  int n = 0;
  while (struct dirent *ent = readdir(d)) n += ent->d_name[0] != '.';
  closedir(d);
  EXPECT_EQ(n, 1);  // no temp file left behind
  EXPECT_EQ(spill_exp_write_atomic((dir + "/missing/x").c_str(), "x", 1, &e), SPILL_E_IO);
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
