/* harness/exp_report.h: everything derived from a results directory's raw
 * rows (summary.json, table.md, table.csv, gnuplot plots), the environment
 * record (env.json) and `spill compare`.
 *
 * Reports are a pure function of config.json + runs.jsonl (+ per-run
 * tokens.jsonl for the timeline), so `spill report DIR` regenerates exactly
 * what the runner wrote. Plots are drawn by running gnuplot (PNG + SVG);
 * gnuplot's own messages go to plots/gnuplot.log. Never prints.
 */
#ifndef SPILL_HARNESS_EXP_REPORT_H
#define SPILL_HARNESS_EXP_REPORT_H

#include <stddef.h>

#include "engine/spill.h"
#include "harness/exp_config.h"
#include "harness/stats.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_exp_report_result {
  int rows;              /* runs read */
  int cells;             /* (cell, arm) groups */
  int has_hypothesis;
  spill_verdict verdict; /* combined over cells */
  char claim[256], metric[32];
  char result_text[512]; /* "ratio 1.02 [0.98, 1.06] (95% CI) at budget=1G; ..." */
  char plots[4096];      /* plot files written, space separated */
  char table_md[16384];  /* the Markdown table (for printing) */
} spill_exp_report_result;

/* Regenerates summary.json, table.md, table.csv and plots in dir. */
int spill_exp_report(const char *dir, spill_exp_report_result *res, spill_err *e);

/* summary.json's text (what spill_exp_report writes) from cfg and runs.jsonl
 * lines (as spill_exp_read_lines returns them), touching no file; the tables
 * are built too and dropped. For the fuzz target and tests. *json_out
 * malloc'd. Rows are checked by exp_rows.h (duplicates refused). */
int spill_exp_report_summary(const spill_exp_config *cfg, char **lines, int n, char **json_out,
                             spill_err *e);

/* Compares two results directories cell by cell (unpaired bootstrap of the
 * median ratio B/A); writes a Markdown table into *md_out (malloc'd). */
int spill_exp_compare(const char *dir_a, const char *dir_b, char **md_out, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
