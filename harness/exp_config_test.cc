// harness/exp_config_test.cc: each kind of bad config is rejected with its
// JSON path and reason; good configs resolve with defaults; every file in
// experiments/ validates.
#include "harness/exp_config.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include <string>
#include <vector>

#include "harness/exp_metrics.h"

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
            "storage_path, io_throttle, machine, hypothesis, outputs, cluster, model_gguf)");
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
  EXPECT_EQ(Error("{\"name\": "), "x.json: not valid JSON (near byte 8)");
}

TEST(ExpConfigTest, RejectsImpossibleValues) {
  EXPECT_EQ(Error(Edit("\"1G\"", "\"9Q\"")),
            "x.json: sweep.budget[2]: \"9Q\": budget: '9Q' is not a size (e.g. 8G, 512M) or "
            "default");
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

// "drafts_from": "greedy" needs the arm's draft knob on; other words are
// refused by name; the resolved form keeps it (and omits the default).
TEST(ExpConfigTest, DraftsFromGreedyNeedsDraftsAndIsKeptInTheResolvedForm) {
  EXPECT_EQ(Error(Edit("\"exact\": true", "\"exact\": true, \"drafts_from\": \"oracle\"")),
            "x.json: arms[1].drafts_from: \"oracle\": expected context or greedy");
  EXPECT_EQ(Error(Edit("\"exact\": true", "\"exact\": true, \"drafts_from\": \"greedy\"")),
            "x.json: arms[1].drafts_from: greedy drafts need the knob draft on (set \"draft\" in "
            "the arm or base)");
  EXPECT_EQ(Error(Edit("\"verify\": true}, \"exact\": true",
                       "\"draft\": \"off\"}, \"exact\": true, \"drafts_from\": \"greedy\"")),
            "x.json: arms[1].drafts_from: greedy drafts need the knob draft on (set \"draft\" in "
            "the arm or base)");
  const std::string good = Edit("\"verify\": true}, \"exact\": true",
                                "\"draft\": 4, \"draft_accept_max\": 2}, \"exact\": true, "
                                "\"drafts_from\": \"greedy\"");
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(good.c_str(), "x.json", &cfg, &e), 0) << e.msg;
  EXPECT_EQ(cfg.arms[1].drafts_greedy, 1);
  EXPECT_EQ(cfg.arms[0].drafts_greedy, 0);
  char *r = spill_exp_config_resolved_json(&cfg);
  ASSERT_NE(r, nullptr);
  const std::string resolved = r;
  free(r);
  EXPECT_EQ(resolved.find("drafts_from"), resolved.rfind("drafts_from")); // once: arm 1
  EXPECT_NE(resolved.find("\"drafts_from\":\t\"greedy\""), std::string::npos) << resolved;
  spill_exp_config again;
  ASSERT_EQ(spill_exp_config_parse(resolved.c_str(), "r.json", &again, &e), 0) << e.msg;
  EXPECT_EQ(again.arms[1].drafts_greedy, 1);
  spill_exp_config_free(&again);
  spill_exp_config_free(&cfg);
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
            "x.json: workload: give exactly one of \"prompt\", \"prompt_file\" or \"bench\"");
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

// A simple-format trace in TEST_TMPDIR: n tokens, `layers` layers, token i
// uses ids {i k, ..., i k + k - 1} mod e (e distinct k-blocks: n k >= e
// makes the highest id e - 1).
std::string TraceFile(const std::string &name, int n, int layers, int k, int e) {
  const char *t = getenv("TEST_TMPDIR");
  std::string path = std::string(t ? t : "/tmp") + "/" + name;
  FILE *f = fopen(path.c_str(), "w");
  for (int i = 0; i < n; i++) {
    fprintf(f, "{\"tok\": %d, \"layers\": [", i);
    for (int l = 0; l < layers; l++) {
      fprintf(f, "%s[", l ? ", " : "");
      for (int j = 0; j < k; j++) fprintf(f, "%s%d", j ? ", " : "", (i * k + j) % e);
      fprintf(f, "]");
    }
    fprintf(f, "]}\n");
  }
  fclose(f);
  return path;
}

// workload.routing "trace:FILE": the trace is read and validated with the
// config; the engine config carries it; the resolved config keeps it.
TEST(ExpConfigTest, TraceRoutingIsValidatedAndPassedToTheEngine) {
  std::string tr = TraceFile("cfg-trace.jsonl", 10, 3, 4, 16);
  std::string s = Edit("\"decode_tokens\": 4", "\"decode_tokens\": 4, \"routing\": \"trace:" + tr + "\"");
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(s.c_str(), "x.json", &cfg, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(std::string(cfg.routing), "trace:" + tr);
  EXPECT_EQ(std::string(cfg.routing_trace), tr);
  EXPECT_EQ(cfg.routing_info.n_tokens, 10);
  EXPECT_EQ(cfg.routing_info.n_layers, 3);
  EXPECT_EQ(cfg.routing_info.top_k, 4);
  EXPECT_EQ(cfg.routing_info.n_experts, 16);
  spill_config ec;
  ASSERT_EQ(spill_exp_config_engine(&cfg, 0, 1, &ec, &e), SPILL_OK) << e.msg;
  ASSERT_NE(ec.routing_trace, nullptr);
  EXPECT_EQ(std::string(ec.routing_trace), tr);
  char *json = spill_exp_config_resolved_json(&cfg);
  EXPECT_NE(std::string(json).find("\"routing\":\t\"trace:" + tr + "\""), std::string::npos) << json;
  free(json);
  spill_exp_config_free(&cfg);

  // without routing the engine config has none
  ASSERT_EQ(spill_exp_config_parse(kGood, "x.json", &cfg, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_exp_config_engine(&cfg, 0, 0, &ec, &e), SPILL_OK);
  EXPECT_EQ(ec.routing_trace, nullptr);
  EXPECT_EQ(std::string(cfg.routing), "model");
  spill_exp_config_free(&cfg);
}

TEST(ExpConfigTest, RejectsBadTraceRouting) {
  auto with = [](const std::string &routing, int decode = 4) {
    return Edit("\"decode_tokens\": 4", "\"decode_tokens\": " + std::to_string(decode) +
                                            ", \"routing\": \"" + routing + "\"");
  };
  EXPECT_EQ(Error(with("trace:")), "x.json: workload.routing: \"trace:\" needs a file");
  EXPECT_EQ(Error(with("replay")),
            "x.json: workload.routing: \"replay\": expected \"model\" or \"trace:FILE\"");
  std::string missing = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                        "/no-such.jsonl";
  EXPECT_EQ(Error(with("trace:" + missing)).find("x.json: workload.routing: " + missing +
                                                  ": cannot open"),
            0u)
      << Error(with("trace:" + missing));
  // a bad line is named by the trace reader
  std::string bad = TraceFile("cfg-bad.jsonl", 3, 2, 4, 16);
  FILE *f = fopen(bad.c_str(), "a");
  fprintf(f, "{\"tok\": 3, \"layers\": [[1, 2, 3], [4, 5, 6, 7]]}\n");
  fclose(f);
  EXPECT_EQ(Error(with("trace:" + bad)),
            "x.json: workload.routing: " + bad + ":4: layers[0]: expected 4 ids (as line 1), got 3");
  // the decoded tokens plus at least one prompt token must fit in the trace
  std::string tr = TraceFile("cfg-short.jsonl", 4, 2, 4, 16);
  EXPECT_EQ(Error(with("trace:" + tr, 4)),
            "x.json: workload.decode_tokens: 4: the routing trace " + tr +
                " drives 4 positions, for the prompt's tokens and the decoded ones");
  EXPECT_EQ(Error(with("trace:" + tr, 3)), "OK");
  // the engine knob is the runner's (workload.routing)
  EXPECT_EQ(Error(Edit("\"io_threads\": 2", "\"routing_trace\": \"t.jsonl\"")),
            "x.json: base.routing_trace: use workload.routing (\"trace:FILE\")");
}

// model {"like_trace": FILE}: a recipe shaped for the trace (preset nano or
// mini, default mini) with its own hash; a routing trace of another shape is
// refused at validation.
TEST(ExpConfigTest, LikeTraceRecipes) {
  std::string tr = TraceFile("cfg-like.jsonl", 10, 3, 4, 16);
  std::string other = TraceFile("cfg-like2.jsonl", 10, 5, 4, 16);
  auto model = [](const std::string &m) { return Edit("{\"preset\": \"nano\"}", m); };
  spill_exp_config a, b, c;
  spill_err e = {};
  std::string sa = model("{\"like_trace\": \"" + tr + "\"}");
  ASSERT_EQ(spill_exp_config_parse(sa.c_str(), "x.json", &a, &e), SPILL_OK) << e.msg;
  EXPECT_STREQ(a.recipe_preset, "mini");
  EXPECT_EQ(a.recipe_trace.n_layers, 3);
  std::string sb = model("{\"like_trace\": \"" + tr + "\", \"preset\": \"nano\"}");
  ASSERT_EQ(spill_exp_config_parse(sb.c_str(), "x.json", &b, &e), SPILL_OK) << e.msg;
  ASSERT_EQ(spill_exp_config_parse(kGood, "x.json", &c, &e), SPILL_OK) << e.msg;
  EXPECT_STRNE(a.recipe_hash, b.recipe_hash);
  EXPECT_STRNE(b.recipe_hash, c.recipe_hash);  // nano vs nano like the trace
  // the plain nano recipe's hash: FNV-1a 64 of
  // "preset=nano;ram=0;disk=0;seed=1;attn=k3;edt=rvq3;tdt=q4;routing=3;reuse=0.411"
  // (no like_trace part; ";routing=3;reuse=R" since generated models carry
  // next-token reuse)
  EXPECT_STREQ(c.recipe_hash, "325a5ecaa512dfde");
  char *json = spill_exp_config_resolved_json(&b);
  spill_exp_config r;
  ASSERT_EQ(spill_exp_config_parse(json, "resolved", &r, &e), SPILL_OK) << e.msg << json;
  EXPECT_STREQ(r.recipe_hash, b.recipe_hash);
  free(json);
  spill_exp_config_free(&r);
  spill_exp_config_free(&a);
  spill_exp_config_free(&b);
  spill_exp_config_free(&c);

  EXPECT_EQ(Error(model("{\"like_trace\": \"" + tr + "\", \"preset\": \"twin\"}")),
            "x.json: model.preset: \"twin\": a like_trace model takes nano or mini");
  EXPECT_EQ(Error(model("{\"like_trace\": \"" + tr + "\", \"like\": \"k3\"}")),
            "x.json: model: give one of \"like\" (k3) or \"like_trace\"");
  EXPECT_EQ(Error(model("{\"seed\": 2}")),
            "x.json: model: give exactly one of \"preset\" (nano, mini), \"like\" (k3) or "
            "\"like_trace\" (a router trace)");
  std::string mism = Edit("{\"preset\": \"nano\"}", "{\"like_trace\": \"" + tr + "\"}");
  size_t p = mism.find("\"decode_tokens\": 4");
  mism.replace(p, 18, "\"decode_tokens\": 4, \"routing\": \"trace:" + other + "\"");
  EXPECT_EQ(Error(mism), "x.json: workload.routing: trace " + other +
                             " (5 layers, 16 experts, top-4) does not fit the model.like_trace "
                             "model (3 MoE layers, 16 experts, top-4)");
}

TEST(ExpConfigTest, RejectsPlotsThatCannotBeDrawn) {
  std::string s = Edit("\"sweep\": {\"lookahead\": [0, 4], \"budget\": [\"2G\", \"512M\", \"1G\"]},",
                       "\"outputs\": {\"plots\": [\"cliff\"]},");
  EXPECT_EQ(Error(s), "x.json: outputs.plots[0]: \"cliff\" needs a budget or emulated-RAM sweep (sweep.budget, "
            "sweep.emulate_ram)");
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

// Peer arms (docs/PEERS.md): a llama.cpp arm beside spill arms, the GGUF
// named by model_gguf; every misuse is refused with its path.
const char *kPeer = R"({
  "name": "vs",
  "model": "cache/m.spill",
  "model_gguf": "cache/m.gguf",
  "workload": {"prompt": "hello", "decode_tokens": 4},
  "sweep": {"emulate_ram": ["8G", "4G", "16G"]},
  "arms": [{"name": "spill"},
           {"name": "llama.cpp-mmap", "peer": "llama.cpp", "args": {"load": "mmap", "threads": 2, "repack": false}},
           {"name": "llama.cpp-none", "peer": "llama.cpp", "args": {"load": "none"}}],
  "repeats": 3, "order": "abba", "cold": true,
  "hypothesis": {"claim": "c", "metric": "decode_tok_per_s", "direction": "increase",
                 "control": "llama.cpp-mmap", "treatment": "spill",
                 "cell_thresholds": {"emulate_ram=4G": 3, "emulate_ram=16G": 0.8}}
})";

std::string PeerEdit(const std::string &from, const std::string &to) {
  std::string s = kPeer;
  size_t p = s.find(from);
  EXPECT_NE(p, std::string::npos) << from;
  if (p != std::string::npos) s.replace(p, from.size(), to);
  return s;
}

TEST(ExpConfigTest, PeerArmsAndEmulatedRamSweepResolve) {
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(kPeer, "x.json", &cfg, &e), 0) << e.msg;
  EXPECT_EQ(cfg.n_peer_arms, 2);
  EXPECT_STREQ(cfg.arms[1].peer.name, "llama.cpp");
  EXPECT_STREQ(cfg.arms[1].peer.load, "mmap");
  EXPECT_EQ(cfg.arms[1].peer.threads, 2);
  EXPECT_EQ(cfg.arms[1].peer.repack, 0);
  EXPECT_EQ(cfg.arms[2].peer.repack, 1);    // llama.cpp's default
  EXPECT_EQ(cfg.arms[2].peer.threads, 0);   // the control arm's threads
  EXPECT_EQ(cfg.arms[2].peer.batch, 512);   // chunked prefill
  EXPECT_STREQ(cfg.axes[0].key, "emulate_ram");
  EXPECT_STREQ(cfg.axes[0].values[0], "4G");  // sorted upward
  EXPECT_EQ(spill_exp_config_emulate_ram(&cfg, 0), 4ull << 30);
  EXPECT_EQ(spill_exp_config_emulate_ram(&cfg, 2), 16ull << 30);
  EXPECT_DOUBLE_EQ(spill_exp_config_threshold(&cfg, 0), 3.0);
  EXPECT_DOUBLE_EQ(spill_exp_config_threshold(&cfg, 1), 1.0);  // 1 + min_effect
  EXPECT_DOUBLE_EQ(spill_exp_config_threshold(&cfg, 2), 0.8);
  // the emulated RAM reaches the engine as usable_ram; peers get the control's config
  spill_config sc;
  ASSERT_EQ(spill_exp_config_engine(&cfg, 1, 2, &sc, &e), 0) << e.msg;
  EXPECT_EQ(sc.usable_ram, 8ull << 30);
  // the resolved form is itself a valid config that resolves to the same text
  char *r1 = spill_exp_config_resolved_json(&cfg);
  spill_exp_config again;
  ASSERT_EQ(spill_exp_config_parse(r1, "r.json", &again, &e), 0) << e.msg << "\n" << r1;
  char *r2 = spill_exp_config_resolved_json(&again);
  EXPECT_STREQ(r1, r2);
  free(r1), free(r2);
  spill_exp_config_free(&again);
  spill_exp_config_free(&cfg);
}

TEST(ExpConfigTest, RejectsBadPeerArms) {
  struct {
    std::string text, want;
  } cases[] = {
      {PeerEdit("\"peer\": \"llama.cpp\", \"args\": {\"load\": \"none\"}", "\"peer\": \"vllm\""),
       "x.json: arms[2].peer: \"vllm\": the known peer is \"llama.cpp\""},
      {PeerEdit("\"args\": {\"load\": \"none\"}", "\"set\": {\"threads\": 1}"),
       "x.json: arms[2]: a peer arm takes \"args\""},
      {PeerEdit("\"args\": {\"load\": \"none\"}", "\"exact\": true"),
       "x.json: arms[2]: a peer arm cannot be exact"},
      {PeerEdit("\"load\": \"none\"", "\"load\": \"swap\""),
       "x.json: arms[2].args: load \"swap\": expected mmap, none or mlock"},
      {PeerEdit("\"load\": \"none\"", "\"mmap\": true"), "x.json: arms[2].args: unknown key \"mmap\" (expected one of: load, threads, batch, repack)"},
      {PeerEdit("\"threads\": 2", "\"threads\": 0"), "arms[1].args.threads"},
      {PeerEdit("[{\"name\": \"spill\"},", "[{\"name\": \"l0\", \"peer\": \"llama.cpp\"}, {\"name\": \"spill\"},"),
       "x.json: arms[0]: the first arm is the control: make it a spill arm"},
      {PeerEdit("\"model_gguf\": \"cache/m.gguf\",", ""),
       "x.json: model_gguf: missing: peer arms run the GGUF file"},
      {PeerEdit("\"model\": \"cache/m.spill\"", "\"model\": {\"preset\": \"nano\"}"),
       "x.json: model: peer arms need a container imported from model_gguf"},
      {PeerEdit("\"decode_tokens\": 4}", "\"decode_tokens\": 4, \"prefill\": \"sequential\"}"),
       "OK"},  // sequential prefill: peers feed one token per call
      {PeerEdit("\"sweep\": {\"emulate_ram\": [\"8G\", \"4G\", \"16G\"]},",
                "\"sweep\": {\"emulate_ram\": [\"8G\", \"100M\"]},"),
       "x.json: sweep.emulate_ram[1]: below 256 MiB"},
      {PeerEdit("\"sweep\": {\"emulate_ram\": [\"8G\", \"4G\", \"16G\"]},",
                "\"sweep\": {\"emulate_ram\": [\"8G\", \"4G\", \"16G\"]}, \"machine\": {\"emulate_ram\": \"8G\"},"),
       "x.json: machine.emulate_ram: also swept in sweep.emulate_ram"},
      {PeerEdit("\"emulate_ram=4G\": 3", "\"emulate_ram=5G\": 3"),
       "x.json: hypothesis.cell_thresholds.emulate_ram=5G: not a cell of the sweep"},
      {PeerEdit("\"emulate_ram=4G\": 3", "\"emulate_ram=4G\": -1"),
       "x.json: hypothesis.cell_thresholds.emulate_ram=4G: expected a ratio > 0"},
  };
  for (auto &c : cases) {
    std::string got = Error(c.text);
    EXPECT_NE(got.find(c.want), std::string::npos) << "want: " << c.want << "\ngot:  " << got;
  }
  // model_gguf without peer arms is unused, so refused
  EXPECT_NE(Error(Edit("\"model\": {\"preset\": \"nano\"},",
                       "\"model\": {\"preset\": \"nano\"}, \"model_gguf\": \"x.gguf\","))
                .find("x.json: model_gguf: only used by peer arms"),
            std::string::npos);
  // a sequential workload takes batch 1 only
  std::string seq = PeerEdit("\"decode_tokens\": 4}", "\"decode_tokens\": 4, \"prefill\": \"sequential\"}");
  seq.replace(seq.find("\"load\": \"none\""), 14, "\"batch\": 8");
  EXPECT_NE(Error(seq).find("x.json: arms[2].args: batch 8: workload.prefill is sequential"),
            std::string::npos) << Error(seq);
}

// workload.bench (the workload peers report): defaults (pp512, tg128, every
// prompt, cold and warm), a subset of prompts and phases, the metrics a
// hypothesis may name, a resolved form that parses back to the same, and a
// named error for each bad form.
TEST(ExpConfigTest, BenchWorkloadParsesAndResolves) {
  const std::string bench = R"("workload": {"bench": {"pp": 64, "tg": 8, "prompts": ["code", "chat"],
                                                     "phases": ["warm"]}})";
  std::string text = Edit(R"("workload": {"prompt": "hello", "decode_tokens": 4})", bench);
  spill_exp_config cfg;
  spill_err e = {};
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "x.json", &cfg, &e), 0) << e.msg;
  EXPECT_EQ(cfg.bench, 1);
  EXPECT_EQ(cfg.bench_pp, 64);
  EXPECT_EQ(cfg.bench_tg, 8);
  EXPECT_EQ(cfg.decode_tokens, 8);
  ASSERT_EQ(cfg.bench_n_prompts, 2);
  EXPECT_STREQ(spill_bench_prompts[cfg.bench_prompts[0]].name, "code");
  EXPECT_STREQ(spill_bench_prompts[cfg.bench_prompts[1]].name, "chat");
  EXPECT_EQ(cfg.bench_phases, 1 << SPILL_BENCH_WARM);
  EXPECT_EQ(spill_exp_config_bench_n_phases(&cfg), 2) << "a warm request needs its cold one first";
  EXPECT_STREQ(spill_exp_config_primary_metric(&cfg), "tg_tok_per_s_warm");
  EXPECT_TRUE(spill_exp_config_has_metric(&cfg, spill_exp_metric_find("ttft_s_warm")));
  EXPECT_FALSE(spill_exp_config_has_metric(&cfg, spill_exp_metric_find("ttft_s_cold")));
  EXPECT_FALSE(spill_exp_config_has_metric(&cfg, spill_exp_metric_find("decode_tok_per_s")));
  EXPECT_TRUE(spill_exp_config_has_metric(&cfg, spill_exp_metric_find("bytes_read")));
  char *json = spill_exp_config_resolved_json(&cfg);
  ASSERT_NE(json, nullptr);
  EXPECT_EQ(std::string(json).find("decode_tokens"), std::string::npos) << json;
  spill_exp_config again;
  ASSERT_EQ(spill_exp_config_parse(json, "config.json", &again, &e), 0) << e.msg << "\n" << json;
  char *json2 = spill_exp_config_resolved_json(&again);
  EXPECT_STREQ(json, json2);
  free(json2);
  free(json);
  spill_exp_config_free(&again);
  spill_exp_config_free(&cfg);
  // defaults: llama-bench's pp512 + tg128, every prompt of bench/prompts, both phases
  text = Edit(R"("workload": {"prompt": "hello", "decode_tokens": 4})", R"("workload": {"bench": {}})");
  ASSERT_EQ(spill_exp_config_parse(text.c_str(), "x.json", &cfg, &e), 0) << e.msg;
  EXPECT_EQ(cfg.bench_pp, 512);
  EXPECT_EQ(cfg.bench_tg, 128);
  EXPECT_EQ(cfg.bench_n_prompts, spill_bench_n_prompts);
  EXPECT_GE(cfg.bench_n_prompts, 4);
  EXPECT_EQ(spill_exp_config_bench_n_phases(&cfg), 2);
  EXPECT_STREQ(spill_exp_config_primary_metric(&cfg), "tg_tok_per_s_cold");
  spill_exp_config_free(&cfg);
}

TEST(ExpConfigTest, BenchWorkloadBadFormsAreRefusedByName) {
  auto with = [&](const std::string &b, const std::string &more = "") {
    return Error(Edit(R"("workload": {"prompt": "hello", "decode_tokens": 4})",
                      R"("workload": {"bench": )" + b + more + "}"));
  };
  EXPECT_EQ(with(R"({"prompts": ["code", "poem"]})"),
            "x.json: workload.bench.prompts[1]: \"poem\": expected one of: chat, code, prose, table");
  EXPECT_EQ(with(R"({"prompts": ["code", "code"]})"),
            "x.json: workload.bench.prompts[1]: \"code\": duplicate");
  EXPECT_EQ(with(R"({"prompts": []})"), "x.json: workload.bench.prompts: empty list");
  EXPECT_EQ(with(R"({"phases": ["hot"]})"),
            "x.json: workload.bench.phases[0]: \"hot\": expected one of: cold, warm");
  EXPECT_EQ(with(R"({"phases": "cold"})"),
            "x.json: workload.bench.phases: expected a list of names, got a string");
  EXPECT_EQ(with(R"({"pp": 0})"), "x.json: workload.bench.pp: 0: out of range [1, 65536]");
  EXPECT_EQ(with(R"({"tg": 1.5})"), "x.json: workload.bench.tg: 1.5: expected an integer");
  EXPECT_EQ(with(R"({"pp": 8, "n": 2})"),
            "x.json: workload.bench: unknown key \"n\" (expected one of: pp, tg, prompts, phases)");
  EXPECT_EQ(with("512"),
            "x.json: workload.bench: expected an object such as {\"pp\": 512, \"tg\": 128}, got a number");
  EXPECT_EQ(with("{}", R"(, "decode_tokens": 4)"),
            "x.json: workload: \"decode_tokens\" and \"bench\": a bench workload runs its own "
            "prompts (bench.prompts) and token counts (bench.pp, bench.tg)");
  EXPECT_EQ(with("{}", R"(, "routing": "trace:x.jsonl")"),
            "x.json: workload.routing: a bench workload routes with the model's routers (its "
            "prompts are not the trace's): use \"model\"");
  std::string b = Edit(R"("workload": {"prompt": "hello", "decode_tokens": 4})", R"("workload": {"bench": {}})");
  std::string tl = b;
  tl.replace(tl.find("\"repeats\": 3"), 12, R"("repeats": 3, "outputs": {"plots": ["timeline"]})");
  EXPECT_EQ(Error(tl), "x.json: outputs.plots[0]: \"timeline\" plots one request's tokens; a "
                       "bench run is many requests (their figures are in the rows' bench.samples)");
  std::string cold = b;
  cold.replace(cold.find("\"repeats\": 3"), 12, "\"repeats\": 3, \"cold\": true");
  EXPECT_EQ(Error(cold),
            "x.json: cold: a bench workload has its own cold phase (workload.bench.phases: every "
            "prompt's first request starts with nothing cached)");
  std::string hyp = b;
  hyp.replace(hyp.find("\"repeats\": 3"), 12,
              R"("repeats": 3, "hypothesis": {"claim": "c", "metric": "decode_tok_per_s", "direction": "increase"})");
  EXPECT_EQ(Error(hyp), "x.json: hypothesis.metric: \"decode_tok_per_s\": not a metric of a bench "
                        "workload (e.g. tg_tok_per_s_cold; docs/EXPERIMENTS.md)");
  std::string ok = hyp;
  ok.replace(ok.find("decode_tok_per_s"), 16, "pp_tok_per_s_warm");
  EXPECT_EQ(Error(ok), "OK");
  std::string cold_only = ok;
  cold_only.replace(cold_only.find("\"bench\": {}"), 11, R"("bench": {"phases": ["cold"]})");
  EXPECT_EQ(Error(cold_only),
            "x.json: hypothesis.metric: \"pp_tok_per_s_warm\": phase warm is not in workload.bench.phases");
  std::string single = kGood;
  single.replace(single.find("\"repeats\": 3"), 12,
                 R"("repeats": 3, "hypothesis": {"claim": "c", "metric": "tg_tok_per_s_cold", "direction": "increase"})");
  EXPECT_EQ(Error(single), "x.json: hypothesis.metric: \"tg_tok_per_s_cold\": a metric of "
                           "workload.bench only (this workload is one request, e.g. decode_tok_per_s)");
  std::string greedy = b;
  const std::string on = R"({"name": "on", "set": {"verify": true}, "exact": true})";
  greedy.replace(greedy.find(on), on.size(),
                 R"({"name": "on", "set": {"draft": 4}, "drafts_from": "greedy"})");
  EXPECT_EQ(Error(greedy), "x.json: arms: arms[1].drafts_from greedy drafts one prompt's "
                           "continuation; a bench workload runs several prompts");
}
