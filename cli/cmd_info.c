/* cli/cmd_info.c: `spill info`: a container's shape and sizes from its
 * manifest (spill_info_read; no weights are read), and the expert read
 * backend io_backend auto picks on this machine and why
 * (spill_io_backend_choose), as text or --json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"

const char cmd_info_usage[] = "usage: spill info [--json] MODEL\n";

int cmd_info(int argc, char **argv) {
  int json = 0;
  const char *model = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-') return cli_usage_error("unknown option %s", argv[i]);
    else if (model) return cli_usage_error("unexpected argument %s", argv[i]);
    else model = argv[i];
  }
  if (!model) return cli_usage_error("no model");
  spill_info in;
  spill_err e = {0};
  int rc = spill_info_read(model, &in, &e);
  if (rc) return cli_fail("info", rc, e.msg);
  /* what io_backend auto gives this model's expert reads on this machine
   * (default storage and depth), as spill_engine_open decides it */
  spill_config dc;
  spill_config_default(&dc);
  char why[320];
  const spill_io_backend_kind io =
      spill_io_backend_choose(dc.io_backend, dc.storage, dc.io_depth, why, sizeof why);
  if (json) {
    char *why_q = spill_json_quote(why, strlen(why));
    printf("{\"name\": \"%s\", \"arch\": \"%s\", \"layers\": %d, \"moe_layers\": %d, "
           "\"dense_layers\": %d, \"attn\": {\"mla\": %d, \"kda\": %d, \"gqa\": %d, \"gdn\": %d}, "
           "\"d_model\": %d, \"vocab_size\": %d, \"experts\": %d, \"top_k\": %d, "
           "\"d_expert\": %d, \"d_latent\": %d, \"shared_experts\": %d, \"expert_dtype\": \"%s\", "
           "\"record_bytes\": %llu, \"trunk_bytes\": %llu, \"container_bytes\": %llu, "
           "\"params_total\": %llu, \"params_active\": %llu, \"io_backend\": \"%s\", "
           "\"io_backend_why\": %s}\n",
           in.name, in.family, in.n_layers, in.n_moe_layers, in.n_dense_layers, in.n_mla,
           in.n_kda, in.n_gqa, in.n_gdn, in.d_model, in.vocab_size, in.n_experts, in.top_k, in.d_expert,
           in.d_latent, in.n_shared, in.expert_dtype, (unsigned long long)in.record_bytes,
           (unsigned long long)in.trunk_bytes, (unsigned long long)in.container_bytes,
           (unsigned long long)in.params_total, (unsigned long long)in.params_active,
           spill_io_backend_kind_name(io), why_q ? why_q : "null");
    free(why_q);
    return 0;
  }
  char b1[32], b2[32], b3[32];
  printf("model            %s\n", model);
  printf("name             %s (arch %s)\n", in.name, in.family);
  printf("layers           %d (%d dense, %d MoE); attention %d MLA, %d KDA, %d GQA, %d GDN\n",
         in.n_layers, in.n_dense_layers, in.n_moe_layers, in.n_mla, in.n_kda, in.n_gqa, in.n_gdn);
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
  printf("io_backend       %s (%s; this machine, storage %s)\n", spill_io_backend_kind_name(io),
         why, spill_storage_name(dc.storage));
  return 0;
}
