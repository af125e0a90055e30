/* cli/cmd_exp.c: `spill exp`: runs (or validates, or dry-runs) an
 * experiment config with progress on stderr, then prints the table, the
 * plots and the verdict. Thin: the work is in harness/ (docs/EXPERIMENTS.md);
 * `report`, `compare` and `refuted list` are in their own files. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/cmd_exp_slurm.h"
#include "cli/commands.h"
#include "harness/exp_config.h"
#include "harness/exp_peer.h"
#include "harness/exp_report.h"
#include "harness/exp_runner.h"
#include "harness/refuted.h"

static volatile int g_stop;

static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

const char cmd_exp_usage[] =
    "usage: spill exp CONFIG.json [--dry-run] [--validate] [--resume [RESULTS_DIR]]\n"
    "                 [--results DIR] [--publish] [--refuted DIR | --no-refuted]\n"
    "Runs an experiment (schema: docs/EXPERIMENTS.md); results go to\n"
    "results/<name>/<UTC time>-<commit>/. --resume continues the latest (or the given)\n"
    "results directory of the same config, skipping finished runs. A refuted hypothesis\n"
    "is logged in the results directory's refuted/; with --publish (refused unless\n"
    "git has no uncommitted changes to tracked files) in the repository's refuted/\n"
    "(or --refuted DIR).\n"
    "       spill exp CONFIG.json --slurm [--partition P] [--time T] [--cpus-per-task N]\n"
    "                 [--mem M] [--constraint C] [--array-max K] [--slurm-script-only]\n"
    "       spill exp --resume RESULTS_DIR --slurm [same options]\n"
    "       spill exp --status RESULTS_DIR | --merge RESULTS_DIR\n"
    "--slurm runs the experiment as a Slurm job array (one task per unit: every arm and\n"
    "repeat of a cell, budgets upward) plus a merge job that writes the report; options\n"
    "override the config's \"cluster\" defaults; --slurm-script-only writes and prints the\n"
    "scripts without submitting. --status shows each unit's rows and job state;\n"
    "--resume DIR --slurm resubmits only the units with missing runs; --merge writes the\n"
    "report from the rows present (missing runs marked). Array tasks run\n"
    "`spill exp --slurm-task DIR --unit N` (docs/EXPERIMENTS.md, Running on a cluster).\n";

static void on_progress(void *user, const spill_exp_progress *p) {
  (void)user;
  int tty = isatty(2);
  if (!strcmp(p->phase, "model")) {
    fprintf(stderr, "%sgenerating model: %d / %d MiB", tty ? "\r" : "", p->done, p->total);
    if (!tty || p->done >= p->total) fprintf(stderr, "\n");
    return;
  }
  if (!strcmp(p->phase, "run") && isnan(p->last_tok_per_s)) /* a row without metrics */
    fprintf(stderr, "[%d/%d] %-48s  OOM-killed  elapsed %5.0fs  eta %5.0fs\n", p->done, p->total,
            p->key, p->elapsed_s, p->eta_s);
  else if (!strcmp(p->phase, "run"))
    fprintf(stderr, "[%d/%d] %-48s %8.2f tok/s  elapsed %5.0fs  eta %5.0fs\n", p->done, p->total,
            p->key, p->last_tok_per_s, p->elapsed_s, p->eta_s);
  else if (!strcmp(p->phase, "oom-killed"))
    fprintf(stderr,
            "spill exp: run %s was ended by the machine profile's OOM killer after %d decode "
            "token(s); its row says so and the sweep goes on\n",
            p->key ? p->key : "", p->done);
  else if (!strcmp(p->phase, "warmup"))
    fprintf(stderr, "[%d/%d] %-48s (warmup, not recorded)\n", p->done, p->total, p->key);
  else if (!strcmp(p->phase, "copy"))
    fprintf(stderr, "copying %s to storage_path\n", p->key ? p->key : "");
  else if (!strcmp(p->phase, "paging"))
    fprintf(stderr,
            "spill exp: WARNING: run %s is paging: %d decode tokens in a row with >= %d major "
            "page faults each (from token %d): this budget is past the RAM cliff\n",
            p->key ? p->key : "", SPILL_PAGING_TOKENS, SPILL_PAGING_FAULTS_PER_TOKEN, p->done);
  else if (!strcmp(p->phase, "machine"))
    fprintf(stderr, "spill exp: %s\n", p->key ? p->key : "");
  else if (!strcmp(p->phase, "report"))
    fprintf(stderr, "writing summary, tables and plots\n");
}

typedef struct exp_args {
  const char *config, *resume_dir, *results, *refuted;
  int resume, dry, validate, publish, no_refuted;
  exp_slurm_args sl;
} exp_args;

/* Parses the command line; returns 0, or 2 after a usage error. */
static int parse_args(int argc, char **argv, exp_args *x) {
  memset(x, 0, sizeof *x);
  x->results = "results";
  x->sl.unit = -1;
  int k;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--resume")) {
      x->resume = 1;
      if (i + 1 < argc && argv[i + 1][0] != '-' && x->config) x->resume_dir = argv[++i];
    } else if (!strcmp(a, "--dry-run")) x->dry = 1;
    else if (!strcmp(a, "--validate")) x->validate = 1;
    else if (!strcmp(a, "--results")) {
      if (!(x->results = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--no-refuted")) x->no_refuted = 1;
    else if (!strcmp(a, "--publish")) x->publish = 1;
    else if (!strcmp(a, "--refuted")) {
      if (!(x->refuted = cli_value(argc, argv, &i))) return 2;
    } else if ((k = exp_slurm_parse(argc, argv, i, &x->sl)) != 0) {
      if (k < 0) return 2;
      i += k - 1;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (!x->config) x->config = a;
    else return cli_usage_error("unexpected argument %s", a);
  }
  struct stat cst;
  if (x->resume && !x->resume_dir && x->config && stat(x->config, &cst) == 0 && S_ISDIR(cst.st_mode))
    x->resume_dir = x->config, x->config = NULL; /* spill exp --resume DIR */
  return 0;
}

/* --validate / --dry-run: everything knowable before running
 * (harness/exp_runner.h), then the resolved config and the ordered runs. */
static int validate_or_dry(const exp_args *x, spill_exp_config *cfg) {
  spill_err e = {0};
  int rc = spill_exp_preflight(cfg, "cache/models", &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  if (x->validate) {
    printf("%s: ok (%d cells x %d arms x %d repeats)\n", x->config, spill_exp_config_n_cells(cfg),
           cfg->n_arms, cfg->repeats);
    return 0;
  }
  spill_exp_run *runs;
  int n;
  rc = spill_exp_plan_runs(cfg, &runs, &n, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    return 1;
  }
  char *json = spill_exp_config_resolved_json(cfg);
  printf("%s\n", json ? json : "");
  free(json);
  char model[SPILL_PATH_MAX], exe[SPILL_PATH_MAX];
  spill_exp_model_dir(cfg, "cache/models", model, sizeof model);
  printf("model directory: %s\n", model);
  if (cfg->n_peer_arms && spill_exp_peer_path(exe, sizeof exe, &e) == SPILL_OK)
    printf("peer arms run %s on %s (the container's import source)\n", exe, cfg->model_gguf);
  printf("%d measured runs (+ %d warmup runs per cell x arm):\n", n, cfg->warmup);
  for (int i = 0; i < n; i++) printf("  %4d  %s\n", i, runs[i].key);
  free(runs);
  return 0;
}

/* The table, where the results and plots are, the verdict. */
static void print_results(const char *dir, const char *verdict, const char *entry) {
  char tbl[SPILL_PATH_MAX];
  snprintf(tbl, sizeof tbl, "%s/table.md", dir);
  FILE *f = fopen(tbl, "r");
  if (f) {
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, r, stdout);
    fclose(f);
  }
  printf("\nresults: %s\n", dir);
  char plots[SPILL_PATH_MAX];
  snprintf(plots, sizeof plots, "%s/plots", dir);
  DIR *pd = opendir(plots);
  if (pd) {
    /* name every plot (PNG; an SVG with the same name sits beside each) */
    struct dirent *ent;
    printf("plots (PNG, and SVG beside each):\n");
    while ((ent = readdir(pd)))
      if (strlen(ent->d_name) > 4 && !strcmp(ent->d_name + strlen(ent->d_name) - 4, ".png"))
        printf("  %s/%s\n", plots, ent->d_name);
    closedir(pd);
  }
  if (verdict[0]) printf("hypothesis %s\n", verdict);
  if (entry[0]) printf("refuted entry: %s\n", entry);
}

int cmd_exp(int argc, char **argv) {
  cli_enter_workspace();
  exp_args x;
  if (parse_args(argc, argv, &x)) return 2;
  int slurm_rc = exp_slurm_main(&x.sl, x.config, x.resume, x.resume_dir, x.results, x.refuted,
                                x.no_refuted, x.publish, on_progress);
  if (slurm_rc >= 0) return slurm_rc;
  if (!x.config) return cli_usage_error("no config");
  spill_exp_config cfg;
  spill_err e = {0};
  int rc = spill_exp_config_load(x.config, &cfg, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    return 1;
  }
  if (x.validate || x.dry) {
    rc = validate_or_dry(&x, &cfg);
    spill_exp_config_free(&cfg);
    return rc;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  spill_exp_opts o;
  memset(&o, 0, sizeof o);
  o.results_root = x.results;
  o.cache_root = "cache/models";
  o.refuted_dir = x.refuted ? x.refuted : x.publish ? "refuted" : NULL;
  o.no_refuted = x.no_refuted;
  o.publish = x.publish;
  o.resume = x.resume;
  o.resume_dir = x.resume_dir;
  o.stop = &g_stop;
  o.progress = on_progress;
  char verdict[SPILL_PATH_MAX] = "", entry[SPILL_PATH_MAX] = "";
  o.verdict_out = verdict;
  o.verdict_n = sizeof verdict;
  o.refuted_entry_out = entry;
  o.refuted_entry_n = sizeof entry;
  char dir[SPILL_PATH_MAX] = "";
  rc = spill_exp_execute(&cfg, &o, dir, sizeof dir, &e);
  spill_exp_config_free(&cfg);
  if (dir[0]) print_results(dir, verdict, entry);
  if (rc == SPILL_E_INTERRUPTED) {
    fprintf(stderr, "spill exp: interrupted; finished runs are kept (continue with --resume)\n");
    return 1;
  }
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  return 0;
}
