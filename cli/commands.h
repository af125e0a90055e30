/* cli/commands.h: one entry point per `spill` subcommand (argv[0] is the
 * subcommand name). Each returns the process exit code: 0 ok, 1 failure,
 * 2 usage error. */
#ifndef SPILL_CLI_COMMANDS_H
#define SPILL_CLI_COMMANDS_H

int cmd_gen(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_exp(int argc, char **argv);     /* cli/cmd_exp.c (harness) */
int cmd_report(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_refuted(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_sim(int argc, char **argv);     /* cli/cmd_sim.c (engine/sim) */
int cmd_knobs(int argc, char **argv);   /* cli/cmd_knobs.c */

#endif
