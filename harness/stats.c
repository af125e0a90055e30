/* harness/stats.c: summaries, paired bootstrap, Mann-Whitney U, verdicts.
 *
 * Pure and deterministic (see stats.h). Sorting copies the input; samples
 * are small (tens of repeats), so O(n log n) per statistic and O(B n log n)
 * for a bootstrap of B resamples is nothing next to a run of the engine.
 */
#include "harness/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *pa, const void *pb) {
  double a = *(const double *)pa, b = *(const double *)pb;
  return (a > b) - (a < b);
}

/* Type-7 quantile of an already sorted sample. */
static double quantile_sorted(const double *x, int n, double p) {
  if (n <= 0) return NAN;
  if (p <= 0) return x[0];
  if (p >= 1) return x[n - 1];
  double h = (n - 1) * p;
  int lo = (int)floor(h);
  double frac = h - lo;
  if (lo + 1 >= n) return x[n - 1];
  return x[lo] + frac * (x[lo + 1] - x[lo]);
}

static double *sorted_copy(const double *x, int n) {
  double *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
  if (!c) return NULL;
  memcpy(c, x, (size_t)n * sizeof *c);
  qsort(c, (size_t)n, sizeof *c, cmp_double);
  return c;
}

double spill_stats_quantile(const double *x, int n, double p) {
  if (n <= 0) return NAN;
  double *c = sorted_copy(x, n);
  if (!c) return NAN;
  double q = quantile_sorted(c, n, p);
  free(c);
  return q;
}

double spill_stats_median(const double *x, int n) { return spill_stats_quantile(x, n, 0.5); }

void spill_stats_summarize(const double *x, int n, spill_stats_summary *s) {
  memset(s, 0, sizeof *s);
  s->n = n;
  double *c = n > 0 ? sorted_copy(x, n) : NULL;
  if (!c) {
    s->median = s->min = s->max = s->q1 = s->q3 = s->iqr = s->mean = NAN;
    return;
  }
  s->min = c[0];
  s->max = c[n - 1];
  s->median = quantile_sorted(c, n, 0.5);
  s->q1 = quantile_sorted(c, n, 0.25);
  s->q3 = quantile_sorted(c, n, 0.75);
  s->iqr = s->q3 - s->q1;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += c[i];
  s->mean = sum / n;
  free(c);
}

/* ---- random numbers ---------------------------------------------------- */

void spill_stats_rng_seed(spill_stats_rng *r, uint64_t seed) { spill_rng_seed(r, seed); }

uint64_t spill_stats_rng_next(spill_stats_rng *r) { return spill_rng_next(r); }

uint32_t spill_stats_rng_below(spill_stats_rng *r, uint32_t n) {
  /* Lemire's multiply-shift with rejection of the biased low band. */
  uint64_t m = (uint64_t)(uint32_t)(spill_stats_rng_next(r) >> 32) * n;
  uint32_t low = (uint32_t)m;
  if (low < n) {
    uint32_t thresh = (uint32_t)(-n) % n;
    while (low < thresh) {
      m = (uint64_t)(uint32_t)(spill_stats_rng_next(r) >> 32) * n;
      low = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

double spill_stats_rng_unit(spill_stats_rng *r) {
  return (double)(spill_stats_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

double spill_stats_rng_normal(spill_stats_rng *r) {
  double u1 = spill_stats_rng_unit(r), u2 = spill_stats_rng_unit(r);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- paired bootstrap -------------------------------------------------- */

int spill_stats_ab_paired(const double *a, const double *b, int n, int resamples, double alpha,
                          uint64_t seed, spill_stats_ab *out) {
  memset(out, 0, sizeof *out);
  out->n = n;
  out->level = 1.0 - alpha;
  out->ratio = out->ci_lo = out->ci_hi = NAN;
  out->median_a = out->median_b = NAN;
  if (n < 1) return -1;
  out->median_a = spill_stats_median(a, n);
  out->median_b = spill_stats_median(b, n);
  if (out->median_a == 0 || n < 2 || resamples < 1) return -1;
  out->ratio = out->median_b / out->median_a;
  double *ra = malloc((size_t)n * sizeof *ra), *rb = malloc((size_t)n * sizeof *rb);
  double *ratios = malloc((size_t)resamples * sizeof *ratios);
  if (!ra || !rb || !ratios) {
    free(ra), free(rb), free(ratios);
    return -1;
  }
  spill_stats_rng rng;
  spill_stats_rng_seed(&rng, seed);
  int good = 0;
  for (int k = 0; k < resamples; k++) {
    for (int i = 0; i < n; i++) {
      uint32_t j = spill_stats_rng_below(&rng, (uint32_t)n);
      ra[i] = a[j];
      rb[i] = b[j];
    }
    qsort(ra, (size_t)n, sizeof *ra, cmp_double);
    qsort(rb, (size_t)n, sizeof *rb, cmp_double);
    double ma = quantile_sorted(ra, n, 0.5), mb = quantile_sorted(rb, n, 0.5);
    if (ma == 0) {
      out->degenerate++;
      continue;
    }
    ratios[good++] = mb / ma;
  }
  out->resamples = resamples;
  int rc = -1;
  if (good > 0) {
    qsort(ratios, (size_t)good, sizeof *ratios, cmp_double);
    out->ci_lo = quantile_sorted(ratios, good, alpha / 2);
    out->ci_hi = quantile_sorted(ratios, good, 1 - alpha / 2);
    rc = 0;
  }
  free(ra), free(rb), free(ratios);
  return rc;
}

int spill_stats_ab_unpaired(const double *a, int na, const double *b, int nb, int resamples,
                            double alpha, uint64_t seed, spill_stats_ab *out) {
  memset(out, 0, sizeof *out);
  out->n = na < nb ? na : nb;
  out->level = 1.0 - alpha;
  out->ratio = out->ci_lo = out->ci_hi = NAN;
  if (na < 1 || nb < 1) return -1;
  out->median_a = spill_stats_median(a, na);
  out->median_b = spill_stats_median(b, nb);
  if (out->median_a == 0 || na < 2 || nb < 2 || resamples < 1) return -1;
  out->ratio = out->median_b / out->median_a;
  double *ra = malloc((size_t)na * sizeof *ra), *rb = malloc((size_t)nb * sizeof *rb);
  double *ratios = malloc((size_t)resamples * sizeof *ratios);
  if (!ra || !rb || !ratios) {
    free(ra), free(rb), free(ratios);
    return -1;
  }
  spill_stats_rng rng;
  spill_stats_rng_seed(&rng, seed);
  int good = 0;
  for (int k = 0; k < resamples; k++) {
    for (int i = 0; i < na; i++) ra[i] = a[spill_stats_rng_below(&rng, (uint32_t)na)];
    for (int i = 0; i < nb; i++) rb[i] = b[spill_stats_rng_below(&rng, (uint32_t)nb)];
    qsort(ra, (size_t)na, sizeof *ra, cmp_double);
    qsort(rb, (size_t)nb, sizeof *rb, cmp_double);
    double ma = quantile_sorted(ra, na, 0.5), mb = quantile_sorted(rb, nb, 0.5);
    if (ma == 0) {
      out->degenerate++;
      continue;
    }
    ratios[good++] = mb / ma;
  }
  out->resamples = resamples;
  int rc = -1;
  if (good > 0) {
    qsort(ratios, (size_t)good, sizeof *ratios, cmp_double);
    out->ci_lo = quantile_sorted(ratios, good, alpha / 2);
    out->ci_hi = quantile_sorted(ratios, good, 1 - alpha / 2);
    rc = 0;
  }
  free(ra), free(rb), free(ratios);
  return rc;
}

/* ---- Mann-Whitney U ---------------------------------------------------- */

double spill_stats_norm_cdf(double z) { return 0.5 * erfc(-z / sqrt(2.0)); }

typedef struct tagged {
  double v;
  int from_a;
} tagged;

static int cmp_tagged(const void *pa, const void *pb) {
  double a = ((const tagged *)pa)->v, b = ((const tagged *)pb)->v;
  return (a > b) - (a < b);
}

/* P(U <= u) under H0 with no ties, by the recurrence on the number of
 * orderings: N(m, n, u) = N(m-1, n, u-n) + N(m, n-1, u) (the largest value
 * comes from a, adding n to U, or from b). Counts fit in doubles for
 * m, n <= 25 (C(50,25) ~ 1.3e14 < 2^53). */
static double mwu_exact_cdf(int m, int n, int u) {
  int umax = m * n;
  /* dp[j][v] for the current i, over j = 0..n, v = 0..umax. */
  size_t w = (size_t)umax + 1;
  double *prev = calloc((size_t)(n + 1) * w, sizeof *prev);
  double *cur = calloc((size_t)(n + 1) * w, sizeof *cur);
  if (!prev || !cur) {
    free(prev), free(cur);
    return NAN;
  }
  /* i = 0: only U = 0 possible. */
  for (int j = 0; j <= n; j++) prev[(size_t)j * w] = 1;
  for (int i = 1; i <= m; i++) {
    memset(cur, 0, (size_t)(n + 1) * w * sizeof *cur);
    cur[0] = 1; /* j = 0: U = 0 */
    for (int j = 1; j <= n; j++)
      for (int v = 0; v <= i * j; v++) {
        double c = cur[(size_t)(j - 1) * w + v];
        if (v >= j) c += prev[(size_t)j * w + v - j];
        cur[(size_t)j * w + v] = c;
      }
    double *t = prev;
    prev = cur;
    cur = t;
  }
  double total = 0, below = 0;
  for (int v = 0; v <= umax; v++) {
    double c = prev[(size_t)n * w + v];
    total += c;
    if (v <= u) below += c;
  }
  free(prev), free(cur);
  return below / total;
}

int spill_stats_mann_whitney(const double *a, int na, const double *b, int nb,
                             spill_stats_mwu *out) {
  memset(out, 0, sizeof *out);
  out->p = NAN;
  if (na < 1 || nb < 1) return -1;
  int n = na + nb;
  tagged *t = malloc((size_t)n * sizeof *t);
  if (!t) return -1;
  for (int i = 0; i < na; i++) t[i] = (tagged){a[i], 1};
  for (int i = 0; i < nb; i++) t[na + i] = (tagged){b[i], 0};
  qsort(t, (size_t)n, sizeof *t, cmp_tagged);
  double rank_a = 0, tie_term = 0;
  int ties = 0;
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && t[j + 1].v == t[i].v) j++;
    double midrank = (i + j) / 2.0 + 1.0; /* ranks are 1-based */
    int len = j - i + 1;
    if (len > 1) {
      ties = 1;
      tie_term += (double)len * len * len - len;
    }
    for (int k = i; k <= j; k++)
      if (t[k].from_a) rank_a += midrank;
    i = j + 1;
  }
  free(t);
  double prod = (double)na * nb;
  out->u_a = rank_a - na * (na + 1) / 2.0;
  out->u_b = prod - out->u_a;
  double mean = prod / 2.0;
  double var = prod / 12.0 * ((n + 1) - tie_term / ((double)n * (n - 1)));
  double diff = fabs(out->u_a - mean);
  if (var > 0) {
    double cc = diff >= 0.5 ? 0.5 : diff; /* continuity correction, never past 0 */
    out->z = (out->u_a > mean ? 1 : -1) * (diff - cc) / sqrt(var);
  }
  if (!ties && na <= 25 && nb <= 25) {
    double umin = out->u_a < out->u_b ? out->u_a : out->u_b;
    double p = 2.0 * mwu_exact_cdf(na, nb, (int)llround(umin));
    out->p = p > 1 ? 1 : p;
    out->exact = 1;
  } else if (var <= 0) {
    out->p = 1.0; /* every value tied: no evidence of a difference */
  } else {
    double p = 2.0 * (1.0 - spill_stats_norm_cdf(fabs(out->z)));
    out->p = p > 1 ? 1 : p;
  }
  return 0;
}

/* ---- verdicts ----------------------------------------------------------- */

spill_verdict spill_stats_verdict(int direction, double min_effect, double ci_lo, double ci_hi) {
  if (isnan(ci_lo) || isnan(ci_hi)) return SPILL_VERDICT_INCONCLUSIVE;
  if (direction >= 0) {
    double t = 1.0 + min_effect;
    if (ci_lo >= t) return SPILL_VERDICT_CONFIRMED;
    if (ci_hi < t) return SPILL_VERDICT_REFUTED;
  } else {
    double t = 1.0 - min_effect;
    if (ci_hi <= t) return SPILL_VERDICT_CONFIRMED;
    if (ci_lo > t) return SPILL_VERDICT_REFUTED;
  }
  return SPILL_VERDICT_INCONCLUSIVE;
}

const char *spill_verdict_name(spill_verdict v) {
  switch (v) {
    case SPILL_VERDICT_CONFIRMED: return "confirmed";
    case SPILL_VERDICT_REFUTED: return "refuted";
    default: return "inconclusive";
  }
}

spill_verdict spill_stats_verdict_combine(const spill_verdict *v, int n) {
  if (n <= 0) return SPILL_VERDICT_INCONCLUSIVE;
  int conf = 0, ref = 0;
  for (int i = 0; i < n; i++) {
    conf += v[i] == SPILL_VERDICT_CONFIRMED;
    ref += v[i] == SPILL_VERDICT_REFUTED;
  }
  if (conf == n) return SPILL_VERDICT_CONFIRMED;
  if (ref == n) return SPILL_VERDICT_REFUTED;
  return SPILL_VERDICT_INCONCLUSIVE;
}
