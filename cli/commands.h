/* cli/commands.h: the `spill` command table. One row per command or
 * subcommand (cli/spill_main.c k_commands): its name ("trace stats" for a
 * subcommand), entry point, one-line summary, usage text, and the knob
 * groups its --help lists. The dispatcher answers -h/--help for every row
 * (usage on stdout, exit 0) before the entry point runs; a usage error is
 * reported with cli_usage_error (message and usage on stderr, exit 2);
 * //cli:cli_test walks every row (`spill help --commands`). Each entry point
 * returns the exit code: 0 ok, 1 failure, 2 usage error. argv[0] is the
 * command's last word ("stats" for `spill trace stats`).
 *
 * Adding a command: write `int cmd_x(int, char **)` and `const char
 * cmd_x_usage[]` in cli/cmd_x.c, declare them here with CLI_COMMAND(cmd_x),
 * and add its row to k_commands. */
#ifndef SPILL_CLI_COMMANDS_H
#define SPILL_CLI_COMMANDS_H

#include <stdio.h>

typedef struct cli_command {
  const char *name;                 /* "run", "trace stats" */
  int (*fn)(int argc, char **argv); /* argv[0] = last word of name */
  const char *summary;              /* one line for `spill --help` */
  const char *usage;                /* "usage: spill NAME ...\n" and details */
  unsigned knobs;                   /* CLI_KNOBS_* listed after the usage by --help */
} cli_command;

#define CLI_COMMAND(fn)         \
  int fn(int argc, char **argv); \
  extern const char fn##_usage[]

CLI_COMMAND(cmd_gen);       /* cli/cmd_gen.c */
CLI_COMMAND(cmd_info);      /* cli/cmd_info.c */
CLI_COMMAND(cmd_verify);    /* cli/cmd_verify.c */
CLI_COMMAND(cmd_import);    /* cli/cmd_import.c (engine/import) */
CLI_COMMAND(cmd_plan);      /* cli/cmd_plan.c */
CLI_COMMAND(cmd_run);       /* cli/cmd_run.c */
CLI_COMMAND(cmd_eval);      /* cli/cmd_eval.c */
CLI_COMMAND(cmd_bench);     /* cli/cmd_bench.c */
CLI_COMMAND(cmd_roofline);  /* cli/cmd_roofline.c */
CLI_COMMAND(cmd_knobs);     /* cli/cmd_knobs.c */
CLI_COMMAND(cmd_trace_stats);  /* cli/cmd_trace.c */
CLI_COMMAND(cmd_trace_replay); /* cli/cmd_trace.c */
CLI_COMMAND(cmd_trace_chunks); /* cli/cmd_trace.c */
CLI_COMMAND(cmd_trace_convert); /* cli/cmd_trace.c */
CLI_COMMAND(cmd_sim);       /* cli/cmd_sim.c (research/sim) */
CLI_COMMAND(cmd_exp);       /* cli/cmd_exp.c (harness) */
CLI_COMMAND(cmd_report);    /* cli/cmd_report.c (harness) */
CLI_COMMAND(cmd_compare);   /* cli/cmd_compare.c (harness) */
CLI_COMMAND(cmd_refuted_list); /* cli/cmd_refuted.c (harness) */
CLI_COMMAND(cmd_tokenize);   /* cli/cmd_tokenize.c (engine/tok) */
CLI_COMMAND(cmd_detokenize); /* cli/cmd_tokenize.c (engine/tok) */
CLI_COMMAND(cmd_chat);       /* cli/cmd_chat.c (engine/tok chat templates) */
CLI_COMMAND(cmd_tune);       /* cli/cmd_tune.c (harness/tune) */

/* The row being run (set by the dispatcher; NULL outside a command). */
const cli_command *cli_current(void);
/* Prints the usage of `c` (and its knob groups) to f. */
void cli_print_usage(FILE *f, const cli_command *c);

#endif
