/* cli/cmd_bench.c: `spill bench`: the workload that peers report
 * (llama-bench's pp512 and tg128) on the embedded prompt set
 * (bench/prompts), each prompt cold and then warm, medians over the prompts,
 * printed as llama-bench prints (markdown, CSV, JSON); and the single fixed
 * request of before (--json / --prompt: a prompt, N greedy tokens, cold
 * expert cache), which scripts and docs/SERVER.md rely on. The roofline is
 * its own command (cmd_roofline.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/spill.h"
#include "harness/bench_workload.h"

const char cmd_bench_usage[] =
    "usage: spill bench [--pp N] [--tg N] [--output md|csv|json] MODEL [engine knobs]\n"
    "       spill bench [--json] [--prompt TEXT] [-n N] MODEL [engine knobs]\n"
    "The workload peers report (docs/PERFORMANCE.md): for each prompt of the\n"
    "embedded set (bench/prompts: prose, code, chat, table), one request that\n"
    "prefills N prompt tokens (--pp, -p; 512) and generates N greedy tokens (--tg,\n"
    "-n; 128), run cold (expert cache emptied, container evicted from the page\n"
    "cache) and then warm (the same request again). The prompt's tokens (BOS\n"
    "first) are cut, or repeated from its start, to exactly the pp count;\n"
    "synthetic models have no tokenizer: one token per byte of the text.\n"
    "One row per phase, medians over the prompts: pp t/s, tg t/s, TTFT (time to\n"
    "first token: the prefill), GB read per generated token, decode hit rate, peak\n"
    "RSS (VmHWM), and the request's read bandwidth as a share of the drive's\n"
    "O_DIRECT bandwidth probed in the same run (sequential, as env.json's probe).\n"
    "  --output, -o F  md (llama-bench's markdown table, the default), csv, json\n"
    "                  (llama-bench's shapes; json adds every prompt's sample)\n"
    "With --json or --prompt: one request instead (prompt \"The quick brown fox\"\n"
    "or TEXT, -n N greedy decode tokens (16), cold expert cache), summarised on\n"
    "stderr, or as one JSON object with --json.\n" CLI_TUNED_HELP;

/* ------------------------------------------------------------ the single request */

static void print_single_json(const char *model, spill_engine *eng, const spill_run_stats *st) {
  const spill_config *c = spill_engine_config(eng);
  uint64_t acc = st->demand_hits + st->demand_misses;
  printf("{\"model\": \"%s\", \"prompt_tokens\": %d, \"tokens\": %d, \"tok_per_s\": %.4f, \"decode_s\": %.4f, "
         "\"prefill_s\": %.4f, \"hits\": %llu, \"misses\": %llu, \"hit_rate\": %.4f, "
         "\"decode_hits\": %llu, \"decode_misses\": %llu, "
         "\"bytes_read\": %llu, \"reads\": %llu, \"io_wait_s\": %.4f, \"expert_wait_threads_s\": %.4f, "
         "\"major_faults\": %llu, "
         "\"storage\": \"%s\", \"io_backend\": \"%s\", \"policy\": \"%s\", \"lookahead\": %d, "
         "\"cache_slots\": %llu, \"budget\": %llu, \"threads\": %d, "
         "\"parallel_sections\": %llu, \"parallel_sections_moe\": %llu, "
         "\"ctx_switches_voluntary\": %llu, "
         "\"ctx_switches_involuntary\": %llu, \"max_reads_in_flight\": %llu, \"io_throttle\": %llu, \"emulated_device\": %s, "
         "\"routing_trace\": %s%s%s, \"lookahead_precision_by_rank\": [",
         model, st->tokens_prefill, st->tokens_decode, st->decode_tok_per_s, st->decode_s,
         st->prefill_s, (unsigned long long)st->demand_hits,
         (unsigned long long)st->demand_misses, acc ? (double)st->demand_hits / acc : 0.0,
         (unsigned long long)st->decode_hits, (unsigned long long)st->decode_misses,
         (unsigned long long)st->bytes_read, (unsigned long long)st->reads, st->io_wait_s,
         st->expert_wait_threads_s, (unsigned long long)st->major_faults, spill_storage_name(c->storage),
         spill_io_backend_kind_name(c->io_backend), c->policy, c->lookahead,
         (unsigned long long)(c->storage == SPILL_STORAGE_MMAP ? 0
                              : c->cache_slots >= 0         ? (uint64_t)c->cache_slots
                                                            : spill_engine_plan(eng)->cache_slots),
         (unsigned long long)spill_engine_plan(eng)->budget, c->threads,
         (unsigned long long)st->compute_parallel_sections,
         (unsigned long long)st->compute_parallel_sections_moe,
         (unsigned long long)st->ctx_switches_voluntary,
         (unsigned long long)st->ctx_switches_involuntary,
         (unsigned long long)st->max_reads_in_flight, (unsigned long long)c->io_throttle,
         c->io_throttle ? "true" : "false", c->routing_trace ? "\"" : "",
         c->routing_trace ? c->routing_trace : "null", c->routing_trace ? "\"" : "");
  int nr = c->lookahead < SPILL_LA_RANKS ? c->lookahead : SPILL_LA_RANKS;
  for (int r = 0; r < nr; r++)
    printf("%s%.4f", r ? ", " : "",
           st->lookahead_rank_made[r]
               ? (double)st->lookahead_rank_correct[r] / st->lookahead_rank_made[r]
               : 0.0);
  char *why = spill_json_quote(spill_engine_io_backend_why(eng),
                               strlen(spill_engine_io_backend_why(eng)));
  printf("], \"io_backend_why\": %s}\n", why ? why : "null");
  free(why);
}

static int bench_single(const char *model, const spill_config *cfg, const char *prompt,
                        long n_new, int json) {
  spill_engine *eng;
  if (cli_open_engine("bench", model, cfg, &eng)) return 1;
  int toks[4096], n = 0;
  spill_err e = {0};
  int rc = spill_tokenize(eng, prompt, 1, toks, 4096, &n, &e);
  if (!rc) rc = spill_engine_clear_cache(eng, 1, &e);
  spill_run_stats st;
  spill_sampling s;
  spill_sampling_default(&s);
  if (!rc) rc = spill_generate(eng, toks, n, (int)n_new, &s, NULL, NULL, NULL, &st, &e);
  if (rc) {
    spill_engine_close(eng);
    return cli_fail("bench", rc, e.msg);
  }
  if (json) print_single_json(model, eng, &st);
  else cli_print_run_summary(eng, &st);
  spill_engine_close(eng);
  return 0;
}

/* ------------------------------------------------------------ the workload */

typedef enum { OUT_MD, OUT_CSV, OUT_JSON } out_format;
enum { N_PHASES = SPILL_BENCH_N_PHASES, MAX_PROMPTS = 64 };
#define phase_names spill_bench_phase_names

/* Every request of the workload (harness/bench_workload.h), and what the
 * rows print beside them. */
typedef struct bench_run {
  const char *model;
  long pp, tg;
  double drive_bps; /* O_DIRECT probe; 0 = unavailable */
  char drive_file[1400];
  spill_info info;
  const spill_config *cfg;
  uint64_t budget;
  spill_bench_sample s[N_PHASES][MAX_PROMPTS]; /* [phase][prompt] */
  int n;
} bench_run;

/* Every prompt, cold then warm. */
static int bench_measure(spill_engine *eng, bench_run *R, spill_err *e) {
  int *toks = malloc(sizeof(int) * (size_t)R->pp);
  if (!toks) return spill_err_set(e, SPILL_E_NOMEM, "bench: out of memory");
  int rc = SPILL_OK;
  R->n = spill_bench_n_prompts < MAX_PROMPTS ? spill_bench_n_prompts : MAX_PROMPTS;
  for (int p = 0; p < R->n && !rc; p++) {
    spill_bench_sample o[N_PHASES];
    rc = spill_bench_tokens(eng, spill_bench_prompts[p].text, toks, (int)R->pp, e);
    if (!rc) rc = spill_bench_run_prompt(eng, toks, (int)R->pp, (int)R->tg, N_PHASES, NULL, o, e);
    for (int ph = 0; ph < N_PHASES && !rc; ph++) {
      R->s[ph][p] = o[ph];
      fprintf(stderr, "spill bench: %-6s %s: pp%d %.2f t/s, tg%d %.2f t/s, decode hits %llu misses %llu\n",
              spill_bench_prompts[p].name, phase_names[ph], o[ph].n_prompt, o[ph].pp_ts,
              o[ph].n_gen, o[ph].tg_ts, (unsigned long long)o[ph].decode_hits,
              (unsigned long long)o[ph].decode_misses);
      if (o[ph].n_gen < R->tg)
        fprintf(stderr, "spill bench: warning: %s %s stopped at EOS after %d of %ld tokens\n",
                spill_bench_prompts[p].name, phase_names[ph], o[ph].n_gen, R->tg);
    }
  }
  free(toks);
  return rc;
}

/* ------------------------------------------------------------ one row per phase */

static spill_bench_summary bench_row_of(const bench_run *R, int ph) {
  spill_bench_summary r;
  spill_bench_summarize(R->s[ph], R->n, &r);
  return r;
}

static void size_text(uint64_t b, char *buf, size_t n) {
  if (b < (1ull << 30)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
  else snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
}

static void print_md(const bench_run *R) {
  char size[32], test[48];
  size_text(R->info.container_bytes, size, sizeof size);
  snprintf(test, sizeof test, "pp%ld+tg%ld", R->pp, R->tg);
  printf("| model | size | test | phase | pp t/s | tg t/s | TTFT ms | GB/tok | hit %% | "
         "peak RSS | drive %% |\n");
  printf("| ----- | ---: | ---- | ----- | -----: | -----: | ------: | -----: | ----: | "
         "-------: | ------: |\n");
  for (int ph = 0; ph < N_PHASES; ph++) {
    spill_bench_summary r = bench_row_of(R, ph);
    char rss[32], drive[32];
    size_text((uint64_t)r.peak_rss, rss, sizeof rss);
    if (R->drive_bps > 0) snprintf(drive, sizeof drive, "%.1f", 100 * r.read_bps / R->drive_bps);
    else snprintf(drive, sizeof drive, "n/a");
    printf("| %s | %s | %s | %s | %.2f | %.2f | %.1f | %.3g | %.1f | %s | %s |\n", R->info.name,
           size, test, phase_names[ph], r.pp_ts, r.tg_ts, r.ttft_s * 1e3, r.bytes_per_tok / 1e9,
           100 * r.hit_rate, rss, drive);
  }
  printf("\nmedians over %d prompts (", R->n);
  for (int p = 0; p < R->n; p++) printf("%s%s", p ? ", " : "", spill_bench_prompts[p].name);
  char budget[32];
  size_text(R->budget, budget, sizeof budget);
  printf("); storage %s, threads %d, budget %s; drive: ", spill_storage_name(R->cfg->storage),
         R->cfg->threads, budget);
  if (R->drive_bps > 0) printf("O_DIRECT %.1f MB/s (%s)\n", R->drive_bps / 1e6, R->drive_file);
  else printf("O_DIRECT probe failed (n/a)\n");
}

/* The fields of CSV and JSON rows, in order (llama-bench's names where it has one). */
static const char *const row_fields[] = {
    "model_filename", "model_type", "model_size", "n_threads", "storage", "budget",
    "n_prompt", "n_gen", "test", "phase", "n_prompts", "pp_ts", "tg_ts", "ttft_ms",
    "gb_per_token", "bytes_read_per_token", "decode_hit_rate", "decode_misses", "hit_rate", "misses",
    "peak_rss_bytes", "read_bytes_per_s", "drive_bytes_per_s", "drive_share"};
enum { N_ROW_FIELDS = sizeof row_fields / sizeof row_fields[0] };

/* s in double quotes, escaped for JSON (json) or CSV (a quote doubled). */
static void quoted(const char *s, int json, char *b, size_t n) {
  size_t k = 0;
  if (n < 3) return;
  b[k++] = '"';
  for (; *s && k + 4 < n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20) continue; /* control bytes dropped */
    if (c == '"') b[k++] = json ? '\\' : '"';
    else if (c == '\\' && json) b[k++] = '\\';
    b[k++] = (char)c;
  }
  b[k++] = '"';
  b[k] = 0;
}

/* Field i of phase ph's row as text (CSV quoting or JSON types by `json`). */
static void row_value(const bench_run *R, int ph, const spill_bench_summary *r, int i, int json,
                      char *b, size_t n) {
  const char *q = json ? "\"" : "";
  switch (i) {
  case 0: quoted(R->model, json, b, n); break;
  case 1: quoted(R->info.name, json, b, n); break;
  case 2: snprintf(b, n, "%llu", (unsigned long long)R->info.container_bytes); break;
  case 3: snprintf(b, n, "%d", R->cfg->threads); break;
  case 4: snprintf(b, n, "%s%s%s", q, spill_storage_name(R->cfg->storage), q); break;
  case 5: snprintf(b, n, "%llu", (unsigned long long)R->budget); break;
  case 6: snprintf(b, n, "%ld", R->pp); break;
  case 7: snprintf(b, n, "%ld", R->tg); break;
  case 8: snprintf(b, n, "%spp%ld+tg%ld%s", q, R->pp, R->tg, q); break;
  case 9: snprintf(b, n, "%s%s%s", q, phase_names[ph], q); break;
  case 10: snprintf(b, n, "%d", R->n); break;
  case 11: snprintf(b, n, "%.6g", r->pp_ts); break;
  case 12: snprintf(b, n, "%.6g", r->tg_ts); break;
  case 13: snprintf(b, n, "%.6g", r->ttft_s * 1e3); break;
  case 14: snprintf(b, n, "%.6g", r->bytes_per_tok / 1e9); break;
  case 15: snprintf(b, n, "%.1f", r->bytes_per_tok); break;
  case 16: snprintf(b, n, "%.6g", r->hit_rate); break;
  case 17: snprintf(b, n, "%.1f", r->decode_misses); break;
  case 18: snprintf(b, n, "%.6g", r->hit_rate_all); break;
  case 19: snprintf(b, n, "%.1f", r->misses); break;
  case 20: snprintf(b, n, "%.0f", r->peak_rss); break;
  case 21: snprintf(b, n, "%.6g", r->read_bps); break;
  case 22: snprintf(b, n, "%.6g", R->drive_bps); break;
  default:
    if (R->drive_bps > 0) snprintf(b, n, "%.6g", r->read_bps / R->drive_bps);
    else snprintf(b, n, "%s", json ? "null" : "");
  }
}

static void print_csv(const bench_run *R) {
  for (int i = 0; i < N_ROW_FIELDS; i++) printf("%s%s", i ? "," : "", row_fields[i]);
  printf("\n");
  for (int ph = 0; ph < N_PHASES; ph++) {
    spill_bench_summary r = bench_row_of(R, ph);
    char b[1500];
    for (int i = 0; i < N_ROW_FIELDS; i++) {
      row_value(R, ph, &r, i, 0, b, sizeof b);
      printf("%s%s", i ? "," : "", b);
    }
    printf("\n");
  }
}

static void print_json_samples(const bench_run *R, int ph) {
  printf("    \"samples\": [\n");
  for (int p = 0; p < R->n; p++) {
    const spill_bench_sample *s = &R->s[ph][p];
    printf("      {\"prompt\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, \"pp_ts\": %.6g, "
           "\"tg_ts\": %.6g, \"ttft_ms\": %.6g, \"bytes_read\": %llu, \"bytes_read_decode\": %llu, "
           "\"hits\": %llu, \"misses\": %llu, \"decode_hits\": %llu, \"decode_misses\": %llu, "
           "\"decode_hit_rate\": %.6g, \"peak_rss_bytes\": %llu, \"read_bytes_per_s\": %.6g}%s\n",
           spill_bench_prompts[p].name, s->n_prompt, s->n_gen, s->pp_ts, s->tg_ts, s->ttft_s * 1e3,
           (unsigned long long)s->bytes_read, (unsigned long long)s->bytes_read_decode,
           (unsigned long long)s->hits, (unsigned long long)s->misses,
           (unsigned long long)s->decode_hits,
           (unsigned long long)s->decode_misses, spill_bench_sample_hit_rate(s),
           (unsigned long long)s->peak_rss, s->read_bps, p + 1 < R->n ? "," : "");
  }
  printf("    ]\n");
}

static void print_json(const bench_run *R) {
  printf("[\n");
  for (int ph = 0; ph < N_PHASES; ph++) {
    spill_bench_summary r = bench_row_of(R, ph);
    char b[1500];
    printf("  {\n");
    for (int i = 0; i < N_ROW_FIELDS; i++) {
      row_value(R, ph, &r, i, 1, b, sizeof b);
      printf("    \"%s\": %s,\n", row_fields[i], b);
    }
    print_json_samples(R, ph);
    printf("  }%s\n", ph + 1 < N_PHASES ? "," : "");
  }
  printf("]\n");
}

static int bench_workload(const char *model, const spill_config *cfg, long pp, long tg,
                          out_format fmt) {
  bench_run *R = calloc(1, sizeof *R);
  if (!R) return cli_fail("bench", SPILL_E_NOMEM, "out of memory");
  R->model = model;
  R->pp = pp;
  R->tg = tg;
  spill_engine *eng;
  if (cli_open_engine("bench", model, cfg, &eng)) {
    free(R);
    return 1;
  }
  R->info = *spill_engine_info(eng);
  R->cfg = spill_engine_config(eng);
  R->budget = spill_engine_plan(eng)->budget;
  /* the drive's own ceiling, in this run: one sequential O_DIRECT pass */
  spill_disk_probe_opts po = {.mode = SPILL_PROBE_SEQUENTIAL};
  spill_disk_probe_result pr;
  memset(&pr, 0, sizeof pr);
  spill_err e = {0};
  if (spill_disk_probe(model, &po, &pr, &e) == SPILL_OK) {
    R->drive_bps = pr.bytes_per_s;
    snprintf(R->drive_file, sizeof R->drive_file, "%s", pr.file);
  } else {
    fprintf(stderr, "spill bench: warning: no drive ceiling (drive %% is n/a): %s\n", e.msg);
  }
  memset(&e, 0, sizeof e);
  int rc = bench_measure(eng, R, &e);
  if (!rc) {
    if (fmt == OUT_CSV) print_csv(R);
    else if (fmt == OUT_JSON) print_json(R);
    else print_md(R);
  }
  spill_engine_close(eng);
  free(R);
  return rc ? cli_fail("bench", rc, e.msg) : 0;
}

int cmd_bench(int argc, char **argv) {
  spill_config cfg;
  spill_config_default(&cfg);
  int json = 0, fmt = -1;
  long n_new = -1, pp = -1;
  const char *model = NULL, *v, *prompt = NULL;
  cli_tuned tuned = {0};
  for (int i = 1; i < argc; i++) {
    int k = cli_knob_flag(argc, argv, &i, CLI_KNOBS_CONFIG, &cfg, NULL);
    if (!k) k = cli_tuned_flag(argc, argv, &i, &tuned);
    if (k < 0) return 2;
    if (k) continue;
    const char *a = argv[i];
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "-n") || !strcmp(a, "--tg")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &n_new)) return 2;
    } else if (!strcmp(a, "-p") || !strcmp(a, "--pp")) {
      if (!(v = cli_value(argc, argv, &i)) || cli_int(a, v, 1, 1 << 20, &pp)) return 2;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (!(v = cli_value(argc, argv, &i))) return 2;
      if (!strcmp(v, "md")) fmt = OUT_MD;
      else if (!strcmp(v, "csv")) fmt = OUT_CSV;
      else if (!strcmp(v, "json")) fmt = OUT_JSON;
      else return cli_usage_error("%s: '%s' is not md, csv or json", a, v);
    } else if (!strcmp(a, "--prompt")) {
      if (!(prompt = cli_value(argc, argv, &i))) return 2;
    } else if (!strcmp(a, "--roofline")) {
      return cli_usage_error("--roofline is now its own command: spill roofline");
    } else if (a[0] == '-') {
      return cli_usage_error("unknown option %s", a);
    } else if (model) {
      return cli_usage_error("unexpected argument %s", a);
    } else model = a;
  }
  if (!model) return cli_usage_error("no model");
  if (cli_apply_tuned("bench", model, &tuned, argc, argv, &cfg)) return 1;
  if ((json || prompt) && (pp > 0 || fmt >= 0))
    return cli_usage_error("--json/--prompt run one request; --pp and --output are the workload's");
  if (json || prompt)
    return bench_single(model, &cfg, prompt ? prompt : "The quick brown fox",
                        n_new > 0 ? n_new : 16, json);
  return bench_workload(model, &cfg, pp > 0 ? pp : 512, n_new > 0 ? n_new : 128,
                        fmt >= 0 ? (out_format)fmt : OUT_MD);
}
