// harness/gnuplot_text_test.cc: the quoting of untrusted text for gnuplot
// scripts (issue 26 item 3), checked against the real gnuplot: each hostile
// string is printed back by `print LITERAL` and must come back unchanged,
// with no file created by a command hidden in it.
#include "harness/gnuplot_text.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string tmp() {
  const char *t = getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

bool exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

const std::vector<std::string> kHostile = {
    "x'; system(\"touch PWNED1\"); print 'y",
    "a`touch PWNED2`b",
    "@x $0 \\ \\' '' ''' '''' '''''",
    "tail\\",
    "|touch PWNED3",
    "<touch PWNED4",
    "caf\xc3\xa9 \xe2\x82\xac",
};

TEST(GnuplotTextTest, PathsAndLabelsAreLiterals) {
  char b[256];
  ASSERT_EQ(spill_gp_path(b, sizeof b, "a'b"), 0);
  EXPECT_STREQ(b, R"('./a'."'".'b')");
  ASSERT_EQ(spill_gp_path(b, sizeof b, "/abs/p"), 0);
  EXPECT_STREQ(b, "'/abs/p'");
  ASSERT_EQ(spill_gp_path(b, sizeof b, "|cmd"), 0);
  EXPECT_STREQ(b, "'./|cmd'");
  EXPECT_EQ(spill_gp_path(b, sizeof b, "a\nb"), -1);
  EXPECT_STREQ(b, "''");
  EXPECT_EQ(spill_gp_path(b, sizeof b, ""), -1);
  EXPECT_EQ(spill_gp_path(b, 8, "abcdefgh"), -2);
  EXPECT_STREQ(b, "''");
  EXPECT_STREQ(spill_gp_label(b, sizeof b, "t'\n!x"), R"('t'."'".'?!x')");
  // cut on a character boundary: "é" (2 bytes) does not fit after "ab"
  EXPECT_STREQ(spill_gp_label(b, 6, "ab\xc3\xa9"), "'ab'");
  // a quote is written whole or not at all
  EXPECT_STREQ(spill_gp_label(b, 10, "a'"), "'a'");
  EXPECT_STREQ(spill_gp_label(b, 11, "a'"), R"('a'."'".'')");
}

TEST(GnuplotTextTest, GnuplotPrintsEachHostileStringBack) {
  if (access("/usr/bin/gnuplot", X_OK) != 0) {
    printf("SKIPPED: /usr/bin/gnuplot is not installed (./lab deps installs it)\n");
    GTEST_SKIP();
  }
  std::string dir = tmp() + "/gp";
  mkdir(dir.c_str(), 0755);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  std::ofstream gp("t.gp");
  for (const std::string &s : kHostile) {
    char b[512];
    gp << "print " << spill_gp_label(b, sizeof b, s.c_str()) << "\n";
    ASSERT_EQ(spill_gp_path(b, sizeof b, s.c_str()), 0);
    gp << "print " << b << "\n";
  }
  gp.close();
  ASSERT_EQ(system("/usr/bin/gnuplot t.gp > out.txt 2>&1"), 0);
  std::ifstream in("out.txt");
  std::stringstream all;
  all << in.rdbuf();
  std::string want;
  for (const std::string &s : kHostile) want += s + "\n./" + s + "\n";
  EXPECT_EQ(all.str(), want);
  for (const char *p : {"PWNED1", "PWNED2", "PWNED3", "PWNED4"}) EXPECT_FALSE(exists(p)) << p;
}

}  // namespace
