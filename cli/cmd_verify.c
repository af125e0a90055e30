/* cli/cmd_verify.c: `spill verify`: the full offline audit of a container
 * (spill_verify: every file's size and crc32, every bank and record header,
 * every payload crc), with a progress bar; exit 1 on the first defect. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_verify_usage[] = "usage: spill verify MODEL\n";

int cmd_verify(int argc, char **argv) {
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') return cli_usage_error("unknown option %s", argv[i]);
    if (model) return cli_usage_error("unexpected argument %s", argv[i]);
    model = argv[i];
  }
  if (!model) return cli_usage_error("no model");
  cli_progress p;
  cli_progress_init(&p, "verify");
  spill_err e = {0};
  int rc = spill_verify(model, cli_progress_cb, &p, &e);
  if (rc) {
    fprintf(stderr, "spill verify: %s: DEFECT: %s (%s)\n", model, e.msg, spill_status_name(rc));
    return 1;
  }
  fprintf(stderr, "spill verify: %s: clean\n", model);
  return 0;
}
