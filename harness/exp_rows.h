/* harness/exp_rows.h: the one reader of a results directory's runs.jsonl
 * rows, shared by the report (`spill report`, `spill compare`) and the
 * runner's --resume.
 *
 * Rows are untrusted input (a results directory may have been edited, merged
 * or written by two processes at once): every line must be a JSON object
 * whose "key" names a run of the config's plan, whose "cell", "arm" and
 * "repeat" agree with that key and whose tokens.hash is 16 hex digits. A run
 * that appears twice is refused with SPILL_E_FORMAT naming both lines, so a
 * duplicate is never counted twice (issue 19 item 1). Never prints.
 */
#ifndef SPILL_HARNESS_EXP_ROWS_H
#define SPILL_HARNESS_EXP_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/spill.h"
#include "harness/exp_config.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

typedef struct spill_exp_run {
  int cell, arm, repeat;
  char key[256]; /* "<cell>/<arm>/r<repeat>", cell = "budget=1G,lookahead=8" or "-" */
} spill_exp_run;

/* The ordered runs of cfg (warmups excluded). *runs_out is malloc'd. */
int spill_exp_plan_runs(const spill_exp_config *cfg, spill_exp_run **runs_out, int *n_out,
                        spill_err *e);

/* A row's "outcome" when the machine profile's OOM killer ended the run
 * (the row has no metrics; tokens.n is how far it got). Rows of runs that
 * finished have no "outcome". */
#define SPILL_EXP_OUTCOME_OOM "oom-killed"

typedef struct spill_exp_row {
  struct cJSON *j;       /* the parsed row (owned by the spill_exp_rows) */
  int plan;              /* index of the run in the config's plan */
  int cell, arm, repeat; /* from the plan (checked against the row) */
  uint64_t hash;         /* tokens.hash */
  int line;              /* 1-based line in runs.jsonl */
} spill_exp_row;

typedef struct spill_exp_rows {
  spill_exp_row *rows; /* in file order */
  int n;
  spill_exp_run *runs; /* the plan (spill_exp_plan_runs) */
  int n_runs;
} spill_exp_rows;

/* Parses lines (as spill_exp_read_lines returns them) of file (named in
 * errors) against cfg's plan. On error *out is empty (nothing to free). */
int spill_exp_rows_parse(const spill_exp_config *cfg, const char *file, char **lines, int n,
                         spill_exp_rows *out, spill_err *e);
/* The row is of a run the machine's OOM killer ended. */
int spill_exp_row_oom_killed(const spill_exp_row *r);
/* Frees what spill_exp_rows_parse allocated; accepts a zeroed struct. */
void spill_exp_rows_free(spill_exp_rows *r);

#ifdef __cplusplus
}
#endif
#endif
