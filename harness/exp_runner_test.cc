// harness/exp_runner_test.cc: run planning (orders, keys, budgets upward)
// and, on a tiny generated model, a sweep killed with SIGKILL mid-run that
// resumes with no duplicate or lost rows, then reports.
#include "harness/exp_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "harness/exp_files.h"
#include "harness/exp_report.h"

namespace {

std::string TmpDir() {
  const char *d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

spill_exp_config Parse(const std::string &text) {
  spill_exp_config cfg;
  spill_err e = {};
  EXPECT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  return cfg;
}

std::vector<std::string> Keys(const spill_exp_config &cfg) {
  spill_exp_run *runs;
  int n;
  spill_err e = {};
  EXPECT_EQ(spill_exp_plan_runs(&cfg, &runs, &n, &e), 0);
  std::vector<std::string> k;
  for (int i = 0; i < n; i++) k.push_back(runs[i].key);
  free(runs);
  return k;
}

const char *kAB = R"({"name": "p", "model": "m", "workload": {"prompt": "x", "decode_tokens": 1},
  "sweep": {"lookahead": [0, 2], "budget": ["2G", "1G"]},
  "arms": [{"name": "A"}, {"name": "B", "set": {"verify": true}}], "repeats": 2, "order": "%s"})";

std::string WithOrder(const char *order) {
  char buf[1024];
  snprintf(buf, sizeof buf, kAB, order);
  return buf;
}

int CountRows(const std::string &file) {
  std::ifstream f(file);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += !line.empty();
  return n;
}

}  // namespace

TEST(ExpRunnerTest, PlanRunsBudgetsUpwardAndOrdersArms) {
  spill_exp_config cfg = Parse(WithOrder("abba"));
  auto k = Keys(cfg);
  ASSERT_EQ(k.size(), 16u);
  EXPECT_EQ(k[0], "budget=1G,lookahead=0/A/r0");
  EXPECT_EQ(k[1], "budget=1G,lookahead=0/B/r0");
  EXPECT_EQ(k[2], "budget=1G,lookahead=0/B/r1");
  EXPECT_EQ(k[3], "budget=1G,lookahead=0/A/r1");
  EXPECT_EQ(k[4], "budget=1G,lookahead=2/A/r0");
  EXPECT_EQ(k[8], "budget=2G,lookahead=0/A/r0");
  spill_exp_config_free(&cfg);

  cfg = Parse(WithOrder("blocked"));
  k = Keys(cfg);
  EXPECT_EQ(k[1], "budget=1G,lookahead=0/A/r1");
  EXPECT_EQ(k[2], "budget=1G,lookahead=0/B/r0");
  spill_exp_config_free(&cfg);

  cfg = Parse(WithOrder("interleaved"));
  k = Keys(cfg);
  EXPECT_EQ(k[1], "budget=1G,lookahead=0/B/r0");
  EXPECT_EQ(k[2], "budget=1G,lookahead=0/A/r1");
  spill_exp_config_free(&cfg);

  // random: a seeded permutation of the same runs; every key once.
  cfg = Parse(WithOrder("random"));
  auto r1 = Keys(cfg), r2 = Keys(cfg);
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(std::set<std::string>(r1.begin(), r1.end()).size(), 16u);
  spill_exp_config_free(&cfg);
}

// A sweep killed with SIGKILL mid-run resumes with no duplicate or lost
// rows. Uses a nano model generated into TEST_TMPDIR.
TEST(ExpRunnerTest, ResumeAfterSigkillHasNoDuplicateOrLostRows) {
  std::string root = TmpDir() + "/resume";
  std::string model = root + "/nano";
  mkdir(root.c_str(), 0755);
  spill_gen_request req = {};
  req.preset = "nano";
  spill_err e = {};
  ASSERT_EQ(spill_gen(model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  std::string text = R"({"name": "resume", "model": ")" + model + R"(",
    "workload": {"prompt": "resume test", "decode_tokens": 6},
    "base": {"storage": "pagecache"},
    "sweep": {"lookahead": [0, 2, 4]},
    "arms": [{"name": "plain"}, {"name": "verify", "set": {"verify": true}, "exact": true}],
    "repeats": 3, "order": "abba", "outputs": {"tables": ["md", "csv"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  const int total = 3 * 2 * 3;
  std::string results = root + "/results";
  spill_exp_opts o = {};
  o.results_root = results.c_str();
  o.commit = "test";
  o.quick_env = 1;

  // 1. A child runs the experiment; we SIGKILL it after a few rows.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char dir[1024];
    spill_err ce = {};
    int rc = spill_exp_execute(&cfg, &o, dir, sizeof dir, &ce);
    _exit(rc == 0 ? 0 : 1);
  }
  std::string rows_file;
  for (int i = 0; i < 3000; i++) {
    std::string latest;
    std::string cmd = "ls -d " + results + "/resume/*/ 2>/dev/null | tail -1";
    FILE *p = popen(cmd.c_str(), "r");
    char buf[1024] = "";
    if (p) {
      if (fgets(buf, sizeof buf, p)) latest = buf;
      pclose(p);
    }
    if (!latest.empty()) {
      latest.erase(latest.find_last_not_of("/\n") + 1);
      rows_file = latest + "/runs.jsonl";
      if (CountRows(rows_file) >= 4) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  ASSERT_FALSE(rows_file.empty());
  int before = CountRows(rows_file);
  ASSERT_GE(before, 4);
  ASSERT_LT(before, total) << "the run finished before it could be killed";

  // 2. Resume in this process: completes the rest.
  o.resume = 1;
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  EXPECT_EQ(rows_file, std::string(dir) + "/runs.jsonl");

  // 3. Every planned key exactly once.
  std::ifstream f(rows_file);
  std::string line;
  std::map<std::string, int> seen;
  while (std::getline(f, line)) {
    size_t k = line.find("\"key\":\"");
    ASSERT_NE(k, std::string::npos) << line;
    size_t end = line.find('"', k + 7);
    seen[line.substr(k + 7, end - k - 7)]++;
  }
  EXPECT_EQ((int)seen.size(), total);
  for (auto &kv : seen) EXPECT_EQ(kv.second, 1) << kv.first;
  for (const std::string &k : Keys(cfg)) EXPECT_EQ(seen.count(k), 1u) << k;

  // 4. A second resume has nothing to do and adds nothing.
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  EXPECT_EQ(CountRows(rows_file), total);

  // 5. The report reads them all back.
  spill_exp_report_result *res = new spill_exp_report_result;
  ASSERT_EQ(spill_exp_report(dir, res, &e), 0) << e.msg;
  EXPECT_EQ(res->rows, total);
  EXPECT_EQ(res->cells, 6);
  EXPECT_NE(std::string(res->table_md).find("| verify | 3 |"), std::string::npos) << res->table_md;
  delete res;
  spill_exp_config_free(&cfg);
}
