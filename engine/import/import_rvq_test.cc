// engine/import/import_rvq_test.cc: the rvq3 encoder of `spill import
// --experts rvq3` (import_rvq.c): the AVX2 nearest-entry search returns the
// scalar reference's index (ties, duplicates, exact hits, zero and huge
// vectors), training and encoding give the same bytes for 1, 2 and 3 threads
// and for both ISAs, and the greedy encoding finds exact codebook sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/import/import_rvq.h"
#include "engine/quant/kernels.h"

namespace {

constexpr int D = SPILL_RVQ_DIM, K = SPILL_RVQ_ENTRIES, S = SPILL_RVQ_STAGES;

std::vector<float> transpose(const float *cb) {
  std::vector<float> t(D * K);
  for (int k = 0; k < K; k++)
    for (int j = 0; j < D; j++) t[j * K + k] = cb[k * D + j];
  return t;
}

TEST(RvqNearest, Avx2TwinMatchesReference) {
  if (!spill_k_isa_supported(SPILL_ISA_AVX2)) GTEST_SKIP() << "no AVX2";
  std::mt19937 g(11);
  std::normal_distribution<float> n(0, 1);
  std::vector<float> cb(K * D);
  int checked = 0, nonzero = 0;
  for (int trial = 0; trial < 40; trial++) {
    for (auto &v : cb) v = n(g) * (trial % 5 == 4 ? 1e18f : 1.0f);
    if (trial % 3 == 1) /* duplicate entries: the first must win */
      for (int k = 128; k < K; k++) std::memcpy(&cb[k * D], &cb[(k - 128) * D], sizeof(float) * D);
    if (trial % 7 == 2) std::fill(cb.begin(), cb.end(), 0.5f); /* all tied */
    if (trial % 4 == 3) /* near ties: entries 1-4 ulps apart, the f32 filter's hard case */
      for (int k = 1; k < K; k++)
        for (int j = 0; j < D; j++) {
          float v = cb[j];
          for (int u = 0; u < (k + j) % 5; u++) v = std::nextafter(v, 2.0f * v + 1.0f);
          cb[k * D + j] = v;
        }
    if (trial % 9 == 5) /* tiny values: float squares underflow */
      for (auto &v : cb) v *= 1e-22f;
    const std::vector<float> t = transpose(cb.data());
    for (int i = 0; i < 200; i++) {
      float x[D];
      if (i % 10 == 0) std::memcpy(x, &cb[(i * 7 % K) * D], sizeof x); /* an exact hit */
      else if (i % 10 == 3) for (int j = 0; j < D; j++) x[j] = std::nextafter(cb[(i % K) * D + j], 9.0f);
      else if (i % 10 == 4) for (int j = 0; j < D; j++) x[j] = cb[(i % K) * D + j] * (1 + 1e-7f * (float)j);
      else if (i % 10 == 5 && trial % 8 == 0) { std::fill(x, x + D, 1.0f); x[i % D] = NAN; }
      else if (i % 10 == 6 && trial % 8 == 0) { std::fill(x, x + D, 1.0f); x[i % D] = INFINITY; }
      else if (i % 10 == 1) std::fill(x, x + D, 0.0f);
      else for (float &v : x) v = n(g) * (i % 10 == 2 ? 1e20f : 1.0f);
      const int r = imp_rvq_nearest__ref(cb.data(), x), a = imp_rvq_nearest__avx2(cb.data(), t.data(), x);
      ASSERT_EQ(r, a) << "trial " << trial << " vector " << i;
      checked++;
      nonzero += r != 0;
    }
  }
  EXPECT_EQ(checked, 8000);
  EXPECT_GT(nonzero, 3000); /* the cases are not all index 0 */
}

TEST(RvqNearest, FirstMinimumAndExactHits) {
  std::vector<float> cb(K * D, 3.0f);
  for (int k = 0; k < K; k++) cb[k * D] = (float)(k % 64); /* entries k, k+64, ... tie */
  const std::vector<float> t = transpose(cb.data());
  for (int want = 0; want < 64; want++) {
    float x[D];
    std::fill(x, x + D, 3.0f);
    x[0] = (float)want;
    EXPECT_EQ(imp_rvq_nearest__ref(cb.data(), x), want);
    if (spill_k_isa_supported(SPILL_ISA_AVX2)) EXPECT_EQ(imp_rvq_nearest__avx2(cb.data(), t.data(), x), want);
  }
}

struct Encoded {
  std::vector<float> cb;
  std::vector<uint8_t> idx, sc;
  double num = 0, den = 0;
};

Encoded train_encode(const std::vector<float> &m, uint64_t rows, uint64_t cols, int threads) {
  Encoded o;
  auto *s = new imp_rvq_sample;
  imp_rvq_sample_init(s, 42);
  for (uint64_t r = 0; r < rows; r++) imp_rvq_sample_row(s, &m[r * cols], cols);
  o.cb.resize(S * K * D);
  spill_err e = {};
  EXPECT_EQ(imp_rvq_train(s, o.cb.data(), threads, &e), SPILL_OK) << e.msg;
  delete s;
  o.idx.resize(rows * cols / D * S);
  o.sc.resize(rows * 2);
  EXPECT_EQ(imp_rvq_encode_rows(o.cb.data(), m.data(), rows, cols, o.idx.data(), o.sc.data(), &o.num,
                                &o.den, threads, &e),
            SPILL_OK)
      << e.msg;
  return o;
}

TEST(RvqEncode, SameBytesForAnyThreadCountAndIsa) {
  const uint64_t rows = 96, cols = 256;
  std::mt19937 g(5);
  std::normal_distribution<float> n(0, 0.02f);
  std::vector<float> m(rows * cols);
  for (auto &v : m) v = n(g);
  for (uint64_t c = 0; c < cols; c++) m[7 * cols + c] = 0; /* an all-zero row: scale 0 */
  const spill_isa isa0 = spill_k_isa();
  spill_k_set_isa(SPILL_ISA_REF);
  const Encoded base = train_encode(m, rows, cols, 1);
  for (spill_isa isa : {SPILL_ISA_REF, SPILL_ISA_AVX2}) {
    if (!spill_k_isa_supported(isa)) continue;
    ASSERT_TRUE(spill_k_set_isa(isa));
    for (int th : {1, 2, 3}) {
      const Encoded o = train_encode(m, rows, cols, th);
      EXPECT_EQ(0, std::memcmp(o.cb.data(), base.cb.data(), o.cb.size() * sizeof(float)))
          << spill_k_isa_name(isa) << " threads " << th;
      EXPECT_EQ(o.idx, base.idx) << spill_k_isa_name(isa) << " threads " << th;
      EXPECT_EQ(o.sc, base.sc);
      EXPECT_EQ(std::memcmp(&o.num, &base.num, sizeof(double)), 0);
      EXPECT_EQ(std::memcmp(&o.den, &base.den, sizeof(double)), 0);
    }
  }
  spill_k_set_isa(isa0);
  const double rel = std::sqrt(base.num / base.den);
  EXPECT_GT(rel, 0.0);
  EXPECT_LT(rel, 0.35); /* 24 bits per 8 weights on Gaussian rows: ~0.1-0.2 */
  EXPECT_EQ(base.sc[14] | base.sc[15], 0); /* the zero row */
}

TEST(RvqEncode, ExactCodebookSumsAreFound) {
  // Codebooks on a coarse grid: stage 0 multiples of 1, stage 1 of 1/16,
  // stage 2 of 1/256, each a spike in one coordinate; a row whose vectors are
  // such sums (and whose scale is 1) decodes exactly, error 0.
  std::vector<float> cb(S * K * D, 0.0f);
  const float step[S] = {1.0f, 1.0f / 16, 1.0f / 256};
  for (int t = 0; t < S; t++)
    for (int k = 1; k < K; k++) cb[(t * K + k) * D + (k % D)] = step[t] * (float)(1 + k / D);
  const uint64_t cols = 64;
  std::vector<float> row(cols, 0.0f);
  // rms must be 1 (an exact f16): put sqrt(64) = 8 in coordinate 0 of vector 0
  // as 8 = stage0 entry with k%8==0, 1+k/8 = 8 -> k = 56; stages 1/2 entry 0.
  row[0] = 8.0f;
  Encoded o;
  o.idx.resize(cols / D * S);
  o.sc.resize(2);
  spill_err e = {};
  ASSERT_EQ(imp_rvq_encode_rows(cb.data(), row.data(), 1, cols, o.idx.data(), o.sc.data(), &o.num,
                                &o.den, 2, &e),
            SPILL_OK);
  EXPECT_EQ(o.idx[0], 56);
  EXPECT_EQ(o.idx[1], 0);
  EXPECT_EQ(o.idx[2], 0);
  EXPECT_EQ(o.num, 0.0);
  EXPECT_EQ(o.den, 64.0);
}

}  // namespace
