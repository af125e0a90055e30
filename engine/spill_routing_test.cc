// engine/spill_routing_test.cc: forced routing from a router trace
// (cfg.routing_trace, docs/MODEL.md "Forced routing") on tiny synthetic
// models: the forced ids decide which experts are read (exact counters), a
// replayed run's router trace equals its input (and, replaying the model's
// own routing, so do the tokens: the gate weights are the normal path's),
// shape mismatches and bad trace lines are named, runs past the trace's end
// fail before they start, and `spill gen --like-trace` shapes a model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/spill.h"
#include "engine/trace/router_trace.h"
#include "research/gen/spill_gen.h"

namespace {

std::string TmpDir() {
  const char *t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// nano: 1 dense + 3 MoE layers, 16 experts, top-4 (k3: sigmoid router with
// renormalisation; gqa: softmax router without).
const std::string &Nano(const std::string &mix) {
  static std::string k3, gqa;
  std::string &d = mix == "gqa" ? gqa : k3;
  if (d.empty()) {
    d = TmpDir() + "/routing-nano-" + mix;
    spill_gen_request r = {};
    r.preset = "nano";
    r.attn_mix = mix.c_str();
    spill_err e = {};
    EXPECT_EQ(spill_gen(d.c_str(), &r, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  }
  return d;
}

using Token = std::vector<std::vector<int>>;  // layers x ids

// Writes a simple-format trace and returns its path.
std::string WriteTrace(const std::string &name, const std::vector<Token> &toks) {
  std::string path = TmpDir() + "/" + name;
  std::ofstream f(path);
  for (size_t t = 0; t < toks.size(); t++) {
    f << "{\"tok\": " << t << ", \"layers\": [";
    for (size_t l = 0; l < toks[t].size(); l++) {
      f << (l ? ", " : "") << "[";
      for (size_t i = 0; i < toks[t][l].size(); i++) f << (i ? ", " : "") << toks[t][l][i];
      f << "]";
    }
    f << "]}\n";
  }
  return path;
}

// n tokens whose layer l uses {4l, 4l+1, 4l+2, 4l+3} + shift (mod 16): every
// expert id appears, so the trace has 16 experts.
std::vector<Token> Blocks(int n, int shift) {
  std::vector<Token> v;
  for (int t = 0; t < n; t++) {
    Token tok;
    for (int l = 0; l < 3; l++) {
      std::vector<int> ids;
      for (int i = 0; i < 4; i++) ids.push_back((4 * l + i + shift) % 16);
      tok.push_back(ids);
    }
    if (t == 0) tok[2] = {15, 14, 13, 12};  // ids up to 15 appear whatever the shift
    v.push_back(tok);
  }
  return v;
}

struct RunResult {
  int rc = 0;
  std::string err;
  std::vector<int> tokens;
  spill_run_stats st{};
};

int Collect(void *user, int token, const char *, const spill_run_stats *) {
  static_cast<std::vector<int> *>(user)->push_back(token);
  return 0;
}

// Opens an engine (routing_trace and trace output optional), generates
// n_new greedy tokens after "ab" (BOS a b: 3 positions of prefill).
RunResult Generate(const std::string &model, const std::string &routing, const std::string &trace_out,
             int n_new, int64_t slots = 64) {
  RunResult r;
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.cache_slots = slots;
  if (!routing.empty()) cfg.routing_trace = routing.c_str();
  if (!trace_out.empty()) cfg.trace_path = trace_out.c_str();
  spill_engine *eng = nullptr;
  spill_err e = {};
  r.rc = spill_engine_open(model.c_str(), &cfg, &eng, &e);
  if (r.rc) {
    r.err = e.msg;
    return r;
  }
  int toks[16], n = 0;
  EXPECT_EQ(spill_tokenize(eng, "ab", 1, toks, 16, &n, &e), SPILL_OK);
  EXPECT_EQ(n, 3);
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  r.rc = spill_generate(eng, toks, n, n_new, &s, Collect, &r.tokens, nullptr, &r.st, &e);
  if (r.rc) r.err = e.msg;
  spill_engine_close(eng);
  return r;
}

spill_trace Read(const std::string &path) {
  spill_trace t;
  spill_err e = {};
  EXPECT_EQ(spill_trace_read_file(path.c_str(), nullptr, &t, &e), SPILL_OK) << e.msg;
  return t;
}

std::string OpenError(const std::string &model, const std::string &routing, int *rc) {
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.routing_trace = routing.c_str();
  spill_engine *eng = nullptr;
  spill_err e = {};
  *rc = spill_engine_open(model.c_str(), &cfg, &eng, &e);
  spill_engine_close(eng);
  return *rc ? e.msg : "";
}

}  // namespace

// With every expert cacheable (64 slots for 48), a forced run reads exactly
// the distinct (layer, expert) pairs of the trace it replays; the model's
// own routing reads others. The engine's router trace records the forced
// ids, with weights renormalised to sum to 1 (norm_topk).
TEST(ForcedRoutingTest, TheTraceDecidesWhichExpertsAreRead) {
  const std::string &m = Nano("k3");
  const int n_new = 10, positions = 3 + n_new;
  std::string tr = WriteTrace("blocks.jsonl", Blocks(positions, 0));
  std::string out = TmpDir() + "/blocks-out.jsonl";
  RunResult f = Generate(m, tr, out, n_new);
  ASSERT_EQ(f.rc, SPILL_OK) << f.err;
  // distinct pairs: token 0 uses layer 2's {12..15}, later tokens {8..11};
  // layers 0 and 1: {0..3}, {4..7}: 4 + 4 + 8 = 16 pairs
  EXPECT_EQ(f.st.demand_misses, 16u);
  EXPECT_EQ(f.st.reads, 16u);
  EXPECT_EQ(f.st.demand_hits + f.st.demand_misses, f.st.experts_requested);
  // prefill chunk (3 tokens): layer 2 requests 8 distinct; decode: 12 per token
  EXPECT_EQ(f.st.experts_requested, (uint64_t)(4 + 4 + 8 + 12 * n_new));
  RunResult own = Generate(m, "", "", n_new);
  ASSERT_EQ(own.rc, SPILL_OK) << own.err;
  EXPECT_GT(own.st.demand_misses, 16u);

  // a shifted trace reads other experts: the same counters, other ids
  std::string tr2 = WriteTrace("blocks2.jsonl", Blocks(positions, 2));
  std::string out2 = TmpDir() + "/blocks2-out.jsonl";
  RunResult f2 = Generate(m, tr2, out2, n_new);
  ASSERT_EQ(f2.rc, SPILL_OK) << f2.err;
  spill_trace a = Read(out), b = Read(out2), in2 = Read(tr2);
  ASSERT_EQ(b.n_tokens, (uint32_t)positions);
  ASSERT_EQ(b.n_layers * b.top_k, in2.n_layers * in2.top_k);
  EXPECT_EQ(std::vector<uint32_t>(b.ids, b.ids + (size_t)positions * 12),
            std::vector<uint32_t>(in2.ids, in2.ids + (size_t)positions * 12));
  EXPECT_NE(std::vector<uint32_t>(a.ids, a.ids + (size_t)positions * 12),
            std::vector<uint32_t>(b.ids, b.ids + (size_t)positions * 12));
  spill_trace_free(&a);
  spill_trace_free(&b);
  spill_trace_free(&in2);

  // weights of the forced ids: renormalised router scores (sum 1)
  std::ifstream f_out(out);
  std::string line;
  int checked = 0;
  while (std::getline(f_out, line)) {
    size_t w = line.find("\"weights\": [");
    ASSERT_NE(w, std::string::npos);
    double sum = 0;
    const char *p = line.c_str() + w + 12;
    for (int i = 0; i < 4; i++) {
      char *end;
      double v = strtod(p, &end);
      EXPECT_GT(v, 0.0);
      sum += v;
      p = end + (i < 3 ? 2 : 0);
    }
    EXPECT_NEAR(sum, 1.0, 1e-4) << line;
    checked++;
  }
  EXPECT_EQ(checked, positions * 3);
}

// Record a run's router trace, replay it: the replayed run's trace has the
// same tokens, positions, phases, layers and ids, and because the forced ids
// are the ones the routers pick, with the normal path's weights, the
// generated tokens are identical too (sigmoid + renormalisation, and softmax).
TEST(ForcedRoutingTest, ReplayingARecordedTraceRoundTrips) {
  for (const char *mix : {"k3", "gqa"}) {
    SCOPED_TRACE(mix);
    const std::string &m = Nano(mix);
    const int n_new = 40;
    std::string rec = TmpDir() + "/rt-" + mix + "-rec.jsonl";
    std::string rep = TmpDir() + "/rt-" + mix + "-rep.jsonl";
    RunResult a = Generate(m, "", rec, n_new);
    ASSERT_EQ(a.rc, SPILL_OK) << a.err;
    spill_trace ta = Read(rec);
    ASSERT_EQ(ta.n_experts, 16u) << "the recorded trace does not use expert 15; pick another run";
    RunResult b = Generate(m, rec, rep, n_new);
    ASSERT_EQ(b.rc, SPILL_OK) << b.err;
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.st.demand_misses, b.st.demand_misses);
    EXPECT_EQ(a.st.experts_requested, b.st.experts_requested);
    spill_trace tb = Read(rep);
    ASSERT_EQ(ta.n_tokens, tb.n_tokens);
    ASSERT_EQ(ta.n_tokens, (uint32_t)(3 + n_new));
    ASSERT_EQ(ta.n_layers, tb.n_layers);
    ASSERT_EQ(ta.top_k, tb.top_k);
    size_t n = (size_t)ta.n_tokens * ta.n_layers * ta.top_k;
    EXPECT_EQ(std::vector<uint32_t>(ta.ids, ta.ids + n), std::vector<uint32_t>(tb.ids, tb.ids + n));
    EXPECT_EQ(std::vector<uint32_t>(ta.layer_ids, ta.layer_ids + ta.n_layers),
              std::vector<uint32_t>(tb.layer_ids, tb.layer_ids + tb.n_layers));
    EXPECT_EQ(std::vector<int64_t>(ta.pos, ta.pos + ta.n_tokens),
              std::vector<int64_t>(tb.pos, tb.pos + tb.n_tokens));
    EXPECT_EQ(std::vector<uint8_t>(ta.phase, ta.phase + ta.n_tokens),
              std::vector<uint8_t>(tb.phase, tb.phase + tb.n_tokens));
    spill_trace_free(&ta);
    spill_trace_free(&tb);
  }
}

// A trace whose ids are not the model's own routing also round-trips: the
// output trace of the replay has the input's ids, token for token.
TEST(ForcedRoutingTest, ForeignTraceIdsAreWhatTheEngineRecords) {
  const std::string &m = Nano("k3");
  std::vector<Token> toks;
  for (int t = 0; t < 9; t++) {
    Token tok;
    for (int l = 0; l < 3; l++) {
      std::vector<int> ids;
      for (int i = 0; i < 4; i++) ids.push_back((t * 5 + l * 3 + i * 7) % 16);
      tok.push_back(ids);
    }
    toks.push_back(tok);
  }
  toks[0][0] = {15, 0, 1, 2};
  std::string tr = WriteTrace("foreign.jsonl", toks);
  std::string out = TmpDir() + "/foreign-out.jsonl";
  RunResult r = Generate(m, tr, out, 6);
  ASSERT_EQ(r.rc, SPILL_OK) << r.err;
  spill_trace in = Read(tr), o = Read(out);
  ASSERT_EQ(o.n_tokens, 9u);
  size_t n = 9 * 3 * 4;
  EXPECT_EQ(std::vector<uint32_t>(in.ids, in.ids + n), std::vector<uint32_t>(o.ids, o.ids + n));
  EXPECT_EQ(std::vector<uint32_t>(o.layer_ids, o.layer_ids + 3), (std::vector<uint32_t>{1, 2, 3}));
  spill_trace_free(&in);
  spill_trace_free(&o);
}

// The model must have the trace's MoE layers, experts per layer and top-k;
// the error names each difference with both values, and ids beyond the
// model's experts name their first line.
TEST(ForcedRoutingTest, ShapeMismatchesAreNamedWithBothValues) {
  const std::string &m = Nano("k3");
  int rc;
  std::vector<Token> two_layers = {{{0, 1, 2, 15}, {3, 4, 5, 6}}};
  std::string f = WriteTrace("two-layers.jsonl", two_layers);
  EXPECT_EQ(OpenError(m, f, &rc), "routing trace " + f + ": 2 MoE layers, model has 3");
  EXPECT_EQ(rc, SPILL_E_TRACE);

  std::vector<Token> top3 = {{{0, 1, 15}, {3, 4, 5}, {6, 7, 8}}};
  f = WriteTrace("top3.jsonl", top3);
  EXPECT_EQ(OpenError(m, f, &rc), "routing trace " + f + ": top-3, model has top-4");

  std::vector<Token> few = {{{0, 1, 2, 3}, {3, 4, 5, 6}, {6, 7, 8, 11}}};
  f = WriteTrace("few.jsonl", few);
  EXPECT_EQ(OpenError(m, f, &rc),
            "routing trace " + f + ": 12 experts per layer (highest id 11 + 1), model has 16");

  std::vector<Token> many = {{{0, 1, 2, 3}, {3, 4, 5, 6}, {6, 7, 8, 15}},
                             {{0, 1, 2, 3}, {19, 4, 5, 6}, {6, 7, 8, 9}}};
  f = WriteTrace("many.jsonl", many);
  EXPECT_EQ(OpenError(m, f, &rc),
            "routing trace " + f + ": 20 experts per layer (highest id 19 + 1), model has 16; "
            "first id beyond the model: " + f + ":2: layers[1][0]: expected integer in [0, 15]");

  std::vector<Token> all = {{{0, 1, 31}, {3, 4, 5}}};
  f = WriteTrace("all.jsonl", all);
  EXPECT_EQ(OpenError(m, f, &rc),
            "routing trace " + f + ": 2 MoE layers, model has 3; 32 experts per layer (highest "
            "id 31 + 1), model has 16; top-3, model has top-4; first id beyond the model: " + f +
            ":1: layers[0][2]: expected integer in [0, 15]");

  // spill_routing_trace_inspect runs the same check without an engine
  spill_routing_trace_info info;
  spill_err e = {};
  EXPECT_EQ(spill_routing_trace_inspect(f.c_str(), m.c_str(), &info, &e), SPILL_E_TRACE);
  EXPECT_NE(std::string(e.msg).find("2 MoE layers, model has 3"), std::string::npos) << e.msg;
  EXPECT_EQ(info.n_layers, 2);
  EXPECT_EQ(info.top_k, 3);
  EXPECT_EQ(info.n_experts, 32);
  EXPECT_EQ(info.n_tokens, 1);
}

// Lines with the wrong number of ids, out-of-range values, duplicates or bad
// JSON are the trace reader's errors, naming file and line.
TEST(ForcedRoutingTest, BadTraceLinesAreNamed) {
  const std::string &m = Nano("k3");
  int rc;
  std::string f = TmpDir() + "/badline.jsonl";
  {
    std::ofstream o(f);
    o << "{\"tok\": 0, \"layers\": [[0, 1, 2, 15], [3, 4, 5, 6], [6, 7, 8, 9]]}\n"
      << "{\"tok\": 1, \"layers\": [[0, 1, 2, 3], [3, 4, 5], [6, 7, 8, 9]]}\n";
  }
  EXPECT_EQ(OpenError(m, f, &rc), f + ":2: layers[1]: expected 4 ids (as line 1), got 3");
  EXPECT_EQ(rc, SPILL_E_TRACE);
  {
    std::ofstream o(f);
    o << "{\"tok\": 0, \"layers\": [[0, 1, 2, 15], [3, 4, 5, 6], [6, 7, 8, 9]]}\n"
      << "{\"tok\": 1, \"layers\": [[0, 1, 2, 3], [3, 4, 5, 6], [6, 6, 8, 9]]}\n";
  }
  EXPECT_EQ(OpenError(m, f, &rc),
            f + ":2: layers[2][1]: duplicate expert id 6 (also at index 0)");
  {
    std::ofstream o(f);
    o << "{\"tok\": 0, \"layers\": [[0, 1, 2, -1], [3, 4, 5, 6], [6, 7, 8, 9]]}\n";
  }
  EXPECT_NE(OpenError(m, f, &rc).find(f + ":1: layers[0][3]: expected integer in"),
            std::string::npos);
  EXPECT_EQ(OpenError(m, TmpDir() + "/no-such-trace.jsonl", &rc).find("cannot open") !=
                std::string::npos,
            true);
  EXPECT_EQ(rc, SPILL_E_IO);
}

// No wrap-around: a run needing more positions than the trace has tokens
// fails before it runs anything; a run of exactly the trace's length works.
TEST(ForcedRoutingTest, RunsPastTheTraceEndFailBeforeStarting) {
  const std::string &m = Nano("k3");
  std::string tr = WriteTrace("short.jsonl", Blocks(12, 0));
  RunResult r = Generate(m, tr, "", 10);  // 3 + 10 = 13 positions
  EXPECT_EQ(r.rc, SPILL_E_RANGE);
  EXPECT_NE(r.err.find("13 positions, but routing trace " + tr + " drives 12"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.st.reads, 0u);
  EXPECT_TRUE(r.tokens.empty());
  RunResult ok = Generate(m, tr, "", 9);
  EXPECT_EQ(ok.rc, SPILL_OK) << ok.err;
  EXPECT_EQ(ok.st.tokens_decode, 9);

  // eval checks the same bound; routing_trace cannot change on an open engine
  spill_config cfg;
  spill_config_default(&cfg);
  cfg.routing_trace = tr.c_str();
  spill_engine *eng = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_engine_open(m.c_str(), &cfg, &eng, &e), SPILL_OK) << e.msg;
  std::vector<int> toks(13, 'a');
  EXPECT_EQ(spill_eval(eng, toks.data(), 13, 1, nullptr, nullptr, &e), SPILL_E_RANGE);
  EXPECT_EQ(spill_eval(eng, toks.data(), 12, 1, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  EXPECT_STREQ(spill_engine_config(eng)->routing_trace, tr.c_str());
  EXPECT_EQ(spill_engine_set_knob(eng, "routing_trace", tr.c_str(), &e), SPILL_E_CONFIG);
  spill_engine_close(eng);
}

// The model-level table is checked when set and bounds every forward.
TEST(ForcedRoutingTest, ModelChecksTheTableAndItsEnd) {
  const std::string &m = Nano("k3");
  spill_model *mod = nullptr;
  spill_err e = {};
  ASSERT_EQ(spill_model_open(m.c_str(), nullptr, &mod, &e), SPILL_OK) << e.msg;
  std::vector<uint32_t> ids;
  for (int p = 0; p < 2; p++)
    for (int l = 0; l < 3; l++)
      for (int i = 0; i < 4; i++) ids.push_back((uint32_t)(l * 4 + i));
  std::vector<uint32_t> bad = ids;
  bad[1 * 12 + 2 * 4 + 3] = 16;
  EXPECT_EQ(spill_model_set_forced_routing(mod, bad.data(), 2, &e), SPILL_E_RANGE);
  EXPECT_STREQ(e.msg, "forced routing: position 1 MoE layer 2 slot 3: expert 16 out of [0, 16)");
  bad = ids;
  bad[4 + 2] = bad[4];
  EXPECT_EQ(spill_model_set_forced_routing(mod, bad.data(), 2, &e), SPILL_E_RANGE);
  EXPECT_STREQ(e.msg, "forced routing: position 0 MoE layer 1: expert 4 in slots 0 and 2");
  ASSERT_EQ(spill_model_set_forced_routing(mod, ids.data(), 2, &e), SPILL_OK);
  int toks[3] = {256, 'a', 'b'};
  EXPECT_EQ(spill_model_forward(mod, toks, 2, 0, nullptr, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_model_forward(mod, toks + 2, 1, 2, nullptr, &e), SPILL_E_RANGE);
  EXPECT_NE(std::string(e.msg).find("forced routing covers positions 0..1; position 2 has none"),
            std::string::npos)
      << e.msg;
  EXPECT_EQ(spill_model_set_forced_routing(mod, nullptr, 0, &e), SPILL_OK);
  EXPECT_EQ(spill_model_forward(mod, toks, 3, 0, nullptr, &e), SPILL_OK) << e.msg;
  spill_model_close(mod);
}

// spill gen --like-trace: MoE layers, experts and top-k from the trace, the
// rest from the preset; the model then replays the trace.
TEST(ForcedRoutingTest, GenLikeTraceShapesAModelThatReplaysIt) {
  std::vector<Token> toks;
  for (int t = 0; t < 12; t++) {
    Token tok;
    for (int l = 0; l < 5; l++) tok.push_back({(t + l) % 24, (t + l + 7) % 24, (t + l + 14) % 24});
    toks.push_back(tok);
  }
  std::string tr = WriteTrace("like.jsonl", toks);
  spill_gen_request req = {};
  spill_err e = {};
  ASSERT_EQ(spill_gen_request_like_trace(&req, tr.c_str(), &e), SPILL_OK) << e.msg;
  EXPECT_STREQ(req.preset, "mini");  // the default preset
  EXPECT_EQ(req.moe_layers, 5);
  EXPECT_EQ(req.experts, 24);
  EXPECT_EQ(req.top_k, 3);
  req = {};
  req.preset = "nano";
  ASSERT_EQ(spill_gen_request_like_trace(&req, tr.c_str(), &e), SPILL_OK) << e.msg;
  std::string dir = TmpDir() + "/like-nano";
  ASSERT_EQ(spill_gen(dir.c_str(), &req, nullptr, nullptr, &e), SPILL_OK) << e.msg;
  spill_info info;
  ASSERT_EQ(spill_info_read(dir.c_str(), &info, &e), SPILL_OK);
  EXPECT_EQ(info.n_moe_layers, 5);
  EXPECT_EQ(info.n_dense_layers, 1);
  EXPECT_EQ(info.n_experts, 24);
  EXPECT_EQ(info.top_k, 3);
  EXPECT_EQ(info.d_model, 64);  // nano's
  spill_routing_trace_info ti;
  EXPECT_EQ(spill_routing_trace_inspect(tr.c_str(), dir.c_str(), &ti, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(ti.n_tokens, 12);
  EXPECT_EQ(ti.router_format, 0);
  std::string out = TmpDir() + "/like-out.jsonl";
  RunResult r = Generate(dir, tr, out, 9);
  ASSERT_EQ(r.rc, SPILL_OK) << r.err;
  spill_trace in = Read(tr), o = Read(out);
  size_t n = 12 * 5 * 3;
  EXPECT_EQ(std::vector<uint32_t>(in.ids, in.ids + n), std::vector<uint32_t>(o.ids, o.ids + n));
  spill_trace_free(&in);
  spill_trace_free(&o);

  // conflicts and the twin are refused
  req = {};
  req.preset = "twin";
  EXPECT_EQ(spill_gen_request_like_trace(&req, tr.c_str(), &e), SPILL_E_CONFIG);
  req = {};
  req.experts = 32;
  EXPECT_EQ(spill_gen_request_like_trace(&req, tr.c_str(), &e), SPILL_E_CONFIG);
  EXPECT_STREQ(e.msg, ("gen: experts 32, but trace " + tr + " has 24 experts per layer").c_str());
}
