/* cli/cmd_sim.c: `spill sim CONFIG [--json]`: runs the decode simulator
 * (research/sim/sim.h, schema in docs/SIM.md) and prints, per budget, hit
 * rate, bytes read and tok/s with the time split (compute, I/O stall,
 * paging). For "model": {"dir": ...} the container's plan comes from
 * libspill (spill_info_read + spill_plan_model), so the simulator library
 * never opens a container. The routing's locality statistics are printed
 * too, so the assumptions behind synthetic routing are visible.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "research/sim/sim.h"
#include "engine/spill.h"
#include "engine/trace/router_trace.h"
#include "research/trace/trace_analysis.h"

const char cmd_sim_usage[] =
    "usage: spill sim [--json] CONFIG\n"
    "simulates decode per RAM budget (docs/SIM.md): hit rate, bytes read, tok/s\n";

static void json_result(const spill_sim_result *r, int last) {
  printf("  {\"budget\": %llu, \"slots\": %u, \"over_bytes\": %llu, \"oom\": %s, \"tokens\": %u, "
         "\"accesses\": %llu, \"hits\": %llu, \"misses\": %llu, \"hit_rate\": %.6f, "
         "\"reads\": %llu, \"bytes_read\": %llu, \"bytes_read_spec\": %llu, "
         "\"spec_issued\": %llu, \"spec_used\": %llu, \"spec_wasted\": %llu, "
         "\"lookahead_predicted\": %llu, \"lookahead_correct\": %llu, "
         "\"s_per_token\": %.6f, \"tok_per_s\": %.6f, \"compute_s\": %.6f, \"io_stall_s\": %.6f, "
         "\"paging_s\": %.6f, \"pagein_bytes_per_token\": %.0f, \"faults_per_token\": %.1f}%s\n",
         (unsigned long long)r->budget, r->slots, (unsigned long long)r->over_bytes,
         r->oom ? "true" : "false", r->tokens, (unsigned long long)r->accesses,
         (unsigned long long)r->hits, (unsigned long long)r->misses, r->hit_rate,
         (unsigned long long)r->reads, (unsigned long long)r->bytes_read,
         (unsigned long long)r->bytes_read_spec, (unsigned long long)r->spec_issued,
         (unsigned long long)r->spec_used, (unsigned long long)r->spec_wasted,
         (unsigned long long)r->la_predicted, (unsigned long long)r->la_correct, r->s_per_token,
         r->tok_per_s, r->compute_s, r->io_stall_s, r->paging_s, r->pagein_bytes, r->faults,
         last ? "" : ",");
}

int cmd_sim(int argc, char **argv) {
  int json = 0;
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error("unknown option %s", argv[i]);
    else if (file) return cli_usage_error("unexpected argument %s", argv[i]);
    else file = argv[i];
  }
  if (!file) return cli_usage_error("no config");
  spill_sim_config c;
  spill_err e = {0};
  int rc = spill_sim_config_load(file, &c, &e);
  if (rc < 0) return cli_fail("sim", rc, e.msg);
  if (c.model_dir[0]) {
    spill_info info;
    spill_plan pl;
    if ((rc = spill_info_read(c.model_dir, &info, &e)) < 0) return cli_fail("sim", rc, e.msg);
    if ((rc = spill_plan_model(c.model_dir, c.ctx, c.threads, 0, 0, &pl, &e)) < 0)
      return cli_fail("sim", rc, e.msg);
    spill_sim_set_plan(&c, (uint32_t)info.n_moe_layers, (uint32_t)info.n_experts,
                       (uint32_t)info.top_k, pl.record_bytes, pl.trunk, pl.floor, pl.min_cache);
    for (int i = 0; i < c.n_budgets; i++)
      if (c.budgets[i] < pl.floor) {
        fprintf(stderr, "spill sim: %s: budgets[%d]: %.3f GiB is below the floor %.3f GiB\n", file,
                i, c.budgets[i] / 1073741824.0, pl.floor / 1073741824.0);
        return 1;
      }
  }
  spill_trace t;
  double zipf = 0;
  if ((rc = spill_sim_routing(&c, &t, &zipf, &e)) < 0) return cli_fail("sim", rc, e.msg);
  spill_trace_stats st;
  memset(&st, 0, sizeof st);
  int have_stats = spill_trace_compute_stats(&t, 0, 0, &st, &e) == SPILL_OK;
  spill_sim_result res[SPILL_SIM_MAX_BUDGETS];
  rc = spill_sim_run(&c, &t, res, &e);
  spill_trace_free(&t);
  if (rc < 0) {
    spill_trace_stats_free(&st);
    return cli_fail("sim", rc, e.msg);
  }
  if (json) {
    printf("{\"name\": \"%s\", \"record_bytes\": %llu, \"trunk_bytes\": %llu, \"floor_bytes\": %llu, "
           "\"moe_layers\": %u, \"experts\": %u, \"top_k\": %u, \"zipf\": %.6f",
           c.name, (unsigned long long)c.record_bytes, (unsigned long long)c.trunk_bytes,
           (unsigned long long)c.floor_bytes, c.moe_layers, c.n_experts, c.top_k, zipf);
    if (have_stats)
      printf(", \"routing\": {\"tokens\": %u, \"reuse_next\": %.6f, \"gini_mean\": %.6f, "
             "\"top10_share_mean\": %.6f, \"cover80_frac\": %.6f}",
             st.n_tokens, st.reuse_next, st.gini_mean, st.top10_share_mean, st.cover_frac[1]);
    printf(", \"results\": [\n");
    for (int i = 0; i < c.n_budgets; i++) json_result(&res[i], i == c.n_budgets - 1);
    printf("]}\n");
  } else {
    char b1[32], b2[32], b3[32];
    printf("%s: %u MoE layers x %u experts, top-%u, record %s, trunk %s, floor %s\n", c.name,
           c.moe_layers, c.n_experts, c.top_k, cli_bytes(c.record_bytes, b1, sizeof b1),
           cli_bytes(c.trunk_bytes, b2, sizeof b2),
           cli_bytes(c.floor_bytes, b3, sizeof b3));
    if (have_stats)
      printf("routing: %u tokens, next-token reuse %.1f%%, Gini %.3f, top-10%% share %.1f%%%s\n",
             st.n_tokens, 100 * st.reuse_next, st.gini_mean, 100 * st.top10_share_mean,
             zipf > 0 ? "" : "");
    if (zipf > 0) printf("synthetic popularity: Zipf exponent %.4f\n", zipf);
    printf("%10s %7s %8s %9s %12s %9s %9s %9s %9s %10s\n", "budget", "slots", "hit %", "GiB/tok",
           "over GiB", "s/tok", "tok/s", "stall s", "paging s", "faults/tok");
    for (int i = 0; i < c.n_budgets; i++) {
      const spill_sim_result *r = &res[i];
      printf("%9.2fG %7u %8.2f %9.3f %12.2f %9.3f %9.3f %9.3f %9.3f %10.0f%s\n",
             r->budget / 1073741824.0, r->slots, 100 * r->hit_rate,
             r->tokens ? r->bytes_read / (double)r->tokens / 1073741824.0 : 0,
             r->over_bytes / 1073741824.0, r->s_per_token, r->tok_per_s, r->io_stall_s,
             r->paging_s, r->faults, r->oom ? "  OOM (no swap)" : "");
    }
  }
  spill_trace_stats_free(&st);
  return 0;
}
