// bench/rvq_bench.cc: the rvq3 import encoder (engine/import/import_rvq.c,
// `spill import --experts rvq3`) per expert matrix of Qwen3-30B-A3B's shape
// (768 x 2048, gate/up; down is 2048 x 768, the same work), by ISA
// (arg 0: 0 = scalar reference, 1 = AVX2 twin) and threads (arg 1).
// BM_Rvq_Encode: one matrix encoded with a trained codebook (the per-expert
// cost: 3 stages x 256 entries searched for every 8-dim vector);
// BM_Rvq_Train: one (layer, matrix) codebook from a full 16384-vector sample
// (once per layer and matrix, over all experts). Bytes = the matrix as bf16
// source bytes, so MB/s is import throughput of the expert part.
//   bazel run -c opt //bench:rvq_bench -- --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "engine/import/import_rvq.h"
#include "engine/quant/kernels.h"

namespace {

constexpr uint64_t kRows = 768, kCols = 2048;

struct Fixture {
  std::vector<float> m, cb;
  imp_rvq_sample *sample;
  Fixture() : m(kRows * kCols), cb(SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES * SPILL_RVQ_DIM) {
    std::mt19937 g(1);
    std::normal_distribution<float> n(0, 0.02f);
    for (auto &v : m) v = n(g);
    sample = new imp_rvq_sample;
    imp_rvq_sample_init(sample, 7);
    for (uint64_t r = 0; r < kRows; r++) imp_rvq_sample_row(sample, &m[r * kCols], kCols);
    imp_rvq_sample *s = new imp_rvq_sample;
    std::memcpy(s, sample, sizeof *s);
    spill_err e = {};
    imp_rvq_train(s, cb.data(), 0, &e);
    delete s;
  }
};

const Fixture &fx() {
  static Fixture f;
  return f;
}

bool set_isa(benchmark::State &state) {
  const spill_isa isa = state.range(0) ? SPILL_ISA_AVX2 : SPILL_ISA_REF;
  if (!spill_k_set_isa(isa)) {
    state.SkipWithError("ISA not supported");
    return false;
  }
  state.SetLabel(spill_k_isa_name(isa));
  return true;
}

void BM_Rvq_Encode(benchmark::State &state) {
  const Fixture &f = fx();
  if (!set_isa(state)) return;
  std::vector<uint8_t> idx(kRows * kCols / SPILL_RVQ_DIM * SPILL_RVQ_STAGES), sc(kRows * 2);
  for (auto _ : state) {
    double num = 0, den = 0;
    spill_err e = {};
    imp_rvq_encode_rows(f.cb.data(), f.m.data(), kRows, kCols, idx.data(), sc.data(), &num, &den,
                        (int)state.range(1), &e);
    benchmark::DoNotOptimize(num);
  }
  state.SetBytesProcessed((int64_t)(state.iterations() * kRows * kCols * 2));
}
BENCHMARK(BM_Rvq_Encode)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Rvq_Train(benchmark::State &state) {
  const Fixture &f = fx();
  if (!set_isa(state)) return;
  std::vector<float> cb(f.cb.size());
  imp_rvq_sample *s = new imp_rvq_sample;
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(s, f.sample, sizeof *s);
    state.ResumeTiming();
    spill_err e = {};
    imp_rvq_train(s, cb.data(), (int)state.range(1), &e);
    benchmark::DoNotOptimize(cb.data());
  }
  delete s;
}
BENCHMARK(BM_Rvq_Train)
    ->ArgsProduct({{0, 1}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
