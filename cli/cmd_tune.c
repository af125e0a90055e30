/* cli/cmd_tune.c: `spill tune MODEL`: measures this machine's best knobs for
 * a model (harness/tune.h) and saves them as the model's tuned profile
 * (harness/tune_profile.h), which `spill run`, `bench`, `chat` and `serve`
 * then apply under the flags given. Thin: the search is in harness/. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "harness/tune.h"
#include "harness/tune_profile.h"

const char cmd_tune_usage[] =
    "usage: spill tune MODEL [--budget SIZE] [--axes LIST] [--pairs N] [--tokens N]\n"
    "                  [--prompt TEXT] [--out FILE] [--results DIR] [--json]\n"
    "Measures which threads, io_backend, io_threads, io_depth, lookahead and policy decode\n"
    "MODEL fastest on this machine: one axis at a time, an experiment (docs/EXPERIMENTS.md)\n"
    "whose control is the best setting so far, candidates as arms, ABBA order, --pairs\n"
    "pairs per arm (default 2), a cold greedy decode of --tokens tokens (default 16).\n"
    "A candidate replaces the control only when its decode tok/s ratio has a 95%\n"
    "bootstrap interval above 1 and a Mann-Whitney p below 0.05. The result is saved as\n"
    "the model's tuned profile (default: $SPILL_TUNE_DIR, else ~/.cache/spill/tune/,\n"
    "one file per model; --out FILE elsewhere), bound to this machine and model:\n"
    "spill run / bench / chat / serve apply it under the flags you give and print\n"
    "\"tuned: ...\" (--no-tuned: ignore it; --tuned FILE: use that file). --axes: a\n"
    "comma-separated subset of threads,io_backend,io_threads,io_depth,lookahead,policy.\n"
    "--budget: the budget the runs use (default: the engine's rule). Experiments go to\n"
    "--results DIR (default results/). Ctrl-C stops after the current token; nothing\n"
    "is saved then.\n";

static volatile int g_stop;

static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

static void on_progress(void *user, const spill_exp_progress *p) {
  (void)user;
  if (!strcmp(p->phase, "run"))
    fprintf(stderr, "  [%d/%d] %-40s %8.2f tok/s\n", p->done, p->total, p->key ? p->key : "",
            p->last_tok_per_s);
}

static void print_table(const spill_tune_result *r) {
  printf("| axis | before | chosen | fastest other | ratio [95%% CI] | p | why |\n");
  printf("|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < r->n_axes; i++) {
    const spill_tune_axis *x = &r->axes[i];
    if (x->best[0])
      printf("| %s | %s | %s | %s | %.3f [%.3f, %.3f] | %.3g | %s |\n", x->axis, x->control,
             x->chosen, x->best, x->ratio, x->ci_lo, x->ci_hi, x->p, x->note);
    else
      printf("| %s | %s | %s | - | - | - | %s |\n", x->axis, x->control, x->chosen, x->note);
  }
}

int cmd_tune(int argc, char **argv) {
  spill_tune_opts o;
  memset(&o, 0, sizeof o);
  const char *out = NULL, *v;
  int json = 0;
  long n;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--budget")) {
      if (!(o.budget = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--axes")) {
      if (!(o.axes = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--pairs")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 50, &n)) return 2;
      o.pairs = (int)n;
    } else if (!strcmp(a, "--tokens")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 4096, &n)) return 2;
      o.decode_tokens = (int)n;
    } else if (!strcmp(a, "--prompt")) {
      if (!(o.prompt = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--out")) {
      if (!(out = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--results")) {
      if (!(o.results_root = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--quick-env")) { /* tests: no O_DIRECT probe per experiment */
      o.quick_env = 1;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (!o.model_dir) {
      o.model_dir = a;
    } else {
      return cli_usage_error("unexpected argument %s", a);
    }
  }
  if (!o.model_dir) return cli_usage_error("no model");
  spill_err e = {0};
  spill_info info;
  int rc = spill_info_read(o.model_dir, &info, &e);
  if (rc) return cli_fail("tune", rc, e.msg);
  char path[4096];
  if (out) snprintf(path, sizeof path, "%s", out);
  else if ((rc = spill_tune_profile_path(&info, path, sizeof path, &e)))
    return cli_fail("tune", rc, e.msg);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  o.stop = &g_stop;
  o.progress = on_progress;
  spill_tune_result *r = calloc(1, sizeof *r);
  if (!r) return cli_fail("tune", SPILL_E_NOMEM, "out of memory");
  fprintf(stderr, "spill tune: %s: axes %s, %d pairs per arm, %d tokens per run\n", o.model_dir,
          o.axes ? o.axes : spill_tune_axis_names(), o.pairs > 0 ? o.pairs : 2,
          o.decode_tokens > 0 ? o.decode_tokens : 16);
  rc = spill_tune_run(&o, r, &e);
  if (rc) {
    if (r->n_axes) print_table(r);
    free(r);
    return cli_fail("tune", rc, e.msg);
  }
  cJSON *ev = spill_tune_evidence(r);
  rc = spill_tune_profile_save(path, &r->profile, ev, &e);
  if (rc == SPILL_OK && json) { /* {"profile": PATH, "knobs": {...}, "axes": [...]} */
    cJSON *o = cJSON_CreateObject(), *kn = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "profile", path);
    for (int i = 0; i < r->profile.n_knobs; i++)
      cJSON_AddStringToObject(kn, r->profile.knobs[i].name, r->profile.knobs[i].value);
    cJSON_AddItemToObject(o, "knobs", kn);
    cJSON_AddItemToObject(o, "axes", ev ? ev : cJSON_CreateArray());
    ev = NULL;
    char *t = spill_json_print(o, 0);
    cJSON_Delete(o);
    if (t) printf("%s\n", t);
    free(t);
  } else if (rc == SPILL_OK) {
    print_table(r);
    printf("tuned profile: %s\n", path);
  }
  cJSON_Delete(ev);
  free(r);
  return rc ? cli_fail("tune", rc, e.msg) : 0;
}
