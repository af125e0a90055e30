/* harness/exp_metrics.c: the metric table and its extraction from
 * spill_run_stats. Derived rates are computed here once so runs.jsonl holds
 * them and reports never recompute them differently. The primary hit rate
 * is decode_hit_rate (decode tokens only: what decode speed depends on);
 * overall_hit_rate also counts prefill, whose chunks claim many experts at
 * once and dilute it. */
#include "harness/exp_metrics.h"

#include <string.h>

static const spill_exp_metric k_metrics[] = {
    {"decode_tok_per_s", "decode tok/s", "tok/s", 0},
    {"prefill_tok_per_s", "prefill tok/s", "tok/s", 0},
    {"decode_s", "decode s", "s", 0},
    {"prefill_s", "prefill s", "s", 0},
    {"io_wait_s", "I/O wait s", "s", 0},
    {"decode_hit_rate", "decode hit rate", "", 0},
    {"overall_hit_rate", "overall hit rate (prefill + decode)", "", 0},
    {"lookahead_accuracy", "lookahead accuracy", "", 0},
    {"read_p50_ms", "read p50 ms", "ms", 0},
    {"read_p99_ms", "read p99 ms", "ms", 0},
    {"peak_rss_bytes", "peak RSS B", "B", 0},
    {"major_faults", "major faults", "", 0},
    {"tokens_prefill", "prompt tokens", "", 1},
    {"tokens_decode", "decoded tokens", "", 1},
    {"experts_requested", "experts requested", "", 1},
    {"demand_hits", "demand hits", "", 1},
    {"demand_misses", "demand misses", "", 1},
    {"decode_hits", "decode hits", "", 1},
    {"decode_misses", "decode misses", "", 1},
    {"spec_issued", "prefetches issued", "", 1},
    {"spec_used", "prefetches used", "", 1},
    {"spec_wasted", "prefetches wasted", "", 1},
    {"reads", "reads", "", 1},
    {"bytes_read", "bytes read", "B", 1},
    {"bytes_read_demand", "bytes read (demand)", "B", 1},
    {"bytes_read_spec", "bytes read (prefetch)", "B", 1},
    {"evictions", "evictions", "", 1},
    {"lookahead_predicted", "lookahead predicted", "", 1},
    {"lookahead_correct", "lookahead correct", "", 1},
    /* knob preload all: the expert preload before the run (at open or the
     * run's cache clear), not in decode_s; a llama.cpp row's is its model load */
    {"preload_s", "preload s (llama.cpp: load)", "s", 0},
    {"preload_bytes", "preload bytes", "B", 1},
    /* drafts (knob draft): expert bytes read in decode, and per generated
     * token (the prompt's reads are not in them); drafts verified, drafts
     * accepted, decode forward calls (a verify chunk is one), times the
     * adaptive rule switched drafting off */
    {"bytes_read_decode", "bytes read in decode", "B", 1},
    {"decode_bytes_per_token", "expert bytes per generated token", "B", 1},
    {"draft_tokens", "drafted", "", 1},
    {"draft_accepted", "drafts accepted", "", 1},
    {"decode_forwards", "decode forward calls", "", 1},
    {"draft_switched_off", "drafting switched off", "", 1},
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
