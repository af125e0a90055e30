/* cli/cmd_compare.c: `spill compare`: two results directories cell by cell
 * (harness/exp_report.h spill_exp_compare), as a Markdown table on stdout. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "harness/exp_report.h"

const char cmd_compare_usage[] = "usage: spill compare RESULTS_DIR_A RESULTS_DIR_B\n";

int cmd_compare(int argc, char **argv) {
  cli_enter_workspace();
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-') return cli_usage_error("unknown option %s", argv[i]);
  if (argc < 3) return cli_usage_error("two results directories needed");
  if (argc > 3) return cli_usage_error("unexpected argument %s", argv[3]);
  char *md = NULL;
  spill_err e = {0};
  if (spill_exp_compare(argv[1], argv[2], &md, &e) < 0) {
    fprintf(stderr, "spill compare: %s\n", e.msg);
    return 1;
  }
  printf("%s", md);
  free(md);
  return 0;
}
