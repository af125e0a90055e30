/* cli/cmd_gen.c: `spill gen`: writes a synthetic model container (a nano or
 * mini preset, a K3 twin scaled to a RAM size, or a shape fitted to a router
 * trace) through spill_gen (engine/spill.h, docs/GEN.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"
#include "research/gen/spill_gen.h"

const char cmd_gen_usage[] =
    "usage: spill gen --preset nano|mini|twin | --like k3 --ram SIZE [--disk SIZE]\n"
    "                 [--seed N] [--attn k3|k3-family|mla|kda|gqa|gqa-swa|qwen35|gptoss|glm4moe]\n"
    "                 [--trunk-dtype q4|f32] [--expert-dtype rvq3|f32|q8|q4|mxfp4] [--experts N]\n"
    "                 [--lookahead-precision P] [--coact C] [--reuse R] OUT_DIR\n"
    "       spill gen --like-trace TRACE [--preset nano|mini] [other options] OUT_DIR\n"
    "--like-trace: MoE layers, experts per layer and top-k from a router trace\n"
    "(docs/TRACE.md), everything else from the preset (default mini), so that\n"
    "`spill run --routing-trace TRACE` can replay it.\n"
    "--lookahead-precision P: lookahead precision at width 6 the routers are\n"
    "solved for, (0, 1] (default 0.81, published K3); --coact C: co-activation\n"
    "precision, [0, 1) (default 0.575, OLMoE; 0: independent routers); --reuse R:\n"
    "next-token reuse, [0, 1) (default 0.411, OLMoE trace; 0: off, carried by KDA\n"
    "layers only). See docs/GEN.md for what they set and how close a model gets.\n"
    "--attn k3 (default) is Kimi K3 as released (AttnRes, SiTU, gated MLA, KDA gate\n"
    "lower bound, normed routed sum; docs/MODEL.md); k3-family the earlier\n"
    "reconstruction (plain residuals, SwiGLU), as containers written before.\n"
    "--attn gptoss: gpt-oss's graph (sinks, 128-token window on even layers, biases, YaRN,\n"
    "softmax over the chosen top-k, clamped SwiGLU, MXFP4 experts by default, no dense layer);\n"
    "glm4moe: GLM-4.5's (q/k/v biases, RoPE on half of each head, sigmoid router, one shared\n"
    "expert); qwen35: Qwen3.5-MoE's. With --like-trace they take the trace's layers, experts\n"
    "and top-k.\n";

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
      if (strcmp(v, "k3") != 0) return cli_usage_error("--like %s: only k3 is known", v);
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
    } else if (!strcmp(a, "--lookahead-precision") || !strcmp(a, "--coact") ||
               !strcmp(a, "--reuse")) {
      double x;
      if (!(v = cli_value(argc, argv, &i))) return 2;
      char *end = NULL;
      x = strtod(v, &end);
      int la = a[2] == 'l';
      if (!end || end == v || *end || !(la ? (x > 0 && x <= 1) : (x >= 0 && x < 1)))
        return cli_usage_error("%s %s: expected a number in %s", a, v, la ? "(0, 1]" : "[0, 1)");
      if (la) r.lookahead_precision = x;
      else if (a[2] == 'r') r.reuse = x > 0 ? x : -1;
      else r.coact = x > 0 ? x : -1;
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
      return cli_usage_error("unknown option %s", a);
    } else if (!out) {
      out = a;
    } else {
      return cli_usage_error("unexpected argument %s (one output directory only)", a);
    }
  }
  if (!out) return cli_usage_error("no output directory");
  if (!r.preset && !like_trace) return cli_usage_error("--preset, --like or --like-trace needed");
  spill_err e = {0};
  if (like_trace) {
    int rc = spill_gen_request_like_trace(&r, like_trace, &e);
    if (rc) return cli_fail("gen", rc, e.msg);
    fprintf(stderr, "spill gen: like %s: %d MoE layers, %d experts, top-%d, preset %s\n",
            like_trace, r.moe_layers, r.experts, r.top_k, r.preset);
  }
  if (r.ram_bytes && strcmp(r.preset, "twin") != 0)
    return cli_usage_error("--ram applies to --like k3 (the twin) only");
  cli_progress p;
  cli_progress_init(&p, "gen");
  char sum[4096];
  r.summary = sum;
  r.summary_cap = sizeof sum;
  int rc = spill_gen(out, &r, cli_progress_cb, &p, &e);
  if (rc) return cli_fail("gen", rc, e.msg);
  /* what the routers were solved for and what the model predicts (a target
   * out of reach, or reuse not carried, is said here and nowhere else) */
  for (const char *l = sum; *l;) {
    const char *nl = strchr(l, '\n');
    int len = nl ? (int)(nl - l) : (int)strlen(l);
    if (!strncmp(l, "routing:", 8)) fprintf(stderr, "spill gen: %.*s\n", len, l);
    l += len + (nl != NULL);
  }
  spill_info info;
  rc = spill_info_read(out, &info, &e);
  if (rc) return cli_fail("gen", rc, e.msg);
  char b1[32], b2[32], b3[32];
  fprintf(stderr, "spill gen: wrote %s: %s container, trunk %s, %d x %d experts of %s\n", out,
          cli_bytes(info.container_bytes, b1, sizeof b1), cli_bytes(info.trunk_bytes, b2, sizeof b2),
          info.n_moe_layers, info.n_experts, cli_bytes(info.record_bytes, b3, sizeof b3));
  return 0;
}
