/* harness/bench_stats.c: the bench workload's engine-free parts
 * (harness/bench_workload.h): its phase names, the prompt lookup, a
 * sample's derived fields and the medians over prompts. Apart from
 * bench_workload.c, which runs requests on an engine, so the experiment
 * config and metric code (and the fuzz targets built from them) link
 * without the engine.
 */
#include "harness/bench_workload.h"

#include <stdlib.h>
#include <string.h>

const char *const spill_bench_phase_names[SPILL_BENCH_N_PHASES] = {"cold", "warm"};

int spill_bench_prompt_find(const char *name) {
  for (int i = 0; i < spill_bench_n_prompts; i++)
    if (!strcmp(spill_bench_prompts[i].name, name)) return i;
  return -1;
}

double spill_bench_sample_hit_rate(const spill_bench_sample *s) {
  uint64_t a = s->decode_hits + s->decode_misses;
  return a ? (double)s->decode_hits / a : 0;
}

double spill_bench_sample_hit_rate_all(const spill_bench_sample *s) {
  uint64_t a = s->hits + s->misses;
  return a ? (double)s->hits / a : 0;
}

double spill_bench_sample_bytes_per_tok(const spill_bench_sample *s) {
  return s->n_gen ? (double)s->bytes_read_decode / s->n_gen : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double spill_bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void spill_bench_summarize(const spill_bench_sample *s, int n, spill_bench_summary *out) {
  enum { F = 10 };
  double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * F);
  memset(out, 0, sizeof *out);
  if (!v || n < 1) {
    free(v);
    return;
  }
  for (int p = 0; p < n; p++) {
    v[0 * n + p] = s[p].pp_ts;
    v[1 * n + p] = s[p].tg_ts;
    v[2 * n + p] = s[p].ttft_s;
    v[3 * n + p] = spill_bench_sample_bytes_per_tok(&s[p]);
    v[4 * n + p] = spill_bench_sample_hit_rate(&s[p]);
    v[5 * n + p] = spill_bench_sample_hit_rate_all(&s[p]);
    v[6 * n + p] = (double)s[p].peak_rss;
    v[7 * n + p] = s[p].read_bps;
    v[8 * n + p] = (double)s[p].misses;
    v[9 * n + p] = (double)s[p].decode_misses;
  }
  double *m[F] = {&out->pp_ts,   &out->tg_ts,    &out->ttft_s,   &out->bytes_per_tok,
                  &out->hit_rate, &out->hit_rate_all, &out->peak_rss, &out->read_bps,
                  &out->misses,  &out->decode_misses};
  for (int f = 0; f < F; f++) *m[f] = spill_bench_median(v + (size_t)f * n, n);
  free(v);
}
