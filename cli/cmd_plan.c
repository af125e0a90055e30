/* cli/cmd_plan.c: `spill plan`: the RAM budget, term by term, for a model
 * container or a published shape (spill_plan_model / spill_plan_shape,
 * docs/PLAN.md). --budget, --ctx, --threads and --usable-ram are the engine
 * knobs of the same names (parsed by the knob table). */
#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_plan_usage[] =
    "usage: spill plan [--json] [--budget SIZE] [--ctx N] [--threads N] [--usable-ram SIZE] MODEL\n"
    "       spill plan --shape NAME [same options]   (a published shape, no container)\n"
    "       spill plan --shapes                      (the shapes: name, model, expert dtype)\n"
    "--usable-ram: the machine's usable RAM for the default rule (default: this machine;\n"
    "--ram is an alias, kept for published commands)\n";

/* argv[*i] is one of plan's knob flags: sets that knob of cfg from the next
 * argument (the knob table's parser). 1 consumed, 0 not plan's, -1 error. */
static int plan_knob(int argc, char **argv, int *i, spill_config *cfg) {
  static const char *const flags[][2] = {
      {"--budget", "budget"}, {"--ctx", "ctx"}, {"--threads", "threads"},
      {"--usable-ram", "usable_ram"}, {"--ram", "usable_ram"}};
  for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
    if (strcmp(argv[*i], flags[f][0]) != 0) continue;
    const char *v = cli_value(argc, argv, i);
    if (!v) return -1;
    spill_err e = {0};
    if (spill_config_set(cfg, flags[f][1], v, &e)) {
      cli_usage_error("%s (%s)", e.msg, spill_status_name(e.code));
      return -1;
    }
    return 1;
  }
  return 0;
}

static void row(const char *name, uint64_t b, const char *note) {
  printf("%-22s %14llu B  %10.3f GiB  %s\n", name, (unsigned long long)b, b / 1073741824.0, note);
}

/* `spill plan --shapes`: the table of published shapes as Markdown (docs/PLAN.md holds it,
 * //cli:plan_shapes_doc_test compares), with each one's record and working set. */
static int list_shapes(void) {
  printf("| shape | model, and the experts its figures assume | expert record | per-token experts |\n"
         "|---|---|---|---|\n");
  const char *name, *about;
  for (int i = 0; spill_plan_shape_at(i, &name, &about) == 0; i++) {
    spill_plan p;
    spill_err e = {0};
    int rc = spill_plan_shape(name, 4096, 1, 0, 64ull << 30, &p, &e);
    if (rc) return cli_fail("plan", rc, e.msg);
    printf("| `%s` | %s | %llu B | %.3f GiB (%llu records) |\n", name, about,
           (unsigned long long)p.record_bytes, p.ws / 1073741824.0,
           (unsigned long long)(p.ws / p.record_bytes));
  }
  return 0;
}

int cmd_plan(int argc, char **argv) {
  int json = 0;
  spill_config cfg;
  spill_config_default(&cfg);
  const char *model = NULL, *shape = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int k = plan_knob(argc, argv, &i, &cfg);
    if (k < 0) return 2;
    if (k) continue;
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--shapes")) {
      if (argc != 2) return cli_usage_error("--shapes takes no other argument");
      return list_shapes();
    } else if (!strcmp(a, "--shape")) {
      if (!(shape = cli_value(argc, argv, &i))) return 2;
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (model) {
      return cli_usage_error("unexpected argument %s", a);
    } else model = a;
  }
  if (!model == !shape) return cli_usage_error(model ? "MODEL or --shape, not both" : "no model");
  const long ctx = cfg.ctx, threads = cfg.threads > 0 ? cfg.threads : spill_physical_cores();
  const uint64_t budget = cfg.budget_bytes, ram = cfg.usable_ram;
  spill_plan p;
  memset(&p, 0, sizeof p);
  spill_err e = {0};
  int rc = model ? spill_plan_model(model, (int)ctx, (int)threads, budget, ram, &p, &e)
                 : spill_plan_shape(shape, (int)ctx, (int)threads, budget, ram, &p, &e);
  if (rc) return cli_fail("plan", rc, e.msg);
  if (json) {
    printf("{\"source\": \"%s\", \"ctx\": %d, \"threads\": %ld, \"trunk\": %llu, "
           "\"state\": {\"mla_latent\": %llu, \"kda_state\": %llu, \"kda_conv\": %llu, "
           "\"gqa_kv\": %llu, \"gqa_swa_kv\": %llu, \"gdn_state\": %llu, \"total\": %llu}, "
           "\"scratch\": {\"activations\": %llu, \"attn_scores\": %llu, \"moe_buffers\": %llu, "
           "\"rvq_luts\": %llu, \"logits\": %llu, \"total\": %llu}, "
           "\"record_bytes\": %llu, \"min_cache\": %llu, \"floor\": %llu, \"ws\": %llu, "
           "\"recommended\": %llu, \"usable_ram\": %llu, \"cap\": %llu, \"budget\": %llu, "
           "\"budget_explicit\": %s, \"budget_ws\": %d, \"budget_all\": %s, "
           "\"model_max\": %llu, \"expert_cache\": %llu, "
           "\"cache_slots\": %llu, \"swa_kv\": \"%s\", \"swa_full_extra\": %llu}\n",
           model ? model : shape, p.ctx, threads, (unsigned long long)p.trunk,
           (unsigned long long)p.state.mla_latent, (unsigned long long)p.state.kda_state,
           (unsigned long long)p.state.kda_conv, (unsigned long long)p.state.gqa_kv,
           (unsigned long long)p.state.gqa_swa_kv,
           (unsigned long long)p.state.gdn_state, (unsigned long long)p.state.total, (unsigned long long)p.scratch.activations,
           (unsigned long long)p.scratch.attn_scores, (unsigned long long)p.scratch.moe_buffers,
           (unsigned long long)p.scratch.rvq_luts, (unsigned long long)p.scratch.logits,
           (unsigned long long)p.scratch.total, (unsigned long long)p.record_bytes,
           (unsigned long long)p.min_cache, (unsigned long long)p.floor,
           (unsigned long long)p.ws, (unsigned long long)p.recommended,
           (unsigned long long)p.usable_ram, (unsigned long long)p.cap,
           (unsigned long long)p.budget, p.budget_explicit ? "true" : "false", p.budget_ws,
           p.budget_all ? "true" : "false", (unsigned long long)p.model_max,
           (unsigned long long)p.expert_cache, (unsigned long long)p.cache_slots,
           p.swa_kv == SPILL_SWA_KV_FULL ? "full" : "ring",
           (unsigned long long)p.swa_full_extra);
    return 0;
  }
  printf("RAM plan for %s at ctx %d (%ld threads)\n", model ? model : shape, p.ctx, threads);
  row("trunk", p.trunk, "resident weights");
  row("state.mla_latent", p.state.mla_latent, "(kv_lora + rope) f32 x ctx x MLA layers");
  row("state.kda_state", p.state.kda_state, "H d^2 f32 x KDA layers");
  row("state.kda_conv", p.state.kda_conv, "3 (K-1) H d f32 x KDA layers");
  row("state.gqa_kv", p.state.gqa_kv, "2 Hk d f32 x ctx x GQA layers");
  if (p.state.gqa_swa_kv)
    row("state.gqa_swa_kv", p.state.gqa_swa_kv,
        p.swa_kv == SPILL_SWA_KV_FULL
            ? "2 Hk d f32 x ctx x sliding-window layers (swa_kv full)"
            : "2 Hk d f32 x (W - 1 + chunk) x sliding-window layers (ring)");
  if (p.state.gdn_state) row("state.gdn_state", p.state.gdn_state, "Hv d^2 + (K-1)(2 Hk + Hv) d f32 x GDN layers");
  row("scratch.activations", p.scratch.activations, "a prefill chunk's vectors (16 tokens)");
  row("scratch.attn_scores", p.scratch.attn_scores, "threads x ctx f32 score rows");
  row("scratch.moe_buffers", p.scratch.moe_buffers, "router, expert inputs and outputs of a chunk");
  row("scratch.rvq_luts", p.scratch.rvq_luts, "rvq3 lookup tables of a chunk's inputs");
  row("scratch.logits", p.scratch.logits, "vocab f32");
  row("min_cache", p.min_cache, "2 x top_k records");
  row("floor", p.floor, "trunk + state + scratch + min cache");
  row("ws", p.ws, "record x top_k x MoE layers (per-token working set)");
  row("recommended", p.recommended, "floor + 3 ws");
  row("usable_ram", p.usable_ram, "min(physical, cgroup limit)");
  row("cap", p.cap, "7/8 of usable");
  char note[64];
  if (p.budget_explicit) snprintf(note, sizeof note, "explicit");
  else if (p.budget_all) snprintf(note, sizeof note, "default: the whole model (every record)");
  else if (p.budget_ws) snprintf(note, sizeof note, "default: floor + %d ws", p.budget_ws);
  else snprintf(note, sizeof note, "default: floor (WARNING: below floor + 1 ws)");
  row("budget", p.budget, note);
  snprintf(note, sizeof note, "%llu slots of %llu B", (unsigned long long)p.cache_slots,
           (unsigned long long)p.record_bytes);
  row("expert_cache", p.expert_cache, note);
  if (p.budget_above_model)
    fprintf(stderr, "spill plan: note: the budget is more than the model can use; the cache is "
                    "capped at its %llu expert records (%.2f MiB in all)\n",
            (unsigned long long)p.model_records, p.model_max / 1048576.0);
  if (p.below_recommended_warning)
    fprintf(stderr, "spill plan: warning: the cap (%.2f GiB) is below floor + 1 ws; the budget "
                    "is the floor and most experts will be read every token\n",
            p.cap / 1073741824.0);
  return 0;
}
