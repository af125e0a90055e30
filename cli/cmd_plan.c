/* cli/cmd_plan.c: `spill plan`: the RAM budget, term by term. */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

static void row(const char *name, uint64_t b, const char *note) {
  printf("%-22s %14llu B  %10.3f GiB  %s\n", name, (unsigned long long)b, b / 1073741824.0, note);
}

int cmd_plan(int argc, char **argv) {
  int json = 0;
  long ctx = 4096, threads = 2;
  uint64_t budget = 0, ram = 0;
  const char *model = NULL, *shape = NULL, *v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--ctx")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1L << 24, &ctx)) return 2;
    } else if (!strcmp(a, "--threads")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 256, &threads)) return 2;
    } else if (!strcmp(a, "--budget")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_size(a, v, &budget)) return 2;
    } else if (!strcmp(a, "--ram")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_size(a, v, &ram)) return 2;
    } else if (!strcmp(a, "--shape")) {
      if (!(shape = cli_value(argc, argv, &i))) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "spill plan: unknown option %s\n", a);
      return 2;
    } else model = a;
  }
  if (!!model == !!shape) {
    fprintf(stderr,
            "usage: spill plan [--json] [--budget SIZE] [--ctx N] [--threads N] [--ram SIZE] "
            "MODEL\n       spill plan --shape k3 [...]   (published shape, no container)\n"
            "--ram sets the machine's usable RAM for the default rule (default: this machine)\n");
    return 2;
  }
  spill_plan p;
  memset(&p, 0, sizeof p);
  spill_err e = {0};
  int rc = model ? spill_plan_model(model, (int)ctx, (int)threads, budget, ram, &p, &e)
                 : spill_plan_shape(shape, (int)ctx, (int)threads, budget, ram, &p, &e);
  if (rc) return cli_fail("plan", rc, e.msg);
  if (json) {
    printf("{\"source\": \"%s\", \"ctx\": %d, \"threads\": %ld, \"trunk\": %llu, "
           "\"state\": {\"mla_latent\": %llu, \"kda_state\": %llu, \"kda_conv\": %llu, "
           "\"gqa_kv\": %llu, \"total\": %llu}, "
           "\"scratch\": {\"activations\": %llu, \"attn_scores\": %llu, \"moe_buffers\": %llu, "
           "\"rvq_luts\": %llu, \"logits\": %llu, \"total\": %llu}, "
           "\"record_bytes\": %llu, \"min_cache\": %llu, \"floor\": %llu, \"ws\": %llu, "
           "\"recommended\": %llu, \"usable_ram\": %llu, \"cap\": %llu, \"budget\": %llu, "
           "\"budget_explicit\": %s, \"budget_ws\": %d, \"expert_cache\": %llu, "
           "\"cache_slots\": %llu}\n",
           model ? model : shape, p.ctx, threads, (unsigned long long)p.trunk,
           (unsigned long long)p.state.mla_latent, (unsigned long long)p.state.kda_state,
           (unsigned long long)p.state.kda_conv, (unsigned long long)p.state.gqa_kv,
           (unsigned long long)p.state.total, (unsigned long long)p.scratch.activations,
           (unsigned long long)p.scratch.attn_scores, (unsigned long long)p.scratch.moe_buffers,
           (unsigned long long)p.scratch.rvq_luts, (unsigned long long)p.scratch.logits,
           (unsigned long long)p.scratch.total, (unsigned long long)p.record_bytes,
           (unsigned long long)p.min_cache, (unsigned long long)p.floor,
           (unsigned long long)p.ws, (unsigned long long)p.recommended,
           (unsigned long long)p.usable_ram, (unsigned long long)p.cap,
           (unsigned long long)p.budget, p.budget_explicit ? "true" : "false", p.budget_ws,
           (unsigned long long)p.expert_cache, (unsigned long long)p.cache_slots);
    return 0;
  }
  printf("RAM plan for %s at ctx %d (%ld threads)\n", model ? model : shape, p.ctx, threads);
  row("trunk", p.trunk, "resident weights");
  row("state.mla_latent", p.state.mla_latent, "(kv_lora + rope) f32 x ctx x MLA layers");
  row("state.kda_state", p.state.kda_state, "H d^2 f32 x KDA layers");
  row("state.kda_conv", p.state.kda_conv, "3 (K-1) H d f32 x KDA layers");
  row("state.gqa_kv", p.state.gqa_kv, "2 Hk d f32 x ctx x GQA layers");
  row("scratch.activations", p.scratch.activations, "one token's vectors");
  row("scratch.attn_scores", p.scratch.attn_scores, "heads x ctx f32");
  row("scratch.moe_buffers", p.scratch.moe_buffers, "router, latent, expert outputs");
  row("scratch.rvq_luts", p.scratch.rvq_luts, "rvq3 lookup tables");
  row("scratch.logits", p.scratch.logits, "vocab f32");
  row("min_cache", p.min_cache, "2 x top_k records");
  row("floor", p.floor, "trunk + state + scratch + min cache");
  row("ws", p.ws, "record x top_k x MoE layers (per-token working set)");
  row("recommended", p.recommended, "floor + 3 ws");
  row("usable_ram", p.usable_ram, "min(physical, cgroup limit)");
  row("cap", p.cap, "7/8 of usable");
  char note[64];
  if (p.budget_explicit) snprintf(note, sizeof note, "explicit");
  else if (p.budget_ws) snprintf(note, sizeof note, "default: floor + %d ws", p.budget_ws);
  else snprintf(note, sizeof note, "default: floor (WARNING: below floor + 1 ws)");
  row("budget", p.budget, note);
  snprintf(note, sizeof note, "%llu slots of %llu B", (unsigned long long)p.cache_slots,
           (unsigned long long)p.record_bytes);
  row("expert_cache", p.expert_cache, note);
  if (p.below_recommended_warning)
    fprintf(stderr, "spill plan: warning: the cap (%.2f GiB) is below floor + 1 ws; the budget "
                    "is the floor and most experts will be read every token\n",
            p.cap / 1073741824.0);
  return 0;
}
