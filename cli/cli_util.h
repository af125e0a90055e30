/* cli/cli_util.h: shared pieces of the spill CLI: argument scanning, a
 * progress bar on stderr, size formatting and JSON output helpers. The CLI is
 * a client of engine/spill.h only (plus the planner and trace schemas). */
#ifndef SPILL_CLI_UTIL_H
#define SPILL_CLI_UTIL_H

#include <stdint.h>
#include <stdio.h>

/* Progress bar: call with (done, total); draws at most ~10 times a second on
 * a TTY, every 10% otherwise; prints the final line at done == total. */
typedef struct cli_progress {
  const char *label;
  uint64_t start_ns, last_ns;
  int last_decile;
  int tty;
} cli_progress;
void cli_progress_init(cli_progress *p, const char *label);
void cli_progress_cb(void *p, uint64_t done, uint64_t total);

/* Argument scanning: argv[*i] is a flag; returns its value (next argv) or
 * prints an error and returns NULL. */
const char *cli_value(int argc, char **argv, int *i);
int cli_int(const char *flag, const char *v, long lo, long hi, long *out);
int cli_size(const char *flag, const char *v, uint64_t *out);

/* "1.23 GiB" style into buf. */
const char *cli_bytes(uint64_t b, char *buf, size_t n);

int cli_fail(const char *cmd, int code, const char *msg);

#endif
