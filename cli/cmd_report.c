/* cli/cmd_report.c: `spill report`: regenerates a results directory's
 * summary, tables and plots from its runs.jsonl (harness/exp_report.h) and
 * prints the table and the verdict. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "harness/exp_report.h"

const char cmd_report_usage[] =
    "usage: spill report RESULTS_DIR\n"
    "Regenerates summary.json, table.md, table.csv and plots from runs.jsonl.\n";

int cmd_report(int argc, char **argv) {
  cli_enter_workspace();
  if (argc < 2) return cli_usage_error("no results directory");
  if (argv[1][0] == '-') return cli_usage_error("unknown option %s", argv[1]);
  if (argc > 2) return cli_usage_error("unexpected argument %s", argv[2]);
  spill_exp_report_result *res = calloc(1, sizeof *res);
  spill_err e = {0};
  int rc = res ? spill_exp_report(argv[1], res, &e) : SPILL_E_NOMEM;
  if (rc < 0) {
    fprintf(stderr, "spill report: %s\n", e.msg);
    free(res);
    return 1;
  }
  printf("%s\n", res->table_md);
  if (res->has_hypothesis)
    printf("hypothesis: %s\nverdict: %s\n%s\n", res->claim, spill_verdict_name(res->verdict),
           res->result_text);
  if (res->plots[0]) printf("plots: %s\n", res->plots);
  free(res);
  return 0;
}
