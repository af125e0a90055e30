/* harness/exp_bench_rows.c: a bench run's metrics and samples into its row
 * (harness/exp_bench_rows.h). The metric names and the sample fields come
 * from exp_metrics.c's table (bench_phase, bench_field), so a new bench
 * figure is one row there.
 */
#include "harness/exp_bench_rows.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/exp_metrics.h"

/* "decode_hit_rate" needs an expert cache: not a peer's. */
static int peer_lacks(const char *field) { return !strcmp(field, "decode_hit_rate"); }

static cJSON *sample_json(const spill_exp_config *cfg, int p, int ph, const spill_bench_sample *s,
                          int peer) {
  int nm;
  const spill_exp_metric *mt = spill_exp_metrics(&nm);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "prompt", spill_bench_prompts[cfg->bench_prompts[p]].name);
  cJSON_AddStringToObject(o, "phase", spill_bench_phase_names[ph]);
  cJSON_AddNumberToObject(o, "n_prompt", s->n_prompt);
  cJSON_AddNumberToObject(o, "n_gen", s->n_gen);
  for (int i = 0; i < nm; i++) /* each field once: the cold rows of the table name them */
    if (mt[i].bench_phase == 1 + SPILL_BENCH_COLD && !(peer && peer_lacks(mt[i].bench_field)))
      cJSON_AddNumberToObject(o, mt[i].bench_field,
                              spill_exp_bench_sample_value(mt[i].bench_field, s));
  cJSON_AddNumberToObject(o, "bytes_read", (double)s->bytes_read);
  cJSON_AddNumberToObject(o, "bytes_read_decode", (double)s->bytes_read_decode);
  cJSON_AddNumberToObject(o, "major_faults", (double)s->major_faults);
  if (!peer) {
    cJSON_AddNumberToObject(o, "decode_hits", (double)s->decode_hits);
    cJSON_AddNumberToObject(o, "decode_misses", (double)s->decode_misses);
  }
  if (s->paging) cJSON_AddBoolToObject(o, "paging", 1); /* the engine saw the machine page */
  char hx[20];
  snprintf(hx, sizeof hx, "%016llx", (unsigned long long)s->tokens_hash);
  cJSON_AddStringToObject(o, "tokens_hash", hx);
  return o;
}

void spill_exp_bench_row(const spill_exp_config *cfg, const spill_exp_bench_run *b, cJSON *row,
                         uint64_t *hash, int *n_tokens, double *primary) {
  const int np = cfg->bench_n_prompts, nph = spill_exp_config_bench_n_phases(cfg);
  int nm;
  const spill_exp_metric *mt = spill_exp_metrics(&nm);
  cJSON *m = cJSON_AddObjectToObject(row, "metrics");
  spill_bench_sample ps[SPILL_EXP_MAX_BENCH_PROMPTS];
  *primary = NAN;
  for (int ph = 0; ph < nph; ph++) {
    if (!(cfg->bench_phases >> ph & 1)) continue; /* run (to warm up), not recorded */
    for (int p = 0; p < np; p++) ps[p] = b->s[p * SPILL_BENCH_N_PHASES + ph];
    spill_bench_summary sm;
    spill_bench_summarize(ps, np, &sm);
    for (int i = 0; i < nm; i++) {
      if (mt[i].bench_phase != ph + 1 || (b->peer && peer_lacks(mt[i].bench_field))) continue;
      double v = spill_exp_bench_metric_value(i, &sm);
      cJSON_AddNumberToObject(m, mt[i].name, v);
      if (!strcmp(mt[i].name, spill_exp_config_primary_metric(cfg))) *primary = v;
    }
  }
  double pre = 0, dec = 0;
  uint64_t h = 0xcbf29ce484222325ull;
  cJSON *bj = cJSON_AddObjectToObject(row, "bench");
  cJSON_AddNumberToObject(bj, "pp", cfg->bench_pp);
  cJSON_AddNumberToObject(bj, "tg", cfg->bench_tg);
  cJSON *sa = cJSON_AddArrayToObject(bj, "samples");
  for (int p = 0; p < np; p++)
    for (int ph = 0; ph < nph; ph++) {
      const spill_bench_sample *s = &b->s[p * SPILL_BENCH_N_PHASES + ph];
      pre += s->n_prompt;
      dec += s->n_gen;
      const unsigned char *q = (const unsigned char *)&s->tokens_hash;
      for (size_t k = 0; k < sizeof s->tokens_hash; k++) h = (h ^ q[k]) * 0x100000001b3ull;
      if (cfg->bench_phases >> ph & 1) cJSON_AddItemToArray(sa, sample_json(cfg, p, ph, s, b->peer));
    }
  cJSON_AddNumberToObject(m, "tokens_prefill", pre);
  cJSON_AddNumberToObject(m, "tokens_decode", dec);
  cJSON_AddNumberToObject(m, "bytes_read", (double)b->bytes_read);
  cJSON_AddNumberToObject(m, "major_faults", (double)b->major_faults);
  *hash = h;
  *n_tokens = (int)dec;
}
