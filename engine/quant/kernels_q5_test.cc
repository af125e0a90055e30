// engine/quant/kernels_q5_test.cc: the q5_0 and q5_1 dtypes (kernels_q5.h).
// - the traits rows; dequantisation against the block layout decoded here
//   independently (element e: nibble e < 16 ? qs[e] & 15 : qs[e-16] >> 4,
//   fifth bit e of the qh word), as ggml's dequantize_row_q5_0 / q5_1;
// - f32 input: __ref against a double dot of the dequantised weights within
//   1e-6 of sum |w x|, __avx2 against __ref within the same ceiling, the
//   dispatched kernel bit-identical for any row split;
// - Q8_0 / Q8_1 input (act_quant q8): the Q8_1 block sums as ggml's x86
//   quantize_row_q8_1 defines them; __ref, __avx2 and the dispatched kernel
//   bit for bit equal to ggml's AVX2 vec_dot_q5_0_q8_0 / vec_dot_q5_1_q8_1
//   arithmetic written out here (one 8-lane fma accumulator, the fixed lane
//   sum; Q5_1's min term fused per block and added last);
// - with the llama.cpp peer built (SPILL_LLAMA_PEER, ./lab test sets it):
//   ggml's own Q8_0 / Q8_1 quantisers and vec_dot_q5_0_q8_0 /
//   vec_dot_q5_1_q8_1 from the peer's libggml-cpu, bit for bit (skipped
//   with the reason otherwise).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/base/dtype_traits.h"
#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_q5.h"
#include "engine/quant/kernels_xq.h"

namespace {

uint32_t Bytes(int dt) { return dt == SPILL_DT_Q5_1 ? 24 : 22; }

struct Mat {
  std::vector<uint8_t> buf;
  spill_qmat w{};
};

// Random qh/qs bytes; d ~ |N(0, 0.01)| (either sign), m ~ -16 d +- noise.
Mat RandomMat(int dt, uint32_t rows, uint32_t cols, uint32_t seed) {
  Mat m;
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const uint32_t bb = Bytes(dt);
  m.buf.resize((size_t)rows * (cols / 32) * bb);
  for (auto &v : m.buf) v = (uint8_t)g();
  for (size_t b = 0; b < m.buf.size(); b += bb) {
    const float d = 0.01f * n(g);
    const uint16_t hd = spill_f32_to_f16(d);
    std::memcpy(&m.buf[b], &hd, 2);
    if (dt == SPILL_DT_Q5_1) {
      const uint16_t hm = spill_f32_to_f16(-16.0f * std::fabs(d) + 0.01f * n(g));
      std::memcpy(&m.buf[b + 2], &hm, 2);
    }
  }
  m.w.dtype = dt;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.data = m.buf.data();
  return m;
}

std::vector<float> RandomVec(uint32_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto &v : x) v = d(g);
  return x;
}

// Element e (0..31) of the block at b: the 5-bit u.
int U(int dt, const uint8_t *b, int e) {
  const uint8_t *qh = b + (dt == SPILL_DT_Q5_1 ? 4 : 2), *qs = qh + 4;
  uint32_t h = 0;
  for (int i = 0; i < 4; i++) h |= (uint32_t)qh[i] << (8 * i);
  const int nib = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
  return nib | (int)((h >> e) & 1) << 4;
}

float F16(const uint8_t *p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return spill_f16_to_f32(h);
}

double SumAbs(const spill_qmat &w, uint32_t r, const float *x) {
  std::vector<float> row(w.cols);
  spill_k_dequant_row(&w, r, row.data());
  double s = 0;
  for (uint32_t c = 0; c < w.cols; c++) s += std::fabs((double)row[c] * x[c]);
  return s;
}

constexpr int kDts[2] = {SPILL_DT_Q5_0, SPILL_DT_Q5_1};

TEST(Q5Test, TraitsRows) {
  for (int dt : kDts) {
    const spill_dtype_traits *t = spill_dtype_traits_of(dt);
    ASSERT_NE(t, nullptr);
    EXPECT_STREQ(t->name, dt == SPILL_DT_Q5_0 ? "q5_0" : "q5_1");
    EXPECT_EQ(t->block_elems, 32u);
    EXPECT_EQ(t->block_bytes, Bytes(dt));
    EXPECT_EQ(t->block_bytes, spill_k_q5_block_bytes(dt));
    EXPECT_EQ(t->scales, SPILL_DT_SCALES_IN_BLOCK);
    EXPECT_TRUE(spill_k_dtype_has_xq(dt));
  }
  EXPECT_EQ((int)SPILL_DT_Q5_0, 10);  // frozen on disk
  EXPECT_EQ((int)SPILL_DT_Q5_1, 11);
}

TEST(Q5Test, DequantIsGgmlsDefinition) {
  for (int dt : kDts) {
    Mat m = RandomMat(dt, 3, 96, 5 + dt);
    for (uint32_t r = 0; r < 3; r++) {
      std::vector<float> row(96);
      spill_k_dequant_row(&m.w, r, row.data());
      for (uint32_t c = 0; c < 96; c++) {
        const uint8_t *b = m.buf.data() + ((size_t)r * 3 + c / 32) * Bytes(dt);
        const int u = U(dt, b, (int)(c % 32));
        float want;
        if (dt == SPILL_DT_Q5_0) {
          want = (float)(u - 16) * F16(b);
        } else {
          const float t = (float)u * F16(b);
          want = t + F16(b + 2);
        }
        ASSERT_EQ(row[c], want) << spill_dtype_name((spill_dtype)dt) << " row " << r << " col " << c;
      }
    }
  }
  // every 5-bit value reaches its element: u = e for element e
  uint8_t blk[22] = {};
  const uint16_t one = spill_f32_to_f16(1.0f);
  std::memcpy(blk, &one, 2);
  uint32_t h = 0;
  for (int e = 0; e < 32; e++) {
    const int u = e;
    if (e < 16) blk[6 + e] = (uint8_t)(blk[6 + e] | (u & 15));
    else blk[6 + e - 16] = (uint8_t)(blk[6 + e - 16] | (u & 15) << 4);
    h |= (uint32_t)(u >> 4) << e;
  }
  std::memcpy(blk + 2, &h, 4);
  float out[32];
  spill_k_q5_dequant_blocks(SPILL_DT_Q5_0, blk, 1, out);
  for (int e = 0; e < 32; e++) EXPECT_EQ(out[e], (float)(e - 16)) << e;
}

TEST(Q5Test, F32RefAgainstDoubleAndAvx2AgainstRef) {
  for (int dt : kDts)
    for (uint32_t cols : {32u, 96u, 1408u, 3584u}) {
      const uint32_t rows = 13;
      Mat m = RandomMat(dt, rows, cols, 7 + cols + dt);
      std::vector<float> x = RandomVec(cols, 3 + cols), yr(rows), ya(rows), yd(rows), ys(rows);
      spill_k_matvec__ref(&m.w, x.data(), yr.data(), 0, rows);
      for (uint32_t r = 0; r < rows; r++) {
        std::vector<float> row(cols);
        spill_k_dequant_row(&m.w, r, row.data());
        double want = 0;
        for (uint32_t c = 0; c < cols; c++) want += (double)row[c] * x[c];
        EXPECT_LE(std::fabs(yr[r] - want), 1e-6 * SumAbs(m.w, r, x.data())) << dt << " " << cols << " row " << r;
      }
      spill_k_matvec(&m.w, x.data(), yd.data(), 0, rows);
      spill_k_matvec(&m.w, x.data(), ys.data(), 0, 5);
      spill_k_matvec(&m.w, x.data(), ys.data(), 5, rows);
      EXPECT_EQ(0, std::memcmp(yd.data(), ys.data(), rows * sizeof(float))) << "row split, " << cols;
      if (!spill_k_isa_supported(SPILL_ISA_AVX2)) continue;
      spill_k_matvec_q5_f32__avx2(&m.w, x.data(), ya.data(), 0, rows);
      for (uint32_t r = 0; r < rows; r++)
        EXPECT_LE(std::fabs(ya[r] - yr[r]), 1e-6 * SumAbs(m.w, r, x.data())) << dt << " " << cols << " row " << r;
    }
}

// hsum_float_8: high half + low half, then movehl, then movehdup.
float Hsum8(const float v[8]) {
  float r4[4];
  for (int k = 0; k < 4; k++) r4[k] = v[k + 4] + v[k];
  const float r0 = r4[0] + r4[2], r1 = r4[1] + r4[3];
  return r0 + r1;
}

// ggml's AVX2 ggml_vec_dot_q5_0_q8_0 / ggml_vec_dot_q5_1_q8_1, written out
// from their definitions (not from our kernels): the activation is d (f32
// of its f16), s (Q8_1 only) and q.
float GgmlDot(int dt, const uint8_t *row, uint32_t cols, const float *xd, const float *xs,
              const int8_t *xq) {
  float acc[8] = {0}, summs = 0.0f;
  for (uint32_t ib = 0; ib < cols / 32; ib++) {
    const uint8_t *b = row + (size_t)ib * Bytes(dt);
    const int8_t *q = xq + (size_t)ib * 32;
    const float d = F16(b) * xd[ib];
    if (dt == SPILL_DT_Q5_1) summs = std::fma(F16(b + 2), xs[ib], summs);
    for (int k = 0; k < 8; k++) {
      int32_t p = 0;
      for (int e = 4 * k; e < 4 * k + 4; e++) p += (U(dt, b, e) - (dt == SPILL_DT_Q5_0 ? 16 : 0)) * q[e];
      acc[k] = dt == SPILL_DT_Q5_0 ? std::fma(d, (float)p, acc[k]) : std::fma((float)p, d, acc[k]);
    }
  }
  return dt == SPILL_DT_Q5_1 ? Hsum8(acc) + summs : Hsum8(acc);
}

struct Xq {
  std::vector<uint8_t> buf;
  spill_k_xq xq{};
  explicit Xq(const std::vector<float> &x) : buf(spill_k_xq_bytes((uint32_t)x.size())) {
    spill_k_xq_init(&xq, buf.data(), (uint32_t)x.size());
    spill_k_xq_quantize(x.data(), &xq);
  }
};

TEST(Q5Test, Q8_1SumsAreGgmls) {
  std::vector<float> x = RandomVec(256, 3);
  x[7] = 0.0f;
  for (int i = 32; i < 64; i++) x[i] = 0.0f;  // an all-zero block: d = s = 0
  for (int isa : {0, 1}) {
    if (isa && !spill_k_isa_supported(SPILL_ISA_AVX2)) continue;
    std::vector<uint8_t> buf(spill_k_xq_bytes(256));
    spill_k_xq xq{};
    spill_k_xq_init(&xq, buf.data(), 256);
    (isa ? spill_k_xq_quantize__avx2 : spill_k_xq_quantize__ref)(x.data(), &xq);
    ASSERT_NE(xq.s32, nullptr);
    for (int b = 0; b < 8; b++) {
      float amax = 0;
      int sum = 0;
      for (int i = 0; i < 32; i++) {
        amax = std::fmax(amax, std::fabs(x[32 * b + i]));
        sum += xq.q32[32 * b + i];
      }
      const float want = spill_f16_to_f32(spill_f32_to_f16(amax / 127.0f * (float)sum));
      EXPECT_EQ(xq.s32[b], want) << "isa " << isa << " block " << b;
    }
    EXPECT_EQ(xq.s32[1], 0.0f);
  }
}

TEST(Q5Test, Q8BitExactAgainstGgmlFormula) {
  for (int dt : kDts)
    for (uint32_t cols : {32u, 64u, 96u, 1408u, 3584u, 10944u}) {
      const uint32_t rows = 11;
      Mat m = RandomMat(dt, rows, cols, 11 + cols + dt);
      std::vector<float> x = RandomVec(cols, 5 + cols);
      Xq q(x);
      ASSERT_TRUE(spill_k_matvec_xq_ok(&m.w));
      std::vector<float> yr(rows), yd(rows), ys(rows), ya(rows);
      spill_k_matvec_xq__ref(&m.w, &q.xq, yr.data(), 0, rows);
      spill_k_matvec_xq(&m.w, &q.xq, yd.data(), 0, rows);
      spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 0, 3);
      spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 3, rows);
      for (uint32_t r = 0; r < rows; r++) {
        const float want = GgmlDot(dt, m.buf.data() + (size_t)r * (cols / 32) * Bytes(dt), cols, q.xq.d32,
                                   q.xq.s32, q.xq.q32);
        uint32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &yr[r], 4);
        EXPECT_EQ(a, b) << dt << " cols " << cols << " row " << r << ": " << want << " vs " << yr[r];
      }
      EXPECT_EQ(0, std::memcmp(yr.data(), yd.data(), rows * 4)) << cols;
      EXPECT_EQ(0, std::memcmp(yr.data(), ys.data(), rows * 4)) << cols;
      if (!spill_k_isa_supported(SPILL_ISA_AVX2)) continue;
      (dt == SPILL_DT_Q5_0 ? spill_k_matvec_q5_0_xq__avx2 : spill_k_matvec_q5_1_xq__avx2)(&m.w, &q.xq, ya.data(),
                                                                                          0, rows);
      EXPECT_EQ(0, std::memcmp(yr.data(), ya.data(), rows * 4)) << dt << " " << cols;
    }
}

TEST(Q5Test, Q8NanInputGivesNanRows) {
  for (int dt : kDts) {
    Mat m = RandomMat(dt, 3, 64, 1);
    std::vector<float> x = RandomVec(64, 2);
    x[40] = NAN;
    Xq q(x);
    std::vector<float> y(3);
    spill_k_matvec_xq__ref(&m.w, &q.xq, y.data(), 0, 3);
    for (float v : y) EXPECT_TRUE(std::isnan(v)) << dt;
  }
}

// ---- the llama.cpp peer's own kernels, through its libggml-cpu ----

struct GgmlCpu {
  // ggml-cpu.h's struct ggml_type_traits_cpu (llama.cpp de3ff81)
  struct Traits {
    void (*from_float)(const float *, void *, int64_t);
    void (*vec_dot)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
    int vec_dot_type;
    int64_t nrows;
  };
  void *h = nullptr;
  const Traits *q5_0 = nullptr, *q5_1 = nullptr, *q8_0 = nullptr, *q8_1 = nullptr;
  std::string why;
  GgmlCpu() {
    const char *peer = std::getenv("SPILL_LLAMA_PEER");
    if (!peer || !*peer) {
      why = "SPILL_LLAMA_PEER not set (./lab test sets it once ./lab peers has built the peer)";
      return;
    }
    std::string dir(peer);
    dir = dir.substr(0, dir.find_last_of('/'));                    // .../bin
    const std::string lib = dir + "/../build/bin/libggml-cpu.so";  // the peer's build tree
    h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      why = "cannot load " + lib + ": " + dlerror();
      return;
    }
    auto init = (void (*)(void))dlsym(h, "ggml_cpu_init");
    auto get = (const Traits *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !get) {
      why = lib + " lacks ggml_cpu_init / ggml_get_type_traits_cpu";
      return;
    }
    init();
    q5_0 = get(6);  // GGML_TYPE_Q5_0
    q5_1 = get(7);  // GGML_TYPE_Q5_1
    q8_0 = get(8);  // GGML_TYPE_Q8_0
    q8_1 = get(9);  // GGML_TYPE_Q8_1
    if (!q5_0 || !q5_0->vec_dot || q5_0->vec_dot_type != 8 || !q5_1 || !q5_1->vec_dot ||
        q5_1->vec_dot_type != 9 || !q8_0 || !q8_0->from_float || !q8_1 || !q8_1->from_float) {
      why = lib + ": no Q5_0 x Q8_0 / Q5_1 x Q8_1 dot products";
      q5_0 = nullptr;
    }
  }
};

TEST(Q5Test, Q8BitExactAgainstLlamaCppPeer) {
  static GgmlCpu g;
  if (!g.q5_0) GTEST_SKIP() << "llama.cpp peer: " << g.why;
  for (int dt : kDts)
    for (uint32_t cols : {32u, 96u, 1408u, 3584u, 10944u}) {
      const uint32_t rows = 9, nb = cols / 32;
      const bool one = dt == SPILL_DT_Q5_1;
      Mat m = RandomMat(dt, rows, cols, 21 + cols + dt);
      std::vector<float> x = RandomVec(cols, 9 + cols);
      // ggml's own activation: block_q8_0 (f16 d, 32 int8) or block_q8_1 (f16 d, f16 s, 32 int8)
      const size_t ab = one ? 36 : 34, qo = one ? 4 : 2;
      std::vector<uint8_t> y8((size_t)nb * ab);
      (one ? g.q8_1 : g.q8_0)->from_float(x.data(), y8.data(), cols);
      Xq q(x);
      for (uint32_t b = 0; b < nb; b++) {
        ASSERT_EQ(F16(&y8[b * ab]), q.xq.d32[b]) << "scale, block " << b;
        if (one) ASSERT_EQ(F16(&y8[b * ab + 2]), q.xq.s32[b]) << "Q8_1 sum, block " << b;
        ASSERT_EQ(0, std::memcmp(&y8[b * ab + qo], q.xq.q32 + 32 * b, 32)) << "values, block " << b;
      }
      std::vector<float> ours(rows);
      spill_k_matvec_xq(&m.w, &q.xq, ours.data(), 0, rows);
      for (uint32_t r = 0; r < rows; r++) {
        float want = 0;
        (one ? g.q5_1 : g.q5_0)->vec_dot((int)cols, &want, 0, m.buf.data() + (size_t)r * nb * Bytes(dt), 0,
                                         y8.data(), 0, 1);
        uint32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &ours[r], 4);
        EXPECT_EQ(a, b) << dt << " cols " << cols << " row " << r << ": llama.cpp " << want << ", spill " << ours[r];
      }
    }
}

}  // namespace
