/* research/spec/spill_spec_measure.c: the engine's own expert bytes per
 * generated token with drafts on and off (issue 31 item 3, docs/MODEL.md
 * "Drafts", measured in docs/DRAFTS.md). A random-weight model never repeats
 * itself, so n-gram drafts of its output are not accepted; to measure the
 * cost side at a known acceptance, the drafts here are the model's own greedy
 * continuation (from a run without drafts: every draft would be accepted),
 * (spill_engine_set_draft_source), cut after j of every chunk's k drafts by
 * the knob draft_accept_max (j = k:
 * all accepted, j = k/2: half, j = 0: none). The n-gram lookup itself is run
 * too ("lookup"). Every run opens a fresh engine (cold cache, same budget),
 * and checks that its tokens, and the logits held after each, equal the run
 * without drafts (exit 1 otherwise). --check also cuts every chunk at each
 * position j = 0..K-1 in turn (the rollback at every position; used by
 * //tools/reference:kimi_k3_import_test on K3-as-released models).
 * Usage: spill_spec_measure MODEL [--budget SIZE] [-n N] [--draft K] [--prompt TEXT] [--check]
 * Prints one JSON line per run. Counters are exact; times are wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/crc32.h"
#include "engine/spill.h"
#include "engine/spill_internal.h"

typedef struct run_out {
  int toks[4096];
  uint32_t crc[4096]; /* crc32 of the logits held after each token */
  spill_engine *g;
  int n;
  uint64_t decode_bytes, decode_reads, decode_requested;
} run_out;

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)text;
  run_out *r = user;
  if (r->n < 4096) {
    r->crc[r->n] = spill_crc32(0, spill_engine_conv_of(r->g)->logits,
                               (size_t)spill_vocab_size(r->g) * sizeof(float));
    r->toks[r->n++] = token;
  }
  r->decode_bytes += ts->bytes_read;
  r->decode_reads += ts->reads;
  r->decode_requested += ts->experts_requested;
  return 0;
}

/* the draft source (NULL: the n-gram lookup) and draft_accept_max (-1: off) of the next runs */
static const int *g_src;
static int g_src_n, g_accept_max = -1;

static int run(const char *model, const char *budget, const char *prompt, int n_new, int draft,
               int adaptive, const char *mode, run_out *out, const run_out *ref) {
  spill_config cfg;
  spill_config_default(&cfg);
  spill_err e = {0};
  if (spill_config_set(&cfg, "budget", budget, &e) < 0) return fprintf(stderr, "%s\n", e.msg), 1;
  cfg.ctx = 1024;
  cfg.draft = draft;
  cfg.draft_adaptive = adaptive;
  cfg.draft_accept_max = g_accept_max;
  if (cfg.prefill_chunk < draft + 1) cfg.prefill_chunk = draft + 1;
  spill_engine *g = NULL;
  if (spill_engine_open(model, &cfg, &g, &e) < 0) return fprintf(stderr, "open: %s\n", e.msg), 1;
  if (draft > 0 && spill_engine_set_draft_source(g, g_src, g_src_n, &e) < 0)
    return fprintf(stderr, "draft source: %s\n", e.msg), spill_engine_close(g), 1;
  int toks[1024], n = 0;
  if (spill_tokenize(g, prompt, 1, toks, 1024, &n, &e) < 0)
    return fprintf(stderr, "tokenize: %s\n", e.msg), 1;
  spill_sampling s;
  spill_sampling_default(&s);
  spill_run_stats st;
  memset(out, 0, sizeof *out);
  out->g = g;
  int rc = spill_generate(g, toks, n, n_new, &s, on_token, out, NULL, &st, &e);
  if (rc < 0) return fprintf(stderr, "generate: %s\n", e.msg), 1;
  /* the same tokens, and the same logits after every one of them */
  const int same = !ref || (ref->n == out->n && !memcmp(ref->toks, out->toks, sizeof(int) * out->n) &&
                            !memcmp(ref->crc, out->crc, sizeof(uint32_t) * out->n));
  printf("{\"mode\": \"%s\", \"draft\": %d, \"adaptive\": %d, \"tokens\": %d, \"same_tokens\": %s, "
         "\"drafted\": %llu, \"accepted\": %llu, \"forwards\": %llu, \"switched_off\": %llu, "
         "\"cache_slots\": %llu, \"decode_reads\": %llu, \"decode_bytes\": %llu, "
         "\"decode_bytes_per_token\": %.0f, \"requested_per_token\": %.2f, \"decode_s\": %.3f, "
         "\"tok_per_s\": %.3f}\n",
         mode, draft, adaptive, st.tokens_decode, same ? "true" : "false",
         (unsigned long long)st.draft_tokens, (unsigned long long)st.draft_accepted,
         (unsigned long long)st.decode_forwards, (unsigned long long)st.draft_switched_off,
         (unsigned long long)spill_engine_plan(g)->cache_slots,
         (unsigned long long)out->decode_reads, (unsigned long long)out->decode_bytes,
         st.tokens_decode ? (double)out->decode_bytes / st.tokens_decode : 0.0,
         st.tokens_decode ? (double)out->decode_requested / st.tokens_decode : 0.0, st.decode_s,
         st.decode_tok_per_s);
  fflush(stdout);
  spill_engine_close(g);
  return same ? 0 : 1;
}

int main(int argc, char **argv) {
  const char *model = NULL, *budget = "default";
  const char *prompt = "Experts stream from the disk, one aligned read each.";
  int n_new = 64, k = 4, check = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = argv[++i];
    else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_new = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--draft") && i + 1 < argc) k = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) prompt = argv[++i];
    else if (!strcmp(argv[i], "--check")) check = 1;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: spill_spec_measure MODEL [--budget SIZE] [-n N] [--draft K] [--prompt TEXT] [--check]\n");
      return 0;
    } else if (argv[i][0] != '-' && !model) model = argv[i];
    else return fprintf(stderr, "usage: spill_spec_measure MODEL [--budget SIZE] [-n N] "
                                "[--draft K] [--prompt TEXT]\n"), 2;
  }
  if (!model || n_new < 1 || n_new > 4000 || k < 1 || k > 15)
    return fprintf(stderr, "usage: spill_spec_measure MODEL [--budget SIZE] [-n N] [--draft K]\n"), 2;
  static run_out ref, out;
  int bad = run(model, budget, prompt, n_new, 0, 1, "off", &ref, NULL);
  if (bad) return 1;
  /* the conversation the drafts are taken from: BOS + prompt + reply */
  static int conv[8192];
  int nc = 0;
  {
    spill_config cfg;
    spill_config_default(&cfg);
    spill_engine *g = NULL;
    spill_err e = {0};
    cfg.ctx = 1024;
    if (spill_engine_open(model, &cfg, &g, &e) < 0) return 1;
    spill_tokenize(g, prompt, 1, conv, 1024, &nc, &e);
    spill_engine_close(g);
  }
  for (int i = 0; i < ref.n && nc < 8192; i++) conv[nc++] = ref.toks[i];
  bad |= run(model, budget, prompt, n_new, k, 1, "lookup", &out, &ref);
  g_src = conv;
  g_src_n = nc;
  const int cuts[3] = {-1, k / 2, 0};
  const char *names[3] = {"all-accepted", "half-accepted", "none-accepted"};
  for (int c = 0; c < 3; c++) {
    g_accept_max = cuts[c];
    bad |= run(model, budget, prompt, n_new, k, 0, names[c], &out, &ref);
  }
  g_accept_max = 0;
  bad |= run(model, budget, prompt, n_new, k, 1, "none-accepted", &out, &ref);
  g_accept_max = k / 2;
  bad |= run(model, budget, prompt, n_new, k, 1, "half-accepted", &out, &ref);
  g_accept_max = -1;
  bad |= run(model, budget, prompt, n_new, k, 1, "all-accepted", &out, &ref);
  for (int j = 0; check && j < k; j++) {
    char name[32];
    snprintf(name, sizeof name, "cut-at-%d", j);
    g_accept_max = j;
    bad |= run(model, budget, prompt, n_new, k, 0, name, &out, &ref);
  }
  return bad;
}
