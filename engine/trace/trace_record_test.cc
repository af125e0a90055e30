// Round trips of the engine's per-token outputs (engine/trace/trace_record.c):
// router rows written by spill_trace_writer read back through the trace
// reader (ids, tokens, positions, phases, layers, recorded hits and
// lookahead precision), the size cap, and profile rows through
// spill_profile_parse_row, plus the reader's errors on malformed rows.
#include <gtest/gtest.h>

#include <cmath>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/trace/router_trace.h"

namespace {

std::string TmpPath(const std::string &name) {
  const char *d = getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

std::string Slurp(const std::string &path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Two tokens (a 2-token prefill chunk, then one decode token) over MoE
// layers 1 and 3, top-3, as the engine writes them: layer-major per call.
struct Rows {
  std::vector<spill_trace_row> rows;
  uint32_t ids[3][2][3] = {{{4, 0, 7}, {1, 2, 3}}, {{5, 6, 0}, {7, 1, 4}}, {{2, 3, 4}, {0, 6, 5}}};
  float w[3] = {0.5f, 0.3f, 0.2f};
  uint8_t hit[3][2][3] = {{{0, 0, 0}, {1, 0, 0}}, {{1, 1, 0}, {0, 0, 1}}, {{1, 1, 1}, {1, 0, 1}}};
  uint32_t pred[4] = {2, 3, 9, 0};
  Rows() {
    const int layers[2] = {1, 3};
    for (int t = 0; t < 3; t++)
      for (int l = 0; l < 2; l++) {
        spill_trace_row r = {};
        r.tok = 10 + t;
        r.pos = t;
        r.phase = t < 2 ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE;
        r.layer = layers[l];
        r.k = 3;
        r.ids = ids[t][l];
        r.weights = w;
        r.hit = hit[t][l];
        r.n_pred = t == 2 ? 4 : 0;  // decode only; 2 of 4 among token 2's ids per layer
        r.pred = pred;
        rows.push_back(r);
      }
  }
};

TEST(TraceRecordTest, RouterRowsReadBackThroughTheReader) {
  Rows R;
  const std::string path = TmpPath("router.jsonl");
  spill_trace_writer w;
  spill_err e = {};
  ASSERT_EQ(spill_trace_writer_open(&w, path.c_str(), 0, &e), SPILL_OK) << e.msg;
  for (const auto &r : R.rows) EXPECT_EQ(spill_trace_writer_row(&w, &r), 1);
  spill_trace_writer_close(&w);

  spill_trace t = {};
  ASSERT_EQ(spill_trace_read_file(path.c_str(), nullptr, &t, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(t.format, SPILL_TRACE_ROUTER);
  ASSERT_EQ(t.n_tokens, 3u);
  ASSERT_EQ(t.n_layers, 2u);
  ASSERT_EQ(t.top_k, 3u);
  EXPECT_EQ(t.layer_ids[0], 1u);
  EXPECT_EQ(t.layer_ids[1], 3u);
  for (uint32_t tok = 0; tok < 3; tok++) {
    EXPECT_EQ(t.tok[tok], 10 + (int64_t)tok);
    EXPECT_EQ(t.pos[tok], (int64_t)tok);
    EXPECT_EQ(t.phase[tok], tok < 2 ? SPILL_TRACE_PHASE_PREFILL : SPILL_TRACE_PHASE_DECODE);
    for (uint32_t l = 0; l < 2; l++)
      for (uint32_t j = 0; j < 3; j++)
        EXPECT_EQ(spill_trace_ids(&t, tok, l)[j], R.ids[tok][l][j]) << tok << " " << l;
  }
  uint64_t hits = 0;
  for (auto &h : R.hit)
    for (auto &l : h)
      for (uint8_t x : l) hits += x;
  EXPECT_EQ(t.n_recorded_hits, hits);
  EXPECT_EQ(t.n_pred, 8u);          // 4 predictions on each of 2 decode rows
  EXPECT_EQ(t.n_pred_correct, 3u);  // {2,3} of {2,3,4}; {0} of {0,6,5}
  spill_trace_free(&t);
}

TEST(TraceRecordTest, RowTextIsTheDocumentedSchema) {
  Rows R;
  char line[8192];
  const int n = spill_trace_row_format(&R.rows[4], line, sizeof line);
  EXPECT_EQ(std::string(line, (size_t)n),
            "{\"tok\": 12, \"pos\": 2, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2, 3, 4], "
            "\"weights\": [0.5, 0.3, 0.2], \"pred\": [2, 3, 9, 0], \"hit\": [1, 1, 1]}\n");
  spill_trace_row r = R.rows[4];
  r.rejected = 1; // a rolled-back draft of a verify chunk
  const int m = spill_trace_row_format(&r, line, sizeof line);
  EXPECT_EQ(std::string(line, (size_t)m),
            "{\"tok\": 12, \"pos\": 2, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2, 3, 4], "
            "\"weights\": [0.5, 0.3, 0.2], \"pred\": [2, 3, 9, 0], \"hit\": [1, 1, 1], "
            "\"rejected\": true}\n");
}

// A model whose numbers went non-finite still writes a trace that parses:
// JSON has no NaN, so such a weight is null, and the reader counts the row.
TEST(TraceRecordTest, NonFiniteWeightsAreNullAndTheTraceStillReads) {
  Rows R;
  spill_trace_row r = R.rows[4];
  float w[3] = {NAN, INFINITY, 0.25f};
  r.weights = w;
  char line[8192];
  const int n = spill_trace_row_format(&r, line, sizeof line);
  EXPECT_EQ(std::string(line, (size_t)n),
            "{\"tok\": 12, \"pos\": 2, \"phase\": \"decode\", \"layer\": 1, \"ids\": [2, 3, 4], "
            "\"weights\": [null, null, 0.25], \"pred\": [2, 3, 9, 0], \"hit\": [1, 1, 1]}\n");
  const std::string path = TmpPath("nan.jsonl");
  spill_trace_writer wr;
  spill_err e = {};
  ASSERT_EQ(spill_trace_writer_open(&wr, path.c_str(), 0, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(spill_trace_writer_row(&wr, &R.rows[5]), 1);  // token 12, layer 3
  EXPECT_EQ(spill_trace_writer_row(&wr, &r), 1);
  spill_trace_writer_close(&wr);
  spill_trace t = {};
  ASSERT_EQ(spill_trace_read_file(path.c_str(), nullptr, &t, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(t.n_nonfinite_weight_rows, 1u);
  spill_trace_free(&t);
}

TEST(TraceRecordTest, CapStopsAtARowBoundary) {
  Rows R;
  char line[8192];
  const uint64_t one = (uint64_t)spill_trace_row_format(&R.rows[0], line, sizeof line);
  const std::string path = TmpPath("capped.jsonl");
  spill_trace_writer w;
  spill_err e = {};
  ASSERT_EQ(spill_trace_writer_open(&w, path.c_str(), one + 10, &e), SPILL_OK);
  EXPECT_EQ(spill_trace_writer_row(&w, &R.rows[0]), 1);
  EXPECT_EQ(spill_trace_writer_row(&w, &R.rows[1]), 0);
  EXPECT_TRUE(w.capped);
  EXPECT_EQ(spill_trace_writer_row(&w, &R.rows[0]), 0);  // nothing after the cap
  EXPECT_EQ(w.bytes, one);
  spill_trace_writer_close(&w);
  EXPECT_EQ(Slurp(path), std::string(line, (size_t)one));
  spill_trace_writer_close(nullptr);  // accepts NULL
}

TEST(TraceRecordTest, WriterOpenFailureNamesThePath) {
  spill_trace_writer w;
  spill_err e = {};
  EXPECT_EQ(spill_trace_writer_open(&w, "/nonexistent-dir/t.jsonl", 0, &e), SPILL_E_IO);
  EXPECT_NE(std::string(e.msg).find("trace /nonexistent-dir/t.jsonl"), std::string::npos) << e.msg;
}

spill_profile_row SampleProfile() {
  spill_profile_row p = {};
  p.pos = 7;
  p.phase = SPILL_TRACE_PHASE_PREFILL;
  p.n_tokens = 4;
  p.wall_ms = 12.345;
  p.attention_ms = 1.5;
  p.router_ms = 0.25;
  p.expert_matmul_ms = 8.125;
  p.table_build_ms = 0.5;
  p.lm_head_ms = 1.75;
  p.other_ms = 0.125;
  p.io_wait_ms = 3.0;
  p.reads = 11;
  p.bytes_read = 11ull * 393216;
  p.demand_hits = 5;
  p.demand_misses = 9;
  p.spec_issued = 2;
  p.spec_used = 1;
  p.spec_wasted = 1;
  p.read_p50_ms = 0.125;
  p.read_p99_ms = 0.75;
  p.major_faults = 3;
  p.rss_bytes = 123456789012ull;
  p.drafted = 3;
  p.accepted = 2;
  p.generated = 3;
  p.expert_wait_threads_ms = 2.625;
  p.ctx_switches_voluntary = 41;
  p.ctx_switches_involuntary = 5;
  p.parallel_regions = 130;
  p.parallel_regions_moe = 15;
  snprintf(p.io_backend, sizeof p.io_backend, "uring");
  snprintf(p.io_backend_why, sizeof p.io_backend_why, "auto: io_uring refused: \"x\"");
  return p;
}

TEST(TraceRecordTest, ProfileRowRoundTrip) {
  const spill_profile_row p = SampleProfile();
  const std::string path = TmpPath("profile.jsonl");
  FILE *f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(spill_profile_write_row(f, &p), 1);
  fclose(f);
  const std::string text = Slurp(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  spill_profile_row q;
  spill_err e = {};
  ASSERT_EQ(spill_profile_parse_row(text.data(), text.size(), "p.jsonl", &q, &e), SPILL_OK)
      << e.msg;
  EXPECT_EQ(q.pos, p.pos);
  EXPECT_EQ(q.phase, p.phase);
  EXPECT_EQ(q.n_tokens, p.n_tokens);
  // every time is a multiple of 1/8 ms: exact at %.3f
  EXPECT_EQ(q.wall_ms, 12.345);
  EXPECT_EQ(q.attention_ms, p.attention_ms);
  EXPECT_EQ(q.router_ms, p.router_ms);
  EXPECT_EQ(q.expert_matmul_ms, p.expert_matmul_ms);
  EXPECT_EQ(q.table_build_ms, p.table_build_ms);
  EXPECT_EQ(q.lm_head_ms, p.lm_head_ms);
  EXPECT_EQ(q.other_ms, p.other_ms);
  EXPECT_EQ(q.io_wait_ms, p.io_wait_ms);
  EXPECT_EQ(q.reads, p.reads);
  EXPECT_EQ(q.bytes_read, p.bytes_read);
  EXPECT_EQ(q.demand_hits, p.demand_hits);
  EXPECT_EQ(q.demand_misses, p.demand_misses);
  EXPECT_EQ(q.spec_issued, p.spec_issued);
  EXPECT_EQ(q.spec_used, p.spec_used);
  EXPECT_EQ(q.spec_wasted, p.spec_wasted);
  EXPECT_EQ(q.read_p50_ms, p.read_p50_ms);
  EXPECT_EQ(q.read_p99_ms, p.read_p99_ms);
  EXPECT_EQ(q.major_faults, p.major_faults);
  EXPECT_EQ(q.rss_bytes, p.rss_bytes);
  EXPECT_EQ(q.drafted, 3u);
  EXPECT_EQ(q.accepted, 2u);
  EXPECT_EQ(q.generated, 3u);
  EXPECT_EQ(q.expert_wait_threads_ms, 2.625);
  EXPECT_EQ(q.ctx_switches_voluntary, 41u);
  EXPECT_EQ(q.ctx_switches_involuntary, 5u);
  EXPECT_EQ(q.parallel_regions, 130u);
  EXPECT_EQ(q.parallel_regions_moe, 15u);
  EXPECT_STREQ(q.io_backend, "uring");
  EXPECT_STREQ(q.io_backend_why, p.io_backend_why);  // quotes escaped and read back
  EXPECT_EQ(spill_profile_write_row(nullptr, &p), 0);
}

std::string ParseError(const std::string &text) {
  spill_profile_row q;
  spill_err e = {};
  if (spill_profile_parse_row(text.data(), text.size(), "p.jsonl", &q, &e) == SPILL_OK) return "";
  return e.msg;
}

TEST(TraceRecordTest, ProfileReaderNamesTheBadKey) {
  EXPECT_EQ(ParseError("[1]"), "p.jsonl: expected a JSON object");
  EXPECT_EQ(ParseError("{\"pos\": 1"), "p.jsonl: not valid JSON (near byte 8)");
  // a valid row with one field broken at a time
  const spill_profile_row p = SampleProfile();
  char *buf = nullptr;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  ASSERT_NE(f, nullptr);
  spill_profile_write_row(f, &p);
  fclose(f);
  const std::string good(buf, n);
  free(buf);
  EXPECT_EQ(ParseError(good), "");
  auto edit = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_EQ(ParseError(edit("\"prefill\"", "\"warmup\"")),
            "p.jsonl: phase: expected \"decode\" or \"prefill\"");
  EXPECT_EQ(ParseError(edit("\"reads\": 11", "\"reads\": -1")),
            "p.jsonl: reads: expected a number >= 0");
  EXPECT_EQ(ParseError(edit("\"reads\": 11", "\"reads\": 1.5")),
            "p.jsonl: reads: expected an integer");
  EXPECT_EQ(ParseError(edit("\"lm_head\": 1.750", "\"lm_head\": \"x\"")),
            "p.jsonl: lm_head: expected a number >= 0");
  EXPECT_EQ(ParseError(edit("\"pos\": 7", "\"pos\": 99999999999")),
            "p.jsonl: pos or n_tokens beyond 2^31");
  EXPECT_EQ(ParseError(edit("\"rss_bytes\": 123456789012", "\"rss\": 1")),
            "p.jsonl: rss_bytes: expected a number >= 0");
  // draft counters: integers, accepted <= drafted, generated <= n_tokens
  EXPECT_EQ(ParseError(edit("\"drafted\": 3", "\"drafted\": -3")),
            "p.jsonl: drafted: expected a number >= 0");
  EXPECT_EQ(ParseError(edit("\"accepted\": 2", "\"accepted\": 4")),
            "p.jsonl: accepted above drafted or generated above n_tokens");
  EXPECT_EQ(ParseError(edit("\"generated\": 3", "\"generated\": 5")),
            "p.jsonl: accepted above drafted or generated above n_tokens");
  // the read backend: pread or uring, with a reason
  EXPECT_EQ(ParseError(edit("\"io_backend\": \"uring\"", "\"io_backend\": \"aio\"")),
            "p.jsonl: io_backend: expected \"pread\" or \"uring\"");
  EXPECT_EQ(ParseError(edit("\"io_backend_why\": \"auto", "\"io_backend_whY\": \"auto")),
            "p.jsonl: io_backend_why: expected a string under 256 bytes");
  EXPECT_EQ(ParseError(edit("\"ctx_switches_voluntary\": 41", "\"ctx_switches_voluntary\": 0.5")),
            "p.jsonl: ctx_switches_voluntary: expected an integer");
  // a row written before drafts (no such keys): 0, 0 and, for decode, n_tokens;
  // before context switches and the backend: 0, 0, ""
  std::string old = edit(", \"drafted\": 3, \"accepted\": 2, \"generated\": 3", "");
  old = old.substr(0, old.find(", \"ctx_switches_voluntary\"")) + "}";
  old.replace(old.find("\"prefill\""), 9, "\"decode\"");
  spill_profile_row q;
  spill_err e = {};
  ASSERT_EQ(spill_profile_parse_row(old.data(), old.size(), "p.jsonl", &q, &e), SPILL_OK) << e.msg;
  EXPECT_EQ(q.drafted, 0u);
  EXPECT_EQ(q.accepted, 0u);
  EXPECT_EQ(q.generated, 4u);
  EXPECT_EQ(q.ctx_switches_voluntary, 0u);
  EXPECT_EQ(q.parallel_regions, 0u);
  EXPECT_EQ(q.parallel_regions_moe, 0u);
  EXPECT_STREQ(q.io_backend, "");
  EXPECT_STREQ(q.io_backend_why, "");
  // expert_wait_threads_ms is optional too (rows before it)
  std::string older = edit("\"expert_wait_threads_ms\": 2.625, ", "");
  ASSERT_EQ(spill_profile_parse_row(older.data(), older.size(), "p.jsonl", &q, &e), SPILL_OK)
      << e.msg;
  EXPECT_EQ(q.expert_wait_threads_ms, 0.0);
  EXPECT_EQ(ParseError(edit("\"expert_wait_threads_ms\": 2.625", "\"expert_wait_threads_ms\": -1")),
            "p.jsonl: expert_wait_threads_ms: expected a number >= 0");
  // fork-join counters: integers, the MoE layers' share at most the whole
  EXPECT_EQ(ParseError(edit("\"parallel_regions\": 130", "\"parallel_regions\": 1.5")),
            "p.jsonl: parallel_regions: expected an integer");
  EXPECT_EQ(ParseError(edit("\"parallel_regions_moe\": 15", "\"parallel_regions_moe\": 131")),
            "p.jsonl: parallel_regions_moe above parallel_regions");
}

}  // namespace
