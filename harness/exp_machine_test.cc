// harness/exp_machine_test.cc: experiments with a machine profile
// (machine.ram/wired/swap, harness/machine_profile.h) on a tiny generated
// model: config validation, the limits and counters each row records, a
// swept wired axis reopening the machine, nothing left behind, and a runner
// killed with SIGKILL whose leftovers the next run removes and names.
// Runs outside Bazel's sandbox (tag no-sandbox: the sandbox's cgroup tree is
// read-only); where the profile cannot be set up, the cases that need it
// skip and say why.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <cjson/cJSON.h>
#include "harness/exp_config.h"
#include "harness/exp_runner.h"
#include "harness/machine_profile.h"
#include "research/gen/spill_gen.h"

namespace {

std::string Tmp(const std::string &leaf) {
  const char *d = getenv("TEST_TMPDIR");
  std::string p = std::string(d ? d : "/tmp") + "/" + leaf;
  mkdir(p.c_str(), 0755);
  return p;
}

std::string Unavailable() {
  spill_machine_spec s = {256ull << 20, 0, 0, -1};
  spill_err e = {};
  if (spill_machine_check(&s, &e) < 0) return e.msg;
  return "";
}

int ParseRc(const std::string &text, std::string *msg) {
  spill_exp_config cfg;
  spill_err e = {};
  int rc = spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e);
  if (rc == 0) spill_exp_config_free(&cfg);
  *msg = e.msg;
  return rc;
}

// What every machine-profile case sets up: a scratch root, its own state
// directory (SPILL_MACHINE_STATE_DIR, so cases never see each other's
// leftovers) and runner options that write under root/results.
struct Scratch {
  std::string root, state, results;
  spill_exp_opts o = {};
  explicit Scratch(const std::string &name)
      : root(Tmp(name)), state(Tmp(name + "-state")), results(root + "/results") {
    setenv("SPILL_MACHINE_STATE_DIR", state.c_str(), 1);
    o.results_root = results.c_str();
    o.commit = "test";
    o.quick_env = 1;
  }
  Scratch(const Scratch &) = delete;  // o points into results
  Scratch &operator=(const Scratch &) = delete;
};

const char *kHead = R"({"name": "mach", "model": "m", "workload": {"prompt": "x", "decode_tokens": 2}, )";

TEST(ExpMachineTest, ConfigRefusesIncoherentProfilesByName) {
  std::string msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"wired": "1G"}})", &msg), 0);
  EXPECT_NE(msg.find("needs \"ram\""), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"ram": "2G", "wired": "2G"}})", &msg), 0);
  EXPECT_NE(msg.find("machine.wired"), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"ram": "2G", "emulate_ram": "2G"}})", &msg), 0);
  EXPECT_NE(msg.find("two emulations"), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("sweep": {"wired": ["1G"]}})", &msg), 0);
  EXPECT_NE(msg.find("set machine.ram"), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"ram": "2G", "wired": "1G"}, "sweep": {"wired": ["1G"]}})", &msg), 0);
  EXPECT_NE(msg.find("both set in machine and swept"), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"ram": "2G", "swappiness": 500}})", &msg), 0);
  EXPECT_NE(msg.find("swappiness"), std::string::npos) << msg;
  EXPECT_NE(ParseRc(std::string(kHead) + R"("machine": {"ram": "2G"}, "sweep": {"wired": ["1G", "3G"]}})", &msg), 0);
  EXPECT_NE(msg.find("not below machine.ram"), std::string::npos) << msg;
  // a good one: machine axes run slowest (before budget), swap "0" allowed
  spill_exp_config cfg;
  spill_err e = {};
  std::string good = std::string(kHead) +
      R"("machine": {"ram": "2G", "wired": "256M"}, "sweep": {"budget": ["600M", "400M"], "swap": ["1G", "0"]}})";
  ASSERT_EQ(spill_exp_config_parse(good.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  ASSERT_EQ(cfg.n_axes, 2);
  EXPECT_STREQ(cfg.axes[0].key, "swap");
  EXPECT_STREQ(cfg.axes[0].values[0], "0");
  uint64_t r, w, s;
  int sp;
  ASSERT_EQ(spill_exp_config_machine(&cfg, 0, &r, &w, &s, &sp), 1);
  EXPECT_EQ(r, 2ull << 30);
  EXPECT_EQ(w, 256ull << 20);
  EXPECT_EQ(s, 0u);
  spill_exp_config_machine(&cfg, 2, &r, &w, &s, &sp);
  EXPECT_EQ(s, 1ull << 30);
  spill_config sc;
  ASSERT_EQ(spill_exp_config_engine(&cfg, 0, 0, &sc, &e), 0) << e.msg;
  EXPECT_EQ(sc.usable_ram, 2ull << 30);  // the planner plans for the profile's RAM
  spill_exp_config_free(&cfg);
}

std::string MakeNano(const std::string &root) {
  std::string model = root + "/nano";
  spill_gen_request req = {};
  req.preset = "nano";
  spill_err e = {};
  EXPECT_EQ(spill_gen(model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  return model;
}

std::vector<cJSON *> Rows(const std::string &file) {
  std::ifstream f(file);
  std::string line;
  std::vector<cJSON *> v;
  while (std::getline(f, line))
    if (!line.empty()) v.push_back(cJSON_Parse(line.c_str()));
  return v;
}

double Num(const cJSON *o, const char *a, const char *b, const char *c) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);
  x = cJSON_GetObjectItemCaseSensitive(x, b);
  x = cJSON_GetObjectItemCaseSensitive(x, c);
  return cJSON_IsNumber(x) ? x->valuedouble : -1;
}

int CountEntries(const std::string &dir, const char *prefix) {
  DIR *d = opendir(dir.c_str());
  if (!d) return 0;
  int n = 0;
  while (struct dirent *de = readdir(d)) n += !strncmp(de->d_name, prefix, strlen(prefix));
  closedir(d);
  return n;
}

TEST(ExpMachineTest, RowsRecordTheProfileAndNothingIsLeftBehind) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  Scratch sc("rows");
  const std::string &root = sc.root, &state = sc.state;
  std::string model = MakeNano(root);
  std::string text = R"({"name": "mach", "model": ")" + model + R"(",
    "workload": {"prompt": "machine profile", "decode_tokens": 4},
    "machine": {"ram": "768M", "swap": "64M", "swappiness": 100},
    "sweep": {"wired": ["16M", "48M"]}, "repeats": 1,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  spill_exp_opts &o = sc.o;
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  spill_exp_config_free(&cfg);
  std::vector<cJSON *> rows = Rows(std::string(dir) + "/runs.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  double wired[2];
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(Num(rows[i], "machine", "profile", "limit_ram"), 768.0 * (1 << 20));
    EXPECT_EQ(Num(rows[i], "machine", "profile", "limit_ram_swap"), (768.0 + 64) * (1 << 20));
    EXPECT_EQ(Num(rows[i], "machine", "profile", "swappiness"), 100);
    EXPECT_GE(Num(rows[i], "machine", "profile", "swap_total"), 64.0 * (1 << 20));
    EXPECT_GE(Num(rows[i], "machine", "profile", "cgroup_major_faults"), 0);
    EXPECT_GE(Num(rows[i], "machine", "profile", "swap_outs"), 0);
    EXPECT_GT(Num(rows[i], "machine", "profile", "usage"), 0);
    wired[i] = Num(rows[i], "machine", "profile", "ballast_locked");
    cJSON_Delete(rows[i]);
  }
  {  // env.json names the controller, the kernel's swap settings and the swap at start
    std::ifstream f(std::string(dir) + "/env.json");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    cJSON *env = cJSON_Parse(text.c_str());
    ASSERT_NE(env, nullptr);
    const cJSON *mp = cJSON_GetObjectItemCaseSensitive(env, "machine_profile");
    ASSERT_NE(mp, nullptr) << text;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(mp, "cgroup_version");
    EXPECT_TRUE(cJSON_IsNumber(v) && (v->valueint == 1 || v->valueint == 2)) << text;
    EXPECT_TRUE(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(mp, "vm_swappiness"))) << text;
    EXPECT_TRUE(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(mp, "swap_active_at_start"))) << text;
    cJSON_Delete(env);
  }
  EXPECT_EQ(wired[0], 16.0 * (1 << 20));  // wired swept upward, one machine each
  EXPECT_EQ(wired[1], 48.0 * (1 << 20));
  EXPECT_EQ(CountEntries(state, "machine-"), 0) << "state file left in " << state;
  EXPECT_EQ(CountEntries(dir, ".spill-swap-"), 0) << "swap file left in " << dir;
}

// Each run of a machine profile runs in a child inside the cgroup: a cell
// whose machine cannot hold the engine (almost all of its RAM wired, no
// swap) is ended by the cgroup's OOM killer, which becomes that run's row
// ("outcome": "oom-killed", no metrics) while the runner goes on with the
// next cell; the report says so, and a resume counts the row as done.
TEST(ExpMachineTest, OomKilledRunIsARowAndTheSweepGoesOn) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  Scratch sc("oom");
  const std::string &root = sc.root, &state = sc.state;
  spill_err e = {};
  // f32 experts, 128 per layer (~25 MiB): more than the 4 MiB the squeezed
  // cell leaves the run
  std::string model = root + "/nano-f32";
  spill_gen_request req = {};
  req.preset = "nano";
  req.expert_dtype = "f32";
  req.experts = 128;
  ASSERT_EQ(spill_gen(model.c_str(), &req, nullptr, nullptr, &e), 0) << e.msg;
  std::string text = R"({"name": "oom", "model": ")" + model + R"(",
    "workload": {"prompt": "out of memory", "decode_tokens": 16},
    "machine": {"ram": "768M", "swap": "0"},
    "sweep": {"wired": ["764M", "16M"]}, "repeats": 1,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg;
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  spill_exp_opts &o = sc.o;
  static int oom_said, nan_runs;
  oom_said = nan_runs = 0;
  o.progress = [](void *, const spill_exp_progress *p) {
    oom_said += !strcmp(p->phase, "oom-killed");
    nan_runs += !strcmp(p->phase, "run") && std::isnan(p->last_tok_per_s);
  };
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  EXPECT_EQ(oom_said, 1);  // said when it happened, and its run line has no tok/s
  EXPECT_EQ(nan_runs, 1);
  o.progress = nullptr;
  std::vector<cJSON *> rows = Rows(std::string(dir) + "/runs.jsonl");
  ASSERT_EQ(rows.size(), 2u);
  int oom = 0, ok = 0;
  for (cJSON *r : rows) {
    const cJSON *oc = cJSON_GetObjectItemCaseSensitive(r, "outcome");
    const cJSON *cell = cJSON_GetObjectItemCaseSensitive(r, "cell");
    ASSERT_TRUE(cJSON_IsString(cell));
    if (cJSON_IsString(oc)) {
      EXPECT_STREQ(oc->valuestring, "oom-killed");
      EXPECT_NE(std::string(cell->valuestring).find("764M"), std::string::npos) << cell->valuestring;
      EXPECT_EQ(cJSON_GetObjectItemCaseSensitive(r, "metrics"), nullptr);
      EXPECT_GE(Num(r, "machine", "profile", "oom_kills"), 1);
      // its token timeline (how far it got) is named, and is the run's own file
      const cJSON *fl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "files"), "tokens");
      ASSERT_TRUE(cJSON_IsString(fl)) << "an OOM-killed row names its token timeline";
      struct stat tst;
      EXPECT_EQ(stat((std::string(dir) + "/" + fl->valuestring).c_str(), &tst), 0) << fl->valuestring;
      oom++;
    } else {
      EXPECT_NE(std::string(cell->valuestring).find("16M"), std::string::npos) << cell->valuestring;
      const cJSON *tk = cJSON_GetObjectItemCaseSensitive(r, "tokens");
      const cJSON *n = cJSON_GetObjectItemCaseSensitive(tk, "n");
      EXPECT_TRUE(cJSON_IsNumber(n) && n->valueint == 16);
      EXPECT_GE(Num(r, "machine", "profile", "cgroup_major_faults"), 0);
      ok++;
    }
    cJSON_Delete(r);
  }
  EXPECT_EQ(oom, 1);
  EXPECT_EQ(ok, 1);
  std::ifstream f(std::string(dir) + "/table.md");
  std::string table((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("0 + 1 OOM-killed"), std::string::npos) << table;
  EXPECT_NE(table.find("OOM killer ended 1 run"), std::string::npos) << table;
  EXPECT_EQ(table.find("(missing)"), std::string::npos) << table;
  EXPECT_EQ(table.find("read p99 \"-\""), std::string::npos) << table;  // not a stale-latency row
  // a resume has nothing left to run: the OOM-killed run is done
  o.resume = 1;
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  spill_exp_config_free(&cfg);
  rows = Rows(std::string(dir) + "/runs.jsonl");
  EXPECT_EQ(rows.size(), 2u);
  for (cJSON *r : rows) cJSON_Delete(r);
  EXPECT_EQ(CountEntries(state, "machine-"), 0);
}

// The cliff plot of a wired x budget sweep: one series per wired value, x =
// the budget (machine axes sort before budget, so x is not the first axis).
TEST(ExpMachineTest, CliffPlotHasOneSeriesPerWiredValueOverTheBudgets) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  Scratch sc("cliffplot");
  const std::string &root = sc.root;
  std::string model = MakeNano(root);
  std::string text = R"({"name": "cliffplot", "model": ")" + model + R"(",
    "workload": {"prompt": "cliff", "decode_tokens": 2},
    "machine": {"ram": "768M", "swap": "0"},
    "sweep": {"budget": ["48M", "96M"], "wired": ["16M", "32M"]}, "repeats": 1,
    "outputs": {"tables": ["md"], "plots": ["cliff"]}})";
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  ASSERT_STREQ(cfg.axes[0].key, "wired");
  spill_exp_opts &o = sc.o;
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  spill_exp_config_free(&cfg);
  std::ifstream f(std::string(dir) + "/plots/cliff.dat");
  std::string line, titles;
  std::vector<double> xs;
  while (std::getline(f, line)) {
    if (line.rfind("# ", 0) == 0) titles += line + "\n";
    else if (!line.empty()) xs.push_back(std::stod(line));
  }
  EXPECT_EQ(titles, "# base wired=16M\n# base wired=32M\n");
  ASSERT_EQ(xs.size(), 4u);
  for (int sidx = 0; sidx < 2; sidx++) {  // each series runs over the budgets
    EXPECT_NEAR(xs[2 * sidx], 48.0 / 1024, 1e-6);
    EXPECT_NEAR(xs[2 * sidx + 1], 96.0 / 1024, 1e-6);
  }
}

TEST(ExpMachineTest, KilledRunnerIsCleanedUpByTheNextRunWhichSaysSo) {
  std::string why = Unavailable();
  if (!why.empty()) GTEST_SKIP() << "machine profile unavailable here: " << why;
  Scratch sc("kill");
  const std::string &root = sc.root, &state = sc.state;
  std::string model = MakeNano(root);
  // 64 MiB more swap than the active areas have free, so the runner makes a
  // (64 MiB) swap file
  uint64_t total, used;
  spill_machine_swaps(&total, &used, nullptr, 0);
  std::string swap = std::to_string(total - used + (64ull << 20));
  std::string text = R"({"name": "kill", "model": ")" + model + R"(",
    "workload": {"prompt": "kill the runner", "decode_tokens": 2},
    "machine": {"ram": "768M", "wired": "16M", "swap": )" + swap + R"(},
    "sweep": {"lookahead": [0, 2, 4]}, "repeats": 4,
    "outputs": {"tables": ["md"], "plots": []}})";
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "t.json", &cfg, &e), 0) << e.msg;
  spill_exp_opts &o = sc.o;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    o.progress = [](void *, const spill_exp_progress *p) {
      if (!strcmp(p->phase, "run")) usleep(200000);
    };
    char dir[1024];
    spill_err ce = {};
    _exit(spill_exp_execute(&cfg, &o, dir, sizeof dir, &ce) == 0 ? 0 : 1);
  }
  // wait until its machine is up (a state file naming a cgroup)
  std::string cg;
  for (int i = 0; i < 3000 && cg.empty(); i++) {
    DIR *d = opendir(state.c_str());
    while (d && (cg.empty())) {
      struct dirent *de = readdir(d);
      if (!de) break;
      std::string n = de->d_name;
      if (n.rfind("machine-", 0) || n.size() < 6 || n.substr(n.size() - 6) != ".state") continue;
      std::ifstream f(state + "/" + n);
      std::string line;
      while (std::getline(f, line))
        if (line.rfind("cgroup /", 0) == 0) cg = line.substr(7);
    }
    if (d) closedir(d);
    if (!cg.empty()) {
      struct stat st;
      if (stat((cg + "/cgroup.procs").c_str(), &st) != 0) cg.clear();
    }
    if (cg.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(cg.empty()) << "the runner never set its machine up";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  struct stat st;
  ASSERT_EQ(stat(cg.c_str(), &st), 0) << "a killed runner's cgroup should still be there";
  // the next run (a resume) cleans up and says so through its progress
  static std::string said;
  said.clear();
  o.resume = 1;
  o.progress = [](void *, const spill_exp_progress *p) {
    if (!strcmp(p->phase, "machine") && p->key) said += p->key;
  };
  char dir[1024];
  ASSERT_EQ(spill_exp_execute(&cfg, &o, dir, sizeof dir, &e), 0) << e.msg;
  spill_exp_config_free(&cfg);
  EXPECT_NE(said.find("cleaned up after runner pid " + std::to_string(child)), std::string::npos) << said;
  EXPECT_NE(said.find("turned off and deleted"), std::string::npos) << said;
  EXPECT_NE(stat(cg.c_str(), &st), 0) << cg << " left behind";
  EXPECT_EQ(CountEntries(state, "machine-"), 0);
  EXPECT_EQ(CountEntries(dir, ".spill-swap-"), 0);
}

}  // namespace
