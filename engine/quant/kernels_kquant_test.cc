// engine/quant/kernels_kquant_test.cc: K-quant (q4_k / q5_k / q6_k) rows.
// The dispatching matvec on random super-blocks against a plain double
// dot product of the __ref dequantised values (ceiling 1e-5 of sum |w x|),
// __avx2 against __ref with the same ceiling (skipped with a message when
// the CPU lacks AVX2), row-range splits bit-identical to whole-matrix runs,
// and spill_k_dequant_row equal to the block dequantiser.
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

namespace {

// Random blocks with sane f16 scales (random bytes elsewhere are all valid).
std::vector<uint8_t> RandomRows(int dt, uint32_t rows, uint32_t cols, uint32_t seed) {
  const uint32_t bb = spill_dtype_traits_of(dt)->block_bytes, nb = rows * (cols / 256);
  std::vector<uint8_t> v((size_t)nb * bb);
  std::mt19937 g(seed);
  for (auto &b : v) b = (uint8_t)g();
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  for (uint32_t b = 0; b < nb; b++) {
    uint8_t *p = v.data() + (size_t)b * bb;
    uint16_t d = spill_f32_to_f16(u(g)), m = spill_f32_to_f16(u(g));
    if (dt == SPILL_DT_Q6_K) {
      memcpy(p + 208, &d, 2);
    } else {
      memcpy(p, &d, 2);
      memcpy(p + 2, &m, 2);
    }
  }
  return v;
}

class KquantTest : public ::testing::TestWithParam<int> {};

TEST_P(KquantTest, MatvecMatchesDequantisedDotProduct) {
  const int dt = GetParam();
  const uint32_t rows = 7, cols = 512;
  auto data = RandomRows(dt, rows, cols, 11 + dt);
  std::vector<float> x(cols);
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto &v : x) v = n(g);
  spill_qmat w = {};
  w.dtype = dt;
  w.rows = rows;
  w.cols = cols;
  w.data = data.data();
  std::vector<float> y(rows), yr(rows), ya(rows), row(cols);
  spill_k_matvec(&w, x.data(), y.data(), 0, rows);
  spill_k_matvec__ref(&w, x.data(), yr.data(), 0, rows);
  const uint32_t bb = spill_dtype_traits_of(dt)->block_bytes;
  for (uint32_t r = 0; r < rows; r++) {
    double want = 0, mag = 0;
    float blk[256];
    for (uint32_t b = 0; b < cols / 256; b++) {
      spill_k_kquant_dequant_block(dt, data.data() + ((size_t)r * (cols / 256) + b) * bb, blk);
      for (int i = 0; i < 256; i++) {
        want += (double)blk[i] * x[b * 256 + i];
        mag += std::fabs((double)blk[i] * x[b * 256 + i]);
      }
    }
    EXPECT_NEAR(yr[r], want, 1e-5 * mag) << "ref row " << r;
    EXPECT_NEAR(y[r], want, 1e-5 * mag) << "dispatched row " << r;
    spill_k_dequant_row(&w, r, row.data());
    for (uint32_t b = 0; b < cols / 256; b++) {
      spill_k_kquant_dequant_block(dt, data.data() + ((size_t)r * (cols / 256) + b) * bb, blk);
      EXPECT_EQ(0, memcmp(blk, row.data() + b * 256, sizeof blk)) << "dequant_row block " << b;
    }
  }
  // row splits give the same bits as one call
  std::vector<float> ys(rows);
  spill_k_matvec(&w, x.data(), ys.data(), 0, 3);
  spill_k_matvec(&w, x.data(), ys.data(), 3, rows);
  EXPECT_EQ(0, memcmp(ys.data(), y.data(), rows * sizeof(float)));
  if (!spill_k_isa_supported(SPILL_ISA_AVX2)) {
    GTEST_SKIP() << "CPU lacks AVX2: __avx2 K-quant rows not tested";
  }
  spill_k_matvec__avx2(&w, x.data(), ya.data(), 0, rows);
  for (uint32_t r = 0; r < rows; r++) {
    double mag = 0;
    spill_k_dequant_row(&w, r, row.data());
    for (uint32_t c = 0; c < cols; c++) mag += std::fabs((double)row[c] * x[c]);
    EXPECT_NEAR(ya[r], yr[r], 1e-5 * mag) << "avx2 row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Kquants, KquantTest,
                         ::testing::Values((int)SPILL_DT_Q4_K, (int)SPILL_DT_Q5_K,
                                           (int)SPILL_DT_Q6_K));

}  // namespace
