/* harness/refuted.c: writing and listing refuted/ entries.
 *
 * Numbering: the next id is one more than the largest NNNN- prefix present,
 * so ids are never reused. Front matter is "key: value" lines between two
 * "---" lines; values are single-line (newlines in claims are flattened).
 */
#define _GNU_SOURCE
#include "harness/refuted.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "harness/exp_files.h"

static void flat(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const spill_refuted_entry *)a)->file, ((const spill_refuted_entry *)b)->file);
}

static void field(const char *text, const char *key, char *out, size_t n) {
  out[0] = 0;
  size_t kl = strlen(key);
  const char *p = text;
  if (strncmp(p, "---\n", 4)) return;
  p += 4;
  while (*p && strncmp(p, "---", 3)) {
    const char *nl = strchr(p, '\n');
    if (!nl) break;
    if (!strncmp(p, key, kl) && p[kl] == ':') {
      const char *v = p + kl + 1;
      while (*v == ' ') v++;
      size_t len = (size_t)(nl - v);
      if (len < n) {
        memcpy(out, v, len);
        out[len] = 0;
        return;
      }
      /* Too long for the index: cut at a UTF-8 character boundary and say
       * so, so a row never ends mid-quote as if it were the whole value. */
      static const char more[] = " [...] (full text in the entry)";
      len = n - sizeof more;
      while (len > 0 && ((unsigned char)v[len] & 0xC0) == 0x80) len--;
      memcpy(out, v, len);
      memcpy(out + len, more, sizeof more);
      return;
    }
    p = nl + 1;
  }
}

int spill_refuted_list(const char *dir, spill_refuted_entry **out, int *n_out, spill_err *e) {
  *out = NULL;
  *n_out = 0;
  SPILL_TRY(spill_exp_dir_check(dir, e)); /* so no path below is cut */
  DIR *d = opendir(dir);
  if (!d) return SPILL_OK; /* no entries yet */
  int cap = 16, n = 0;
  spill_refuted_entry *v = calloc((size_t)cap, sizeof *v);
  struct dirent *ent;
  while (v && (ent = readdir(d))) {
    const char *f = ent->d_name;
    size_t len = strlen(f);
    if (len < 8 || !isdigit((unsigned char)f[0]) || f[4] != '-' || strcmp(f + len - 3, ".md"))
      continue;
    char path[SPILL_PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, f);
    if (spill_read_file(path, 1 << 20, &text, NULL, e) < 0) continue;
    if (n == cap) {
      cap *= 2;
      spill_refuted_entry *nv = realloc(v, (size_t)cap * sizeof *nv);
      if (!nv) {
        free(text);
        break;
      }
      v = nv;
    }
    spill_refuted_entry *x = &v[n++];
    memset(x, 0, sizeof *x);
    snprintf(x->file, sizeof x->file, "%s", f);
    field(text, "id", x->id, sizeof x->id);
    field(text, "date", x->date, sizeof x->date);
    field(text, "hypothesis", x->hypothesis, sizeof x->hypothesis);
    field(text, "metric", x->metric, sizeof x->metric);
    field(text, "result", x->result, sizeof x->result);
    field(text, "verdict", x->verdict, sizeof x->verdict);
    field(text, "results", x->results, sizeof x->results);
    field(text, "written_by", x->written_by, sizeof x->written_by);
    free(text);
  }
  closedir(d);
  if (!v) return spill_err_set(e, SPILL_E_NOMEM, "refuted: no memory");
  qsort(v, (size_t)n, sizeof *v, cmp_entry);
  *out = v;
  *n_out = n;
  return SPILL_OK;
}

int spill_refuted_index(const char *dir, spill_err *e) {
  spill_refuted_entry *v;
  int n;
  SPILL_TRY(spill_refuted_list(dir, &v, &n, e));
  size_t cap = 4096 + (size_t)n * 1024, off = 0;
  char *md = malloc(cap);
  if (!md) {
    free(v);
    return spill_err_set(e, SPILL_E_NOMEM, "refuted index: no memory");
  }
  off += (size_t)snprintf(md + off, cap - off,
                          "# Refuted hypotheses\n\n"
                          "Entries marked `spill exp` were written by the experiment runner "
                          "when a hypothesis's confidence interval lay entirely on the wrong "
                          "side of its threshold (a plain run writes its entry into its own "
                          "results directory; `spill exp --publish` writes it here). Entries "
                          "marked `hand` were written by "
                          "people from measurements made outside the runner (prototypes, "
                          "tests); each names how it was measured. This index is regenerated "
                          "by `spill exp` and `spill refuted list --index`: do not edit it; add notes in an entry's "
                          "Notes section.\n\n"
                          "| id | date | written by | hypothesis | result | results |\n"
                          "|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++)
    off += (size_t)snprintf(md + off, cap - off, "| [%s](%s) | %s | %s | %s | %s | `%s` |\n",
                            v[i].id, v[i].file, v[i].date,
                            v[i].written_by[0] ? v[i].written_by : "(not recorded)",
                            v[i].hypothesis, v[i].result, v[i].results);
  if (n == 0) off += (size_t)snprintf(md + off, cap - off, "\n(no entries yet)\n");
  free(v);
  char path[SPILL_PATH_MAX];
  snprintf(path, sizeof path, "%s/README.md", dir);
  int rc = spill_write_file_atomic(path, md, off, e);
  free(md);
  return rc;
}

int spill_refuted_write(const char *dir, const char *results_dir, const char *config_path,
                        const spill_exp_report_result *res, char *entry_out, size_t n,
                        spill_err *e) {
  SPILL_TRY(spill_exp_dir_check(dir, e));
  SPILL_TRY(spill_exp_dir_check(results_dir, e));
  SPILL_TRY(spill_exp_mkdirs(dir, e));
  spill_refuted_entry *v;
  int cnt;
  SPILL_TRY(spill_refuted_list(dir, &v, &cnt, e));
  int next = 1;
  for (int i = 0; i < cnt; i++) {
    if (!strcmp(v[i].results, results_dir)) {
      snprintf(entry_out, n, "%s/%s", dir, v[i].file);
      free(v);
      return spill_refuted_index(dir, e);
    }
    int id = atoi(v[i].file);
    if (id >= next) next = id + 1;
  }
  free(v);
  /* Config name, commit and date from the results directory. */
  char cfgp[SPILL_PATH_MAX], *cfgtext = NULL, name[64] = "experiment", source[512] = "";
  char prediction[512] = "";
  snprintf(cfgp, sizeof cfgp, "%s/config.json", results_dir);
  if (spill_read_file(cfgp, 1 << 20, &cfgtext, NULL, e) == SPILL_OK) {
    cJSON *c = spill_json_parse_quiet(cfgtext);
    const cJSON *nm = c ? cJSON_GetObjectItemCaseSensitive(c, "name") : NULL;
    if (cJSON_IsString(nm)) snprintf(name, sizeof name, "%s", nm->valuestring);
    /* The prediction in numbers: the ratio treatment/control the claim needs. */
    const cJSON *h = c ? cJSON_GetObjectItemCaseSensitive(c, "hypothesis") : NULL;
    const cJSON *dir_j = h ? cJSON_GetObjectItemCaseSensitive(h, "direction") : NULL;
    const cJSON *eff = h ? cJSON_GetObjectItemCaseSensitive(h, "min_effect") : NULL;
    const cJSON *ctl = h ? cJSON_GetObjectItemCaseSensitive(h, "control") : NULL;
    const cJSON *trt = h ? cJSON_GetObjectItemCaseSensitive(h, "treatment") : NULL;
    if (cJSON_IsString(dir_j) && cJSON_IsNumber(eff)) {
      int up = !strcmp(dir_j->valuestring, "increase");
      snprintf(prediction, sizeof prediction, "%s ratio %s/%s %s %.3f (%s by >= %.3g%%)",
               res->metric, cJSON_IsString(trt) ? trt->valuestring : "treatment",
               cJSON_IsString(ctl) ? ctl->valuestring : "control", up ? ">=" : "<=",
               up ? 1 + eff->valuedouble : 1 - eff->valuedouble, up ? "increase" : "decrease",
               100 * eff->valuedouble);
      /* per-cell thresholds replace that ratio in the cells they name */
      const cJSON *ct = cJSON_GetObjectItemCaseSensitive(h, "cell_thresholds");
      size_t off = strlen(prediction);
      for (const cJSON *t = cJSON_IsObject(ct) ? ct->child : NULL; t && off < sizeof prediction; t = t->next)
        off += (size_t)snprintf(prediction + off, sizeof prediction - off, "%s%s %s %.3g",
                                t == ct->child ? "; per cell: " : ", ", t->string, up ? ">=" : "<=",
                                t->valuedouble);
    }
    cJSON_Delete(c);
    free(cfgtext);
  }
  char envp[SPILL_PATH_MAX], *envtext = NULL, commit[64] = "unknown", machine[256] = "unknown";
  snprintf(envp, sizeof envp, "%s/env.json", results_dir);
  if (spill_read_file(envp, 1 << 20, &envtext, NULL, e) == SPILL_OK) {
    cJSON *c = spill_json_parse_quiet(envtext);
    const cJSON *g = c ? cJSON_GetObjectItemCaseSensitive(c, "git") : NULL;
    const cJSON *cm = g ? cJSON_GetObjectItemCaseSensitive(g, "commit") : NULL;
    if (cJSON_IsString(cm)) snprintf(commit, sizeof commit, "%s", cm->valuestring);
    const cJSON *cpu = c ? cJSON_GetObjectItemCaseSensitive(c, "cpu") : NULL;
    const cJSON *model = cpu ? cJSON_GetObjectItemCaseSensitive(cpu, "model") : NULL;
    const cJSON *ram = c ? cJSON_GetObjectItemCaseSensitive(c, "ram_bytes") : NULL;
    const cJSON *cores = cpu ? cJSON_GetObjectItemCaseSensitive(cpu, "cores") : NULL;
    if (cJSON_IsString(model))
      snprintf(machine, sizeof machine, "%s, %d cores, %.1f GiB RAM", model->valuestring,
               cJSON_IsNumber(cores) ? cores->valueint : 0,
               cJSON_IsNumber(ram) ? ram->valuedouble / 1073741824.0 : 0.0);
    cJSON_Delete(c);
    free(envtext);
  }
  /* the config file the run was started with, not a guess from its name */
  if (config_path && config_path[0]) snprintf(source, sizeof source, "%s", config_path);
  else snprintf(source, sizeof source, "%s/config.json", results_dir);
  char date[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(date, sizeof date, "%Y-%m-%d", &tm);
  char claim[256], result[512];
  snprintf(claim, sizeof claim, "%s", res->claim);
  snprintf(result, sizeof result, "%s", res->result_text);
  flat(claim);
  flat(result);
  snprintf(entry_out, n, "%s/%04d-%s.md", dir, next, name);
  size_t cap = 8192 + strlen(res->table_md) + 2048, off = 0;
  char *md = malloc(cap);
  if (!md) return spill_err_set(e, SPILL_E_NOMEM, "refuted: no memory");
  off += (size_t)snprintf(md + off, cap - off,
                          "---\nid: %04d\ndate: %s\ncommit: %s\nmachine: %s\nwritten_by: spill exp\n"
                          "hypothesis: %s\n"
                          "metric: %s\nprediction: %s\nresult: %s\nverdict: refuted\n"
                          "config: %s\nresults: %s\n---\n\n# %04d: %s\n\n"
                          "## Table\n\n%s\n## Plot\n\n",
                          next, date, commit, machine, claim, res->metric,
                          prediction[0] ? prediction : claim, result, source,
                          results_dir, next, claim, res->table_md);
  char plots[SPILL_PATH_MAX];
  snprintf(plots, sizeof plots, "%s", res->plots);
  for (char *tok = strtok(plots, " "); tok; tok = strtok(NULL, " "))
    if (strstr(tok, ".png")) {
      /* the link is relative to the entry: inside the results directory
       * (its own refuted/) or beside it (the repository's refuted/) */
      size_t rl = strlen(results_dir);
      const char *rel = !strncmp(tok, results_dir, rl) && tok[rl] == '/' &&
                                !strncmp(dir, results_dir, rl) && dir[rl] == '/'
                            ? tok + rl + 1
                            : tok;
      off += (size_t)snprintf(md + off, cap - off, "![plot](../%s)\n\n", rel);
    }
  off += (size_t)snprintf(md + off, cap - off,
                          "## Notes\n\n(For a human: what we think this means, and what would "
                          "change our mind.)\n");
  int rc = spill_write_file_atomic(entry_out, md, off, e);
  free(md);
  SPILL_TRY(rc);
  return spill_refuted_index(dir, e);
}
