// Tests of the trace reader: both formats, grouping of router lines by
// token, and one test per class of malformed input, each checking the line
// number and JSON path in the message.
#include <gtest/gtest.h>

#include <string>

#include "engine/trace/router_trace.h"

namespace {

struct Parsed {
  int rc;
  std::string msg;
  spill_trace t;
};

Parsed Parse(const std::string &text, uint32_t n_experts = 0) {
  Parsed p;
  spill_err e = {};
  spill_trace_read_opts o = {};
  o.n_experts = n_experts;
  o.name = "t.jsonl";
  p.rc = spill_trace_parse(text.data(), text.size(), &o, &p.t, &e);
  p.msg = e.msg;
  return p;
}

void ExpectError(const std::string &text, const std::string &want, uint32_t n_experts = 0) {
  Parsed p = Parse(text, n_experts);
  EXPECT_EQ(p.rc, SPILL_E_TRACE) << text;
  EXPECT_NE(p.msg.find(want), std::string::npos) << "got: " << p.msg << "\nwant: " << want;
  EXPECT_EQ(p.t.ids, nullptr);  // nothing leaks out of a failed parse
  spill_trace_free(&p.t);
}

TEST(TraceReadTest, ParsesSimpleFormat) {
  Parsed p = Parse(
      "{\"tok\": 1, \"layers\": [[3, 1], [0, 2]]}\n"
      "\n"
      "{\"tok\": 2, \"layers\": [[1, 4], [2, 0]]}\n");
  ASSERT_EQ(p.rc, SPILL_OK) << p.msg;
  EXPECT_EQ(p.t.format, SPILL_TRACE_SIMPLE);
  EXPECT_EQ(p.t.n_tokens, 2u);
  EXPECT_EQ(p.t.n_layers, 2u);
  EXPECT_EQ(p.t.top_k, 2u);
  EXPECT_EQ(p.t.n_experts, 5u);  // max id 4 + 1
  EXPECT_EQ(p.t.tok[1], 2);
  EXPECT_EQ(p.t.layer_ids[1], 1u);
  const uint32_t *ids = spill_trace_ids(&p.t, 1, 0);
  EXPECT_EQ(ids[0], 1u);  // selection order kept
  EXPECT_EQ(ids[1], 4u);
  EXPECT_EQ(spill_trace_ids(&p.t, 0, 0)[0], 3u);
  spill_trace_free(&p.t);
  spill_trace_free(&p.t);  // idempotent on a zeroed trace
}

TEST(TraceReadTest, GivenExpertCountOverridesInference) {
  Parsed p = Parse("{\"tok\": 0, \"layers\": [[1, 2]]}\n", 64);
  ASSERT_EQ(p.rc, SPILL_OK) << p.msg;
  EXPECT_EQ(p.t.n_experts, 64u);
  spill_trace_free(&p.t);
}

TEST(TraceReadTest, GroupsRouterLinesByTokenAndSortsLayers) {
  // Layer-major order, as chunked prefill writes it, then a decode token.
  Parsed p = Parse(
      "{\"tok\": 0, \"pos\": 0, \"phase\": \"prefill\", \"layer\": 3, \"ids\": [5, 1], "
      "\"weights\": [0.6, 0.4], \"pred\": [], \"hit\": [0, 0]}\n"
      "{\"tok\": 1, \"pos\": 1, \"phase\": \"prefill\", \"layer\": 3, \"ids\": [2, 1], "
      "\"weights\": [0.5, 0.5], \"pred\": [], \"hit\": [0, 1]}\n"
      "{\"tok\": 0, \"pos\": 0, \"phase\": \"prefill\", \"layer\": 1, \"ids\": [0, 7], "
      "\"weights\": [0.9, 0.1], \"pred\": [], \"hit\": [0, 0]}\n"
      "{\"tok\": 1, \"pos\": 1, \"phase\": \"prefill\", \"layer\": 1, \"ids\": [7, 0], "
      "\"weights\": [0.5, 0.5], \"pred\": [], \"hit\": [1, 1]}\n"
      "{\"tok\": 2, \"pos\": 2, \"phase\": \"decode\", \"layer\": 1, \"ids\": [3, 4], "
      "\"weights\": [0.5, 0.5], \"pred\": [3, 6], \"hit\": [0, 1]}\n"
      "{\"tok\": 2, \"pos\": 2, \"phase\": \"decode\", \"layer\": 3, \"ids\": [6, 5], "
      "\"weights\": [0.5, 0.5], \"pred\": [5], \"hit\": [1, 1]}\n");
  ASSERT_EQ(p.rc, SPILL_OK) << p.msg;
  EXPECT_EQ(p.t.format, SPILL_TRACE_ROUTER);
  EXPECT_EQ(p.t.n_tokens, 3u);
  EXPECT_EQ(p.t.n_layers, 2u);
  EXPECT_EQ(p.t.layer_ids[0], 1u);
  EXPECT_EQ(p.t.layer_ids[1], 3u);
  EXPECT_EQ(p.t.n_experts, 8u);
  EXPECT_EQ(spill_trace_ids(&p.t, 0, 0)[1], 7u);  // tok 0, layer 1
  EXPECT_EQ(spill_trace_ids(&p.t, 1, 1)[0], 2u);  // tok 1, layer 3
  EXPECT_EQ(spill_trace_ids(&p.t, 2, 1)[0], 6u);
  EXPECT_EQ(p.t.phase[0], SPILL_TRACE_PHASE_PREFILL);
  EXPECT_EQ(p.t.phase[2], SPILL_TRACE_PHASE_DECODE);
  EXPECT_EQ(p.t.pos[2], 2);
  EXPECT_EQ(p.t.n_recorded_hits, 6u);
  EXPECT_EQ(p.t.n_pred, 3u);
  EXPECT_EQ(p.t.n_pred_correct, 2u);  // 3 and 5 were routed, 6 was not (at layer 1)
  spill_trace_free(&p.t);
}

// A verify chunk's rolled-back drafts ("rejected": true, written by the
// engine with drafts on) are validated and counted, but are not tokens of
// the sequence: the tokens, ids, hits and predictions are those of the
// other rows; a rejected row at the position the next token takes is fine.
TEST(TraceReadTest, RejectedDraftRowsAreCountedNotSequenceTokens) {
  Parsed p = Parse(
      "{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 1, \"ids\": [0, 7], "
      "\"pred\": [], \"hit\": [0, 0]}\n"
      "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 1, \"ids\": [3, 9], "
      "\"pred\": [3], \"hit\": [1, 1], \"rejected\": true}\n"
      "{\"tok\": 2, \"pos\": 1, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2, 4], "
      "\"pred\": [], \"hit\": [0, 1], \"rejected\": false}\n");
  ASSERT_EQ(p.rc, SPILL_OK) << p.msg;
  EXPECT_EQ(p.t.n_tokens, 2u);
  EXPECT_EQ(p.t.tok[1], 2);
  EXPECT_EQ(p.t.pos[1], 1);
  EXPECT_EQ(spill_trace_ids(&p.t, 1, 0)[0], 2u);
  EXPECT_EQ(p.t.n_rejected_rows, 1u);
  EXPECT_EQ(p.t.n_recorded_hits, 1u);
  EXPECT_EQ(p.t.n_pred, 0u);
  EXPECT_EQ(p.t.n_experts, 10u); // the rejected row's ids are still validated and seen
  spill_trace_free(&p.t);
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1], "
              "\"rejected\": 1}\n",
              "t.jsonl:1: rejected: expected true or false");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1, 1], "
              "\"rejected\": true}\n",
              "t.jsonl:1: ids[1]: duplicate expert id 1");
}

TEST(TraceReadTest, RejectsBadJsonWithLineNumber) {
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2]]}\n{\"tok\": 1, \"layers\": [[1, 2]]\n",
              "t.jsonl:2: not valid JSON");
  // the one reading layer: a repeated key is refused by name, not resolved
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2]], \"tok\": 5}\n", "t.jsonl:1: tok: duplicate key");
  ExpectError("[1, 2]\n", "t.jsonl:1: expected a JSON object");
}

TEST(TraceReadTest, RejectsWrongTypes) {
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2]]}\n\n{\"tok\": 1, \"layers\": [[1, \"x\"]]}\n",
              "t.jsonl:3: layers[0][1]: expected integer in [0, 63]", 64);
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2.5]]}\n", "t.jsonl:1: layers[0][1]: expected integer");
  ExpectError("{\"tok\": \"a\", \"layers\": [[1, 2]]}\n", "t.jsonl:1: tok: expected integer");
  ExpectError("{\"tok\": 0, \"layers\": [3]}\n", "t.jsonl:1: layers[0]: expected an array");
  ExpectError("{\"tok\": 0, \"layers\": 3}\n", "t.jsonl:1: layers: expected an array");
  ExpectError("{\"tok\": 0}\n", "t.jsonl:1: expected key \"layers\"");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"train\", \"layer\": 0, \"ids\": [1]}\n",
              "t.jsonl:1: phase: expected \"decode\" or \"prefill\"");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1], "
              "\"hit\": [2]}\n",
              "t.jsonl:1: hit[0]: expected 0 or 1");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1, 2], "
              "\"weights\": [1.0]}\n",
              "t.jsonl:1: weights: expected 2 numbers");
  ExpectError("{\"tok\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1]}\n",
              "t.jsonl:1: pos: missing key");
}

TEST(TraceReadTest, RejectsIdsOutOfRange) {
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2], [64, 0]]}\n",
              "t.jsonl:1: layers[1][0]: expected integer in [0, 63]", 64);
  ExpectError("{\"tok\": 0, \"layers\": [[-1, 2]]}\n", "t.jsonl:1: layers[0][0]: expected integer");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1], "
              "\"pred\": [9]}\n",
              "t.jsonl:1: pred[0]: expected integer in [0, 7]", 8);
}

TEST(TraceReadTest, RejectsDuplicateIds) {
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2], [3, 4]]}\n{\"tok\": 1, \"layers\": [[1, 2], [4, 4]]}\n",
              "t.jsonl:2: layers[1][1]: duplicate expert id 4 (also at index 0)");
  ExpectError("{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [5, 5]}\n",
              "t.jsonl:1: ids[1]: duplicate expert id 5");
}

TEST(TraceReadTest, RejectsInconsistentLayerAndIdCounts) {
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2], [3, 4]]}\n{\"tok\": 1, \"layers\": [[1, 2]]}\n",
              "t.jsonl:2: layers: expected 2 layers (as line 1), got 1");
  ExpectError("{\"tok\": 0, \"layers\": [[1, 2], [3, 4]]}\n{\"tok\": 1, \"layers\": [[1, 2], [3]]}\n",
              "t.jsonl:2: layers[1]: expected 2 ids (as line 1), got 1");
  ExpectError("{\"tok\": 0, \"layers\": [[]]}\n", "t.jsonl:1: layers[0]: expected a non-empty");
  const std::string a =
      "{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1]}\n"
      "{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 1, \"ids\": [1]}\n";
  // Token 1 lacks layer 1.
  ExpectError(a + "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 0, \"ids\": [2]}\n",
              "t.jsonl:3: layer: tok 1 has no layer 1");
  // Token 1 has a layer token 0 lacks.
  ExpectError(a +
                  "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 0, \"ids\": [2]}\n"
                  "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2]}\n"
                  "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 2, \"ids\": [2]}\n",
              "t.jsonl:5: layer: 2 is not a layer of tok 0");
  // The same (tok, layer) twice.
  ExpectError(a + "{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 1, \"ids\": [3]}\n",
              "t.jsonl:3: layer: tok 0 layer 1 already given at line 2");
  // pos must agree across a token's lines.
  ExpectError(a + "{\"tok\": 1, \"pos\": 1, \"phase\": \"decode\", \"layer\": 0, \"ids\": [2]}\n"
                  "{\"tok\": 1, \"pos\": 2, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2]}\n",
              "t.jsonl:4: pos: 2, but tok 1 has pos 1 at line 3");
}

TEST(TraceReadTest, RejectsMixedFormatsAndEmptyTraces) {
  ExpectError("{\"tok\": 0, \"layers\": [[1]]}\n"
              "{\"tok\": 0, \"pos\": 0, \"phase\": \"decode\", \"layer\": 0, \"ids\": [1]}\n",
              "t.jsonl:2: router-format line in a simple-format trace");
  ExpectError("\n  \n", "t.jsonl: no trace lines");
}

TEST(TraceReadTest, ReadFileNamesTheFile) {
  spill_trace t;
  spill_err e = {};
  EXPECT_EQ(spill_trace_read_file("/nonexistent/x.jsonl", nullptr, &t, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("/nonexistent/x.jsonl"), std::string::npos) << e.msg;
}

}  // namespace
