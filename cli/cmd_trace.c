/* cli/cmd_trace.c: `spill trace stats|replay|convert`: locality statistics
 * of a router trace, its replay through the engine's cache policies and
 * Belady's MIN, and conversion of other tools' router traces into ours
 * (engine/trace/router_trace.h; schema in docs/TRACE.md).
 * Results on stdout (--json for machines), errors on stderr. The miss-ratio
 * curve plot is drawn by gnuplot (pngcairo/png and svg terminals) from a
 * .tsv written next to the images.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/trace/router_trace.h"
#include "harness/gnuplot_text.h"
#include "research/trace/trace_analysis.h"

#define MAX_LIST 64

const char cmd_trace_stats_usage[] =
    "usage: spill trace stats [--json] [--experts N] [--tokens A:B] FILE\n"
    "--tokens A:B analyses tokens [A, B) only (0-based, B empty = to the end)\n";

const char cmd_trace_chunks_usage[] =
    "usage: spill trace chunks [--json] [--k N] [--experts N] [--tokens A:B] FILE\n"
    "for chunk sizes 1..N (default 8): the distinct experts a chunk of k consecutive\n"
    "tokens selects per layer (a verify chunk of drafts loads each once) against the\n"
    "k x top_k that k single-token steps load without a cache, and the expert bytes\n"
    "per generated token of drafting relative to single steps when half of a chunk's\n"
    "k - 1 drafts are accepted (1 + (k-1)/2 tokens generated) and when none are\n"
    "(docs/MODEL.md \"Drafts\"). --tokens A:B uses tokens [A, B) only.\n";

const char cmd_trace_convert_usage[] =
    "usage: spill trace convert --from FORMAT -o OUT [--experts N] [--layers N] [--top-k K]\n"
    "                           [--hidden N] [--top-k-native K] [--model NAME]\n"
    "                           [--source TEXT] [--drop-layers] INPUT...\n"
    "FORMAT: bmoe-csv (llama.cpp-based --route-trace CSV), hf-router-json (transformers\n"
    "capture, one JSON per sequence), sorted-ids-txt (one line of sorted ids per pass\n"
    "and layer; needs --layers N), vllm-routed-json (a vLLM response with routed\n"
    "experts), llama-moe-csv (llama.cpp's llama-moe-trace: layer,expert rows, or named\n"
    "columns with token/phase/rank; --top-k K = rows per token when there is no token\n"
    "column, default the last layer run's), flashmoe-bin (int32 layer, int32 K, N f32\n"
    "hidden values with --hidden N, K int32 ids per record). Several INPUTs are\n"
    "concatenated (one sequence each). --experts declares the expert count;\n"
    "--top-k-native records that the source overrode the model's top-k; tokens lacking\n"
    "a layer are dropped unless --drop-layers (then such layers are dropped from every\n"
    "token). OUT is a simple-format trace whose header line records the source and\n"
    "what it lacks (docs/TRACE.md).\n";

const char cmd_trace_replay_usage[] =
    "usage: spill trace replay [--json] --policy P[,P...]|all\n"
    "                          (--slots N[,N...] | --curve MIN:MAX:STEP [--plot OUT])\n"
    "                          [--seed S] [--experts N] [--tokens A:B] [--batch] FILE\n"
    "policies: the engine's cache policies (spill knobs) and belady; all = every one\n"
    "--batch acquires each layer's ids pinned together, as the engine does (online\n"
    "policies only: pinned entries cannot be victims; docs/CACHE.md)\n"
    "--tokens A:B replays tokens [A, B) only (0-based, B empty = to the end)\n"
    "--plot OUT writes OUT.tsv, OUT.png and OUT.svg (miss ratio vs slots)\n";

/* "A:B" or "A:" -> [a, b) with b = 0 meaning the end. */
static int parse_window(const char *v, uint32_t *a, uint32_t *b) {
  char *end;
  unsigned long x = strtoul(v, &end, 10);
  if (end == v || *end != ':') return -1;
  const char *s = end + 1;
  unsigned long y = 0;
  if (*s) {
    y = strtoul(s, &end, 10);
    if (end == s || *end || y <= x) return -1;
  }
  if (x > UINT32_MAX || y > UINT32_MAX) return -1;
  *a = (uint32_t)x;
  *b = (uint32_t)y;
  return 0;
}

static int read_trace(const char *file, long experts, spill_trace *t) {
  spill_trace_read_opts o = {0};
  o.n_experts = (uint32_t)experts;
  spill_err e = {0};
  int rc = spill_trace_read_file(file, &o, t, &e);
  if (rc) return cli_fail("trace", rc, e.msg);
  return 0;
}

static const char *rd_label(int i) {
  static const char *const k[SPILL_TRACE_RD_BUCKETS] = {"1", "2", "3-4", "5-8", "9-16",
                                                        "17-32", "33-64", "65-128", ">128",
                                                        "first"};
  return k[i];
}

/* What the trace's header line says: provenance and caveats. */
static void print_header(const spill_trace *t) {
  const spill_trace_meta *m = &t->meta;
  if (!m->n_sequences) return;
  if (m->model) printf("model                     %s\n", m->model);
  if (m->source) printf("source                    %s\n", m->source);
  if (m->converted_from) printf("converted from            %s\n", m->converted_from);
  if (m->n_sequences > 1)
    printf("sequences                 %u (concatenated files)\n", m->n_sequences);
  printf("rank order                %s\n", m->rank_order == 1   ? "router score"
                                            : m->rank_order == 0 ? "unknown"
                                                                 : "not stated");
  printf("gate weights              %s\n", t->weights ? "yes" : "no");
  if (m->top_k_native)
    printf("native top-k              %u (the trace's %u is an override)\n", m->top_k_native,
           t->top_k);
  for (uint32_t i = 0; i < m->n_caveats; i++)
    printf("caveat                    %s\n", m->caveats[i]);
}

/* A JSON string through the one escaper (spill.h): valid UTF-8 always. */
static void json_str(const char *s) {
  char *q = spill_json_quote(s, strlen(s));
  fputs(q ? q : "\"\"", stdout);
  free(q);
}

static void print_header_json(const spill_trace *t) {
  const spill_trace_meta *m = &t->meta;
  printf(", \"header\": {\"sequences\": %u, \"rank_order\": \"%s\", \"weights\": %s",
         m->n_sequences, m->rank_order == 1 ? "router" : m->rank_order == 0 ? "unknown" : "not stated",
         t->weights ? "true" : "false");
  if (m->model) printf(", \"model\": "), json_str(m->model);
  if (m->source) printf(", \"source\": "), json_str(m->source);
  if (m->converted_from) printf(", \"converted_from\": "), json_str(m->converted_from);
  if (m->top_k_native) printf(", \"top_k_native\": %u", m->top_k_native);
  printf(", \"caveats\": [");
  for (uint32_t i = 0; i < m->n_caveats; i++) {
    if (i) printf(", ");
    json_str(m->caveats[i]);
  }
  printf("]}");
}

int cmd_trace_chunks(int argc, char **argv) {
  int json = 0;
  long experts = 0, kmax = 8;
  uint32_t a = 0, b = 0;
  const char *file = NULL, *v;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--json")) json = 1;
    else if (!strcmp(s, "--experts")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1L << 20, &experts)) return 2;
    } else if (!strcmp(s, "--k")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 64, &kmax)) return 2;
    } else if (!strcmp(s, "--tokens")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      if (parse_window(v, &a, &b)) return cli_usage_error("--tokens: expected A:B with A < B");
    } else if (s[0] == '-') {
      return cli_usage_error("unknown option %s", s);
    } else if (file) return cli_usage_error("unexpected argument %s", s);
    else file = s;
  }
  if (!file) return cli_usage_error("no trace file");
  spill_trace t;
  if (read_trace(file, experts, &t)) return 1;
  if (json) {
    printf("{\"file\": ");
    json_str(file);
    printf(", \"tokens\": [%u, %u], \"layers\": %u, \"top_k\": %u, \"chunks\": [", a,
           b ? b : t.n_tokens, t.n_layers, t.top_k);
  } else {
    print_header(&t);
    printf("trace %s: tokens [%u, %u), %u layers, top-%u\n", file, a, b ? b : t.n_tokens,
           t.n_layers, t.top_k);
    printf("%3s %7s %12s %10s %18s %16s\n", "k", "chunks", "union/layer", "vs k steps",
           "per token, half", "per token, none");
  }
  for (int k = 1; k <= kmax; k++) {
    spill_trace_chunk_stats c;
    spill_err e = {0};
    int rc = spill_trace_chunk_union(&t, a, b, k, &c, &e);
    if (rc) {
      spill_trace_free(&t);
      return cli_fail("trace", rc, e.msg);
    }
    /* bytes per generated token relative to a single step (top_k per layer) */
    const double half = c.union_per_layer / (t.top_k * (1.0 + (k - 1) / 2.0));
    const double none = c.union_per_layer / t.top_k;
    if (json)
      printf("%s{\"k\": %d, \"chunks\": %llu, \"union_per_layer\": %.4f, \"ratio\": %.6f, "
             "\"per_token_half_accepted\": %.6f, \"per_token_none_accepted\": %.6f}",
             k > 1 ? ", " : "", k, (unsigned long long)c.chunks, c.union_per_layer, c.ratio, half,
             none);
    else
      printf("%3d %7llu %12.3f %10.3f %18.3f %16.3f\n", k, (unsigned long long)c.chunks,
             c.union_per_layer, c.ratio, half, none);
  }
  if (json) printf("]}\n");
  spill_trace_free(&t);
  return 0;
}

int cmd_trace_stats(int argc, char **argv) {
  int json = 0;
  long experts = 0;
  uint32_t a = 0, b = 0;
  const char *file = NULL, *v;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--json")) json = 1;
    else if (!strcmp(s, "--experts")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1L << 20, &experts)) return 2;
    } else if (!strcmp(s, "--tokens")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      if (parse_window(v, &a, &b)) return cli_usage_error("--tokens: expected A:B with A < B");
    } else if (s[0] == '-') {
      return cli_usage_error("unknown option %s", s);
    } else if (file) return cli_usage_error("unexpected argument %s", s);
    else file = s;
  }
  if (!file) return cli_usage_error("no trace file");
  spill_trace t;
  if (read_trace(file, experts, &t)) return 1;
  spill_trace_stats st;
  spill_err e = {0};
  int rc = spill_trace_compute_stats(&t, a, b, &st, &e);
  if (rc) {
    spill_trace_free(&t);
    return cli_fail("trace", rc, e.msg);
  }
  if (json) {
    printf("{\"file\": ");
    json_str(file);
    printf(", \"format\": \"%s\", \"tokens\": %u, \"layers\": %u, "
           "\"experts\": %u, \"top_k\": %u, \"accesses\": %llu, \"pool\": %u, "
           "\"touched_per_token\": %.4f, \"touched_per_token_frac\": %.6f, "
           "\"touched_total\": %u, \"reuse_next\": %.6f, "
           "\"coverage\": {\"p50\": {\"pairs\": %u, \"frac\": %.6f}, "
           "\"p80\": {\"pairs\": %u, \"frac\": %.6f}, \"p95\": {\"pairs\": %u, \"frac\": %.6f}}, "
           "\"gini_mean\": %.6f, \"top10_share_mean\": %.6f",
           t.format == SPILL_TRACE_SIMPLE ? "simple" : "router", st.n_tokens, st.n_layers,
           st.n_experts, st.top_k, (unsigned long long)st.accesses, st.pool,
           st.touched_per_token, st.touched_per_token / st.pool, st.touched_total, st.reuse_next,
           st.cover_pairs[0], st.cover_frac[0], st.cover_pairs[1], st.cover_frac[1],
           st.cover_pairs[2], st.cover_frac[2], st.gini_mean, st.top10_share_mean);
    print_header_json(&t);
    if (st.recorded_hit_rate >= 0) printf(", \"recorded_hit_rate\": %.6f", st.recorded_hit_rate);
    if (st.lookahead_precision >= 0)
      printf(", \"lookahead_precision\": %.6f", st.lookahead_precision);
    printf(", \"reuse_distance\": {");
    for (int i = 0; i < SPILL_TRACE_RD_BUCKETS; i++)
      printf("%s\"%s\": %.6f", i ? ", " : "", rd_label(i),
             (double)st.reuse_dist[i] / (double)st.accesses);
    printf("}, \"coactivation\": {\"precision\": %.6f, \"popular_precision\": %.6f, "
           "\"prev_token_precision\": %.6f}",
           st.coact_precision, st.coact_popular_precision, st.coact_prev_token_precision);
    printf(", \"belady\": [");
    for (int p = 0; p < SPILL_TRACE_BELADY_POINTS; p++)
      printf("%s{\"pool_frac\": %.2f, \"slots\": %u, \"hit_rate\": %.6f}", p ? ", " : "",
             spill_trace_belady_fracs[p], st.belady_slots[p], st.belady_hit_rate[p]);
    printf("], \"per_layer\": [");
    for (uint32_t l = 0; l < st.n_layers; l++)
      printf("%s{\"layer\": %u, \"distinct\": %u, \"gini\": %.6f, \"top10_share\": %.6f, "
             "\"reuse_next\": %.6f, \"coact_precision\": %.6f}",
             l ? ", " : "", st.layers[l].layer, st.layers[l].distinct, st.layers[l].gini,
             st.layers[l].top10_share, st.layers[l].reuse_next, st.layers[l].coact_precision);
    printf("]}\n");
  } else {
    print_header(&t);
    printf("trace %s (%s format): %u tokens, %u layers, %u experts, top-%u, %llu accesses\n",
           file, t.format == SPILL_TRACE_SIMPLE ? "simple" : "router", st.n_tokens, st.n_layers,
           st.n_experts, st.top_k, (unsigned long long)st.accesses);
    printf("pairs touched per token   %.1f of %u (%.1f%%); %u distinct over the trace\n",
           st.touched_per_token, st.pool, 100.0 * st.touched_per_token / st.pool,
           st.touched_total);
    printf("next-token reuse          %.1f%% of a token's pairs were used by the previous one\n",
           100.0 * st.reuse_next);
    printf("coverage                  50%%: %u pairs (%.1f%%)  80%%: %u (%.1f%%)  95%%: %u "
           "(%.1f%%) of the pool\n",
           st.cover_pairs[0], 100 * st.cover_frac[0], st.cover_pairs[1], 100 * st.cover_frac[1],
           st.cover_pairs[2], 100 * st.cover_frac[2]);
    printf("popularity skew           gini %.3f, top-10%% share %.1f%% (mean over layers)\n",
           st.gini_mean, 100 * st.top10_share_mean);
    if (st.recorded_hit_rate >= 0)
      printf("recorded hit rate         %.1f%%\n", 100 * st.recorded_hit_rate);
    if (st.lookahead_precision >= 0)
      printf("lookahead precision       %.1f%%\n", 100 * st.lookahead_precision);
    printf("reuse distance (tokens)  ");
    for (int i = 0; i < SPILL_TRACE_RD_BUCKETS; i++)
      printf(" %s: %.1f%%", rd_label(i), 100.0 * (double)st.reuse_dist[i] / (double)st.accesses);
    printf("\n");
    if (st.coact_precision >= 0)
      printf("co-activation             layer l's ids predict layer l+1's with %.1f%% precision "
             "(online counts);\n"
             "                          baselines: most popular %.1f%%, previous token's %.1f%%\n",
             100 * st.coact_precision, 100 * st.coact_popular_precision,
             100 * st.coact_prev_token_precision);
    printf("belady (MIN) hit rate    ");
    for (int p = 0; p < SPILL_TRACE_BELADY_POINTS; p++)
      printf(" %.0f%% of the pool (%u slots): %.1f%%", 100 * spill_trace_belady_fracs[p],
             st.belady_slots[p], 100 * st.belady_hit_rate[p]);
    printf("\n\n%6s %9s %7s %9s %8s %8s\n", "layer", "distinct", "gini", "top10%", "reuse",
           "coact");
    for (uint32_t l = 0; l < st.n_layers; l++) {
      printf("%6u %9u %7.3f %8.1f%% %7.1f%%", st.layers[l].layer, st.layers[l].distinct,
             st.layers[l].gini, 100 * st.layers[l].top10_share, 100 * st.layers[l].reuse_next);
      if (st.layers[l].coact_precision >= 0) printf(" %7.1f%%\n", 100 * st.layers[l].coact_precision);
      else printf(" %8s\n", "-");
    }
  }
  spill_trace_stats_free(&st);
  spill_trace_free(&t);
  return 0;
}

/* Splits a comma list in place into at most MAX_LIST items. */
static int split(char *s, char **items) {
  int n = 0;
  for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
    if (n == MAX_LIST) return -1;
    items[n++] = tok;
  }
  return n;
}

static int plot(const char *out, char **pols, int np, const uint32_t *slots, int ns,
                const double *miss, const char *title) {
  char path[4096];
  snprintf(path, sizeof path, "%s.tsv", out);
  /* every name below goes into the gnuplot script through
   * harness/gnuplot_text.h (issue 26 item 3) */
  char gp_tsv[16384], gp_out[2][16384], gp_label[4096];
  const char *ext[2] = {"png", "svg"};
  for (int k = 0; k < 2; k++) {
    char o[4096];
    snprintf(o, sizeof o, "%s.%s", out, ext[k]);
    if (spill_gp_path(gp_out[k], sizeof gp_out[k], o)) {
      fprintf(stderr, "spill trace: --plot %s: a control character or too long for gnuplot\n", out);
      return 1;
    }
  }
  if (spill_gp_path(gp_tsv, sizeof gp_tsv, path)) {
    fprintf(stderr, "spill trace: --plot %s: a control character or too long for gnuplot\n", out);
    return 1;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "spill trace: cannot write %s\n", path);
    return 1;
  }
  fprintf(f, "slots");
  for (int p = 0; p < np; p++) fprintf(f, "\t%s", pols[p]);
  fprintf(f, "\n");
  for (int s = 0; s < ns; s++) {
    fprintf(f, "%u", slots[s]);
    for (int p = 0; p < np; p++) fprintf(f, "\t%.6f", miss[p * ns + s]);
    fprintf(f, "\n");
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "spill trace: cannot write %s\n", path);
    return 1;
  }
  static const char *const terms[2] = {"pngcairo size 900,600", "svg size 900,600 dynamic"};
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    fprintf(stderr, "spill trace: cannot run gnuplot\n");
    return 1;
  }
  for (int k = 0; k < 2; k++) {
    fprintf(g, "set terminal %s\nset output %s\n", terms[k], gp_out[k]);
    fprintf(g, "set title %s noenhanced\nset xlabel 'cache slots'\n"
               "set ylabel 'miss ratio'\nset yrange [0:1]\nset grid\nset key top right\n",
            spill_gp_label(gp_label, sizeof gp_label, title));
    fprintf(g, "plot ");
    for (int p = 0; p < np; p++)
      fprintf(g, "%s%s using 1:%d with linespoints title %s noenhanced", p ? ", " : "", gp_tsv,
              p + 2, spill_gp_label(gp_label, sizeof gp_label, pols[p]));
    fprintf(g, "\nunset output\n");
  }
  int rc = pclose(g);
  if (rc != 0) {
    fprintf(stderr, "spill trace: gnuplot failed (status %d)\n", rc);
    return 1;
  }
  fprintf(stderr, "wrote %s.tsv, %s.png, %s.svg\n", out, out, out);
  return 0;
}

/* Options of `spill trace replay`, parsed. */
typedef struct replay_opts {
  int json, batch;
  long experts, seed;
  uint32_t a, b;
  const char *file, *policy, *slots_s, *curve, *plot_out;
} replay_opts;

static int replay_parse_args(int argc, char **argv, replay_opts *o) {
  const char *v;
  memset(o, 0, sizeof *o);
  o->seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--json")) o->json = 1;
    else if (!strcmp(s, "--batch")) o->batch = 1;
    else if (!strcmp(s, "--experts")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1L << 20, &o->experts)) return 2;
    } else if (!strcmp(s, "--seed")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 0, 1L << 62, &o->seed)) return 2;
    } else if (!strcmp(s, "--tokens")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      if (parse_window(v, &o->a, &o->b))
        return cli_usage_error("--tokens: expected A:B with A < B");
    } else if (!strcmp(s, "--policy")) {
      if (!(o->policy = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--slots")) {
      if (!(o->slots_s = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--curve")) {
      if (!(o->curve = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--plot")) {
      if (!(o->plot_out = cli_value(argc, argv, &i))) return 2;
    } else if (s[0] == '-') {
      return cli_usage_error("unknown option %s", s);
    } else if (o->file) return cli_usage_error("unexpected argument %s", s);
    else o->file = s;
  }
  if (!o->file) return cli_usage_error("no trace file");
  if (!o->policy) return cli_usage_error("--policy needed");
  if (!!o->slots_s == !!o->curve) return cli_usage_error("give --slots or --curve (one of them)");
  if (o->plot_out && !o->curve) return cli_usage_error("--plot needs --curve");
  return 0;
}

/* --policy P[,P...]|all into pols (pointing into buf or at static names). */
static int replay_parse_policies(const char *policy, char *buf, size_t cap, char **pols,
                                 int *np) {
  if (!strcmp(policy, "all")) {
    *np = 0;
    for (size_t i = 0; spill_trace_policy_name_at(i) && *np < MAX_LIST; i++)
      pols[(*np)++] = (char *)spill_trace_policy_name_at(i);
    return 0;
  }
  snprintf(buf, cap, "%s", policy);
  *np = split(buf, pols);
  if (*np <= 0) return cli_usage_error("--policy: expected P[,P...] or all");
  for (int p = 0; p < *np; p++) {
    size_t i = 0;
    while (spill_trace_policy_name_at(i) && strcmp(spill_trace_policy_name_at(i), pols[p])) i++;
    if (spill_trace_policy_name_at(i)) continue;
    char known[512] = "";
    for (size_t j = 0; spill_trace_policy_name_at(j); j++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "",
               spill_trace_policy_name_at(j));
    return cli_usage_error("--policy: unknown policy '%s' (known: %s)", pols[p], known);
  }
  return 0;
}

/* --slots N[,N...] or --curve MIN:MAX:STEP into slots[0..*ns) (at most 1024). */
static int replay_parse_slots(const replay_opts *o, uint32_t *slots, int *ns) {
  *ns = 0;
  if (o->slots_s) {
    char buf[4096], *items[MAX_LIST];
    snprintf(buf, sizeof buf, "%s", o->slots_s);
    int n = split(buf, items);
    if (n <= 0) return cli_usage_error("--slots: expected N[,N...]");
    for (int i = 0; i < n; i++) {
      long x;
      if (cli_int("--slots", items[i], 1, 1L << 28, &x)) return 2;
      slots[(*ns)++] = (uint32_t)x;
    }
    return 0;
  }
  unsigned long lo, hi, step;
  char extra;
  if (sscanf(o->curve, "%lu:%lu:%lu%c", &lo, &hi, &step, &extra) != 3 || lo < 1 || hi < lo ||
      step < 1 || (hi - lo) / step + 1 > 1024 || hi > (1ul << 28)) {
    return cli_usage_error("--curve: expected MIN:MAX:STEP, 1 <= MIN <= MAX, at most 1024 "
                           "points");
  }
  for (unsigned long x = lo; x <= hi; x += step) slots[(*ns)++] = (uint32_t)x;
  return 0;
}

/* Replays every (policy, slots) pair and prints the table or JSON; miss[p *
 * ns + s] receives the miss ratios. */
static int replay_run(const replay_opts *o, const spill_trace *t, char **pols, int np,
                      const uint32_t *slots, int ns, double *miss) {
  int first = 1, status = 0;
  if (o->json) printf("[");
  else {
    printf("%-14s", "policy");
    for (int s = 0; s < ns; s++) printf(" %8u", slots[s]);
    printf("   (hit rate, %u tokens%s)\n", (o->b ? o->b : t->n_tokens) - o->a,
           o->batch ? ", layer batches pinned" : "");
  }
  for (int p = 0; p < np && !status; p++) {
    if (!o->json) printf("%-14s", pols[p]);
    for (int s = 0; s < ns; s++) {
      spill_trace_replay_result r;
      spill_err e = {0};
      int rc = spill_trace_replay(t, pols[p], slots[s], (uint64_t)o->seed, o->a, o->b,
                                  o->batch ? SPILL_TRACE_REPLAY_BATCH : 0, &r, &e);
      if (rc) {
        if (!o->json) printf("\n");
        status = cli_fail("trace", rc, e.msg);
        break;
      }
      miss[p * ns + s] = 1.0 - r.hit_rate;
      if (o->json)
        printf("%s\n  {\"policy\": \"%s\", \"slots\": %u, \"hits\": %llu, \"accesses\": %llu, "
               "\"hit_rate\": %.6f}",
               first ? "" : ",", pols[p], slots[s], (unsigned long long)r.hits,
               (unsigned long long)r.accesses, r.hit_rate);
      else printf(" %7.2f%%", 100.0 * r.hit_rate);
      first = 0;
    }
    if (!o->json && !status) printf("\n");
  }
  if (o->json && !status) printf("\n]\n");
  return status;
}

int cmd_trace_replay(int argc, char **argv) {
  replay_opts o;
  int rc = replay_parse_args(argc, argv, &o);
  if (rc) return rc;
  char pol_buf[1024], *pols[MAX_LIST];
  int np = 0, ns = 0;
  if ((rc = replay_parse_policies(o.policy, pol_buf, sizeof pol_buf, pols, &np))) return rc;
  uint32_t slots[1024];
  if ((rc = replay_parse_slots(&o, slots, &ns))) return rc;

  spill_trace t;
  if (read_trace(o.file, o.experts, &t)) return 1;
  /* the window is checked against the trace before anything is printed */
  if (o.a >= t.n_tokens || (o.b && o.b > t.n_tokens)) {
    char msg[160];
    if (o.b)
      snprintf(msg, sizeof msg, "--tokens %u:%u: outside the trace's %u tokens", o.a, o.b,
               t.n_tokens);
    else
      snprintf(msg, sizeof msg, "--tokens %u:(end): outside the trace's %u tokens", o.a,
               t.n_tokens);
    spill_trace_free(&t);
    return cli_fail("trace replay", SPILL_E_RANGE, msg);
  }
  double *miss = (double *)calloc((size_t)np * ns, sizeof(double));
  if (!miss) {
    spill_trace_free(&t);
    return cli_fail("trace", SPILL_E_NOMEM, "out of memory");
  }
  int status = replay_run(&o, &t, pols, np, slots, ns, miss);
  if (!status && o.plot_out) status = plot(o.plot_out, pols, np, slots, ns, miss, o.file);
  free(miss);
  spill_trace_free(&t);
  return status;
}

int cmd_trace_convert(int argc, char **argv) {
  long experts = 0, layers = 0, top_k = 0, native = 0, hidden = 0;
  const char *from = NULL, *outp = NULL, *v;
  spill_trace_convert_opts o;
  memset(&o, 0, sizeof o);
  const char *inputs[256];
  int n_in = 0;
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--from")) {
      if (!(from = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "-o")) {
      if (!(outp = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--experts")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1L << 20, &experts)) return 2;
    } else if (!strcmp(s, "--layers")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 4096, &layers)) return 2;
    } else if (!strcmp(s, "--top-k")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1024, &top_k)) return 2;
    } else if (!strcmp(s, "--hidden")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 0, 1L << 20, &hidden)) return 2;
    } else if (!strcmp(s, "--top-k-native")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(s, v, 1, 1024, &native)) return 2;
    } else if (!strcmp(s, "--model")) {
      if (!(o.model = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--source")) {
      if (!(o.source = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(s, "--drop-layers")) {
      o.incomplete = SPILL_TRACE_DROP_LAYERS;
    } else if (s[0] == '-') {
      return cli_usage_error("unknown option %s", s);
    } else if (n_in == 256) {
      return cli_usage_error("more than 256 inputs");
    } else inputs[n_in++] = s;
  }
  if (!from) return cli_usage_error("no --from FORMAT");
  if (!outp) return cli_usage_error("no -o OUT");
  if (n_in == 0) return cli_usage_error("no input file");
  int src = spill_trace_source_find(from);
  if (src < 0) return cli_usage_error("unknown format '%s'", from);
  if (src == SPILL_TRACE_SRC_SORTED_IDS_TXT && !layers)
    return cli_usage_error("sorted-ids-txt needs --layers N");
  o.n_experts = (uint32_t)experts;
  o.n_layers = (uint32_t)layers;
  if (top_k && src != SPILL_TRACE_SRC_SORTED_IDS_TXT && src != SPILL_TRACE_SRC_LLAMA_MOE_CSV)
    return cli_usage_error("--top-k is for sorted-ids-txt and llama-moe-csv");
  if (hidden && src != SPILL_TRACE_SRC_FLASHMOE_BIN)
    return cli_usage_error("--hidden is for flashmoe-bin");
  o.top_k = (uint32_t)top_k;
  o.hidden = (uint32_t)hidden;
  o.top_k_native = (uint32_t)native;
  char *bufs[256] = {0};
  size_t lens[256] = {0};
  spill_err e = {0};
  int status = 0;
  for (int i = 0; i < n_in && !status; i++) {
    int rc = spill_read_file(inputs[i], (size_t)1 << 32, &bufs[i], &lens[i], &e);
    if (rc) status = cli_fail("trace convert", rc, e.msg);
  }
  spill_trace t;
  memset(&t, 0, sizeof t);
  if (!status) {
    int rc = spill_trace_convert((spill_trace_source)src, (const char *const *)bufs, lens,
                                 inputs, (size_t)n_in, &o, &t, &e);
    if (rc) status = cli_fail("trace convert", rc, e.msg);
  }
  if (!status) {
    int rc = spill_trace_write_file(&t, outp, &e);
    if (rc) status = cli_fail("trace convert", rc, e.msg);
  }
  if (!status) {
    fprintf(stderr, "wrote %s: %u tokens, %u layers x %u experts, top-%u%s\n", outp, t.n_tokens,
            t.n_layers, t.n_experts, t.top_k, t.weights ? ", with weights" : "");
    for (uint32_t i = 0; i < t.meta.n_caveats; i++)
      fprintf(stderr, "  caveat: %s\n", t.meta.caveats[i]);
  }
  spill_trace_free(&t);
  for (int i = 0; i < n_in; i++) free(bufs[i]);
  return status;
}
