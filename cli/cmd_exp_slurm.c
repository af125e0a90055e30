/* cli/cmd_exp_slurm.c: the Slurm side of `spill exp` (--slurm, --status,
 * --merge, --resume DIR --slurm and the array tasks' --slurm-task). Thin:
 * the work is in harness/exp_slurm.c; cmd_exp.c hands over the flags it
 * does not know and the runs it cannot do locally. */
#define _GNU_SOURCE
#include "cli/cmd_exp_slurm.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/exp_config.h"
#include "harness/exp_report.h"
#include "harness/exp_runner.h"
#include "harness/exp_slurm.h"

static int set_str(char *dst, size_t n, const char *flag, const char *key, const char *v) {
  const char *why = spill_exp_cluster_check(key, v);
  if (why || strlen(v) >= n) {
    fprintf(stderr, "spill exp: %s %s: %s\n", flag, v, why ? why : "too long");
    return -1;
  }
  snprintf(dst, n, "%s", v);
  return 0;
}

static int set_int(int *dst, const char *flag, const char *v) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < 1 || x > 100000) {
    fprintf(stderr, "spill exp: %s %s: expected a positive integer\n", flag, v);
    return -1;
  }
  *dst = (int)x;
  return 0;
}

int exp_slurm_parse(int argc, char **argv, int i, exp_slurm_args *a) {
  const char *f = argv[i];
  if (!strcmp(f, "--slurm")) return a->slurm = 1, 1;
  if (!strcmp(f, "--slurm-script-only")) return a->slurm = a->script_only = 1, 1;
  static const char *const with_value[] = {"--partition", "--time", "--cpus-per-task", "--mem",
                                           "--constraint", "--array-max", "--status", "--merge",
                                           "--slurm-task", "--unit", NULL};
  int known = 0;
  for (const char *const *w = with_value; *w; w++) known |= !strcmp(f, *w);
  if (!known) return 0;
  if (i + 1 >= argc) {
    fprintf(stderr, "spill exp: %s needs a value\n", f);
    return -1;
  }
  const char *v = argv[i + 1];
  int rc = 0;
  if (!strcmp(f, "--partition")) rc = set_str(a->flags.partition, sizeof a->flags.partition, f, "partition", v);
  else if (!strcmp(f, "--time")) rc = set_str(a->flags.time, sizeof a->flags.time, f, "time", v);
  else if (!strcmp(f, "--mem")) rc = set_str(a->flags.mem, sizeof a->flags.mem, f, "mem", v);
  else if (!strcmp(f, "--constraint")) rc = set_str(a->flags.constraint, sizeof a->flags.constraint, f, "constraint", v);
  else if (!strcmp(f, "--cpus-per-task")) rc = set_int(&a->flags.cpus_per_task, f, v);
  else if (!strcmp(f, "--array-max")) rc = set_int(&a->flags.array_max, f, v);
  else if (!strcmp(f, "--status")) a->status_dir = v;
  else if (!strcmp(f, "--merge")) a->merge_dir = v;
  else if (!strcmp(f, "--slurm-task")) a->task_dir = v;
  else if (!strcmp(f, "--unit")) {
    char *end;
    long u = strtol(v, &end, 10);
    if (!*v || *end || u < 0 || u >= SPILL_EXP_SLURM_MAX_UNITS) {
      fprintf(stderr, "spill exp: --unit %s: not a unit number\n", v);
      return -1;
    }
    a->unit = (int)u;
  }
  return rc < 0 ? -1 : 2;
}

/* Flags override the config's (or the last submission's) defaults. */
static void override(spill_exp_cluster *c, const spill_exp_cluster *f) {
  if (f->partition[0]) snprintf(c->partition, sizeof c->partition, "%s", f->partition);
  if (f->time[0]) snprintf(c->time, sizeof c->time, "%s", f->time);
  if (f->mem[0]) snprintf(c->mem, sizeof c->mem, "%s", f->mem);
  if (f->constraint[0]) snprintf(c->constraint, sizeof c->constraint, "%s", f->constraint);
  if (f->cpus_per_task) c->cpus_per_task = f->cpus_per_task;
  if (f->array_max) c->array_max = f->array_max;
}

static void print_file(const char *dir, const char *name) {
  char p[SPILL_PATH_MAX];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "r");
  if (!f) return;
  char buf[4096];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, r, stdout);
  fclose(f);
}

static int submit(const char *dir, const spill_exp_config *cfg, spill_exp_cluster cl,
                  const char *workdir, const char *refuted, int no_refuted, int script_only,
                  const unsigned char *units) {
  char bin[PATH_MAX], absdir[PATH_MAX], absref[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 1);
  if (n <= 0) {
    fprintf(stderr, "spill exp: cannot find the spill executable (/proc/self/exe)\n");
    return 1;
  }
  bin[n] = 0;
  if (!realpath(dir, absdir)) {
    fprintf(stderr, "spill exp: %s: no such directory\n", dir);
    return 1;
  }
  if (refuted) {
    char tmp[PATH_MAX];
    /* the refuted directory may not exist yet: resolve its parent */
    if (!realpath(refuted, absref)) {
      if (refuted[0] == '/') snprintf(absref, sizeof absref, "%s", refuted);
      else if (getcwd(tmp, sizeof tmp)) snprintf(absref, sizeof absref, "%.2000s/%.2000s", tmp, refuted);
      else absref[0] = 0;
    }
  }
  spill_exp_slurm_opts so;
  memset(&so, 0, sizeof so);
  so.cluster = cl;
  so.spill_bin = bin;
  so.workdir = workdir;
  so.refuted_dir = refuted ? absref : NULL;
  so.no_refuted = no_refuted;
  so.script_only = script_only;
  char *text = NULL;
  spill_err e = {0};
  int rc = spill_exp_slurm_submit(absdir, cfg, &so, units, &text, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    free(text);
    return 1;
  }
  printf("%s", text ? text : "");
  free(text);
  printf("results: %s\n", absdir);
  if (!script_only) printf("follow with: spill exp --status %s\n", absdir);
  return 0;
}

static volatile int g_task_stop, g_time_up;
static void on_term(int sig) {
  if (sig == SIGUSR1) g_time_up = 1;
  g_task_stop = 1;
}

/* --status DIR: the Slurm jobs and rows of a results directory. */
static int slurm_status(const char *dir) {
  spill_err e = {0};
  char *text = NULL;
  int rc = spill_exp_slurm_status(dir, &text, NULL, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp --status: %s\n", e.msg);
    free(text);
    return 1;
  }
  printf("%s", text);
  free(text);
  return 0;
}

/* --merge DIR: the report of the units' rows; exit 1 while runs are missing. */
static int slurm_merge(const char *dir, const char *refuted, int no_refuted) {
  spill_err e = {0};
  char verdict[SPILL_PATH_MAX], entry[SPILL_PATH_MAX];
  int missing = 0;
  int rc = spill_exp_slurm_merge(dir, refuted, no_refuted, verdict, sizeof verdict, entry,
                                 sizeof entry, &missing, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp --merge: %s\n", e.msg);
    return 1;
  }
  print_file(dir, "table.md");
  printf("\nresults: %s\n", dir);
  if (verdict[0]) printf("hypothesis %s\n", verdict);
  if (entry[0]) printf("refuted entry: %s\n", entry);
  if (missing) {
    fprintf(stderr, "spill exp --merge: %d runs missing (see spill exp --status %s)\n", missing,
            dir);
    return 1;
  }
  return 0;
}

/* Near the time limit: requeue this task when it made progress, so the unit
 * resumes by itself; a limit shorter than one run would requeue forever, so
 * then it fails and --status shows it. */
static int slurm_task_time_up(int unit, int done) {
  spill_err e = {0};
  if (done == 0) {
    fprintf(stderr, "spill exp: unit %d: time limit reached before one run finished; not "
                    "requeued (raise --time, then spill exp --resume DIR --slurm)\n", unit);
    return 1;
  }
  if (spill_exp_slurm_requeue_self(&e) < 0) {
    fprintf(stderr, "spill exp: unit %d: %s\n", unit, e.msg);
    return 1;
  }
  fprintf(stderr, "spill exp: unit %d: time limit near after %d runs; requeued, the next "
                  "instance resumes the unit\n", unit, done);
  /* Slurm ends this instance; never report success for it */
  for (int i = 0; i < 600; i++) sleep(1);
  return 1;
}

/* --slurm-task DIR --unit N: one array task runs its unit's runs. */
static int slurm_task(const exp_slurm_args *a, spill_exp_progress_cb progress) {
  if (a->unit < 0) {
    fprintf(stderr, "spill exp: --slurm-task needs --unit N\n");
    return 2;
  }
  /* Slurm sends SIGTERM on scancel and at the time limit: stop after the
   * current token; finished rows stay and the unit resumes when resubmitted. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL); /* #SBATCH --signal: the time limit is near */
  spill_exp_opts o;
  memset(&o, 0, sizeof o);
  o.cache_root = "cache/models";
  o.stop = &g_task_stop;
  o.progress = progress;
  int done = 0;
  spill_err e = {0};
  int rc = spill_exp_slurm_task(a->task_dir, a->unit, &o, &done, &e);
  if (rc == SPILL_E_INTERRUPTED && g_time_up) return slurm_task_time_up(a->unit, done);
  if (rc == SPILL_E_INTERRUPTED) {
    fprintf(stderr, "spill exp: unit %d interrupted; finished runs are kept\n", a->unit);
    return 1;
  }
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s (%s)\n", e.msg, spill_status_name(rc));
    return 1;
  }
  fprintf(stderr, "spill exp: unit %d done\n", a->unit);
  return 0;
}

/* --resume DIR --slurm: resubmit the units with missing runs, with the last
 * submission's cluster settings (flags override them), once no job of the
 * directory is pending or running. */
static int slurm_resubmit(const exp_slurm_args *a, const char *resume_dir, const char *refuted,
                          int no_refuted) {
  if (!resume_dir) {
    fprintf(stderr, "spill exp: --resume --slurm needs the results directory\n");
    return 2;
  }
  spill_err e = {0};
  char cf[SPILL_PATH_MAX];
  snprintf(cf, sizeof cf, "%s/config.json", resume_dir);
  spill_exp_config cfg;
  if (spill_exp_config_load(cf, &cfg, &e) < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    return 1;
  }
  int rc = 1, active = 0, n_missing = 0;
  char *text = NULL, workdir[PATH_MAX];
  spill_exp_cluster cl;
  unsigned char *units = calloc(SPILL_EXP_SLURM_MAX_UNITS, 1);
  if (!units) fprintf(stderr, "spill exp: no memory\n");
  else if (spill_exp_slurm_status(resume_dir, &text, &active, &e) < 0 ||
           spill_exp_slurm_last_submission(resume_dir, &cl, workdir, sizeof workdir, &e) < 0 ||
           spill_exp_slurm_missing(resume_dir, &cfg, units, &n_missing, &e) < 0)
    fprintf(stderr, "spill exp: %s\n", e.msg);
  else if (active)
    fprintf(stderr, "spill exp: %d job(s) of %s are still pending or running; wait or scancel "
                    "them, then resume\n%s", active, resume_dir, text);
  else if (!n_missing) {
    printf("spill exp: every unit of %s has its rows; nothing to resubmit (spill exp --merge %s "
           "writes the report)\n", resume_dir, resume_dir);
    rc = 0;
  } else {
    override(&cl, &a->flags);
    printf("resubmitting %d unit(s) with missing runs\n", n_missing);
    rc = submit(resume_dir, &cfg, cl, workdir, refuted, no_refuted, a->script_only, units);
  }
  free(units);
  free(text);
  spill_exp_config_free(&cfg);
  return rc;
}

/* --slurm CONFIG: a new experiment. The results directory, config.json, the
 * model (generated once, here) and the submitting machine's env.json; the
 * tasks run everything else. */
static int slurm_submit_new(const exp_slurm_args *a, const char *config, const char *results,
                            const char *refuted, int no_refuted, int publish, const char *cwd,
                            spill_exp_progress_cb progress) {
  spill_err e = {0};
  spill_exp_config cfg;
  if (spill_exp_config_load(config, &cfg, &e) < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    return 1;
  }
  spill_exp_cluster cl = cfg.cluster;
  override(&cl, &a->flags);
  spill_exp_opts o;
  memset(&o, 0, sizeof o);
  o.results_root = results;
  o.cache_root = "cache/models";
  o.progress = progress;
  o.prepare_only = 1;
  o.no_report = 1;
  o.publish = publish; /* refuses a dirty tree before anything is created */
  char dir[SPILL_PATH_MAX] = "";
  int rc = spill_exp_execute(&cfg, &o, dir, sizeof dir, &e);
  if (rc < 0) {
    fprintf(stderr, "spill exp: %s\n", e.msg);
    spill_exp_config_free(&cfg);
    return 1;
  }
  rc = submit(dir, &cfg, cl, cwd, refuted, no_refuted, a->script_only, NULL);
  spill_exp_config_free(&cfg);
  return rc;
}

int exp_slurm_main(const exp_slurm_args *a, const char *config, int resume, const char *resume_dir,
                   const char *results, const char *refuted, int no_refuted, int publish,
                   spill_exp_progress_cb progress) {
  /* as a local run: --refuted DIR, else with --publish the repository's
   * refuted/, else the results directory's own */
  if (!refuted && publish) refuted = "refuted";
  if (a->status_dir) return slurm_status(a->status_dir);
  if (a->merge_dir) return slurm_merge(a->merge_dir, refuted, no_refuted);
  if (a->task_dir) return slurm_task(a, progress);
  if (!a->slurm) {
    /* a local --resume must not append to a Slurm experiment's runs.jsonl */
    if (resume && resume_dir && spill_exp_slurm_is_slurm_dir(resume_dir)) {
      fprintf(stderr, "spill exp: %s was run on Slurm: resume it with --resume %s --slurm\n",
              resume_dir, resume_dir);
      return 1;
    }
    return -1;
  }
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) {
    fprintf(stderr, "spill exp: getcwd failed\n");
    return 1;
  }
  if (resume) return slurm_resubmit(a, resume_dir, refuted, no_refuted);
  if (!config) return -1; /* usage */
  return slurm_submit_new(a, config, results, refuted, no_refuted, publish, cwd, progress);
}
