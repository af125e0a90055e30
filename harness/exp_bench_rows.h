/* harness/exp_bench_rows.h: what a run row of the bench workload holds
 * (docs/EXPERIMENTS.md "Bench workload"): per recorded phase the bench metrics of
 * exp_metrics.c (medians over the prompts), every request's sample under
 * "bench", and the run's token hash. Shared by the runner's spill and peer
 * runs so both write one shape. Never prints.
 */
#ifndef SPILL_HARNESS_EXP_BENCH_ROWS_H
#define SPILL_HARNESS_EXP_BENCH_ROWS_H

#include <stdint.h>

#include "harness/bench_workload.h"
#include "harness/exp_config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

/* The figures of one bench run: s[p * SPILL_BENCH_N_PHASES + ph] is prompt
 * cfg->bench_prompts[p] in phase ph (spill_exp_config_bench_n_phases(cfg)
 * phases ran). peer: another engine (no expert cache: no hit rates).
 * bytes_read, major_faults: the run's totals (spill: its requests'; a peer:
 * its processes', load included). */
typedef struct spill_exp_bench_run {
  const spill_bench_sample *s;
  int peer;
  uint64_t bytes_read, major_faults;
} spill_exp_bench_run;

/* Adds "metrics" and "bench" to row; *hash gets the run's token hash
 * (FNV-1a 64 over its requests' hashes in order), *n_tokens the tokens
 * generated, *primary the value of spill_exp_config_primary_metric. */
void spill_exp_bench_row(const spill_exp_config *cfg, const spill_exp_bench_run *b,
                         struct cJSON *row, uint64_t *hash, int *n_tokens, double *primary);

#ifdef __cplusplus
}
#endif
#endif
