/* harness/tune.c: `spill tune`'s search (tune.h). */
#define _GNU_SOURCE
#include "harness/tune.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include "harness/exp_config.h"
#include "harness/exp_env.h"

/* Search order: compute threads first (they decide what the reader gets),
 * then the reader, then what it is asked to read. */
static const char *const AXES[SPILL_TUNE_AXES] = {"threads",  "io_backend", "io_threads",
                                                  "io_depth", "lookahead",  "policy"};

const char *spill_tune_axis_names(void) {
  return "threads,io_backend,io_threads,io_depth,lookahead,policy";
}

static const char DEFAULT_PROMPT[] =
    "The expert cache keeps the experts this model used most recently in memory, and the "
    "reader streams the others from the drive while the previous layer computes.";

/* Candidates of an axis on this machine (n values written, at most 4). */
static int candidates(const char *axis, char v[4][64]) {
  int n = 0;
  if (!strcmp(axis, "threads")) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) cpus = 1;
    if (cpus > 256) cpus = 256;
    long c[3] = {1, cpus / 2, cpus};
    for (int i = 0; i < 3; i++) {
      if (c[i] < 1 || (n && atol(v[n - 1]) == c[i])) continue;
      snprintf(v[n++], 64, "%ld", c[i]);
    }
  } else if (!strcmp(axis, "io_backend")) {
    snprintf(v[n++], 64, "pread");
    snprintf(v[n++], 64, "uring");
  } else if (!strcmp(axis, "io_threads")) {
    snprintf(v[n++], 64, "2");
    snprintf(v[n++], 64, "4");
    snprintf(v[n++], 64, "8");
  } else if (!strcmp(axis, "io_depth")) {
    snprintf(v[n++], 64, "8");
    snprintf(v[n++], 64, "32");
    snprintf(v[n++], 64, "64");
  } else if (!strcmp(axis, "lookahead")) {
    snprintf(v[n++], 64, "0");
    snprintf(v[n++], 64, "4");
    snprintf(v[n++], 64, "8");
  } else if (!strcmp(axis, "policy")) {
    snprintf(v[n++], 64, "lfru");
    snprintf(v[n++], 64, "nextuse");
    snprintf(v[n++], 64, "s3fifo");
  }
  return n;
}

static int axis_wanted(const char *list, const char *axis) {
  if (!list) return 1;
  size_t l = strlen(axis);
  for (const char *p = list; *p;) {
    const char *q = strchr(p, ',');
    size_t k = q ? (size_t)(q - p) : strlen(p);
    if (k == l && !strncmp(p, axis, l)) return 1;
    if (!q) break;
    p = q + 1;
  }
  return 0;
}

static int check_axes(const char *list, spill_err *e) {
  if (!list) return SPILL_OK;
  SPILL_FAIL_IF(e, !*list, SPILL_E_INVALID_ARG, "tune: --axes: empty list");
  for (const char *p = list;;) {
    const char *q = strchr(p, ',');
    size_t k = q ? (size_t)(q - p) : strlen(p);
    int ok = 0;
    for (int i = 0; i < SPILL_TUNE_AXES; i++)
      if (k == strlen(AXES[i]) && !strncmp(p, AXES[i], k)) ok = 1;
    SPILL_FAIL_IF(e, !ok, SPILL_E_INVALID_ARG, "tune: --axes: \"%.*s\" is not an axis (%s)",
                  (int)k, p, spill_tune_axis_names());
    if (!q) break;
    p = q + 1;
  }
  return SPILL_OK;
}

/* The experiment of one axis, as config JSON text (malloc'd). */
static char *axis_config(const spill_tune_opts *o, const char *axis, const char *control,
                         char cand[4][64], int nc, const char cur[SPILL_TUNE_AXES][64]) {
  cJSON *j = cJSON_CreateObject(), *w = cJSON_CreateObject(), *base = cJSON_CreateObject(),
        *arms = cJSON_CreateArray();
  char name[64];
  snprintf(name, sizeof name, "tune-%s", axis);
  cJSON_AddStringToObject(j, "name", name);
  cJSON_AddStringToObject(j, "description",
                          "spill tune: one axis of the coordinate search (harness/tune.h)");
  cJSON_AddStringToObject(j, "model", o->model_dir);
  cJSON_AddStringToObject(w, "prompt", o->prompt ? o->prompt : DEFAULT_PROMPT);
  cJSON_AddNumberToObject(w, "decode_tokens", o->decode_tokens > 0 ? o->decode_tokens : 16);
  cJSON_AddItemToObject(j, "workload", w);
  if (o->budget && strcmp(o->budget, "default")) cJSON_AddStringToObject(base, "budget", o->budget);
  for (int i = 0; i < SPILL_TUNE_AXES; i++)
    if (strcmp(AXES[i], axis)) cJSON_AddStringToObject(base, AXES[i], cur[i]);
  cJSON_AddItemToObject(j, "base", base);
  const char *vals[5];
  int nv = 0;
  vals[nv++] = control;
  for (int i = 0; i < nc; i++)
    if (strcmp(cand[i], control)) vals[nv++] = cand[i];
  for (int i = 0; i < nv; i++) {
    cJSON *a = cJSON_CreateObject(), *set = cJSON_CreateObject();
    char an[96];
    snprintf(an, sizeof an, "%s-%s", axis, vals[i]);
    cJSON_AddStringToObject(a, "name", an);
    cJSON_AddStringToObject(set, axis, vals[i]);
    cJSON_AddItemToObject(a, "set", set);
    if (i) cJSON_AddBoolToObject(a, "exact", 1);
    cJSON_AddItemToArray(arms, a);
  }
  cJSON_AddItemToObject(j, "arms", arms);
  cJSON_AddNumberToObject(j, "repeats", 2 * (o->pairs > 0 ? o->pairs : 2));
  cJSON_AddStringToObject(j, "order", "abba");
  cJSON_AddBoolToObject(j, "cold", 1);
  char *t = spill_json_print(j, 1);
  cJSON_Delete(j);
  return t;
}

/* Reads the comparisons of summary.json in dir into ax (best candidate and
 * whether it beat the control with evidence). Returns the chosen value's
 * index in cand (-1: keep the control). */
static int judge(const char *dir, const char *axis, spill_tune_axis *ax, spill_err *e) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  char *text = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(path, 16u << 20, &text, &len, e));
  cJSON *j = NULL;
  int rc = spill_json_parse(text, len, path, SPILL_E_FORMAT, &j, e);
  free(text);
  SPILL_TRY(rc);
  const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(j, "comparisons");
  /* the fastest by median ratio among the candidates faster with evidence;
   * when none is, the fastest of all (reported, not chosen) */
  int won = 0, have = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cmp) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "metric"),
                *t = cJSON_GetObjectItemCaseSensitive(c, "treatment"),
                *r = cJSON_GetObjectItemCaseSensitive(c, "ratio"),
                *lo = cJSON_GetObjectItemCaseSensitive(c, "ci_lo"),
                *hi = cJSON_GetObjectItemCaseSensitive(c, "ci_hi"),
                *p = cJSON_GetObjectItemCaseSensitive(c, "mann_whitney_p"),
                *np = cJSON_GetObjectItemCaseSensitive(c, "pairs");
    if (!cJSON_IsString(m) || strcmp(m->valuestring, "decode_tok_per_s") || !cJSON_IsString(t) ||
        !cJSON_IsNumber(r) || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) || !cJSON_IsNumber(p))
      continue;
    /* the arm is "<axis>-<value>" */
    size_t al = strlen(axis);
    if (strlen(t->valuestring) <= al + 1) continue;
    const int sig = lo->valuedouble > 1.0 && p->valuedouble < 0.05;
    int take;
    if (sig) take = !won || r->valuedouble > ax->ratio;
    else take = !won && (!have || r->valuedouble > ax->ratio);
    if (!take) continue;
    won |= sig;
    have = 1;
    snprintf(ax->best, sizeof ax->best, "%s", t->valuestring + al + 1);
    ax->ratio = r->valuedouble;
    ax->ci_lo = lo->valuedouble;
    ax->ci_hi = hi->valuedouble;
    ax->p = p->valuedouble;
    ax->pairs = cJSON_IsNumber(np) ? np->valueint : 0;
  }
  cJSON_Delete(j);
  if (!ax->best[0]) {
    snprintf(ax->note, sizeof ax->note, "no comparison on decode tok/s in %s", path);
    return -1;
  }
  if (!won) {
    snprintf(ax->note, sizeof ax->note,
             "kept %s: no candidate faster with evidence (best %s: ratio %.3f, 95%% CI "
             "[%.3f, %.3f], p %.3g)",
             ax->control, ax->best, ax->ratio, ax->ci_lo, ax->ci_hi, ax->p);
    return -1;
  }
  snprintf(ax->note, sizeof ax->note, "%s faster than %s: ratio %.3f, 95%% CI [%.3f, %.3f], p %.3g",
           ax->best, ax->control, ax->ratio, ax->ci_lo, ax->ci_hi, ax->p);
  return 1;
}

int spill_tune_run(const spill_tune_opts *o, spill_tune_result *r, spill_err *e) {
  memset(r, 0, sizeof *r);
  SPILL_FAIL_IF(e, !o || !o->model_dir, SPILL_E_INVALID_ARG, "tune: no model");
  SPILL_TRY(check_axes(o->axes, e));
  SPILL_FAIL_IF(e, o->pairs > 50, SPILL_E_INVALID_ARG, "tune: --pairs %d: at most 50", o->pairs);
  spill_info info;
  SPILL_TRY(spill_info_read(o->model_dir, &info, e));
  /* the starting point: the engine's defaults */
  spill_config d;
  spill_config_default(&d);
  char cur[SPILL_TUNE_AXES][64];
  for (int i = 0; i < SPILL_TUNE_AXES; i++)
    SPILL_TRY(spill_config_get(&d, AXES[i], cur[i], sizeof cur[i], e));
  int rc = SPILL_OK;
  for (int i = 0; i < SPILL_TUNE_AXES && rc == SPILL_OK; i++) {
    if (!axis_wanted(o->axes, AXES[i])) continue;
    if (o->stop && *o->stop) {
      rc = spill_err_set(e, SPILL_E_INTERRUPTED, "tune: interrupted before axis %s", AXES[i]);
      break;
    }
    spill_tune_axis *ax = &r->axes[r->n_axes++];
    snprintf(ax->axis, sizeof ax->axis, "%s", AXES[i]);
    snprintf(ax->control, sizeof ax->control, "%s", cur[i]);
    snprintf(ax->chosen, sizeof ax->chosen, "%s", cur[i]);
    char cand[4][64];
    int nc = candidates(AXES[i], cand);
    char *text = axis_config(o, AXES[i], cur[i], cand, nc, (const char(*)[64])cur);
    SPILL_FAIL_IF(e, !text, SPILL_E_NOMEM, "tune: out of memory");
    spill_exp_config cfg;
    spill_err xe = {0};
    int xr = spill_exp_config_parse(text, "spill tune", &cfg, &xe);
    free(text);
    if (xr != SPILL_OK) {
      rc = spill_err_set(e, xr, "tune: axis %s: %s", AXES[i], xe.msg);
      break;
    }
    spill_exp_opts eo = {0};
    eo.results_root = o->results_root;
    eo.no_refuted = 1;
    eo.quick_env = o->quick_env;
    eo.stop = o->stop;
    eo.progress = o->progress;
    eo.user = o->user;
    xr = spill_exp_execute(&cfg, &eo, ax->results_dir, sizeof ax->results_dir, &xe);
    spill_exp_config_free(&cfg);
    if (xr == SPILL_E_INTERRUPTED) {
      rc = spill_err_set(e, xr, "tune: interrupted in axis %s", AXES[i]);
      break;
    }
    if (xr != SPILL_OK) { /* e.g. io_uring refused by the kernel: keep the control */
      snprintf(ax->note, sizeof ax->note, "kept %s: the experiment failed: %s (%s)", cur[i],
               xe.msg, spill_status_name(xr));
      continue;
    }
    spill_err je = {0};
    int won = judge(ax->results_dir, AXES[i], ax, &je);
    if (je.code) snprintf(ax->note, sizeof ax->note, "kept %s: %s", cur[i], je.msg);
    if (won > 0) {
      snprintf(cur[i], sizeof cur[i], "%s", ax->best);
      snprintf(ax->chosen, sizeof ax->chosen, "%s", ax->best);
    }
  }
  /* the profile: every axis's setting (measured or the default it kept) */
  spill_tune_profile *p = &r->profile;
  p->version = SPILL_TUNE_VERSION;
  p->container_id = info.container_id;
  snprintf(p->model_name, sizeof p->model_name, "%s", info.name);
  spill_err me = {0};
  if (spill_tune_machine_probe(o->model_dir, &p->machine, &me) != SPILL_OK && rc == SPILL_OK)
    rc = spill_err_set(e, me.code, "%s", me.msg);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(p->measured_at, sizeof p->measured_at, "%Y-%m-%dT%H:%M:%SZ", &tm);
  int dirty = 0;
  spill_exp_git_commit(p->commit, sizeof p->commit, &dirty);
  if (dirty && strlen(p->commit) + 7 < sizeof p->commit) strcat(p->commit, "-dirty");
  for (int i = 0; i < SPILL_TUNE_AXES; i++) {
    if (!axis_wanted(o->axes, AXES[i])) continue;
    snprintf(p->knobs[p->n_knobs].name, sizeof p->knobs[0].name, "%s", AXES[i]);
    snprintf(p->knobs[p->n_knobs].value, sizeof p->knobs[0].value, "%s", cur[i]);
    p->n_knobs++;
  }
  return rc;
}

cJSON *spill_tune_evidence(const spill_tune_result *r) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < r->n_axes; i++) {
    const spill_tune_axis *x = &r->axes[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "axis", x->axis);
    cJSON_AddStringToObject(o, "control", x->control);
    cJSON_AddStringToObject(o, "chosen", x->chosen);
    if (x->best[0]) {
      cJSON_AddStringToObject(o, "best", x->best);
      cJSON_AddNumberToObject(o, "ratio", x->ratio);
      cJSON_AddNumberToObject(o, "ci_lo", x->ci_lo);
      cJSON_AddNumberToObject(o, "ci_hi", x->ci_hi);
      cJSON_AddNumberToObject(o, "mann_whitney_p", x->p);
      cJSON_AddNumberToObject(o, "pairs", x->pairs);
    }
    cJSON_AddStringToObject(o, "results", x->results_dir);
    cJSON_AddStringToObject(o, "note", x->note);
    cJSON_AddItemToArray(a, o);
  }
  return a;
}
