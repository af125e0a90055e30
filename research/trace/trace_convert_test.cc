// Tests of `spill trace convert` (trace_convert.c) and the writer
// (trace_write.c): the source formats on the committed, unmodified
// excerpts of the original files (traces/*/…excerpt.*), the caveats each
// source earns, round trips through the JSONL writer and reader, one test
// per class of malformed input (each checking the line number), and the
// full converted traces of traces/ (shape, and agreement with the excerpts).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

namespace {

std::string Slurp(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Conv {
  int rc;
  std::string msg;
  spill_trace t;
};

Conv Convert(spill_trace_source src, const std::vector<std::string> &texts,
             spill_trace_convert_opts o = {}) {
  std::vector<const char *> in;
  std::vector<size_t> len;
  std::vector<const char *> names;
  std::vector<std::string> nm;
  for (size_t i = 0; i < texts.size(); i++) nm.push_back("in" + std::to_string(i));
  for (size_t i = 0; i < texts.size(); i++) {
    in.push_back(texts[i].data());
    len.push_back(texts[i].size());
    names.push_back(nm[i].c_str());
  }
  Conv c;
  spill_err e = {};
  c.rc = spill_trace_convert(src, in.data(), len.data(), names.data(), in.size(), &o, &c.t, &e);
  c.msg = e.msg;
  return c;
}

bool HasCaveat(const spill_trace &t, const std::string &needle) {
  for (uint32_t i = 0; i < t.meta.n_caveats; i++)
    if (std::string(t.meta.caveats[i]).find(needle) != std::string::npos) return true;
  return false;
}

void ExpectConvError(spill_trace_source src, const std::string &text, const std::string &want,
                     spill_trace_convert_opts o = {}) {
  Conv c = Convert(src, {text}, o);
  EXPECT_EQ(c.rc, SPILL_E_TRACE) << text.substr(0, 200);
  EXPECT_NE(c.msg.find(want), std::string::npos) << "got: " << c.msg << "\nwant: " << want;
  EXPECT_EQ(c.t.ids, nullptr);
  spill_trace_free(&c.t);
}

// Writes t to JSONL, parses it back and checks every field survived.
void ExpectRoundTrip(const spill_trace &t) {
  char *buf = nullptr;
  size_t len = 0;
  spill_err e = {};
  ASSERT_EQ(spill_trace_format_jsonl(&t, &buf, &len, &e), SPILL_OK) << e.msg;
  spill_trace r;
  int rc = spill_trace_parse(buf, len, nullptr, &r, &e);
  free(buf);
  ASSERT_EQ(rc, SPILL_OK) << e.msg;
  EXPECT_EQ(r.n_tokens, t.n_tokens);
  EXPECT_EQ(r.n_layers, t.n_layers);
  EXPECT_EQ(r.n_experts, t.n_experts);
  EXPECT_EQ(r.top_k, t.top_k);
  for (uint32_t l = 0; l < t.n_layers; l++) EXPECT_EQ(r.layer_ids[l], t.layer_ids[l]);
  size_t n = (size_t)t.n_tokens * t.n_layers * t.top_k;
  for (size_t i = 0; i < n; i++) ASSERT_EQ(r.ids[i], t.ids[i]) << i;
  ASSERT_EQ(r.weights != nullptr, t.weights != nullptr);
  if (t.weights)
    for (size_t i = 0; i < n; i++) ASSERT_EQ(r.weights[i], t.weights[i]) << i;  // bit-exact
  for (uint32_t k = 0; k < t.n_tokens; k++) {
    EXPECT_EQ(r.pos[k], t.pos[k]);
    EXPECT_EQ(r.phase[k], t.phase[k]);
  }
  EXPECT_EQ(r.meta.n_experts, t.n_experts);
  EXPECT_EQ(r.meta.top_k_native, t.meta.top_k_native);
  EXPECT_EQ(r.meta.rank_order, t.meta.rank_order);
  ASSERT_EQ(r.meta.n_caveats, t.meta.n_caveats);
  for (uint32_t i = 0; i < t.meta.n_caveats; i++)
    EXPECT_STREQ(r.meta.caveats[i], t.meta.caveats[i]);
  EXPECT_STREQ(r.meta.converted_from, t.meta.converted_from);
  EXPECT_EQ(r.meta.n_sequences, 1u);
  spill_trace_free(&r);
}

const char *kBmoeHead =
    "# route_trace v1\n"
    "# model=/x/m.gguf arch=a n_layer=2 n_expert=4 n_expert_used=2\n"
    "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n";

TEST(TraceConvertTest, BmoeExcerptDropsTokensLackingTheLastLayer) {
  spill_trace_convert_opts o = {};
  o.top_k_native = 4;
  Conv c = Convert(SPILL_TRACE_SRC_BMOE_CSV,
                   {Slurp("traces/bigmoeonedge/gptoss.route.excerpt.csv")}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  // steps 0 and 1 (prefill, no layer 35) dropped; 84 (last prefill), 85, 86 kept
  EXPECT_EQ(t.n_tokens, 3u);
  EXPECT_EQ(t.n_layers, 36u);
  EXPECT_EQ(t.n_experts, 128u);  // from the file's header, not inferred
  EXPECT_EQ(t.top_k, 2u);
  EXPECT_EQ(t.pos[0], 84);
  EXPECT_EQ(t.phase[0], SPILL_TRACE_PHASE_PREFILL);
  EXPECT_EQ(t.pos[1], 85);
  EXPECT_EQ(t.phase[1], SPILL_TRACE_PHASE_DECODE);
  ASSERT_NE(t.weights, nullptr);
  EXPECT_EQ(t.meta.rank_order, 1);
  EXPECT_EQ(t.meta.top_k_native, 4u);
  EXPECT_STREQ(t.meta.model, "gpt-oss-120b-Q4_K_M");
  EXPECT_TRUE(HasCaveat(t, "2 of 5 tokens (2 prefill) lack layer(s) 35"));
  EXPECT_TRUE(HasCaveat(t, "top-k overridden from 4 to 2"));
  // weights in rank order: slot 0 has the larger weight in every row
  for (size_t i = 0; i < (size_t)t.n_tokens * t.n_layers; i++)
    EXPECT_GE(t.weights[i * 2], t.weights[i * 2 + 1]);
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);

  o.incomplete = SPILL_TRACE_DROP_LAYERS;
  c = Convert(SPILL_TRACE_SRC_BMOE_CSV, {Slurp("traces/bigmoeonedge/gptoss.route.excerpt.csv")},
              o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  EXPECT_EQ(c.t.n_tokens, 5u);
  EXPECT_EQ(c.t.n_layers, 35u);
  EXPECT_TRUE(HasCaveat(c.t, "layer(s) 35 missing from 2 of 5 tokens"));
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, BmoeKeepsRankOrderWhateverTheRowOrder) {
  std::string text = std::string(kBmoeHead) +
                     "0,1,7,1,1,2,0.25,0,0\n0,1,7,0,0,3,0.5,0,0\n0,1,7,1,0,0,0.75,0,0\n"
                     "0,1,7,0,1,1,0.125,0,0\n";
  Conv c = Convert(SPILL_TRACE_SRC_BMOE_CSV, {text});
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  EXPECT_EQ(c.t.n_tokens, 1u);
  EXPECT_EQ(spill_trace_ids(&c.t, 0, 0)[0], 3u);
  EXPECT_EQ(spill_trace_ids(&c.t, 0, 0)[1], 1u);
  EXPECT_EQ(spill_trace_ids(&c.t, 0, 1)[0], 0u);
  EXPECT_EQ(spill_trace_ids(&c.t, 0, 1)[1], 2u);
  EXPECT_EQ(c.t.weights[2], 0.75f);
  EXPECT_STREQ(c.t.meta.model, "m");
  EXPECT_EQ(c.t.pos[0], 7);
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, BmoeMalformedInputNamesTheLine) {
  const auto B = SPILL_TRACE_SRC_BMOE_CSV;
  ExpectConvError(B, "turn,phase\n", "in0:1: expected \"# route_trace v1\"");
  ExpectConvError(B, "# route_trace v2\n", "in0:1: route_trace version 2");
  ExpectConvError(B, "# route_trace v1\nturn,phase\n", "in0:2: no \"# model=");
  ExpectConvError(B,
                  "# route_trace v1\n# model=m n_layer=2 n_expert=4 n_expert_used=2\n"
                  "turn,phase,step,layer,slot,expert\n",
                  "in0:3: column header lacks \"weight\"");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,9,0.5,0,0\n",
                  "in0:4: expert: expected integer in [0, 3], got \"9\"");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,2,0,1,0.5,0,0\n",
                  "in0:4: layer: expected integer in [0, 1]");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,1,abc,0,0\n",
                  "in0:4: weight: expected a finite number");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,1,0.5,0\n", "in0:4: 8 fields");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,1,0.5,0,0\n0,1,0,0,0,2,0.5,0,0\n",
                  "in0:5: layer 0 slot 0 given twice");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,1,0.5,0,0\n0,1,0,0,1,1,0.5,0,0\n",
                  "in0:5: layer 0: expert 1 given twice");
  ExpectConvError(B, std::string(kBmoeHead) + "0,1,0,0,0,1,0.5,0,0\n0,0,0,0,1,2,0.5,0,0\n",
                  "in0:5: phase 0, but turn 0 step 0");
  // a layer with one of its two ranks: named at the layer's first row
  ExpectConvError(B,
                  std::string(kBmoeHead) +
                      "0,1,0,0,0,1,0.5,0,0\n0,1,0,0,1,2,0.5,0,0\n0,1,0,1,0,1,0.5,0,0\n",
                  "in0:6: layer 1 of the token at pos 0: 1 of 2 ranks");
  ExpectConvError(B, std::string(kBmoeHead), "no data rows");
}

TEST(TraceConvertTest, HfRouterJsonExcerpt) {
  spill_trace_convert_opts o = {};
  o.n_experts = 32;
  std::string text = Slurp("traces/gpt-oss-20b-fingerprinting/mmlu_dev.excerpt.json");
  Conv c = Convert(SPILL_TRACE_SRC_HF_ROUTER_JSON, {text}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 3u);
  EXPECT_EQ(t.n_layers, 24u);
  EXPECT_EQ(t.n_experts, 32u);
  EXPECT_EQ(t.top_k, 4u);
  EXPECT_EQ(t.pos[0], 160);
  EXPECT_EQ(t.pos[2], 162);
  const uint32_t want[4] = {31, 21, 22, 6};
  for (int k = 0; k < 4; k++) EXPECT_EQ(spill_trace_ids(&t, 0, 0)[k], want[k]);
  EXPECT_EQ(t.weights[0], 0.5234375f);
  EXPECT_EQ(t.meta.rank_order, 1);
  EXPECT_TRUE(HasCaveat(t, "phase not recorded"));
  EXPECT_FALSE(HasCaveat(t, "highest id + 1"));  // --experts given
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);

  // two inputs: concatenated, positions restart, a caveat says so
  c = Convert(SPILL_TRACE_SRC_HF_ROUTER_JSON, {text, text}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  EXPECT_EQ(c.t.n_tokens, 6u);
  EXPECT_EQ(c.t.pos[3], 160);
  EXPECT_TRUE(HasCaveat(c.t, "2 inputs concatenated"));
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, HfRouterJsonMalformedInputNamesTheLine) {
  const auto H = SPILL_TRACE_SRC_HF_ROUTER_JSON;
  ExpectConvError(H, "{\n\"router_data\": [\n  {\"token_1\": \n", "in0:3: invalid JSON");
  ExpectConvError(H, "{\"x\": 1}", "in0:1: router_data: expected an array");
  const std::string l0 = "\"layer_0\": {\"selected_experts\": [1, 2], \"selected_probs\": [0.6, 0.4]}";
  const std::string l1 = "\"layer_1\": {\"selected_experts\": [0, 3], \"selected_probs\": [0.5, 0.5]}";
  ExpectConvError(H,
                  "{\"router_data\": [\n{\"token_5\": {" + l0 + ", " + l1 + "}},\n{\"token_6\": {" +
                      l0 + "}}\n]}",
                  "in0:3: router_data[1].token_6: 1 layers, expected 2");
  ExpectConvError(H,
                  "{\"router_data\": [\n{\"token_5\": {" + l0 + ", " + l1 + "}},\n{\"token_6\": {" +
                      l0 + ", \"layer_1\": {\"selected_experts\": [0, -3], "
                           "\"selected_probs\": [0.5, 0.5]}}}\n]}",
                  "in0:3: router_data[1].token_6.layer_1.selected_experts[1]: expected integer");
  // a repeated key (a layer, router_data itself: cJSON kept the first copy,
  // Python the last) or a NUL: refused by the one JSON layer, by name
  ExpectConvError(H,
                  "{\"router_data\": [\n{\"token_5\": {" + l0 + ", " + l0 + "}}\n]}",
                  "in0: router_data[0].token_5.layer_0: duplicate key");
  ExpectConvError(H,
                  "{\"router_data\": [{\"token_5\": {" + l0 + ", " + l1 + "}}], \"router_data\": []}",
                  "in0: router_data: duplicate key");
  ExpectConvError(H, "{\"router_data\\u0000x\": []}", "(NUL) inside a string");
  ExpectConvError(H,
                  "{\"router_data\": [\n{\"token_5\": {" + l0 +
                      ", \"layer_1\": {\"selected_experts\": [0, 3], \"selected_probs\": [0.5]}}}\n]}",
                  "in0:2: router_data[0].token_5.layer_1.selected_probs: expected an array of 2");
  ExpectConvError(H, "{\"router_data\": [{\"tok_5\": {}}]}", "router_data[0]: expected one member");
  ExpectConvError(H, "{\"router_data\": []}", "router_data: empty");
}

TEST(TraceConvertTest, SortedIdsExcerptDropsTheAggregatedPass) {
  spill_trace_convert_opts o = {};
  o.n_layers = 32;
  Conv c = Convert(SPILL_TRACE_SRC_SORTED_IDS_TXT,
                   {Slurp("traces/mixtral-offloading/active_experts.excerpt.txt")}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 3u);  // 128 lines = 4 passes, the first aggregated
  EXPECT_EQ(t.n_layers, 32u);
  EXPECT_EQ(t.top_k, 2u);
  EXPECT_EQ(t.n_experts, 8u);
  EXPECT_EQ(spill_trace_ids(&t, 0, 0)[0], 3u);  // line 33: "3,4"
  EXPECT_EQ(spill_trace_ids(&t, 0, 0)[1], 4u);
  EXPECT_EQ(t.weights, nullptr);
  EXPECT_EQ(t.meta.rank_order, 0);
  EXPECT_TRUE(HasCaveat(t, "rank order unknown"));
  EXPECT_TRUE(HasCaveat(t, "no gate weights"));
  EXPECT_TRUE(HasCaveat(t, "1 aggregated pass(es) dropped"));
  EXPECT_TRUE(HasCaveat(t, "highest id + 1 (8)"));
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, SortedIdsMalformedInputNamesTheLine) {
  const auto S = SPILL_TRACE_SRC_SORTED_IDS_TXT;
  spill_trace_convert_opts o = {};
  o.n_layers = 2;
  ExpectConvError(S, "1,2\n0,3\n1,2\n", "in0:3: 3 lines is not a whole number of passes", o);
  ExpectConvError(S, "1,2\n0,x\n", "in0:2: id 1: expected integer", o);
  ExpectConvError(S, "1,2\n0,3,4\n1,2\n0,3\n", "in0:2: 3 ids, expected 2", o);
  ExpectConvError(S, "1,1\n0,3\n", "in0:1: layer 0: expert 1 given twice", o);
  ExpectConvError(S, "\n\n", "in0:1: no lines", o);
  Conv c = Convert(S, {"1,2\n"});  // no --layers
  EXPECT_EQ(c.rc, SPILL_E_INVALID_ARG);
  spill_trace_free(&c.t);
}

// A response of vLLM's OpenAI server with --enable-return-routed-experts,
// written by us from vLLM's documentation (research/trace/testdata).
TEST(TraceConvertTest, VllmRoutedJsonPromptThenChoiceZero) {
  Conv c = Convert(SPILL_TRACE_SRC_VLLM_ROUTED_JSON,
                   {Slurp("research/trace/testdata/vllm_routed.json")});
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 5u);  // 2 prompt + 3 generated (choice 0)
  EXPECT_EQ(t.n_layers, 2u);
  EXPECT_EQ(t.top_k, 2u);
  EXPECT_EQ(t.n_experts, 8u);  // highest id 7 + 1
  EXPECT_EQ(t.phase[1], SPILL_TRACE_PHASE_PREFILL);
  EXPECT_EQ(t.phase[2], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(t.pos[2], 2);
  EXPECT_EQ(spill_trace_ids(&t, 4, 1)[1], 7u);
  EXPECT_EQ(spill_trace_ids(&t, 0, 0)[0], 3u);
  EXPECT_EQ(t.weights, nullptr);
  EXPECT_TRUE(HasCaveat(t, "1 further choice(s) not converted"));
  EXPECT_TRUE(HasCaveat(t, "no gate weights"));
  EXPECT_FALSE(HasCaveat(t, "prompt (prefill) tokens are missing"));
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, VllmRoutedJsonMalformedInputNamesTheLine) {
  const auto V = SPILL_TRACE_SRC_VLLM_ROUTED_JSON;
  ExpectConvError(V, "{\"choices\": [{}]}", "in0:1: choices[0].routed_experts: missing");
  ExpectConvError(V, "{\n\"choices\": [{\"routed_experts\": [[[1, 2]],\n [[1]]]}]}",
                  "in0:2: choices[0].routed_experts[1][0]: expected an array of 2 ids");
  ExpectConvError(V, "{\"choices\": [{\"routed_experts\": [[[1, 1]]]}]}",
                  "layer 0: expert 1 given twice");
  ExpectConvError(V, "{\"choices\": [{\"routed_experts\": [[[1, 2]], [[1, 2], [3, 4]]]}]}",
                  "choices[0].routed_experts[1]: 2 layers, expected 1");
  ExpectConvError(V, "{\"choices\": [{\"routed_experts\": [[[1, -2]]]}]}",
                  "choices[0].routed_experts[0][0][1]: expected integer");
  ExpectConvError(V, "{\n\"choices\": [{\"routed_experts\": [[[1, 2]] x]}]}", "in0:2: invalid JSON");
  ExpectConvError(V, "{\"choices\": [{\"routed_experts\": [[[1, 2]]], \"routed_experts\": [[[3, 4]]]}]}",
                  "in0: choices[0].routed_experts: duplicate key");
  Conv c = Convert(V, {"{\"choices\": [{\"routed_experts\": [[[1, 2]]]}]}"});
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  EXPECT_TRUE(HasCaveat(c.t, "prompt (prefill) tokens are missing"));
  spill_trace_free(&c.t);
}

// llama.cpp's llama-moe-trace CSV as upstream writes it (`layer,expert`,
// one row per routed activation), written by us from the example's
// description (research/trace/testdata/llama_moe_trace.csv): layer 0 dense,
// MoE layers 1-3, top-2, a 3-token prompt ubatch, then two decode steps.
TEST(TraceConvertTest, LlamaMoeCsvRecoversTokensFromTheRowOrder) {
  Conv c = Convert(SPILL_TRACE_SRC_LLAMA_MOE_CSV,
                   {Slurp("research/trace/testdata/llama_moe_trace.csv")});
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 5u);
  ASSERT_EQ(t.n_layers, 3u);
  EXPECT_EQ(t.layer_ids[0], 1u);  // the dense layer 0 is not a traced layer
  EXPECT_EQ(t.layer_ids[2], 3u);
  EXPECT_EQ(t.top_k, 2u);  // the last layer run: one decode token
  EXPECT_EQ(t.n_experts, 8u);
  for (uint32_t k = 0; k < 3; k++) EXPECT_EQ(t.phase[k], SPILL_TRACE_PHASE_PREFILL) << k;
  EXPECT_EQ(t.phase[3], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(t.phase[4], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(t.pos[4], 4);
  EXPECT_EQ(spill_trace_ids(&t, 1, 0)[1], 7u);  // token 1, layer 1
  EXPECT_EQ(spill_trace_ids(&t, 2, 1)[0], 7u);  // token 2, layer 2
  EXPECT_EQ(spill_trace_ids(&t, 4, 2)[1], 4u);  // token 4, layer 3
  EXPECT_EQ(t.meta.rank_order, 0);
  EXPECT_TRUE(HasCaveat(t, "3 ubatch(es) recovered from the row order"));
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);
}

// Forks name their columns (phase,token,layer,rank,expert): prefill rows
// come layer-major, tokens are keyed by the token column.
TEST(TraceConvertTest, LlamaMoeCsvWithTokenColumns) {
  const std::string csv =
      "phase,token,layer,rank,expert\n"
      "prefill,0,2,0,4\nprefill,0,2,1,1\nprefill,1,2,0,3\nprefill,1,2,1,0\n"
      "prefill,0,3,0,7\nprefill,0,3,1,2\nprefill,1,3,0,5\nprefill,1,3,1,6\n"
      "decode,2,2,0,1\ndecode,2,2,1,4\ndecode,2,3,0,6\ndecode,2,3,1,7\n";
  Conv c = Convert(SPILL_TRACE_SRC_LLAMA_MOE_CSV, {csv});
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 3u);
  ASSERT_EQ(t.n_layers, 2u);
  EXPECT_EQ(t.layer_ids[0], 2u);
  EXPECT_EQ(t.top_k, 2u);
  EXPECT_EQ(t.phase[1], SPILL_TRACE_PHASE_PREFILL);
  EXPECT_EQ(t.phase[2], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(spill_trace_ids(&t, 1, 1)[0], 5u);
  EXPECT_EQ(spill_trace_ids(&t, 2, 0)[1], 4u);
  EXPECT_FALSE(HasCaveat(t, "recovered from the row order"));
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);
}

TEST(TraceConvertTest, LlamaMoeCsvMalformedInputNamesTheLine) {
  const auto M = SPILL_TRACE_SRC_LLAMA_MOE_CSV;
  ExpectConvError(M, "layer,expert\n1,5\n1,x\n", "in0:3: expert: expected integer");
  ExpectConvError(M, "layer,expert\n1,5\n1,2,3\n", "in0:3: 3 fields, expected 2");
  ExpectConvError(M, "layer,weight\n1,5\n", "in0:1: header: needs columns layer and expert");
  ExpectConvError(M, "1,5\n1,2\n1,3\n2,4\n2,5\n", "in0:1: layer 1: 3 rows is not a whole",
                  [] { spill_trace_convert_opts o = {}; o.top_k = 2; return o; }());
  // the ubatch's second layer has fewer rows than its first
  ExpectConvError(M, "1,5\n1,2\n1,3\n1,4\n2,4\n2,5\n", "in0:5: layer 2: 2 rows, the ubatch's",
                  [] { spill_trace_convert_opts o = {}; o.top_k = 2; return o; }());
  ExpectConvError(M, "1,5\n1,5\n", "in0:2: layer 1: expert 5 given twice");
  ExpectConvError(M, "phase,token,layer,expert\nwarmup,0,1,5\n",
                  "in0:2: phase: expected prefill or decode");
  ExpectConvError(M, "token,layer,rank,expert\n0,1,1,5\n0,1,0,2\n",
                  "in0:2: token 0 layer 1: rank 1 arrives after 0 ranks");
  ExpectConvError(M, "layer,expert\n", "in0:1: no rows after the header");
}

// flashmoe-bin records (int32 layer, int32 K, float32[hidden], int32[K]
// ids), written by us from the format's description
// (research/trace/testdata/flashmoe_routing.bin: 3 tokens x 3 layers, top-2,
// 4 hidden-state floats per record).
TEST(TraceConvertTest, FlashMoeBinRecords) {
  const std::string bin = Slurp("research/trace/testdata/flashmoe_routing.bin");
  ASSERT_EQ(bin.size(), 288u);
  spill_trace_convert_opts o = {};
  o.hidden = 4;
  Conv c = Convert(SPILL_TRACE_SRC_FLASHMOE_BIN, {bin}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  const spill_trace &t = c.t;
  EXPECT_EQ(t.n_tokens, 3u);
  EXPECT_EQ(t.n_layers, 3u);
  EXPECT_EQ(t.top_k, 2u);
  EXPECT_EQ(t.n_experts, 8u);
  EXPECT_EQ(spill_trace_ids(&t, 0, 2)[0], 5u);
  EXPECT_EQ(spill_trace_ids(&t, 1, 1)[1], 7u);
  EXPECT_EQ(spill_trace_ids(&t, 2, 0)[0], 1u);
  EXPECT_TRUE(HasCaveat(t, "phase and positions not recorded"));
  ExpectRoundTrip(t);
  spill_trace_free(&c.t);
  // read without the hidden states, the first record's floats are taken as ids
  ExpectConvError(SPILL_TRACE_SRC_FLASHMOE_BIN, bin, "give --hidden N");
}

TEST(TraceConvertTest, FlashMoeBinMalformedInputNamesTheRecord) {
  auto rec = [](int32_t layer, int32_t k, std::vector<int32_t> ids) {
    std::string s(reinterpret_cast<const char *>(&layer), 4);
    s.append(reinterpret_cast<const char *>(&k), 4);
    for (int32_t id : ids) s.append(reinterpret_cast<const char *>(&id), 4);
    return s;
  };
  const auto F = SPILL_TRACE_SRC_FLASHMOE_BIN;
  ExpectConvError(F, rec(0, 2, {1, 2}) + rec(1, 3, {1, 2, 3}),
                  "record 2 (byte 16): K differs from the first record's: 3");
  ExpectConvError(F, rec(0, 2, {1, 2}) + rec(1, 2, {1}), "record 2 (byte 16): truncated");
  ExpectConvError(F, rec(0, 2, {1, -4}), "record 1 (byte 0): expert id -4");
  ExpectConvError(F, rec(-1, 2, {1, 2}), "record 1 (byte 0): layer -1");
  ExpectConvError(F, rec(0, 2, {1, 2}) + "abc", "record 2 (byte 16): 3 bytes left");
  ExpectConvError(F, rec(0, 2, {1, 1}), "layer 0: expert 1 given twice");
  ExpectConvError(F, "", "no records");
}

TEST(TraceConvertTest, SourceNamesRoundTrip) {
  for (size_t i = 0; spill_trace_source_name_at(i); i++)
    EXPECT_EQ(spill_trace_source_find(spill_trace_source_name_at(i)), (int)i);
  EXPECT_EQ(spill_trace_source_find("nope"), -1);
  EXPECT_EQ(spill_trace_source_name_at(SPILL_TRACE_SRC_COUNT), nullptr);
}

// The reader side of converted files: the header line and simple-format
// weights/pos/phase.
TEST(TraceConvertTest, ReaderChecksHeaderAndWeights) {
  auto parse = [](const std::string &s, std::string *msg) {
    spill_trace t;
    spill_err e = {};
    spill_trace_read_opts o = {};
    o.name = "h.jsonl";
    int rc = spill_trace_parse(s.data(), s.size(), &o, &t, &e);
    *msg = e.msg;
    spill_trace_free(&t);
    return rc;
  };
  std::string m;
  EXPECT_EQ(parse("{\"header\": {\"experts\": 4}}\n{\"tok\": 0, \"layers\": [[5]]}\n", &m),
            SPILL_E_TRACE);
  EXPECT_NE(m.find("h.jsonl:2: layers[0][0]: expected integer in [0, 3]"), std::string::npos)
      << m;
  EXPECT_EQ(parse("{\"tok\": 0, \"layers\": [[1]]}\n{\"header\": {}}\n", &m), SPILL_E_TRACE);
  EXPECT_NE(m.find("h.jsonl:2: header: must come before"), std::string::npos) << m;
  EXPECT_EQ(parse("{\"tok\": 0, \"layers\": [[1]], \"weights\": [[1]]}\n"
                  "{\"tok\": 1, \"layers\": [[1]]}\n",
                  &m),
            SPILL_E_TRACE);
  EXPECT_NE(m.find("h.jsonl:2: weights: missing"), std::string::npos) << m;
  EXPECT_EQ(parse("{\"tok\": 0, \"layers\": [[1, 2]], \"weights\": [[1]]}\n", &m), SPILL_E_TRACE);
  EXPECT_NE(m.find("h.jsonl:1: weights[0]: expected 2 numbers"), std::string::npos) << m;
  EXPECT_EQ(parse("{\"header\": {\"experts\": 4}}\n{\"tok\": 0, \"layers\": [[1]]}\n"
                  "{\"header\": {\"experts\": 5}}\n",
                  &m),
            SPILL_E_TRACE);
  EXPECT_NE(m.find("h.jsonl:3: header.experts: 5, but the first header says 4"),
            std::string::npos)
      << m;
  EXPECT_EQ(parse("{\"header\": {\"caveats\": [1]}}\n{\"tok\": 0, \"layers\": [[1]]}\n", &m),
            SPILL_E_TRACE);
  EXPECT_NE(m.find("header.caveats[0]: expected a string"), std::string::npos) << m;
  // a concatenation of two converted files reads as one trace of two sequences
  spill_trace t;
  spill_err e = {};
  std::string two =
      "{\"header\": {\"experts\": 4, \"caveats\": [\"c\"]}}\n{\"tok\": 0, \"phase\": \"decode\", "
      "\"pos\": 3, \"layers\": [[1]]}\n{\"header\": {\"experts\": 4}}\n{\"tok\": 0, \"layers\": "
      "[[2]]}\n";
  ASSERT_EQ(spill_trace_parse(two.data(), two.size(), nullptr, &t, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(t.n_tokens, 2u);
  EXPECT_EQ(t.n_experts, 4u);
  EXPECT_EQ(t.meta.n_sequences, 2u);
  EXPECT_EQ(t.meta.n_caveats, 1u);
  EXPECT_EQ(t.pos[0], 3);
  EXPECT_EQ(t.phase[0], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(t.pos[1], -1);
  spill_trace_free(&t);
}

// The full converted traces committed in traces/: shapes, headers, and the
// excerpts' tokens appear in them unchanged.
TEST(TraceConvertTest, FullConvertedTracesMatchTheirExcerpts) {
  struct Want {
    const char *file;
    uint32_t tokens, layers, experts, top_k;
    bool weights;
  } want[] = {
      {"traces/bigmoeonedge/gemma-4-26b-a4b.jsonl", 157, 30, 128, 6, true},
      {"traces/bigmoeonedge/gpt-oss-120b.jsonl", 65, 36, 128, 2, true},
      {"traces/gpt-oss-20b-fingerprinting/gpt-oss-20b-mmlu_dev.jsonl", 511, 24, 32, 4, true},
      {"traces/mixtral-offloading/mixtral-8x7b.jsonl", 773, 32, 8, 2, false},
  };
  std::vector<spill_trace> full(4);
  for (int i = 0; i < 4; i++) {
    spill_err e = {};
    ASSERT_EQ(spill_trace_read_file(want[i].file, nullptr, &full[i], &e), SPILL_OK) << e.msg;
    EXPECT_EQ(full[i].n_tokens, want[i].tokens) << want[i].file;
    EXPECT_EQ(full[i].n_layers, want[i].layers) << want[i].file;
    EXPECT_EQ(full[i].n_experts, want[i].experts) << want[i].file;
    EXPECT_EQ(full[i].top_k, want[i].top_k) << want[i].file;
    EXPECT_EQ(full[i].weights != nullptr, want[i].weights) << want[i].file;
    EXPECT_GE(full[i].meta.n_caveats, 1u) << want[i].file;
    EXPECT_NE(full[i].meta.source, nullptr) << want[i].file;
  }
  spill_trace_convert_opts o = {};
  Conv c = Convert(SPILL_TRACE_SRC_BMOE_CSV,
                   {Slurp("traces/bigmoeonedge/gptoss.route.excerpt.csv")}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  // excerpt tokens = steps 84, 85, 86 = full tokens 0, 1, 2
  size_t n = 3ul * 36 * 2;
  for (size_t i = 0; i < n; i++) ASSERT_EQ(c.t.ids[i], full[1].ids[i]) << i;
  for (size_t i = 0; i < n; i++) ASSERT_EQ(c.t.weights[i], full[1].weights[i]) << i;
  spill_trace_free(&c.t);
  o.n_experts = 32;
  c = Convert(SPILL_TRACE_SRC_HF_ROUTER_JSON,
              {Slurp("traces/gpt-oss-20b-fingerprinting/mmlu_dev.excerpt.json")}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  n = 3ul * 24 * 4;
  for (size_t i = 0; i < n; i++) ASSERT_EQ(c.t.ids[i], full[2].ids[i]) << i;
  spill_trace_free(&c.t);
  o = {};
  o.n_layers = 32;
  c = Convert(SPILL_TRACE_SRC_SORTED_IDS_TXT,
              {Slurp("traces/mixtral-offloading/active_experts.excerpt.txt")}, o);
  ASSERT_EQ(c.rc, SPILL_OK) << c.msg;
  n = 3ul * 32 * 2;
  for (size_t i = 0; i < n; i++) ASSERT_EQ(c.t.ids[i], full[3].ids[i]) << i;
  spill_trace_free(&c.t);
  for (auto &t : full) spill_trace_free(&t);
}

}  // namespace
