/* harness/exp_slurm.h: experiments sharded onto a Slurm job array
 * (`spill exp --slurm`, docs/EXPERIMENTS.md "Running on a cluster").
 *
 * spill does not schedule: it splits an experiment into units, writes one
 * sbatch array (one task per unit) and one merge job (afterok on the array,
 * --kill-on-invalid-dep=yes), and submits them with sbatch. A unit is what
 * must stay in one process: every arm and repeat of a cell (ABBA pairs are
 * measured on one machine, close in time), and all budgets of the cells that
 * differ only in budget (the engine raises its budget in place, upward). Each
 * task runs its unit with the local runner (harness/exp_runner.h) into its
 * own rows file DIR/slurm/rows/uNNN.jsonl (resumable, rows tagged with the
 * node) and its node's environment DIR/slurm/env/uNNN-NODE.json; the merge
 * validates and concatenates the rows into DIR/runs.jsonl in plan order and
 * writes the same report, verdict and refuted entry as a local run.
 * Slurm is reached only through its commands (sbatch, scontrol, scancel).
 * Never prints.
 */
#ifndef SPILL_HARNESS_EXP_SLURM_H
#define SPILL_HARNESS_EXP_SLURM_H

#include <stddef.h>

#include "engine/spill.h"
#include "harness/exp_config.h"
#include "harness/exp_runner.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_EXP_SLURM_MAX_UNITS SPILL_EXP_MAX_CELLS

/* The units of cfg: unit_of_cell[c] for every cell (caller's array of
 * spill_exp_config_n_cells(cfg) ints), units numbered in plan order. */
int spill_exp_slurm_units(const spill_exp_config *cfg, int *unit_of_cell);
/* "lookahead=8" (the cell key without the budget axis; "all" when nothing
 * else is swept). */
void spill_exp_slurm_unit_key(const spill_exp_config *cfg, int unit, char *buf, size_t n);

typedef struct spill_exp_slurm_opts {
  spill_exp_cluster cluster; /* config defaults already overridden by flags */
  const char *spill_bin;     /* absolute path of the spill executable tasks run */
  const char *workdir;       /* absolute directory tasks start in (relative paths) */
  const char *cache_root;    /* generated models (default "cache/models") */
  const char *refuted_dir;   /* the merge's refuted/ (absolute); NULL = DIR/refuted */
  int no_refuted;            /* the merge writes no refuted entry */
  int quick_env;             /* tasks skip the O_DIRECT probe */
  int script_only;           /* write and return the scripts, submit nothing */
} spill_exp_slurm_opts;

/* Writes DIR/slurm/array.sh and merge.sh for the units with units[u] != 0
 * (NULL = all) and, unless script_only, submits them: the array, then the
 * merge with --dependency=afterok:ARRAY --kill-on-invalid-dep=yes; each
 * submission is one line of DIR/slurm/jobs.jsonl; the settings go to
 * DIR/slurm/cluster.json. *text_out (malloc'd, may
 * be NULL) gets both scripts and the submit commands. */
int spill_exp_slurm_submit(const char *dir, const spill_exp_config *cfg,
                           const spill_exp_slurm_opts *so, const unsigned char *units,
                           char **text_out, spill_err *e);

/* Units whose rows file lacks planned runs (units[u] = 1), and how many.
 * Rows are validated as for the merge. */
int spill_exp_slurm_missing(const char *dir, const spill_exp_config *cfg, unsigned char *units,
                            int *n_missing, spill_err *e);

/* One array task: runs unit `unit` of the experiment in dir (resuming its
 * own rows; rows another node left are moved aside to uNNN.jsonl.stale-NODE
 * so one cell's arms never mix machines). o carries stop/progress/cache
 * root/quick_env; its unit fields are set here. *runs_done (NULL fine) =
 * runs this call finished. */
int spill_exp_slurm_task(const char *dir, int unit, const spill_exp_opts *o, int *runs_done,
                         spill_err *e);
/* Puts the calling array task back in the queue (`scontrol requeue
 * ARRAYJOB_TASK` from SLURM_ARRAY_JOB_ID / SLURM_ARRAY_TASK_ID, or
 * SLURM_JOB_ID): the time-limit path. Slurm kills the running instance and
 * starts it again (after its requeue delay, about 2 minutes); the new
 * instance resumes the unit. */
int spill_exp_slurm_requeue_self(spill_err *e);

/* The merge: validates every task's rows (each key planned, in its file's
 * unit, once, with a node; one node per cell), writes DIR/runs.jsonl in plan
 * order and the report. Missing runs are reported (verdict withheld, no
 * refuted entry). A refuted hypothesis's entry goes to refuted_dir, or
 * DIR/refuted when NULL (as spill_exp_opts), none with no_refuted. verdict_out / refuted_entry_out as in spill_exp_opts. */
int spill_exp_slurm_merge(const char *dir, const char *refuted_dir, int no_refuted, char *verdict_out,
                          size_t verdict_n, char *refuted_entry_out, size_t refuted_entry_n,
                          int *missing_out, spill_err *e);

/* Per-unit state for `spill exp --status DIR`: rows done / planned, node,
 * the Slurm job and its state (scontrol show job; "gone" once Slurm forgot
 * it), and the merge job. *text_out malloc'd. *active_out = jobs still
 * pending or running (NULL fine). */
int spill_exp_slurm_status(const char *dir, char **text_out, int *active_out, spill_err *e);

/* The cluster settings and working directory of dir's last scripts
 * (DIR/slurm/cluster.json, also written by script_only; for --resume
 * --slurm, where flags override them). */
int spill_exp_slurm_last_submission(const char *dir, spill_exp_cluster *c, char *workdir,
                                    size_t wn, spill_err *e);

/* Whether dir is a --slurm results directory (has DIR/slurm/cluster.json). */
int spill_exp_slurm_is_slurm_dir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
