// harness/exp_runner_test.cc: run planning (orders, keys, budgets upward)
// and, on a tiny generated model, a sweep killed with SIGKILL mid-run that
// resumes with no duplicate or lost rows, then reports.
#include "harness/exp_runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include <atomic>
#include <thread>

#include <cjson/cJSON.h>

#include "harness/exp_files.h"
#include "harness/exp_report.h"
#include "harness/refuted.h"
#include "research/gen/spill_gen.h"

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

// The runner's options of every test: results under `results` (which must
// outlive the options), commit "test", the quick env.json.
spill_exp_opts QuickOpts(const std::string &results) {
  spill_exp_opts o = {};
  o.results_root = results.c_str();
  o.commit = "test";
  o.quick_env = 1;
  return o;
}

// The number a shell command prints (`... | wc -l`), -1 if it printed none.
int ShellCount(const std::string &cmd) {
  FILE *p = popen(cmd.c_str(), "r");
  int n = -1;
  if (p) {
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
  }
  return n;
}

// Runs the experiment of config text to the end with QuickOpts(results)
// and the progress callback given (may be null); dir gets its results
// directory.
::testing::AssertionResult RunExperiment(const std::string &text, const std::string &results,
                                         char *dir, size_t n,
                                         spill_exp_progress_cb progress = nullptr,
                                         void *user = nullptr) {
  spill_exp_config cfg = Parse(text);
  spill_exp_opts o = QuickOpts(results);
  o.progress = progress;
  o.user = user;
  spill_err e = {};
  int rc = spill_exp_execute(&cfg, &o, dir, n, &e);
  spill_exp_config_free(&cfg);
  if (rc != 0) return ::testing::AssertionFailure() << "spill_exp_execute: " << rc << ": " << e.msg;
  return ::testing::AssertionSuccess();
}

// A run whose hypothesis verdict and refuted entry (written to refuted) are
// wanted: the hypothesis line, the entry's path and the results directory.
struct VerdictRun {
  char verdict[1024] = "", entry[1024] = "", dir[1024] = "";
  spill_err e = {};
  int rc = -1;
};

VerdictRun RunForVerdict(const spill_exp_config &cfg, const std::string &results,
                         const std::string &refuted) {
  VerdictRun v;
  spill_exp_opts o = QuickOpts(results);
  o.refuted_dir = refuted.c_str();
  o.verdict_out = v.verdict;
  o.verdict_n = sizeof v.verdict;
  o.refuted_entry_out = v.entry;
  o.refuted_entry_n = sizeof v.entry;
  v.rc = spill_exp_execute(&cfg, &o, v.dir, sizeof v.dir, &v.e);
  return v;
}

// Forks a child that runs cfg with o, pausing pause_us after each finished
// run so that the parent sees a partial results directory; the child exits
// 0 when the experiment completed. The parent gets the child's PID.
pid_t ForkSlowExperiment(const spill_exp_config &cfg, spill_exp_opts o, int pause_us) {
  pid_t child = fork();
  if (child != 0) return child;
  static int pause;
  pause = pause_us;
  o.progress = [](void *, const spill_exp_progress *p) {
    if (!strcmp(p->phase, "run")) usleep(pause);
  };
  char dir[1024];
  spill_err ce = {};
  _exit(spill_exp_execute(&cfg, &o, dir, sizeof dir, &ce) == 0 ? 0 : 1);
}

// The newest results directory of experiment NAME under results ("" if
// none yet), without the trailing slash.
std::string LatestDir(const std::string &results, const std::string &name) {
  FILE *p = popen(("ls -d " + results + "/" + name + "/*/ 2>/dev/null | tail -1").c_str(), "r");
  char buf[1024] = "";
  if (p) {
    if (!fgets(buf, sizeof buf, p)) buf[0] = 0;
    pclose(p);
  }
  std::string dir = buf;
  if (!dir.empty()) dir.erase(dir.find_last_not_of("/\n") + 1);
  return dir;
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
  spill_exp_opts o = QuickOpts(results);

  // 1. A child runs the experiment; we SIGKILL it after a few rows. Runs on
  // nano take milliseconds: a 30 ms pause after each finished run lets the
  // parent's polling see a partial file and the kill land mid-sweep.
  pid_t child = ForkSlowExperiment(cfg, o, 30000);
  ASSERT_GE(child, 0);
  std::string rows_file;
  for (int i = 0; i < 3000; i++) {
    std::string latest = LatestDir(results, "resume");
    if (!latest.empty()) {
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
  o.progress = nullptr;
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

namespace {

std::string ReadAll(const std::string &file) {
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

off_t FileSize(const std::string &file) {
  struct stat st;
  return stat(file.c_str(), &st) == 0 ? st.st_size : -1;
}

// A nano model generated once per test binary into TEST_TMPDIR.
std::string NanoModel() {
  static std::string model;
  if (model.empty()) {
    std::string root = TmpDir() + "/nano-shared";
    mkdir(root.c_str(), 0755);
    spill_gen_request req = {};
    req.preset = "nano";
    spill_err e = {};
    EXPECT_EQ(spill_gen((root + "/m").c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
    model = root + "/m";
  }
  return model;
}

}  // namespace

// A hand-written entry whose result is longer than the index's column (512
// bytes) is cut at a character boundary and marked as cut in the index, not
// ended mid-value as if that were all of it; the entry itself is untouched.
TEST(ExpRunnerTest, RefutedIndexMarksACutField) {
  std::string refuted = TmpDir() + "/refuted-long";
  mkdir(refuted.c_str(), 0755);
  std::string result = "\"";
  while (result.size() < 700) result += "\xc3\xa9t\xc3\xa9 12.5/13.5 ";
  result += "end\"";
  {
    std::ofstream f(refuted + "/0001-long.md");
    f << "---\nid: 0001\ndate: 2026-12-02\nwritten_by: hand\nhypothesis: a long one\n"
         "metric: hits\nresult: " << result << "\nverdict: refuted\nresults: r\n---\n";
  }
  spill_err e = {};
  ASSERT_EQ(spill_refuted_index(refuted.c_str(), &e), 0) << e.msg;
  std::string index = ReadAll(refuted + "/README.md");
  size_t row = index.find("| [0001](0001-long.md) |");
  ASSERT_NE(row, std::string::npos) << index;
  std::string line = index.substr(row, index.find('\n', row) - row);
  EXPECT_NE(line.find(" [...] (full text in the entry) | `r` |"), std::string::npos) << line;
  EXPECT_EQ(line.find("end\""), std::string::npos) << line;
  // No character is split: every lead byte keeps its continuation byte.
  for (size_t i = 0; i < line.size(); i++)
    if ((unsigned char)line[i] == 0xc3) EXPECT_EQ((unsigned char)line[i + 1], 0xa9u) << i;
  EXPECT_NE(ReadAll(refuted + "/0001-long.md").find(result), std::string::npos);
}

// A hypothesis that is certainly refuted (two identical arms; "the second
// reads at least 50% fewer records", a deterministic counter so the CI is
// exactly [1, 1]) makes the runner write refuted/NNNN-<name>.md with its
// front matter, numbered after the largest id present, and regenerate the
// index. Written into a temporary refuted dir, never the repository's.
// Per-run profile and trace files are switched on the open engine: one open
// for the whole experiment.
TEST(ExpRunnerTest, RefutedHypothesisWritesEntryAndRegeneratesIndex) {
  std::string root = TmpDir() + "/refute";
  std::string refuted = root + "/refuted";
  mkdir(root.c_str(), 0755);
  mkdir(refuted.c_str(), 0755);
  // An older entry: the new one must take the next id, and stay in the index.
  {
    std::ofstream old(refuted + "/0007-older.md");
    old << "---\nid: 0007\ndate: 2026-01-01\nhypothesis: an older claim\nmetric: reads\n"
           "result: none\nverdict: refuted\nresults: elsewhere\n---\n";
  }
  std::string text = R"({"name": "refute", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "refuted entry test", "decode_tokens": 4},
    "base": {"storage": "pagecache"},
    "arms": [{"name": "same-a", "set": {"lookahead": 0}},
             {"name": "same-b", "set": {"lookahead": 0}, "exact": true}],
    "repeats": 3, "order": "abba",
    "hypothesis": {"claim": "lookahead 0 reads >= 50% fewer records than lookahead 0",
                   "metric": "reads", "direction": "decrease", "min_effect": 0.5},
    "outputs": {"tables": ["md"], "plots": [], "profile": true, "trace": true}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results";
  VerdictRun run = RunForVerdict(cfg, results, refuted);
  ASSERT_EQ(run.rc, 0) << run.e.msg;
  const char *verdict = run.verdict, *entry = run.entry, *dir = run.dir;
  spill_err e = {};
  EXPECT_EQ(std::string(verdict).rfind("refuted: lookahead 0 reads", 0), 0u) << verdict;
  EXPECT_EQ(std::string(entry), refuted + "/0008-refute.md");

  std::string md = ReadAll(entry);
  ASSERT_EQ(md.rfind("---\nid: 0008\n", 0), 0u) << md;
  for (const char *f :
       {"\ndate: ", "\ncommit: ", "\nmachine: ",
        "\nhypothesis: lookahead 0 reads >= 50% fewer records than lookahead 0\n",
        "\nmetric: reads\n", "\nprediction: reads ratio same-b/same-a <= 0.500 (decrease by >= 50%)\n", "\nresult: ", "ratio 1.000 [1.000, 1.000]", "\nverdict: refuted\n",
        "\nconfig: t.json\n", "\nwritten_by: spill exp\n", "\n## Table\n", "| same-b | 3 |", "\n## Notes\n"})
    EXPECT_NE(md.find(f), std::string::npos) << "missing " << f << " in\n" << md;
  EXPECT_NE(md.find("\nresults: " + std::string(dir) + "\n"), std::string::npos) << md;

  std::string index = ReadAll(refuted + "/README.md");
  EXPECT_NE(index.find("| [0007](0007-older.md) |"), std::string::npos) << index;
  EXPECT_NE(index.find("| [0008](0008-refute.md) |"), std::string::npos) << index;
  EXPECT_NE(index.find("lookahead 0 reads >= 50% fewer records"), std::string::npos) << index;

  // Writing again for the same results directory adds no second entry.
  spill_exp_report_result *res = new spill_exp_report_result;
  ASSERT_EQ(spill_exp_report(dir, res, &e), 0) << e.msg;
  EXPECT_EQ(res->verdict, SPILL_VERDICT_REFUTED);
  char again[1024];
  ASSERT_EQ(spill_refuted_write(refuted.c_str(), dir, "t.json", res, again, sizeof again, &e), 0) << e.msg;
  EXPECT_EQ(std::string(again), std::string(entry));
  spill_refuted_entry *v;
  int n;
  ASSERT_EQ(spill_refuted_list(refuted.c_str(), &v, &n, &e), 0);
  EXPECT_EQ(n, 2);
  free(v);
  delete res;

  // Every row: one engine for the whole run, its own non-empty profile and
  // trace files.
  std::ifstream rows(std::string(dir) + "/runs.jsonl");
  std::string line;
  int n_rows = 0, reopened = 0;
  while (std::getline(rows, line)) {
    n_rows++;
    reopened += line.find("\"reopened\":true") != std::string::npos;
    size_t k = line.find("\"profile\":\"");
    ASSERT_NE(k, std::string::npos) << line;
    std::string prof = line.substr(k + 11, line.find('"', k + 11) - k - 11);
    EXPECT_GT(FileSize(std::string(dir) + "/" + prof), 0) << prof;
    k = line.find("\"trace\":\"");
    ASSERT_NE(k, std::string::npos) << line;
    std::string tr = line.substr(k + 9, line.find('"', k + 9) - k - 9);
    EXPECT_GT(FileSize(std::string(dir) + "/" + tr), 0) << tr;
  }
  EXPECT_EQ(n_rows, 6);
  EXPECT_EQ(reopened, 1);
  spill_exp_config_free(&cfg);
}

// A hypothesis that is not refuted writes nothing into refuted/.
TEST(ExpRunnerTest, ConfirmedHypothesisWritesNoEntry) {
  std::string root = TmpDir() + "/confirm";
  std::string refuted = root + "/refuted";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "confirm", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "confirmed test", "decode_tokens": 3},
    "base": {"storage": "pagecache"},
    "arms": [{"name": "a"}, {"name": "b", "exact": true}],
    "repeats": 3,
    "hypothesis": {"claim": "identical arms read as many records", "metric": "reads",
                   "direction": "increase", "min_effect": 0},
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results";
  VerdictRun run = RunForVerdict(cfg, results, refuted);
  ASSERT_EQ(run.rc, 0) << run.e.msg;
  const char *verdict = run.verdict, *entry = run.entry;
  EXPECT_EQ(std::string(verdict).rfind("confirmed: ", 0), 0u) << verdict;
  EXPECT_EQ(entry[0], 0);
  EXPECT_NE(access(refuted.c_str(), F_OK), 0) << "refuted dir created for a confirmed hypothesis";
  spill_exp_config_free(&cfg);
}

// Knobs the engine fixes at open (io_throttle, overlap, prefill_chunk) differ
// between arms: the runner reopens the engine for them instead of failing
// on spill_engine_set_knob, and rows record the reopen.
TEST(ExpRunnerTest, ArmsChangingOpenTimeKnobsReopenTheEngine) {
  std::string root = TmpDir() + "/reopen";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "reopen", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "reopen test", "decode_tokens": 2},
    "base": {"storage": "pagecache"},
    "arms": [{"name": "plain"},
             {"name": "throttled", "set": {"io_throttle": "2G"}, "exact": true},
             {"name": "no-overlap", "set": {"overlap": 0}, "exact": true},
             {"name": "chunk-4", "set": {"prefill_chunk": 4}, "exact": true}],
    "repeats": 2, "order": "blocked", "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results";
  spill_exp_opts o = QuickOpts(results);
  char dir[1024];
  spill_err e = {};
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  std::ifstream rows(std::string(dir) + "/runs.jsonl");
  std::string line;
  std::vector<std::string> reopened_keys;
  while (std::getline(rows, line))
    if (line.find("\"reopened\":true") != std::string::npos)
      reopened_keys.push_back(line.substr(line.find("\"key\":\"") + 7, line.find("\",") - 8));
  EXPECT_EQ(reopened_keys, (std::vector<std::string>{"-/plain/r0", "-/throttled/r0",
                                                     "-/no-overlap/r0", "-/chunk-4/r0"}));
  spill_exp_config_free(&cfg);
}

// workload.routing "trace:FILE" on a model.like_trace recipe: the runner
// generates a nano shaped for the trace, replays the trace in every run
// (sequential prefill: one routed position per forward, like the trace
// replay), records the routing in every row, and each run's router trace
// has the input's ids. Counters are exact: with a cache holding every
// expert, misses are the distinct (layer, expert) pairs of the trace.
TEST(ExpRunnerTest, TraceRoutingReplaysTheTraceInEveryRun) {
  std::string root = TmpDir() + "/trace-routing";
  mkdir(root.c_str(), 0755);
  std::string tr = root + "/t.jsonl";
  {
    std::ofstream f(tr);
    // 10 tokens, 2 layers, 8 experts, top-2; layer 1 always uses {6, 7}
    for (int t = 0; t < 10; t++)
      f << "{\"tok\": " << t << ", \"layers\": [[" << (t % 4) << ", " << (t % 4 + 4)
        << "], [6, 7]]}\n";
  }
  std::string text = R"({"name": "trace-routing", "model": {"like_trace": ")" + tr +
                     R"(", "preset": "nano"},
    "workload": {"prompt": "ab", "decode_tokens": 7, "prefill": "sequential",
                 "routing": "trace:)" + tr + R"("},
    "base": {"cache_slots": 16, "storage": "pagecache"},
    "arms": [{"name": "lru", "set": {"policy": "lru"}},
             {"name": "lfru", "set": {"policy": "lfru"}, "exact": true}],
    "repeats": 1, "outputs": {"tables": ["md"], "plots": [], "trace": true}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results", models = root + "/models";
  spill_exp_opts o = QuickOpts(results);
  o.cache_root = models.c_str();
  char dir[1024];
  spill_err e = {};
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  char model[1024];
  spill_exp_model_dir(&cfg, models.c_str(), model, sizeof model);
  spill_info info;
  ASSERT_EQ(spill_info_read(model, &info, &e), 0) << e.msg;
  EXPECT_EQ(info.n_moe_layers, 2);
  EXPECT_EQ(info.n_experts, 8);
  EXPECT_EQ(info.top_k, 2);
  EXPECT_NE(ReadAll(std::string(dir) + "/config.json").find("\"routing\":\t\"trace:" + tr + "\""),
            std::string::npos);
  std::ifstream rows(std::string(dir) + "/runs.jsonl");
  std::string line;
  int n_rows = 0;
  while (std::getline(rows, line)) {
    n_rows++;
    EXPECT_NE(line.find("\"routing\":\"trace:" + tr + "\""), std::string::npos) << line;
    // 10 positions x 2 layers x 2 ids requested; 8 + 2 distinct pairs missed
    EXPECT_NE(line.find("\"experts_requested\":40,"), std::string::npos) << line;
    EXPECT_NE(line.find("\"demand_misses\":10,"), std::string::npos) << line;
    size_t k = line.find("\"trace\":\"");
    ASSERT_NE(k, std::string::npos) << line;
    std::string out = std::string(dir) + "/" + line.substr(k + 9, line.find('"', k + 9) - k - 9);
    std::ifstream f(out);
    std::string row;
    int n = 0;
    while (std::getline(f, row)) {
      int tok = n / 2, layer = n % 2 + 1;
      std::string want = layer == 2 ? "\"ids\": [6, 7]"
                                    : "\"ids\": [" + std::to_string(tok % 4) + ", " +
                                          std::to_string(tok % 4 + 4) + "]";
      EXPECT_NE(row.find(want), std::string::npos) << row;
      n++;
    }
    EXPECT_EQ(n, 20);
  }
  EXPECT_EQ(n_rows, 2);
  spill_exp_config_free(&cfg);
}

namespace {

// The column "read p99 ms" of table.md for each data row ("-" when missing).
std::vector<std::string> P99Column(const std::string &table) {
  std::vector<std::string> out;
  std::istringstream in(table);
  std::string line;
  int col = -1;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    size_t p = 1;
    while (p < line.size()) {
      size_t q = line.find('|', p);
      if (q == std::string::npos) break;
      std::string c = line.substr(p, q - p);
      c.erase(0, c.find_first_not_of(' '));
      c.erase(c.find_last_not_of(' ') + 1);
      cells.push_back(c);
      p = q + 1;
    }
    if (col < 0) {
      for (size_t i = 0; i < cells.size(); i++)
        if (cells[i] == "read p99 ms") col = (int)i;
      continue;
    }
    if (col < (int)cells.size()) out.push_back(cells[col]);
  }
  return out;
}

}  // namespace

// Rows record that read p50/p99 cover the whole run; a report over rows that
// do not say so (written by engines that reset the latency window on every
// forward call) shows "-" with a note rather than the last call's value, and
// every other column stays as it was.
TEST(ExpRunnerTest, ReportShowsReadP99OnlyForRunWideRows) {
  std::string root = TmpDir() + "/p99";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "p99", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "p99 test", "decode_tokens": 3},
    "base": {"storage": "pagecache", "cache_slots": 4},
    "arms": [{"name": "a"}], "repeats": 2, "outputs": {"tables": ["md"], "plots": []}})";
  char dir[1024];
  ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir));
  spill_err e = {};
  std::string rows_file = std::string(dir) + "/runs.jsonl";
  std::string rows = ReadAll(rows_file);
  EXPECT_NE(rows.find("\"read_latency\":\"run\""), std::string::npos);
  std::string table = ReadAll(std::string(dir) + "/table.md");
  std::vector<std::string> p99 = P99Column(table);
  ASSERT_EQ(p99.size(), 1u) << table;
  EXPECT_NE(p99[0], "-") << table;  // cache_slots 4: the runs read from storage
  // Strip the field: the same rows as an old engine wrote them.
  std::string old;
  for (size_t p = 0;;) {
    size_t q = rows.find(",\"read_latency\":\"run\"", p);
    old += rows.substr(p, q == std::string::npos ? std::string::npos : q - p);
    if (q == std::string::npos) break;
    p = q + strlen(",\"read_latency\":\"run\"");
  }
  ASSERT_EQ(old.find("read_latency"), std::string::npos);
  {
    std::ofstream f(rows_file, std::ios::trunc);
    f << old;
  }
  spill_exp_report_result *res = new spill_exp_report_result;
  ASSERT_EQ(spill_exp_report(dir, res, &e), 0) << e.msg;
  delete res;
  std::string table2 = ReadAll(std::string(dir) + "/table.md");
  EXPECT_EQ(P99Column(table2), std::vector<std::string>{"-"}) << table2;
  EXPECT_NE(table2.find("not the run's"), std::string::npos) << table2;
  // every other cell unchanged
  std::string a = table.substr(0, table.find(p99[0])), b = table2.substr(0, table2.find("| - |"));
  EXPECT_EQ(a, b + "| ");
}

// Plots are drawn (gnuplot, installed by ./lab): a budget sweep with two arms
// makes the cliff, A/B and timeline plots as PNG and SVG, each with data
// behind it (one .dat line per budget and series, one per decoded token).
TEST(ExpRunnerTest, PlotsAreDrawnWithTheirData) {
  std::string root = TmpDir() + "/plots";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "plots", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "plot test", "decode_tokens": 6},
    "base": {"storage": "pagecache", "ctx": 256, "threads": 1},
    "sweep": {"budget": ["48M", "96M"]},
    "arms": [{"name": "off", "set": {"lookahead": 0}},
             {"name": "on", "set": {"lookahead": 4}, "exact": true}],
    "repeats": 3,
    "hypothesis": {"claim": "lookahead raises decode tok/s", "metric": "decode_tok_per_s",
                   "direction": "increase", "min_effect": 0.05},
    "outputs": {"tables": ["md"], "plots": ["cliff", "ab", "timeline"]}})";
  char dir[1024];
  ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir));
  // one-request rows carry no bench metric (workload.bench's, per phase)
  EXPECT_EQ(ReadAll(std::string(dir) + "/runs.jsonl").find("_cold"), std::string::npos);
  std::string p = std::string(dir) + "/plots/";
  for (const char *base : {"cliff", "cliff-io", "ab", "timeline-off", "timeline-on"}) {
    std::string png = ReadAll(p + base + ".png"), svg = ReadAll(p + base + ".svg");
    ASSERT_GT(png.size(), 8u) << base;
    EXPECT_EQ(png.substr(1, 3), "PNG") << base;
    EXPECT_GT(png.size(), 10000u) << base << ": a PNG this small has no plot in it";
    EXPECT_NE(svg.find("<svg"), std::string::npos) << base;
    // drawn data: gnuplot's SVG paths for lines and boxes
    size_t paths = 0;
    for (size_t k = svg.find("<path"); k != std::string::npos; k = svg.find("<path", k + 1)) paths++;
    EXPECT_GT(paths, 10u) << base;
  }
  // cliff.dat: per series ("# off", "# on") one line per budget
  std::string cliff = ReadAll(p + "cliff.dat");
  int data_lines = 0;
  std::istringstream in(cliff);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    data_lines++;
    // budget, tok/s median/min/max, hit %, GiB read per token, major faults per token
    std::istringstream cols(line);
    std::vector<double> c;
    for (double x; cols >> x;) c.push_back(x);
    ASSERT_EQ(c.size(), 7u) << line;
    EXPECT_GT(c[5], 0) << line;   // nano reads experts every run (cold)
    EXPECT_GE(c[6], 0) << line;
  }
  EXPECT_EQ(data_lines, 2 * 2) << cliff;
  // the cliff plot marks the engine's default budget for the runs' ctx (256)
  // and threads (1) on the runs' RAM (what spill_engine_open plans with no budget),
  // at a precision that means something on a small model
  {
    spill_plan plan;
    spill_err pe = {};
    ASSERT_EQ(spill_plan_model(NanoModel().c_str(), 256, 1, 0, 0, &plan, &pe), SPILL_OK) << pe.msg;
    char want[96];
    snprintf(want, sizeof want, "'default budget %.3g GiB' at %.6f,", plan.budget / 1073741824.0,
             plan.budget / 1073741824.0);
    std::string gp = ReadAll(p + "cliff.gp");
    EXPECT_NE(gp.find(want), std::string::npos) << want << "\n" << gp;
  }
  // ab.dat: one line per (budget, arm) at least
  std::string ab = ReadAll(p + "ab.dat");
  int ab_lines = 0;
  std::istringstream ain(ab);
  while (std::getline(ain, line)) ab_lines += !line.empty() && line[0] != '#';
  EXPECT_GE(ab_lines, 2) << ab;
  // timeline: one line per decoded token
  EXPECT_EQ(CountRows(p + "timeline-off.dat"), 6);
}

// Two writers on one results directory: the second is refused with an error
// naming the holder's PID (flock on DIR/.lock), and once the holder dies
// (SIGKILL: the kernel drops the lock) a resume completes with every
// planned run exactly once (issue 19 item 2).
TEST(ExpRunnerTest, SecondWriterOfAResultsDirectoryIsRefusedNamingTheHolder) {
  std::string root = TmpDir() + "/lock";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "lock", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "lock test", "decode_tokens": 4},
    "base": {"storage": "pagecache"}, "sweep": {"lookahead": [0, 2]},
    "arms": [{"name": "a"}, {"name": "b"}], "repeats": 2,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results";
  spill_exp_opts o = QuickOpts(results);
  // Slow enough (1 s per run) that the parent's attempts land mid-sweep.
  pid_t child = ForkSlowExperiment(cfg, o, 1000000);
  ASSERT_GE(child, 0);
  std::string dir;
  for (int i = 0; i < 3000 && dir.empty(); i++) {
    dir = LatestDir(results, "lock");
    if (!dir.empty() && CountRows(dir + "/runs.jsonl") < 1) dir.clear();
    if (dir.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(dir.empty());
  o.resume = 1;
  o.resume_dir = dir.c_str();
  char out[1024];
  spill_err e = {};
  EXPECT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("is being written by process " + std::to_string(child)),
            std::string::npos)
      << e.msg;
  // issue 26 item 15: the refused resume wrote the holder's summary, tables
  // and plots; the holder has not finished, so none may exist yet
  for (const char *f : {"summary.json", "table.md", "plots", "interrupted.json"})
    EXPECT_NE(access((dir + "/" + f).c_str(), F_OK), 0) << f << " written by the refused resume";
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  int before = CountRows(dir + "/runs.jsonl");
  EXPECT_LT(before, 8);
  e = {};
  ASSERT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), 0) << e.msg;
  EXPECT_EQ(CountRows(dir + "/runs.jsonl"), 8);
  spill_exp_report_result *res = new spill_exp_report_result;
  ASSERT_EQ(spill_exp_report(dir.c_str(), res, &e), 0) << e.msg;  // no duplicates
  EXPECT_EQ(res->rows, 8);
  delete res;
  spill_exp_config_free(&cfg);
}

namespace {

struct PagingSeen {
  std::vector<std::string> phases;  // in order
  std::string key;
};

void RecordPhase(void *user, const spill_exp_progress *p) {
  auto *s = static_cast<PagingSeen *>(user);
  s->phases.push_back(p->phase);
  if (!strcmp(p->phase, "paging")) s->key = p->key ? p->key : "";
}

// Pushes trunk.bin of `model` out of memory every millisecond while `on`.
void PushOutLoop(std::string trunk, std::atomic<bool> *on) {
  while (on->load()) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.size() < trunk.size() ||
          line.compare(line.size() - trunk.size(), trunk.size(), trunk))
        continue;
      unsigned long a = 0, b = 0;
      if (sscanf(line.c_str(), "%lx-%lx", &a, &b) != 2) continue;
      madvise(reinterpret_cast<void *>(a), b - a, MADV_RANDOM);
      madvise(reinterpret_cast<void *>(a), b - a, MADV_PAGEOUT);
    }
    int fd = open(trunk.c_str(), O_RDONLY);
    if (fd >= 0) {
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

// Runtime paging detection in the harness: with the file-backed trunk pushed
// out of memory all along (as past the RAM cliff), the runner reports phase
// "paging" while the run goes (before the run's own "run" progress line;
// `spill exp` prints it as a warning on stderr) and the row says
// "paging": true; the same config without the push-out has neither.
TEST(ExpRunnerTest, PagingIsFlaggedWhileTheRunGoes) {
  std::string root = TmpDir() + "/paging";
  mkdir(root.c_str(), 0755);
  std::string model = root + "/mini-small";
  spill_gen_request req = {};
  req.preset = "mini";
  req.experts = 8;
  req.moe_layers = 1;
  req.top_k = 2;
  spill_err e = {};
  ASSERT_EQ(spill_gen(model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  for (int arm = 0; arm < 2; arm++) {
    std::string name = arm ? "paging-on" : "paging-off";
    std::string text = R"({"name": ")" + name + R"(", "model": ")" + model + R"(",
      "workload": {"prompt": "paging", "decode_tokens": 6},
      "base": {"trunk": "mmap", "storage": "pagecache"},
      "arms": [{"name": "a"}], "repeats": 1, "outputs": {"tables": ["md"], "plots": []}})";
    PagingSeen seen;
    char dir[1024];
    std::atomic<bool> on(arm == 1);
    std::thread pusher(PushOutLoop, model + "/trunk.bin", &on);
    ::testing::AssertionResult ran =
        RunExperiment(text, root + "/results", dir, sizeof dir, RecordPhase, &seen);
    on = false;
    pusher.join();
    ASSERT_TRUE(ran);
    std::string rows = ReadAll(std::string(dir) + "/runs.jsonl");
    auto at = [&](const char *ph) {
      for (size_t i = 0; i < seen.phases.size(); i++)
        if (seen.phases[i] == ph) return (int)i;
      return -1;
    };
    if (arm == 0) {
      EXPECT_NE(rows.find("\"paging\":false"), std::string::npos) << rows;
      EXPECT_EQ(at("paging"), -1);
    } else {
      EXPECT_NE(rows.find("\"paging\":true"), std::string::npos) << rows;
      ASSERT_GE(at("paging"), 0);
      EXPECT_LT(at("paging"), at("run")) << "paging reported only after the run";
      EXPECT_EQ(seen.key, "-/a/r0");
    }
  }
}

namespace {

struct CopySeen {
  int copies = 0;
};

void CountCopies(void *user, const spill_exp_progress *p) {
  if (!strcmp(p->phase, "copy")) static_cast<CopySeen *>(user)->copies++;
}

}  // namespace

// storage_path: the container is copied there once (every file, same bytes)
// and the runs read the copy (env.json names it); the tokens equal a run on
// the original; a second experiment finds the copy complete and copies
// nothing.
TEST(ExpRunnerTest, StoragePathRunsFromACopy) {
  std::string root = TmpDir() + "/storage-path";
  mkdir(root.c_str(), 0755);
  std::string store = root + "/store";
  std::string hashes[3];
  int copies[3];
  std::string model_dirs[3];
  for (int i = 0; i < 3; i++) {  // 0: original, 1: copy made, 2: copy reused
    std::string text = R"({"name": "sp)" + std::to_string(i) + R"(", "model": ")" + NanoModel() +
                       R"(", "workload": {"prompt": "storage path", "decode_tokens": 4},
      "base": {"storage": "pagecache"},)" +
                       (i ? R"( "storage_path": ")" + store + R"(",)" : std::string()) + R"(
      "arms": [{"name": "a"}], "repeats": 1, "outputs": {"tables": ["md"], "plots": []}})";
    CopySeen seen;
    char dir[1024];
    ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir, CountCopies, &seen));
    std::string rows = ReadAll(std::string(dir) + "/runs.jsonl");
    size_t k = rows.find("\"hash\":\"");
    ASSERT_NE(k, std::string::npos) << rows;
    hashes[i] = rows.substr(k + 8, 16);
    copies[i] = seen.copies;
    std::string env = ReadAll(std::string(dir) + "/env.json");
    k = env.find("\"dir\":");
    ASSERT_NE(k, std::string::npos) << env;
    model_dirs[i] = env.substr(k, env.find('\n', k) - k);
  }
  EXPECT_EQ(hashes[1], hashes[0]);
  EXPECT_EQ(hashes[2], hashes[0]);
  EXPECT_EQ(copies[0], 0);
  EXPECT_GT(copies[1], 0);
  EXPECT_EQ(copies[2], 0) << "a complete copy was copied again";
  EXPECT_EQ(model_dirs[0].find(store), std::string::npos) << model_dirs[0];
  EXPECT_NE(model_dirs[1].find(store), std::string::npos) << model_dirs[1];
  // every file of the container is in the copy with the same bytes
  spill_info info;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(NanoModel().c_str(), &info, &e), 0) << e.msg;
  std::string copy = store + "/" + info.name;
  DIR *d = opendir(NanoModel().c_str());
  ASSERT_NE(d, nullptr);
  int files = 0;
  while (struct dirent *ent = readdir(d)) {
    if (ent->d_name[0] == '.') continue;
    std::string a = ReadAll(NanoModel() + "/" + ent->d_name), b = ReadAll(copy + "/" + ent->d_name);
    EXPECT_EQ(a.size(), b.size()) << ent->d_name;
    EXPECT_TRUE(a == b) << ent->d_name << " differs in the copy";
    files++;
  }
  closedir(d);
  EXPECT_GE(files, 2);
}

// A stop (SIGINT in `spill exp`) marks the results directory interrupted
// (DIR/interrupted.json: the cut run, rows done and planned), keeps the
// finished rows, and a resume that completes the plan removes the mark
// (issue 19 item 5).
TEST(ExpRunnerTest, StopMarksTheDirectoryInterruptedUntilAResumeCompletesIt) {
  std::string root = TmpDir() + "/stop";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "stop", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "stop test", "decode_tokens": 4},
    "base": {"storage": "pagecache"},
    "arms": [{"name": "a"}, {"name": "b"}], "repeats": 2,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  std::string results = root + "/results";
  static volatile int stop;
  stop = 0;
  spill_exp_opts o = QuickOpts(results);
  o.stop = &stop;
  o.progress = [](void *, const spill_exp_progress *p) {
    if (!strcmp(p->phase, "run") && p->done >= 1) stop = 1;  // after the first row
  };
  char dir[1024];
  spill_err e = {};
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), SPILL_E_INTERRUPTED) << e.msg;
  std::string mark = ReadAll(std::string(dir) + "/interrupted.json");
  EXPECT_NE(mark.find("\"rows_done\":\t1"), std::string::npos) << mark;
  EXPECT_NE(mark.find("\"rows_planned\":\t4"), std::string::npos) << mark;
  EXPECT_NE(mark.find("\"interrupted_run\":\t\"-/"), std::string::npos) << mark;
  EXPECT_GE(CountRows(std::string(dir) + "/runs.jsonl"), 1);
  stop = 0;
  o.progress = nullptr;
  o.resume = 1;
  o.resume_dir = dir;
  char dir2[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir2, sizeof dir2, &e), 0) << e.msg;
  EXPECT_EQ(CountRows(std::string(dir) + "/runs.jsonl"), 4);
  EXPECT_EQ(FileSize(std::string(dir) + "/interrupted.json"), -1);
  spill_exp_config_free(&cfg);
}

// Two experiments generating the same model recipe at once: one generates,
// the other waits on the recipe lock and reuses it (it once failed on
// "rename ... Directory not empty" and leaked a temp directory); a temp
// directory left by a killed generator is removed (issue 19 item 8).
TEST(ExpRunnerTest, SameRecipeGeneratedOnceByTwoExperimentsAndStaleTempsRemoved) {
  std::string root = TmpDir() + "/recipe";
  mkdir(root.c_str(), 0755);
  std::string cache = root + "/cache";
  std::string text = R"({"name": "recipe", "model": {"preset": "nano", "seed": 7},
    "workload": {"prompt": "recipe", "decode_tokens": 2}, "repeats": 1,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg = Parse(text);
  char model[1024];
  spill_exp_model_dir(&cfg, cache.c_str(), model, sizeof model);
  mkdir(cache.c_str(), 0755);
  std::string stale = std::string(model) + ".tmp.999999999";
  mkdir(stale.c_str(), 0755);
  std::ofstream(stale + "/trunk.bin") << "partial";
  std::string results = root + "/results";
  spill_exp_opts o = QuickOpts(results);
  o.cache_root = cache.c_str();
  pid_t kids[2];
  for (pid_t &k : kids) {
    k = fork();
    ASSERT_GE(k, 0);
    if (k == 0) {
      char dir[1024];
      spill_err ce = {};
      int rc = spill_exp_execute(&cfg, &o, dir, sizeof dir, &ce);
      if (rc) fprintf(stderr, "child: %s\n", ce.msg);
      _exit(rc == 0 ? 0 : 1);
    }
  }
  for (pid_t k : kids) {
    int st;
    ASSERT_EQ(waitpid(k, &st, 0), k);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "an experiment failed";
  }
  EXPECT_GT(FileSize(std::string(model) + "/manifest.json"), 0);
  // no temporary directory left: neither the stale one nor the losers'
  int left = ShellCount("ls -d '" + std::string(model) + "'.tmp.* 2>/dev/null | wc -l");
  EXPECT_EQ(left, 0);
  spill_exp_config_free(&cfg);
}

// --validate / --dry-run check what can be known before running, naming the
// JSON path, and a start that fails before any row leaves no results
// directory (issue 19 item 9).
TEST(ExpRunnerTest, PreflightCatchesWhatWouldFailAtStartAndAFailedStartLeavesNoDirectory) {
  std::string model = NanoModel();
  auto cfg_with = [&](const std::string &base, const std::string &workload) {
    return Parse(R"({"name": "pre", "model": ")" + model + R"(", "workload": )" + workload +
                 R"(, "base": )" + base + R"(, "repeats": 1, "outputs": {"tables": ["md"], "plots": []}})");
  };
  const std::string wl = R"({"prompt": "preflight", "decode_tokens": 4})";
  struct {
    std::string base, want;
  } cases[] = {
      {R"({"budget": "4K"})", "base.budget: cell -, arm base: budget 4.00 KiB is below the RAM floor of "},
      {R"({"cache_slots": 100000})", "base.cache_slots: cell -, arm base: 100000 slots, but the model has 48"},
      {R"({"ctx": 4})", "base.ctx: cell -, arm base: ctx 4 cannot hold the prompt (10 tokens, "
                        "workload.prompt) and 4 decode tokens (workload.decode_tokens): needs 14"},
      // room for the decode tokens but not for the prompt's 10 tokens too
      // ("preflight" and BOS): 15e896b's check (ctx >= decode_tokens + 2) passed it
      {R"({"ctx": 13})", "base.ctx: cell -, arm base: ctx 13 cannot hold the prompt (10 tokens"},
  };
  for (auto &c : cases) {
    spill_exp_config cfg = cfg_with(c.base, wl);
    spill_err e = {};
    EXPECT_EQ(spill_exp_preflight(&cfg, nullptr, &e), SPILL_E_CONFIG) << c.base;
    EXPECT_NE(std::string(e.msg).find(c.want), std::string::npos) << c.base << ": " << e.msg;
    spill_exp_config_free(&cfg);
  }
  {
    spill_exp_config cfg = Parse(R"({"name": "pre", "model": ")" + TmpDir() +
                                 R"(/no-such-model", "workload": {"prompt": "x", "decode_tokens": 1}})");
    spill_err e = {};
    EXPECT_EQ(spill_exp_preflight(&cfg, nullptr, &e), SPILL_E_CONFIG);
    EXPECT_NE(std::string(e.msg).find("model: "), std::string::npos) << e.msg;
    spill_exp_config_free(&cfg);
  }
  for (const char *base : {"{}", R"({"ctx": 14})"}) {  // 14: exactly prompt + decode
    spill_exp_config cfg = cfg_with(base, wl);
    spill_err e = {};
    EXPECT_EQ(spill_exp_preflight(&cfg, nullptr, &e), SPILL_OK) << base << ": " << e.msg;
    spill_exp_config_free(&cfg);
  }
  // A start that fails at the engine (budget below the floor) leaves nothing.
  std::string results = TmpDir() + "/pre-results";
  spill_exp_config cfg = cfg_with(R"({"budget": "4K"})", wl);
  spill_exp_opts o = QuickOpts(results);
  char dir[1024];
  spill_err e = {};
  EXPECT_LT(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0);
  int left = ShellCount("ls -A '" + results + "/pre' 2>/dev/null | wc -l");
  EXPECT_EQ(left, 0) << "a results directory was left behind: " << e.msg;
  spill_exp_config_free(&cfg);
}

// An experiment whose model is a recipe not generated yet is judged against
// the plan of the model it will generate (spill_plan_recipe: the numbers
// spill_plan_model gives on the generated container), without generating it
// (issue 19 item 9; before, such configs passed --validate and failed at start).
TEST(ExpRunnerTest, PreflightJudgesAModelRecipeBeforeItIsGenerated) {
  spill_gen_request req = {};
  req.preset = "nano";
  spill_info im;
  spill_err e = {};
  ASSERT_EQ(spill_info_read(NanoModel().c_str(), &im, &e), SPILL_OK) << e.msg;
  for (int ctx : {64, 4096}) {
    spill_plan pr, pm;
    int bos = -2;
    ASSERT_EQ(spill_plan_recipe(&req, ctx, 2, 0, 1ull << 30, &pr, &bos, &e), SPILL_OK) << e.msg;
    ASSERT_EQ(spill_plan_model(NanoModel().c_str(), ctx, 2, 0, 1ull << 30, &pm, &e), SPILL_OK)
        << e.msg;
    EXPECT_EQ(pr.trunk, pm.trunk) << ctx;
    EXPECT_EQ(pr.floor, pm.floor) << ctx;
    EXPECT_EQ(pr.budget, pm.budget) << ctx;
    EXPECT_EQ(pr.cache_slots, pm.cache_slots) << ctx;
    EXPECT_EQ(pr.model_records, pm.model_records) << ctx;
    EXPECT_EQ(pr.record_bytes, pm.record_bytes) << ctx;
    EXPECT_EQ(bos, im.bos_id);
  }
  {  // a budget below the floor: the same refusal, the plan filled
    spill_plan pr;
    EXPECT_EQ(spill_plan_recipe(&req, 64, 1, 4096, 1ull << 30, &pr, nullptr, &e),
              SPILL_E_RAM_BUDGET);
    EXPECT_GT(pr.floor, 4096u);
  }

  std::string cache = TmpDir() + "/recipe-preflight";
  mkdir(cache.c_str(), 0755);
  auto cfg_with = [&](const std::string &base) {
    return Parse(R"({"name": "rpre", "model": {"preset": "nano", "seed": 7},
      "workload": {"prompt": "preflight", "decode_tokens": 4}, "base": )" + base +
                 R"(, "repeats": 1, "outputs": {"tables": ["md"], "plots": []}})");
  };
  struct {
    std::string base, want;
  } cases[] = {
      {R"({"budget": "4K"})", "base.budget: cell -, arm base: budget 4.00 KiB is below the RAM "
                              "floor of "},
      {R"({"cache_slots": 100000})", "base.cache_slots: cell -, arm base: 100000 slots, but the "
                                     "model has 48 expert records"},
      {R"({"ctx": 13})", "base.ctx: cell -, arm base: ctx 13 cannot hold the prompt (10 tokens"},
  };
  for (auto &c : cases) {
    spill_exp_config cfg = cfg_with(c.base);
    spill_err pe = {};
    EXPECT_EQ(spill_exp_preflight(&cfg, cache.c_str(), &pe), SPILL_E_CONFIG) << c.base;
    EXPECT_NE(std::string(pe.msg).find(c.want), std::string::npos) << c.base << ": " << pe.msg;
    spill_exp_config_free(&cfg);
  }
  {
    spill_exp_config cfg = cfg_with("{}");
    spill_err pe = {};
    EXPECT_EQ(spill_exp_preflight(&cfg, cache.c_str(), &pe), SPILL_OK) << pe.msg;
    spill_exp_config_free(&cfg);
  }
  // nothing was generated
  int n = ShellCount("ls -A '" + cache + "' | wc -l");
  EXPECT_EQ(n, 0);
}

namespace {

// The number after "KEY": in a runs.jsonl line (NaN if absent).
double RowNumber(const std::string &line, const std::string &key) {
  size_t p = line.find("\"" + key + "\":");
  return p == std::string::npos ? NAN : strtod(line.c_str() + p + key.size() + 3, nullptr);
}

// Drafts as an experiment: arms whose drafts are the model's own greedy
// continuation ("drafts_from": "greedy", from the runner's reference pass)
// with the acceptance set by draft_accept_max: half (2 of 4) and none, the
// rule on and off. Every arm gives the control's tokens (exact); the rows
// carry drafted, accepted, forward calls and the decode's expert bytes per
// generated token, and the runner judges a hypothesis on that counter.
TEST(ExpRunnerTest, DraftArmsWithGreedyDraftsRecordTheirCountersAndAreJudged) {
  std::string root = TmpDir() + "/drafts";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "drafts", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "drafts test", "decode_tokens": 24},
    "base": {"cache_slots": 8},
    "arms": [{"name": "off"},
             {"name": "half", "set": {"draft": 4, "draft_accept_max": 2, "draft_adaptive": false},
              "drafts_from": "greedy", "exact": true},
             {"name": "none", "set": {"draft": 4, "draft_accept_max": 0, "draft_adaptive": false},
              "drafts_from": "greedy", "exact": true},
             {"name": "none-adaptive", "set": {"draft": 4, "draft_accept_max": 0},
              "drafts_from": "greedy", "exact": true},
             {"name": "lookup", "set": {"draft": 4}, "exact": true}],
    "hypothesis": {"claim": "half-accepted drafts read fewer expert bytes per generated token",
                   "metric": "decode_bytes_per_token", "direction": "decrease",
                   "control": "off", "treatment": "half"},
    "repeats": 3, "order": "abba", "outputs": {"tables": ["md", "csv"], "plots": []}})";
  char dir[1024];
  ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir));
  std::ifstream rows(std::string(dir) + "/runs.jsonl");
  std::string line;
  std::map<std::string, int> n;
  while (std::getline(rows, line)) {
    SCOPED_TRACE(line);
    const std::string arm = line.substr(line.find("\"arm\":\"") + 7);
    const std::string name = arm.substr(0, arm.find('"'));
    n[name]++;
    const double drafted = RowNumber(line, "draft_tokens"), acc = RowNumber(line, "draft_accepted");
    const double fw = RowNumber(line, "decode_forwards"), toks = RowNumber(line, "tokens_decode");
    const double bd = RowNumber(line, "bytes_read_decode");
    EXPECT_GT(bd, 0.0);
    EXPECT_LT(bd, RowNumber(line, "bytes_read")); // the prompt's reads are not in it
    EXPECT_DOUBLE_EQ(RowNumber(line, "decode_bytes_per_token"), bd / toks);
    EXPECT_EQ(fw + acc, toks); // every token: a forward's t0 or an accepted draft
    if (name == "off") {
      EXPECT_EQ(drafted, 0.0);
    } else if (name == "half") { // all 4 drafts right, 2 accepted: 3 tokens per chunk
      EXPECT_GT(acc, 0.0);
      EXPECT_LE(acc, 2 * fw);
      EXPECT_GE(acc, 2 * (fw - 2)); // the last chunks may be shorter
      EXPECT_LT(acc, drafted);
    } else if (name == "none") {
      EXPECT_EQ(acc, 0.0);
      EXPECT_GE(drafted, toks - 1);
    } else if (name == "none-adaptive") {
      EXPECT_EQ(acc, 0.0);
      EXPECT_GT(drafted, 0.0);
      EXPECT_GE(RowNumber(line, "draft_switched_off"), 1.0);
    }
  }
  EXPECT_EQ(n, (std::map<std::string, int>{
                   {"off", 3}, {"half", 3}, {"none", 3}, {"none-adaptive", 3}, {"lookup", 3}}));
  const std::string summary = ReadAll(std::string(dir) + "/summary.json");
  EXPECT_NE(summary.find("\"metric\":\t\"decode_bytes_per_token\""), std::string::npos) << summary;
  // deterministic counters: a degenerate CI, so the verdict is not withheld
  EXPECT_EQ(summary.find("\"verdict\":\t\"inconclusive\""), std::string::npos) << summary;
}

// An arm with the open-time knob preload all: every row of it pays its own
// preload before the run (metric preload_s > 0, preload_bytes = every record)
// and none of it in the run (no read, no miss), with the tokens of the cold
// arm (exact); the cold arm's preload is 0; the table has the column.
TEST(ExpRunnerTest, PreloadArmRecordsItsPreloadApartFromTheRun) {
  std::string root = TmpDir() + "/preload";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "preload", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "preload test", "decode_tokens": 4},
    "arms": [{"name": "cold"}, {"name": "preloaded", "set": {"preload": "all"}, "exact": true}],
    "repeats": 2, "order": "abba", "outputs": {"tables": ["md"], "plots": []}})";
  char dir[1024];
  ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir));
  spill_plan p;
  spill_err e = {};
  ASSERT_EQ(spill_plan_model(NanoModel().c_str(), 4096, 2, 0, 0, &p, &e), SPILL_OK) << e.msg;
  std::ifstream rows(std::string(dir) + "/runs.jsonl");
  std::string line;
  int n_pre = 0, n_cold = 0;
  while (std::getline(rows, line)) {
    SCOPED_TRACE(line);
    if (line.find("\"arm\":\"preloaded\"") != std::string::npos) {
      n_pre++;
      EXPECT_GT(RowNumber(line, "preload_s"), 0.0);
      EXPECT_EQ(RowNumber(line, "preload_bytes"), (double)(p.model_records * p.record_bytes));
      EXPECT_EQ(RowNumber(line, "reads"), 0.0);
      EXPECT_EQ(RowNumber(line, "demand_misses"), 0.0);
    } else {
      n_cold++;
      EXPECT_EQ(RowNumber(line, "preload_s"), 0.0);
      EXPECT_EQ(RowNumber(line, "preload_bytes"), 0.0);
      EXPECT_GT(RowNumber(line, "reads"), 0.0);
    }
  }
  EXPECT_EQ(n_pre, 2);
  EXPECT_EQ(n_cold, 2);
  std::string table = ReadAll(std::string(dir) + "/table.md");
  EXPECT_NE(table.find("| preload s |"), std::string::npos) << table;
}

}  // namespace

namespace {

// A finished 12-run experiment on nano (2 lookaheads x 2 arms x 3 repeats).
std::string TwelveRows(const std::string &root, std::string *text) {
  mkdir(root.c_str(), 0755);
  *text = R"({"name": "rows12", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "rows", "decode_tokens": 2},
    "base": {"storage": "pagecache"}, "sweep": {"lookahead": [0, 2]},
    "arms": [{"name": "a"}, {"name": "b"}], "repeats": 3,
    "outputs": {"tables": ["md"], "plots": []}})";
  char dir[4096];
  EXPECT_TRUE(RunExperiment(*text, root + "/results", dir, sizeof dir));
  return dir;
}

}  // namespace

// Issue 26 item 4: `spill exp --resume` on a 12-row directory with one NUL
// in row 3 exited 0 having deleted 9 of the 11 intact rows; a NUL-filled
// tail made every resume rerun the same runs after the NULs.
TEST(ExpRunnerTest, ResumeNeverDeletesRowsAroundANulAndRepairsANulTail) {
  std::string text;
  std::string dir = TwelveRows(TmpDir() + "/nulrows", &text);
  std::string rows = dir + "/runs.jsonl";
  std::string good = ReadAll(rows);
  ASSERT_EQ(CountRows(rows), 12);
  spill_exp_config cfg = Parse(text);
  std::string rs = TmpDir() + "/nulrows/results";
  spill_exp_opts o = QuickOpts(rs);
  o.resume = 1;
  o.resume_dir = dir.c_str();
  char out[4096];
  spill_err e = {};
  // one NUL inside row 3: refused naming the line, every byte kept
  std::string bad = good;
  size_t row3 = 0;
  for (int i = 0; i < 2; i++) row3 = bad.find('\n', row3) + 1;
  bad[row3 + 10] = '\0';
  {
    std::ofstream(rows, std::ios::binary | std::ios::trunc) << bad;
  }
  EXPECT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("runs.jsonl: line 3: a NUL byte"), std::string::npos) << e.msg;
  EXPECT_EQ(ReadAll(rows), bad);
  // the last row torn by a power loss (its bytes zeros): the resume reruns
  // that one run, once, on a line of its own
  size_t last = good.rfind('\n', good.size() - 2) + 1;
  std::string torn = good.substr(0, last) + std::string(good.size() - last + 1000, '\0');
  {
    std::ofstream(rows, std::ios::binary | std::ios::trunc) << torn;
  }
  e = {};
  ASSERT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), SPILL_OK) << e.msg;
  std::string after = ReadAll(rows);
  EXPECT_EQ(after.find('\0'), std::string::npos);
  EXPECT_EQ(CountRows(rows), 12);
  EXPECT_EQ(after.substr(0, last), good.substr(0, last));
  ASSERT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(ReadAll(rows), after);  // nothing rerun
  spill_exp_config_free(&cfg);
}

// Issue 26 item 5: runs.jsonl.lock (or runs.jsonl) as a symlink had the file
// it points at truncated and the PID written into it (or the rows appended).
TEST(ExpRunnerTest, SymlinksInAResultsDirectoryAreRefusedNotFollowed) {
  std::string text;
  std::string dir = TwelveRows(TmpDir() + "/links", &text);
  std::string victim = TmpDir() + "/links/victim.txt";
  {
    std::ofstream(victim) << "precious\n";
  }
  spill_exp_config cfg = Parse(text);
  std::string rs = TmpDir() + "/links/results";
  spill_exp_opts o = QuickOpts(rs);
  o.resume = 1;
  o.resume_dir = dir.c_str();
  char out[4096];
  for (const char *name : {"runs.jsonl.lock", "runs.jsonl"}) {
    std::string f = dir + "/" + name, keep = f + ".keep";
    ASSERT_EQ(rename(f.c_str(), keep.c_str()), 0);
    ASSERT_EQ(symlink(victim.c_str(), f.c_str()), 0);
    spill_err e = {};
    EXPECT_EQ(spill_exp_execute(&cfg, &o, out, sizeof out, &e), SPILL_E_IO) << name;
    EXPECT_NE(std::string(e.msg).find(f + ": is a symbolic link"), std::string::npos) << e.msg;
    EXPECT_EQ(ReadAll(victim), "precious\n") << name;
    unlink(f.c_str());
    ASSERT_EQ(rename(keep.c_str(), f.c_str()), 0);
  }
  spill_exp_config_free(&cfg);
}

// Issue 26 item 12: a 1,219-byte --results path was cut at 699 bytes into
// another directory, exit 0. Now it is used whole; a path too long for the
// files under it is refused by name and nothing is created.
TEST(ExpRunnerTest, LongResultsPathsAreUsedWholeOrRefused) {
  std::string base = TmpDir() + "/longres";
  mkdir(base.c_str(), 0755);
  std::string root = base;
  while (root.size() < 1219) root += "/" + std::string(200, 'r');
  root.resize(1219);
  while (root.back() == '/') root.pop_back();
  spill_err e = {};
  ASSERT_EQ(spill_exp_mkdirs(root.c_str(), &e), SPILL_OK) << e.msg;
  std::string text = R"({"name": "long", "model": ")" + NanoModel() + R"(",
    "workload": {"prompt": "long", "decode_tokens": 2}, "base": {"storage": "pagecache"},
    "outputs": {"tables": ["md"], "plots": []}})";
  char dir[4096];
  ASSERT_TRUE(RunExperiment(text, root, dir, sizeof dir));
  EXPECT_EQ(std::string(dir).substr(0, root.size() + 6), root + "/long/");
  EXPECT_GE(CountRows(std::string(dir) + "/runs.jsonl"), 1);
  EXPECT_EQ(access((std::string(dir) + "/summary.json").c_str(), F_OK), 0);
  // nothing under the cut path (699 bytes) but the directories mkdirs made
  EXPECT_NE(access((root.substr(0, 699) + "/long").c_str(), F_OK), 0);
  std::string huge = root;
  while (huge.size() < 3800) huge += "/" + std::string(200, 'h');
  spill_exp_config cfg = Parse(text);
  spill_exp_opts o = QuickOpts(huge);
  e = {};
  EXPECT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), SPILL_E_INVALID_ARG);
  EXPECT_NE(std::string(e.msg).find("path too long"), std::string::npos) << e.msg;
  EXPECT_NE(access(huge.substr(0, 1500).c_str(), F_OK), 0);  // nothing created
  spill_exp_config_free(&cfg);
}

// workload.bench on nano (issue 28 item 3): every row carries, per phase,
// the medians over its prompts as metrics a hypothesis names, each prompt's
// sample, counters over all of its requests; cold requests miss and warm
// ones (the same request again) hit at least as often; exact arms agree; the
// tables show the bench columns and the plots are drawn. A warm-only config
// records only warm (its cold requests run unrecorded).
TEST(ExpRunnerTest, BenchWorkloadRecordsPhasesAndPromptsAsMetrics) {
  std::string root = TmpDir() + "/benchwl";
  mkdir(root.c_str(), 0755);
  std::string text = R"({"name": "benchwl", "model": ")" + NanoModel() + R"(",
    "workload": {"bench": {"pp": 40, "tg": 3, "prompts": ["code", "prose"]}},
    "base": {"storage": "pagecache", "ctx": 256, "threads": 1},
    "sweep": {"budget": ["48M", "96M"]},
    "arms": [{"name": "off", "set": {"lookahead": 0}},
             {"name": "on", "set": {"lookahead": 4}, "exact": true}],
    "repeats": 3,
    "hypothesis": {"claim": "lookahead raises tg tok/s cold", "metric": "tg_tok_per_s_cold",
                   "direction": "increase"},
    "outputs": {"plots": ["cliff", "ab"]}})";
  char dir[1024];
  ASSERT_TRUE(RunExperiment(text, root + "/results", dir, sizeof dir));
  std::ifstream in(std::string(dir) + "/runs.jsonl");
  std::string line;
  int rows = 0;
  const char *phases[] = {"cold", "warm"};
  const char *fields[] = {"pp_tok_per_s", "tg_tok_per_s", "ttft_s", "decode_bytes_per_token",
                          "decode_hit_rate", "peak_rss_bytes"};
  while (std::getline(in, line)) {
    rows++;
    cJSON *j = cJSON_Parse(line.c_str());
    ASSERT_NE(j, nullptr) << line;
    const cJSON *m = cJSON_GetObjectItem(j, "metrics");
    for (const char *ph : phases)
      for (const char *f : fields) {
        std::string name = std::string(f) + "_" + ph;
        const cJSON *v = cJSON_GetObjectItem(m, name.c_str());
        ASSERT_TRUE(cJSON_IsNumber(v)) << name << ": " << line;
        if (strcmp(f, "decode_hit_rate") && strcmp(f, "decode_bytes_per_token"))
          EXPECT_GT(v->valuedouble, 0) << name;
      }
    EXPECT_EQ(cJSON_GetObjectItem(m, "decode_tok_per_s"), nullptr) << "a one-request metric";
    // counters over the run's 2 prompts x 2 phases
    EXPECT_EQ(cJSON_GetObjectItem(m, "tokens_prefill")->valuedouble, 2 * 2 * 40);
    EXPECT_EQ(cJSON_GetObjectItem(m, "tokens_decode")->valuedouble, 2 * 2 * 3);
    EXPECT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "tokens"), "n")->valueint, 12);
    const cJSON *b = cJSON_GetObjectItem(j, "bench");
    EXPECT_EQ(cJSON_GetObjectItem(b, "pp")->valueint, 40);
    const cJSON *samples = cJSON_GetObjectItem(b, "samples");
    ASSERT_EQ(cJSON_GetArraySize(samples), 4) << line;
    double tg_cold[2], bytes = 0;
    int k = 0;
    std::string seen;
    for (const cJSON *s = samples->child; s; s = s->next) {
      std::string prompt = cJSON_GetObjectItem(s, "prompt")->valuestring;
      std::string phase = cJSON_GetObjectItem(s, "phase")->valuestring;
      seen += prompt + "/" + phase + " ";
      EXPECT_EQ(cJSON_GetObjectItem(s, "n_prompt")->valueint, 40);
      EXPECT_EQ(cJSON_GetObjectItem(s, "n_gen")->valueint, 3);
      bytes += cJSON_GetObjectItem(s, "bytes_read")->valuedouble;
      double misses = cJSON_GetObjectItem(s, "decode_misses")->valuedouble;
      double hit = cJSON_GetObjectItem(s, "decode_hit_rate")->valuedouble;
      if (phase == "cold") {
        tg_cold[k++] = cJSON_GetObjectItem(s, "tg_tok_per_s")->valuedouble;
        EXPECT_GT(cJSON_GetObjectItem(s, "bytes_read")->valuedouble, 0) << "cold reads experts";
      } else {  // warm follows its cold twin: same tokens, hit rate no lower
        const cJSON *c = s->prev;
        EXPECT_STREQ(cJSON_GetObjectItem(s, "tokens_hash")->valuestring,
                     cJSON_GetObjectItem(c, "tokens_hash")->valuestring);
        EXPECT_GE(hit, cJSON_GetObjectItem(c, "decode_hit_rate")->valuedouble);
        EXPECT_LE(misses, cJSON_GetObjectItem(c, "decode_misses")->valuedouble);
      }
    }
    EXPECT_EQ(seen, "code/cold code/warm prose/cold prose/warm ");
    // the metric is the median over the prompts (two: their mean)
    EXPECT_NEAR(cJSON_GetObjectItem(m, "tg_tok_per_s_cold")->valuedouble,
                (tg_cold[0] + tg_cold[1]) / 2, 1e-9 * tg_cold[0]);
    EXPECT_EQ(cJSON_GetObjectItem(m, "bytes_read")->valuedouble, bytes);
    cJSON_Delete(j);
  }
  EXPECT_EQ(rows, 2 * 2 * 3);
  std::string md = ReadAll(std::string(dir) + "/table.md");
  for (const char *h : {"| pp tok/s cold |", "| tg tok/s cold |", "| TTFT s warm |",
                        "| MiB read/tok warm |", "| decode hit % cold |", "| peak RSS MiB warm |"})
    EXPECT_NE(md.find(h), std::string::npos) << h << "\n" << md;
  EXPECT_EQ(md.find("decode tok/s"), std::string::npos) << md;
  std::string csv = ReadAll(std::string(dir) + "/table.csv");
  EXPECT_NE(csv.find("tg_tok_per_s_warm (tok/s) median"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("decode_tok_per_s"), std::string::npos) << csv;
  std::string summary = ReadAll(std::string(dir) + "/summary.json");
  for (const char *m : {"\"pp_tok_per_s_cold\"", "\"tg_tok_per_s_warm\"", "\"verdict\""})
    EXPECT_NE(summary.find(m), std::string::npos) << m;
  std::string p = std::string(dir) + "/plots/";
  for (const char *base : {"cliff", "cliff-io", "ab"})
    EXPECT_GT(ReadAll(p + base + ".png").size(), 10000u) << base;
  std::istringstream cl(ReadAll(p + "cliff.dat"));
  int points = 0;
  while (std::getline(cl, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream cols(line);
    std::vector<double> c;
    for (double x; cols >> x;) c.push_back(x);
    ASSERT_EQ(c.size(), 7u) << line;
    EXPECT_GT(c[1], 0) << "tg tok/s cold: " << line;
    EXPECT_GT(c[5], 0) << "GiB read per token: " << line;
    points++;
  }
  EXPECT_EQ(points, 2 * 2);
}

// A warm-only bench workload records only warm; its cold requests run first,
// unrecorded (counted in the run's tokens).
TEST(ExpRunnerTest, BenchWorkloadWarmOnlyRunsItsColdRequestUnrecorded) {
  std::string root = TmpDir() + "/benchwarm";
  mkdir(root.c_str(), 0755);
  std::string warm = R"({"name": "benchwarm", "model": ")" + NanoModel() + R"(",
    "workload": {"bench": {"pp": 16, "tg": 2, "prompts": ["chat"], "phases": ["warm"]}},
    "base": {"ctx": 64, "threads": 1}, "repeats": 1})";
  char dir[1024];
  std::string line;
  ASSERT_TRUE(RunExperiment(warm, root + "/results", dir, sizeof dir));
  std::ifstream w(std::string(dir) + "/runs.jsonl");
  ASSERT_TRUE(std::getline(w, line));
  cJSON *j = cJSON_Parse(line.c_str());
  ASSERT_NE(j, nullptr);
  const cJSON *m = cJSON_GetObjectItem(j, "metrics");
  EXPECT_TRUE(cJSON_IsNumber(cJSON_GetObjectItem(m, "tg_tok_per_s_warm"))) << line;
  EXPECT_EQ(cJSON_GetObjectItem(m, "tg_tok_per_s_cold"), nullptr) << line;
  EXPECT_EQ(cJSON_GetObjectItem(m, "tokens_decode")->valuedouble, 2 * 2) << "the cold one ran";
  const cJSON *samples = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "bench"), "samples");
  ASSERT_EQ(cJSON_GetArraySize(samples), 1);
  EXPECT_STREQ(cJSON_GetObjectItem(samples->child, "phase")->valuestring, "warm");
  cJSON_Delete(j);
}
