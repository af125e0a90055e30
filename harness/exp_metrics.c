/* harness/exp_metrics.c: the metric table and its extraction from
 * spill_run_stats. Derived rates are computed here once so runs.jsonl holds
 * them and reports never recompute them differently. The primary hit rate
 * is decode_hit_rate (decode tokens only: what decode speed depends on);
 * overall_hit_rate also counts prefill, whose chunks claim many experts at
 * once and dilute it. */
#include "harness/exp_metrics.h"

#include <math.h>
#include <string.h>

static const spill_exp_metric k_metrics[] = {
    {"decode_tok_per_s", "decode tok/s", "tok/s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"prefill_tok_per_s", "prefill tok/s", "tok/s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_s", "decode s", "s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"prefill_s", "prefill s", "s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"io_wait_s", "I/O wait s", "s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_hit_rate", "decode hit rate", "", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"overall_hit_rate", "overall hit rate (prefill + decode)", "", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"lookahead_accuracy", "lookahead accuracy", "", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"read_p50_ms", "read p50 ms", "ms", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"read_p99_ms", "read p99 ms", "ms", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"peak_rss_bytes", "peak RSS B", "B", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"major_faults", "major faults", "", 0, SPILL_EXP_SCOPE_BOTH, 0, NULL},
    {"tokens_prefill", "prompt tokens", "", 1, SPILL_EXP_SCOPE_BOTH, 0, NULL},
    {"tokens_decode", "decoded tokens", "", 1, SPILL_EXP_SCOPE_BOTH, 0, NULL},
    {"experts_requested", "experts requested", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"demand_hits", "demand hits", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"demand_misses", "demand misses", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_hits", "decode hits", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_misses", "decode misses", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"spec_issued", "prefetches issued", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"spec_used", "prefetches used", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"spec_wasted", "prefetches wasted", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"reads", "reads", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"bytes_read", "bytes read", "B", 1, SPILL_EXP_SCOPE_BOTH, 0, NULL},
    {"bytes_read_demand", "bytes read (demand)", "B", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"bytes_read_spec", "bytes read (prefetch)", "B", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"evictions", "evictions", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"lookahead_predicted", "lookahead predicted", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"lookahead_correct", "lookahead correct", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    /* knob preload all: the expert preload before the run (at open or the
     * run's cache clear), not in decode_s; a llama.cpp row's is its model load */
    {"preload_s", "preload s (llama.cpp: load)", "s", 0, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"preload_bytes", "preload bytes", "B", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    /* drafts (knob draft): expert bytes read in decode, and per generated
     * token (the prompt's reads are not in them); drafts verified, drafts
     * accepted, decode forward calls (a verify chunk is one), times the
     * adaptive rule switched drafting off */
    {"bytes_read_decode", "bytes read in decode", "B", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_bytes_per_token", "expert bytes per generated token", "B", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"draft_tokens", "drafted", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"draft_accepted", "drafts accepted", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"decode_forwards", "decode forward calls", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    {"draft_switched_off", "drafting switched off", "", 1, SPILL_EXP_SCOPE_REQUEST, 0, NULL},
    /* workload.bench (harness/bench_workload.h): per phase, the median over
     * the prompts of each request's figure; the row's "bench.samples" holds
     * every prompt's (named by bench_field). TTFT = the prefill's wall time;
     * bytes per generated token = the decode's own reads / tokens generated
     * (a llama.cpp row: /proc/self/io read_bytes of its decode); peak RSS
     * after the request (VmHWM; llama.cpp: ru_maxrss). A bench row's
     * tokens_prefill, tokens_decode, bytes_read and major_faults (scope
     * BOTH above) cover all of its requests (the cliff-io plot's figures). */
#define BENCH_PHASE(ph, n)                                                              \
  {"pp_tok_per_s_" ph, "pp tok/s " ph, "tok/s", 0, SPILL_EXP_SCOPE_BENCH, n, "pp_tok_per_s"}, \
  {"tg_tok_per_s_" ph, "tg tok/s " ph, "tok/s", 0, SPILL_EXP_SCOPE_BENCH, n, "tg_tok_per_s"}, \
  {"ttft_s_" ph, "TTFT s " ph, "s", 0, SPILL_EXP_SCOPE_BENCH, n, "ttft_s"},                    \
  {"decode_bytes_per_token_" ph, "bytes read per generated token " ph, "B", 0,                \
   SPILL_EXP_SCOPE_BENCH, n, "decode_bytes_per_token"},                                       \
  {"decode_hit_rate_" ph, "decode hit rate " ph, "", 0, SPILL_EXP_SCOPE_BENCH, n,             \
   "decode_hit_rate"},                                                                        \
  {"peak_rss_bytes_" ph, "peak RSS B " ph, "B", 0, SPILL_EXP_SCOPE_BENCH, n, "peak_rss_bytes"}
    BENCH_PHASE("cold", 1),
    BENCH_PHASE("warm", 2),
#undef BENCH_PHASE
};

const spill_exp_metric *spill_exp_metrics(int *n_out) {
  *n_out = (int)(sizeof k_metrics / sizeof k_metrics[0]);
  return k_metrics;
}

int spill_exp_metric_find(const char *name) {
  for (int i = 0; i < (int)(sizeof k_metrics / sizeof k_metrics[0]); i++)
    if (!strcmp(k_metrics[i].name, name)) return i;
  return -1;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

double spill_exp_metric_value(int i, const spill_run_stats *s) {
  const char *n = (i >= 0 && i < (int)(sizeof k_metrics / sizeof k_metrics[0]))
                      ? k_metrics[i].name : "";
#define F(field) if (!strcmp(n, #field)) return (double)s->field
  F(decode_tok_per_s);
  F(decode_s);
  F(prefill_s);
  F(io_wait_s);
  F(read_p50_ms);
  F(read_p99_ms);
  F(peak_rss_bytes);
  F(major_faults);
  F(tokens_prefill);
  F(tokens_decode);
  F(experts_requested);
  F(demand_hits);
  F(demand_misses);
  F(decode_hits);
  F(decode_misses);
  F(spec_issued);
  F(spec_used);
  F(spec_wasted);
  F(reads);
  F(bytes_read);
  F(bytes_read_demand);
  F(bytes_read_spec);
  F(evictions);
  F(lookahead_predicted);
  F(lookahead_correct);
  F(preload_s);
  F(preload_bytes);
  F(bytes_read_decode);
  F(draft_tokens);
  F(draft_accepted);
  F(decode_forwards);
  F(draft_switched_off);
#undef F
  if (!strcmp(n, "decode_bytes_per_token"))
    return ratio((double)s->bytes_read_decode, (double)s->tokens_decode);
  if (!strcmp(n, "prefill_tok_per_s")) return ratio(s->tokens_prefill, s->prefill_s);
  if (!strcmp(n, "decode_hit_rate"))
    return ratio((double)s->decode_hits, (double)(s->decode_hits + s->decode_misses));
  if (!strcmp(n, "overall_hit_rate"))
    return ratio((double)s->demand_hits, (double)(s->demand_hits + s->demand_misses));
  if (!strcmp(n, "lookahead_accuracy"))
    return ratio((double)s->lookahead_correct, (double)s->lookahead_predicted);
  return 0;
}

/* The one mapping of a bench field to the workload's figures: a phase's
 * medians (m) or one prompt's request (s); NaN for an unknown field. */
static double bench_field(const char *f, const spill_bench_summary *m, const spill_bench_sample *s) {
  if (!strcmp(f, "pp_tok_per_s")) return m ? m->pp_ts : s->pp_ts;
  if (!strcmp(f, "tg_tok_per_s")) return m ? m->tg_ts : s->tg_ts;
  if (!strcmp(f, "ttft_s")) return m ? m->ttft_s : s->ttft_s;
  if (!strcmp(f, "decode_bytes_per_token"))
    return m ? m->bytes_per_tok : spill_bench_sample_bytes_per_tok(s);
  if (!strcmp(f, "decode_hit_rate")) return m ? m->hit_rate : spill_bench_sample_hit_rate(s);
  if (!strcmp(f, "peak_rss_bytes")) return m ? m->peak_rss : (double)s->peak_rss;
  return NAN;
}

double spill_exp_bench_metric_value(int i, const spill_bench_summary *m) {
  int n = (int)(sizeof k_metrics / sizeof k_metrics[0]);
  if (i < 0 || i >= n || !k_metrics[i].bench_field) return NAN;
  return bench_field(k_metrics[i].bench_field, m, NULL);
}

double spill_exp_bench_sample_value(const char *field, const spill_bench_sample *s) {
  return bench_field(field, NULL, s);
}
