// engine/quant/kernels_mxfp4_test.cc: the mxfp4 dtype (kernels_mxfp4.h).
// - dequantisation exact for every code and every exponent 0..254 (the
//   subnormal scales of e = 0 and 1 included) against the OCP MX definition
//   value(code) * 2^(e - 127) computed independently in double;
// - f32 input: __ref against a double dot of the dequantised weights within
//   1e-6 of sum |w x| (one f32 rounding per element and per block), __avx2
//   against __ref within the same ceiling (another summation order), the
//   dispatched kernel bit-identical for any row split;
// - Q8_0 input (act_quant q8): __ref, __avx2 and the dispatched kernel bit
//   for bit equal to ggml's vec_dot_mxfp4_q8_0 AVX2 arithmetic written out
//   here independently (two block-parity accumulators of 8 lanes, fma per
//   block, the fixed lane sum, the unpaired last block added as mul then
//   add), for even and odd block counts;
// - with the llama.cpp peer built (SPILL_LLAMA_PEER, ./lab test sets it):
//   the same rows through ggml's own Q8_0 quantiser and vec_dot_mxfp4_q8_0
//   from the peer's libggml-cpu, bit for bit (skipped with the reason
//   otherwise);
// - the compressed-tensors repack: lossless both ways, values as defined.
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
#include "engine/quant/kernels_mxfp4.h"
#include "engine/quant/kernels_xq.h"

namespace {

constexpr uint32_t kB = 17;  // block bytes

// e2m1 by the OCP MX spec: sign, 2 exponent bits (bias 1), 1 mantissa bit.
double E2m1(int code) {
  const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return s ? -mag : mag;
}

struct Mat {
  std::vector<uint8_t> buf;
  spill_qmat w{};
};

// Random codes; exponents uniform in [lo, hi].
Mat RandomMat(uint32_t rows, uint32_t cols, uint32_t seed, int lo = 118, int hi = 130) {
  Mat m;
  std::mt19937 g(seed);
  m.buf.resize((size_t)rows * (cols / 32) * kB);
  for (size_t i = 0; i < m.buf.size(); i++) m.buf[i] = (uint8_t)g();
  std::uniform_int_distribution<int> ex(lo, hi);
  for (size_t b = 0; b < m.buf.size(); b += kB) m.buf[b] = (uint8_t)ex(g);
  m.w.dtype = SPILL_DT_MXFP4;
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

TEST(Mxfp4Test, TraitsRow) {
  const spill_dtype_traits *t = spill_dtype_traits_of(SPILL_DT_MXFP4);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, "mxfp4");
  EXPECT_EQ(t->block_elems, SPILL_K_MXFP4_BLOCK);
  EXPECT_EQ(t->block_bytes, SPILL_K_MXFP4_BLOCK_BYTES);
  uint64_t rb = 0, rs = 0;
  ASSERT_TRUE(spill_dtype_row_layout(SPILL_DT_MXFP4, 3584, 0, &rb, &rs));
  EXPECT_EQ(rb, 3584u / 32 * 17);
  EXPECT_EQ(rs, 0u);
  EXPECT_FALSE(spill_dtype_row_layout(SPILL_DT_MXFP4, 3584 + 16, 0, &rb, &rs));
}

TEST(Mxfp4Test, DequantExactForEveryCodeAndExponent) {
  for (int e = 0; e <= 254; e++) {
    EXPECT_EQ(spill_k_e8m0_half((uint8_t)e), (float)std::ldexp(1.0, e - 128)) << e;
    uint8_t blk[kB];
    blk[0] = (uint8_t)e;
    for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(j | (15 - j) << 4);  // every code twice
    float out[32];
    spill_k_mxfp4_dequant_block(blk, out);
    for (int j = 0; j < 16; j++) {
      const float lo = (float)(E2m1(j) * std::ldexp(1.0, e - 127));
      const float hi = (float)(E2m1(15 - j) * std::ldexp(1.0, e - 127));
      ASSERT_EQ(out[j], lo) << "e " << e << " code " << j;
      ASSERT_EQ(out[j + 16], hi) << "e " << e << " code " << 15 - j;
      if (lo == 0.0f) ASSERT_FALSE(std::signbit(out[j]) && !std::signbit(lo)) << e;
    }
    // the same through the kernel table's row dequantiser
    spill_qmat w{};
    w.dtype = SPILL_DT_MXFP4;
    w.rows = 1;
    w.cols = 32;
    w.data = blk;
    float row[32];
    spill_k_dequant_row(&w, 0, row);
    ASSERT_EQ(0, std::memcmp(row, out, sizeof row)) << e;
  }
  // the subnormal scales: 2^-128 and 2^-127, so code 1 (0.5) gives 2^-129, 2^-128
  EXPECT_EQ(spill_k_e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(spill_k_e8m0_half(1), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::fpclassify(spill_k_e8m0_half(0)) == FP_SUBNORMAL);
}

double SumAbs(const spill_qmat &w, uint32_t r, const float *x) {
  std::vector<float> row(w.cols);
  spill_k_dequant_row(&w, r, row.data());
  double s = 0;
  for (uint32_t c = 0; c < w.cols; c++) s += std::fabs((double)row[c] * x[c]);
  return s;
}

TEST(Mxfp4Test, F32RefAgainstDoubleAndAvx2AgainstRef) {
  for (uint32_t cols : {32u, 96u, 1024u, 3584u}) {
    const uint32_t rows = 13;
    Mat m = RandomMat(rows, cols, 7 + cols);
    std::vector<float> x = RandomVec(cols, 3 + cols), yr(rows), ya(rows), yd(rows), ys(rows);
    spill_k_matvec__ref(&m.w, x.data(), yr.data(), 0, rows);
    for (uint32_t r = 0; r < rows; r++) {
      std::vector<float> row(cols);
      spill_k_dequant_row(&m.w, r, row.data());
      double want = 0;
      for (uint32_t c = 0; c < cols; c++) want += (double)row[c] * x[c];
      EXPECT_LE(std::fabs(yr[r] - want), 1e-6 * SumAbs(m.w, r, x.data())) << cols << " row " << r;
    }
    spill_k_matvec(&m.w, x.data(), yd.data(), 0, rows);
    spill_k_matvec(&m.w, x.data(), ys.data(), 0, 5);
    spill_k_matvec(&m.w, x.data(), ys.data(), 5, rows);
    EXPECT_EQ(0, std::memcmp(yd.data(), ys.data(), rows * sizeof(float))) << "row split, " << cols;
    if (!spill_k_isa_supported(SPILL_ISA_AVX2)) {
      GTEST_SKIP() << "CPU lacks AVX2: spill_k_matvec_mxfp4_f32__avx2 not tested";
    }
    spill_k_matvec_mxfp4_f32__avx2(&m.w, x.data(), ya.data(), 0, rows);
    for (uint32_t r = 0; r < rows; r++)
      EXPECT_LE(std::fabs(ya[r] - yr[r]), 1e-6 * SumAbs(m.w, r, x.data())) << cols << " row " << r;
  }
}

// ggml's AVX2 ggml_vec_dot_mxfp4_q8_0, written out from its definition
// (not from our kernels): x is the Q8_0 activation (d as f32, q).
float GgmlDot(const uint8_t *row, uint32_t cols, const float *xd, const int8_t *xq) {
  static const int kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const uint32_t nb = cols / 32;
  float acc1[8] = {0}, acc2[8] = {0};
  uint32_t ib = 0;
  for (; ib + 1 < nb; ib += 2) {
    for (int h = 0; h < 2; h++) {
      const uint8_t *b = row + (size_t)(ib + h) * kB;
      const int8_t *q = xq + (size_t)(ib + h) * 32;
      const float d = xd[ib + h] * (float)std::ldexp(1.0, b[0] - 128);
      for (int k = 0; k < 8; k++) {
        int32_t p = 0;
        for (int e = 4 * k; e < 4 * k + 4; e++) {
          const int code = e < 16 ? b[1 + e] & 0xF : b[1 + e - 16] >> 4;
          p += kv[code] * q[e];
        }
        float *a = h ? acc2 : acc1;
        a[k] = std::fma(d, (float)p, a[k]);
      }
    }
  }
  float v[8];
  for (int k = 0; k < 8; k++) v[k] = acc1[k] + acc2[k];
  // hsum_float_8: high half + low half, then movehl, then movehdup
  float r4[4];
  for (int k = 0; k < 4; k++) r4[k] = v[k + 4] + v[k];
  const float r0 = r4[0] + r4[2], r1 = r4[1] + r4[3];
  float sumf = r0 + r1;
  for (; ib < nb; ib++) {
    const uint8_t *b = row + (size_t)ib * kB;
    const int8_t *q = xq + (size_t)ib * 32;
    const float d = xd[ib] * (float)std::ldexp(1.0, b[0] - 128);
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < 16; j++) {
      sumi1 += q[j] * kv[b[1 + j] & 0xF];
      sumi2 += q[j + 16] * kv[b[1 + j] >> 4];
    }
    const float t = d * (float)(sumi1 + sumi2);
    sumf = sumf + t;
  }
  return sumf;
}

struct Xq {
  std::vector<uint8_t> buf;
  spill_k_xq xq{};
  explicit Xq(const std::vector<float> &x) : buf(spill_k_xq_bytes((uint32_t)x.size())) {
    spill_k_xq_init(&xq, buf.data(), (uint32_t)x.size());
    spill_k_xq_quantize(x.data(), &xq);
  }
};

TEST(Mxfp4Test, Q8BitExactAgainstGgmlFormula) {
  // odd block counts (1, 3, 97) exercise the unpaired last block
  for (uint32_t cols : {32u, 64u, 96u, 3072u, 3104u, 3584u}) {
    const uint32_t rows = 11;
    // exponents over the whole range but the top (products stay finite)
    Mat m = RandomMat(rows, cols, 11 + cols, 0, 140);
    std::vector<float> x = RandomVec(cols, 5 + cols);
    Xq q(x);
    ASSERT_TRUE(spill_k_matvec_xq_ok(&m.w));
    std::vector<float> yr(rows), yd(rows), ys(rows), ya(rows);
    spill_k_matvec_xq__ref(&m.w, &q.xq, yr.data(), 0, rows);
    spill_k_matvec_xq(&m.w, &q.xq, yd.data(), 0, rows);
    spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 0, 3);
    spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 3, rows);
    for (uint32_t r = 0; r < rows; r++) {
      const float want = GgmlDot(m.buf.data() + (size_t)r * (cols / 32) * kB, cols, q.xq.d32, q.xq.q32);
      uint32_t a, b;
      std::memcpy(&a, &want, 4);
      std::memcpy(&b, &yr[r], 4);
      EXPECT_EQ(a, b) << "cols " << cols << " row " << r << ": " << want << " vs " << yr[r];
    }
    EXPECT_EQ(0, std::memcmp(yr.data(), yd.data(), rows * 4)) << cols;
    EXPECT_EQ(0, std::memcmp(yr.data(), ys.data(), rows * 4)) << cols;
    if (!spill_k_isa_supported(SPILL_ISA_AVX2)) {
      GTEST_SKIP() << "CPU lacks AVX2: spill_k_matvec_mxfp4_xq__avx2 not tested";
    }
    spill_k_matvec_mxfp4_xq__avx2(&m.w, &q.xq, ya.data(), 0, rows);
    EXPECT_EQ(0, std::memcmp(yr.data(), ya.data(), rows * 4)) << cols;
  }
}

TEST(Mxfp4Test, Q8NanInputGivesNanRows) {
  Mat m = RandomMat(3, 64, 1);
  std::vector<float> x = RandomVec(64, 2);
  x[40] = NAN;
  Xq q(x);
  std::vector<float> y(3);
  spill_k_matvec_xq__ref(&m.w, &q.xq, y.data(), 0, 3);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// compressed-tensors mxfp4-pack-quantized <-> ggml blocks: both directions
// return the input bytes, and every element dequantises from the blocks to
// the value the compressed-tensors layout defines for it.
TEST(Mxfp4Test, RepackFromCompressedTensorsIsLosslessBothWays) {
  const uint64_t rows = 5, cols = 96, nb = cols / 32;
  std::mt19937 g(77);
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * nb);
  for (auto &v : packed) v = (uint8_t)g();
  for (auto &v : scales) v = (uint8_t)(g() % 255);
  std::vector<uint8_t> blocks(rows * nb * kB), packed2(packed.size()), scales2(scales.size());
  spill_k_mxfp4_from_packed(packed.data(), scales.data(), rows, cols, blocks.data());
  spill_k_mxfp4_to_packed(blocks.data(), rows, cols, packed2.data(), scales2.data());
  EXPECT_EQ(packed, packed2);
  EXPECT_EQ(scales, scales2);
  for (uint64_t r = 0; r < rows; r++) {
    spill_qmat w{};
    w.dtype = SPILL_DT_MXFP4;
    w.rows = (uint32_t)rows;
    w.cols = (uint32_t)cols;
    w.data = blocks.data();
    std::vector<float> row(cols);
    spill_k_dequant_row(&w, (uint32_t)r, row.data());
    for (uint64_t c = 0; c < cols; c++) {
      const int code = (packed[r * cols / 2 + c / 2] >> (4 * (c & 1))) & 0xF;
      const float want = (float)(E2m1(code) * std::ldexp(1.0, scales[r * nb + c / 32] - 127));
      ASSERT_EQ(row[c], want) << "row " << r << " col " << c;
    }
  }
  // and from blocks: blocks -> packed -> blocks is the identity too
  std::mt19937 h(78);
  for (auto &v : blocks) v = (uint8_t)h();
  std::vector<uint8_t> blocks2(blocks.size());
  spill_k_mxfp4_to_packed(blocks.data(), rows, cols, packed2.data(), scales2.data());
  spill_k_mxfp4_from_packed(packed2.data(), scales2.data(), rows, cols, blocks2.data());
  EXPECT_EQ(blocks, blocks2);
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
  const Traits *mxfp4 = nullptr, *q8_0 = nullptr;
  std::string why;
  GgmlCpu() {
    const char *peer = std::getenv("SPILL_LLAMA_PEER");
    if (!peer || !*peer) {
      why = "SPILL_LLAMA_PEER not set (./lab test sets it once ./lab peers has built the peer)";
      return;
    }
    std::string dir(peer);
    dir = dir.substr(0, dir.find_last_of('/'));                // .../bin
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
    mxfp4 = get(39);  // GGML_TYPE_MXFP4
    q8_0 = get(8);    // GGML_TYPE_Q8_0
    if (!mxfp4 || !mxfp4->vec_dot || mxfp4->vec_dot_type != 8 || !q8_0 || !q8_0->from_float) {
      why = lib + ": no MXFP4 x Q8_0 dot product";
      mxfp4 = nullptr;
    }
  }
};

TEST(Mxfp4Test, Q8BitExactAgainstLlamaCppPeer) {
  static GgmlCpu g;
  if (!g.mxfp4) GTEST_SKIP() << "llama.cpp peer: " << g.why;
  for (uint32_t cols : {32u, 96u, 256u, 3072u, 3104u, 3584u}) {
    const uint32_t rows = 9, nb = cols / 32;
    Mat m = RandomMat(rows, cols, 21 + cols, 0, 140);
    std::vector<float> x = RandomVec(cols, 9 + cols);
    // ggml's own Q8_0 activation (block_q8_0: f16 d, 32 int8)
    std::vector<uint8_t> y8((size_t)nb * 34);
    g.q8_0->from_float(x.data(), y8.data(), cols);
    Xq q(x);
    for (uint32_t b = 0; b < nb; b++) {
      uint16_t d;
      std::memcpy(&d, &y8[(size_t)b * 34], 2);
      ASSERT_EQ(spill_f16_to_f32(d), q.xq.d32[b]) << "Q8_0 scale, block " << b;
      ASSERT_EQ(0, std::memcmp(&y8[(size_t)b * 34 + 2], q.xq.q32 + 32 * b, 32)) << "Q8_0 values, block " << b;
    }
    std::vector<float> ours(rows);
    spill_k_matvec_xq(&m.w, &q.xq, ours.data(), 0, rows);
    for (uint32_t r = 0; r < rows; r++) {
      float want = 0;
      g.mxfp4->vec_dot((int)cols, &want, 0, m.buf.data() + (size_t)r * nb * kB, 0, y8.data(), 0, 1);
      uint32_t a, b;
      std::memcpy(&a, &want, 4);
      std::memcpy(&b, &ours[r], 4);
      EXPECT_EQ(a, b) << "cols " << cols << " row " << r << ": llama.cpp " << want << ", spill " << ours[r];
    }
  }
}

}  // namespace
