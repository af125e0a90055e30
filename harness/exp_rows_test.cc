// harness/exp_rows_test.cc: runs.jsonl rows are checked against the plan
// before the report or --resume use them: a repeated run is refused with a
// named error (it once overran compare_groups' pair buffer: heap corruption,
// issue 19 item 1), as are rows naming runs the config does not plan.
#include "harness/exp_rows.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "harness/exp_files.h"
#include "harness/exp_report.h"

namespace {

std::string TmpDir() {
  const char *d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

const char *kConfig = R"({"name": "dup", "model": "m", "workload": {"prompt": "x", "decode_tokens": 1},
  "arms": [{"name": "A"}, {"name": "B", "set": {"verify": true}}], "repeats": 4,
  "outputs": {"tables": ["md"], "plots": []}})";

std::string Row(const char *arm, int repeat, double tps) {
  char buf[512];
  snprintf(buf, sizeof buf,
           R"({"key":"-/%s/r%d","cell":"-","arm":"%s","repeat":%d,"tokens":{"n":1,"hash":"00000000000000%02x"},"metrics":{"decode_tok_per_s":%g}})",
           arm, repeat, arm, repeat, repeat, tps);
  return buf;
}

// A finished directory: config.json + 2 arms x 4 repeats of rows.
std::string MakeDir(const std::string &name, const std::vector<std::string> &extra) {
  std::string dir = TmpDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/config.json") << kConfig;
  std::ofstream rows(dir + "/runs.jsonl");
  for (int r = 0; r < 4; r++) rows << Row("A", r, 10 + r) << "\n" << Row("B", r, 11 + r) << "\n";
  for (const std::string &l : extra) rows << l << "\n";
  return dir;
}

TEST(ExpRowsTest, ReportRefusesARepeatedRunInsteadOfCorruptingTheHeap) {
  // The issue's reproduction: the first row appended twice.
  std::string dir = MakeDir("dup2", {Row("A", 0, 10), Row("A", 0, 10)});
  spill_exp_report_result *res = new spill_exp_report_result;
  spill_err e = {};
  EXPECT_EQ(spill_exp_report(dir.c_str(), res, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("line 9: run -/A/r0 appears twice (also line 1)"),
            std::string::npos)
      << e.msg;
  delete res;
}

TEST(ExpRowsTest, ASingleDuplicateIsNotCountedTwice) {
  std::string dir = MakeDir("dup1", {Row("B", 3, 14)});
  spill_exp_report_result *res = new spill_exp_report_result;
  spill_err e = {};
  EXPECT_EQ(spill_exp_report(dir.c_str(), res, &e), SPILL_E_FORMAT) << "n=" << res->rows;
  EXPECT_NE(std::string(e.msg).find("appears twice"), std::string::npos) << e.msg;
  delete res;
}

TEST(ExpRowsTest, CleanDirectoryReportsEveryRowOnce) {
  std::string dir = MakeDir("clean", {});
  spill_exp_report_result *res = new spill_exp_report_result;
  spill_err e = {};
  ASSERT_EQ(spill_exp_report(dir.c_str(), res, &e), 0) << e.msg;
  EXPECT_EQ(res->rows, 8);
  EXPECT_NE(std::string(res->table_md).find("| B | 4 |"), std::string::npos) << res->table_md;
  delete res;
}

TEST(ExpRowsTest, RowsOutsideThePlanOrInconsistentAreRefused) {
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(kConfig, "t.json", &cfg, &e), 0) << e.msg;
  struct {
    std::string line, want;
  } cases[] = {
      {Row("C", 0, 1), "is not in this config"},
      {Row("A", 7, 1), "is not in this config"},
      {R"({"key":"-/A/r1","cell":"-","arm":"B","repeat":1,"tokens":{"hash":"0000000000000001"}})",
       "disagree with its key"},
      {R"({"key":"-/A/r1","cell":"-","arm":"A","repeat":1,"tokens":{"hash":"zz"}})", "not a run row"},
      {"[1,2]", "not a run row"},
      {"{", "not a run row"},
  };
  for (auto &c : cases) {
    std::string l = c.line;
    char *lines[1] = {&l[0]};
    spill_exp_rows rows;
    e = {};
    EXPECT_EQ(spill_exp_rows_parse(&cfg, "runs.jsonl", lines, 1, &rows, &e), SPILL_E_FORMAT) << l;
    EXPECT_NE(std::string(e.msg).find(c.want), std::string::npos) << l << ": " << e.msg;
  }
  // and the in-memory summary (the fuzz target's entry) accepts good rows
  std::string a = Row("A", 0, 10), b = Row("B", 0, 12);
  char *lines[2] = {&a[0], &b[0]};
  char *json = nullptr;
  ASSERT_EQ(spill_exp_report_summary(&cfg, lines, 2, &json, &e), 0) << e.msg;
  EXPECT_NE(std::string(json).find("\"pairs\":\t1"), std::string::npos) << json;
  free(json);
  spill_exp_config_free(&cfg);
}

}  // namespace
