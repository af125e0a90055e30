/* harness/exp_report.c: summary.json, table.md, table.csv and gnuplot plots
 * from a results directory's raw rows, and `spill compare`.
 *
 * Statistics per (cell, arm): median, min, max, IQR (type-7 quantiles,
 * harness/stats.h) of every timing metric; counters are reported separately
 * with whether they were equal across repeats. A/B: each non-control arm
 * against the control (arm 0) in the same cell, paired by repeat index:
 * median ratio B/A with a seeded 2000-resample percentile bootstrap CI and a
 * Mann-Whitney p. The hypothesis verdict per cell comes from the CI at level
 * 1 - alpha (stats.h), combined conservatively over cells.
 */
#define _GNU_SOURCE
#include "harness/exp_report.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/exp_config.h"
#include "harness/exp_files.h"
#include "harness/gnuplot_text.h"
#include "harness/exp_metrics.h"
#include "harness/exp_rows.h"

#define BOOT_RESAMPLES 4000
#define BOOT_SEED 20240601ull

typedef struct row {
  cJSON *j;
  int repeat;
  const char *node; /* the Slurm node that ran it (harness/exp_slurm.h); NULL locally */
} row;

typedef struct group {
  char cell[200];
  const char *node; /* of its rows (one node per cell, checked at load) */
  int cell_idx, arm;
  int n;
  int n_oom;  /* runs the machine profile's OOM killer ended: no metrics, not in rows */
  row **rows; /* sorted by repeat (distinct: exp_rows refuses duplicates) */
} group;

typedef struct report {
  const spill_exp_config *cfg; /* &own, or the caller's */
  spill_exp_config own;
  spill_exp_rows parsed;
  row *rows;
  int n_rows;
  group *groups;
  int n_groups;
  int has_nodes; /* some row names its node: the table gets a node column */
} report;

/* Rows written before the engine kept a run-wide latency window carry the
 * last forward call's read p50/p99 under the run's name: not the run's, so
 * they count as missing (NaN: "-" in tables, null in summary.json). */
static int latency_is_run_wide(const row *r) {
  const cJSON *g = cJSON_GetObjectItemCaseSensitive(r->j, "engine");
  if (g && cJSON_GetObjectItemCaseSensitive(g, "peer")) return 1; /* a peer: none, not stale */
  const cJSON *w = g ? cJSON_GetObjectItemCaseSensitive(g, "read_latency") : NULL;
  return cJSON_IsString(w) && !strcmp(w->valuestring, "run");
}

static double metric_of(const row *r, const char *name) {
  if ((!strcmp(name, "read_p50_ms") || !strcmp(name, "read_p99_ms")) && !latency_is_run_wide(r))
    return NAN;
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->j, "metrics");
  const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, name) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double engine_num(const row *r, const char *name) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->j, "engine");
  const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, name) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static double machine_num(const row *r, const char *name) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->j, "machine");
  const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, name) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Tokens a run pushed through the model (prefill + decode; NaN if unknown). */
static double run_tokens(const row *r) {
  const double n = metric_of(r, "tokens_prefill") + metric_of(r, "tokens_decode");
  return n > 0 ? n : NAN;
}

static int cmp_row_rep(const void *a, const void *b) {
  return (*(row *const *)a)->repeat - (*(row *const *)b)->repeat;
}

static void report_free(report *R) {
  spill_exp_rows_free(&R->parsed);
  free(R->rows);
  for (int i = 0; i < R->n_groups; i++) free(R->groups[i].rows);
  free(R->groups);
  if (R->cfg == &R->own) spill_exp_config_free(&R->own);
  memset(R, 0, sizeof *R);
}

/* Builds the report from cfg (not owned) and runs.jsonl lines. */
static int report_build(report *R, const spill_exp_config *cfg, const char *file, char **lines,
                        int n, spill_err *e) {
  R->cfg = cfg;
  SPILL_TRY(spill_exp_rows_parse(cfg, file, lines, n, &R->parsed, e));
  R->rows = calloc((size_t)(R->parsed.n ? R->parsed.n : 1), sizeof *R->rows);
  if (!R->rows) return spill_err_set(e, SPILL_E_NOMEM, "report: no memory");
  for (int i = 0; i < R->parsed.n; i++) {
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(R->parsed.rows[i].j, "node");
    R->rows[R->n_rows++] = (row){R->parsed.rows[i].j, R->parsed.rows[i].repeat,
                                 cJSON_IsString(nd) ? nd->valuestring : NULL};
    if (cJSON_IsString(nd)) R->has_nodes = 1;
  }
  /* Groups in plan order: cells, then arms. */
  int cells = spill_exp_config_n_cells(cfg);
  R->groups = calloc((size_t)(cells * cfg->n_arms), sizeof *R->groups);
  if (!R->groups) return spill_err_set(e, SPILL_E_NOMEM, "report: no memory");
  for (int c = 0; c < cells; c++)
    for (int a = 0; a < cfg->n_arms; a++) {
      group *g = &R->groups[R->n_groups++];
      spill_exp_cell_key(cfg, c, g->cell, sizeof g->cell);
      g->cell_idx = c;
      g->arm = a;
      g->rows = calloc((size_t)(R->n_rows ? R->n_rows : 1), sizeof *g->rows);
      if (!g->rows) return spill_err_set(e, SPILL_E_NOMEM, "report: no memory");
      /* A/B arms are compared within a cell: never pool rows of one cell
       * measured on different machines (or a local row with a node's). */
      group *g0 = g - a;
      for (int i = 0; i < R->n_rows; i++) {
        if (R->parsed.rows[i].cell != c) continue;
        const char *nd = R->rows[i].node ? R->rows[i].node : "(local)";
        if (g0->node && strcmp(g0->node, nd))
          return spill_err_set(e, SPILL_E_FORMAT,
                               "%s: cell %s was run on nodes %s and %s: refusing to pool the arms "
                               "of one A/B across machines (rerun the cell on one node)",
                               file, g->cell, g0->node, nd);
        g0->node = nd;
        if (R->parsed.rows[i].arm != a) continue;
        if (spill_exp_row_oom_killed(&R->parsed.rows[i])) g->n_oom++;
        else g->rows[g->n++] = &R->rows[i];
      }
      g->node = g0->node;
      qsort(g->rows, (size_t)g->n, sizeof *g->rows, cmp_row_rep);
    }
  return SPILL_OK;
}

static int report_load(const char *dir, report *R, spill_err *e) {
  memset(R, 0, sizeof *R);
  char p[SPILL_PATH_MAX];
  snprintf(p, sizeof p, "%s/config.json", dir);
  SPILL_TRY(spill_exp_config_load(p, &R->own, e));
  R->cfg = &R->own;
  snprintf(p, sizeof p, "%s/runs.jsonl", dir);
  char **lines;
  int n;
  SPILL_TRY(spill_exp_read_lines(p, 0, &lines, &n, e));
  int rc = report_build(R, &R->own, p, lines, n, e);
  R->cfg = &R->own;
  spill_exp_lines_free(lines, n);
  return rc;
}

static void values(const group *g, const char *metric, double *out) {
  for (int i = 0; i < g->n; i++) out[i] = metric_of(g->rows[i], metric);
}

static const group *find_group(const report *R, int cell, int arm) {
  for (int i = 0; i < R->n_groups; i++)
    if (R->groups[i].cell_idx == cell && R->groups[i].arm == arm) return &R->groups[i];
  return NULL;
}

/* Paired comparison of arm b vs arm a in a cell on metric (pairs: repeats
 * both arms have). */
static int compare_groups(const group *ga, const group *gb, const char *metric, double alpha,
                          spill_stats_ab *ab, spill_stats_mwu *mw) {
  /* At most one pair per control row, so k <= ga->n whatever the rows hold
   * (a duplicated repeat once overran an n = min(na, nb) buffer). */
  double *a = malloc(sizeof(double) * (size_t)(ga->n + 1));
  double *b = malloc(sizeof(double) * (size_t)(ga->n + 1));
  int k = 0;
  for (int i = 0; a && b && i < ga->n; i++)
    for (int j = 0; j < gb->n; j++)
      if (ga->rows[i]->repeat == gb->rows[j]->repeat) {
        a[k] = metric_of(ga->rows[i], metric);
        b[k] = metric_of(gb->rows[j], metric);
        k++;
        break;
      }
  int rc = spill_stats_ab_paired(a, b, k, BOOT_RESAMPLES, alpha, BOOT_SEED, ab);
  spill_stats_mann_whitney(a, k, b, k, mw);
  free(a), free(b);
  return rc;
}

/* Per (cell, arm): median, min, max, quartiles of every timing metric;
 * counters with whether they were equal across repeats. */
static void summary_cells(report *R, cJSON *s) {
  const spill_exp_config *cfg = R->cfg;
  int nm;
  const spill_exp_metric *mt = spill_exp_metrics(&nm);
  cJSON *cells = cJSON_AddArrayToObject(s, "cells");
  double *v = malloc(sizeof(double) * (size_t)(R->n_rows + 1));
  for (int gi = 0; v && gi < R->n_groups; gi++) {
    const group *g = &R->groups[gi];
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "cell", g->cell);
    cJSON_AddStringToObject(c, "arm", cfg->arms[g->arm].name);
    if (cfg->arms[g->arm].peer.name[0]) cJSON_AddStringToObject(c, "peer", cfg->arms[g->arm].peer.name);
    cJSON_AddNumberToObject(c, "n", g->n);
    if (g->node) cJSON_AddStringToObject(c, "node", g->node);
    if (g->n_oom) cJSON_AddNumberToObject(c, "oom_killed", g->n_oom);
    if (g->n + g->n_oom < cfg->repeats)
      cJSON_AddNumberToObject(c, "missing", cfg->repeats - g->n - g->n_oom);
    cJSON *m = cJSON_AddObjectToObject(c, "metrics");
    cJSON *k = cJSON_AddObjectToObject(c, "counters");
    for (int i = 0; i < nm && g->n > 0; i++) {
      if (!spill_exp_config_has_metric(cfg, i)) continue; /* the other workload's */
      values(g, mt[i].name, v);
      spill_stats_summary st;
      spill_stats_summarize(v, g->n, &st);
      if (mt[i].counter) {
        cJSON *x = cJSON_AddObjectToObject(k, mt[i].name);
        cJSON_AddNumberToObject(x, "median", st.median);
        cJSON_AddBoolToObject(x, "equal_across_repeats", st.min == st.max);
      } else {
        cJSON *x = cJSON_AddObjectToObject(m, mt[i].name);
        cJSON_AddNumberToObject(x, "median", st.median);
        cJSON_AddNumberToObject(x, "min", st.min);
        cJSON_AddNumberToObject(x, "max", st.max);
        cJSON_AddNumberToObject(x, "q1", st.q1);
        cJSON_AddNumberToObject(x, "q3", st.q3);
        cJSON_AddNumberToObject(x, "iqr", st.iqr);
      }
    }
    cJSON_AddItemToArray(cells, c);
  }
  free(v);
}

/* A/B comparisons against the control arm (or the hypothesis's control). */
static void summary_comparisons(report *R, cJSON *s) {
  const spill_exp_config *cfg = R->cfg;
  int ctl = cfg->hyp.present ? cfg->hyp.control : 0;
  double alpha = cfg->hyp.present ? cfg->hyp.alpha : 0.05;
  cJSON *cmp = cJSON_AddArrayToObject(s, "comparisons");
  /* the primary metric, the hypothesis's, and a bench workload's pp and tg
   * of every recorded phase (each once) */
  const char *metrics[8] = {spill_exp_config_primary_metric(cfg),
                            cfg->hyp.present ? cfg->hyp.metric : NULL};
  int n_metrics = 2;
  static const char *const bench_rates[] = {"tg_tok_per_s_cold", "pp_tok_per_s_cold",
                                            "tg_tok_per_s_warm", "pp_tok_per_s_warm"};
  for (int i = 0; cfg->bench && i < 4; i++)
    if (spill_exp_config_has_metric(cfg, spill_exp_metric_find(bench_rates[i])))
      metrics[n_metrics++] = bench_rates[i];
  for (int c = 0; c < spill_exp_config_n_cells(cfg); c++)
    for (int a = 0; a < cfg->n_arms; a++) {
      if (a == ctl) continue;
      for (int mi = 0; mi < n_metrics; mi++) {
        int seen = !metrics[mi];
        for (int j = 0; j < mi && !seen; j++) seen = metrics[j] && !strcmp(metrics[j], metrics[mi]);
        if (seen) continue;
        const group *ga = find_group(R, c, ctl), *gb = find_group(R, c, a);
        spill_stats_ab ab;
        spill_stats_mwu mw;
        compare_groups(ga, gb, metrics[mi], alpha, &ab, &mw);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "cell", ga->cell);
        cJSON_AddStringToObject(x, "control", cfg->arms[ctl].name);
        cJSON_AddStringToObject(x, "treatment", cfg->arms[a].name);
        cJSON_AddStringToObject(x, "metric", metrics[mi]);
        cJSON_AddNumberToObject(x, "pairs", ab.n);
        cJSON_AddNumberToObject(x, "ratio", ab.ratio);
        cJSON_AddNumberToObject(x, "ci_lo", ab.ci_lo);
        cJSON_AddNumberToObject(x, "ci_hi", ab.ci_hi);
        cJSON_AddNumberToObject(x, "ci_level", ab.level);
        cJSON_AddNumberToObject(x, "bootstrap_resamples", BOOT_RESAMPLES);
        cJSON_AddNumberToObject(x, "mann_whitney_p", mw.p);
        cJSON_AddBoolToObject(x, "mann_whitney_exact", mw.exact);
        cJSON_AddItemToArray(cmp, x);
      }
    }
}

/* The hypothesis: a verdict per cell from the CI against the cell's
 * threshold (hypothesis.cell_thresholds, else 1 +- min_effect), combined
 * over cells; withheld while the experiment is incomplete. */
static void summary_hypothesis(report *R, cJSON *s, spill_exp_report_result *res) {
  const spill_exp_config *cfg = R->cfg;
  const spill_exp_hypothesis *h = &cfg->hyp;
  res->has_hypothesis = 1;
  snprintf(res->claim, sizeof res->claim, "%s", h->claim);
  snprintf(res->metric, sizeof res->metric, "%s", h->metric);
  cJSON *hj = cJSON_AddObjectToObject(s, "hypothesis");
  cJSON_AddStringToObject(hj, "claim", h->claim);
  cJSON_AddStringToObject(hj, "metric", h->metric);
  cJSON_AddStringToObject(hj, "direction", h->direction > 0 ? "increase" : "decrease");
  cJSON_AddNumberToObject(hj, "min_effect", h->min_effect);
  cJSON_AddNumberToObject(hj, "alpha", h->alpha);
  cJSON_AddNumberToObject(hj, "threshold", h->direction > 0 ? 1 + h->min_effect : 1 - h->min_effect);
  cJSON_AddStringToObject(hj, "control", cfg->arms[h->control].name);
  cJSON_AddStringToObject(hj, "treatment", cfg->arms[h->treatment].name);
  cJSON *pc = cJSON_AddArrayToObject(hj, "cells");
  int cells_n = spill_exp_config_n_cells(cfg);
  spill_verdict *vs = calloc((size_t)cells_n, sizeof *vs);
  size_t off = 0;
  res->result_text[0] = 0;
  for (int c = 0; vs && c < cells_n; c++) {
    const group *ga = find_group(R, c, h->control), *gb = find_group(R, c, h->treatment);
    spill_stats_ab ab;
    spill_stats_mwu mw;
    compare_groups(ga, gb, h->metric, h->alpha, &ab, &mw);
    double t = spill_exp_config_threshold(cfg, c);
    vs[c] = spill_stats_verdict(h->direction, h->direction > 0 ? t - 1 : 1 - t, ab.ci_lo, ab.ci_hi);
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "cell", ga->cell);
    cJSON_AddNumberToObject(x, "threshold", t);
    cJSON_AddNumberToObject(x, "pairs", ab.n);
    cJSON_AddNumberToObject(x, "ratio", ab.ratio);
    cJSON_AddNumberToObject(x, "ci_lo", ab.ci_lo);
    cJSON_AddNumberToObject(x, "ci_hi", ab.ci_hi);
    cJSON_AddNumberToObject(x, "mann_whitney_p", mw.p);
    cJSON_AddStringToObject(x, "verdict", spill_verdict_name(vs[c]));
    cJSON_AddItemToArray(pc, x);
    char tt[48] = ""; /* with per-cell thresholds, the cell's own */
    if (h->n_thresholds) snprintf(tt, sizeof tt, " vs %s %.3g", h->direction > 0 ? ">=" : "<=", t);
    if (off < sizeof res->result_text)
      off += (size_t)snprintf(res->result_text + off, sizeof res->result_text - off,
                              "%s%s: %s ratio %.3f [%.3f, %.3f] (%.0f%% CI, n=%d, MW p=%.3g)%s %s",
                              c ? "; " : "", ga->cell, cfg->arms[h->treatment].name, ab.ratio,
                              ab.ci_lo, ab.ci_hi, 100 * (1 - h->alpha), ab.n, mw.p, tt,
                              spill_verdict_name(vs[c]));
  }
  res->verdict = vs ? spill_stats_verdict_combine(vs, cells_n) : SPILL_VERDICT_INCONCLUSIVE;
  free(vs);
  int complete = R->n_rows == cells_n * cfg->n_arms * cfg->repeats;
  if (!complete) res->verdict = SPILL_VERDICT_INCONCLUSIVE;
  cJSON_AddStringToObject(hj, "verdict", spill_verdict_name(res->verdict));
  if (!complete) cJSON_AddStringToObject(hj, "note", "experiment incomplete: verdict withheld");
}

static cJSON *summary_json(report *R, spill_exp_report_result *res) {
  const spill_exp_config *cfg = R->cfg;
  cJSON *s = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "name", cfg->name);
  cJSON_AddNumberToObject(s, "rows", R->n_rows);
  cJSON_AddNumberToObject(s, "planned_rows", spill_exp_config_n_cells(cfg) * cfg->n_arms * cfg->repeats);
  cJSON_AddStringToObject(s, "quantiles", "type 7 (linear interpolation); iqr = q3 - q1");
  summary_cells(R, s);
  summary_comparisons(R, s);
  if (cfg->hyp.present) summary_hypothesis(R, s, res);
  return s;
}

/* "12.3 ± 0.4" (median ± IQR/2) with a precision that suits the value. */
static void fmt_cell(char *buf, size_t n, const spill_stats_summary *s, double scale) {
  double m = s->median * scale, h = s->iqr * scale / 2;
  if (isnan(m)) snprintf(buf, n, "-");
  else if (fabs(m) >= 100) snprintf(buf, n, "%.1f ± %.1f", m, h);
  else if (fabs(m) >= 1) snprintf(buf, n, "%.2f ± %.2f", m, h);
  else snprintf(buf, n, "%.4f ± %.4f", m, h);
}

typedef struct col {
  const char *metric, *header;
  double scale;
} col;

static const col k_cols[] = {
    {"decode_tok_per_s", "decode tok/s", 1},
    {"prefill_tok_per_s", "prefill tok/s", 1},
    {"decode_hit_rate", "decode hit %", 100},
    {"overall_hit_rate", "overall hit %", 100},
    {"bytes_read", "read MiB", 1.0 / 1048576},
    {"io_wait_s", "I/O wait s", 1},
    {"read_p99_ms", "read p99 ms", 1},
    {"peak_rss_bytes", "peak RSS MiB", 1.0 / 1048576},
    /* spill's expert preload before the run (knob preload); llama.cpp's model load */
    {"preload_s", "preload s", 1},
};
#define N_COLS (int)(sizeof k_cols / sizeof k_cols[0])

/* A bench workload's columns, per recorded phase (workload.bench). */
static const col k_bench_cols[] = {
    {"pp_tok_per_s_cold", "pp tok/s cold", 1},
    {"tg_tok_per_s_cold", "tg tok/s cold", 1},
    {"ttft_s_cold", "TTFT s cold", 1},
    {"decode_bytes_per_token_cold", "MiB read/tok cold", 1.0 / 1048576},
    {"decode_hit_rate_cold", "decode hit % cold", 100},
    {"peak_rss_bytes_cold", "peak RSS MiB cold", 1.0 / 1048576},
    {"pp_tok_per_s_warm", "pp tok/s warm", 1},
    {"tg_tok_per_s_warm", "tg tok/s warm", 1},
    {"ttft_s_warm", "TTFT s warm", 1},
    {"decode_bytes_per_token_warm", "MiB read/tok warm", 1.0 / 1048576},
    {"decode_hit_rate_warm", "decode hit % warm", 100},
    {"peak_rss_bytes_warm", "peak RSS MiB warm", 1.0 / 1048576},
};
#define N_BENCH_COLS (int)(sizeof k_bench_cols / sizeof k_bench_cols[0])
#define MAX_COLS (N_COLS > N_BENCH_COLS ? N_COLS : N_BENCH_COLS)

/* The table's columns for cfg's workload into cols (MAX_COLS); their count. */
static int table_cols(const spill_exp_config *cfg, col *cols) {
  if (!cfg->bench) {
    memcpy(cols, k_cols, sizeof k_cols);
    return N_COLS;
  }
  int n = 0;
  for (int c = 0; c < N_BENCH_COLS; c++)
    if (spill_exp_config_has_metric(cfg, spill_exp_metric_find(k_bench_cols[c].metric)))
      cols[n++] = k_bench_cols[c];
  return n;
}

static char *table_md(report *R) {
  const spill_exp_config *cfg = R->cfg;
  col cols[MAX_COLS];
  const int n_cols = table_cols(cfg, cols);
  size_t cap = 4096 + (size_t)R->n_groups * 768, off = 0;
  char *md = malloc(cap);
  if (!md) return NULL;
  off += (size_t)snprintf(md + off, cap - off, "| model |");
  for (int a = 0; a < cfg->n_axes; a++) off += (size_t)snprintf(md + off, cap - off, " %s |", cfg->axes[a].key);
  off += (size_t)snprintf(md + off, cap - off, " arm |%s runs |", R->has_nodes ? " node |" : "");
  for (int c = 0; c < n_cols; c++) off += (size_t)snprintf(md + off, cap - off, " %s |", cols[c].header);
  off += (size_t)snprintf(md + off, cap - off, "\n|---|");
  for (int a = 0; a < cfg->n_axes; a++) off += (size_t)snprintf(md + off, cap - off, "---:|");
  off += (size_t)snprintf(md + off, cap - off, "---|%s---:|", R->has_nodes ? "---|" : "");
  for (int c = 0; c < n_cols; c++) off += (size_t)snprintf(md + off, cap - off, "---:|");
  off += (size_t)snprintf(md + off, cap - off, "\n");
  char model[SPILL_EXP_PATH_MAX];
  if (cfg->model_recipe) snprintf(model, sizeof model, "%s%s%s", cfg->recipe_preset,
                                  cfg->recipe_ram ? "-" : "", cfg->recipe_ram ? "twin" : "");
  else {
    const char *b = strrchr(cfg->model_path, '/');
    snprintf(model, sizeof model, "%s", b && b[1] ? b + 1 : cfg->model_path);
  }
  double *v = malloc(sizeof(double) * (size_t)(R->n_rows + 1));
  for (int gi = 0; v && gi < R->n_groups; gi++) {
    const group *g = &R->groups[gi];
    const char *vals[SPILL_EXP_MAX_AXES];
    spill_exp_config_cell(cfg, g->cell_idx, vals);
    off += (size_t)snprintf(md + off, cap - off, "| %s |", model);
    for (int a = 0; a < cfg->n_axes; a++) off += (size_t)snprintf(md + off, cap - off, " %s |", vals[a]);
    off += (size_t)snprintf(md + off, cap - off, " %s |", cfg->arms[g->arm].name);
    if (R->has_nodes) off += (size_t)snprintf(md + off, cap - off, " %s |", g->node ? g->node : "-");
    char oom[48] = "";
    if (g->n_oom) snprintf(oom, sizeof oom, " + %d OOM-killed", g->n_oom);
    off += (size_t)snprintf(md + off, cap - off, " %d%s%s |", g->n, oom,
                            g->n + g->n_oom < cfg->repeats ? " (missing)" : "");
    for (int c = 0; c < n_cols; c++) {
      values(g, cols[c].metric, v);
      spill_stats_summary st;
      spill_stats_summarize(v, g->n, &st);
      char cell[64];
      fmt_cell(cell, sizeof cell, &st, cols[c].scale);
      off += (size_t)snprintf(md + off, cap - off, " %s |", cell);
    }
    off += (size_t)snprintf(md + off, cap - off, "\n");
  }
  free(v);
  off += (size_t)snprintf(md + off, cap - off, "\nValues: median ± IQR/2 over the runs of each cell.\n");
  if (cfg->bench && off < cap)
    off += (size_t)snprintf(md + off, cap - off,
                            "Bench workload: pp%d+tg%d on %d prompts; a run's figure is the median "
                            "over its prompts (cold: the first request, nothing cached; warm: the "
                            "same request again); TTFT = the prefill's time; MiB read/tok = the "
                            "decode's reads per generated token.\n",
                            cfg->bench_pp, cfg->bench_tg, cfg->bench_n_prompts);
  int old_latency = 0;
  for (int i = 0; i < R->n_rows; i++) /* an OOM-killed run has no latency to be stale */
    old_latency |= !spill_exp_row_oom_killed(&R->parsed.rows[i]) && !latency_is_run_wide(&R->rows[i]);
  if (old_latency)
    off += (size_t)snprintf(md + off, cap - off,
             "read p99 \"-\": these rows hold the last forward call's read latency, not the "
             "run's (engines before the run-wide window); re-run to measure it.\n");
  if (off < cap) {
    int missing = 0, oom = 0;
    for (int gi = 0; gi < R->n_groups; gi++) {
      missing += R->groups[gi].n + R->groups[gi].n_oom < cfg->repeats;
      oom += R->groups[gi].n_oom;
    }
    if (oom && off < cap)
      off += (size_t)snprintf(md + off, cap - off,
                              "OOM-killed: the machine profile's OOM killer ended %d run%s (\"+ N "
                              "OOM-killed\"): the machine could not hold that cell; those runs have "
                              "no metrics, and the values are over the runs that finished (\"-\" "
                              "when none did).\n", oom, oom == 1 ? "" : "s");
    if (missing && off < cap)
      off += (size_t)snprintf(md + off, cap - off,
                              "Missing: %d of %d (cell, arm) groups have fewer than %d runs (marked "
                              "\"(missing)\"): not run yet, interrupted, or a failed task.\n",
                              missing, R->n_groups, cfg->repeats);
    if (R->has_nodes && off < cap)
      snprintf(md + off, cap - off, "Node: the Slurm node that ran the cell (all arms of a cell run on one node).\n");
  }
  return md;
}

static char *table_csv(report *R) {
  const spill_exp_config *cfg = R->cfg;
  int nm;
  const spill_exp_metric *mt = spill_exp_metrics(&nm);
  size_t cap = 8192 + (size_t)R->n_groups * (size_t)nm * 96, off = 0;
  char *csv = malloc(cap);
  if (!csv) return NULL;
  off += (size_t)snprintf(csv + off, cap - off, "cell");
  for (int a = 0; a < cfg->n_axes; a++) off += (size_t)snprintf(csv + off, cap - off, ",%s", cfg->axes[a].key);
  off += (size_t)snprintf(csv + off, cap - off, ",arm,runs");
  for (int i = 0; i < nm; i++) {
    if (!spill_exp_config_has_metric(cfg, i)) continue; /* the other workload's */
    char u[24] = "";
    if (mt[i].unit[0]) snprintf(u, sizeof u, " (%s)", mt[i].unit);
    if (mt[i].counter) off += (size_t)snprintf(csv + off, cap - off, ",%s%s median", mt[i].name, u);
    else
      off += (size_t)snprintf(csv + off, cap - off, ",%s%s median,%s%s min,%s%s max,%s%s iqr",
                              mt[i].name, u, mt[i].name, u, mt[i].name, u, mt[i].name, u);
  }
  off += (size_t)snprintf(csv + off, cap - off, "\n");
  double *v = malloc(sizeof(double) * (size_t)(R->n_rows + 1));
  for (int gi = 0; v && gi < R->n_groups; gi++) {
    const group *g = &R->groups[gi];
    const char *vals[SPILL_EXP_MAX_AXES];
    spill_exp_config_cell(cfg, g->cell_idx, vals);
    off += (size_t)snprintf(csv + off, cap - off, "\"%s\"", g->cell);
    for (int a = 0; a < cfg->n_axes; a++) off += (size_t)snprintf(csv + off, cap - off, ",%s", vals[a]);
    off += (size_t)snprintf(csv + off, cap - off, ",%s,%d", cfg->arms[g->arm].name, g->n);
    for (int i = 0; i < nm; i++) {
      if (!spill_exp_config_has_metric(cfg, i)) continue;
      values(g, mt[i].name, v);
      spill_stats_summary st;
      spill_stats_summarize(v, g->n, &st);
      if (mt[i].counter) off += (size_t)snprintf(csv + off, cap - off, ",%.10g", st.median);
      else
        off += (size_t)snprintf(csv + off, cap - off, ",%.10g,%.10g,%.10g,%.10g", st.median,
                                st.min, st.max, st.iqr);
    }
    off += (size_t)snprintf(csv + off, cap - off, "\n");
  }
  free(v);
  return csv;
}

/* ---- plots -------------------------------------------------------------- */

static int write_text(const char *path, const char *text, spill_err *e) {
  return spill_write_file_atomic(path, text, strlen(text), e);
}

/* Runs gnuplot on script (in dir); its messages go to dir/gnuplot.log. */
static int gnuplot(const char *dir, const char *script, spill_err *e) {
  pid_t pid = fork();
  if (pid < 0) return spill_err_set(e, SPILL_E_IO, "fork gnuplot failed");
  if (pid == 0) {
    if (chdir(dir) < 0) _exit(127);
    int fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execlp("gnuplot", "gnuplot", script, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return spill_err_set(e, SPILL_E_IO, "gnuplot %s/%s failed (status %d; see %s/gnuplot.log)", dir,
                         script, WIFEXITED(status) ? WEXITSTATUS(status) : -1, dir);
  return SPILL_OK;
}

static void add_plot(spill_exp_report_result *res, const char *dir, const char *base) {
  size_t off = strlen(res->plots);
  snprintf(res->plots + off, sizeof res->plots - off, "%s%s/plots/%s.png %s/plots/%s.svg",
           off ? " " : "", dir, base, dir, base);
}

/* Terminal preamble: the same script is run for PNG and SVG. */
static void both_terms(FILE *f, const char *base, const char *body) {
  char name[256], q[1024];
  snprintf(name, sizeof name, "%s.png", base);
  spill_gp_path(q, sizeof q, name);
  fprintf(f, "set terminal pngcairo size 1000,600 noenhanced\nset output %s\n%s\n", q, body);
  snprintf(name, sizeof name, "%s.svg", base);
  spill_gp_path(q, sizeof q, name);
  fprintf(f, "set terminal svg size 1000,600 noenhanced\nset output %s\nreplot\n", q);
}

/* The cliff plot's vertical lines, in bytes (0: not drawn). A budget sweep:
 * the RAM the runs saw (emulated when set, else env.json's usable RAM, not
 * the RAM of whoever regenerates the report) and the engine's default budget
 * on that RAM for the runs' ctx and threads (the plan spill_engine_open makes
 * with no budget given, for the first engine arm's knobs). An emulate_ram
 * sweep: the container's size, where the model fits. */
static void cliff_lines(report *R, const char *dir, int ram_axis, double *ram_out,
                        double *dflt_out, double *model_out) {
  const spill_exp_config *cfg = R->cfg;
  double ram = R->n_rows && !ram_axis ? (cfg->emulate_ram ? (double)cfg->emulate_ram
                                         : cfg->machine_ram ? (double)cfg->machine_ram
                                                            : (double)spill_usable_ram())
                                      : 0;
  char envp[SPILL_PATH_MAX], *env = NULL, model_dir[SPILL_PATH_MAX] = "";
  snprintf(envp, sizeof envp, "%s/env.json", dir);
  spill_err ig = {0};
  if (spill_read_file(envp, 1 << 20, &env, NULL, &ig) == SPILL_OK) {
    cJSON *j = spill_json_parse_quiet(env);
    const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, "model") : NULL;
    const cJSON *d = m ? cJSON_GetObjectItemCaseSensitive(m, "dir") : NULL;
    if (cJSON_IsString(d)) snprintf(model_dir, sizeof model_dir, "%s", d->valuestring);
    const cJSON *u = j ? cJSON_GetObjectItemCaseSensitive(j, "usable_ram_bytes") : NULL;
    if (R->n_rows && !cfg->emulate_ram && !cfg->machine_ram && !ram_axis && cJSON_IsNumber(u) &&
        u->valuedouble > 0)
      ram = u->valuedouble;
    cJSON_Delete(j);
    free(env);
  }
  *model_out = *dflt_out = 0;
  spill_info info;
  if (model_dir[0] && ram_axis && spill_info_read(model_dir, &info, &ig) == SPILL_OK)
    *model_out = (double)info.container_bytes;
  int arm = 0;
  while (arm < cfg->n_arms && cfg->arms[arm].peer.name[0]) arm++;
  spill_config sc;
  spill_plan plan;
  if (model_dir[0] && !ram_axis && arm < cfg->n_arms &&
      spill_exp_config_engine(cfg, 0, arm, &sc, &ig) == SPILL_OK &&
      spill_plan_model(model_dir, sc.ctx, sc.threads, 0,
                       sc.usable_ram ? sc.usable_ram : (uint64_t)ram, &plan, &ig) == SPILL_OK)
    *dflt_out = (double)plan.budget;
  *ram_out = ram;
}

/* The cliff's other two signs from cliff.dat (columns 6 and 7): GiB read and
 * the engine's major page faults per token against the same x axis: reads
 * fall as the cache grows, faults stay ~0 until the machine, not the
 * engine, runs out of memory. */
static int plot_cliff_io(const spill_exp_config *cfg, const char *dir, const char *pdir,
                         char (*titles)[128], const int *is_peer, int n_series, int ram_axis,
                         spill_exp_report_result *res, spill_err *e) {
  char body[16384], tq[1024], tt[512];
  snprintf(tt, sizeof tt, "%s: bytes read and major page faults vs %s", cfg->name,
           ram_axis ? "emulated RAM" : "RAM budget");
  int o = snprintf(body, sizeof body,
                   "set title %s\n"
                   "set xlabel '%s (GiB, log scale)'\nset logscale x\n"
                   "set ylabel 'GiB read per token (median of runs)'\n"
                   "set y2label 'major page faults per token (median of runs)'\nset ytics nomirror\n"
                   "set y2tics\nset key outside bottom center horizontal\nset grid\n"
                   "set yrange [0:*]\nset y2range [0:*]\nplot ",
                   spill_gp_label(tq, sizeof tq, tt), ram_axis ? "emulated machine RAM" : "RAM budget");
  int drawn = 0;
  for (int s = 0; s < n_series && o < (int)sizeof body; s++) {
    if (is_peer[s]) continue;
    snprintf(tt, sizeof tt, "%s GiB read/token", titles[s]);
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "%s'cliff.dat' index %d using 1:6 with linespoints lw 2 title %s", drawn ? ", " : "",
                  s, spill_gp_label(tq, sizeof tq, tt));
    snprintf(tt, sizeof tt, "%s major faults/token", titles[s]);
    if (o < (int)sizeof body)
      o += snprintf(body + o, sizeof body - (size_t)o,
                    ", 'cliff.dat' index %d using 1:7 axes x1y2 with linespoints dt 2 title %s", s,
                    spill_gp_label(tq, sizeof tq, tt));
    drawn = 1;
  }
  if (!drawn) return SPILL_OK; /* only peers: no engine counters to draw */
  char gp[SPILL_PATH_MAX];
  snprintf(gp, sizeof gp, "%s/cliff-io.gp", pdir);
  FILE *f = spill_exp_fopen_write(gp, e);
  if (!f) return SPILL_E_IO;
  both_terms(f, "cliff-io", body);
  fclose(f);
  SPILL_TRY(gnuplot(pdir, "cliff-io.gp", e));
  add_plot(res, dir, "cliff-io");
  return SPILL_OK;
}

/* One line of cliff.dat: x (budget or emulated RAM, GiB), decode tok/s
 * median/min/max, decode hit %, GiB read and major faults per token of the
 * run (prefill + decode: the cliff's two other signs); peers have no hit
 * rate, reads or faults of their own here. v: scratch of g->n doubles. */
static void cliff_point(const spill_exp_config *cfg, const group *g, int ram_axis, int peer,
                        double *v, FILE *f) {
  spill_stats_summary tok, hit, bud, rd, mf;
  values(g, spill_exp_config_primary_metric(cfg), v);
  spill_stats_summarize(v, g->n, &tok);
  values(g, spill_exp_config_hit_metric(cfg), v);
  spill_stats_summarize(v, g->n, &hit);
  for (int i = 0; i < g->n; i++)
    v[i] = ram_axis ? machine_num(g->rows[i], "emulate_ram_bytes") : engine_num(g->rows[i], "budget_bytes");
  spill_stats_summarize(v, g->n, &bud);
  for (int i = 0; i < g->n; i++)
    v[i] = metric_of(g->rows[i], "bytes_read") / run_tokens(g->rows[i]) / 1073741824.0;
  spill_stats_summarize(v, g->n, &rd);
  for (int i = 0; i < g->n; i++) v[i] = metric_of(g->rows[i], "major_faults") / run_tokens(g->rows[i]);
  spill_stats_summarize(v, g->n, &mf);
  fprintf(f, "%.6f %.6f %.6f %.6f %.6f %.6f %.3f\n", bud.median / 1073741824.0, tok.median, tok.min,
          tok.max, peer ? NAN : hit.median * 100, peer ? NAN : rd.median, peer ? NAN : mf.median);
}

static int plot_cliff(report *R, const char *dir, const char *pdir, spill_exp_report_result *res,
                      spill_err *e) {
  const spill_exp_config *cfg = R->cfg;
  char dat[SPILL_PATH_MAX];
  snprintf(dat, sizeof dat, "%s/cliff.dat", pdir);
  FILE *f = spill_exp_fopen_write(dat, e);
  if (!f) return SPILL_E_IO;
  /* One data block per (other axes, arm) series, x = budget GiB (or the
   * emulated RAM, for an emulate_ram sweep); peers have no hit rate. */
  /* x: the budget axis (an emulate_ram sweep: that axis). Machine axes
   * (wired, swap) sort before budget, so x is not always axes[0]: cells
   * are numbered with axes[0] slowest, x's stride is the product of the
   * sizes of the axes after it, and every other combination is a series. */
  int xa = 0;
  for (int k = 0; k < cfg->n_axes; k++)
    if (!strcmp(cfg->axes[k].key, "budget") || !strcmp(cfg->axes[k].key, SPILL_EXP_AXIS_EMULATE_RAM)) {
      xa = k;
      break;
    }
  const int ram_axis = !strcmp(cfg->axes[xa].key, SPILL_EXP_AXIS_EMULATE_RAM);
  double *v = malloc(sizeof(double) * (size_t)(R->n_rows + 1));
  int n_series = 0;
  char titles[64][128];
  int is_peer[64];
  int cells = spill_exp_config_n_cells(cfg), nx = cfg->axes[xa].n, sx = 1;
  for (int k = xa + 1; k < cfg->n_axes; k++) sx *= cfg->axes[k].n;
  for (int other = 0; other < cells && n_series < 64; other++) {
    if ((other / sx) % nx) continue; /* a series starts where x is at its first value */
    for (int a = 0; a < cfg->n_arms && n_series < 64; a++) {
      const char *vals[SPILL_EXP_MAX_AXES];
      spill_exp_config_cell(cfg, other, vals);
      char t[128];
      int o = snprintf(t, sizeof t, "%s", cfg->arms[a].name);
      for (int x = 0; x < cfg->n_axes; x++)
        if (x != xa) o += snprintf(t + o, sizeof t - (size_t)o, " %s=%s", cfg->axes[x].key, vals[x]);
      snprintf(titles[n_series], sizeof titles[n_series], "%s", t);
      is_peer[n_series] = cfg->arms[a].peer.name[0] != 0;
      fprintf(f, "# %s\n", t);
      for (int b = 0; b < nx; b++) {
        const group *g = find_group(R, other + b * sx, a);
        if (!g || g->n == 0) continue;
        cliff_point(cfg, g, ram_axis, cfg->arms[a].peer.name[0] != 0, v, f);
      }
      fprintf(f, "\n\n");
      n_series++;
    }
  }
  fclose(f);
  double ram, dflt, model_bytes;
  cliff_lines(R, dir, ram_axis, &ram, &dflt, &model_bytes);
  char body[16384], tq[1024], tt[512];
  snprintf(tt, sizeof tt, "%s: decode speed and hit rate vs %s", cfg->name,
           ram_axis ? "emulated RAM" : "RAM budget");
  /* the y axes name their metrics (a bench workload's: tg tok/s and hit rate of its first phase) */
  int o = snprintf(body, sizeof body,
                   "set title %s\n"
                   "set xlabel '%s (GiB, log scale)'\nset logscale x\n"
                   "set ylabel '%s (median, min-max bars)'\n"
                   "set y2label '%s (%%)'\nset y2range [0:100]\nset ytics nomirror\n"
                   "set y2tics\nset key outside bottom center horizontal\nset grid\n"
                   "set yrange [0:*]\n",
                   spill_gp_label(tq, sizeof tq, tt), ram_axis ? "emulated machine RAM" : "RAM budget",
                   cfg->bench ? spill_exp_config_primary_metric(cfg) : "decode tok/s",
                   cfg->bench ? spill_exp_config_hit_metric(cfg) : "decode demand hit rate");
  /* sizes in GiB with %.3g: a nano model's default budget is 0.0123 GiB, not 0.01 */
  const double G = 1073741824.0;
  if (model_bytes > 0)
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "set arrow 1 from %.6f, graph 0 to %.6f, graph 1 nohead dt 2 lc rgb 'red'\n"
                  "set label 1 'model %.3g GiB' at %.6f, graph 0.95 right offset -0.5,0 tc rgb 'red'\n",
                  model_bytes / G, model_bytes / G, model_bytes / G, model_bytes / G);
  if (ram > 0)
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "set xrange [*:%.6f]\n"
                  "set arrow 1 from %.6f, graph 0 to %.6f, graph 1 nohead dt 2 lc rgb 'red'\n"
                  "set label 1 '%s RAM %.3g GiB' at %.6f, graph 0.95 right offset -0.5,0 tc rgb 'red'\n",
                  ram / G * 1.5, ram / G, ram / G,
                  cfg->emulate_ram ? "emulated" : cfg->machine_ram ? "machine profile" : "machine",
                  ram / G, ram / G);
  if (dflt > 0)
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "set arrow 2 from %.6f, graph 0 to %.6f, graph 1 nohead dt 3 lc rgb 'dark-green'\n"
                  "set label 2 'default budget %.3g GiB' at %.6f, graph 0.88 left offset 0.5,0 tc rgb 'dark-green'\n",
                  dflt / G, dflt / G, dflt / G, dflt / G);
  o += snprintf(body + o, sizeof body - (size_t)o, "plot ");
  for (int s = 0; s < n_series && o < (int)sizeof body; s++) {
    snprintf(tt, sizeof tt, "%s tok/s", titles[s]);
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "%s'cliff.dat' index %d using 1:2:3:4 with yerrorlines lw 2 title %s",
                  s ? ", " : "", s, spill_gp_label(tq, sizeof tq, tt));
    snprintf(tt, sizeof tt, "%s decode hit %%", titles[s]);
    if (!is_peer[s] && o < (int)sizeof body)
      o += snprintf(body + o, sizeof body - (size_t)o,
                    ", 'cliff.dat' index %d using 1:5 axes x1y2 with linespoints dt 2 title %s", s,
                    spill_gp_label(tq, sizeof tq, tt));
  }
  char gp[SPILL_PATH_MAX];
  snprintf(gp, sizeof gp, "%s/cliff.gp", pdir);
  f = spill_exp_fopen_write(gp, e);
  free(v);
  if (!f) return SPILL_E_IO;
  both_terms(f, "cliff", body);
  fclose(f);
  SPILL_TRY(gnuplot(pdir, "cliff.gp", e));
  add_plot(res, dir, "cliff");
  return plot_cliff_io(cfg, dir, pdir, titles, is_peer, n_series, ram_axis, res, e);
}

/* The hypothesis threshold of a comparison's point ("NaN": none). */
static const char *ab_threshold(const spill_exp_config *cfg, const char *cell, const char *trt) {
  static char buf[32];
  const spill_exp_hypothesis *h = &cfg->hyp;
  if (!h->present || !h->n_thresholds || strcmp(trt, cfg->arms[h->treatment].name)) return "NaN";
  for (int c = 0; c < spill_exp_config_n_cells(cfg); c++) {
    char key[200];
    spill_exp_cell_key(cfg, c, key, sizeof key);
    if (!strcmp(key, cell)) {
      snprintf(buf, sizeof buf, "%.6f", spill_exp_config_threshold(cfg, c));
      return buf;
    }
  }
  return "NaN";
}

/* A label column of a gnuplot data file, inside "": a '"' or a line break
 * would end the column or the row, so they and other control bytes are
 * written as ' and '?' (the label is shown, never run). */
static void data_label(FILE *f, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    fputc(*p == '"' ? '\'' : *p < 0x20 || *p == 0x7f ? '?' : *p, f);
}

static int plot_ab(report *R, const char *dir, const char *pdir, cJSON *summary,
                   spill_exp_report_result *res, spill_err *e) {
  const spill_exp_config *cfg = R->cfg;
  const char *metric = cfg->hyp.present ? cfg->hyp.metric : spill_exp_config_primary_metric(cfg);
  char dat[SPILL_PATH_MAX];
  snprintf(dat, sizeof dat, "%s/ab.dat", pdir);
  FILE *f = spill_exp_fopen_write(dat, e);
  if (!f) return SPILL_E_IO;
  const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(summary, "comparisons");
  int i = 0;
  for (const cJSON *x = cmp ? cmp->child : NULL; x; x = x->next) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(x, "metric");
    if (!cJSON_IsString(m) || strcmp(m->valuestring, metric)) continue;
    double r = cJSON_GetObjectItemCaseSensitive(x, "ratio")->valuedouble;
    double lo = cJSON_GetObjectItemCaseSensitive(x, "ci_lo")->valuedouble;
    double hi = cJSON_GetObjectItemCaseSensitive(x, "ci_hi")->valuedouble;
    const char *cell = cJSON_GetObjectItemCaseSensitive(x, "cell")->valuestring;
    const char *trt = cJSON_GetObjectItemCaseSensitive(x, "treatment")->valuestring;
    fprintf(f, "%d %.6f %.6f %.6f \"", i++, isnan(r) ? 1.0 : r, isnan(lo) ? 1.0 : lo,
            isnan(hi) ? 1.0 : hi);
    data_label(f, cell);
    fputc(' ', f);
    data_label(f, trt);
    fprintf(f, "\" %s\n", ab_threshold(cfg, cell, trt));
  }
  fclose(f);
  if (i == 0) return SPILL_OK;
  char body[4096], tt[512], tq[1024];
  snprintf(tt, sizeof tt, "%s: %s ratio treatment/control, median with %.0f%% bootstrap CI",
           cfg->name, metric, 100 * (1 - (cfg->hyp.present ? cfg->hyp.alpha : 0.05)));
  int o = snprintf(body, sizeof body,
                   "set title %s\n"
                   "set ylabel 'ratio B/A'\nset xrange [-0.5:%d.5]\nset grid ytics\n"
                   "set xtics rotate by 20 right\nset key top left\n"
                   "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb 'gray'\n",
                   spill_gp_label(tq, sizeof tq, tt), i - 1);
  if (cfg->hyp.present && !cfg->hyp.n_thresholds) {
    double t = cfg->hyp.direction > 0 ? 1 + cfg->hyp.min_effect : 1 - cfg->hyp.min_effect;
    o += snprintf(body + o, sizeof body - (size_t)o,
                  "set arrow 2 from graph 0, first %.6f to graph 1, first %.6f nohead dt 2 lc rgb 'red'\n"
                  "set label 2 'hypothesis threshold %.3f' at graph 0.99, first %.6f right offset 0,0.7 tc rgb 'red'\n",
                  t, t, t, t);
  }
  o += snprintf(body + o, sizeof body - (size_t)o,
                "plot 'ab.dat' using 1:2:3:4:xtic(5) with yerrorbars pt 7 ps 1.5 lw 2 title 'ratio [CI]'");
  if (cfg->hyp.present && cfg->hyp.n_thresholds)
    snprintf(body + o, sizeof body - (size_t)o,
             ", 'ab.dat' using 1:6 with points pt 2 ps 2 lc rgb 'red' title 'cell threshold'");
  char gp[SPILL_PATH_MAX];
  snprintf(gp, sizeof gp, "%s/ab.gp", pdir);
  f = spill_exp_fopen_write(gp, e);
  if (!f) return SPILL_E_IO;
  both_terms(f, "ab", body);
  fclose(f);
  SPILL_TRY(gnuplot(pdir, "ab.gp", e));
  add_plot(res, dir, "ab");
  return SPILL_OK;
}

/* Per-token timeline of the first run of each arm in the first cell. */
static int plot_timeline(report *R, const char *dir, const char *pdir, spill_exp_report_result *res,
                         spill_err *e) {
  const spill_exp_config *cfg = R->cfg;
  for (int a = 0; a < cfg->n_arms; a++) {
    const group *g = find_group(R, 0, a);
    if (!g || g->n == 0) continue;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(g->rows[0]->j, "files");
    const cJSON *tk = files ? cJSON_GetObjectItemCaseSensitive(files, "tokens") : NULL;
    if (!cJSON_IsString(tk)) continue;
    char src[SPILL_PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", dir, tk->valuestring);
    char **lines;
    int n;
    if (spill_exp_read_lines(src, 0, &lines, &n, e) < 0) continue;
    if (n == 0) {
      /* no per-token file (published copies keep only runs.jsonl): leave the
       * timeline plot as it was generated rather than draw an empty one */
      spill_exp_lines_free(lines, n);
      continue;
    }
    char dat[SPILL_PATH_MAX];
    snprintf(dat, sizeof dat, "%s/timeline-%s.dat", pdir, cfg->arms[a].name);
    FILE *f = spill_exp_fopen_write(dat, e);
    if (!f) {
      spill_exp_lines_free(lines, n);
      return SPILL_E_IO;
    }
    for (int i = 0; i < n; i++) {
      cJSON *j = spill_json_parse_quiet(lines[i]);
      if (!j) continue;
      /* rows are untrusted input: a missing or non-numeric field reads as 0 */
      double wall = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "wall_s")) * 1000;
      double io = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "io_wait_s")) * 1000;
      double hits = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "hits"));
      double miss = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "misses"));
      if (isnan(wall)) wall = 0;
      if (isnan(io)) io = 0;
      if (isnan(hits)) hits = 0;
      if (isnan(miss)) miss = 0;
      fprintf(f, "%d %.4f %.4f %.0f %.0f\n", i, wall - io > 0 ? wall - io : 0, io, hits, miss);
      cJSON_Delete(j);
    }
    fclose(f);
    spill_exp_lines_free(lines, n);
    char base[96], body[4096], tt[512], tq[1024], dn[128], dq[256];
    snprintf(base, sizeof base, "timeline-%s", cfg->arms[a].name);
    snprintf(tt, sizeof tt, "%s: per-token time, %s (%s, repeat %d)", cfg->name,
             cfg->arms[a].name, g->cell, g->rows[0]->repeat);
    snprintf(dn, sizeof dn, "%s.dat", base);
    spill_gp_path(dq, sizeof dq, dn);
    snprintf(body, sizeof body,
             "set title %s\n"
             "set style data histograms\nset style histogram rowstacked\n"
             "set style fill solid 0.8 border -1\nset boxwidth 0.8\n"
             "set xlabel 'decoded token'\nset ylabel 'ms'\nset y2label 'experts'\n"
             "set ytics nomirror\nset y2tics\nset key outside bottom center horizontal\n"
             "set xtics 8\nset xrange [-1:*]\n"
             "plot %s using 2 title 'compute (wall - I/O wait)' lc rgb '#4477aa', "
             "'' using 3 title 'I/O wait' lc rgb '#cc6677', "
             "'' using 0:4 axes x1y2 with lines lw 2 lc rgb '#228833' title 'hits', "
             "'' using 0:5 axes x1y2 with lines lw 2 lc rgb '#aa3377' title 'misses'",
             spill_gp_label(tq, sizeof tq, tt), dq);
    char gp[SPILL_PATH_MAX];
    snprintf(gp, sizeof gp, "%s/%s.gp", pdir, base);
    f = spill_exp_fopen_write(gp, e);
    if (!f) return SPILL_E_IO;
    both_terms(f, base, body);
    fclose(f);
    char script[128];
    snprintf(script, sizeof script, "%s.gp", base);
    SPILL_TRY(gnuplot(pdir, script, e));
    add_plot(res, dir, base);
  }
  return SPILL_OK;
}

int spill_exp_report(const char *dir, spill_exp_report_result *res, spill_err *e) {
  memset(res, 0, sizeof *res);
  SPILL_TRY(spill_exp_dir_check(dir, e)); /* so no path below is cut */
  report R;
  int rc = report_load(dir, &R, e);
  if (rc < 0) {
    report_free(&R);
    return rc;
  }
  res->rows = R.n_rows;
  res->cells = R.n_groups;
  char p[SPILL_PATH_MAX];
  cJSON *s = summary_json(&R, res);
  char *text = cJSON_Print(s);
  snprintf(p, sizeof p, "%s/summary.json", dir);
  rc = text ? write_text(p, text, e) : spill_err_set(e, SPILL_E_NOMEM, "summary: no memory");
  free(text);
  char *md = table_md(&R);
  if (md) snprintf(res->table_md, sizeof res->table_md, "%s", md);
  if (rc == SPILL_OK && R.cfg->out.table_md && md) {
    snprintf(p, sizeof p, "%s/table.md", dir);
    rc = write_text(p, md, e);
  }
  free(md);
  if (rc == SPILL_OK && R.cfg->out.table_csv) {
    char *csv = table_csv(&R);
    snprintf(p, sizeof p, "%s/table.csv", dir);
    rc = csv ? write_text(p, csv, e) : spill_err_set(e, SPILL_E_NOMEM, "csv: no memory");
    free(csv);
  }
  char pdir[SPILL_PATH_MAX];
  snprintf(pdir, sizeof pdir, "%s/plots", dir);
  if (rc == SPILL_OK && R.n_rows > 0 &&
      (R.cfg->out.plot_cliff || R.cfg->out.plot_ab || R.cfg->out.plot_timeline)) {
    rc = spill_exp_mkdirs(pdir, e);
    if (rc == SPILL_OK && R.cfg->out.plot_cliff) rc = plot_cliff(&R, dir, pdir, res, e);
    if (rc == SPILL_OK && R.cfg->out.plot_ab) rc = plot_ab(&R, dir, pdir, s, res, e);
    if (rc == SPILL_OK && R.cfg->out.plot_timeline) rc = plot_timeline(&R, dir, pdir, res, e);
  }
  cJSON_Delete(s);
  report_free(&R);
  return rc;
}

int spill_exp_report_summary(const spill_exp_config *cfg, char **lines, int n, char **json_out,
                             spill_err *e) {
  *json_out = NULL;
  report R;
  memset(&R, 0, sizeof R);
  int rc = report_build(&R, cfg, "runs.jsonl", lines, n, e);
  if (rc == SPILL_OK) {
    spill_exp_report_result *res = calloc(1, sizeof *res);
    cJSON *s = res ? summary_json(&R, res) : NULL;
    *json_out = s ? cJSON_Print(s) : NULL;
    cJSON_Delete(s);
    /* the tables are derived from the same groups: build them too */
    free(table_md(&R));
    free(table_csv(&R));
    free(res);
    if (!*json_out) rc = spill_err_set(e, SPILL_E_NOMEM, "summary: no memory");
  }
  R.cfg = NULL; /* not ours */
  report_free(&R);
  return rc;
}

int spill_exp_compare(const char *dir_a, const char *dir_b, char **md_out, spill_err *e) {
  *md_out = NULL;
  report A, B;
  int rc = report_load(dir_a, &A, e);
  if (rc == SPILL_OK) rc = report_load(dir_b, &B, e);
  else memset(&B, 0, sizeof B);
  if (rc < 0) {
    report_free(&A);
    report_free(&B);
    return rc;
  }
  col cols[MAX_COLS];
  const int n_cols = table_cols(A.cfg, cols);
  size_t cap = 4096 + (size_t)A.n_groups * (size_t)n_cols * 160, off = 0;
  char *md = malloc(cap);
  if (!md) {
    report_free(&A);
    report_free(&B);
    return spill_err_set(e, SPILL_E_NOMEM, "compare: no memory");
  }
  off += (size_t)snprintf(md + off, cap - off,
                          "A: %s\nB: %s\n\nRatio B/A of medians, [95%% CI] from an unpaired "
                          "bootstrap (%d resamples); cells matched by sweep values and arm.\n\n"
                          "| cell | arm | runs A | runs B |",
                          dir_a, dir_b, BOOT_RESAMPLES);
  for (int c = 0; c < n_cols; c++) off += (size_t)snprintf(md + off, cap - off, " %s |", cols[c].header);
  off += (size_t)snprintf(md + off, cap - off, "\n|---|---|---:|---:|");
  for (int c = 0; c < n_cols; c++) off += (size_t)snprintf(md + off, cap - off, "---:|");
  off += (size_t)snprintf(md + off, cap - off, "\n");
  int matched = 0;
  for (int i = 0; i < A.n_groups; i++) {
    const group *ga = &A.groups[i];
    const group *gb = NULL;
    for (int j = 0; j < B.n_groups; j++)
      if (!strcmp(B.groups[j].cell, ga->cell) &&
          !strcmp(B.cfg->arms[B.groups[j].arm].name, A.cfg->arms[ga->arm].name))
        gb = &B.groups[j];
    if (!gb || ga->n == 0 || gb->n == 0) continue;
    matched++;
    off += (size_t)snprintf(md + off, cap - off, "| %s | %s | %d | %d |", ga->cell,
                            A.cfg->arms[ga->arm].name, ga->n, gb->n);
    double *va = malloc(sizeof(double) * (size_t)ga->n), *vb = malloc(sizeof(double) * (size_t)gb->n);
    for (int c = 0; va && vb && c < n_cols; c++) {
      values(ga, cols[c].metric, va);
      values(gb, cols[c].metric, vb);
      spill_stats_ab ab;
      if (spill_stats_ab_unpaired(va, ga->n, vb, gb->n, BOOT_RESAMPLES, 0.05, BOOT_SEED, &ab) == 0)
        off += (size_t)snprintf(md + off, cap - off, " %.3f [%.3f, %.3f] |", ab.ratio, ab.ci_lo, ab.ci_hi);
      else if (!isnan(ab.ratio))
        off += (size_t)snprintf(md + off, cap - off, " %.3f |", ab.ratio);
      else
        off += (size_t)snprintf(md + off, cap - off, " - |");
    }
    free(va), free(vb);
    off += (size_t)snprintf(md + off, cap - off, "\n");
  }
  if (!matched) snprintf(md + off, cap - off, "\n(no cells in common)\n");
  *md_out = md;
  report_free(&A);
  report_free(&B);
  return SPILL_OK;
}
