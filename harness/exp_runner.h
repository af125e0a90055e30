/* harness/exp_runner.h: runs an experiment config (`spill exp`).
 *
 * The runner expands the config into an ordered list of runs (cells with the
 * budget axis slowest so budgets only grow; within a cell, arms x repeats in
 * the configured order), loads the model once and reuses the engine while
 * only live knobs change (spill_engine_set_knob / set_budget upward);
 * anything else (storage, policy, threads, a smaller budget, per-run profile
 * files) reopens it, and each row records which happened. Every finished run
 * is one fsynced line of runs.jsonl identified by its key, so an interrupted
 * experiment keeps its rows and --resume skips them. The library never
 * prints: progress goes to a callback.
 */
#ifndef SPILL_HARNESS_EXP_RUNNER_H
#define SPILL_HARNESS_EXP_RUNNER_H

#include <stddef.h>

#include "engine/spill.h"
#include "harness/exp_config.h"
#include "harness/exp_rows.h" /* spill_exp_run, spill_exp_plan_runs */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_exp_progress {
  const char *phase; /* "model", "copy", "run", "warmup", "report", "paging", "machine"
                      * (key: what was cleaned up after a killed runner) */
  const char *key;   /* the run (phase run/warmup/paging) */
  int done, total;   /* measured runs finished / planned (including resumed);
                      * phase "paging" (the engine detected paging while the
                      * run went, SPILL_PAGING_*): the decode token it was
                      * detected at / decode tokens over the threshold so far */
  double elapsed_s, eta_s;
  double last_tok_per_s; /* "run": the run's decode tok/s; NaN for a row without
                          * metrics (OOM-killed). "oom-killed": done = the decode
                          * tokens the run reached */
} spill_exp_progress;
typedef void (*spill_exp_progress_cb)(void *user, const spill_exp_progress *p);

typedef struct spill_exp_opts {
  const char *results_root; /* default "results" */
  const char *cache_root;   /* generated models; default "cache/models" */
  /* A refuted hypothesis's entry goes to refuted_dir; NULL = the results
   * directory's own refuted/ (so a plain or demo run never touches the
   * repository's refuted/). no_refuted = write none. */
  const char *refuted_dir;
  int no_refuted;
  /* A run meant for publishing: refused (SPILL_E_CONFIG, before anything
   * runs) unless the git working tree has no uncommitted changes to tracked
   * files, so the results name the commit they ran on. */
  int publish;
  int resume;               /* continue resume_dir (or the latest results dir) */
  const char *resume_dir;   /* NULL = latest under results_root/<name>/ */
  const char *commit;       /* NULL = ask git */
  int quick_env;            /* skip the O_DIRECT bandwidth probe (tests) */
  int max_runs;             /* stop after this many measured runs (0 = all) */
  volatile int *stop;       /* set non-zero (e.g. on SIGINT) to stop after the current token */
  spill_exp_progress_cb progress;
  void *user;
  /* Optional outputs (caller's buffers; NULL = not wanted): the hypothesis
   * line ("<verdict>: <claim>: <result>", "" without a hypothesis) and the
   * path of the refuted/ entry written ("" when none was). */
  char *verdict_out;
  size_t verdict_n;
  char *refuted_entry_out;
  size_t refuted_entry_n;
  /* Slurm tasks (harness/exp_slurm.h). cells: run only cells c with
   * cells[c] != 0 (NULL = all); rows_file / env_file: where this process
   * appends its rows and writes its environment (NULL = DIR/runs.jsonl,
   * DIR/env.json); node: tag every row with "node" (NULL = no tag);
   * no_report: write no report; prepare_only: create the results directory,
   * model and env.json, then run nothing. */
  const unsigned char *cells;
  const char *rows_file, *env_file, *node;
  int no_report, prepare_only;
} spill_exp_opts;

/* Runs cfg. out_dir gets the results directory (also on failure once it
 * exists). Returns SPILL_E_INTERRUPTED when stopped (finished rows kept),
 * SPILL_E_INTERNAL when exact arms disagree, or another error. */
int spill_exp_execute(const spill_exp_config *cfg, const spill_exp_opts *o, char *out_dir,
                  size_t out_n, spill_err *e);

/* What `spill exp --validate` / `--dry-run` check beyond the config's own
 * validation, with the model on disk or, for a recipe not generated yet,
 * the plan of the model it will generate (spill_plan_recipe, nothing
 * written): the model has a manifest (or is a recipe); peer arms have their
 * binary (and, on disk, model_gguf matches the container); every (cell, arm)
 * engine config plans (budget not below the floor nor above the machine
 * unless force_budget, with sizes at a precision that means something);
 * cache_slots not above the model's expert records; ctx holds the prompt in
 * the model's tokens (its own tokenizer, else bytes, plus BOS) and
 * decode_tokens; every emulated RAM is safe (spill_ramlock_plan). Errors name
 * the JSON path ("sweep.budget", "arms[1].set.cache_slots",
 * "workload.prompt", ...). cache_root as in spill_exp_opts. */
int spill_exp_preflight(const spill_exp_config *cfg, const char *cache_root, spill_err *e);

/* The container directory the config runs on (a generated model's cache
 * directory for recipes, before storage_path copying). */
void spill_exp_model_dir(const spill_exp_config *cfg, const char *cache_root, char *buf,
                         size_t n);

#ifdef __cplusplus
}
#endif
#endif
