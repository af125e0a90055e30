/* research/session/spill_resume_measure.c: time to the first token of a
 * follow-up turn after a long history, resumed from a saved session vs
 * prefilled again (issue 31 "How it is measured": target >= 10x).
 *
 * Turn 1 prefills a history of --history tokens (a fixed English paragraph
 * repeated, tokenized by the model's own tokenizer, cut to length) and
 * generates one token; the engine's conversation is saved
 * (spill_session_save) and the engine closed. Then --pairs ABBA pairs of two
 * arms, each on a freshly opened engine (empty expert cache; opening is not
 * timed, it is the same for both): "resume" loads the session
 * (spill_session_load, the file dropped from the page cache first) and runs
 * the follow-up turn (the held conversation plus --follow new tokens) with
 * SPILL_GEN_REUSE, so only the new tokens are prefilled; "reprefill" runs
 * the same turn from nothing. Time to first token = from before the load
 * (resume) or the call (reprefill) to the first token's callback. Both arms
 * must generate the same -n greedy tokens (exit 1 otherwise).
 *
 * Usage: spill_resume_measure MODEL [--budget SIZE] [--ctx N] [--history N]
 *          [--follow N] [-n N] [--pairs P] [--dir DIR]
 * Prints one JSON line per run and a summary line. Times are wall clock:
 * on a loaded machine they are not measurements of speed; the counters
 * (tokens prefilled, bytes read) are exact. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/spill.h"

#define MAX_N 64

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct opts {
  const char *model, *budget, *dir;
  int ctx, history, follow, n_new, pairs;
} opts;

typedef struct run_out {
  double t0, t_first;
  int toks[MAX_N], n;
} run_out;

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)text, (void)ts;
  run_out *r = user;
  if (r->n == 0) r->t_first = now_s();
  if (r->n < MAX_N) r->toks[r->n++] = token;
  return 0;
}

static int open_engine(const opts *o, spill_engine **g) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_err e = {0};
  if (spill_config_set(&cfg, "budget", o->budget, &e) < 0) return fprintf(stderr, "%s\n", e.msg), 1;
  cfg.ctx = o->ctx;
  if (spill_engine_open(o->model, &cfg, g, &e) < 0)
    return fprintf(stderr, "open %s: %s\n", o->model, e.msg), 1;
  return 0;
}

/* n tokens of text repeated (with BOS when bos), or fewer if the tokenizer
 * gives none; returns the count. */
static int text_tokens(spill_engine *g, const char *text, int bos, int n, int *out) {
  size_t tl = strlen(text), cap = tl + 2;
  char *buf = NULL;
  int *tmp = NULL, got = 0;
  for (int reps = 1; reps < 1 << 20; reps *= 2) {
    size_t need = tl * (size_t)reps + 1;
    char *nb = realloc(buf, need > cap ? need : cap);
    int *nt = realloc(tmp, (need + 8) * sizeof *nt);
    if (!nb || !nt) {
      free(nb ? nb : buf), free(nt ? nt : tmp);
      return 0;
    }
    buf = nb, tmp = nt;
    buf[0] = 0;
    for (int i = 0; i < reps; i++) memcpy(buf + tl * (size_t)i, text, tl + 1);
    spill_err e = {0};
    if (spill_tokenize(g, buf, bos, tmp, (int)need + 8, &got, &e) < 0) got = 0;
    if (got >= n || got == 0) break;
  }
  if (got > n) got = n;
  memcpy(out, tmp, (size_t)got * sizeof *out);
  free(buf), free(tmp);
  return got;
}

static void drop_from_page_cache(const char *file) {
  int fd = open(file, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* One follow-up turn on a fresh engine: resume (load the session and keep
 * the held conversation) or reprefill (run the whole prompt). */
static int run_arm(const opts *o, int resume, const char *session, const int *prompt, int n_prompt,
                   int pair, run_out *r, spill_run_stats *st) {
  spill_engine *g = NULL;
  double to = now_s();
  if (open_engine(o, &g)) return 1;
  const double open_s = now_s() - to;
  if (resume) drop_from_page_cache(session);
  spill_sampling s;
  spill_sampling_default(&s);
  spill_err e = {0};
  memset(r, 0, sizeof *r);
  r->t0 = now_s();
  double load_s = 0;
  if (resume) {
    if (spill_session_load(g, session, &e) < 0)
      return fprintf(stderr, "load %s: %s\n", session, e.msg), spill_engine_close(g), 1;
    load_s = now_s() - r->t0;
  }
  int rc = spill_generate_next(g, prompt, n_prompt, o->n_new, &s,
                               resume ? SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG : 0, on_token, r,
                               NULL, st, &e);
  spill_engine_close(g);
  if (rc < 0) return fprintf(stderr, "generate: %s\n", e.msg), 1;
  printf("{\"arm\": \"%s\", \"pair\": %d, \"ttft_s\": %.6f, \"session_load_s\": %.6f, "
         "\"open_s\": %.6f, \"tokens_cached\": %d, \"tokens_prefill\": %d, \"prefill_s\": %.6f, "
         "\"bytes_read\": %llu, \"tokens\": %d}\n",
         resume ? "resume" : "reprefill", pair, r->t_first - r->t0, load_s, open_s,
         st->tokens_cached, st->tokens_prefill, st->prefill_s, (unsigned long long)st->bytes_read,
         r->n);
  fflush(stdout);
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *k_history =
    "The engine streams the experts of a mixture-of-experts model from the disk, one aligned "
    "read per expert, and keeps the ones it used last in a cache sized to the machine. ";
static const char *k_follow = "So what does the cache hold after a long conversation? ";

/* Turn 1: the history prefilled and one token generated, saved to session;
 * *held gets the conversation (history + reply). */
static int first_turn(const opts *o, const char *session, int *held, int *n_held,
                      int *follow, int *n_follow) {
  spill_engine *g = NULL;
  if (open_engine(o, &g)) return 1;
  int *hist = malloc((size_t)o->history * sizeof *hist);
  if (!hist) return spill_engine_close(g), 1;
  const int nh = text_tokens(g, k_history, 1, o->history, hist);
  *n_follow = text_tokens(g, k_follow, 0, o->follow, follow);
  if (nh < o->history || *n_follow < 1) {
    fprintf(stderr, "tokenizer gave %d history / %d follow-up tokens\n", nh, *n_follow);
    return free(hist), spill_engine_close(g), 1;
  }
  spill_sampling s;
  spill_sampling_default(&s);
  spill_run_stats st;
  spill_err e = {0};
  int rc = spill_generate_next(g, hist, nh, 1, &s, 0, NULL, NULL, NULL, &st, &e);
  free(hist);
  if (rc < 0) return fprintf(stderr, "turn 1: %s\n", e.msg), spill_engine_close(g), 1;
  const double t = now_s();
  if (spill_session_save(g, session, &e) < 0)
    return fprintf(stderr, "save: %s\n", e.msg), spill_engine_close(g), 1;
  const double save_s = now_s() - t;
  const int *h = NULL;
  *n_held = spill_engine_tokens(g, &h);
  memcpy(held, h, (size_t)*n_held * sizeof *held);
  spill_engine_close(g);
  struct stat sb;
  printf("{\"turn1\": true, \"history_tokens\": %d, \"prefill_s\": %.6f, \"held_tokens\": %d, "
         "\"session_bytes\": %lld, \"save_s\": %.6f}\n",
         nh, st.prefill_s, *n_held, stat(session, &sb) ? -1LL : (long long)sb.st_size, save_s);
  fflush(stdout);
  return 0;
}

static int usage(FILE *f, int rc) {
  fprintf(f, "usage: spill_resume_measure MODEL [--budget SIZE] [--ctx N] [--history N] "
             "[--follow N] [-n N] [--pairs P] [--dir DIR]\n");
  return rc;
}

int main(int argc, char **argv) {
  opts o = {NULL, "default", NULL, 4096, 2000, 16, 8, 3};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout, 0);
    if (a[0] != '-' && !o.model) o.model = a;
    else if (i + 1 >= argc) return usage(stderr, 2);
    else if (!strcmp(a, "--budget")) o.budget = argv[++i];
    else if (!strcmp(a, "--dir")) o.dir = argv[++i];
    else if (!strcmp(a, "--ctx")) o.ctx = atoi(argv[++i]);
    else if (!strcmp(a, "--history")) o.history = atoi(argv[++i]);
    else if (!strcmp(a, "--follow")) o.follow = atoi(argv[++i]);
    else if (!strcmp(a, "-n")) o.n_new = atoi(argv[++i]);
    else if (!strcmp(a, "--pairs")) o.pairs = atoi(argv[++i]);
    else return usage(stderr, 2);
  }
  if (!o.model || o.history < 1 || o.follow < 1 || o.follow > 4096 || o.n_new < 1 ||
      o.n_new > MAX_N || o.pairs < 1 || o.pairs > 100 ||
      o.ctx < o.history + 1 + o.follow + o.n_new)
    return usage(stderr, 2);
  char session[4096];
  snprintf(session, sizeof session, "%s/resume-measure.session", o.dir ? o.dir : ".");
  int *held = malloc((size_t)(o.ctx + o.follow) * sizeof *held);
  int follow[4096], n_held = 0, n_follow = 0;
  if (!held || first_turn(&o, session, held, &n_held, follow, &n_follow)) return 1;
  memcpy(held + n_held, follow, (size_t)n_follow * sizeof *held);
  const int n_prompt = n_held + n_follow;
  double *tr = calloc((size_t)o.pairs, sizeof *tr), *tp = calloc((size_t)o.pairs, sizeof *tp);
  run_out ref = {0}, r;
  int same = 1, bad = !tr || !tp;
  for (int p = 0; p < o.pairs && !bad; p++)
    for (int k = 0; k < 2 && !bad; k++) { /* ABBA: resume first on even pairs */
      const int resume = (p % 2 == 0) == (k == 0);
      spill_run_stats st;
      bad = run_arm(&o, resume, session, held, n_prompt, p, &r, &st);
      if (bad) break;
      (resume ? tr : tp)[p] = r.t_first - r.t0;
      if (!ref.n) ref = r;
      else same &= r.n == ref.n && !memcmp(r.toks, ref.toks, sizeof(int) * (size_t)r.n);
      if (resume && st.tokens_cached != n_held) same = 0; /* the session was not kept */
    }
  if (!bad) {
    const double mr = median(tr, o.pairs), mp = median(tp, o.pairs);
    printf("{\"summary\": true, \"history_tokens\": %d, \"held_tokens\": %d, \"follow_tokens\": %d, "
           "\"pairs\": %d, \"ttft_resume_s\": %.6f, \"ttft_reprefill_s\": %.6f, \"speedup\": %.2f, "
           "\"target\": 10, \"met\": %s, \"same_tokens\": %s}\n",
           o.history, n_held, n_follow, o.pairs, mr, mp, mr > 0 ? mp / mr : 0.0,
           mr > 0 && mp / mr >= 10 ? "true" : "false", same ? "true" : "false");
  }
  unlink(session);
  free(held), free(tr), free(tp);
  return bad ? 1 : same ? 0 : 1;
}
