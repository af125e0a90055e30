// bench/model_bench.cc: end-to-end decode through libspill (engine/spill.h)
// and the attention blocks through engine/model (model.h).
//
// BM_Decode_Mini{Cold,Default,Warm}: greedy decode on cache/mini (the demo
// model, `./lab demo` makes it; $SPILL_BENCH_MINI overrides the path), one
// iteration = spill_generate of 8 tokens after the 4-token prompt "The ",
// timed manually as the decode part only (prefill excluded); items = decode
// tokens, so items/s is tok/s.
//   Cold:    cache_slots 0 (every expert read from storage, O_DIRECT).
//   Default: the default budget, expert cache cleared before each iteration.
//   Warm:    a 1.5 GiB budget (the whole container fits), one untimed run
//            first: every expert the run needs is resident.
// BM_Decode_Twin{Cold,Warm}: the same on cache/twin-8g (38 GB), only with
// SPILL_BENCH_TWIN=1 (a cold twin token reads ~2.3 GB); 2 tokens.
// BM_Attn_{Mla,Kda}_Ctx4K: attention at position 4096..4351 on a nano model
// (generated into $TMPDIR) with only MLA (resp. KDA) layers: the per-layer
// attention time of one decode token (spill_model_stats.ns_attn / layers,
// manual time). The attention functions are internal to engine/model, so
// this is the closest public unit: one decode step's attention, at nano
// width (4 heads x 16; MLA latent 16 + rope 8 per position).
#include <benchmark/benchmark.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/spill.h"
#include "research/gen/spill_gen.h"

namespace {

std::string EnvOr(const char *k, const char *d) {
  const char *v = std::getenv(k);
  return v && *v ? v : d;
}

bool HasModel(const std::string &dir) {
  struct stat st;
  return stat((dir + "/manifest.json").c_str(), &st) == 0;
}

// mode: 0 cold (no cache), 1 default budget (cleared per iteration), 2 warm
void RunDecode(benchmark::State &state, const std::string &dir, int mode, int n_new) {
  if (!HasModel(dir)) {
    state.SkipWithError(("no model at " + dir).c_str());
    return;
  }
  spill_config cfg;
  spill_config_default(&cfg);
  spill_err e{};
  if (mode == 0) spill_config_set(&cfg, "cache_slots", "0", &e);
  if (mode == 2) spill_config_set(&cfg, "budget", dir.find("twin") != std::string::npos ? "20G" : "1536M", &e);
  spill_engine *eng = nullptr;
  if (spill_engine_open(dir.c_str(), &cfg, &eng, &e) < 0) {
    state.SkipWithError(e.msg);
    return;
  }
  int toks[16], n = 0;
  spill_tokenize(eng, "The ", 1, toks, 16, &n, &e);
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  spill_run_stats st;
  if (mode == 2 && spill_generate(eng, toks, n, n_new, &s, nullptr, nullptr, nullptr, &st, &e) < 0) {
    state.SkipWithError(e.msg);
    spill_engine_close(eng);
    return;
  }
  uint64_t tokens = 0, misses = 0, bytes = 0;
  for (auto _ : state) {
    if (mode != 2) spill_engine_clear_cache(eng, 1, &e);
    if (spill_generate(eng, toks, n, n_new, &s, nullptr, nullptr, nullptr, &st, &e) < 0) {
      state.SkipWithError(e.msg);
      break;
    }
    state.SetIterationTime(st.decode_s);
    tokens += (uint64_t)st.tokens_decode;
    misses += st.decode_misses;
    bytes += st.bytes_read;
  }
  state.SetItemsProcessed((int64_t)tokens);
  if (tokens) state.counters["misses_per_tok"] = (double)misses / (double)tokens;
  const int64_t cs = spill_engine_config(eng)->cache_slots; /* -1: from the budget */
  state.counters["slots"] = cs >= 0 ? (double)cs : (double)spill_engine_plan(eng)->cache_slots;
  spill_engine_close(eng);
}

void BM_Decode_MiniCold(benchmark::State &s) { RunDecode(s, EnvOr("SPILL_BENCH_MINI", "cache/mini"), 0, 8); }
void BM_Decode_MiniDefault(benchmark::State &s) {
  RunDecode(s, EnvOr("SPILL_BENCH_MINI", "cache/mini"), 1, 8);
}
void BM_Decode_MiniWarm(benchmark::State &s) { RunDecode(s, EnvOr("SPILL_BENCH_MINI", "cache/mini"), 2, 8); }
void BM_Decode_TwinCold(benchmark::State &s) {
  if (EnvOr("SPILL_BENCH_TWIN", "0") != "1") {
    s.SkipWithError("set SPILL_BENCH_TWIN=1 (reads ~2.3 GB per token)");
    return;
  }
  RunDecode(s, EnvOr("SPILL_BENCH_TWIN_DIR", "cache/twin-8g"), 0, 2);
}

// ---- attention on nano models ----

std::string NanoModel(const char *mix) {
  const std::string dir = EnvOr("TMPDIR", "/tmp") + "/spill-bench-nano-" + mix;
  if (HasModel(dir)) return dir;
  spill_gen_request r{};
  r.preset = "nano";
  r.seed = 1;
  r.attn_mix = mix;
  spill_err e{};
  if (spill_gen(dir.c_str(), &r, nullptr, nullptr, &e) < 0) return "";
  return dir;
}

void RunAttn(benchmark::State &state, const char *mix) {
  const std::string dir = NanoModel(mix);
  if (dir.empty()) {
    state.SkipWithError("cannot generate the nano model");
    return;
  }
  const int ctx0 = 4096, extra = 256;
  spill_model_opts o{};
  o.n_threads = 1;
  o.ctx = ctx0 + extra + 1;
  o.max_chunk = 64;
  spill_model *m = nullptr;
  spill_err e{};
  if (spill_model_open(dir.c_str(), &o, &m, &e) < 0) {
    state.SkipWithError(e.msg);
    return;
  }
  std::vector<int> toks(ctx0);
  for (int i = 0; i < ctx0; i++) toks[i] = 32 + (i * 7) % 90;
  if (spill_model_forward(m, toks.data(), ctx0, 0, nullptr, &e) < 0) {
    state.SkipWithError(e.msg);
    spill_model_close(m);
    return;
  }
  const int layers = spill_model_arch(m)->n_layers;
  int pos = ctx0, tok = 65;
  for (auto _ : state) {
    if (pos >= ctx0 + extra) {  // stay near 4K: go back to 4096 (same state)
      state.PauseTiming();
      spill_model_forward(m, toks.data(), ctx0, 0, nullptr, &e);
      pos = ctx0;
      state.ResumeTiming();
    }
    spill_model_forward(m, &tok, 1, pos++, nullptr, &e);
    state.SetIterationTime((double)spill_model_last_stats(m)->ns_attn / 1e9 / layers);
  }
  state.SetItemsProcessed((int64_t)state.iterations());
  spill_model_close(m);
}

void BM_Attn_Mla_Ctx4K(benchmark::State &s) { RunAttn(s, "mla"); }
void BM_Attn_Kda_Ctx4K(benchmark::State &s) { RunAttn(s, "kda"); }

BENCHMARK(BM_Decode_MiniCold)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode_MiniDefault)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode_MiniWarm)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode_TwinCold)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Attn_Mla_Ctx4K)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attn_Kda_Ctx4K)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
