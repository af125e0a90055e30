// engine/quant/kernels_test.cc: the kernels against hand-computed values and
// every SIMD twin against its __ref on random data.
//
// Error measure: for an output y[r] = sum_c w[r][c] x[c] the error of a twin
// is |y_isa - y_ref| / sum_c |w[r][c] x[c]| (relative to the magnitude bound
// of the sum, so cancellation in y cannot blow it up). The twins see the
// same dequantised weights as __ref; they differ only in summation order and
// FMA rounding, so every ceiling below is a few f32 ulps of the bound, which
// any correct order meets and any wrong index, nibble, scale or group (an
// O(1e-2) or larger error) does not. Twins the CPU lacks are skipped with
// GTEST_SKIP and a printed reason.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/base/half.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_isa.h"
#include "gtest/gtest.h"

namespace {

// f32/f16/bf16 matvec: weights convert exactly to f32, only the summation
// order (4-8 vector accumulators, FMA) differs: ~sqrt(n) ulps in practice,
// 1e-6 = ~8 ulps of the bound leaves a 10x margin at the tested sizes.
constexpr double kDenseCeiling = 1e-6;
// q8/q4: as dense, plus the group scale multiplies a vector of partial group
// sums instead of one scalar sum (one more rounding per group).
constexpr double kQuantCeiling = 1e-6;
// rvq3 LUT: one 8-term dot per entry; FMA vs separate mul+add: <= 8 ulps.
constexpr double kRvq3LutCeiling = 1e-6;
// rvq3 apply from the same LUT: only the order of the 3*(cols/8) additions.
// (The dispatched AVX2/AVX-512 apply keeps __ref's order and is checked
// bit-exact; the gather twins reorder.)
constexpr double kRvq3ApplyCeiling = 1e-6;
// rvq3 dequantise-and-FMA matvec vs its __ref: both round the summed
// codebook vector per weight; only the order (8 lanes, FMA) differs.
constexpr double kRvq3MatvecCeiling = 1e-6;
// rvq3 int16-LUT apply vs the f32-LUT __ref. Each lookup is off by at most
// half a step, scale_g / 2 with scale_g = (max |LUT entry| of group g) /
// 10922, so |error| <= s * sum_g 1.5 scale_g: checked per row as a hard
// bound (plus f32 rounding). Relative to sum |w x| the per-lookup errors are
// independent and partly cancel, so the relative error falls with the
// number of groups: measured (this test's printout) 2.5e-6 at 3584 columns
// and 4.6e-6 at 1280 with uniform x, up to 1.3e-5 at 1280 when every 37th
// channel of x is 300x larger (outliers inflate a group's scale); 5e-5 to
// 1.7e-4 at 8-200 columns. Ceilings: 2e-5 for model-sized rows (>= 1024
// columns; the brief's per-dot budget for 1e-4 logits is ~1e-5 typical) and
// 2e-4 for the tiny shapes. A wrong lane, scale or byte plane gives O(1).
constexpr double kRvq3QuantCeiling = 2e-5;
constexpr double kRvq3QuantSmallCeiling = 2e-4;
// rvq3 LUT+apply vs dequantise-then-matvec (in f64): the LUT rounds each
// stage's dot product, dequant rounds the summed codebook vector; the bound
// uses |cb0|+|cb1|+|cb2| per weight. A few ulps per term of the bound.
constexpr double kRvq3VsDequantCeiling = 2e-6;

typedef void (*matvec_fn)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);
typedef void (*lut_fn)(const float *, const float *, uint32_t, float *, uint32_t, uint32_t);
typedef void (*apply_fn)(const spill_qmat *, const float *, float *, uint32_t, uint32_t);

struct Twins {
  spill_isa isa;
  matvec_fn matvec;
  lut_fn lut;
  apply_fn apply;
  apply_fn apply_gather;  // the undispatched gather version (ref: itself)
  matvec_fn rvq3_matvec;
};

const Twins kTwins[] = {
    {SPILL_ISA_REF, spill_k_matvec__ref, spill_k_lut_rvq3_f32__ref, spill_k_apply_rvq3_f32__ref,
     spill_k_apply_rvq3_f32__ref, spill_k_matvec_rvq3_f32__ref},
    {SPILL_ISA_AVX2, spill_k_matvec__avx2, spill_k_lut_rvq3_f32__avx2, spill_k_apply_rvq3_f32__avx2,
     spill_k_apply_rvq3_f32_gather__avx2, spill_k_matvec_rvq3_f32__avx2},
    {SPILL_ISA_AVX512, spill_k_matvec__avx512, spill_k_lut_rvq3_f32__avx512,
     spill_k_apply_rvq3_f32__avx512, spill_k_apply_rvq3_f32_gather__avx512,
     spill_k_matvec_rvq3_f32__avx2},
};

// A matrix in one of the kernel layouts plus its view.
struct Mat {
  std::vector<uint8_t> buf;  // values/indices then scales, as on disk
  std::vector<float> codebook;
  spill_qmat m{};
};

std::vector<float> RandVec(std::mt19937 &rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto &f : v) f = d(rng);
  return v;
}

void SetScales(Mat &m, size_t value_bytes, size_t n_scales, std::mt19937 &rng) {
  m.buf.resize(value_bytes + 2 * n_scales);
  std::uniform_real_distribution<float> d(0.01f, 0.1f);
  std::vector<uint16_t> s(n_scales);
  for (auto &h : s) h = spill_f32_to_f16(d(rng));
  if (n_scales) std::memcpy(m.buf.data() + value_bytes, s.data(), 2 * n_scales);
}

void Finish(Mat &m, size_t value_bytes) {
  m.m.data = m.buf.data();
  m.m.scales = reinterpret_cast<const uint16_t *>(m.buf.data() + value_bytes);
  m.m.codebook = m.codebook.empty() ? nullptr : m.codebook.data();
}

Mat MakeMat(int dtype, uint32_t rows, uint32_t cols, uint32_t group, std::mt19937 &rng) {
  Mat m;
  m.m.dtype = dtype;
  m.m.rows = rows;
  m.m.cols = cols;
  m.m.group = group;
  const size_t n = (size_t)rows * cols;
  size_t vb = 0;
  switch (dtype) {
    case SPILL_DT_F32: {
      vb = n * 4;
      auto v = RandVec(rng, n);
      m.buf.resize(vb);
      std::memcpy(m.buf.data(), v.data(), vb);
      break;
    }
    case SPILL_DT_F16:
    case SPILL_DT_BF16: {
      vb = n * 2;
      auto v = RandVec(rng, n);
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; i++)
        h[i] = dtype == SPILL_DT_F16 ? spill_f32_to_f16(v[i]) : spill_f32_to_bf16(v[i]);
      m.buf.resize(vb);
      std::memcpy(m.buf.data(), h.data(), vb);
      break;
    }
    case SPILL_DT_Q8:
      vb = n;
      SetScales(m, vb, n / group, rng);
      for (size_t i = 0; i < vb; i++) m.buf[i] = (uint8_t)(rng() & 0xFF);  // any int8
      break;
    case SPILL_DT_Q4:
      vb = n / 2;
      SetScales(m, vb, n / group, rng);
      for (size_t i = 0; i < vb; i++) m.buf[i] = (uint8_t)(rng() & 0xFF);
      break;
    case SPILL_DT_RVQ3:
      vb = (size_t)rows * (cols / 8) * 3;
      SetScales(m, vb, rows, rng);
      for (size_t i = 0; i < vb; i++) m.buf[i] = (uint8_t)(rng() & 0xFF);
      m.codebook = RandVec(rng, 3 * 256 * 8);
      break;
  }
  Finish(m, vb);
  return m;
}

// sum_c |w[r][c] x[c]| with w dequantised by spill_k_dequant_row.
std::vector<double> Bound(const spill_qmat &w, const float *x) {
  std::vector<double> b(w.rows);
  std::vector<float> row(w.cols);
  for (uint32_t r = 0; r < w.rows; r++) {
    spill_k_dequant_row(&w, r, row.data());
    double s = 0;
    for (uint32_t c = 0; c < w.cols; c++) s += std::fabs((double)row[c] * x[c]);
    b[r] = s + 1e-30;
  }
  return b;
}

// Largest |a - b| / bound over rows.
double MaxRelErr(const std::vector<float> &a, const std::vector<float> &b,
                 const std::vector<double> &bound) {
  double e = 0;
  for (size_t i = 0; i < a.size(); i++) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    e = std::max(e, std::fabs((double)a[i] - b[i]) / bound[i]);
  }
  return e;
}

std::string DtName(int dt) {
  static const char *n[] = {"f32", "f16", "bf16", "q8", "q4", "rvq3"};
  return n[dt];
}

// Bound of the rvq3 LUT terms: s * sum_g sum_stage sum_j |cb_stage[i][j] x_j|.
std::vector<double> Rvq3Bound(const spill_qmat &w, const float *x) {
  std::vector<double> b(w.rows);
  const uint32_t ng = w.cols / 8;
  const uint8_t *idx = static_cast<const uint8_t *>(w.data);
  for (uint32_t r = 0; r < w.rows; r++) {
    double s = 0;
    for (uint32_t g = 0; g < ng; g++)
      for (int st = 0; st < 3; st++) {
        const float *e = w.codebook + ((size_t)st * 256 + idx[((size_t)r * ng + g) * 3 + st]) * 8;
        for (int j = 0; j < 8; j++) s += std::fabs((double)e[j] * x[g * 8 + j]);
      }
    b[r] = std::fabs(spill_f16_to_f32(w.scales[r])) * s + 1e-30;
  }
  return b;
}

class KernelsIsaTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    tw_ = kTwins[GetParam()];
    if (!spill_k_isa_supported(tw_.isa))
      GTEST_SKIP() << "CPU lacks " << (tw_.isa == SPILL_ISA_AVX2 ? "AVX2" : "AVX-512");
  }
  Twins tw_{};
};

struct Shape {
  int dtype;
  uint32_t rows, cols, group;
};

const Shape kShapes[] = {
    {SPILL_DT_F32, 37, 301, 0},  {SPILL_DT_F32, 5, 7, 0},     {SPILL_DT_F32, 19, 1024, 0},
    {SPILL_DT_F16, 37, 301, 0},  {SPILL_DT_F16, 3, 64, 0},    {SPILL_DT_BF16, 37, 301, 0},
    {SPILL_DT_BF16, 3, 80, 0},   {SPILL_DT_Q8, 37, 384, 32},  {SPILL_DT_Q8, 37, 384, 64},
    {SPILL_DT_Q8, 37, 384, 128}, {SPILL_DT_Q8, 17, 48, 16},   {SPILL_DT_Q8, 17, 40, 8},
    {SPILL_DT_Q8, 9, 60, 6},     {SPILL_DT_Q4, 37, 384, 32},  {SPILL_DT_Q4, 37, 384, 64},
    {SPILL_DT_Q4, 37, 384, 128}, {SPILL_DT_Q4, 17, 48, 16},   {SPILL_DT_Q4, 9, 60, 6},
};

TEST_P(KernelsIsaTest, MatvecMatchesRefWithinCeiling) {
  std::mt19937 rng(1234);
  for (const Shape &sh : kShapes) {
    Mat m = MakeMat(sh.dtype, sh.rows, sh.cols, sh.group, rng);
    auto x = RandVec(rng, sh.cols);
    std::vector<float> yr(sh.rows), yi(sh.rows);
    spill_k_matvec__ref(&m.m, x.data(), yr.data(), 0, sh.rows);
    tw_.matvec(&m.m, x.data(), yi.data(), 0, sh.rows);
    const double ceil =
        (sh.dtype == SPILL_DT_Q8 || sh.dtype == SPILL_DT_Q4) ? kQuantCeiling : kDenseCeiling;
    EXPECT_LE(MaxRelErr(yi, yr, Bound(m.m, x.data())), ceil)
        << DtName(sh.dtype) << " " << sh.rows << "x" << sh.cols << " group " << sh.group;
  }
}

TEST_P(KernelsIsaTest, MatvecRowSplitIsBitExactAndWritesOnlyItsRows) {
  std::mt19937 rng(99);
  for (const Shape &sh : kShapes) {
    Mat m = MakeMat(sh.dtype, sh.rows, sh.cols, sh.group, rng);
    auto x = RandVec(rng, sh.cols);
    std::vector<float> whole(sh.rows), split(sh.rows, -7.0f);
    tw_.matvec(&m.m, x.data(), whole.data(), 0, sh.rows);
    const uint32_t k = sh.rows / 3 + 1;
    tw_.matvec(&m.m, x.data(), split.data(), k, sh.rows);
    for (uint32_t r = 0; r < k; r++) ASSERT_EQ(split[r], -7.0f) << "row " << r << " written";
    tw_.matvec(&m.m, x.data(), split.data(), 0, k);
    EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), sh.rows * sizeof(float)))
        << DtName(sh.dtype) << " " << sh.rows << "x" << sh.cols;
  }
}

// 8 = one group; 72/136/200 leave 1, 9 and 25 groups past the 8/16-group steps.
const uint32_t kRvq3Cols[] = {8, 64, 72, 136, 200, 1280, 3584};

TEST_P(KernelsIsaTest, Rvq3LutMatchesRefWithinCeiling) {
  std::mt19937 rng(7);
  auto cb = RandVec(rng, 3 * 256 * 8);
  for (uint32_t cols : kRvq3Cols) {
    auto x = RandVec(rng, cols);
    const uint32_t ng = cols / 8;
    std::vector<float> lr(3 * ng * 256), li(3 * ng * 256);
    spill_k_lut_rvq3_f32__ref(cb.data(), x.data(), cols, lr.data(), 0, ng);
    tw_.lut(cb.data(), x.data(), cols, li.data(), 0, ng);
    double worst = 0;
    for (uint32_t s = 0; s < 3; s++)
      for (uint32_t g = 0; g < ng; g++)
        for (uint32_t k = 0; k < 256; k++) {
          double b = 1e-30;
          for (int j = 0; j < 8; j++)
            b += std::fabs((double)cb[(s * 256 + k) * 8 + j] * x[g * 8 + j]);
          const size_t i = ((size_t)s * ng + g) * 256 + k;
          worst = std::max(worst, std::fabs((double)li[i] - lr[i]) / b);
        }
    EXPECT_LE(worst, kRvq3LutCeiling) << "cols " << cols;
  }
}

TEST_P(KernelsIsaTest, Rvq3LutGroupSplitIsBitExact) {
  std::mt19937 rng(8);
  auto cb = RandVec(rng, 3 * 256 * 8);
  const uint32_t cols = 200, ng = cols / 8;
  auto x = RandVec(rng, cols);
  std::vector<float> whole(3 * ng * 256), split(3 * ng * 256);
  tw_.lut(cb.data(), x.data(), cols, whole.data(), 0, ng);
  tw_.lut(cb.data(), x.data(), cols, split.data(), 0, 11);
  tw_.lut(cb.data(), x.data(), cols, split.data(), 11, ng);
  EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)));
}

TEST_P(KernelsIsaTest, Rvq3ApplyMatchesRefAndRowSplitIsBitExact) {
  std::mt19937 rng(11);
  for (uint32_t cols : kRvq3Cols) {
    const uint32_t rows = 37;
    Mat m = MakeMat(SPILL_DT_RVQ3, rows, cols, 0, rng);
    auto x = RandVec(rng, cols);
    std::vector<float> lut(3 * (cols / 8) * 256);
    spill_k_lut_rvq3_f32__ref(m.m.codebook, x.data(), cols, lut.data(), 0, cols / 8);
    std::vector<float> yr(rows);
    spill_k_apply_rvq3_f32__ref(&m.m, lut.data(), yr.data(), 0, rows);
    for (apply_fn f : {tw_.apply, tw_.apply_gather}) {
      const char *which = f == tw_.apply ? "dispatched" : "gather";
      std::vector<float> yi(rows), ys(rows);
      f(&m.m, lut.data(), yi.data(), 0, rows);
      EXPECT_LE(MaxRelErr(yi, yr, Rvq3Bound(m.m, x.data())), kRvq3ApplyCeiling)
          << which << " cols " << cols;
      f(&m.m, lut.data(), ys.data(), 0, 16);
      f(&m.m, lut.data(), ys.data(), 16, rows);
      EXPECT_EQ(0, std::memcmp(yi.data(), ys.data(), rows * sizeof(float)))
          << which << " cols " << cols;
    }
  }
}

TEST_P(KernelsIsaTest, Rvq3ApplyEqualsDequantThenMatvec) {
  std::mt19937 rng(12);
  for (uint32_t cols : kRvq3Cols) {
    const uint32_t rows = 21;
    Mat m = MakeMat(SPILL_DT_RVQ3, rows, cols, 0, rng);
    auto x = RandVec(rng, cols);
    std::vector<float> lut(3 * (cols / 8) * 256), y(rows), yd(rows), row(cols);
    tw_.lut(m.m.codebook, x.data(), cols, lut.data(), 0, cols / 8);
    tw_.apply(&m.m, lut.data(), y.data(), 0, rows);
    for (uint32_t r = 0; r < rows; r++) {
      spill_k_dequant_row(&m.m, r, row.data());
      double s = 0;
      for (uint32_t c = 0; c < cols; c++) s += (double)row[c] * x[c];
      yd[r] = (float)s;
    }
    EXPECT_LE(MaxRelErr(y, yd, Rvq3Bound(m.m, x.data())), kRvq3VsDequantCeiling) << "cols " << cols;
  }
}

TEST_P(KernelsIsaTest, Rvq3DispatchedApplyIsBitExactWithRef) {
  std::mt19937 rng(13);
  for (uint32_t cols : kRvq3Cols) {
    const uint32_t rows = 71;  // 17 blocks of 4 rows and 3 single rows
    Mat m = MakeMat(SPILL_DT_RVQ3, rows, cols, 0, rng);
    auto x = RandVec(rng, cols);
    std::vector<float> lut(3 * (cols / 8) * 256), yr(rows), yi(rows);
    spill_k_lut_rvq3_f32__ref(m.m.codebook, x.data(), cols, lut.data(), 0, cols / 8);
    spill_k_apply_rvq3_f32__ref(&m.m, lut.data(), yr.data(), 0, rows);
    tw_.apply(&m.m, lut.data(), yi.data(), 0, rows);
    EXPECT_EQ(0, std::memcmp(yr.data(), yi.data(), rows * sizeof(float))) << "cols " << cols;
  }
}

TEST_P(KernelsIsaTest, Rvq3MatvecMatchesRefAndRowSplitIsBitExact) {
  std::mt19937 rng(14);
  for (uint32_t cols : kRvq3Cols) {
    const uint32_t rows = 39;
    Mat m = MakeMat(SPILL_DT_RVQ3, rows, cols, 0, rng);
    auto x = RandVec(rng, cols);
    std::vector<float> yr(rows), yi(rows), ys(rows, -7.0f);
    spill_k_matvec_rvq3_f32__ref(&m.m, x.data(), yr.data(), 0, rows);
    tw_.rvq3_matvec(&m.m, x.data(), yi.data(), 0, rows);
    EXPECT_LE(MaxRelErr(yi, yr, Rvq3Bound(m.m, x.data())), kRvq3MatvecCeiling) << "cols " << cols;
    tw_.rvq3_matvec(&m.m, x.data(), ys.data(), 5, rows);
    ASSERT_EQ(ys[4], -7.0f);
    tw_.rvq3_matvec(&m.m, x.data(), ys.data(), 0, 5);
    EXPECT_EQ(0, std::memcmp(yi.data(), ys.data(), rows * sizeof(float))) << "cols " << cols;
  }
}

TEST_P(KernelsIsaTest, DispatchCallsTheSelectedTwin) {
  ASSERT_TRUE(spill_k_set_isa(tw_.isa));
  EXPECT_EQ(spill_k_isa(), tw_.isa);
  std::mt19937 rng(5);
  Mat m = MakeMat(SPILL_DT_Q4, 9, 256, 128, rng);
  auto x = RandVec(rng, 256);
  std::vector<float> a(9), b(9);
  spill_k_matvec(&m.m, x.data(), a.data(), 0, 9);
  tw_.matvec(&m.m, x.data(), b.data(), 0, 9);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * 9));
  Mat q = MakeMat(SPILL_DT_RVQ3, 9, 136, 0, rng);
  std::vector<float> la(3 * 17 * 256), lb(la.size());
  spill_k_lut_rvq3_f32(q.m.codebook, x.data(), 136, la.data(), 0, 17);
  tw_.lut(q.m.codebook, x.data(), 136, lb.data(), 0, 17);
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), sizeof(float) * la.size()));
  spill_k_apply_rvq3_f32(&q.m, la.data(), a.data(), 0, 9);
  tw_.apply(&q.m, la.data(), b.data(), 0, 9);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * 9));
  spill_k_matvec_rvq3_f32(&q.m, x.data(), a.data(), 0, 9);
  tw_.rvq3_matvec(&q.m, x.data(), b.data(), 0, 9);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * 9));
  std::vector<uint8_t> ql(spill_k_qlut_rvq3_i16_bytes(136));
  spill_k_qlut_rvq3_i16(la.data(), 136, ql.data(), 0, 17);
  spill_k_apply_rvq3_i16(&q.m, ql.data(), a.data(), 0, 9);
  if (tw_.isa == SPILL_ISA_AVX512 && spill_k_vbmi_supported())
    spill_k_apply_rvq3_i16__avx512vbmi(&q.m, ql.data(), b.data(), 0, 9);
  else spill_k_apply_rvq3_i16__ref(&q.m, ql.data(), b.data(), 0, 9);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * 9));
  spill_k_set_isa(SPILL_ISA_REF);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelsIsaTest, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return std::string(spill_k_isa_name(kTwins[i.param].isa));
                         });

// ---- the int16 rvq3 LUT ----

// An rvq3 problem with its f32 LUT and quantised LUT.
struct QProblem {
  Mat m;
  std::vector<float> x, lut;
  std::vector<uint8_t> qlut;
};

QProblem MakeQ(uint32_t rows, uint32_t cols, std::mt19937 &rng, float x_outlier = 1.0f) {
  QProblem p;
  p.m = MakeMat(SPILL_DT_RVQ3, rows, cols, 0, rng);
  p.x = RandVec(rng, cols);
  for (uint32_t c = 0; c < cols; c += 37) p.x[c] *= x_outlier;
  const uint32_t ng = cols / 8;
  p.lut.resize(3 * ng * 256);
  spill_k_lut_rvq3_f32__ref(p.m.m.codebook, p.x.data(), cols, p.lut.data(), 0, ng);
  p.qlut.resize(spill_k_qlut_rvq3_i16_bytes(cols));
  spill_k_qlut_rvq3_i16(p.lut.data(), cols, p.qlut.data(), 0, ng / 2);  // two calls: by groups
  spill_k_qlut_rvq3_i16(p.lut.data(), cols, p.qlut.data(), ng / 2, ng);
  return p;
}

TEST(KernelsRvq3QuantTest, QlutStoresRoundedEntriesInTwoBytePlanes) {
  // One group (cols 8): x = (1, 0, ...), so lut[s][0][k] = cb[s][k][0].
  std::vector<float> cb(3 * 256 * 8, 0.0f);
  cb[(0 * 256 + 5) * 8] = 2.0f;   // the group's max: q = 10922
  cb[(1 * 256 + 7) * 8] = -1.0f;  // q = -5461
  cb[(2 * 256 + 9) * 8] = 0.25f;  // 1365.25 -> 1365
  std::vector<float> x(8, 0.0f), lut(3 * 256);
  x[0] = 1.0f;
  spill_k_lut_rvq3_f32__ref(cb.data(), x.data(), 8, lut.data(), 0, 1);
  std::vector<uint8_t> q(spill_k_qlut_rvq3_i16_bytes(8));
  ASSERT_EQ(q.size(), SPILL_K_RVQ3_QLUT_GROUP_BYTES + 4u);
  spill_k_qlut_rvq3_i16(lut.data(), 8, q.data(), 0, 1);
  auto entry = [&](int s, int k) {
    return (int16_t)(uint16_t)(q[s * 512 + k] | (q[s * 512 + 256 + k] << 8));
  };
  EXPECT_EQ(entry(0, 5), 10922);
  EXPECT_EQ(entry(1, 7), -5461);
  EXPECT_EQ(entry(2, 9), 1365);
  EXPECT_EQ(entry(2, 10), 0);
  float scale;
  std::memcpy(&scale, q.data() + SPILL_K_RVQ3_QLUT_GROUP_BYTES, 4);
  EXPECT_EQ(scale, 2.0f / 10922.0f);
}

TEST(KernelsRvq3QuantTest, ApplyQRefIsWithinTheQuantisationBoundOfTheF32Lut) {
  std::mt19937 rng(21);
  for (float outlier : {1.0f, 30.0f, 300.0f}) {
    for (uint32_t cols : kRvq3Cols) {
      const uint32_t rows = 33, ng = cols / 8;
      QProblem p = MakeQ(rows, cols, rng, outlier);
      std::vector<float> yf(rows), yq(rows);
      spill_k_apply_rvq3_f32__ref(&p.m.m, p.lut.data(), yf.data(), 0, rows);
      spill_k_apply_rvq3_i16__ref(&p.m.m, p.qlut.data(), yq.data(), 0, rows);
      const float *scale =
          reinterpret_cast<const float *>(p.qlut.data() + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES);
      double steps = 0;
      for (uint32_t g = 0; g < ng; g++) steps += 1.5 * scale[g];
      const auto bound = Rvq3Bound(p.m.m, p.x.data());
      for (uint32_t r = 0; r < rows; r++) {
        const double hard =
            std::fabs(spill_f16_to_f32(p.m.m.scales[r])) * steps * (1 + 1e-5) + 2e-6 * bound[r];
        EXPECT_LE(std::fabs((double)yq[r] - yf[r]), hard) << "cols " << cols << " row " << r;
      }
      const double rel = MaxRelErr(yq, yf, bound);
      std::printf("apply_q error: cols %u outlier %g: %.3g of sum |w x|\n", cols, outlier, rel);
      EXPECT_LE(rel, cols >= 1024 ? kRvq3QuantCeiling : kRvq3QuantSmallCeiling)
          << "cols " << cols << " outlier " << outlier;
    }
  }
}

TEST(KernelsRvq3QuantTest, QlutAvx2IsBitExactWithRef) {
  if (!spill_k_isa_supported(SPILL_ISA_AVX2)) GTEST_SKIP() << "CPU lacks AVX2";
  std::mt19937 rng(24);
  for (uint32_t cols : kRvq3Cols) {
    QProblem p = MakeQ(1, cols, rng, 30.0f);
    const uint32_t ng = cols / 8;
    p.lut[(2 * ng + ng / 2) * 256 + 3] = NAN;  // one poisoned group
    std::vector<uint8_t> qr(p.qlut.size(), 0xAB), qa(p.qlut.size(), 0xCD);
    spill_k_qlut_rvq3_i16__ref(p.lut.data(), cols, qr.data(), 0, ng);
    spill_k_qlut_rvq3_i16__avx2(p.lut.data(), cols, qa.data(), 0, ng / 3);
    spill_k_qlut_rvq3_i16__avx2(p.lut.data(), cols, qa.data(), ng / 3, ng);
    EXPECT_EQ(0, std::memcmp(qr.data(), qa.data(), ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES)) << cols;
    for (uint32_t g = 0; g < ng; g++) {  // scales: bitwise, NaN included
      uint32_t a, b;
      std::memcpy(&a, qr.data() + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES + 4 * g, 4);
      std::memcpy(&b, qa.data() + ng * SPILL_K_RVQ3_QLUT_GROUP_BYTES + 4 * g, 4);
      EXPECT_EQ(a, b) << "cols " << cols << " group " << g;
    }
  }
}

TEST(KernelsRvq3QuantTest, NanInputGivesNanRowsNotGarbage) {
  std::mt19937 rng(23);
  QProblem p = MakeQ(5, 64, rng);
  p.x[9] = NAN;  // group 1
  spill_k_lut_rvq3_f32__ref(p.m.m.codebook, p.x.data(), 64, p.lut.data(), 0, 8);
  spill_k_qlut_rvq3_i16(p.lut.data(), 64, p.qlut.data(), 0, 8);
  std::vector<float> y(5);
  spill_k_apply_rvq3_i16__ref(&p.m.m, p.qlut.data(), y.data(), 0, 5);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
  if (spill_k_vbmi_supported()) {
    std::vector<float> yv(5);
    spill_k_apply_rvq3_i16__avx512vbmi(&p.m.m, p.qlut.data(), yv.data(), 0, 5);
    for (float v : yv) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(KernelsRvq3QuantTest, ApplyQVbmiIsBitExactWithRefForAnyRowSplit) {
  if (!spill_k_vbmi_supported()) GTEST_SKIP() << "CPU lacks AVX-512 VBMI";
  std::mt19937 rng(22);
  for (uint32_t rows : {1u, 37u, 64u, 130u}) {
    for (uint32_t cols : kRvq3Cols) {
      QProblem p = MakeQ(rows, cols, rng, 5.0f);
      std::vector<float> yr(rows), yv(rows), ys(rows, -7.0f);
      spill_k_apply_rvq3_i16__ref(&p.m.m, p.qlut.data(), yr.data(), 0, rows);
      spill_k_apply_rvq3_i16__avx512vbmi(&p.m.m, p.qlut.data(), yv.data(), 0, rows);
      EXPECT_EQ(0, std::memcmp(yr.data(), yv.data(), rows * sizeof(float)))
          << rows << "x" << cols;
      const uint32_t k = rows / 3;
      spill_k_apply_rvq3_i16__avx512vbmi(&p.m.m, p.qlut.data(), ys.data(), k, rows);
      for (uint32_t r = 0; r < k; r++) ASSERT_EQ(ys[r], -7.0f) << "row " << r << " written";
      spill_k_apply_rvq3_i16__avx512vbmi(&p.m.m, p.qlut.data(), ys.data(), 0, k);
      EXPECT_EQ(0, std::memcmp(yr.data(), ys.data(), rows * sizeof(float)))
          << rows << "x" << cols << " split at " << k;
    }
  }
}

// ---- hand-computed cases for the reference (exact in f32) ----

TEST(KernelsRefTest, MatvecF32F16Bf16HandComputed) {
  const float w[6] = {1.0f, -2.0f, 0.5f, 4.0f, 0.25f, -1.5f};  // (2, 3)
  const float x[3] = {2.0f, 1.0f, -4.0f};
  uint16_t h[6], b[6];
  for (int i = 0; i < 6; i++) {
    h[i] = spill_f32_to_f16(w[i]);
    b[i] = spill_f32_to_bf16(w[i]);
  }
  const void *datas[3] = {w, h, b};
  for (int dt = 0; dt < 3; dt++) {
    spill_qmat m{};
    m.dtype = dt;
    m.rows = 2;
    m.cols = 3;
    m.data = datas[dt];
    float y[2];
    spill_k_matvec__ref(&m, x, y, 0, 2);
    EXPECT_EQ(y[0], 2.0f - 2.0f - 2.0f) << DtName(dt);  // -2
    EXPECT_EQ(y[1], 8.0f + 0.25f + 6.0f) << DtName(dt);  // 14.25
  }
}

TEST(KernelsRefTest, MatvecQ8HandComputed) {
  // (2, 32), group 16. Row 0: q = 1 everywhere, scales 0.5 and 2:
  // 0.5*16 + 2*16 = 40. Row 1: q[c] = c - 16, scales 1 and 0.25:
  // sum(-16..-1) + 0.25*sum(0..15) = -136 + 30 = -106. x = 1.
  std::vector<uint8_t> buf(64 + 8);
  for (int c = 0; c < 32; c++) {
    buf[c] = 1;
    buf[32 + c] = (uint8_t)(int8_t)(c - 16);
  }
  const uint16_t s[4] = {spill_f32_to_f16(0.5f), spill_f32_to_f16(2.0f), spill_f32_to_f16(1.0f),
                         spill_f32_to_f16(0.25f)};
  std::memcpy(buf.data() + 64, s, 8);
  spill_qmat m{};
  m.dtype = SPILL_DT_Q8;
  m.rows = 2;
  m.cols = 32;
  m.group = 16;
  m.data = buf.data();
  m.scales = reinterpret_cast<const uint16_t *>(buf.data() + 64);
  std::vector<float> x(32, 1.0f);
  float y[2];
  spill_k_matvec__ref(&m, x.data(), y, 0, 2);
  EXPECT_EQ(y[0], 40.0f);
  EXPECT_EQ(y[1], -106.0f);
  float row[32];
  spill_k_dequant_row(&m, 1, row);
  EXPECT_EQ(row[0], -16.0f);
  EXPECT_EQ(row[31], 0.25f * 15.0f);
}

TEST(KernelsRefTest, MatvecQ4HandComputed) {
  // (2, 16), group 16, x[c] = c. Row 0: bytes 0x98 -> even elements 8-8 = 0,
  // odd elements 9-8 = 1; scale 0.5: 0.5*(1+3+...+15) = 32. Row 1: bytes
  // 0x0F -> even 15-8 = 7, odd 0-8 = -8; scale 2:
  // 2*(7*(0+2+...+14) - 8*(1+3+...+15)) = 2*(392 - 512) = -240.
  std::vector<uint8_t> buf(16 + 4);
  for (int i = 0; i < 8; i++) {
    buf[i] = 0x98;
    buf[8 + i] = 0x0F;
  }
  const uint16_t s[2] = {spill_f32_to_f16(0.5f), spill_f32_to_f16(2.0f)};
  std::memcpy(buf.data() + 16, s, 4);
  spill_qmat m{};
  m.dtype = SPILL_DT_Q4;
  m.rows = 2;
  m.cols = 16;
  m.group = 16;
  m.data = buf.data();
  m.scales = reinterpret_cast<const uint16_t *>(buf.data() + 16);
  float x[16];
  for (int c = 0; c < 16; c++) x[c] = (float)c;
  float y[2];
  spill_k_matvec__ref(&m, x, y, 0, 2);
  EXPECT_EQ(y[0], 32.0f);
  EXPECT_EQ(y[1], -240.0f);
  float row[16];
  spill_k_dequant_row(&m, 1, row);
  EXPECT_EQ(row[0], 14.0f);
  EXPECT_EQ(row[1], -16.0f);
}

TEST(KernelsRefTest, Rvq3HandComputed) {
  // One row of 16 columns (2 groups), scale 2, x = 1. Codebooks are zero
  // except cb0[1] = 1, cb1[2] = (0,1,0,1,...), cb2[3] = 0.5. Group 0 uses
  // (1, 2, 3): weights 2*(1.5, 2.5, 1.5, 2.5, ...); group 1 uses (0, 0, 0): 0.
  // y = 2 * (4*1.5 + 4*2.5) = 32.
  std::vector<float> cb(3 * 256 * 8, 0.0f);
  for (int j = 0; j < 8; j++) {
    cb[(0 * 256 + 1) * 8 + j] = 1.0f;
    cb[(1 * 256 + 2) * 8 + j] = (float)(j & 1);
    cb[(2 * 256 + 3) * 8 + j] = 0.5f;
  }
  uint8_t buf[6 + 2] = {1, 2, 3, 0, 0, 0};
  const uint16_t s = spill_f32_to_f16(2.0f);
  std::memcpy(buf + 6, &s, 2);
  spill_qmat m{};
  m.dtype = SPILL_DT_RVQ3;
  m.rows = 1;
  m.cols = 16;
  m.data = buf;
  m.scales = reinterpret_cast<const uint16_t *>(buf + 6);
  m.codebook = cb.data();
  std::vector<float> x(16, 1.0f), lut(3 * 2 * 256);
  spill_k_lut_rvq3_f32__ref(cb.data(), x.data(), 16, lut.data(), 0, 2);
  EXPECT_EQ(lut[(0 * 2 + 0) * 256 + 1], 8.0f);
  EXPECT_EQ(lut[(1 * 2 + 1) * 256 + 2], 4.0f);
  EXPECT_EQ(lut[(2 * 2 + 0) * 256 + 3], 4.0f);
  float y = 0;
  spill_k_apply_rvq3_f32__ref(&m, lut.data(), &y, 0, 1);
  EXPECT_EQ(y, 32.0f);
  float row[16];
  spill_k_dequant_row(&m, 0, row);
  EXPECT_EQ(row[0], 3.0f);
  EXPECT_EQ(row[1], 5.0f);
  EXPECT_EQ(row[8], 0.0f);
}

TEST(KernelsRefTest, TopkOrdersByScoreThenLowerIndexAndPutsNanLast) {
  const float s[7] = {0.5f, 2.0f, NAN, 2.0f, -1.0f, 3.0f, 0.5f};
  uint32_t idx[5];
  spill_k_topk(s, 7, 5, idx);
  const uint32_t want[5] = {5, 1, 3, 0, 6};
  for (int i = 0; i < 5; i++) EXPECT_EQ(idx[i], want[i]) << i;
  uint32_t all[7];
  spill_k_topk(s, 7, 7, all);
  EXPECT_EQ(all[5], 4u);
  EXPECT_EQ(all[6], 2u);
}

TEST(KernelsRefTest, SoftmaxRmsnormSiluAxpyDot) {
  float v[3] = {1000.0f, 1000.0f, -INFINITY};  // max-subtraction keeps it finite
  spill_k_softmax(v, 3);
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], 0.5f);
  EXPECT_EQ(v[2], 0.0f);
  const float x[4] = {1.0f, -1.0f, 1.0f, -1.0f}, w[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  float y[4];
  spill_k_rmsnorm(x, w, y, 4, 0.0f);  // rms = 1
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[3], -4.0f);
  float g[2] = {0.0f, 20.0f};
  const float u[2] = {3.0f, 2.0f};
  spill_k_silu_mul(g, u, 2);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[1], 40.0f, 1e-4);
  EXPECT_EQ(spill_k_dot(x, w, 4), -2.0f);
}

TEST(KernelsDispatchTest, InitPicksASupportedIsaAndRejectsUnknown) {
  const spill_isa isa = spill_k_init();
  EXPECT_TRUE(spill_k_isa_supported(isa));
  EXPECT_EQ(spill_k_init(), isa);  // idempotent
  EXPECT_FALSE(spill_k_set_isa((spill_isa)7));
  EXPECT_STREQ(spill_k_isa_name(SPILL_ISA_AVX512), "avx512");
}

}  // namespace

namespace {

// One delta-rule step in double from the equations of docs/MODEL.md "ATTN GDN".
void GdnStepDouble(std::vector<double> &S, int d, double decay, const std::vector<float> &k,
                   const std::vector<float> &q, double beta, const std::vector<float> &v,
                   std::vector<double> &o) {
  std::vector<double> u(d, 0.0);
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) S[a * d + b] *= decay;
  for (int b = 0; b < d; b++) {
    double s = 0;
    for (int a = 0; a < d; a++) s += S[a * d + b] * k[a];
    u[b] = beta * (v[b] - s);
  }
  for (int a = 0; a < d; a++)
    for (int b = 0; b < d; b++) S[a * d + b] += k[a] * u[b];
  o.assign(d, 0.0);
  for (int b = 0; b < d; b++)
    for (int a = 0; a < d; a++) o[b] += S[a * d + b] * q[a];
}

}  // namespace

// spill_k_gdn_step: __ref follows the equations (against double over 6
// steps, within f32 rounding), __avx2 is bit-identical to __ref (state and
// output) at head widths with and without an 8-wide tail, and the
// dispatched kernel is one of them.
TEST(KernelsGdnTest, GdnStepRefMatchesDoubleAndAvx2IsBitExact) {
  std::mt19937 rng(35);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  for (int d : {5, 16, 37, 128}) {
    std::vector<float> Sr((size_t)d * d, 0.0f), Sa = Sr, Sd = Sr, ur(d), ua(d), ud(d), orf(d),
        oa(d), od(d);
    std::vector<double> S64((size_t)d * d, 0.0), o64;
    for (int step = 0; step < 6; step++) {
      std::vector<float> k(d), q(d), v(d);
      for (int i = 0; i < d; i++) {
        k[i] = g(rng) / std::sqrt((float)d);
        q[i] = g(rng) / std::sqrt((float)d);
        v[i] = g(rng);
      }
      const float decay = 0.5f + 0.5f * u01(rng), beta = u01(rng);
      spill_k_gdn_step__ref(Sr.data(), d, decay, k.data(), q.data(), beta, v.data(), ur.data(), orf.data());
      spill_k_gdn_step(Sd.data(), d, decay, k.data(), q.data(), beta, v.data(), ud.data(), od.data());
      GdnStepDouble(S64, d, decay, k, q, beta, v, o64);
      for (int b = 0; b < d; b++) EXPECT_NEAR(orf[b], o64[b], 1e-5 * (1.0 + std::fabs(o64[b]))) << d << " " << b;
      if (spill_k_isa_supported(SPILL_ISA_AVX2)) {
        spill_k_gdn_step__avx2(Sa.data(), d, decay, k.data(), q.data(), beta, v.data(), ua.data(), oa.data());
        EXPECT_EQ(0, std::memcmp(Sa.data(), Sr.data(), Sr.size() * 4)) << "state, d " << d << " step " << step;
        EXPECT_EQ(0, std::memcmp(oa.data(), orf.data(), (size_t)d * 4)) << "output, d " << d << " step " << step;
      }
      EXPECT_EQ(0, std::memcmp(od.data(), orf.data(), (size_t)d * 4)) << "dispatched, d " << d;
    }
  }
}
