// harness/stats_test.cc: statistics against hand-computed values, bootstrap
// CI coverage on synthetic experiments, and the verdict table.
#include "harness/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

TEST(StatsTest, QuantilesUseLinearInterpolation) {
  // Sorted 1..5 scrambled; type 7: Q(0.25) = x[1] = 2, Q(0.1) = 1 + 0.4 * 1.
  const double x[] = {5, 1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(spill_stats_quantile(x, 5, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(spill_stats_quantile(x, 5, 0.25), 2.0);
  EXPECT_DOUBLE_EQ(spill_stats_quantile(x, 5, 0.1), 1.4);
  const double y[] = {10, 20, 30, 40};  // h = 1.5 -> 25; q1: h = .75 -> 17.5
  spill_stats_summary s;
  spill_stats_summarize(y, 4, &s);
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.median, 25.0);
  EXPECT_DOUBLE_EQ(s.q1, 17.5);
  EXPECT_DOUBLE_EQ(s.q3, 32.5);
  EXPECT_DOUBLE_EQ(s.iqr, 15.0);
  EXPECT_DOUBLE_EQ(s.min, 10.0);
  EXPECT_DOUBLE_EQ(s.max, 40.0);
  EXPECT_DOUBLE_EQ(s.mean, 25.0);
  spill_stats_summarize(y, 0, &s);
  EXPECT_TRUE(std::isnan(s.median));
}

TEST(StatsTest, RngBelowIsInRangeAndSeeded) {
  spill_stats_rng a, b;
  spill_stats_rng_seed(&a, 42);
  spill_stats_rng_seed(&b, 42);
  int counts[7] = {0};
  for (int i = 0; i < 70000; i++) {
    uint32_t v = spill_stats_rng_below(&a, 7);
    ASSERT_LT(v, 7u);
    ASSERT_EQ(v, spill_stats_rng_below(&b, 7));
    counts[v]++;
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

TEST(StatsTest, MannWhitneyExactSeparatedSamples) {
  // U_a = 0; exact two-sided p = 2 / C(10,5) = 2/252.
  const double a[] = {1, 2, 3, 4, 5}, b[] = {6, 7, 8, 9, 10};
  spill_stats_mwu m;
  ASSERT_EQ(spill_stats_mann_whitney(a, 5, b, 5, &m), 0);
  EXPECT_DOUBLE_EQ(m.u_a, 0.0);
  EXPECT_DOUBLE_EQ(m.u_b, 25.0);
  EXPECT_TRUE(m.exact);
  EXPECT_NEAR(m.p, 2.0 / 252.0, 1e-12);
}

TEST(StatsTest, MannWhitneyExactInterleavedSamples) {
  // a = {1,3,5}, b = {2,4,6}: pairs with a > b: (3,2) (5,2) (5,4) -> U_a = 3.
  // Null counts of U for m = n = 3 over C(6,3) = 20 orderings, u = 0..9:
  // 1 1 2 3 3 3 3 2 1 1, so P(U <= 3) = 7/20 and p = 0.7.
  const double a[] = {1, 3, 5}, b[] = {2, 4, 6};
  spill_stats_mwu m;
  ASSERT_EQ(spill_stats_mann_whitney(a, 3, b, 3, &m), 0);
  EXPECT_DOUBLE_EQ(m.u_a, 3.0);
  EXPECT_TRUE(m.exact);
  EXPECT_NEAR(m.p, 0.7, 1e-12);
}

TEST(StatsTest, MannWhitneyNormalApproximationWithTies) {
  // a = {1,2,3,3}, b = {3,4,5,6}. Ranks: 1, 2, the three 3s share 4, then
  // 6, 7, 8. R_a = 1+2+4+4 = 11, U_a = 11 - 10 = 1, U_b = 15.
  // var = 16/12 * (9 - (27-3)/(8*7)) = 11.428571; z = -(8-1-0.5)/sqrt(var)
  // = -1.922726; p = erfc(1.922726/sqrt 2) = 0.054514.
  const double a[] = {1, 2, 3, 3}, b[] = {3, 4, 5, 6};
  spill_stats_mwu m;
  ASSERT_EQ(spill_stats_mann_whitney(a, 4, b, 4, &m), 0);
  EXPECT_DOUBLE_EQ(m.u_a, 1.0);
  EXPECT_DOUBLE_EQ(m.u_b, 15.0);
  EXPECT_FALSE(m.exact);
  EXPECT_NEAR(m.z, -1.922726, 1e-6);
  EXPECT_NEAR(m.p, 0.054514, 1e-6);
}

TEST(StatsTest, MannWhitneyAllTiedGivesPOne) {
  const double a[] = {2, 2, 2}, b[] = {2, 2};
  spill_stats_mwu m;
  ASSERT_EQ(spill_stats_mann_whitney(a, 3, b, 2, &m), 0);
  EXPECT_DOUBLE_EQ(m.p, 1.0);
  EXPECT_EQ(spill_stats_mann_whitney(a, 0, b, 2, &m), -1);
}

TEST(StatsTest, PairedBootstrapIsSeededAndBracketsTheRatio) {
  const double a[] = {10, 11, 9, 10.5, 10.2, 9.8};
  const double b[] = {12, 13, 11, 12.4, 12.1, 11.9};
  spill_stats_ab r1, r2;
  ASSERT_EQ(spill_stats_ab_paired(a, b, 6, 2000, 0.05, 7, &r1), 0);
  ASSERT_EQ(spill_stats_ab_paired(a, b, 6, 2000, 0.05, 7, &r2), 0);
  EXPECT_DOUBLE_EQ(r1.ci_lo, r2.ci_lo);
  EXPECT_DOUBLE_EQ(r1.ci_hi, r2.ci_hi);
  EXPECT_NEAR(r1.ratio, 12.05 / 10.1, 1e-12);
  EXPECT_LE(r1.ci_lo, r1.ratio);
  EXPECT_GE(r1.ci_hi, r1.ratio);
  EXPECT_GT(r1.ci_lo, 1.0);
  EXPECT_DOUBLE_EQ(r1.level, 0.95);
}

TEST(StatsTest, PairedBootstrapRejectsZeroBaselineAndTinySamples) {
  const double z[] = {0, 0, 0}, b[] = {1, 2, 3};
  spill_stats_ab r;
  EXPECT_EQ(spill_stats_ab_paired(z, b, 3, 2000, 0.05, 1, &r), -1);
  EXPECT_TRUE(std::isnan(r.ratio));
  EXPECT_EQ(spill_stats_ab_paired(b, b, 1, 2000, 0.05, 1, &r), -1);
}

// 200 simulated A/B experiments with a known ratio of population medians
// (a ~ lognormal(0, 0.1), b ~ 1.1 lognormal(0, 0.1), medians 1 and 1.1,
// n = 30 pairs): the 95% percentile-bootstrap CI must cover 1.1 in 90-99%
// of them.
TEST(StatsTest, PairedBootstrapCoverageOnSyntheticExperiments) {
  spill_stats_rng rng;
  spill_stats_rng_seed(&rng, 2024);
  const int experiments = 200, n = 30;
  const double truth = 1.1;
  int covered = 0;
  std::vector<double> a(n), b(n);
  for (int k = 0; k < experiments; k++) {
    for (int i = 0; i < n; i++) {
      a[i] = std::exp(0.1 * spill_stats_rng_normal(&rng));
      b[i] = truth * std::exp(0.1 * spill_stats_rng_normal(&rng));
    }
    spill_stats_ab r;
    ASSERT_EQ(spill_stats_ab_paired(a.data(), b.data(), n, 2000, 0.05, 1000 + k, &r), 0);
    covered += r.ci_lo <= truth && truth <= r.ci_hi;
  }
  double coverage = covered / double(experiments);
  EXPECT_GE(coverage, 0.90) << covered;
  EXPECT_LE(coverage, 0.99) << covered;
}

TEST(StatsTest, VerdictTable) {
  struct Case {
    int dir;
    double eff, lo, hi;
    spill_verdict want;
  } cases[] = {
      {+1, 0.05, 1.06, 1.20, SPILL_VERDICT_CONFIRMED},     // all above 1.05
      {+1, 0.05, 1.05, 1.20, SPILL_VERDICT_CONFIRMED},     // lower bound on it
      {+1, 0.05, 1.01, 1.20, SPILL_VERDICT_INCONCLUSIVE},  // straddles 1.05
      {+1, 0.05, 0.90, 1.04, SPILL_VERDICT_REFUTED},       // all below 1.05
      {+1, 0.00, 0.98, 1.03, SPILL_VERDICT_INCONCLUSIVE},  // straddles 1
      {+1, 0.00, 1.001, 1.03, SPILL_VERDICT_CONFIRMED},
      {-1, 0.10, 0.70, 0.85, SPILL_VERDICT_CONFIRMED},     // all below 0.90
      {-1, 0.10, 0.85, 0.95, SPILL_VERDICT_INCONCLUSIVE},
      {-1, 0.10, 0.95, 1.10, SPILL_VERDICT_REFUTED},       // all above 0.90
      {+1, 0.05, NAN, 1.2, SPILL_VERDICT_INCONCLUSIVE},
  };
  for (const Case &c : cases)
    EXPECT_EQ(spill_stats_verdict(c.dir, c.eff, c.lo, c.hi), c.want)
        << c.dir << " " << c.eff << " [" << c.lo << ", " << c.hi << "]";
  EXPECT_STREQ(spill_verdict_name(SPILL_VERDICT_REFUTED), "refuted");
}

TEST(StatsTest, VerdictCombineIsConservative) {
  spill_verdict all_c[] = {SPILL_VERDICT_CONFIRMED, SPILL_VERDICT_CONFIRMED};
  spill_verdict all_r[] = {SPILL_VERDICT_REFUTED, SPILL_VERDICT_REFUTED};
  spill_verdict mixed[] = {SPILL_VERDICT_CONFIRMED, SPILL_VERDICT_REFUTED};
  spill_verdict part[] = {SPILL_VERDICT_REFUTED, SPILL_VERDICT_INCONCLUSIVE};
  EXPECT_EQ(spill_stats_verdict_combine(all_c, 2), SPILL_VERDICT_CONFIRMED);
  EXPECT_EQ(spill_stats_verdict_combine(all_r, 2), SPILL_VERDICT_REFUTED);
  EXPECT_EQ(spill_stats_verdict_combine(mixed, 2), SPILL_VERDICT_INCONCLUSIVE);
  EXPECT_EQ(spill_stats_verdict_combine(part, 2), SPILL_VERDICT_INCONCLUSIVE);
  EXPECT_EQ(spill_stats_verdict_combine(all_c, 0), SPILL_VERDICT_INCONCLUSIVE);
}
