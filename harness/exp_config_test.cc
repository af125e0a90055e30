// harness/exp_config_test.cc: each kind of bad config is rejected with its
// JSON path and reason; good configs resolve with defaults; every file in
// experiments/ validates.
#include "harness/exp_config.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

const char *kGood = R"({
  "name": "t",
  "model": {"preset": "nano"},
  "workload": {"prompt": "hello", "decode_tokens": 4},
  "base": {"io_threads": 2, "storage": "direct"},
  "sweep": {"lookahead": [0, 4], "budget": ["2G", "512M", "1G"]},
  "arms": [{"name": "off"}, {"name": "on", "set": {"verify": true}, "exact": true}],
  "repeats": 3
})";

// Replaces the first occurrence of `from` in kGood with `to`.
std::string Edit(const std::string &from, const std::string &to) {
  std::string s = kGood;
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

std::string Error(const std::string &text) {
  spill_exp_config cfg;
  spill_err e = {};
  int rc = spill_exp_config_parse(text.c_str(), "x.json", &cfg, &e);
  spill_exp_config_free(&cfg);
  return rc < 0 ? std::string(e.msg) : std::string("OK");
}

}  // namespace

TEST(ExpConfigTest, GoodConfigResolvesWithBudgetsUpward) {
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(kGood, "x.json", &cfg, &e), 0) << e.msg;
  EXPECT_EQ(cfg.n_axes, 2);
  EXPECT_STREQ(cfg.axes[0].key, "budget");  // budget is always the slowest axis
  EXPECT_STREQ(cfg.axes[0].values[0], "512M");
  EXPECT_STREQ(cfg.axes[0].values[1], "1G");
  EXPECT_STREQ(cfg.axes[0].values[2], "2G");
  EXPECT_EQ(spill_exp_config_n_cells(&cfg), 6);
  const char *v[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(&cfg, 1, v);
  EXPECT_STREQ(v[0], "512M");
  EXPECT_STREQ(v[1], "4");
  EXPECT_EQ(cfg.n_arms, 2);
  EXPECT_TRUE(cfg.arms[1].exact);
  EXPECT_EQ(cfg.repeats, 3);
  EXPECT_EQ(cfg.order, SPILL_EXP_ORDER_INTERLEAVED);
  EXPECT_TRUE(cfg.out.plot_cliff);
  EXPECT_TRUE(cfg.out.plot_ab);
  EXPECT_EQ(strlen(cfg.recipe_hash), 16u);
  spill_config sc;
  ASSERT_EQ(spill_exp_config_engine(&cfg, 5, 1, &sc, &e), 0) << e.msg;
  EXPECT_EQ(sc.budget_bytes, 2ull << 30);
  EXPECT_EQ(sc.lookahead, 4);
  EXPECT_EQ(sc.verify, 1);
  EXPECT_EQ(sc.io_threads, 2);
  char *json = spill_exp_config_resolved_json(&cfg);
  ASSERT_NE(json, nullptr);
  EXPECT_NE(std::string(json).find("\"decode_tokens\":\t4"), std::string::npos) << json;
  free(json);
  spill_exp_config_free(&cfg);
}

// The resolved config.json of a results directory is itself a valid config
// that resolves to the same text (so a run can be repeated from it).
TEST(ExpConfigTest, ResolvedJsonIsAFixedPoint) {
  spill_exp_config a, b;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(kGood, "x.json", &a, &e), 0) << e.msg;
  char *ja = spill_exp_config_resolved_json(&a);
  ASSERT_EQ(spill_exp_config_parse(ja, "config.json", &b, &e), 0) << e.msg << "\n" << ja;
  char *jb = spill_exp_config_resolved_json(&b);
  EXPECT_STREQ(ja, jb);
  EXPECT_STREQ(a.recipe_hash, b.recipe_hash);
  free(ja);
  free(jb);
  spill_exp_config_free(&a);
  spill_exp_config_free(&b);
}

TEST(ExpConfigTest, RejectsUnknownKeysWithTheirPath) {
  EXPECT_EQ(Error(Edit("\"repeats\": 3", "\"repeats\": 3, \"repeat\": 2")),
            "x.json: (top): unknown key \"repeat\" (expected one of: name, description, model, "
            "workload, base, sweep, arms, repeats, warmup, order, order_seed, cold, "
            "storage_path, io_throttle, machine, hypothesis, outputs)");
  EXPECT_NE(Error(Edit("\"decode_tokens\": 4", "\"decode_tokens\": 4, \"x\": 1")).find(
                "x.json: workload: unknown key \"x\""),
            std::string::npos);
  EXPECT_NE(Error(Edit("\"io_threads\": 2", "\"io_thread\": 2")).find("x.json: base.io_thread: "),
            std::string::npos);
}

TEST(ExpConfigTest, RejectsWrongTypes) {
  EXPECT_EQ(Error(Edit("\"repeats\": 3", "\"repeats\": \"3\"")),
            "x.json: repeats: expected an integer, got a string");
  EXPECT_EQ(Error(Edit("\"decode_tokens\": 4", "\"decode_tokens\": 4.5")),
            "x.json: workload.decode_tokens: 4.5: expected an integer");
  EXPECT_EQ(Error(Edit("\"lookahead\": [0, 4]", "\"lookahead\": 4")),
            "x.json: sweep.lookahead: expected a list of values, got a number");
  EXPECT_EQ(Error(Edit("\"exact\": true", "\"exact\": 1")),
            "x.json: arms[1].exact: expected true or false, got a number");
  EXPECT_EQ(Error("[1]"), "x.json: (top): expected a JSON object, got an array");
  EXPECT_EQ(Error("{\"name\": "), "x.json: line 1: not valid JSON");
}

TEST(ExpConfigTest, RejectsImpossibleValues) {
  EXPECT_EQ(Error(Edit("\"1G\"", "\"9Q\"")), "x.json: sweep.budget[2]: \"9Q\": not a size");
  EXPECT_EQ(Error(Edit("\"repeats\": 3", "\"repeats\": 0")),
            "x.json: repeats: 0: out of range [1, 1000]");
  EXPECT_NE(Error(Edit("\"storage\": \"direct\"", "\"storage\": \"tape\"")).find(
                "x.json: base.storage: \"tape\": "),
            std::string::npos);
  EXPECT_NE(Error(Edit("[0, 4]", "[0, 400]")).find("x.json: sweep.lookahead[1]: \"400\": "),
            std::string::npos);
  EXPECT_EQ(Error(Edit("[0, 4]", "[0, 0]")), "x.json: sweep.lookahead[1]: \"0\": duplicate value");
  EXPECT_EQ(Error(Edit("{\"preset\": \"nano\"}", "{\"preset\": \"huge\"}")),
            "x.json: model.preset: \"huge\": expected nano, mini or twin");
  EXPECT_EQ(Error(Edit("\"repeats\": 3", "\"repeats\": 3, \"machine\": {\"emulate_ram\": \"lots\"}")),
            "x.json: machine.emulate_ram: \"lots\": not a size");
  EXPECT_EQ(Error(Edit("\"repeats\": 3", "\"repeats\": 3, \"order\": \"zigzag\"")),
            "x.json: order: \"zigzag\": expected interleaved, abba, random or blocked");
}

TEST(ExpConfigTest, RejectsContradictions) {
  EXPECT_EQ(Error(Edit("\"verify\": true", "\"lookahead\": 2")),
            "x.json: arms[1].set.lookahead: also swept in sweep.lookahead (an arm may not set a "
            "swept knob)");
  EXPECT_EQ(Error(Edit("\"io_threads\": 2", "\"lookahead\": 2")),
            "x.json: sweep.lookahead: also set in base (a knob is either fixed or swept)");
  EXPECT_EQ(Error(Edit("\"name\": \"on\"", "\"name\": \"off\"")),
            "x.json: arms[1]: duplicate arm name \"off\"");
  EXPECT_EQ(Error(Edit("\"prompt\": \"hello\"", "\"prompt\": \"hi\", \"prompt_file\": \"p.txt\"")),
            "x.json: workload: give exactly one of \"prompt\" or \"prompt_file\"");
  EXPECT_EQ(Error(Edit("\"io_threads\": 2", "\"profile\": \"p.jsonl\"")),
            "x.json: base.profile: set by the runner per run: use outputs.profile");
  EXPECT_EQ(Error(Edit("\"name\": \"t\"", "\"name\": \"a/b\"")),
            "x.json: name: \"a/b\": use letters, digits, '-' or '_' (it names a directory)");
}

TEST(ExpConfigTest, RejectsBadHypotheses) {
  auto with = [](const std::string &h, int repeats = 3) {
    return Edit("\"repeats\": 3", "\"repeats\": " + std::to_string(repeats) +
                                      ", \"hypothesis\": " + h);
  };
  const std::string ok =
      R"({"claim": "c", "metric": "decode_tok_per_s", "direction": "increase", "min_effect": 0.05})";
  EXPECT_EQ(Error(with(ok)), "OK");
  EXPECT_EQ(Error(with(ok, 2)), "x.json: repeats: 2: a hypothesis needs at least 3 paired repeats");
  EXPECT_EQ(Error(with(R"({"claim": "c", "metric": "speed", "direction": "increase"})")),
            "x.json: hypothesis.metric: \"speed\": not a metric (see docs/EXPERIMENTS.md)");
  EXPECT_EQ(Error(with(R"({"claim": "c", "metric": "decode_hit_rate", "direction": "up"})")),
            "x.json: hypothesis.direction: \"up\": expected increase or decrease");
  EXPECT_EQ(Error(with(R"({"claim": "c", "metric": "decode_hit_rate", "direction": "increase", "alpha": 0.9})")),
            "x.json: hypothesis.alpha: 0.9: out of range [0.001, 0.5]");
  EXPECT_EQ(Error(with(R"({"claim": "c", "metric": "decode_hit_rate", "direction": "increase", "treatment": "x"})")),
            "x.json: hypothesis.treatment: \"x\": no such arm");
  EXPECT_EQ(Error(with(R"({"metric": "decode_hit_rate", "direction": "increase"})")),
            "x.json: hypothesis.claim: missing (required)");
}

TEST(ExpConfigTest, RejectsTraceRoutingAsNotImplemented) {
  spill_exp_config cfg;
  spill_err e = {};
  std::string s = Edit("\"decode_tokens\": 4", "\"decode_tokens\": 4, \"routing\": \"trace:t.jsonl\"");
  EXPECT_EQ(spill_exp_config_parse(s.c_str(), "x.json", &cfg, &e), SPILL_E_UNSUPPORTED);
  EXPECT_NE(std::string(e.msg).find("x.json: workload.routing: \"trace:t.jsonl\": "),
            std::string::npos) << e.msg;
}

TEST(ExpConfigTest, RejectsPlotsThatCannotBeDrawn) {
  std::string s = Edit("\"sweep\": {\"lookahead\": [0, 4], \"budget\": [\"2G\", \"512M\", \"1G\"]},",
                       "\"outputs\": {\"plots\": [\"cliff\"]},");
  EXPECT_EQ(Error(s), "x.json: outputs.plots[0]: \"cliff\" needs a budget sweep (sweep.budget)");
}

// Every seed config in experiments/ must validate (the test runs from the
// workspace root with experiments/ as data).
TEST(ExpConfigTest, EverySeedExperimentValidates) {
  DIR *d = opendir("experiments");
  ASSERT_NE(d, nullptr) << "experiments/ not in the runfiles";
  int n = 0;
  while (struct dirent *ent = readdir(d)) {
    std::string f = ent->d_name;
    if (f.size() < 5 || f.substr(f.size() - 5) != ".json") continue;
    std::string path = "experiments/" + f;
    spill_exp_config cfg;
    spill_err e = {};
    EXPECT_EQ(spill_exp_config_load(path.c_str(), &cfg, &e), 0) << e.msg;
    spill_exp_config_free(&cfg);
    n++;
  }
  closedir(d);
  EXPECT_GE(n, 9);
}
