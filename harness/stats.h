/* harness/stats.h: the statistics of the research harness (pure functions).
 *
 * Role: summaries of repeated runs (median, min, max, IQR), paired A/B
 * comparison (median ratio B/A with a seeded percentile bootstrap CI), the
 * Mann-Whitney U test, and the hypothesis verdict computed from the CI. No
 * I/O, no globals, no engine (only the header-only generator of
 * engine/base/rng.h): everything here is deterministic for its
 * inputs (the bootstrap takes an explicit seed), so tests pin exact values.
 * Quantiles use the linear-interpolation definition (Hyndman & Fan type 7,
 * R's and numpy's default): h = (n-1)p, Q = x[floor h] + frac(h)(x[floor h+1]
 * - x[floor h]) on the sorted sample.
 */
#ifndef SPILL_HARNESS_STATS_H
#define SPILL_HARNESS_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_stats_summary {
  int n;
  double median, min, max, q1, q3, iqr, mean;
} spill_stats_summary;

/* Type-7 quantile p in [0,1] of x[0..n) (n >= 1; x need not be sorted; it is
 * not modified). Returns NaN for n == 0. */
double spill_stats_quantile(const double *x, int n, double p);
double spill_stats_median(const double *x, int n);
/* Fills s for x[0..n); n == 0 gives n = 0 and NaN fields. */
void spill_stats_summarize(const double *x, int n, spill_stats_summary *s);

/* A deterministic generator for resampling: engine/base/rng.h's
 * splitmix64-seeded xoshiro256**. */
typedef spill_rng spill_stats_rng;
void spill_stats_rng_seed(spill_stats_rng *r, uint64_t seed);
uint64_t spill_stats_rng_next(spill_stats_rng *r);
/* Uniform integer in [0, n) without modulo bias. */
uint32_t spill_stats_rng_below(spill_stats_rng *r, uint32_t n);
/* Uniform double in [0, 1). */
double spill_stats_rng_unit(spill_stats_rng *r);
/* Standard normal (Box-Muller). */
double spill_stats_rng_normal(spill_stats_rng *r);

/* Paired A/B: ratio = median(b) / median(a) over pairs (a[i], b[i]),
 * i < n. The CI resamples pair indices with replacement `resamples` times
 * (>= 2000 recommended) and takes the (alpha/2, 1-alpha/2) type-7 quantiles
 * of the resampled ratios (percentile method); pairing keeps slow drift of
 * the machine out of the interval. Resamples whose median(a*) is 0 are
 * counted in `degenerate` and left out. Returns 0, or -1 when n < 2, the
 * median of a is 0, or every resample was degenerate (ratio = NaN). */
typedef struct spill_stats_ab {
  int n;
  double median_a, median_b;
  double ratio;       /* median(b) / median(a) */
  double ci_lo, ci_hi;
  double level;       /* 1 - alpha */
  int resamples, degenerate;
} spill_stats_ab;
int spill_stats_ab_paired(const double *a, const double *b, int n, int resamples, double alpha,
                          uint64_t seed, spill_stats_ab *out);

/* Unpaired: the same ratio of medians with a and b resampled independently
 * (for comparing two result sets whose runs are not paired). */
int spill_stats_ab_unpaired(const double *a, int na, const double *b, int nb, int resamples,
                            double alpha, uint64_t seed, spill_stats_ab *out);

/* Mann-Whitney U, two-sided. U = U_a = R_a - n_a(n_a+1)/2 (midranks for ties);
 * p from the exact null distribution when there are no ties and
 * n_a, n_b <= 25, else the normal approximation with the tie-corrected
 * variance and a 0.5 continuity correction. exact says which was used.
 * Returns -1 when either sample is empty. */
typedef struct spill_stats_mwu {
  double u_a, u_b; /* u_a + u_b = n_a n_b */
  double z;        /* normal approximation (also filled when exact) */
  double p;
  int exact;
} spill_stats_mwu;
int spill_stats_mann_whitney(const double *a, int na, const double *b, int nb,
                             spill_stats_mwu *out);

/* Standard normal CDF. */
double spill_stats_norm_cdf(double z);

/* Hypothesis verdict from the CI of the ratio B/A.
 * direction +1 (increase): threshold t = 1 + min_effect; confirmed when
 * ci_lo >= t, refuted when ci_hi < t, inconclusive when the CI straddles t.
 * direction -1 (decrease): t = 1 - min_effect; confirmed when ci_hi <= t,
 * refuted when ci_lo > t, else inconclusive. NaN bounds: inconclusive. */
typedef enum spill_verdict {
  SPILL_VERDICT_INCONCLUSIVE = 0,
  SPILL_VERDICT_CONFIRMED = 1,
  SPILL_VERDICT_REFUTED = 2,
} spill_verdict;
spill_verdict spill_stats_verdict(int direction, double min_effect, double ci_lo, double ci_hi);
const char *spill_verdict_name(spill_verdict v);
/* Combines per-cell verdicts conservatively: all confirmed -> confirmed, all
 * refuted -> refuted, anything else (mixed) -> inconclusive; n == 0 ->
 * inconclusive. */
spill_verdict spill_stats_verdict_combine(const spill_verdict *v, int n);

#ifdef __cplusplus
}
#endif
#endif
