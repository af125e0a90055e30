// bench/kernels_bench.cc: throughput of the quant kernels per ISA, 1 and 2
// threads.
//
// Arg(0|1|2) selects the twin (ref, avx2, avx512); an ISA the CPU lacks is
// reported as an error row, not silently skipped. Threads(2) splits the rows
// (groups for the LUT build) in two halves, one per thread, as the forward
// pass does; UseRealTime makes the rates aggregate over both threads, so the
// 1- vs 2-thread ratio is the scaling. SetItemsProcessed counts weights (LUT
// entries for the LUT build), SetBytesProcessed the weight bytes read (LUT
// bytes written for the LUT build). Shapes: K3 routed experts (gate/up
// 3072 x 3584, down 3584 x 3072), the twin-scale expert (1024 x 1280) and a
// trunk-sized matrix (4096 x 3584; q8 group 32, q4 group 128).
// BM_Rvq3ApplyGather_* measure the undispatched gather versions (Arg 1|2).
// BM_Rvq3Var_* compare the rvq3 variants (see RunRvq3) at K3 gate/up
// (3072 x 3584), K3 down (3584 x 3072), twin up (1024 x 1280) and twin down
// (1280 x 1024); BM_Rvq3Qlut_* times the int16 LUT quantisation.
// BM_Crc32_*: slice-by-8 vs 128-bit PCLMULQDQ vs 512-bit VPCLMULQDQ folding
// (Arg 0|1|2) over one expert record of mini (256 KiB) and of the twin
// (1.5 MiB), in cache, and over mini records cycling through 256 MiB (from
// DRAM, like a record just read); BM_TopK_*: the
// router's top-k (spill_k_topk, the engine's one top-k: an O(n k)
// insertion) at mini (256, 8), twin (250, 16) and K3 (384, 8);
// BM_RmsNorm_* / BM_Softmax_*: the small vector helpers at d_model sizes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "engine/base/crc32.h"
#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"

namespace {

typedef void (*matvec_fn)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
typedef void (*lut_fn)(const float *, const float *, uint32_t, float *, uint32_t, uint32_t);
typedef void (*apply_fn)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);

const matvec_fn kMatvec[3] = {spill_k_matvec__ref, spill_k_matvec__avx2, spill_k_matvec__avx512};
const lut_fn kLut[3] = {spill_k_lut_rvq3_f32__ref, spill_k_lut_rvq3_f32__avx2,
                        spill_k_lut_rvq3_f32__avx512};
const apply_fn kApply[3] = {spill_k_apply_rvq3_f32__ref, spill_k_apply_rvq3_f32__avx2,
                            spill_k_apply_rvq3_f32__avx512};

// A weight matrix with random contents, its input and output buffers.
struct Problem {
  std::vector<uint8_t> buf;
  std::vector<float> codebook, x, y, lut;
  std::vector<uint8_t> qlut;
  spill_qmat m{};
  size_t weight_bytes = 0;
};

std::unique_ptr<Problem> Make(int dtype, uint32_t rows, uint32_t cols, uint32_t group) {
  auto p = std::make_unique<Problem>();
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  size_t vb = 0, ns = 0;
  switch (dtype) {
    case SPILL_DT_F16: vb = (size_t)rows * cols * 2; break;
    case SPILL_DT_Q8: vb = (size_t)rows * cols; ns = (size_t)rows * cols / group; break;
    case SPILL_DT_Q4: vb = (size_t)rows * cols / 2; ns = (size_t)rows * cols / group; break;
    case SPILL_DT_RVQ3: vb = (size_t)rows * (cols / 8) * 3; ns = rows; break;
    default: vb = (size_t)rows * cols * 4; break;
  }
  p->buf.resize(vb + 2 * ns);
  for (size_t i = 0; i < vb; i++) p->buf[i] = (uint8_t)(rng() & 0xFF);
  if (dtype == SPILL_DT_F16 || dtype == SPILL_DT_F32) {  // finite values, not random bits
    for (size_t i = 0; i < vb / 2; i++) {
      uint16_t h = spill_f32_to_f16(d(rng));
      std::memcpy(p->buf.data() + 2 * i, &h, 2);
    }
  }
  for (size_t i = 0; i < ns; i++) {
    uint16_t h = spill_f32_to_f16(0.01f + 0.05f * (float)(i % 7));
    std::memcpy(p->buf.data() + vb + 2 * i, &h, 2);
  }
  p->codebook.resize(3 * 256 * 8);
  for (auto &f : p->codebook) f = d(rng);
  p->x.resize(cols);
  for (auto &f : p->x) f = d(rng);
  p->y.resize(rows);
  p->lut.resize((size_t)3 * (cols / 8) * 256);
  p->m.dtype = dtype;
  p->m.rows = rows;
  p->m.cols = cols;
  p->m.group = group;
  p->m.data = p->buf.data();
  p->m.scales = reinterpret_cast<const uint16_t *>(p->buf.data() + vb);
  p->m.codebook = p->codebook.data();
  p->weight_bytes = vb + 2 * ns;
  if (dtype == SPILL_DT_RVQ3)
  {
    spill_k_lut_rvq3_f32__ref(p->codebook.data(), p->x.data(), cols, p->lut.data(), 0, cols / 8);
    p->qlut.resize(spill_k_qlut_rvq3_i16_bytes(cols));
    spill_k_qlut_rvq3_i16(p->lut.data(), cols, p->qlut.data(), 0, cols / 8);
  }
  return p;
}

// One problem per shape, built once under a lock (benchmark's threads share
// it; each writes only its own half of y).
Problem &Get(int dtype, uint32_t rows, uint32_t cols, uint32_t group) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<Problem>> all;
  std::lock_guard<std::mutex> lock(mu);
  for (auto &p : all)
    if (p->m.dtype == dtype && p->m.rows == rows && p->m.cols == cols && p->m.group == group)
      return *p;
  all.push_back(Make(dtype, rows, cols, group));
  return *all.back();
}

bool IsaOk(benchmark::State &state) {
  const spill_isa isa = (spill_isa)state.range(0);
  if (!spill_k_isa_supported(isa)) {
    state.SkipWithError("CPU lacks this ISA");
    return false;
  }
  state.SetLabel(spill_k_isa_name(isa));
  return true;
}

// This thread's half of [0, n).
void Split(const benchmark::State &state, uint32_t n, uint32_t *lo, uint32_t *hi) {
  const uint32_t t = (uint32_t)state.thread_index(), nt = (uint32_t)state.threads();
  *lo = (uint32_t)((uint64_t)n * t / nt);
  *hi = (uint32_t)((uint64_t)n * (t + 1) / nt);
}

void RunMatvec(benchmark::State &state, int dtype, uint32_t rows, uint32_t cols, uint32_t group) {
  if (!IsaOk(state)) return;
  Problem &p = Get(dtype, rows, cols, group);
  const matvec_fn f = kMatvec[state.range(0)];
  uint32_t r0, r1;
  Split(state, rows, &r0, &r1);
  for (auto _ : state) {
    f(&p.m, p.x.data(), p.y.data(), r0, r1);
    benchmark::ClobberMemory();
  }
  const double share = (double)(r1 - r0) / rows;
  state.SetItemsProcessed((int64_t)(state.iterations() * (double)rows * cols * share));
  state.SetBytesProcessed((int64_t)(state.iterations() * (double)p.weight_bytes * share));
}

void RunApply(benchmark::State &state, uint32_t rows, uint32_t cols) {
  if (!IsaOk(state)) return;
  Problem &p = Get(SPILL_DT_RVQ3, rows, cols, 0);
  const apply_fn f = kApply[state.range(0)];
  uint32_t r0, r1;
  Split(state, rows, &r0, &r1);
  for (auto _ : state) {
    f(&p.m, p.lut.data(), p.y.data(), r0, r1);
    benchmark::ClobberMemory();
  }
  const double share = (double)(r1 - r0) / rows;
  state.SetItemsProcessed((int64_t)(state.iterations() * (double)rows * cols * share));
  state.SetBytesProcessed((int64_t)(state.iterations() * (double)p.weight_bytes * share));
}

void RunApplyGather(benchmark::State &state, uint32_t rows, uint32_t cols) {
  if (state.range(0) == 0) {
    state.SkipWithError("no ref gather version (compare with BM_Rvq3Apply_*/0)");
    return;
  }
  if (!IsaOk(state)) return;
  Problem &p = Get(SPILL_DT_RVQ3, rows, cols, 0);
  const apply_fn f = state.range(0) == 1 ? spill_k_apply_rvq3_f32_gather__avx2
                                         : spill_k_apply_rvq3_f32_gather__avx512;
  uint32_t r0, r1;
  Split(state, rows, &r0, &r1);
  for (auto _ : state) {
    f(&p.m, p.lut.data(), p.y.data(), r0, r1);
    benchmark::ClobberMemory();
  }
  const double share = (double)(r1 - r0) / rows;
  state.SetItemsProcessed((int64_t)(state.iterations() * (double)rows * cols * share));
  state.SetBytesProcessed((int64_t)(state.iterations() * (double)p.weight_bytes * share));
}

// rvq3 variants side by side (Arg): 0 spill_k_apply_rvq3_f32__ref, 1 the
// dispatched f32-LUT apply (column-blocked, __avx2), 2 the int16-LUT apply
// with AVX-512 VBMI, 3 spill_k_matvec_rvq3_f32__avx2 (dequantise + FMA, no LUT),
// 4 spill_k_apply_rvq3_i16__ref. Compare ratios within one invocation.
void RunRvq3(benchmark::State &state, uint32_t rows, uint32_t cols) {
  const int c = (int)state.range(0);
  const bool ok = c == 0 || c == 4 ? true
                  : c == 2         ? spill_k_vbmi_supported() != 0
                                   : spill_k_isa_supported(SPILL_ISA_AVX2) != 0;
  if (!ok) {
    state.SkipWithError("CPU lacks this ISA");
    return;
  }
  static const char *names[] = {"apply_ref", "apply_avx2", "apply_q_vbmi", "matvec_avx2",
                                "apply_q_ref"};
  state.SetLabel(names[c]);
  Problem &p = Get(SPILL_DT_RVQ3, rows, cols, 0);
  uint32_t r0, r1;
  Split(state, rows, &r0, &r1);
  for (auto _ : state) {
    switch (c) {
      case 0:
        spill_k_apply_rvq3_f32__ref(&p.m, p.lut.data(), p.y.data(), r0, r1);
        break;
      case 1:
        spill_k_apply_rvq3_f32__avx2(&p.m, p.lut.data(), p.y.data(), r0, r1);
        break;
      case 2:
        spill_k_apply_rvq3_i16__avx512vbmi(&p.m, p.qlut.data(), p.y.data(), r0, r1);
        break;
      case 3:
        spill_k_matvec_rvq3_f32__avx2(&p.m, p.x.data(), p.y.data(), r0, r1);
        break;
      default:
        spill_k_apply_rvq3_i16__ref(&p.m, p.qlut.data(), p.y.data(), r0, r1);
        break;
    }
    benchmark::ClobberMemory();
  }
  const double share = (double)(r1 - r0) / rows;
  state.SetItemsProcessed((int64_t)(state.iterations() * (double)rows * cols * share));
  state.SetBytesProcessed((int64_t)(state.iterations() * (double)p.weight_bytes * share));
}

void RunQlut(benchmark::State &state, uint32_t rows, uint32_t cols) {
  Problem &p = Get(SPILL_DT_RVQ3, rows, cols, 0);
  std::vector<uint8_t> q(p.qlut.size());
  uint32_t g0, g1;
  Split(state, cols / 8, &g0, &g1);
  for (auto _ : state) {
    spill_k_qlut_rvq3_i16(p.lut.data(), cols, q.data(), g0, g1);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * (int64_t)3 * (g1 - g0) * 256);
}

void RunLut(benchmark::State &state, uint32_t rows, uint32_t cols) {
  if (!IsaOk(state)) return;
  Problem &p = Get(SPILL_DT_RVQ3, rows, cols, 0);
  const lut_fn f = kLut[state.range(0)];
  // The LUT of the problem is shared read-only by the apply benchmarks:
  // build into a private buffer.
  std::vector<float> lut(p.lut.size());
  uint32_t g0, g1;
  Split(state, cols / 8, &g0, &g1);
  for (auto _ : state) {
    f(p.codebook.data(), p.x.data(), cols, lut.data(), g0, g1);
    benchmark::ClobberMemory();
  }
  const int64_t entries = (int64_t)3 * (g1 - g0) * 256;
  state.SetItemsProcessed(state.iterations() * entries);
  state.SetBytesProcessed(state.iterations() * entries * 4);
}

void BM_Rvq3Apply_K3Gate(benchmark::State &s) { RunApply(s, 3072, 3584); }
void BM_Rvq3Apply_K3Down(benchmark::State &s) { RunApply(s, 3584, 3072); }
void BM_Rvq3Apply_Twin(benchmark::State &s) { RunApply(s, 1024, 1280); }
void BM_Rvq3ApplyGather_K3Gate(benchmark::State &s) { RunApplyGather(s, 3072, 3584); }
void BM_Rvq3ApplyGather_Twin(benchmark::State &s) { RunApplyGather(s, 1024, 1280); }
void BM_Rvq3Var_K3Gate(benchmark::State &s) { RunRvq3(s, 3072, 3584); }
void BM_Rvq3Var_K3Down(benchmark::State &s) { RunRvq3(s, 3584, 3072); }
void BM_Rvq3Var_Twin(benchmark::State &s) { RunRvq3(s, 1024, 1280); }
void BM_Rvq3Var_TwinDown(benchmark::State &s) { RunRvq3(s, 1280, 1024); }
void BM_Rvq3Qlut_K3Gate(benchmark::State &s) { RunQlut(s, 3072, 3584); }
void BM_Rvq3Lut_K3Gate(benchmark::State &s) { RunLut(s, 3072, 3584); }
void BM_Rvq3Lut_K3Down(benchmark::State &s) { RunLut(s, 3584, 3072); }
void BM_Q8Matvec_Trunk(benchmark::State &s) { RunMatvec(s, SPILL_DT_Q8, 4096, 3584, 32); }
void BM_Q4Matvec_Trunk(benchmark::State &s) { RunMatvec(s, SPILL_DT_Q4, 4096, 3584, 128); }
void BM_F16Matvec_Trunk(benchmark::State &s) { RunMatvec(s, SPILL_DT_F16, 4096, 3584, 0); }
void BM_F32Matvec_Router(benchmark::State &s) { RunMatvec(s, SPILL_DT_F32, 384, 3584, 0); }

// bytes: one record; cold: cycle through 256 MiB of records (far past the
// LLC), so every record comes from DRAM, as one just read from disk does.
void RunCrc32(benchmark::State &state, size_t bytes, bool cold = false) {
  typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);
  static const struct {
    const char *name;
    crc_fn fn;
    int (*available)(void);
  } kImpl[3] = {{"slice8", spill_crc32__slice8, nullptr},
                {"pclmul", spill_crc32__pclmul, spill_crc32__pclmul_available},
                {"vpclmul", spill_crc32__vpclmul, spill_crc32__vpclmul_available}};
  const auto &im = kImpl[state.range(0)];
  if (im.available && !im.available()) {
    state.SkipWithError(im.name[0] == 'v' ? "CPU lacks AVX-512F + VPCLMULQDQ"
                                          : "CPU lacks PCLMULQDQ");
    return;
  }
  state.SetLabel(im.name);
  const size_t n_rec = cold ? (256u << 20) / bytes : 1;
  std::vector<uint8_t> buf(bytes * n_rec);
  std::mt19937 rng(7);
  for (auto &b : buf) b = (uint8_t)rng();
  uint32_t c = 0;
  size_t r = 0;
  for (auto _ : state) {
    c = im.fn(0, buf.data() + r * bytes, bytes);
    benchmark::DoNotOptimize(c);
    if (++r == n_rec) r = 0;
  }
  state.SetBytesProcessed((int64_t)(state.iterations() * bytes));
}

void RunTopK(benchmark::State &state, uint32_t n, uint32_t k) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(0.0f, 1.0f);
  // 64 score vectors so the branch predictor does not learn one
  std::vector<float> s((size_t)64 * n);
  for (auto &f : s) f = d(rng);
  std::vector<uint32_t> idx(k);
  size_t i = 0;
  for (auto _ : state) {
    spill_k_topk(s.data() + (i++ & 63) * n, n, k, idx.data());
    benchmark::DoNotOptimize(idx.data());
  }
  state.SetItemsProcessed((int64_t)(state.iterations() * n));
}

void RunRmsNorm(benchmark::State &state, uint32_t n) {
  std::vector<float> x(n, 0.5f), w(n, 1.0f), y(n);
  for (uint32_t i = 0; i < n; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  for (auto _ : state) {
    spill_k_rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed((int64_t)(state.iterations() * n));
  state.SetBytesProcessed((int64_t)(state.iterations() * n * 12));
}

void RunSoftmax(benchmark::State &state, uint32_t n) {
  std::vector<float> x0(n), x(n);
  for (uint32_t i = 0; i < n; i++) x0[i] = (float)((i * 37) % 101) / 10.0f;
  for (auto _ : state) {
    std::memcpy(x.data(), x0.data(), n * sizeof(float));
    spill_k_softmax(x.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed((int64_t)(state.iterations() * n));
}

void BM_Crc32_MiniRecord(benchmark::State &s) { RunCrc32(s, 256u << 10); }
void BM_Crc32_TwinRecord(benchmark::State &s) { RunCrc32(s, 1536u << 10); }
void BM_Crc32_MiniRecordCold(benchmark::State &s) { RunCrc32(s, 256u << 10, true); }
void BM_TopK_Mini(benchmark::State &s) { RunTopK(s, 256, 8); }
void BM_TopK_Twin(benchmark::State &s) { RunTopK(s, 250, 16); }
void BM_TopK_K3(benchmark::State &s) { RunTopK(s, 384, 8); }
void BM_RmsNorm_Mini(benchmark::State &s) { RunRmsNorm(s, 1024); }
void BM_RmsNorm_Twin(benchmark::State &s) { RunRmsNorm(s, 2560); }
void BM_RmsNorm_K3(benchmark::State &s) { RunRmsNorm(s, 7168); }
void BM_Softmax_Mini(benchmark::State &s) { RunSoftmax(s, 256); }
void BM_Softmax_Ctx4K(benchmark::State &s) { RunSoftmax(s, 4096); }
BENCHMARK(BM_Crc32_MiniRecord)->DenseRange(0, 2);
BENCHMARK(BM_Crc32_TwinRecord)->DenseRange(0, 2);
BENCHMARK(BM_Crc32_MiniRecordCold)->DenseRange(0, 2);
BENCHMARK(BM_TopK_Mini);
BENCHMARK(BM_TopK_Twin);
BENCHMARK(BM_TopK_K3);
BENCHMARK(BM_RmsNorm_Mini);
BENCHMARK(BM_RmsNorm_Twin);
BENCHMARK(BM_RmsNorm_K3);
BENCHMARK(BM_Softmax_Mini);
BENCHMARK(BM_Softmax_Ctx4K);

#define KB(fn) BENCHMARK(fn)->DenseRange(0, 2)->Threads(1)->Threads(2)->UseRealTime()
KB(BM_Rvq3Apply_K3Gate);
KB(BM_Rvq3Apply_K3Down);
KB(BM_Rvq3Apply_Twin);
#define KB12(fn) BENCHMARK(fn)->DenseRange(1, 2)->Threads(1)->Threads(2)->UseRealTime()
KB12(BM_Rvq3ApplyGather_K3Gate);
KB12(BM_Rvq3ApplyGather_Twin);
#define KV(fn) BENCHMARK(fn)->DenseRange(0, 4)->Threads(1)->Threads(2)->UseRealTime()
KV(BM_Rvq3Var_K3Gate);
KV(BM_Rvq3Var_K3Down);
KV(BM_Rvq3Var_Twin);
KV(BM_Rvq3Var_TwinDown);
BENCHMARK(BM_Rvq3Qlut_K3Gate)->Threads(1)->Threads(2)->UseRealTime();
KB(BM_Rvq3Lut_K3Gate);
KB(BM_Rvq3Lut_K3Down);
KB(BM_Q8Matvec_Trunk);
KB(BM_Q4Matvec_Trunk);
KB(BM_F16Matvec_Trunk);
KB(BM_F32Matvec_Router);

}  // namespace
