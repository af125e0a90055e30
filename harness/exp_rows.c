/* harness/exp_rows.c: checks and indexes runs.jsonl rows against the plan
 * (exp_rows.h).
 *
 * Keys are looked up in an open-addressing hash of the plan's keys, and
 * duplicates found through a per-plan-entry "seen on line" array, so a file
 * of n rows costs O(n + plan) whatever its content (the fuzzer feeds it
 * arbitrary bytes). The run plan (spill_exp_plan_runs, declared in
 * exp_rows.h) is defined here too, so this file and the report
 * link without the engine.
 */
#include "harness/exp_rows.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/stats.h"

/* The plan (exp_runner.h declares it): lives here so the rows reader links
 * without the runner's engine dependencies (fuzz/build.sh). */
int spill_exp_plan_runs(const spill_exp_config *cfg, spill_exp_run **runs_out, int *n_out,
                        spill_err *e) {
  int cells = spill_exp_config_n_cells(cfg), na = cfg->n_arms, nr = cfg->repeats;
  int total = cells * na * nr;
  spill_exp_run *runs = calloc((size_t)total, sizeof *runs);
  int *seq_arm = malloc((size_t)(na * nr) * sizeof *seq_arm);
  if (!runs || !seq_arm) {
    free(runs), free(seq_arm);
    return spill_err_set(e, SPILL_E_NOMEM, "plan: no memory");
  }
  int n = 0;
  for (int c = 0; c < cells; c++) {
    int k = 0;
    switch (cfg->order) {
      case SPILL_EXP_ORDER_BLOCKED:
        for (int a = 0; a < na; a++)
          for (int r = 0; r < nr; r++) seq_arm[k++] = a;
        break;
      case SPILL_EXP_ORDER_ABBA:
        for (int r = 0; r < nr; r++)
          for (int i = 0; i < na; i++) seq_arm[k++] = (r & 1) ? na - 1 - i : i;
        break;
      case SPILL_EXP_ORDER_RANDOM: {
        for (int r = 0; r < nr; r++)
          for (int a = 0; a < na; a++) seq_arm[k++] = a;
        spill_stats_rng rng;
        spill_stats_rng_seed(&rng, cfg->order_seed * 1000003ull + (uint64_t)c);
        for (int i = k - 1; i > 0; i--) {
          int j = (int)spill_stats_rng_below(&rng, (uint32_t)(i + 1));
          int t = seq_arm[i];
          seq_arm[i] = seq_arm[j];
          seq_arm[j] = t;
        }
        break;
      }
      default:
        for (int r = 0; r < nr; r++)
          for (int a = 0; a < na; a++) seq_arm[k++] = a;
    }
    /* Repeat indexes follow time order within an arm, so pairs (A r, B r)
     * are close in time. */
    int next_rep[SPILL_EXP_MAX_ARMS] = {0};
    char ck[200];
    spill_exp_cell_key(cfg, c, ck, sizeof ck);
    for (int i = 0; i < k; i++) {
      spill_exp_run *r = &runs[n++];
      r->cell = c;
      r->arm = seq_arm[i];
      r->repeat = next_rep[r->arm]++;
      snprintf(r->key, sizeof r->key, "%s/%s/r%d", ck, cfg->arms[r->arm].name, r->repeat);
    }
  }
  free(seq_arm);
  *runs_out = runs;
  *n_out = n;
  return SPILL_OK;
}

static uint64_t key_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int parse_hash(const char *s, uint64_t *out) {
  uint64_t v = 0;
  int i = 0;
  for (; s[i]; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0 || i >= 16) return -1;
    v = v << 4 | (uint64_t)d;
  }
  if (i != 16) return -1;
  *out = v;
  return 0;
}

int spill_exp_row_oom_killed(const spill_exp_row *r) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(r->j, "outcome");
  return cJSON_IsString(o) && !strcmp(o->valuestring, SPILL_EXP_OUTCOME_OOM);
}

void spill_exp_rows_free(spill_exp_rows *r) {
  if (!r) return;
  for (int i = 0; i < r->n; i++) cJSON_Delete(r->rows[i].j);
  free(r->rows);
  free(r->runs);
  memset(r, 0, sizeof *r);
}

int spill_exp_rows_parse(const spill_exp_config *cfg, const char *file, char **lines, int n,
                         spill_exp_rows *out, spill_err *e) {
  memset(out, 0, sizeof *out);
  spill_exp_rows R = {0};
  SPILL_TRY(spill_exp_plan_runs(cfg, &R.runs, &R.n_runs, e));
  size_t cap = 16;
  while (cap < (size_t)R.n_runs * 2) cap *= 2;
  int *slot = malloc(cap * sizeof *slot);      /* plan index + 1, 0 = empty */
  int *seen = calloc((size_t)R.n_runs + 1, sizeof *seen); /* line of the row, 0 = none */
  R.rows = calloc((size_t)(n > 0 ? n : 1), sizeof *R.rows);
  int rc = SPILL_OK;
  if (!slot || !seen || !R.rows) rc = spill_err_set(e, SPILL_E_NOMEM, "%s: no memory", file);
  if (rc == SPILL_OK) {
    memset(slot, 0, cap * sizeof *slot);
    for (int i = 0; i < R.n_runs; i++) {
      size_t h = key_hash(R.runs[i].key) & (cap - 1);
      while (slot[h]) h = (h + 1) & (cap - 1);
      slot[h] = i + 1;
    }
  }
  char cell_key[200];
  for (int i = 0; rc == SPILL_OK && i < n; i++) {
    cJSON *j = NULL;
    spill_err pe = {0}; /* duplicate keys, NULs, invalid UTF-8: refused by name */
    if (spill_json_parse(lines[i], strlen(lines[i]), NULL, SPILL_E_FORMAT, &j, &pe) < 0) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: not a run row (%s)", file, i + 1,
                         pe.msg);
      break;
    }
    const cJSON *k = j ? cJSON_GetObjectItemCaseSensitive(j, "key") : NULL;
    const cJSON *c = j ? cJSON_GetObjectItemCaseSensitive(j, "cell") : NULL;
    const cJSON *a = j ? cJSON_GetObjectItemCaseSensitive(j, "arm") : NULL;
    const cJSON *r = j ? cJSON_GetObjectItemCaseSensitive(j, "repeat") : NULL;
    const cJSON *tok = j ? cJSON_GetObjectItemCaseSensitive(j, "tokens") : NULL;
    const cJSON *th = tok ? cJSON_GetObjectItemCaseSensitive(tok, "hash") : NULL;
    uint64_t hash = 0;
    if (!cJSON_IsObject(j) || !cJSON_IsString(k) || !cJSON_IsString(c) || !cJSON_IsString(a) ||
        !cJSON_IsNumber(r) || !cJSON_IsString(th) || parse_hash(th->valuestring, &hash) < 0) {
      cJSON_Delete(j);
      rc = spill_err_set(e, SPILL_E_FORMAT,
                         "%s: line %d: not a run row (needs key, cell, arm, repeat and a "
                         "16-hex-digit tokens.hash)", file, i + 1);
      break;
    }
    int p = -1;
    for (size_t h = key_hash(k->valuestring) & (cap - 1); slot[h]; h = (h + 1) & (cap - 1))
      if (!strcmp(R.runs[slot[h] - 1].key, k->valuestring)) {
        p = slot[h] - 1;
        break;
      }
    if (p < 0) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: line %d: run \"%.200s\" is not in this config",
                         file, i + 1, k->valuestring);
      cJSON_Delete(j);
      break;
    }
    const spill_exp_run *run = &R.runs[p];
    spill_exp_cell_key(cfg, run->cell, cell_key, sizeof cell_key);
    if (strcmp(c->valuestring, cell_key) || strcmp(a->valuestring, cfg->arms[run->arm].name) ||
        r->valuedouble != (double)run->repeat) {
      rc = spill_err_set(e, SPILL_E_FORMAT,
                         "%s: line %d: run %s: cell, arm or repeat disagree with its key", file,
                         i + 1, run->key);
      cJSON_Delete(j);
      break;
    }
    if (seen[p]) {
      rc = spill_err_set(e, SPILL_E_FORMAT,
                         "%s: line %d: run %s appears twice (also line %d); a results directory "
                         "has one writer: remove the duplicate line to use it", file, i + 1,
                         run->key, seen[p]);
      cJSON_Delete(j);
      break;
    }
    seen[p] = i + 1;
    R.rows[R.n++] = (spill_exp_row){j, p, run->cell, run->arm, run->repeat, hash, i + 1};
  }
  free(slot);
  free(seen);
  if (rc < 0) {
    spill_exp_rows_free(&R);
    return rc;
  }
  *out = R;
  return SPILL_OK;
}
