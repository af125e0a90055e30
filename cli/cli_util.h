/* cli/cli_util.h: shared pieces of the spill CLI: argument scanning, a
 * progress bar on stderr, size formatting and JSON output helpers. The CLI is
 * a client of engine/spill.h only (plus the trace schema). */
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

/* A usage error of the running command (cli_current): prints "spill CMD:
 * MESSAGE" (fmt may be NULL: no message) and the command's usage to stderr;
 * returns 2, the exit code of usage errors. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Argument scanning: argv[*i] is a flag; returns its value (next argv) or
 * reports a usage error and returns NULL. cli_int/cli_size/cli_float report
 * a bad value as a usage error and return -1. */
const char *cli_value(int argc, char **argv, int *i);
int cli_int(const char *flag, const char *v, long lo, long hi, long *out);
int cli_size(const char *flag, const char *v, uint64_t *out);

/* Knob flags through the engine's one knob-flag layer (spill_knob_flag,
 * spill_knob_flag_set, spill_knob_flag_help in engine/spill.h; `spill
 * serve` uses the same): argv[*i] is --kebab-case of a knob name whose
 * target is in `targets` (a bit mask of 1 << SPILL_KNOB_CONFIG /
 * SPILL_KNOB_SAMPLING). cfg / s may be NULL when their bit is not set.
 * Returns 1 if consumed (set), 0 if argv[*i] is no knob flag, -1 on a bad
 * or missing value (reported as a usage error). */
#define CLI_KNOBS_CONFIG (1 << 0)
#define CLI_KNOBS_SAMPLING (1 << 1)
struct spill_config;
struct spill_sampling;
int cli_knob_flag(int argc, char **argv, int *i, unsigned targets,
                  struct spill_config *cfg, struct spill_sampling *s);
/* The model's tuned profile (`spill tune`, harness/tune_profile.h) for run,
 * bench, chat: cli_tuned_flag consumes --no-tuned and --tuned FILE (1; 0 when
 * argv[*i] is neither; -1 on a missing value or both given: a usage error). cli_apply_tuned, before the
 * engine opens: applies the profile to cfg under the knob flags on the
 * command line and prints "spill CMD: tuned: ..." on stderr; a profile for
 * another machine or model is an error (reported; returns -1). */
typedef struct cli_tuned {
  const char *file; /* --tuned FILE; NULL: the model's default profile */
  int off;          /* --no-tuned */
} cli_tuned;
int cli_tuned_flag(int argc, char **argv, int *i, cli_tuned *t);
int cli_apply_tuned(const char *cmd, const char *model, const cli_tuned *t, int argc,
                    char **argv, struct spill_config *cfg);
#define CLI_TUNED_HELP                                                                   \
  "--tuned FILE / --no-tuned: the tuned profile `spill tune` saved for the model is\n"  \
  "applied under the flags given (default: the model's profile on this machine, if any)\n"
/* The help lines of those knobs ("  --budget SIZE  RAM budget ..."). */
void cli_knob_help(FILE *f, unsigned targets);


/* "1.23 GiB" style into buf. */
const char *cli_bytes(uint64_t b, char *buf, size_t n);

/* "spill CMD: MSG (SPILL_E_...)" on stderr; returns 1. */
int cli_fail(const char *cmd, int code, const char *msg);

/* `bazel run` starts us in the runfiles tree; work where the user was. */
void cli_enter_workspace(void);

/* spill_engine_open with errors and warnings printed; 0 or -1. On success
 * *eng is the caller's (spill_engine_close). */
struct spill_engine;
int cli_open_engine(const char *cmd, const char *model, const struct spill_config *cfg,
                    struct spill_engine **eng);
/* The closing summary of a run on stderr: tokens, times, hits, bytes, mode;
 * forced routing, emulated device, lookahead precision and paging warnings. */
struct spill_run_stats;
void cli_print_run_summary(struct spill_engine *eng, const struct spill_run_stats *st);
/* The paging warnings (//cli:cli_util_test). While running, from a token
 * callback's stats: once (*told, zero at start) when the engine has flagged
 * paging (SPILL_PAGING_*). After the run: when the run took more major page
 * faults than it decoded tokens. Each prints to f and returns 1 if it
 * warned. */
int cli_warn_paging_live(FILE *f, const struct spill_run_stats *ts, int *told);
int cli_warn_paging_after(FILE *f, const struct spill_run_stats *st);

#endif
