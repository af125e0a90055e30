/* cli/cmd_run.c: `spill run`, `spill eval`, `spill bench`: the commands that
 * open an engine. Every engine knob is a flag (--kebab-case of the
 * spill_config key), parsed by spill_config_set so the CLI, the experiment
 * configs and the library agree on names and validation. Generated text goes
 * to stdout only; progress, warnings and the closing summary go to stderr. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

static volatile int g_stop;
static void on_sigint(int sig) {
  (void)sig;
  g_stop = 1;
}

/* Engine knobs as flags (the knob table, cli_knob_flag). */
static int engine_flag(const char *cmd, int argc, char **argv, int *i, spill_config *cfg) {
  return cli_knob_flag(cmd, argc, argv, i, CLI_KNOBS_CONFIG, cfg, NULL);
}

static void knob_help(FILE *f) {
  fprintf(f, "engine knobs (experiment-config keys in snake_case; docs: README.md):\n");
  cli_knob_help(f, CLI_KNOBS_CONFIG);
}

static int open_engine(const char *cmd, const char *model, const spill_config *cfg,
                       spill_engine **eng) {
  spill_err e = {0};
  int rc = spill_engine_open(model, cfg, eng, &e);
  if (rc) {
    cli_fail(cmd, rc, e.msg);
    return -1;
  }
  const char *w = spill_engine_warnings(*eng);
  if (w && *w) fprintf(stderr, "spill %s: warning: %s", cmd, w);
  return 0;
}

static void print_summary(spill_engine *eng, const spill_run_stats *st) {
  const spill_config *c = spill_engine_config(eng);
  uint64_t acc = st->demand_hits + st->demand_misses;
  char b[32];
  fprintf(stderr,
          "spill: %d prompt + %d generated tokens, prefill %.2fs, decode %.2fs, %.3f tok/s | "
          "hits %llu misses %llu (hit rate %.1f%%) | read %s in %llu reads | storage %s, "
          "io %s, policy %s, lookahead %d\n",
          st->tokens_prefill, st->tokens_decode, st->prefill_s, st->decode_s,
          st->decode_tok_per_s, (unsigned long long)st->demand_hits,
          (unsigned long long)st->demand_misses, acc ? 100.0 * st->demand_hits / acc : 0.0,
          cli_bytes(st->bytes_read, b, sizeof b), (unsigned long long)st->reads,
          spill_storage_name(c->storage), spill_io_backend_kind_name(c->io_backend), c->policy,
          c->lookahead);
  if (c->routing_trace)
    fprintf(stderr, "spill: FORCED routing: expert ids replayed from %s (--routing-trace)\n",
            c->routing_trace);
  if (c->io_throttle)
    fprintf(stderr, "spill: EMULATED device: expert reads throttled to %.2f GB/s (--io-throttle)\n",
            c->io_throttle / 1e9);
  if (c->lookahead > 0 && st->lookahead_predicted > 0) {
    fprintf(stderr, "spill: lookahead precision %.1f%% (%llu predicted); by rank:",
            100.0 * st->lookahead_correct / st->lookahead_predicted,
            (unsigned long long)st->lookahead_predicted);
    for (int r = 0; r < c->lookahead && r < SPILL_LA_RANKS; r++)
      if (st->lookahead_rank_made[r])
        fprintf(stderr, " %.0f%%", 100.0 * st->lookahead_rank_correct[r] / st->lookahead_rank_made[r]);
    fprintf(stderr, "\n");
  }
  if (st->tokens_decode > 0 && st->major_faults > (uint64_t)st->tokens_decode)
    fprintf(stderr,
            "spill: WARNING: %llu major page faults during %d tokens: the machine is paging "
            "(cache hits are page faults); the hit rate above does not tell the cost\n",
            (unsigned long long)st->major_faults, st->tokens_decode + st->tokens_prefill);
}

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)user;
  (void)token;
  (void)ts;
  fputs(text, stdout);
  fflush(stdout);
  return g_stop;
}

int cmd_run(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_sampling s;
  spill_sampling_default(&s);
  long n_new = 64;
  const char *model = NULL, *prompt = NULL, *v;
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag("run", argc, argv, &i, CLI_KNOBS_CONFIG | CLI_KNOBS_SAMPLING, &cfg, &s);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 0, 1L << 24, &n_new)) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "spill run: unknown option %s\n", a);
      return 2;
    } else if (!model) model = a;
    else if (!prompt) prompt = a;
    else {
      fprintf(stderr, "spill run: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!model || !prompt) {
    fprintf(stderr, "usage: spill run MODEL PROMPT [-n N] [sampling knobs] [engine knobs]\n"
                    "sampling knobs:\n");
    cli_knob_help(stderr, CLI_KNOBS_SAMPLING);
    knob_help(stderr);
    return 2;
  }
  spill_engine *eng;
  if (open_engine("run", model, &cfg, &eng)) return 1;
  int cap = (int)strlen(prompt) + 2, n = 0;
  int *toks = malloc((size_t)cap * sizeof(int));
  spill_err e = {0};
  int rc = toks ? spill_tokenize(eng, prompt, 1, toks, cap, &n, &e) : SPILL_E_NOMEM;
  if (rc) {
    free(toks);
    spill_engine_close(eng);
    return cli_fail("run", rc, e.msg);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, NULL);
  spill_run_stats st;
  rc = spill_generate(eng, toks, n, (int)n_new, &s, on_token, NULL, &g_stop, &st, &e);
  fputs("\n", stdout);
  fflush(stdout);
  if (rc == SPILL_E_INTERRUPTED || g_stop) fprintf(stderr, "spill run: interrupted\n");
  print_summary(eng, &st);
  free(toks);
  spill_engine_close(eng);
  if (rc && rc != SPILL_E_INTERRUPTED) return cli_fail("run", rc, e.msg);
  return 0;
}

/* Parses "1,2,3" into a malloc'd array. */
static int *parse_tokens(const char *s, int *n) {
  int cap = 16, k = 0;
  int *t = malloc((size_t)cap * sizeof(int));
  const char *p = s;
  while (t && *p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > 0x7fffffff) {
      free(t);
      return NULL;
    }
    if (k == cap) {
      int *q = realloc(t, (size_t)(cap *= 2) * sizeof(int));
      if (!q) {
        free(t);
        return NULL;
      }
      t = q;
    }
    t[k++] = (int)v;
    p = end;
    if (*p == ',') p++;
    else if (*p) {
      free(t);
      return NULL;
    }
  }
  *n = k;
  return t;
}

int cmd_eval(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  int json = 0, all = 0, chunked = 1;
  long top = 10;
  const char *model = NULL, *prompt = NULL, *tokens = NULL, *out = NULL, *v;
  for (int i = 1; i < argc; i++) {
    int k = engine_flag("eval", argc, argv, &i, &cfg);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--all-positions")) all = 1;
    else if (!strcmp(a, "--sequential")) chunked = 0;
    else if (!strcmp(a, "--tokens")) {
      if (!(tokens = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--logits-out")) {
      if (!(out = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--top")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1000, &top)) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "spill eval: unknown option %s\n", a);
      return 2;
    } else if (!model) model = a;
    else if (!prompt) prompt = a;
    else {
      fprintf(stderr, "spill eval: unexpected argument %s\n", a);
      return 2;
    }
  }
  if (!model || (!prompt == !tokens)) {
    fprintf(stderr,
            "usage: spill eval [--json] [--top N] [--logits-out FILE [--all-positions]]\n"
            "                  [--sequential] MODEL (PROMPT | --tokens ID,ID,...) [engine knobs]\n"
            "--logits-out writes raw little-endian f32: the last position (vocab floats), or\n"
            "every position (n x vocab) with --all-positions. Text prompts get BOS; --tokens\n"
            "are used as given.\n");
    knob_help(stderr);
    return 2;
  }
  spill_engine *eng;
  if (open_engine("eval", model, &cfg, &eng)) return 1;
  int n = 0, *toks;
  spill_err e = {0};
  int rc = SPILL_OK;
  if (tokens) {
    toks = parse_tokens(tokens, &n);
    if (!toks || n == 0) {
      spill_engine_close(eng);
      fprintf(stderr, "spill eval: --tokens: expected comma-separated token ids\n");
      return 2;
    }
  } else {
    int cap = (int)strlen(prompt) + 2;
    toks = malloc((size_t)cap * sizeof(int));
    rc = toks ? spill_tokenize(eng, prompt, 1, toks, cap, &n, &e) : SPILL_E_NOMEM;
  }
  int V = spill_vocab_size(eng);
  float *last = malloc((size_t)V * sizeof(float));
  float *allv = all ? malloc((size_t)n * (size_t)V * sizeof(float)) : NULL;
  if (!rc && (!last || (all && !allv))) rc = spill_err_set(&e, SPILL_E_NOMEM, "out of memory");
  if (!rc) rc = spill_eval(eng, toks, n, chunked, last, allv, &e);
  if (!rc && out) {
    FILE *f = fopen(out, "wb");
    size_t cnt = all ? (size_t)n * (size_t)V : (size_t)V;
    if (!f || fwrite(all ? allv : last, sizeof(float), cnt, f) != cnt || fclose(f) != 0)
      rc = spill_err_set(&e, SPILL_E_IO, "%s: cannot write logits", out);
    else
      fprintf(stderr, "spill eval: wrote %s: %s%d floats (f32 little-endian)\n", out,
              all ? "positions x vocab = " : "", (int)cnt);
  }
  if (!rc) {
    /* top-k of the last position, softmax probabilities */
    int K = (int)(top < V ? top : V);
    int *ids = malloc((size_t)K * sizeof(int));
    double mx = last[0], z = 0;
    for (int i = 1; i < V; i++)
      if (last[i] > mx) mx = last[i];
    for (int i = 0; i < V; i++) z += exp((double)last[i] - mx);
    for (int j = 0; ids && j < K; j++) {
      int best = -1;
      for (int i = 0; i < V; i++) {
        int used = 0;
        for (int q = 0; q < j; q++) used |= ids[q] == i;
        if (!used && (best < 0 || last[i] > last[best])) best = i;
      }
      ids[j] = best;
    }
    if (json) {
      printf("{\"tokens\": %d, \"vocab\": %d, \"top\": [", n, V);
      for (int j = 0; ids && j < K; j++)
        printf("%s{\"id\": %d, \"logit\": %.6g, \"prob\": %.6g}", j ? ", " : "", ids[j],
               last[ids[j]], exp((double)last[ids[j]] - mx) / z);
      printf("]}\n");
    } else {
      printf("last position (%d tokens): top %d of %d\n", n, K, V);
      for (int j = 0; ids && j < K; j++) {
        char t[16];
        spill_token_to_text(eng, ids[j], t, sizeof t);
        for (char *c = t; *c; c++)
          if ((unsigned char)*c < 32) *c = '?';
        printf("  %6d  %-6s logit %10.5f  p %.5f\n", ids[j], t, last[ids[j]],
               exp((double)last[ids[j]] - mx) / z);
      }
    }
    free(ids);
  }
  free(toks);
  free(last);
  free(allv);
  spill_engine_close(eng);
  if (rc) return cli_fail("eval", rc, e.msg);
  return 0;
}

int cmd_roofline(int argc, char **argv); /* cli/cmd_roofline.c */

int cmd_bench(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--roofline")) return cmd_roofline(argc, argv);
  spill_config cfg;
  spill_config_default(&cfg);
  int json = 0;
  long n_new = 16;
  const char *model = NULL, *v, *prompt = "The quick brown fox";
  for (int i = 1; i < argc; i++) {
    int k = engine_flag("bench", argc, argv, &i, &cfg);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &n_new)) return 2;
    } else if (!strcmp(a, "--prompt")) {
      if (!(prompt = cli_value(argc, argv, &i))) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "spill bench: unknown option %s\n", a);
      return 2;
    } else model = a;
  }
  if (!model) {
    fprintf(stderr,
            "usage: spill bench [--json] [-n N] [--prompt TEXT] MODEL [engine knobs]\n"
            "       spill bench --roofline [--json] [--fio] MODEL [engine knobs]\n"
            "Fixed workload: prompt \"The quick brown fox\" (or TEXT), N greedy decode\n"
            "tokens (16), cold expert cache.\n");
    knob_help(stderr);
    return 2;
  }
  spill_engine *eng;
  if (open_engine("bench", model, &cfg, &eng)) return 1;
  int toks[4096], n = 0;
  spill_err e = {0};
  int rc = spill_tokenize(eng, prompt, 1, toks, 4096, &n, &e);
  if (!rc) rc = spill_engine_clear_cache(eng, 1, &e);
  spill_run_stats st;
  spill_sampling s;
  spill_sampling_default(&s);
  if (!rc) rc = spill_generate(eng, toks, n, (int)n_new, &s, NULL, NULL, NULL, &st, &e);
  if (rc) {
    spill_engine_close(eng);
    return cli_fail("bench", rc, e.msg);
  }
  const spill_config *c = spill_engine_config(eng);
  uint64_t acc = st.demand_hits + st.demand_misses;
  if (json) {
    printf("{\"model\": \"%s\", \"prompt_tokens\": %d, \"tokens\": %d, \"tok_per_s\": %.4f, \"decode_s\": %.4f, "
           "\"prefill_s\": %.4f, \"hits\": %llu, \"misses\": %llu, \"hit_rate\": %.4f, "
           "\"decode_hits\": %llu, \"decode_misses\": %llu, "
           "\"bytes_read\": %llu, \"reads\": %llu, \"io_wait_s\": %.4f, \"major_faults\": %llu, "
           "\"storage\": \"%s\", \"io_backend\": \"%s\", \"policy\": \"%s\", \"lookahead\": %d, "
           "\"cache_slots\": %llu, \"budget\": %llu, \"threads\": %d, "
           "\"max_reads_in_flight\": %llu, \"io_throttle\": %llu, \"emulated_device\": %s, "
           "\"routing_trace\": %s%s%s, \"lookahead_precision_by_rank\": [",
           model, st.tokens_prefill, st.tokens_decode, st.decode_tok_per_s, st.decode_s, st.prefill_s,
           (unsigned long long)st.demand_hits, (unsigned long long)st.demand_misses,
           acc ? (double)st.demand_hits / acc : 0.0, (unsigned long long)st.decode_hits,
           (unsigned long long)st.decode_misses, (unsigned long long)st.bytes_read,
           (unsigned long long)st.reads, st.io_wait_s, (unsigned long long)st.major_faults,
           spill_storage_name(c->storage), spill_io_backend_kind_name(c->io_backend), c->policy,
           c->lookahead,
           (unsigned long long)(c->storage == SPILL_STORAGE_MMAP ? 0
                                : c->cache_slots >= 0         ? (uint64_t)c->cache_slots
                                                              : spill_engine_plan(eng)->cache_slots),
           (unsigned long long)spill_engine_plan(eng)->budget, c->threads,
           (unsigned long long)st.max_reads_in_flight, (unsigned long long)c->io_throttle,
           c->io_throttle ? "true" : "false", c->routing_trace ? "\"" : "",
           c->routing_trace ? c->routing_trace : "null", c->routing_trace ? "\"" : "");
    int nr = c->lookahead < SPILL_LA_RANKS ? c->lookahead : SPILL_LA_RANKS;
    for (int r = 0; r < nr; r++)
      printf("%s%.4f", r ? ", " : "",
             st.lookahead_rank_made[r]
                 ? (double)st.lookahead_rank_correct[r] / st.lookahead_rank_made[r]
                 : 0.0);
    printf("]}\n");
  } else {
    print_summary(eng, &st);
  }
  spill_engine_close(eng);
  return 0;
}
