/* cli/cmd_model.c: `spill gen`, `spill info`, `spill verify`, `spill plan`:
 * the commands that work on containers and shapes without running the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/plan/ram_plan.h"
#include "engine/spill.h"

int cmd_gen(int argc, char **argv) {
  spill_gen_request r;
  memset(&r, 0, sizeof r);
  const char *out = NULL, *like_trace = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    if (!strcmp(a, "--like-trace")) {
      if (!(like_trace = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--preset")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      r.preset = v;
    } else if (!strcmp(a, "--like")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      if (strcmp(v, "k3") != 0) {
        fprintf(stderr, "spill gen: --like %s: only k3 is known\n", v);
        return 2;
      }
      r.preset = "twin";
    } else if (!strcmp(a, "--ram")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_size(a, v, &r.ram_bytes)) return 2;
    } else if (!strcmp(a, "--disk")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_size(a, v, &r.disk_bytes)) return 2;
    } else if (!strcmp(a, "--seed")) {
      long s;
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 0x7fffffffL, &s)) return 2;
      r.seed = (uint64_t)s;
    } else if (!strcmp(a, "--experts")) {
      long x;
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 65536, &x)) return 2;
      r.experts = (int)x;
    } else if (!strcmp(a, "--attn")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      r.attn_mix = v;
    } else if (!strcmp(a, "--trunk-dtype")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      r.trunk_dtype = v;
    } else if (!strcmp(a, "--expert-dtype")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      r.expert_dtype = v;
    } else if (a[0] == '-') {
      fprintf(stderr, "spill gen: unknown option %s\n", a);
      return 2;
    } else if (!out) {
      out = a;
    } else {
      fprintf(stderr, "spill gen: one output directory only\n");
      return 2;
    }
  }
  if (!out || (!r.preset && !like_trace)) {
    fprintf(stderr,
            "usage: spill gen --preset nano|mini|twin | --like k3 --ram SIZE [--disk SIZE]\n"
            "                 [--seed N] [--attn k3|mla|kda|gqa] [--trunk-dtype q4|f32]\n"
            "                 [--expert-dtype rvq3|f32|q8|q4] [--experts N] OUT_DIR\n"
            "       spill gen --like-trace TRACE [--preset nano|mini] [other options] OUT_DIR\n"
            "--like-trace: MoE layers, experts per layer and top-k from a router trace\n"
            "(docs/TRACE.md), everything else from the preset (default mini), so that\n"
            "`spill run --routing-trace TRACE` can replay it.\n");
    return 2;
  }
  spill_err e = {0};
  if (like_trace) {
    int rc = spill_gen_request_like_trace(&r, like_trace, &e);
    if (rc) return cli_fail("gen", rc, e.msg);
    fprintf(stderr, "spill gen: like %s: %d MoE layers, %d experts, top-%d, preset %s\n",
            like_trace, r.moe_layers, r.experts, r.top_k, r.preset);
  }
  if (r.ram_bytes && strcmp(r.preset, "twin") != 0) {
    fprintf(stderr, "spill gen: --ram applies to --like k3 (the twin) only\n");
    return 2;
  }
  cli_progress p;
  cli_progress_init(&p, "gen");
  int rc = spill_gen(out, &r, cli_progress_cb, &p, &e);
  if (rc) return cli_fail("gen", rc, e.msg);
  spill_info info;
  rc = spill_info_read(out, &info, &e);
  if (rc) return cli_fail("gen", rc, e.msg);
  char b1[32], b2[32], b3[32];
  fprintf(stderr, "spill gen: wrote %s: %s container, trunk %s, %d x %d experts of %s\n", out,
          cli_bytes(info.container_bytes, b1, sizeof b1), cli_bytes(info.trunk_bytes, b2, sizeof b2),
          info.n_moe_layers, info.n_experts, cli_bytes(info.record_bytes, b3, sizeof b3));
  return 0;
}

int cmd_info(int argc, char **argv) {
  int json = 0;
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-') {
      fprintf(stderr, "spill info: unknown option %s\n", argv[i]);
      return 2;
    } else model = argv[i];
  }
  if (!model) {
    fprintf(stderr, "usage: spill info [--json] MODEL\n");
    return 2;
  }
  spill_info in;
  spill_err e = {0};
  int rc = spill_info_read(model, &in, &e);
  if (rc) return cli_fail("info", rc, e.msg);
  if (json) {
    printf("{\"name\": \"%s\", \"arch\": \"%s\", \"layers\": %d, \"moe_layers\": %d, "
           "\"dense_layers\": %d, \"attn\": {\"mla\": %d, \"kda\": %d, \"gqa\": %d}, "
           "\"d_model\": %d, \"vocab_size\": %d, \"experts\": %d, \"top_k\": %d, "
           "\"d_expert\": %d, \"d_latent\": %d, \"shared_experts\": %d, \"expert_dtype\": \"%s\", "
           "\"record_bytes\": %llu, \"trunk_bytes\": %llu, \"container_bytes\": %llu, "
           "\"params_total\": %llu, \"params_active\": %llu}\n",
           in.name, in.family, in.n_layers, in.n_moe_layers, in.n_dense_layers, in.n_mla,
           in.n_kda, in.n_gqa, in.d_model, in.vocab_size, in.n_experts, in.top_k, in.d_expert,
           in.d_latent, in.n_shared, in.expert_dtype, (unsigned long long)in.record_bytes,
           (unsigned long long)in.trunk_bytes, (unsigned long long)in.container_bytes,
           (unsigned long long)in.params_total, (unsigned long long)in.params_active);
    return 0;
  }
  char b1[32], b2[32], b3[32];
  printf("model            %s\n", model);
  printf("name             %s (arch %s)\n", in.name, in.family);
  printf("layers           %d (%d dense, %d MoE); attention %d MLA, %d KDA, %d GQA\n",
         in.n_layers, in.n_dense_layers, in.n_moe_layers, in.n_mla, in.n_kda, in.n_gqa);
  printf("d_model          %d, vocab %d\n", in.d_model, in.vocab_size);
  printf("experts          %d per layer, top_k %d, d_expert %d, latent %d, shared %d, %s\n",
         in.n_experts, in.top_k, in.d_expert, in.d_latent, in.n_shared, in.expert_dtype);
  printf("record_bytes     %llu (%s)\n", (unsigned long long)in.record_bytes,
         cli_bytes(in.record_bytes, b1, sizeof b1));
  printf("trunk_bytes      %llu (%s)\n", (unsigned long long)in.trunk_bytes,
         cli_bytes(in.trunk_bytes, b2, sizeof b2));
  printf("container_bytes  %llu (%s)\n", (unsigned long long)in.container_bytes,
         cli_bytes(in.container_bytes, b3, sizeof b3));
  printf("params_total     %llu (%.3f B)\n", (unsigned long long)in.params_total,
         in.params_total / 1e9);
  printf("params_active    %llu (%.3f B, %.1f%%)\n", (unsigned long long)in.params_active,
         in.params_active / 1e9, in.params_total ? 100.0 * in.params_active / in.params_total : 0);
  return 0;
}

int cmd_verify(int argc, char **argv) {
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') {
      fprintf(stderr, "spill verify: unknown option %s\n", argv[i]);
      return 2;
    }
    model = argv[i];
  }
  if (!model) {
    fprintf(stderr, "usage: spill verify MODEL\n");
    return 2;
  }
  cli_progress p;
  cli_progress_init(&p, "verify");
  spill_err e = {0};
  int rc = spill_verify(model, cli_progress_cb, &p, &e);
  if (rc) {
    fprintf(stderr, "spill verify: %s: DEFECT: %s (%s)\n", model, e.msg, spill_status_name(rc));
    return 1;
  }
  fprintf(stderr, "spill verify: %s: clean\n", model);
  return 0;
}
