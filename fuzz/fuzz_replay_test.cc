// fuzz/fuzz_replay_test.cc: replays every committed fuzz input (the seed
// corpora fuzz/corpus/T and the crash regressions fuzz/regressions/T)
// through the fuzz targets' own entry points, built with the normal
// toolchain. Under --config=asan / ubsan this is the regression test of each
// crash ever found; in the plain build it still fails on the targets'
// property checks (they abort()) and on crashes. It also checks the corpora
// are really there, so a broken data glob cannot pass as "nothing to replay".
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
int spill_fuzz_manifest_one(const uint8_t *data, size_t size);
int spill_fuzz_record_one(const uint8_t *data, size_t size);
int spill_fuzz_record_init(int *argc, char ***argv);
int spill_fuzz_exp_config_one(const uint8_t *data, size_t size);
int spill_fuzz_trace_one(const uint8_t *data, size_t size);
int spill_fuzz_runs_one(const uint8_t *data, size_t size);
int spill_fuzz_safetensors_one(const uint8_t *data, size_t size);
int spill_fuzz_gguf_one(const uint8_t *data, size_t size);
int spill_fuzz_trace_convert_one(const uint8_t *data, size_t size);
int spill_fuzz_server_request_one(const uint8_t *data, size_t size);
int spill_fuzz_tok_one(const uint8_t *data, size_t size);
int spill_fuzz_jinja_one(const uint8_t *data, size_t size);
}

namespace {

std::vector<std::string> Files(const std::string &dir) {
  std::vector<std::string> out;
  DIR *d = opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == ".." || n == ".keep") continue;
    out.push_back(dir + "/" + n);
  }
  closedir(d);
  return out;
}

std::string ReadAll(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Replays fuzz/corpus/T and fuzz/regressions/T; returns the count replayed.
size_t Replay(const std::string &t, int (*one)(const uint8_t *, size_t)) {
  size_t n = 0;
  for (const char *kind : {"corpus", "regressions"}) {
    for (const std::string &f : Files(std::string("fuzz/") + kind + "/" + t)) {
      std::string b = ReadAll(f);
      SCOPED_TRACE(f);
      EXPECT_EQ(one(reinterpret_cast<const uint8_t *>(b.data()), b.size()), 0);
      // Every prefix too (cheap, and truncation is the commonest damage).
      for (size_t cut = 0; cut < b.size(); cut += 1 + b.size() / 64)
        one(reinterpret_cast<const uint8_t *>(b.data()), cut);
      n++;
    }
  }
  return n;
}

TEST(FuzzReplayTest, ManifestInputsParseOrFailCleanly) {
  EXPECT_GE(Replay("manifest", spill_fuzz_manifest_one), 2u);
}

TEST(FuzzReplayTest, RecordInputsAreCheckedWithoutOverreads) {
  ASSERT_EQ(spill_fuzz_record_init(nullptr, nullptr), 0);
  EXPECT_GE(Replay("record", spill_fuzz_record_one), 3u);
}

TEST(FuzzReplayTest, ExperimentConfigInputsParseOrFailCleanly) {
  EXPECT_GE(Replay("exp_config", spill_fuzz_exp_config_one), 3u);
}

TEST(FuzzReplayTest, TraceInputsParseOrFailCleanly) {
  EXPECT_GE(Replay("trace", spill_fuzz_trace_one), 3u);
}

TEST(FuzzReplayTest, RunsRowsParseOrFailCleanly) {
  EXPECT_GE(Replay("runs", spill_fuzz_runs_one), 3u);
}

TEST(FuzzReplayTest, SafetensorsInputsParseOrFailCleanly) {
  EXPECT_GE(Replay("safetensors", spill_fuzz_safetensors_one), 3u);
}

TEST(FuzzReplayTest, GgufInputsParseOrFailCleanly) {
  EXPECT_GE(Replay("gguf", spill_fuzz_gguf_one), 3u);
}

TEST(FuzzReplayTest, TraceConverterInputsConvertOrFailCleanly) {
  EXPECT_GE(Replay("trace_convert", spill_fuzz_trace_convert_one), 4u);
}

TEST(FuzzReplayTest, ServerRequestBodiesParseOrFailCleanly) {
  EXPECT_GE(Replay("server_request", spill_fuzz_server_request_one), 5u);
}

TEST(FuzzReplayTest, TokenizerAndTemplateInputsRoundTripOrFailCleanly) {
  EXPECT_GE(Replay("tok", spill_fuzz_tok_one), 4u);
}

// The real templates render, the issue-26 crashers (deep nesting, runaway
// loops) fail with their budget's status instead of a crash.
TEST(FuzzReplayTest, JinjaTemplatesRenderOrFailWithANamedStatus) {
  EXPECT_GE(Replay("jinja", spill_fuzz_jinja_one), 16u);
}

}  // namespace
