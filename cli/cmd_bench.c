/* cli/cmd_bench.c: `spill bench`: a fixed decode workload (a prompt, N
 * greedy tokens, cold expert cache) reported as tok/s, hits, misses and bytes
 * read, as text or --json. The roofline is its own command (cmd_roofline.c). */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_bench_usage[] =
    "usage: spill bench [--json] [-n N] [--prompt TEXT] MODEL [engine knobs]\n"
    "Fixed workload: prompt \"The quick brown fox\" (or TEXT), N greedy decode\n"
    "tokens (16), cold expert cache.\n";

int cmd_bench(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  int json = 0;
  long n_new = 16;
  const char *model = NULL, *v, *prompt = "The quick brown fox";
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG, &cfg, NULL);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-n")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &n_new)) return 2;
    } else if (!strcmp(a, "--prompt")) {
      if (!(prompt = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--roofline")) {
      return cli_usage_error("--roofline is now its own command: spill roofline");
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (model) {
      return cli_usage_error("unexpected argument %s", a);
    } else model = a;
  }
  if (!model) return cli_usage_error("no model");
  spill_engine *eng;
  if (cli_open_engine("bench", model, &cfg, &eng)) return 1;
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
    cli_print_run_summary(eng, &st);
  }
  spill_engine_close(eng);
  return 0;
}
