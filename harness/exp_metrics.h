/* harness/exp_metrics.h: the metrics of one run, by name.
 *
 * One table names every metric a run row carries (spill_run_stats fields plus
 * derived rates), its unit and whether it is a timing (summarised by median,
 * min, max, IQR) or a counter (reported separately; equal across repeats when
 * the run is deterministic), and which workload's rows carry it (the single
 * request, workload.bench's per-phase medians over prompts, or both).
 * Hypotheses, tables and plots refer to metrics by
 * these names. Pure: no I/O.
 */
#ifndef SPILL_HARNESS_EXP_METRICS_H
#define SPILL_HARNESS_EXP_METRICS_H

#include "engine/spill.h"
#include "harness/bench_workload.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which workload's rows carry a metric (docs/EXPERIMENTS.md "Bench workload"):
 * the single request (prompt, decode_tokens), the bench workload
 * (workload.bench: per phase, medians over its prompts), or both. */
typedef enum spill_exp_metric_scope {
  SPILL_EXP_SCOPE_REQUEST = 0,
  SPILL_EXP_SCOPE_BENCH = 1,
  SPILL_EXP_SCOPE_BOTH = 2,
} spill_exp_metric_scope;

typedef struct spill_exp_metric {
  const char *name;  /* row key, e.g. "decode_tok_per_s" */
  const char *label; /* table header, e.g. "decode tok/s" */
  const char *unit;  /* "tok/s", "s", "B", "" */
  int counter;       /* 1: a deterministic-style counter */
  spill_exp_metric_scope scope;
  int bench_phase;   /* a bench metric's phase: 1 + SPILL_BENCH_COLD/WARM; 0 none */
  const char *bench_field; /* a bench metric's per-prompt sample field ("tg_tok_per_s") */
} spill_exp_metric;

/* The table (n_out gets its length). */
const spill_exp_metric *spill_exp_metrics(int *n_out);
/* Index of a metric by name, or -1. */
int spill_exp_metric_find(const char *name);
/* Value of metric i for a run's stats (derived rates: 0 when undefined);
 * for a single-request row (scope REQUEST or BOTH). */
double spill_exp_metric_value(int i, const spill_run_stats *s);
/* Value of bench metric i (bench_phase > 0) from its phase's medians; NaN
 * for any other metric. */
double spill_exp_bench_metric_value(int i, const spill_bench_summary *m);
/* A bench field ("tg_tok_per_s", ...: the metrics' bench_field) of one
 * prompt's request; NaN for an unknown field. */
double spill_exp_bench_sample_value(const char *field, const spill_bench_sample *s);

#ifdef __cplusplus
}
#endif
#endif
