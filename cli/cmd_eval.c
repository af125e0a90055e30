/* cli/cmd_eval.c: `spill eval`: the logits of a prompt or of given token
 * ids: the top entries of the last position (softmax probabilities), as text
 * or --json, and optionally raw f32 logits of the last or every position to a
 * file (the reference agreement tests read them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_eval_usage[] =
    "usage: spill eval [--json] [--top N] [--logits-out FILE [--all-positions]]\n"
    "                  [--sequential] MODEL (PROMPT | --tokens ID,ID,...) [engine knobs]\n"
    "--logits-out writes raw little-endian f32: the last position (vocab floats), or\n"
    "every position (n x vocab) with --all-positions. Text prompts get BOS; --tokens\n"
    "are used as given. A NaN or Inf logit is an error (SPILL_E_NONFINITE, exit 1):\n"
    "nothing is written or ranked.\n";

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

/* NaN/Inf logits (weights that overflow, a broken kernel) are neither
 * written to --logits-out nor ranked: SPILL_E_NONFINITE naming the first
 * position and token id, and how many values are not finite. */
static int check_finite(const float *l, int n_pos, int V, int pos0, spill_err *e) {
  size_t bad = 0, first = 0, cnt = (size_t)n_pos * (size_t)V;
  for (size_t i = 0; i < cnt; i++)
    if (!isfinite(l[i]) && bad++ == 0) first = i;
  if (!bad) return SPILL_OK;
  return spill_err_set(e, SPILL_E_NONFINITE,
                       "logits not finite: position %d, token id %d is %g (%zu of %zu values); "
                       "nothing written",
                       pos0 + (int)(first / (size_t)V), (int)(first % (size_t)V), (double)l[first],
                       bad, cnt);
}

int cmd_eval(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  int json = 0, all = 0, chunked = 1;
  long top = 10;
  const char *model = NULL, *prompt = NULL, *tokens = NULL, *out = NULL, *v;
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG, &cfg, NULL);
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
      return cli_usage_error("unknown option %s", a);
    } else if (!model) model = a;
    else if (!prompt) prompt = a;
    else return cli_usage_error("unexpected argument %s", a);
  }
  if (!model) return cli_usage_error("no model");
  if (!prompt == !tokens) return cli_usage_error("give a PROMPT or --tokens, not both");
  spill_engine *eng;
  if (cli_open_engine("eval", model, &cfg, &eng)) return 1;
  int n = 0, *toks;
  spill_err e = {0};
  int rc = SPILL_OK;
  if (tokens) {
    toks = parse_tokens(tokens, &n);
    if (!toks || n == 0) {
      spill_engine_close(eng);
      return cli_usage_error("--tokens: expected comma-separated token ids");
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
  if (!rc) rc = check_finite(all ? allv : last, all ? n : 1, V, all ? 0 : n - 1, &e);
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
