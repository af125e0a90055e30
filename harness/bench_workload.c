/* harness/bench_workload.c: one prompt's cold and warm requests and the
 * medians over prompts (harness/bench_workload.h).
 *
 * The decode's own bytes are summed from the token callback's per-token
 * deltas (the prompt's reads are not in them), and the generated ids are
 * hashed as the runner hashes a run's tokens, so a warm request can be
 * checked against its cold twin (placement never changes numerics).
 */
#include "harness/bench_workload.h"

#include <stdlib.h>
#include <string.h>

int spill_bench_tokens(spill_engine *eng, const char *text, int *out, int n, spill_err *e) {
  int cap = (int)strlen(text) + 64, nh = 0, nb = 0;
  int *head = malloc(sizeof(int) * (size_t)cap), *body = malloc(sizeof(int) * (size_t)cap);
  int rc = head && body ? SPILL_OK : spill_err_set(e, SPILL_E_NOMEM, "bench: out of memory");
  if (!rc) rc = spill_tokenize(eng, text, 1, head, cap, &nh, e);
  if (!rc) rc = spill_tokenize(eng, text, 0, body, cap, &nb, e);
  if (!rc && nb < 1) rc = spill_err_set(e, SPILL_E_INVALID_ARG, "bench: a prompt has no tokens");
  for (int i = 0; !rc && i < n; i++) out[i] = i < nh ? head[i] : body[(i - nh) % nb];
  free(head);
  free(body);
  return rc;
}

typedef struct decode_acc {
  uint64_t bytes;
  uint64_t hash; /* FNV-1a 64 over the ids' bytes, as spill_exp_fnv1a */
} decode_acc;

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)text;
  decode_acc *a = user;
  a->bytes += ts ? ts->bytes_read : 0;
  const unsigned char *p = (const unsigned char *)&token;
  for (size_t i = 0; i < sizeof token; i++) {
    a->hash ^= p[i];
    a->hash *= 0x100000001b3ull;
  }
  return 0;
}

static int request(spill_engine *eng, const int *toks, int pp, int tg, volatile int *stop,
                   spill_bench_sample *o, spill_err *e) {
  spill_sampling s;
  spill_sampling_default(&s);
  spill_run_stats st;
  decode_acc acc = {0, 0xcbf29ce484222325ull};
  SPILL_TRY(spill_generate(eng, toks, pp, tg, &s, on_token, &acc, stop, &st, e));
  memset(o, 0, sizeof *o);
  o->n_prompt = st.tokens_prefill;
  o->n_gen = st.tokens_decode;
  o->pp_ts = st.prefill_s > 0 ? st.tokens_prefill / st.prefill_s : 0;
  o->tg_ts = st.decode_s > 0 ? st.tokens_decode / st.decode_s : 0;
  o->ttft_s = st.prefill_s;
  o->bytes_read = st.bytes_read;
  o->bytes_read_decode = acc.bytes;
  o->hits = st.demand_hits;
  o->misses = st.demand_misses;
  o->decode_hits = st.decode_hits;
  o->decode_misses = st.decode_misses;
  o->peak_rss = st.peak_rss_bytes;
  o->major_faults = st.major_faults;
  double t = st.prefill_s + st.decode_s;
  o->read_bps = t > 0 ? st.bytes_read / t : 0;
  o->tokens_hash = acc.hash;
  o->paging = st.paging;
  o->paging_tokens = st.paging_tokens;
  return SPILL_OK;
}

int spill_bench_run_prompt(spill_engine *eng, const int *toks, int pp, int tg, int n_phases,
                           volatile int *stop, spill_bench_sample *out, spill_err *e) {
  SPILL_TRY(spill_engine_clear_cache(eng, 1, e));
  SPILL_TRY(spill_engine_evict_page_cache(eng, e));
  for (int ph = 0; ph < n_phases && ph < SPILL_BENCH_N_PHASES; ph++)
    SPILL_TRY(request(eng, toks, pp, tg, stop, &out[ph], e));
  return SPILL_OK;
}
