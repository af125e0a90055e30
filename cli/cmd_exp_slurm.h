/* cli/cmd_exp_slurm.h: `spill exp`'s Slurm flags and actions
 * (cmd_exp_slurm.c); cmd_exp.c calls these two functions and nothing else. */
#ifndef SPILL_CLI_CMD_EXP_SLURM_H
#define SPILL_CLI_CMD_EXP_SLURM_H

#include "harness/exp_config.h"
#include "harness/exp_runner.h"

typedef struct exp_slurm_args {
  int slurm, script_only;
  spill_exp_cluster flags; /* only what was given on the command line */
  const char *status_dir, *merge_dir, *task_dir;
  int unit; /* --unit (set -1 before parsing) */
} exp_slurm_args;

/* argv[i] is one of the Slurm flags: returns how many arguments it took (1
 * or 2), 0 when it is not a Slurm flag, -1 on a bad value (message printed). */
int exp_slurm_parse(int argc, char **argv, int i, exp_slurm_args *a);

/* Runs the Slurm action the flags ask for and returns the exit code, or -1
 * when there is none (a plain local run). */
int exp_slurm_main(const exp_slurm_args *a, const char *config, int resume, const char *resume_dir,
                   const char *results, const char *refuted, int no_refuted, int publish,
                   spill_exp_progress_cb progress);

#endif
