// engine/quant/kernels_xq_test.cc: the integer-activation matvec
// (kernels_xq.h) for q4_k, q5_k, q6_k and q8/q4 with groups 32/64/128.
// - the quantiser: every element within its derived half-step bound
//   (Q8_K: |x - q d| <= d/2 (1 + 1e-6); Q8_0: <= amax/127 (0.5 + 127 *
//   2^-11 + 1e-5), the f16 rounding of d included), Q8_K sums exact;
// - __ref against a double dot product of the dequantised weights and the
//   dequantised activation: the integer sums are exact, so only f32 scaling
//   and summation remain: (cols/32 + 8) * 2^-24 * sum (|w| + |min|)|xq|;
// - against the float input: within sum |w_e| * bound_e on top of that;
// - __avx2 and the dispatched kernel bit-identical to __ref, row splits too;
// - NaN input gives NaN rows, an all-zero block contributes 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"
#include "engine/quant/kernels_xq.h"

namespace {

bool IsKQuant(int dt) { return dt == SPILL_DT_Q4_K || dt == SPILL_DT_Q5_K || dt == SPILL_DT_Q6_K; }

struct Case {
  int dtype;
  uint32_t group;
};

struct Mat {
  std::vector<uint8_t> buf;
  spill_qmat w{};
};

Mat RandomMat(Case c, uint32_t rows, uint32_t cols, uint32_t seed) {
  Mat m;
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  m.w.dtype = c.dtype;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.group = c.group;
  if (IsKQuant(c.dtype)) {
    const uint32_t bb = spill_dtype_traits_of(c.dtype)->block_bytes, nb = rows * (cols / 256);
    m.buf.resize((size_t)nb * bb);
    for (auto &b : m.buf) b = (uint8_t)g();
    for (uint32_t b = 0; b < nb; b++) {
      uint8_t *p = m.buf.data() + (size_t)b * bb;
      uint16_t d = spill_f32_to_f16(u(g)), mn = spill_f32_to_f16(u(g));
      memcpy(p + (c.dtype == SPILL_DT_Q6_K ? 208 : 0), &d, 2);
      if (c.dtype != SPILL_DT_Q6_K) memcpy(p + 2, &mn, 2);
    }
    m.w.data = m.buf.data();
    return m;
  }
  const size_t vb = c.dtype == SPILL_DT_Q8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
  const size_t ns = (size_t)rows * (cols / c.group);
  m.buf.resize(vb + 2 * ns + 1);
  uint8_t *vals = m.buf.data() + 1; /* odd offset: scales 1-byte aligned as in real files */
  for (size_t i = 0; i < vb; i++) vals[i] = (uint8_t)g();
  for (size_t i = 0; i < ns; i++) {
    uint16_t h = spill_f32_to_f16(u(g));
    memcpy(vals + vb + 2 * i, &h, 2);
  }
  m.w.data = vals;
  m.w.scales = (const spill_k_u16_unaligned *)(const void *)(vals + vb);
  return m;
}

// |min| part of element e of row r (Q4_K/Q5_K: dmin * m_j; else 0).
double MinPart(const spill_qmat &w, uint32_t r, uint32_t e) {
  if (w.dtype != SPILL_DT_Q4_K && w.dtype != SPILL_DT_Q5_K) return 0.0;
  const size_t bb = spill_dtype_traits_of(w.dtype)->block_bytes;
  const uint8_t *b = (const uint8_t *)w.data + ((size_t)r * (w.cols / 256) + e / 256) * bb;
  const int j = (int)(e % 256) / 32;
  const uint8_t *q = b + 4;
  const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  return std::fabs((double)spill_f16_to_f32((uint16_t)(b[2] | (b[3] << 8))) * m);
}

struct Xq {
  std::vector<uint8_t> buf;
  spill_k_xq xq{};
  explicit Xq(const std::vector<float> &x) : buf(spill_k_xq_bytes((uint32_t)x.size())) {
    spill_k_xq_init(&xq, buf.data(), (uint32_t)x.size());
    spill_k_xq_quantize(x.data(), &xq);
  }
  // dequantised activation seen by a matrix of dtype dt
  double At(int dt, uint32_t e) const {
    if (IsKQuant(dt)) return (double)xq.q256[e] * xq.d256[e / 256];
    return (double)xq.q32[e] * xq.d32[e / 32];
  }
};

std::vector<float> RandomX(uint32_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto &v : x) v = nd(g);
  for (uint32_t i = 0; i < n; i += 97) x[i] *= -20.0f; /* outliers of either sign */
  return x;
}

// The derived per-element bound of |x - xq| for the form dtype dt reads.
double Bound(const std::vector<float> &x, const Xq &q, int dt, uint32_t e) {
  if (IsKQuant(dt)) return 0.5 * std::fabs((double)q.xq.d256[e / 256]) * (1 + 1e-6);
  double amax = 0;
  for (uint32_t i = e / 32 * 32; i < e / 32 * 32 + 32; i++) amax = std::fmax(amax, std::fabs((double)x[i]));
  return amax / 127.0 * (0.5 + 127.0 / 2048.0 + 1e-5);
}

class XqTest : public ::testing::TestWithParam<Case> {};

TEST_P(XqTest, QuantiserWithinHalfStep) {
  const Case c = GetParam();
  const uint32_t n = 1024;
  auto x = RandomX(n, 3);
  Xq q(x);
  for (uint32_t e = 0; e < n; e++)
    ASSERT_LE(std::fabs(x[e] - q.At(c.dtype, e)), Bound(x, q, c.dtype, e)) << "element " << e;
  for (uint32_t j = 0; j < n / 16; j++) {
    int s = 0;
    for (int i = 0; i < 16; i++) s += q.xq.q256[16 * j + i];
    ASSERT_EQ(s, q.xq.bsum[j]) << "bsum " << j;
  }
}

TEST_P(XqTest, MatvecMatchesDoubleAndFloatAndIsasAgree) {
  const Case c = GetParam();
  for (uint32_t cols : {256u, 1024u}) {
    const uint32_t rows = 9;
    Mat m = RandomMat(c, rows, cols, 17 + (uint32_t)c.dtype + c.group + cols);
    ASSERT_TRUE(spill_k_matvec_xq_ok(&m.w));
    auto x = RandomX(cols, 5 + cols);
    Xq q(x);
    std::vector<float> yr(rows), yd(rows), ys(rows, -1.0f), row(cols);
    spill_k_matvec_xq__ref(&m.w, &q.xq, yr.data(), 0, rows);
    spill_k_matvec_xq(&m.w, &q.xq, yd.data(), 0, rows);
    spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 0, 4);
    spill_k_matvec_xq(&m.w, &q.xq, ys.data(), 4, rows);
    EXPECT_EQ(0, memcmp(yr.data(), yd.data(), rows * sizeof(float))) << "dispatched vs ref";
    EXPECT_EQ(0, memcmp(yd.data(), ys.data(), rows * sizeof(float))) << "row split";
    std::vector<float> y3(rows, -1.0f); /* ranges of 3 and 6 rows: the 4-row q8/q4 pass's tails */
    spill_k_matvec_xq(&m.w, &q.xq, y3.data(), 0, 3);
    spill_k_matvec_xq(&m.w, &q.xq, y3.data(), 3, rows);
    EXPECT_EQ(0, memcmp(yd.data(), y3.data(), rows * sizeof(float))) << "row split at 3";
    for (uint32_t r = 0; r < rows; r++) {
      spill_k_dequant_row(&m.w, r, row.data());
      double want = 0, s = 0, wantf = 0, qerr = 0, magf = 0;
      for (uint32_t e = 0; e < cols; e++) {
        const double xe = q.At(c.dtype, e);
        want += row[e] * xe;
        s += (std::fabs((double)row[e]) + MinPart(m.w, r, e)) * std::fabs(xe);
        wantf += (double)row[e] * x[e];
        magf += std::fabs((double)row[e] * x[e]);
        qerr += std::fabs((double)row[e]) * Bound(x, q, c.dtype, e);
      }
      const double tol = (cols / 32 + 8) * 0x1p-24 * s;
      EXPECT_NEAR(yr[r], want, tol) << "row " << r << " cols " << cols;
      EXPECT_NEAR(yr[r], wantf, qerr + tol + 1e-6 * magf) << "vs float input, row " << r;
    }
    if (!spill_k_isa_supported(SPILL_ISA_AVX2)) GTEST_SKIP() << "CPU lacks AVX2: __avx2 not tested";
    std::vector<float> ya(rows);
    spill_k_matvec_xq__avx2(&m.w, &q.xq, ya.data(), 0, rows);
    EXPECT_EQ(0, memcmp(yr.data(), ya.data(), rows * sizeof(float))) << "avx2 vs ref, cols " << cols;
    spill_k_matvec_xq__avx2(&m.w, &q.xq, ya.data(), 2, 7);
    EXPECT_EQ(0, memcmp(yr.data(), ya.data(), rows * sizeof(float))) << "avx2 rows 2..7, cols " << cols;
  }
}

TEST_P(XqTest, NanInputAndZeroBlock) {
  const Case c = GetParam();
  const uint32_t rows = 3, cols = 512;
  Mat m = RandomMat(c, rows, cols, 99);
  auto x = RandomX(cols, 7);
  for (uint32_t i = 0; i < 256; i++) x[i] = 0.0f; /* block 0 all zero */
  std::vector<float> y(rows);
  Xq q(x);
  EXPECT_EQ(0.0f, q.xq.d256[0]);
  EXPECT_EQ(0.0f, q.xq.d32[0]);
  spill_k_matvec_xq__ref(&m.w, &q.xq, y.data(), 0, rows);
  for (uint32_t r = 0; r < rows; r++) EXPECT_TRUE(std::isfinite(y[r]));
  x[300] = NAN;
  Xq qn(x);
  spill_k_matvec_xq__ref(&m.w, &qn.xq, y.data(), 0, rows);
  for (uint32_t r = 0; r < rows; r++) EXPECT_TRUE(std::isnan(y[r])) << "ref row " << r;
  spill_k_matvec_xq(&m.w, &qn.xq, y.data(), 0, rows);
  for (uint32_t r = 0; r < rows; r++) EXPECT_TRUE(std::isnan(y[r])) << "dispatched row " << r;
}

// The AVX2 quantiser against __ref, byte for byte: random inputs with
// outliers, exact .5 ties (x * 127/amax on a half-integer), a block whose
// largest |x| appears first negative then positive, an all-zero block,
// blocks with inf / NaN, and subnormals.
TEST(XqQuantize, Avx2MatchesRefBitForBit) {
  if (!spill_k_isa_supported(SPILL_ISA_AVX2)) GTEST_SKIP() << "CPU lacks AVX2";
  const uint32_t n = 2048;
  auto x = RandomX(n, 77);
  for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f; /* amax 16: ties of x*127/16? and exact halves */
  x[31] = 127.0f;                                                /* block 0: x * 1 = ties at .5 */
  for (int i = 256; i < 512; i++) x[i] = 0.25f * (float)((i % 5) - 2);
  x[300] = -0.75f;
  x[301] = 0.75f; /* equal |x|, the negative first */
  for (int i = 512; i < 768; i++) x[i] = 0.0f;
  x[800] = INFINITY;
  x[1100] = NAN;
  for (int i = 1280; i < 1536; i++) x[i] = 1e-40f * (float)(i % 5);
  std::vector<uint8_t> ba(spill_k_xq_bytes(n)), br(spill_k_xq_bytes(n));
  spill_k_xq a{}, r{};
  spill_k_xq_init(&a, ba.data(), n);
  spill_k_xq_init(&r, br.data(), n);
  spill_k_xq_quantize__avx2(x.data(), &a);
  spill_k_xq_quantize__ref(x.data(), &r);
  for (uint32_t i = 0; i < n; i++) ASSERT_EQ(r.q32[i], a.q32[i]) << "q8_0 element " << i;
  for (uint32_t i = 0; i < n; i++) ASSERT_EQ(r.q256[i], a.q256[i]) << "q8_k element " << i;
  EXPECT_EQ(0, memcmp(a.bsum, r.bsum, n / 16 * sizeof(int16_t)));
  for (uint32_t b = 0; b < n / 32; b++)
    EXPECT_TRUE(memcmp(&a.d32[b], &r.d32[b], 4) == 0 || (std::isnan(a.d32[b]) && std::isnan(r.d32[b]))) << b;
  for (uint32_t b = 0; b < n / 256; b++)
    EXPECT_TRUE(memcmp(&a.d256[b], &r.d256[b], 4) == 0 || (std::isnan(a.d256[b]) && std::isnan(r.d256[b]))) << b;
  EXPECT_TRUE(std::isnan(r.d256[3]));
  EXPECT_EQ(0.0f, r.d256[2]);
  EXPECT_GT(r.d256[1], 0.0f); /* first of largest |x| (-0.75) negative: d = -max/127 > 0 */
}

TEST(XqOk, WhichWeightsHaveAnIntegerPath) {
  spill_qmat w = {};
  w.cols = 512;
  w.group = 32;
  for (int dt : {(int)SPILL_DT_Q4_K, (int)SPILL_DT_Q5_K, (int)SPILL_DT_Q6_K, (int)SPILL_DT_Q8,
                 (int)SPILL_DT_Q4}) {
    w.dtype = dt;
    EXPECT_TRUE(spill_k_matvec_xq_ok(&w)) << dt;
  }
  for (int dt : {(int)SPILL_DT_F32, (int)SPILL_DT_F16, (int)SPILL_DT_BF16,
                 (int)SPILL_DT_RVQ3}) {
    w.dtype = dt;
    EXPECT_FALSE(spill_k_matvec_xq_ok(&w)) << dt;
  }
  w.dtype = SPILL_DT_Q8;
  w.group = 16;
  EXPECT_FALSE(spill_k_matvec_xq_ok(&w));
  w.group = 48;
  EXPECT_FALSE(spill_k_matvec_xq_ok(&w));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, XqTest,
                         ::testing::Values(Case{SPILL_DT_Q4_K, 0}, Case{SPILL_DT_Q5_K, 0},
                                           Case{SPILL_DT_Q6_K, 0},
                                           Case{SPILL_DT_Q8, 32}, Case{SPILL_DT_Q4, 32},
                                           Case{SPILL_DT_Q8, 64}, Case{SPILL_DT_Q4, 128}));

}  // namespace
