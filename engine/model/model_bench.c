/* engine/model/model_bench.c: decode speed of the forward pass (manual tool,
 * not a test). Writes a synthetic container with research/gen if `dir` has no
 * manifest yet, opens it with the built-in synchronous expert source, runs a
 * short prompt and then greedy decode, and prints tokens/s and the time
 * split of spill_model_stats.
 *   model_bench DIR [preset=nano] [mix=k3] [threads=1] [n_decode=64] [ctx=512]
 *               [prefill_logits_out.f32]
 * Env SPILL_BENCH_TRUNK=f32 and SPILL_BENCH_EXPERTS=f32|q8|q4|rvq3 change the
 * generated container. The last argument writes the prompt's last logits (raw f32) for comparison
 * with tools/reference/spill_ref.py --prompt "The quick brown fox".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "research/gen/synth.h"
#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/model/tokenizer.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [preset] [mix] [threads] [n_decode] [ctx]\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  const char *preset = argc > 2 ? argv[2] : "nano";
  const char *mix = argc > 3 ? argv[3] : "k3";
  const int threads = argc > 4 ? atoi(argv[4]) : 1;
  const int n_decode = argc > 5 ? atoi(argv[5]) : 64;
  const int ctx = argc > 6 ? atoi(argv[6]) : 512;
  spill_err e = {0};
  char mpath[4096];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
  if (access(mpath, F_OK) != 0) {
    spill_gen_opts go;
    spill_gen_opts_init(&go);
    go.preset = preset;
    go.attn_mix = mix;
    const char *tr = getenv("SPILL_BENCH_TRUNK"), *ed = getenv("SPILL_BENCH_EXPERTS");
    if (tr && strcmp(tr, "f32") == 0) go.trunk = SPILL_GEN_TRUNK_F32;
    if (ed && spill_dtype_parse(ed, &go.expert_dtype) < 0) {
      fprintf(stderr, "bad SPILL_BENCH_EXPERTS %s\n", ed);
      return 2;
    }
    uint64_t t0 = spill_clock_ns();
    if (spill_gen_write(dir, &go, &e) < 0) {
      fprintf(stderr, "gen: %s\n", e.msg);
      return 1;
    }
    fprintf(stderr, "generated %s %s in %.1f s\n", preset, mix, spill_clock_ms(t0, spill_clock_ns()) / 1e3);
  }
  spill_model_opts o = {0};
  o.n_threads = threads;
  o.ctx = ctx;
  spill_model *m = NULL;
  uint64_t t0 = spill_clock_ns();
  if (spill_model_open(dir, &o, &m, &e) < 0) {
    fprintf(stderr, "open: %s\n", e.msg);
    return 1;
  }
  const double open_ms = spill_clock_ms(t0, spill_clock_ns());
  const spill_arch *a = spill_model_arch(m);
  int toks[64], n = 0;
  const char *prompt = "The quick brown fox";
  if (spill_tokenizer_encode(a, prompt, strlen(prompt), 1, toks, 64, &n, &e) < 0) return 1;
  float *logits = malloc((size_t)a->vocab_size * sizeof(float));
  t0 = spill_clock_ns();
  if (spill_model_forward(m, toks, n, 0, logits, &e) < 0) {
    fprintf(stderr, "prefill: %s\n", e.msg);
    return 1;
  }
  const double prefill_ms = spill_clock_ms(t0, spill_clock_ns());
  if (argc > 7) {
    FILE *f = fopen(argv[7], "wb");
    if (!f || fwrite(logits, sizeof(float), (size_t)a->vocab_size, f) != (size_t)a->vocab_size) {
      fprintf(stderr, "cannot write %s\n", argv[7]);
      return 1;
    }
    fclose(f);
  }
  int pos = n, tok = spill_sampler_argmax(logits, a->vocab_size);
  spill_model_stats sum = {0};
  t0 = spill_clock_ns();
  for (int i = 0; i < n_decode && pos < ctx; i++) {
    if (spill_model_forward(m, &tok, 1, pos++, logits, &e) < 0) {
      fprintf(stderr, "decode: %s\n", e.msg);
      return 1;
    }
    const spill_model_stats *s = spill_model_last_stats(m);
    sum.ns_attn += s->ns_attn;
    sum.ns_router += s->ns_router;
    sum.ns_lut += s->ns_lut;
    sum.ns_expert += s->ns_expert;
    sum.ns_expert_wait += s->ns_expert_wait;
    sum.ns_lm_head += s->ns_lm_head;
    sum.ns_other += s->ns_other;
    sum.ns_total += s->ns_total;
    tok = spill_sampler_argmax(logits, a->vocab_size);
  }
  const double dec_s = spill_clock_ms(t0, spill_clock_ns()) / 1e3;
  const double tot = (double)sum.ns_total;
  printf("%s/%s threads %d: open %.1f ms, prefill %d tok %.2f ms, decode %d tok %.3f s = %.1f tok/s\n",
         preset, mix, threads, open_ms, n, prefill_ms, n_decode, dec_s, n_decode / dec_s);
  printf("  split: attn %.1f%% router %.1f%% lut %.1f%% expert %.1f%% wait %.1f%% lm_head %.1f%% other %.1f%%\n",
         100 * sum.ns_attn / tot, 100 * sum.ns_router / tot, 100 * sum.ns_lut / tot,
         100 * sum.ns_expert / tot, 100 * sum.ns_expert_wait / tot, 100 * sum.ns_lm_head / tot,
         100 * sum.ns_other / tot);
  printf("  trunk %.1f MB, state %.1f MB at ctx %d\n", spill_model_trunk_bytes(m) / 1e6,
         spill_model_state_bytes(a, ctx, o.max_chunk) / 1e6, ctx);
  free(logits);
  spill_model_close(m);
  return 0;
}
