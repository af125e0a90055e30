// bench/peer_kernels_bench.cc: spill's Q4_K / Q6_K / Q4_0 / Q8_0 matvec kernels
// beside ggml's on the same quant blocks (docs/PEERS.md, vs-llama-cpp).
//
// One expert matrix of the Qwen3-30B-A3B shape (gate/up: 768 x 2048, down:
// 2048 x 768) of random blocks with valid f16 scales. spill multiplies it by
// the f32 activation (SpillF32: engine/quant's spill_k_matvec, act_quant
// f32) and by the activation quantised once per product to Q8_K / Q8_0 then
// the integer kernel (SpillQ8: spill_k_xq_quantize + spill_k_matvec_xq,
// act_quant q8; kernels_xq.h); ggml, as its CPU backend does for a
// matrix-vector product, quantises the activation once (Q8_K for Q4_K, Q8_0
// for Q4_0: `from_float`) and calls `vec_dot` per row. ggml is loaded at run
// time from the `./lab peers` build (libggml-cpu.so, through dlopen; nothing
// of it is compiled here): $SPILL_GGML_CPU names the library, else the peer
// cache. Without it the ggml cases report an error naming `./lab peers` and
// the spill cases still run. Each ggml case checks first that both engines
// agree on the product (max |diff| within 2% of max |y| for f32: ggml rounds
// the activation to 8 bits; within 1e-4 for q8, the same rounding) and
// reports them as the counters rel_diff and rel_diff_q8. GgmlRepack (Q4_K and
// Q4_0) is the path llama.cpp takes with load_mode none on an AVX2 CPU: ggml
// itself repacks the matrix into its CPU repack buffer (rows interleaved 8
// at a time) and one interleaved gemv computes every row.
//   bazel run //bench:peer_kernels_bench -- --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_xq.h"
}

namespace {

// ggml's CPU type traits (ggml-cpu.h, ggml 0.25.1): the four fields we use.
typedef void (*from_float_t)(const float *x, void *y, int64_t k);
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                          size_t by, int nrc);
struct ggml_traits_cpu {
  from_float_t from_float;
  vec_dot_t vec_dot;
  int vec_dot_type;
  int64_t nrows;
};
enum { GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q6_K = 14 };
const int kQ8KBlock = 4 + 256 + 2 * 16;  // block_q8_K: f32 d, 256 int8, 16 int16 sums

// What the repacked arm needs of ggml's public API (ggml.h, ggml-backend.h,
// ggml-cpu's repack buffer type and its x86 gemv kernels).
struct ggml_init_params {
  size_t mem_size;
  void *mem_buffer;
  bool no_alloc;
};
typedef void (*gemv_t)(int n, float *s, size_t bs, const void *vx, const void *vy, int nr, int nc);
struct GgmlRepackApi {
  void *(*init)(ggml_init_params) = nullptr;
  void (*free_ctx)(void *) = nullptr;
  size_t (*overhead)(void) = nullptr;
  void *(*new_2d)(void *, int, int64_t, int64_t) = nullptr;
  void *(*buft)(void) = nullptr;
  void *(*alloc)(void *, size_t) = nullptr;
  void (*buf_free)(void *) = nullptr;
  int (*tensor_alloc)(void *, void *, void *) = nullptr;
  void (*tensor_set)(void *, const void *, size_t, size_t) = nullptr;
  void *(*base)(void *) = nullptr;
  gemv_t q4k = nullptr, q40 = nullptr;  // ggml_gemv_q4_K_8x8_q8_K, ggml_gemv_q4_0_8x8_q8_0
};

struct Ggml {
  const ggml_traits_cpu *(*traits)(int) = nullptr;
  GgmlRepackApi rp;
  bool repack_ok = false;
  std::string why;
  Ggml() {
    std::string lib;
    if (const char *e = getenv("SPILL_GGML_CPU")) lib = e;
    else {
      const char *home = getenv("HOME");
      lib = std::string(home ? home : "") +
            "/.cache/spill/peers/llama.cpp-3.22.1-de3ff81/build/bin/libggml-cpu.so";
    }
    void *h = dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      why = "ggml not found (" + lib + "): run ./lab peers or set SPILL_GGML_CPU";
      return;
    }
    auto init = (void (*)(void))dlsym(h, "ggml_cpu_init");
    traits = (const ggml_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !traits) {
      traits = nullptr;
      why = lib + ": no ggml_get_type_traits_cpu";
      return;
    }
    init();
    LoadRepack(h);
  }
  template <class F>
  bool Sym(void *h, const char *name, F &f) {
    f = (F)dlsym(h, name);
    return f != nullptr;
  }
  void LoadRepack(void *h) {
    repack_ok = Sym(h, "ggml_init", rp.init) && Sym(h, "ggml_free", rp.free_ctx) &&
                Sym(h, "ggml_tensor_overhead", rp.overhead) && Sym(h, "ggml_new_tensor_2d", rp.new_2d) &&
                Sym(h, "_Z35ggml_backend_cpu_repack_buffer_typev", rp.buft) &&
                Sym(h, "ggml_backend_buft_alloc_buffer", rp.alloc) &&
                Sym(h, "ggml_backend_buffer_free", rp.buf_free) &&
                Sym(h, "ggml_backend_tensor_alloc", rp.tensor_alloc) &&
                Sym(h, "ggml_backend_tensor_set", rp.tensor_set) &&
                Sym(h, "ggml_backend_buffer_get_base", rp.base) && Sym(h, "ggml_gemv_q4_K_8x8_q8_K", rp.q4k) &&
                Sym(h, "ggml_gemv_q4_0_8x8_q8_0", rp.q40);
  }
};

Ggml &G() {
  static Ggml g;
  return g;
}

uint16_t F16(float f) {  // round to nearest even, normal range only (our scales)
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
  int ee = (int)e - 127 + 15;
  if (ee <= 0) return (uint16_t)sign;
  uint32_t r = (uint32_t)(ee << 10) | (m >> 13);
  if ((m & 0x1fff) > 0x1000 || ((m & 0x1fff) == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

// One matrix in both engines' layouts, and the activation.
enum Kind { kQ4K, kQ6K, kQ40, kQ80 };
struct Case {
  uint32_t rows, cols;
  Kind kind;
  std::vector<uint8_t> ggml;       // ggml blocks (K-quants: also spill's q4_k / q6_k layout)
  std::vector<uint8_t> spill_q;    // spill q4/q8: values then f16 scales (group 32)
  std::vector<float> x;
  spill_qmat w;
  bool kq() const { return kind == kQ4K || kind == kQ6K; }
  int ggml_type() const {
    return kind == kQ4K ? GGML_Q4_K : kind == kQ6K ? GGML_Q6_K : kind == kQ40 ? GGML_Q4_0 : GGML_Q8_0;
  }
  size_t row_bytes() const {
    const size_t nb = kq() ? cols / 256 : cols / 32;
    return nb * (kind == kQ4K ? 144 : kind == kQ6K ? 210 : kind == kQ40 ? 18 : 34);
  }
  Case(uint32_t r, uint32_t c, Kind k) : rows(r), cols(c), kind(k) {
    std::mt19937 rng(1234 + r + c + (int)k);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    float scale = 1.0f / std::sqrt((float)c);
    x.resize(c);
    std::normal_distribution<float> n01;
    for (auto &v : x) v = n01(rng);
    if (kq()) {
      const size_t nb = (size_t)r * c / 256, bb = kind == kQ4K ? 144 : 210;
      ggml.resize(nb * bb);
      for (auto &b : ggml) b = (uint8_t)byte(rng);
      for (size_t b = 0; b < nb; b++) {
        if (kind == kQ4K) {
          float d = u(rng) * scale / 245.0f;
          uint16_t dh = F16(d), mh = F16(d * 7.5f);
          memcpy(&ggml[b * 144], &dh, 2);
          memcpy(&ggml[b * 144 + 2], &mh, 2);
        } else {
          uint16_t dh = F16(u(rng) * scale / 200.0f);
          memcpy(&ggml[b * 210 + 208], &dh, 2);
        }
      }
      w = {kind == kQ4K ? 6 : 8, r, c, 0, ggml.data(), nullptr, nullptr};
      return;
    }
    const size_t nb = (size_t)r * c / 32, qb = kind == kQ40 ? 18 : 34;
    const size_t vb = kind == kQ40 ? (size_t)r * c / 2 : (size_t)r * c;
    ggml.resize(nb * qb);
    spill_q.resize(vb + nb * 2);
    uint16_t *sc = (uint16_t *)(spill_q.data() + vb);
    for (size_t b = 0; b < nb; b++) {
      uint16_t dh = F16(u(rng) * scale / (kind == kQ40 ? 4.6f : 73.0f));
      memcpy(&ggml[b * qb], &dh, 2);
      memcpy(&sc[b], &dh, 2);
      if (kind == kQ80) {  // same int8 values in both layouts
        for (int i = 0; i < 32; i++) {
          const uint8_t v = (uint8_t)(byte(rng) % 255 + 129);  // -127..127
          ggml[b * 34 + 2 + i] = v;
          spill_q[b * 32 + i] = v;
        }
        continue;
      }
      uint8_t q[32];
      for (int i = 0; i < 32; i++) q[i] = (uint8_t)(byte(rng) & 15);
      // ggml Q4_0: byte j holds element j (low) and j + 16 (high)
      for (int j = 0; j < 16; j++) ggml[b * 18 + 2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
      // spill q4: element 2i low nibble, 2i + 1 high (flat row-major)
      for (int i = 0; i < 16; i++) spill_q[b * 16 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
    }
    w = {kind == kQ40 ? 4 : 3, r, c, 32, spill_q.data(), (const spill_k_u16_unaligned *)sc, nullptr};
  }
};

Case &Get(int i) {
  static Case cases[] = {Case(768, 2048, kQ4K), Case(2048, 768, kQ4K), Case(768, 2048, kQ6K),
                         Case(2048, 768, kQ6K), Case(768, 2048, kQ40), Case(2048, 768, kQ40),
                         Case(768, 2048, kQ80), Case(2048, 768, kQ80)};
  return cases[i];
}

// spill's product of case c: f32 activation (act_quant f32) or, with q8,
// the activation quantised once per product (as ggml does) and the integer
// kernel (act_quant q8).
struct SpillRun {
  std::vector<uint8_t> buf;
  spill_k_xq xq{};
  explicit SpillRun(uint32_t n) : buf(spill_k_xq_bytes(n)) { spill_k_xq_init(&xq, buf.data(), n); }
  void Run(Case &c, bool q8, float *y) {
    if (!q8) {
      spill_k_matvec(&c.w, c.x.data(), y, 0, c.rows);
      return;
    }
    spill_k_xq_quantize(c.x.data(), &xq);
    spill_k_matvec_xq(&c.w, &xq, y, 0, c.rows);
  }
};

void Spill(benchmark::State &st, int i, bool q8) {
  Case &c = Get(i);
  std::vector<float> y(c.rows);
  SpillRun run(c.cols);
  for (auto _ : st) {
    run.Run(c, q8, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(
      (double)c.ggml.size() * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void SpillF32(benchmark::State &st, int i) { Spill(st, i, false); }
void SpillQ8(benchmark::State &st, int i) { Spill(st, i, true); }

void Ggml(benchmark::State &st, int i) {
  Case &c = Get(i);
  if (!G().traits) {
    st.SkipWithError(G().why.c_str());
    return;
  }
  const ggml_traits_cpu *t = G().traits(c.ggml_type());
  const ggml_traits_cpu *tq = G().traits(t->vec_dot_type);
  size_t xq_bytes = c.kq() ? (size_t)c.cols / 256 * kQ8KBlock : (size_t)c.cols / 32 * 34;
  const size_t row_bytes = c.row_bytes();
  std::vector<uint8_t> xq(xq_bytes + 64);
  std::vector<float> y(c.rows), ys(c.rows), yq(c.rows);
  // agreement with spill on this product first (f32 and q8 activations)
  tq->from_float(c.x.data(), xq.data(), c.cols);
  for (uint32_t r = 0; r < c.rows; r++)
    t->vec_dot((int)c.cols, &y[r], 0, c.ggml.data() + r * row_bytes, 0, xq.data(), 0, 1);
  SpillRun run(c.cols);
  run.Run(c, false, ys.data());
  run.Run(c, true, yq.data());
  double md = 0, mq = 0, my = 0;
  for (uint32_t r = 0; r < c.rows; r++) {
    md = std::fmax(md, std::fabs((double)y[r] - ys[r]));
    mq = std::fmax(mq, std::fabs((double)y[r] - yq[r]));
    my = std::fmax(my, std::fabs((double)ys[r]));
  }
  if (!(md <= 0.02 * my) || !(mq <= 1e-4 * my)) {
    st.SkipWithError("ggml and spill disagree on the product");
    return;
  }
  for (auto _ : st) {
    tq->from_float(c.x.data(), xq.data(), c.cols);
    for (uint32_t r = 0; r < c.rows; r++)
      t->vec_dot((int)c.cols, &y[r], 0, c.ggml.data() + r * row_bytes, 0, xq.data(), 0, 1);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(
      (double)c.ggml.size() * st.iterations() / 1e9, benchmark::Counter::kIsRate);
  st.counters["rel_diff"] = md / my;     // vs spill, f32 activation
  st.counters["rel_diff_q8"] = mq / my;  // vs spill, act_quant q8
}

// Case c's weights as ggml's CPU repack buffer holds them (llama.cpp's
// default without mmap: the rows interleaved 8 at a time, block_q4_Kx8 /
// block_q4_0x8, done by ggml itself through ggml_backend_tensor_set).
// Empty if the API is missing or ggml did not repack (then the bytes equal
// the input, which the gemv would misread).
std::vector<uint8_t> Repacked(Case &c) {
  GgmlRepackApi &a = G().rp;
  std::vector<uint8_t> out;
  void *ctx = a.init({a.overhead() * 4, nullptr, true});
  void *t = a.new_2d(ctx, c.ggml_type(), c.cols, c.rows);
  void *buf = a.alloc(a.buft(), c.ggml.size());
  if (buf && a.tensor_alloc(buf, t, a.base(buf)) == 0) {
    a.tensor_set(t, c.ggml.data(), 0, c.ggml.size());
    const uint8_t *p = (const uint8_t *)a.base(buf);
    if (memcmp(p, c.ggml.data(), c.ggml.size()) != 0) out.assign(p, p + c.ggml.size());
  }
  if (buf) a.buf_free(buf);
  a.free_ctx(ctx);
  return out;
}

// ggml's matrix-vector product on its repacked weights (Q4_K, Q4_0 on
// AVX2 CPUs): `from_float` then the interleaved gemv over all rows, the
// kernel llama.cpp runs for one decode token with load_mode none.
void GgmlRepack(benchmark::State &st, int i) {
  Case &c = Get(i);
  if (!G().traits || !G().repack_ok) {
    st.SkipWithError(G().traits ? "ggml without the repack API" : G().why.c_str());
    return;
  }
  const std::vector<uint8_t> rp = Repacked(c);
  if (rp.empty()) {
    st.SkipWithError("ggml did not repack this matrix");
    return;
  }
  const ggml_traits_cpu *tq = G().traits(G().traits(c.ggml_type())->vec_dot_type);
  const gemv_t gemv = c.kind == kQ4K ? G().rp.q4k : G().rp.q40;
  std::vector<uint8_t> xq((c.kq() ? (size_t)c.cols / 256 * kQ8KBlock : (size_t)c.cols / 32 * 34) + 64);
  std::vector<float> y(c.rows), yq(c.rows);
  tq->from_float(c.x.data(), xq.data(), c.cols);
  gemv((int)c.cols, y.data(), c.rows, rp.data(), xq.data(), 1, (int)c.rows);
  SpillRun run(c.cols);
  run.Run(c, true, yq.data());
  double mq = 0, my = 0;
  for (uint32_t r = 0; r < c.rows; r++) {
    mq = std::fmax(mq, std::fabs((double)y[r] - yq[r]));
    my = std::fmax(my, std::fabs((double)yq[r]));
  }
  if (!(mq <= 1e-4 * my)) {
    st.SkipWithError("ggml (repacked) and spill q8 disagree on the product");
    return;
  }
  for (auto _ : st) {
    tq->from_float(c.x.data(), xq.data(), c.cols);
    gemv((int)c.cols, y.data(), c.rows, rp.data(), xq.data(), 1, (int)c.rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["weight_GB/s"] = benchmark::Counter(
      (double)c.ggml.size() * st.iterations() / 1e9, benchmark::Counter::kIsRate);
  st.counters["rel_diff_q8"] = mq / my;  // vs spill, act_quant q8
}

}  // namespace

BENCHMARK_CAPTURE(SpillF32, Q4K_Gate_768x2048, 0);
BENCHMARK_CAPTURE(SpillQ8, Q4K_Gate_768x2048, 0);
BENCHMARK_CAPTURE(Ggml, Q4K_Gate_768x2048, 0);
BENCHMARK_CAPTURE(GgmlRepack, Q4K_Gate_768x2048, 0);
BENCHMARK_CAPTURE(SpillF32, Q4K_Down_2048x768, 1);
BENCHMARK_CAPTURE(SpillQ8, Q4K_Down_2048x768, 1);
BENCHMARK_CAPTURE(Ggml, Q4K_Down_2048x768, 1);
BENCHMARK_CAPTURE(GgmlRepack, Q4K_Down_2048x768, 1);
BENCHMARK_CAPTURE(SpillF32, Q6K_Gate_768x2048, 2);
BENCHMARK_CAPTURE(SpillQ8, Q6K_Gate_768x2048, 2);
BENCHMARK_CAPTURE(Ggml, Q6K_Gate_768x2048, 2);
BENCHMARK_CAPTURE(SpillF32, Q6K_Down_2048x768, 3);
BENCHMARK_CAPTURE(SpillQ8, Q6K_Down_2048x768, 3);
BENCHMARK_CAPTURE(Ggml, Q6K_Down_2048x768, 3);
BENCHMARK_CAPTURE(SpillF32, Q4_0_Gate_768x2048, 4);
BENCHMARK_CAPTURE(SpillQ8, Q4_0_Gate_768x2048, 4);
BENCHMARK_CAPTURE(Ggml, Q4_0_Gate_768x2048, 4);
BENCHMARK_CAPTURE(GgmlRepack, Q4_0_Gate_768x2048, 4);
BENCHMARK_CAPTURE(SpillF32, Q4_0_Down_2048x768, 5);
BENCHMARK_CAPTURE(SpillQ8, Q4_0_Down_2048x768, 5);
BENCHMARK_CAPTURE(Ggml, Q4_0_Down_2048x768, 5);
BENCHMARK_CAPTURE(GgmlRepack, Q4_0_Down_2048x768, 5);
BENCHMARK_CAPTURE(SpillF32, Q8_0_Gate_768x2048, 6);
BENCHMARK_CAPTURE(SpillQ8, Q8_0_Gate_768x2048, 6);
BENCHMARK_CAPTURE(Ggml, Q8_0_Gate_768x2048, 6);
BENCHMARK_CAPTURE(SpillF32, Q8_0_Down_2048x768, 7);
BENCHMARK_CAPTURE(SpillQ8, Q8_0_Down_2048x768, 7);
BENCHMARK_CAPTURE(Ggml, Q8_0_Down_2048x768, 7);
