/* cli/cmd_refuted.c: `spill refuted list`: the refuted hypotheses of
 * refuted/ (harness/refuted.h) as text or --json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "harness/refuted.h"

const char cmd_refuted_list_usage[] =
    "usage: spill refuted list [--json] [--dir DIR] [--index]\n"
    "Lists the refuted hypotheses of DIR (default refuted/). --index also rewrites\n"
    "DIR/README.md, the index (spill exp writes it with every entry it adds; an entry\n"
    "written by hand needs --index).\n";

int cmd_refuted_list(int argc, char **argv) {
  cli_enter_workspace();
  int json = 0, index = 0;
  const char *dir = "refuted";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--index")) index = 1;
    else if (!strcmp(argv[i], "--dir")) {
      if (!(dir = cli_value(argc, argv, &i))) return 2;
    } else if (argv[i][0] == '-') {
      return cli_usage_error("unknown option %s", argv[i]);
    } else {
      return cli_usage_error("unexpected argument %s", argv[i]);
    }
  }
  spill_refuted_entry *v;
  int n;
  spill_err e = {0};
  /* listing only reads unless --index: spill exp regenerates the index when it
   * writes an entry */
  if (index && spill_refuted_index(dir, &e) < 0) {
    fprintf(stderr, "spill refuted: %s\n", e.msg);
    return 1;
  }
  if (spill_refuted_list(dir, &v, &n, &e) < 0) {
    fprintf(stderr, "spill refuted: %s\n", e.msg);
    return 1;
  }
  if (json) {
    printf("[");
    for (int i = 0; i < n; i++) {
      /* field values come from our own entries; escape quotes and backslashes */
      printf("%s\n  {", i ? "," : "");
      const char *k[] = {"id", "file", "date", "hypothesis", "metric", "result", "verdict", "results"};
      const char *val[] = {v[i].id, v[i].file, v[i].date, v[i].hypothesis, v[i].metric,
                           v[i].result, v[i].verdict, v[i].results};
      for (int j = 0; j < 8; j++) {
        char *q = spill_json_quote(val[j], strlen(val[j])); /* the one escaper */
        printf("%s\"%s\": %s", j ? ", " : "", k[j], q ? q : "\"\"");
        free(q);
      }
      printf("}");
    }
    printf("%s]\n", n ? "\n" : "");
  } else {
    if (!n) printf("no refuted hypotheses yet (%s/)\n", dir);
    for (int i = 0; i < n; i++)
      printf("%s  %s  %s\n      %s\n      %s\n", v[i].id, v[i].date, v[i].hypothesis, v[i].result,
             v[i].results);
  }
  free(v);
  return 0;
}
