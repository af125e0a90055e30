/* harness/bench_workload.h: the workload peers report (docs/PERFORMANCE.md
 * "The workload peers report"): llama-bench's pp/tg on the committed prompt
 * set (bench/prompts), each prompt cold and then warm, medians over the
 * prompts. One implementation for `spill bench` (cli/cmd_bench.c) and the
 * experiment runner's workload.bench (harness/exp_runner.c).
 *
 * What a request is: the prompt's tokens (BOS first) cut to pp, or followed
 * by its text's tokens again and again until there are pp; prefilled, then
 * tg greedy tokens. Cold: the expert cache emptied (counters reset) and the
 * container evicted from the page cache before it; warm: the same request
 * again, nothing emptied. A client of libspill only; never prints.
 */
#ifndef SPILL_HARNESS_BENCH_WORKLOAD_H
#define SPILL_HARNESS_BENCH_WORKLOAD_H

#include <stdint.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The prompt set: bench/prompts/NAME.txt, embedded at build time
 * (harness/embed_prompts.sh) in file-name order. */
typedef struct spill_bench_prompt {
  const char *name; /* file base name: "prose", "code", ... */
  const char *text; /* the file's bytes */
} spill_bench_prompt;

extern const spill_bench_prompt spill_bench_prompts[];
extern const int spill_bench_n_prompts;

/* Index of a prompt by name, or -1. */
int spill_bench_prompt_find(const char *name);

/* The phases, in the order they run. */
enum { SPILL_BENCH_COLD = 0, SPILL_BENCH_WARM = 1, SPILL_BENCH_N_PHASES = 2 };
extern const char *const spill_bench_phase_names[SPILL_BENCH_N_PHASES];

/* One request: one prompt in one phase, every figure measured. The peer
 * fills the same struct from its own counters (no expert cache: hits and
 * misses 0). */
typedef struct spill_bench_sample {
  int n_prompt, n_gen;          /* tokens prefilled / generated */
  double pp_ts, tg_ts, ttft_s;  /* prefill and decode rates; the prefill's wall time */
  uint64_t bytes_read;          /* the whole request (prefill, decode, prefetches) */
  uint64_t bytes_read_decode;   /* the generated tokens' own reads */
  uint64_t hits, misses, decode_hits, decode_misses; /* expert cache: request / decode */
  uint64_t peak_rss;            /* VmHWM after the request */
  uint64_t major_faults;        /* during the request */
  double read_bps;              /* bytes_read / (prefill + decode wall time) */
  uint64_t tokens_hash;         /* FNV-1a 64 of the generated ids (as run rows hash them) */
  int paging;                   /* the engine saw the machine paging (spill_run_stats) */
  uint64_t paging_tokens;
} spill_bench_sample;

/* Medians over the prompts of one phase. */
typedef struct spill_bench_summary {
  double pp_ts, tg_ts, ttft_s;
  double bytes_per_tok;         /* bytes_read_decode / n_gen */
  double hit_rate;              /* decode hits / (decode hits + misses) */
  double hit_rate_all;          /* request hits / (hits + misses) */
  double peak_rss, read_bps, misses, decode_misses;
} spill_bench_summary;

/* The request's tokens for prompt text: exactly n ids into out. */
int spill_bench_tokens(spill_engine *eng, const char *text, int *out, int n, spill_err *e);

/* One prompt's requests on eng: cold (expert cache emptied, counters reset,
 * page cache evicted), then, when n_phases is 2, warm (the same request
 * again). out[0..n_phases) get the samples. stop as spill_generate's
 * (SPILL_E_INTERRUPTED). */
int spill_bench_run_prompt(spill_engine *eng, const int *toks, int pp, int tg, int n_phases,
                           volatile int *stop, spill_bench_sample *out, spill_err *e);

double spill_bench_sample_hit_rate(const spill_bench_sample *s);     /* decode; 0 if none */
double spill_bench_sample_hit_rate_all(const spill_bench_sample *s); /* request; 0 if none */
double spill_bench_sample_bytes_per_tok(const spill_bench_sample *s);

/* The medians of s[0..n) (n >= 1). */
void spill_bench_summarize(const spill_bench_sample *s, int n, spill_bench_summary *out);
/* The median of v[0..n) (sorts v; n >= 1). */
double spill_bench_median(double *v, int n);

#ifdef __cplusplus
}
#endif
#endif
