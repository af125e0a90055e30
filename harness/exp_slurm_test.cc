// harness/exp_slurm_test.cc: units, cluster settings, scripts and the
// merge's validation of `spill exp --slurm`, without a cluster (the real
// private cluster runs in exp_slurm_cluster_test.sh).
#include "harness/exp_slurm.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

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

std::string ReadAll(const std::string &file) {
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const char *kTwoUnits = R"({"name": "u", "model": "m", "workload": {"prompt": "x", "decode_tokens": 1},
  "sweep": {"budget": ["1G", "2G"], "lookahead": [0, 2]},
  "arms": [{"name": "a"}, {"name": "b", "set": {"policy": "lru"}}], "repeats": 3,
  "hypothesis": {"claim": "c", "metric": "bytes_read", "direction": "decrease",
                 "min_effect": 0.05, "alpha": 0.05},
  "cluster": {"partition": "gpu-a", "time": "1-02:00:00", "mem": "4G", "cpus_per_task": 2,
              "array_max": 1},
  "outputs": {"tables": ["md"], "plots": []}})";

// A results directory holding the resolved config of text.
std::string ResultsDir(const std::string &name, const std::string &text) {
  std::string dir = TmpDir() + "/" + name;
  spill_err e = {};
  EXPECT_EQ(spill_exp_mkdirs((dir + "/slurm/rows").c_str(), &e), 0) << e.msg;
  spill_exp_config cfg = Parse(text);
  char *resolved = spill_exp_config_resolved_json(&cfg);
  std::ofstream(dir + "/config.json") << resolved;
  free(resolved);
  spill_exp_config_free(&cfg);
  return dir;
}

std::string Row(const std::string &key, const std::string &cell, const std::string &arm, int rep,
                const char *node, double bytes) {
  std::ostringstream s;
  s << "{\"key\":\"" << key << "\",\"cell\":\"" << cell << "\",\"arm\":\"" << arm
    << "\",\"repeat\":" << rep;
  if (node) s << ",\"node\":\"" << node << "\"";
  s << ",\"tokens\":{\"n\":1,\"hash\":\"00000000000000ab\"},\"metrics\":{\"bytes_read\":" << bytes << "}}\n";
  return s.str();
}

// Unit 0 (lookahead=0) complete on node n1: both budgets, both arms, 3 repeats.
std::string Unit0(const char *node_b = "n1") {
  std::string out;
  for (const char *b : {"1G", "2G"})
    for (int r = 0; r < 3; r++) {
      std::string cell = std::string("budget=") + b + ",lookahead=0";
      out += Row(cell + "/a/r" + std::to_string(r), cell, "a", r, "n1", 100);
      out += Row(cell + "/b/r" + std::to_string(r), cell, "b", r, node_b, 90);
    }
  return out;
}

}  // namespace

TEST(ExpSlurmTest, UnitsKeepBudgetsOfOneCellFamilyTogether) {
  spill_exp_config cfg = Parse(kTwoUnits);
  ASSERT_EQ(spill_exp_config_n_cells(&cfg), 4);
  int uoc[4];
  EXPECT_EQ(spill_exp_slurm_units(&cfg, uoc), 2);
  // budget is the slowest axis: cells (1G,0) (1G,2) (2G,0) (2G,2)
  EXPECT_EQ(uoc[0], 0);
  EXPECT_EQ(uoc[1], 1);
  EXPECT_EQ(uoc[2], 0);
  EXPECT_EQ(uoc[3], 1);
  char key[64];
  spill_exp_slurm_unit_key(&cfg, 1, key, sizeof key);
  EXPECT_STREQ(key, "lookahead=2");
  EXPECT_STREQ(cfg.cluster.partition, "gpu-a");
  EXPECT_STREQ(cfg.cluster.time, "1-02:00:00");
  EXPECT_EQ(cfg.cluster.cpus_per_task, 2);
  EXPECT_EQ(cfg.cluster.array_max, 1);
  // cluster settings schedule, they do not define the experiment
  char *resolved = spill_exp_config_resolved_json(&cfg);
  EXPECT_EQ(std::string(resolved).find("gpu-a"), std::string::npos);
  free(resolved);
  spill_exp_config_free(&cfg);

  spill_exp_config one = Parse(R"({"name": "o", "model": "m", "workload": {"prompt": "x",
    "decode_tokens": 1}, "sweep": {"budget": ["1G", "2G", "3G"]}})");
  int u3[3];
  EXPECT_EQ(spill_exp_slurm_units(&one, u3), 1);
  spill_exp_slurm_unit_key(&one, 0, key, sizeof key);
  EXPECT_STREQ(key, "all");
  spill_exp_config_free(&one);
}

TEST(ExpSlurmTest, ClusterSettingsTakeOnlySlurmSpellings) {
  EXPECT_EQ(spill_exp_cluster_check("time", "30"), nullptr);
  EXPECT_EQ(spill_exp_cluster_check("time", "2-00:30:00"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("time", "1h"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("time", "10:"), nullptr);
  EXPECT_EQ(spill_exp_cluster_check("mem", "4G"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("mem", "4GB"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("mem", "G"), nullptr);
  EXPECT_EQ(spill_exp_cluster_check("constraint", "avx512&(nvme|ssd)"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("partition", "a b"), nullptr);
  EXPECT_NE(spill_exp_cluster_check("partition", "x\n#SBATCH --uid=0"), nullptr);
  spill_exp_config cfg;
  spill_err e = {};
  EXPECT_EQ(spill_exp_config_parse(R"({"name": "o", "model": "m", "workload": {"prompt": "x",
    "decode_tokens": 1}, "cluster": {"time": "1;reboot"}})", "t.json", &cfg, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("cluster"), std::string::npos) << e.msg;
  EXPECT_EQ(spill_exp_config_parse(R"({"name": "o", "model": "m", "workload": {"prompt": "x",
    "decode_tokens": 1}, "cluster": {"nodes": 4}})", "t.json", &cfg, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("unknown key \"nodes\""), std::string::npos) << e.msg;
}

TEST(ExpSlurmTest, ScriptOnlyWritesArrayAndMergeScripts) {
  std::string dir = ResultsDir("scripts", kTwoUnits);
  spill_exp_config cfg = Parse(kTwoUnits);
  spill_exp_slurm_opts so = {};
  so.cluster = cfg.cluster;
  so.spill_bin = "/opt/spill/bin/spill";
  so.workdir = "/home/lab/spill";
  so.refuted_dir = "/home/lab/spill/refuted";
  so.script_only = 1;
  char *text = nullptr;
  spill_err e = {};
  unsigned char only1[2] = {0, 1};
  ASSERT_EQ(spill_exp_slurm_submit(dir.c_str(), &cfg, &so, only1, &text, &e), 0) << e.msg;
  std::string a = ReadAll(dir + "/slurm/array.sh"), m = ReadAll(dir + "/slurm/merge.sh");
  EXPECT_NE(a.find("#SBATCH --array=1%1\n"), std::string::npos) << a;
  EXPECT_NE(a.find("#SBATCH --partition=gpu-a\n"), std::string::npos) << a;
  EXPECT_NE(a.find("#SBATCH --time=1-02:00:00\n"), std::string::npos) << a;
  EXPECT_NE(a.find("#SBATCH --cpus-per-task=2\n"), std::string::npos) << a;
  EXPECT_NE(a.find("#SBATCH --mem=4G\n"), std::string::npos) << a;
  EXPECT_NE(a.find("#SBATCH --chdir=/home/lab/spill\n"), std::string::npos) << a;
  // near the time limit the task requeues itself (and resumes its unit)
  EXPECT_NE(a.find("#SBATCH --requeue\n#SBATCH --signal=B:USR1@60\n#SBATCH --open-mode=append\n"), std::string::npos) << a;
  EXPECT_NE(a.find("exec /opt/spill/bin/spill exp --slurm-task " + dir +
                   " --unit \"$SLURM_ARRAY_TASK_ID\""), std::string::npos) << a;
  EXPECT_NE(m.find("#SBATCH --kill-on-invalid-dep=yes\n"), std::string::npos) << m;
  EXPECT_NE(m.find("exp --merge " + dir + " --refuted /home/lab/spill/refuted"), std::string::npos) << m;
  EXPECT_EQ(m.find("--cpus-per-task"), std::string::npos) << m;
  EXPECT_NE(std::string(text).find("sbatch --dependency=afterok:$ARRAY"), std::string::npos) << text;
  free(text);
  // nothing submitted; the settings are kept for --resume
  struct stat st;
  EXPECT_NE(stat((dir + "/slurm/jobs.jsonl").c_str(), &st), 0);
  spill_exp_cluster back;
  char wd[256];
  ASSERT_EQ(spill_exp_slurm_last_submission(dir.c_str(), &back, wd, sizeof wd, &e), 0) << e.msg;
  EXPECT_STREQ(back.partition, "gpu-a");
  EXPECT_EQ(back.array_max, 1);
  EXPECT_STREQ(wd, "/home/lab/spill");
  EXPECT_TRUE(spill_exp_slurm_is_slurm_dir(dir.c_str()));

  // paths that would not survive an #SBATCH line or a relative working dir
  so.workdir = "relative/dir";
  EXPECT_EQ(spill_exp_slurm_submit(dir.c_str(), &cfg, &so, nullptr, nullptr, &e), SPILL_E_CONFIG);
  so.workdir = "/home/my lab";
  EXPECT_EQ(spill_exp_slurm_submit(dir.c_str(), &cfg, &so, nullptr, nullptr, &e), SPILL_E_CONFIG);
  EXPECT_NE(std::string(e.msg).find("sbatch script"), std::string::npos) << e.msg;
  spill_exp_config_free(&cfg);
}

TEST(ExpSlurmTest, MergeMarksMissingUnitsAndWithholdsTheVerdict) {
  std::string dir = ResultsDir("missing", kTwoUnits);
  std::ofstream(dir + "/slurm/rows/u000.jsonl") << Unit0();
  spill_exp_config cfg = Parse(kTwoUnits);
  unsigned char units[2];
  int n = 0;
  spill_err e = {};
  ASSERT_EQ(spill_exp_slurm_missing(dir.c_str(), &cfg, units, &n, &e), 0) << e.msg;
  EXPECT_EQ(n, 1);
  EXPECT_EQ(units[0], 0);
  EXPECT_EQ(units[1], 1);
  char verdict[1024], entry[256];
  int missing = -1;
  ASSERT_EQ(spill_exp_slurm_merge(dir.c_str(), nullptr, 1, verdict, sizeof verdict, entry,
                                  sizeof entry, &missing, &e), 0) << e.msg;
  EXPECT_EQ(missing, 12);
  EXPECT_EQ(std::string(verdict).rfind("withheld (incomplete)", 0), 0u) << verdict;
  std::string md = ReadAll(dir + "/table.md");
  EXPECT_NE(md.find("| a | n1 | 3 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| b | - | 0 (missing) |"), std::string::npos) << md;
  EXPECT_NE(md.find("Missing: 4 of 8"), std::string::npos) << md;
  // merged in plan order: 12 rows
  std::string runs = ReadAll(dir + "/runs.jsonl");
  EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n'), 12);
  spill_exp_config_free(&cfg);
}

TEST(ExpSlurmTest, MergeRejectsBadTaskRows) {
  struct Case {
    const char *name;
    std::string rows;
    const char *error;
  } cases[] = {
      {"dup", Unit0() + Row("budget=1G,lookahead=0/a/r0", "budget=1G,lookahead=0", "a", 0, "n1", 1),
       "appears twice"},
      {"other-unit", Row("budget=1G,lookahead=2/a/r0", "budget=1G,lookahead=2", "a", 0, "n1", 1),
       "belongs to unit 1"},
      {"unplanned", Row("budget=9G,lookahead=0/a/r0", "budget=9G,lookahead=0", "a", 0, "n1", 1),
       "is not in this config"},
      {"no-node", Row("budget=1G,lookahead=0/a/r0", "budget=1G,lookahead=0", "a", 0, nullptr, 1),
       "names no node"},
      {"two-nodes", Unit0("n2"), "different nodes"},
      {"garbage", "{\"key\": 3}\n", "not a run row"},
  };
  for (const Case &c : cases) {
    std::string dir = ResultsDir(std::string("bad-") + c.name, kTwoUnits);
    std::ofstream(dir + "/slurm/rows/u000.jsonl") << c.rows;
    spill_err e = {};
    char verdict[256], entry[256];
    int missing;
    EXPECT_EQ(spill_exp_slurm_merge(dir.c_str(), nullptr, 1, verdict, sizeof verdict, entry,
                                    sizeof entry, &missing, &e), SPILL_E_FORMAT) << c.name;
    EXPECT_NE(std::string(e.msg).find(c.error), std::string::npos) << c.name << ": " << e.msg;
    struct stat st;
    EXPECT_NE(stat((dir + "/runs.jsonl").c_str(), &st), 0) << c.name << ": merged anyway";
  }
}

// The report itself never pools one cell's arms from two machines, whoever
// wrote runs.jsonl.
TEST(ExpSlurmTest, ReportRefusesToPoolArmsFromDifferentNodes) {
  std::string dir = ResultsDir("pool", kTwoUnits);
  std::ofstream(dir + "/runs.jsonl") << Unit0("n2");
  spill_exp_report_result *res = new spill_exp_report_result;
  spill_err e = {};
  EXPECT_EQ(spill_exp_report(dir.c_str(), res, &e), SPILL_E_FORMAT);
  EXPECT_NE(std::string(e.msg).find("refusing to pool"), std::string::npos) << e.msg;
  std::ofstream(dir + "/runs.jsonl") << Unit0("n1");
  EXPECT_EQ(spill_exp_report(dir.c_str(), res, &e), 0) << e.msg;
  EXPECT_NE(std::string(res->table_md).find("| node |"), std::string::npos) << res->table_md;
  delete res;
}
