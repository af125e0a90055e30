/* harness/exp_metrics.h: the metrics of one run, by name.
 *
 * One table names every metric a run row carries (spill_run_stats fields plus
 * derived rates), its unit and whether it is a timing (summarised by median,
 * min, max, IQR) or a counter (reported separately; equal across repeats when
 * the run is deterministic). Hypotheses, tables and plots refer to metrics by
 * these names. Pure: no I/O.
 */
#ifndef SPILL_HARNESS_EXP_METRICS_H
#define SPILL_HARNESS_EXP_METRICS_H

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_exp_metric {
  const char *name;  /* row key, e.g. "decode_tok_per_s" */
  const char *label; /* table header, e.g. "decode tok/s" */
  const char *unit;  /* "tok/s", "s", "B", "" */
  int counter;       /* 1: a deterministic-style counter */
} spill_exp_metric;

/* The table (n_out gets its length). */
const spill_exp_metric *spill_exp_metrics(int *n_out);
/* Index of a metric by name, or -1. */
int spill_exp_metric_find(const char *name);
/* Value of metric i for a run's stats (derived rates: 0 when undefined). */
double spill_exp_metric_value(int i, const spill_run_stats *s);

#ifdef __cplusplus
}
#endif
#endif
