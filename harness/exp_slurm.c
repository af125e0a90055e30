/* harness/exp_slurm.c: units, sbatch scripts, submission, array tasks, the
 * merge and --status for experiments run on Slurm (exp_slurm.h).
 *
 * Layout under a results directory DIR (the local runner's files plus):
 *   slurm/array.sh, slurm/merge.sh   the last scripts submitted
 *   slurm/cluster.json               the settings and working directory
 *   slurm/jobs.jsonl                 one line per submission (job ids, units)
 *   slurm/rows/uNNN.jsonl            unit NNN's rows (appended by its task)
 *   slurm/env/uNNN-NODE.json         the environment of the node that ran it
 *   slurm/logs/                      Slurm's stdout/stderr of every job
 * Task rows are untrusted input for the merge: a row whose key is not
 * planned, belongs to another unit, appears twice or lacks its node stops the
 * merge with the file and line. Slurm commands are run with fork/exec (no
 * shell); everything written into a script is checked against Slurm's own
 * spelling (exp_config.c) or a conservative path alphabet first.
 */
#define _GNU_SOURCE
#include "harness/exp_slurm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/exp_files.h"
#include "harness/exp_report.h"
#include "harness/exp_rows.h"
#include "harness/refuted.h"

/* ---- units ---- */

static int budget_axis(const spill_exp_config *cfg) {
  for (int a = 0; a < cfg->n_axes; a++)
    if (!strcmp(cfg->axes[a].key, "budget")) return a;
  return -1;
}

/* The cell key without the budget axis. */
static void unit_key_of_cell(const spill_exp_config *cfg, int c, char *buf, size_t n) {
  const char *v[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(cfg, c, v);
  int b = budget_axis(cfg);
  size_t off = 0;
  buf[0] = 0;
  for (int a = 0; a < cfg->n_axes && off < n; a++)
    if (a != b)
      off += (size_t)snprintf(buf + off, n - off, "%s%s=%s", off ? "," : "", cfg->axes[a].key, v[a]);
  if (!buf[0]) snprintf(buf, n, "all");
}

int spill_exp_slurm_units(const spill_exp_config *cfg, int *unit_of_cell) {
  int cells = spill_exp_config_n_cells(cfg), n = 0;
  char ki[256], kj[256];
  for (int c = 0; c < cells; c++) {
    unit_of_cell[c] = -1;
    unit_key_of_cell(cfg, c, ki, sizeof ki);
    for (int d = 0; d < c && unit_of_cell[c] < 0; d++) {
      unit_key_of_cell(cfg, d, kj, sizeof kj);
      if (!strcmp(ki, kj)) unit_of_cell[c] = unit_of_cell[d];
    }
    if (unit_of_cell[c] < 0) unit_of_cell[c] = n++;
  }
  return n;
}

void spill_exp_slurm_unit_key(const spill_exp_config *cfg, int unit, char *buf, size_t n) {
  int cells = spill_exp_config_n_cells(cfg);
  int *uoc = malloc(sizeof(int) * (size_t)cells);
  snprintf(buf, n, "?");
  if (!uoc) return;
  spill_exp_slurm_units(cfg, uoc);
  for (int c = 0; c < cells; c++)
    if (uoc[c] == unit) {
      unit_key_of_cell(cfg, c, buf, n);
      break;
    }
  free(uoc);
}

/* ---- helpers ---- */

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* Characters allowed in paths written into #SBATCH lines and scripts. */
static int safe_path(const char *p) {
  if (!p[0]) return 0;
  for (const char *q = p; *q; q++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.,+=:@-", *q))
      return 0;
  return 1;
}

/* Runs argv (no shell), stdout into out (NUL-terminated, trailing newlines
 * cut), stderr into err. Returns the exit status, or -1 if it did not run. */
static int run_capture(char *const argv[], char *out, size_t n, char *err, size_t en) {
  int po[2], pe[2];
  if (pipe(po) < 0) return -1;
  if (pipe(pe) < 0) {
    close(po[0]), close(po[1]);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(po[1], 1);
    dup2(pe[1], 2);
    close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
    execvp(argv[0], argv);
    dprintf(2, "%s: %s", argv[0], strerror(errno));
    _exit(127);
  }
  close(po[1]), close(pe[1]);
  /* Read both pipes (small outputs: stdout first, stderr after; Slurm's
   * commands print a few lines). */
  size_t o = 0, eo = 0;
  ssize_t r;
  char sink[4096];
  while ((r = read(po[0], o + 1 < n ? out + o : sink, o + 1 < n ? n - 1 - o : sizeof sink)) > 0)
    if (o + 1 < n) o += (size_t)r;
  while ((r = read(pe[0], eo + 1 < en ? err + eo : sink, eo + 1 < en ? en - 1 - eo : sizeof sink)) > 0)
    if (eo + 1 < en) eo += (size_t)r;
  close(po[0]), close(pe[0]);
  if (n) out[o] = 0;
  if (en) err[eo] = 0;
  while (o > 0 && (out[o - 1] == '\n' || out[o - 1] == ' ')) out[--o] = 0;
  while (eo > 0 && (err[eo - 1] == '\n' || err[eo - 1] == ' ')) err[--eo] = 0;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && strstr(err, strerror(ENOENT))) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
  if (!*buf) return;
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int w = vsnprintf(*buf + *len, *cap - *len, fmt, ap);
    va_end(ap);
    if (w < 0) return;
    if ((size_t)w < *cap - *len) {
      *len += (size_t)w;
      return;
    }
    size_t nc = (*cap + (size_t)w) * 2;
    char *nb = realloc(*buf, nc);
    if (!nb) {
      free(*buf);
      *buf = NULL;
      return;
    }
    *buf = nb;
    *cap = nc;
  }
}

static void node_name(char *buf, size_t n) {
  const char *s = getenv("SLURMD_NODENAME");
  if (s && s[0]) snprintf(buf, n, "%s", s);
  else if (gethostname(buf, n) < 0 || !buf[0]) snprintf(buf, n, "unknown");
  buf[n - 1] = 0;
  for (char *q = buf; *q; q++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *q)) *q = '_';
}

/* ---- rows of all tasks ---- */

typedef struct plan {
  const spill_exp_config *cfg;
  spill_exp_run *runs;
  int n_runs, n_cells, n_units;
  int *unit_of_cell;
  char **line;      /* per run: its row (NULL = missing) */
  char **node;      /* per run: the node of its row */
} plan;

static void plan_free(plan *P) {
  for (int i = 0; P->line && i < P->n_runs; i++) free(P->line[i]), free(P->node[i]);
  free(P->line), free(P->node), free(P->runs), free(P->unit_of_cell);
  memset(P, 0, sizeof *P);
}

static int plan_init(const spill_exp_config *cfg, plan *P, spill_err *e) {
  memset(P, 0, sizeof *P);
  P->cfg = cfg;
  SPILL_TRY(spill_exp_plan_runs(cfg, &P->runs, &P->n_runs, e));
  P->n_cells = spill_exp_config_n_cells(cfg);
  P->unit_of_cell = malloc(sizeof(int) * (size_t)P->n_cells);
  P->line = calloc((size_t)P->n_runs + 1, sizeof *P->line);
  P->node = calloc((size_t)P->n_runs + 1, sizeof *P->node);
  if (!P->unit_of_cell || !P->line || !P->node) {
    plan_free(P);
    return spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
  }
  P->n_units = spill_exp_slurm_units(cfg, P->unit_of_cell);
  return SPILL_OK;
}

static void rows_file(const char *dir, int u, char *buf, size_t n) {
  snprintf(buf, n, "%s/slurm/rows/u%03d.jsonl", dir, u);
}

/* Reads every unit's rows file into P (validated; see the file comment). */
static int load_rows(const char *dir, plan *P, spill_err *e) {
  for (int u = 0; u < P->n_units; u++) {
    char f[SPILL_PATH_MAX];
    rows_file(dir, u, f, sizeof f);
    char **lines;
    int n;
    SPILL_TRY(spill_exp_read_lines(f, 0, &lines, &n, e));
    /* the local reader's checks first (key planned and agreeing with cell,
     * arm and repeat; token hash; no run twice in the file) */
    spill_exp_rows parsed;
    int rc = spill_exp_rows_parse(P->cfg, f, lines, n, &parsed, e);
    if (rc == SPILL_OK) spill_exp_rows_free(&parsed);
    for (int i = 0; i < n && rc == SPILL_OK; i++) {
      cJSON *row = spill_json_parse_quiet(lines[i]);
      const cJSON *k = row ? cJSON_GetObjectItemCaseSensitive(row, "key") : NULL;
      const cJSON *nd = row ? cJSON_GetObjectItemCaseSensitive(row, "node") : NULL;
      int r = -1;
      for (int j = 0; cJSON_IsString(k) && j < P->n_runs && r < 0; j++)
        if (!strcmp(P->runs[j].key, k->valuestring)) r = j;
      if (!cJSON_IsString(k))
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: not a run row", f, i + 1);
      else if (r < 0)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: run %s is not in this experiment", f,
                           i + 1, k->valuestring);
      else if (P->unit_of_cell[P->runs[r].cell] != u)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: run %s belongs to unit %d, not %d", f,
                           i + 1, k->valuestring, P->unit_of_cell[P->runs[r].cell], u);
      else if (P->line[r])
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: run %s appears twice", f, i + 1,
                           k->valuestring);
      else if (!cJSON_IsString(nd) || !nd->valuestring[0])
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: run %s names no node", f, i + 1,
                           k->valuestring);
      else {
        P->line[r] = strdup(lines[i]);
        P->node[r] = strdup(nd->valuestring);
        if (!P->line[r] || !P->node[r]) rc = spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
      }
      cJSON_Delete(row);
    }
    spill_exp_lines_free(lines, n);
    SPILL_TRY(rc);
  }
  /* One node per cell: the arms of an A/B are never pooled across machines. */
  for (int i = 0; i < P->n_runs; i++)
    for (int j = i + 1; P->line[i] && j < P->n_runs; j++)
      if (P->line[j] && P->runs[j].cell == P->runs[i].cell && strcmp(P->node[i], P->node[j]))
        return spill_err_set(e, SPILL_E_FORMAT,
                             "runs %s (node %s) and %s (node %s) share a cell but ran on different "
                             "nodes: refusing to pool them (delete unit %d's rows and resubmit it)",
                             P->runs[i].key, P->node[i], P->runs[j].key, P->node[j],
                             P->unit_of_cell[P->runs[i].cell]);
  return SPILL_OK;
}

int spill_exp_slurm_missing(const char *dir, const spill_exp_config *cfg, unsigned char *units,
                            int *n_missing, spill_err *e) {
  plan P;
  SPILL_TRY(plan_init(cfg, &P, e));
  int rc = load_rows(dir, &P, e);
  *n_missing = 0;
  if (rc == SPILL_OK) {
    for (int u = 0; u < P.n_units; u++) units[u] = 0;
    for (int i = 0; i < P.n_runs; i++)
      if (!P.line[i]) units[P.unit_of_cell[P.runs[i].cell]] = 1;
    for (int u = 0; u < P.n_units; u++) *n_missing += units[u];
  }
  plan_free(&P);
  return rc;
}

int spill_exp_slurm_is_slurm_dir(const char *dir) {
  char f[SPILL_PATH_MAX];
  snprintf(f, sizeof f, "%s/slurm/cluster.json", dir);
  return exists(f);
}

/* ---- scripts and submission ---- */

/* "0-3,5,7-9" from a unit mask. */
static void array_spec(const unsigned char *units, int n, char *buf, size_t cap) {
  size_t off = 0;
  buf[0] = 0;
  for (int u = 0; u < n && off < cap; u++) {
    if (!units[u]) continue;
    int v = u;
    while (v + 1 < n && units[v + 1]) v++;
    if (v > u) off += (size_t)snprintf(buf + off, cap - off, "%s%d-%d", off ? "," : "", u, v);
    else off += (size_t)snprintf(buf + off, cap - off, "%s%d", off ? "," : "", u);
    u = v;
  }
}

static void sbatch_common(char **s, size_t *len, size_t *cap, const spill_exp_cluster *c,
                          const char *workdir) {
  append(s, len, cap, "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --chdir=%s\n", workdir);
  if (c->partition[0]) append(s, len, cap, "#SBATCH --partition=%s\n", c->partition);
  if (c->time[0]) append(s, len, cap, "#SBATCH --time=%s\n", c->time);
  if (c->cpus_per_task) append(s, len, cap, "#SBATCH --cpus-per-task=%d\n", c->cpus_per_task);
  if (c->mem[0]) append(s, len, cap, "#SBATCH --mem=%s\n", c->mem);
  if (c->constraint[0]) append(s, len, cap, "#SBATCH --constraint=%s\n", c->constraint);
}

static int check_cluster(const spill_exp_cluster *c, spill_err *e) {
  const char *keys[] = {"partition", "time", "mem", "constraint"};
  const char *vals[] = {c->partition, c->time, c->mem, c->constraint};
  for (int i = 0; i < 4; i++) {
    const char *why = vals[i][0] ? spill_exp_cluster_check(keys[i], vals[i]) : NULL;
    if (why) return spill_err_set(e, SPILL_E_CONFIG, "--%s %s: %s", keys[i], vals[i], why);
  }
  if (c->cpus_per_task < 0 || c->array_max < 0)
    return spill_err_set(e, SPILL_E_CONFIG, "--cpus-per-task / --array-max: must be positive");
  return SPILL_OK;
}

/* The paths written into the scripts: safe characters only, absolute. */
static int check_submit_paths(const char *dir, const spill_exp_slurm_opts *so, spill_err *e) {
  const char *paths[] = {dir, so->spill_bin, so->workdir, so->refuted_dir ? so->refuted_dir : "x"};
  for (int i = 0; i < 4; i++)
    if (!safe_path(paths[i]))
      return spill_err_set(e, SPILL_E_CONFIG,
                           "%s: a path written into an sbatch script may hold only letters, digits "
                           "and /_.,+=:@-", paths[i]);
  if (dir[0] != '/' || so->spill_bin[0] != '/' || so->workdir[0] != '/')
    return spill_err_set(e, SPILL_E_CONFIG, "slurm: results dir, spill binary and workdir must be absolute");
  return SPILL_OK;
}

/* The array spec of the units to submit (units NULL: every unit of cfg). */
static int units_spec(const spill_exp_config *cfg, const unsigned char *units, char *spec,
                      size_t n, int *n_units_out, spill_err *e) {
  plan P;
  SPILL_TRY(plan_init(cfg, &P, e));
  int n_units = P.n_units;
  plan_free(&P);
  unsigned char *all = NULL;
  if (!units) {
    all = malloc((size_t)n_units);
    if (!all) return spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
    memset(all, 1, (size_t)n_units);
    units = all;
  }
  array_spec(units, n_units, spec, n);
  free(all);
  if (!spec[0]) return spill_err_set(e, SPILL_E_CONFIG, "slurm: no unit to submit");
  if (strlen(spec) > n - 16) return spill_err_set(e, SPILL_E_CONFIG, "slurm: too many units");
  *n_units_out = n_units;
  return SPILL_OK;
}

/* array.sh: task N runs unit N; requeued near the time limit. */
static void array_script(char **a, size_t *len, size_t *cap, const char *dir,
                         const spill_exp_config *cfg, const spill_exp_slurm_opts *so,
                         int n_units, const char *spec) {
  const spill_exp_cluster *c = &so->cluster;
  append(a, len, cap,
         "#!/bin/sh\n"
         "# spill exp --slurm: experiment %s, %d unit(s); array task N runs unit N\n"
         "# (every arm and repeat of a cell, its budgets upward) into\n"
         "# %s/slurm/rows/uNNN.jsonl\n"
         "#SBATCH --job-name=spill-%s\n"
         "#SBATCH --array=%s",
         cfg->name, n_units, dir, cfg->name, spec);
  if (c->array_max) append(a, len, cap, "%%%d", c->array_max);
  append(a, len, cap, "\n#SBATCH --output=%s/slurm/logs/u%%a-j%%A.out\n", dir);
  /* SIGUSR1 60 s before the time limit: the task stops after the current
   * token and requeues itself; the new instance resumes the unit. */
  append(a, len, cap, "#SBATCH --requeue\n#SBATCH --signal=B:USR1@60\n#SBATCH --open-mode=append\n");
  sbatch_common(a, len, cap, c, so->workdir);
  append(a, len, cap, "exec %s exp --slurm-task %s --unit \"$SLURM_ARRAY_TASK_ID\"\n",
         so->spill_bin, dir);
}

/* merge.sh: after the array job, merges the task rows and writes the report. */
static void merge_script(char **m, size_t *len, size_t *cap, const char *dir,
                         const spill_exp_config *cfg, const spill_exp_slurm_opts *so) {
  append(m, len, cap,
         "#!/bin/sh\n"
         "# spill exp --slurm: merges the task rows of %s and writes the report;\n"
         "# submitted with --dependency=afterok:<array job>\n"
         "#SBATCH --job-name=spill-%s-merge\n"
         "#SBATCH --kill-on-invalid-dep=yes\n"
         "#SBATCH --output=%s/slurm/logs/merge-j%%j.out\n",
         dir, cfg->name, dir);
  spill_exp_cluster mc = so->cluster;
  mc.cpus_per_task = 0; /* the merge is one short single-threaded process */
  sbatch_common(m, len, cap, &mc, so->workdir);
  if (so->no_refuted) append(m, len, cap, "exec %s exp --merge %s --no-refuted\n", so->spill_bin, dir);
  else if (so->refuted_dir)
    append(m, len, cap, "exec %s exp --merge %s --refuted %s\n", so->spill_bin, dir, so->refuted_dir);
  else append(m, len, cap, "exec %s exp --merge %s\n", so->spill_bin, dir);
}

/* The settings and working directory, for --resume DIR --slurm. */
static int write_cluster_json(const char *dir, const spill_exp_config *cfg,
                              const spill_exp_slurm_opts *so, spill_err *e) {
  const spill_exp_cluster *c = &so->cluster;
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "workdir", so->workdir);
  cJSON_AddStringToObject(j, "config", cfg->source);
  cJSON *cl = cJSON_AddObjectToObject(j, "cluster");
  cJSON_AddStringToObject(cl, "partition", c->partition);
  cJSON_AddStringToObject(cl, "time", c->time);
  cJSON_AddStringToObject(cl, "mem", c->mem);
  cJSON_AddStringToObject(cl, "constraint", c->constraint);
  cJSON_AddNumberToObject(cl, "cpus_per_task", c->cpus_per_task);
  cJSON_AddNumberToObject(cl, "array_max", c->array_max);
  char *text = cJSON_Print(j);
  cJSON_Delete(j);
  char fc[SPILL_PATH_MAX];
  snprintf(fc, sizeof fc, "%s/slurm/cluster.json", dir);
  int rc = text ? spill_write_file_atomic(fc, text, strlen(text), e)
                : spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
  free(text);
  return rc;
}

/* sbatch --parsable printed a job id: "ID", or "ID;CLUSTER" on federated
 * setups (cut to ID here). */
static int job_id_ok(char *id) {
  char *semi = strchr(id, ';');
  if (semi) *semi = 0;
  return id[0] && strspn(id, "0123456789") == strlen(id);
}

/* Submits the array job, then the merge job depending on it (the array job
 * is cancelled when the merge cannot be submitted). */
static int submit_jobs(const char *fa, const char *fm, char *aid, char *mid, size_t n,
                       spill_err *e) {
  char err[SPILL_PATH_MAX] = "";
  char *av[] = {"sbatch", "--parsable", (char *)fa, NULL};
  int st = run_capture(av, aid, n, err, sizeof err), ok = job_id_ok(aid);
  if (st != 0 || !ok)
    return spill_err_set(e, SPILL_E_IO, "sbatch %s failed (status %d): %s", fa, st,
                         st < 0 ? "sbatch not found (install slurm-wlm / slurm-client)"
                                : err[0] ? err : aid);
  char dep[300];
  snprintf(dep, sizeof dep, "--dependency=afterok:%s", aid);
  char *mv[] = {"sbatch", "--parsable", dep, (char *)fm, NULL};
  st = run_capture(mv, mid, n, err, sizeof err);
  ok = job_id_ok(mid);
  if (st != 0 || !ok) {
    int rc = spill_err_set(e, SPILL_E_IO, "sbatch %s failed (status %d): %s; array job %s cancelled",
                           fm, st, err[0] ? err : mid, aid);
    char o2[256], e2[256];
    char *cv[] = {"scancel", aid, NULL};
    run_capture(cv, o2, sizeof o2, e2, sizeof e2);
    return rc;
  }
  return SPILL_OK;
}

/* One line of DIR/slurm/jobs.jsonl per submission (--status reads them). */
static int record_jobs(const char *dir, const char *aid, const char *mid, const char *spec,
                       spill_err *e) {
  cJSON *j = cJSON_CreateObject();
  char ts[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(j, "utc", ts);
  cJSON_AddStringToObject(j, "array_job", aid);
  cJSON_AddStringToObject(j, "merge_job", mid);
  cJSON_AddStringToObject(j, "units", spec);
  char *line = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  char fj[SPILL_PATH_MAX];
  snprintf(fj, sizeof fj, "%s/slurm/jobs.jsonl", dir);
  int rc = line ? spill_exp_append_line(fj, line, e) : spill_err_set(e, SPILL_E_NOMEM, "no memory");
  free(line);
  return rc;
}

/* What the CLI prints: both scripts, then how to submit them or what was. */
static char *submit_text(const char *fa, const char *a, const char *fm, const char *m,
                         const spill_exp_slurm_opts *so, const char *aid, const char *spec,
                         const char *mid) {
  size_t tcap = strlen(a) + strlen(m) + 1024, tl = 0;
  char *t = malloc(tcap);
  if (!t) return NULL;
  t[0] = 0;
  append(&t, &tl, &tcap, "# ---- %s ----\n%s\n# ---- %s ----\n%s\n", fa, a, fm, m);
  if (so->script_only)
    append(&t, &tl, &tcap,
           "# ---- submit ----\n"
           "# ARRAY=$(sbatch --parsable %s)\n"
           "# sbatch --dependency=afterok:$ARRAY %s\n",
           fa, fm);
  else append(&t, &tl, &tcap, "# submitted: array job %s (units %s), merge job %s\n", aid, spec, mid);
  return t;
}

int spill_exp_slurm_submit(const char *dir, const spill_exp_config *cfg,
                           const spill_exp_slurm_opts *so, const unsigned char *units,
                           char **text_out, spill_err *e) {
  if (text_out) *text_out = NULL;
  SPILL_TRY(check_cluster(&so->cluster, e));
  SPILL_TRY(check_submit_paths(dir, so, e));
  char spec[8192];
  int n_units = 0;
  SPILL_TRY(units_spec(cfg, units, spec, sizeof spec, &n_units, e));
  char sub[SPILL_PATH_MAX];
  const char *subdirs[] = {"slurm/rows", "slurm/env", "slurm/logs"};
  for (int i = 0; i < 3; i++) {
    snprintf(sub, sizeof sub, "%s/%s", dir, subdirs[i]);
    SPILL_TRY(spill_exp_mkdirs(sub, e));
  }
  size_t cap = 4096, len = 0, mcap = 2048, mlen = 0;
  char *a = malloc(cap), *m = malloc(mcap);
  if (!a || !m) {
    free(a), free(m);
    return spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
  }
  a[0] = m[0] = 0;
  array_script(&a, &len, &cap, dir, cfg, so, n_units, spec);
  merge_script(&m, &mlen, &mcap, dir, cfg, so);
  if (!a || !m) {
    free(a), free(m);
    return spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
  }
  char fa[SPILL_PATH_MAX], fm[SPILL_PATH_MAX];
  snprintf(fa, sizeof fa, "%s/slurm/array.sh", dir);
  snprintf(fm, sizeof fm, "%s/slurm/merge.sh", dir);
  int rc = spill_write_file_atomic(fa, a, strlen(a), e);
  if (rc == SPILL_OK) rc = spill_write_file_atomic(fm, m, strlen(m), e);
  if (rc == SPILL_OK) rc = write_cluster_json(dir, cfg, so, e);
  char aid[256] = "", mid[256] = "";
  if (rc == SPILL_OK && !so->script_only) rc = submit_jobs(fa, fm, aid, mid, sizeof aid, e);
  if (rc == SPILL_OK && !so->script_only) rc = record_jobs(dir, aid, mid, spec, e);
  if (rc == SPILL_OK && text_out) *text_out = submit_text(fa, a, fm, m, so, aid, spec, mid);
  free(a), free(m);
  return rc;
}

/* ---- one array task ---- */

static int count_lines(const char *file) {
  char **lines;
  int n = 0;
  spill_err ig = {0};
  if (spill_exp_read_lines(file, 0, &lines, &n, &ig) < 0) return 0;
  spill_exp_lines_free(lines, n);
  return n;
}

int spill_exp_slurm_requeue_self(spill_err *e) {
  const char *aj = getenv("SLURM_ARRAY_JOB_ID"), *at = getenv("SLURM_ARRAY_TASK_ID");
  const char *j = getenv("SLURM_JOB_ID");
  char id[128];
  if (aj && at && aj[0] && at[0]) snprintf(id, sizeof id, "%.60s_%.60s", aj, at);
  else if (j && j[0]) snprintf(id, sizeof id, "%.100s", j);
  else return spill_err_set(e, SPILL_E_CONFIG, "requeue: not running under Slurm (no SLURM_JOB_ID)");
  if (strspn(id, "0123456789_") != strlen(id))
    return spill_err_set(e, SPILL_E_CONFIG, "requeue: job id %s is not numeric", id);
  char out[512], err[512];
  char *av[] = {"scontrol", "requeue", id, NULL};
  int st = run_capture(av, out, sizeof out, err, sizeof err);
  if (st != 0)
    return spill_err_set(e, SPILL_E_IO, "scontrol requeue %s failed (status %d): %s", id, st,
                         st < 0 ? "scontrol not found" : err);
  return SPILL_OK;
}

/* The results directory's config.json and its plan (units, cells); on
 * success the caller frees cfg (spill_exp_config_free) and the plan. */
static int load_dir_plan(const char *dir, spill_exp_config *cfg, plan *P, spill_err *e) {
  char cf[SPILL_PATH_MAX];
  snprintf(cf, sizeof cf, "%s/config.json", dir);
  SPILL_TRY(spill_exp_config_load(cf, cfg, e));
  int rc = plan_init(cfg, P, e);
  if (rc < 0) spill_exp_config_free(cfg);
  return rc;
}

int spill_exp_slurm_task(const char *dir, int unit, const spill_exp_opts *o, int *runs_done,
                         spill_err *e) {
  if (runs_done) *runs_done = 0;
  spill_exp_config cfg;
  plan P;
  int rc = load_dir_plan(dir, &cfg, &P, e);
  if (rc < 0) return rc;
  unsigned char *cells = calloc((size_t)P.n_cells, 1);
  if (!cells) rc = spill_err_set(e, SPILL_E_NOMEM, "slurm: no memory");
  else if (unit < 0 || unit >= P.n_units)
    rc = spill_err_set(e, SPILL_E_CONFIG, "--unit %d: the experiment has units 0-%d", unit,
                       P.n_units - 1);
  for (int c = 0; rc == SPILL_OK && c < P.n_cells; c++) cells[c] = P.unit_of_cell[c] == unit;
  char node[128], rf[SPILL_PATH_MAX], envf[SPILL_PATH_MAX], lockf[SPILL_PATH_MAX];
  node_name(node, sizeof node);
  rows_file(dir, unit, rf, sizeof rf);
  snprintf(envf, sizeof envf, "%s/slurm/env/u%03d-%s.json", dir, unit, node);
  snprintf(lockf, sizeof lockf, "%s/slurm/rows/u%03d.lock", dir, unit);
  /* One process per unit: a second task of the same unit (resubmitted while
   * the first still runs) would append the same runs twice. */
  int lfd = -1;
  if (rc == SPILL_OK) {
    char sub[SPILL_PATH_MAX];
    snprintf(sub, sizeof sub, "%s/slurm/rows", dir);
    rc = spill_exp_mkdirs(sub, e);
    if (rc == SPILL_OK) {
      snprintf(sub, sizeof sub, "%s/slurm/env", dir);
      rc = spill_exp_mkdirs(sub, e);
    }
  }
  if (rc == SPILL_OK) {
    rc = spill_file_open_write(lockf, O_RDWR | O_CREAT, 0644, &lfd, e); /* no symlink */
    if (rc == SPILL_OK && flock(lfd, LOCK_EX | LOCK_NB) < 0)
      rc = spill_err_set(e, SPILL_E_IO, "unit %d is being run by another process (%s is locked)",
                         unit, lockf);
  }
  /* Rows another node left (a task that was killed and now runs elsewhere)
   * go aside: the unit restarts here, so its cells keep one node. */
  if (rc == SPILL_OK) {
    char **lines = NULL;
    int n = 0;
    rc = spill_exp_read_lines(rf, 1, &lines, &n, e);
    int foreign = 0;
    for (int i = 0; rc == SPILL_OK && i < n && !foreign; i++) {
      cJSON *row = spill_json_parse_quiet(lines[i]);
      const cJSON *nd = row ? cJSON_GetObjectItemCaseSensitive(row, "node") : NULL;
      foreign = !cJSON_IsString(nd) || strcmp(nd->valuestring, node);
      if (foreign) {
        char aside[SPILL_PATH_MAX];
        snprintf(aside, sizeof aside, "%s.stale-%s", rf, cJSON_IsString(nd) ? nd->valuestring : "unknown");
        for (char *q = aside + strlen(rf); *q; q++)
          if (*q == '/') *q = '_';
        if (rename(rf, aside) < 0) rc = spill_err_set(e, SPILL_E_IO, "rename %s: %s", rf, strerror(errno));
      }
      cJSON_Delete(row);
    }
    spill_exp_lines_free(lines, n);
  }
  if (rc == SPILL_OK) {
    spill_exp_opts to = *o;
    to.resume = 1;
    to.resume_dir = dir;
    to.cells = cells;
    to.rows_file = rf;
    to.env_file = envf;
    to.node = node;
    to.no_report = 1;
    to.prepare_only = 0;
    to.refuted_dir = NULL;
    to.verdict_out = to.refuted_entry_out = NULL;
    char out[SPILL_PATH_MAX];
    int before = count_lines(rf);
    rc = spill_exp_execute(&cfg, &to, out, sizeof out, e);
    if (runs_done) *runs_done = count_lines(rf) - before;
    if (rc < 0 && rc != SPILL_E_INTERRUPTED) spill_err_prefix(e, "unit %d on %s", unit, node);
  }
  if (lfd >= 0) close(lfd);
  free(cells);
  plan_free(&P);
  spill_exp_config_free(&cfg);
  return rc;
}

/* ---- the merge ---- */

int spill_exp_slurm_merge(const char *dir, const char *refuted_dir, int no_refuted, char *verdict_out,
                          size_t verdict_n, char *refuted_entry_out, size_t refuted_entry_n,
                          int *missing_out, spill_err *e) {
  if (verdict_out && verdict_n) verdict_out[0] = 0;
  if (refuted_entry_out && refuted_entry_n) refuted_entry_out[0] = 0;
  if (missing_out) *missing_out = 0;
  spill_exp_config cfg;
  plan P;
  int rc = load_dir_plan(dir, &cfg, &P, e);
  if (rc < 0) return rc;
  rc = load_rows(dir, &P, e);
  int missing = 0;
  size_t total = 1;
  for (int i = 0; i < P.n_runs; i++) {
    if (P.line[i]) total += strlen(P.line[i]) + 1;
    else missing++;
  }
  char *all = rc == SPILL_OK ? malloc(total) : NULL;
  if (rc == SPILL_OK && !all) rc = spill_err_set(e, SPILL_E_NOMEM, "merge: no memory");
  if (rc == SPILL_OK) {
    /* plan order, as a local run appends them */
    size_t off = 0;
    for (int i = 0; i < P.n_runs; i++)
      if (P.line[i]) off += (size_t)sprintf(all + off, "%s\n", P.line[i]);
    char rf[SPILL_PATH_MAX];
    snprintf(rf, sizeof rf, "%s/runs.jsonl", dir);
    rc = spill_write_file_atomic(rf, all, off, e);
  }
  free(all);
  if (rc == SPILL_OK) {
    spill_exp_report_result *res = calloc(1, sizeof *res);
    rc = res ? spill_exp_report(dir, res, e) : spill_err_set(e, SPILL_E_NOMEM, "merge: no memory");
    int complete = missing == 0;
    if (rc == SPILL_OK && res->has_hypothesis && verdict_out && verdict_n)
      snprintf(verdict_out, verdict_n, "%s: %s: %s",
               complete ? spill_verdict_name(res->verdict) : "withheld (incomplete)", res->claim,
               res->result_text);
    if (rc == SPILL_OK && complete && res->has_hypothesis && res->verdict == SPILL_VERDICT_REFUTED &&
        !no_refuted) {
      /* as a local run: refuted_dir, else the results directory's own
       * refuted/; the entry names the config file submitted (cluster.json) */
      char entry[SPILL_PATH_MAX], own[SPILL_PATH_MAX], src[SPILL_EXP_PATH_MAX] = "";
      if (!refuted_dir) {
        snprintf(own, sizeof own, "%s/refuted", dir);
        refuted_dir = own;
        rc = spill_exp_mkdirs(own, e);
      }
      char fc[SPILL_PATH_MAX], *text = NULL;
      snprintf(fc, sizeof fc, "%s/slurm/cluster.json", dir);
      spill_err ig = {0};
      if (exists(fc) && spill_read_file(fc, 1 << 16, &text, NULL, &ig) == SPILL_OK) {
        cJSON *j = spill_json_parse_quiet(text);
        const cJSON *c = j ? cJSON_GetObjectItemCaseSensitive(j, "config") : NULL;
        if (cJSON_IsString(c) && strlen(c->valuestring) < sizeof src)
          snprintf(src, sizeof src, "%s", c->valuestring);
        cJSON_Delete(j);
      }
      free(text);
      if (rc == SPILL_OK)
        rc = spill_refuted_write(refuted_dir, dir, src[0] ? src : NULL, res, entry, sizeof entry, e);
      if (rc == SPILL_OK && refuted_entry_out && refuted_entry_n)
        snprintf(refuted_entry_out, refuted_entry_n, "%s", entry);
    }
    free(res);
  }
  if (missing_out) *missing_out = missing;
  plan_free(&P);
  spill_exp_config_free(&cfg);
  return rc;
}

/* ---- --status ---- */

/* "JobState=RUNNING" -> "RUNNING" from scontrol's text. */
static void field(const char *text, const char *key, char *out, size_t n) {
  out[0] = 0;
  char k[64];
  snprintf(k, sizeof k, " %s=", key);
  const char *p = strstr(text, k);
  if (!p && !strncmp(text, k + 1, strlen(k + 1))) p = text - 1;
  if (!p) return;
  p += strlen(k);
  size_t i = 0;
  while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < n) out[i] = p[i], i++;
  out[i] = 0;
}

static int job_state(const char *id, char *state, size_t sn, char *nodes, size_t nn,
                     char *reason, size_t rn) {
  char out[8192], err[512];
  char *av[] = {"scontrol", "show", "job", (char *)id, NULL};
  int st = run_capture(av, out, sizeof out, err, sizeof err);
  if (st != 0) {
    nodes[0] = reason[0] = 0;
    if (st > 0 && strstr(err, "Invalid job id")) { /* finished longer than MinJobAge ago */
      snprintf(state, sn, "gone");
      return 0;
    }
    /* no controller (SLURM_CONF unset, daemon down): unknown, and counted
     * as active so --resume never resubmits a unit that may still run */
    snprintf(state, sn, "unknown");
    char *nl = strchr(err, '\n');
    if (nl) *nl = 0;
    snprintf(reason, rn, "(%.200s)", st < 0 ? "scontrol not found" : err);
    return 1;
  }
  /* an array job prints one record per task; id names one task */
  for (char *q = out; *q; q++)
    if (*q == '\n') *q = ' ';
  field(out, "JobState", state, sn);
  field(out, "NodeList", nodes, nn);
  field(out, "Reason", reason, rn);
  if (!strcmp(nodes, "(null)")) nodes[0] = 0;
  return !strcmp(state, "PENDING") || !strcmp(state, "RUNNING") || !strcmp(state, "CONFIGURING") ||
         !strcmp(state, "COMPLETING") || !strcmp(state, "REQUEUED") || !strcmp(state, "SUSPENDED");
}

static int spec_has(const char *spec, int u) {
  const char *p = spec;
  while (*p) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) return 0;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    if (u >= a && u <= b) return 1;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return 0;
  }
  return 0;
}

int spill_exp_slurm_status(const char *dir, char **text_out, int *active_out, spill_err *e) {
  *text_out = NULL;
  if (active_out) *active_out = 0;
  spill_exp_config cfg;
  plan P;
  int rc = load_dir_plan(dir, &cfg, &P, e);
  if (rc < 0) return rc;
  char f[SPILL_PATH_MAX];
  char **jobs = NULL;
  int nj = 0;
  snprintf(f, sizeof f, "%s/slurm/jobs.jsonl", dir);
  rc = spill_exp_read_lines(f, 0, &jobs, &nj, e);
  spill_err le = {0};
  int rows_ok = rc == SPILL_OK ? load_rows(dir, &P, &le) : SPILL_OK;
  size_t cap = 4096, len = 0;
  char *t = rc == SPILL_OK ? malloc(cap) : NULL;
  if (rc == SPILL_OK && !t) rc = spill_err_set(e, SPILL_E_NOMEM, "status: no memory");
  int active = 0, done_total = 0;
  if (rc == SPILL_OK) {
    t[0] = 0;
    append(&t, &len, &cap, "%s: experiment %s, %d units, %d submission(s)\n", dir, cfg.name,
           P.n_units, nj);
    if (rows_ok < 0) append(&t, &len, &cap, "rows: INVALID: %s\n", le.msg);
    append(&t, &len, &cap, "%-5s %-40s %-9s %-12s %-12s %s\n", "unit", "cells", "runs", "job",
           "state", "node / reason");
    for (int u = 0; u < P.n_units; u++) {
      int planned = 0, done = 0;
      const char *nd = NULL;
      for (int i = 0; i < P.n_runs; i++)
        if (P.unit_of_cell[P.runs[i].cell] == u) {
          planned++;
          if (P.line[i]) done++, nd = P.node[i];
        }
      done_total += done;
      /* the latest submission that ran this unit */
      char jid[300] = "-", state[64] = "not submitted", nodes[256] = "", reason[256] = "";
      for (int j = nj - 1; j >= 0; j--) {
        cJSON *row = spill_json_parse_quiet(jobs[j]);
        const cJSON *aj = row ? cJSON_GetObjectItemCaseSensitive(row, "array_job") : NULL;
        const cJSON *us = row ? cJSON_GetObjectItemCaseSensitive(row, "units") : NULL;
        int hit = cJSON_IsString(aj) && cJSON_IsString(us) &&
                  strspn(aj->valuestring, "0123456789") == strlen(aj->valuestring) &&
                  spec_has(us->valuestring, u);
        if (hit) {
          snprintf(jid, sizeof jid, "%.100s_%d", aj->valuestring, u);
          active += job_state(jid, state, sizeof state, nodes, sizeof nodes, reason, sizeof reason);
        }
        cJSON_Delete(row);
        if (hit) break;
      }
      char key[256], runs[32];
      spill_exp_slurm_unit_key(&cfg, u, key, sizeof key);
      snprintf(runs, sizeof runs, "%d/%d", done, planned);
      append(&t, &len, &cap, "u%03d  %-40s %-9s %-12s %-12s %s%s%s%s\n", u, key, runs, jid,
             done == planned ? "done" : state, nd ? nd : nodes,
             reason[0] && strcmp(reason, "None") ? " " : "", reason[0] && strcmp(reason, "None") ? reason : "",
             done < planned && !strcmp(state, "COMPLETED") ? " (rows missing!)" : "");
    }
    if (nj > 0) {
      cJSON *row = spill_json_parse_quiet(jobs[nj - 1]);
      const cJSON *mj = row ? cJSON_GetObjectItemCaseSensitive(row, "merge_job") : NULL;
      if (cJSON_IsString(mj) && strspn(mj->valuestring, "0123456789") == strlen(mj->valuestring)) {
        char state[64], nodes[256], reason[256];
        active += job_state(mj->valuestring, state, sizeof state, nodes, sizeof nodes, reason,
                            sizeof reason);
        append(&t, &len, &cap, "merge job %s: %s%s%s\n", mj->valuestring, state,
               reason[0] && strcmp(reason, "None") ? " " : "", reason[0] && strcmp(reason, "None") ? reason : "");
      }
      cJSON_Delete(row);
    }
    append(&t, &len, &cap, "%d of %d runs done; %d missing%s\n", done_total, P.n_runs,
           P.n_runs - done_total,
           P.n_runs > done_total && !active ? " (resubmit them: spill exp --resume DIR --slurm)" : "");
    if (!t) rc = spill_err_set(e, SPILL_E_NOMEM, "status: no memory");
  }
  spill_exp_lines_free(jobs, nj);
  plan_free(&P);
  spill_exp_config_free(&cfg);
  if (active_out) *active_out = active;
  *text_out = t;
  return rc;
}

int spill_exp_slurm_last_submission(const char *dir, spill_exp_cluster *c, char *workdir,
                                    size_t wn, spill_err *e) {
  char f[SPILL_PATH_MAX], *text = NULL;
  snprintf(f, sizeof f, "%s/slurm/cluster.json", dir);
  if (!exists(f))
    return spill_err_set(e, SPILL_E_CONFIG, "%s: no slurm/cluster.json (not a --slurm results directory)", dir);
  SPILL_TRY(spill_read_file(f, 1 << 16, &text, NULL, e));
  cJSON *j = spill_json_parse_quiet(text);
  free(text);
  const cJSON *cl = j ? cJSON_GetObjectItemCaseSensitive(j, "cluster") : NULL;
  const cJSON *wd = j ? cJSON_GetObjectItemCaseSensitive(j, "workdir") : NULL;
  int rc = SPILL_OK;
  if (!cJSON_IsObject(cl) || !cJSON_IsString(wd) || strlen(wd->valuestring) >= wn)
    rc = spill_err_set(e, SPILL_E_FORMAT, "%s: not a settings record", f);
  memset(c, 0, sizeof *c);
  struct {
    const char *key;
    char *out;
    size_t cap;
  } s[] = {{"partition", c->partition, sizeof c->partition},
           {"time", c->time, sizeof c->time},
           {"mem", c->mem, sizeof c->mem},
           {"constraint", c->constraint, sizeof c->constraint}};
  for (size_t i = 0; rc == SPILL_OK && i < sizeof s / sizeof s[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cl, s[i].key);
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= s[i].cap)
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: cluster.%s missing or too long", f, s[i].key);
    else snprintf(s[i].out, s[i].cap, "%s", v->valuestring);
  }
  const cJSON *cp = cl ? cJSON_GetObjectItemCaseSensitive(cl, "cpus_per_task") : NULL;
  const cJSON *am = cl ? cJSON_GetObjectItemCaseSensitive(cl, "array_max") : NULL;
  if (rc == SPILL_OK) {
    c->cpus_per_task = cJSON_IsNumber(cp) && cp->valuedouble >= 0 && cp->valuedouble <= 4096 ? cp->valueint : 0;
    c->array_max = cJSON_IsNumber(am) && am->valuedouble >= 0 && am->valuedouble <= 100000 ? am->valueint : 0;
    snprintf(workdir, wn, "%s", wd->valuestring);
    rc = check_cluster(c, e);
  }
  cJSON_Delete(j);
  return rc;
}
