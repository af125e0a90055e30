/* research/roofline/spill_roofline.c: spill_roofline_measure (spill_roofline.h).
 *
 * A client of the public API (engine/spill.h) and of the trace schema
 * (engine/trace): three probes and two kinds of engine run, in this order
 * so the probes do not compete with the engine: (1) the disk probe
 * (spill_disk_probe, records mode: random whole records of the model's own
 * banks with O_DIRECT, each thread one pread in flight; run again after
 * the engine runs, since on a shared disk the bandwidth drifts, and the
 * bound uses the faster probe so that it stays a bound); (2) the memory
 * probe sums a buffer (best of 3 passes, 2 threads); then, in one engine,
 * `repeats` rounds of (3) the cfg run: cfg's cache, cleared, greedy decode,
 * and (4) the resident run: the cache resized to a budget holding every
 * expert the workload can touch, the workload run once to fill it and once
 * timed. Never prints; everything lands in spill_roofline.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/spill.h"
#include "engine/trace/router_trace.h"
#include "research/roofline/spill_roofline.h"

#define PROMPT "The quick brown fox"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* ---- disk probe: the engine's one probe ---- */

static int probe_disk(const char *dir, int threads, double seconds, const uint64_t *pairs,
                      size_t n_pairs, spill_roofline *r, spill_err *e) {
  spill_disk_probe_opts o;
  memset(&o, 0, sizeof o);
  o.mode = SPILL_PROBE_RECORDS;
  o.threads = threads;
  o.seconds = seconds;
  o.records = pairs;
  o.n_records = n_pairs;
  spill_disk_probe_result d;
  SPILL_TRY(spill_disk_probe(dir, &o, &d, e));
  r->record_bytes = d.record_bytes;
  r->probe_threads = d.threads;
  r->disk_bytes_per_s = d.bytes_per_s;
  r->disk_reads_per_s = d.reads_per_s;
  r->disk_p50_ms = d.p50_ms;
  return SPILL_OK;
}

/* The disk leg is the fastest probe: copy q's figures into r if q was faster. */
static void keep_faster_probe(spill_roofline *r, const spill_roofline *q) {
  if (q->disk_bytes_per_s <= r->disk_bytes_per_s) return;
  r->disk_bytes_per_s = q->disk_bytes_per_s;
  r->disk_reads_per_s = q->disk_reads_per_s;
  r->disk_p50_ms = q->disk_p50_ms;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The distinct (bank, expert) records a router trace routes to, as
 * bank << 32 | expert, sorted; NULL with *n = 0 if the trace cannot be read. */
static uint64_t *trace_records(const char *path, int n_dense, size_t *n) {
  *n = 0;
  spill_trace t;
  spill_err e2 = {0};
  memset(&t, 0, sizeof t);
  if (spill_trace_read_file(path, NULL, &t, &e2) < 0) return NULL;
  const size_t total = (size_t)t.n_tokens * t.n_layers * t.top_k;
  uint64_t *v = total ? malloc(total * sizeof *v) : NULL;
  if (!v) {
    spill_trace_free(&t);
    return NULL;
  }
  size_t k = 0;
  for (uint32_t tok = 0; tok < t.n_tokens; tok++)
    for (uint32_t l = 0; l < t.n_layers; l++) {
      const uint32_t *ids = spill_trace_ids(&t, tok, l);
      const int bank = (int)t.layer_ids[l] - n_dense;
      if (bank < 0) continue;
      for (uint32_t j = 0; j < t.top_k; j++) v[k++] = (uint64_t)bank << 32 | ids[j];
    }
  spill_trace_free(&t);
  qsort(v, k, sizeof *v, cmp_u64);
  size_t u = 0;
  for (size_t i = 0; i < k; i++)
    if (u == 0 || v[i] != v[u - 1]) v[u++] = v[i];
  *n = u;
  return v;
}

/* ---- memory probe ---- */

typedef struct mem_arg {
  const uint64_t *p;
  size_t n;
  uint64_t sum;
} mem_arg;

static void *mem_thread(void *arg) {
  mem_arg *a = arg;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= a->n; i += 4) {
    s0 += a->p[i];
    s1 += a->p[i + 1];
    s2 += a->p[i + 2];
    s3 += a->p[i + 3];
  }
  a->sum = s0 + s1 + s2 + s3;
  return NULL;
}

static int probe_mem(uint64_t bytes, spill_roofline *r, spill_err *e) {
  void *map = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  SPILL_FAIL_IF(e, map == MAP_FAILED, SPILL_E_NOMEM, "roofline: memory probe buffer of %llu bytes",
                (unsigned long long)bytes);
  uint64_t *buf = map;
  const size_t n = (size_t)(bytes / 8);
  for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page */
  double best = 0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 3; pass++) {
    mem_arg a[2] = {{buf, n / 2, 0}, {buf + n / 2, n - n / 2, 0}};
    pthread_t th;
    const uint64_t t0 = now_ns();
    const int two = pthread_create(&th, NULL, mem_thread, &a[1]) == 0;
    mem_thread(&a[0]);
    if (two) pthread_join(th, NULL);
    else mem_thread(&a[1]);
    const double s = (double)(now_ns() - t0) / 1e9;
    sink += a[0].sum + a[1].sum;
    if (s > 0 && (double)bytes / s > best) best = (double)bytes / s;
  }
  (void)sink;
  munmap(map, (size_t)bytes);
  r->mem_bytes_per_s = best;
  return SPILL_OK;
}

/* ---- engine runs ---- */

typedef struct tok_acc {
  uint64_t demand_bytes, spec_bytes, misses;
  double io_wait_s; /* decode tokens only */
  int tokens;
} tok_acc;

static int on_token(void *user, int token, const char *text, const spill_run_stats *ts) {
  (void)token;
  (void)text;
  tok_acc *a = user;
  a->demand_bytes += ts->bytes_read_demand;
  a->spec_bytes += ts->bytes_read_spec;
  a->misses += ts->decode_misses;
  a->io_wait_s += ts->io_wait_s;
  a->tokens++;
  return 0;
}

static int run_workload(spill_engine *eng, const char *prompt, int n_new, int clear,
                        spill_run_stats *st, tok_acc *acc, spill_err *e) {
  int toks[256], n = 0;
  SPILL_TRY(spill_tokenize(eng, prompt, 1, toks, 256, &n, e));
  if (clear) SPILL_TRY(spill_engine_clear_cache(eng, 1, e));
  spill_sampling s = {0.0f, 0, 1.0f, 1};
  memset(acc, 0, sizeof *acc);
  return spill_generate(eng, toks, n, n_new, &s, on_token, acc, NULL, st, e);
}

/* The state of one measurement shared by its phases. */
typedef struct roof {
  spill_roofline_opts opt;
  spill_engine *eng;
  int64_t cs;           /* the configured cache_slots knob (-1: auto) */
  uint64_t cfg_budget;  /* the configured budget */
  uint64_t need;        /* the resident budget */
  char slots_txt[32];
  char tpath[4096];     /* the first cfg run's router trace ("" = none) */
  /* accumulated over the rounds */
  tok_acc cfg_acc;
  double rates[16], paired[16], io_wait, best, worst;
  int nr, np;
  uint64_t hits, accesses;
} roof;

/* The resident budget: the floor plus a cache holding every expert the
 * workload can touch (prompt + decode tokens x top_k per MoE layer, at most
 * all of a layer's), capped by the plan's cap; also fills r's cache figures
 * and prompt length. */
static void resident_budget(roof *R, spill_roofline *r) {
  spill_engine *eng = R->eng;
  const spill_plan *pl = spill_engine_plan(eng);
  const spill_info *info = spill_engine_info(eng);
  R->cs = spill_engine_config(eng)->cache_slots;
  r->cache_slots = R->cs >= 0 ? (uint64_t)R->cs : pl->cache_slots;
  r->budget = pl->budget;
  R->cfg_budget = pl->budget;
  const uint64_t floor = pl->floor, min_cache = pl->min_cache, cap = pl->cap;
  const int n_moe = info->n_moe_layers, top_k = info->top_k, n_exp = info->n_experts;
  const uint64_t rec = info->record_bytes;
  int n_prompt = 0;
  {
    int toks[256];
    spill_err e2 = {0};
    spill_tokenize(eng, R->opt.prompt, 1, toks, 256, &n_prompt, &e2);
  }
  uint64_t per_layer = (uint64_t)(n_prompt + R->opt.n_tokens) * (uint64_t)top_k;
  if (per_layer > (uint64_t)n_exp) per_layer = (uint64_t)n_exp;
  uint64_t need = floor - min_cache + per_layer * (uint64_t)n_moe * rec + 2 * (uint64_t)top_k * rec;
  if (need > cap && cap > floor) need = cap;
  /* The cap is 7/8 of the machine (or cgroup); on a shared machine what the
   * other processes hold is not ours to take: growing the cache past what
   * is available now would end in the OOM killer, not in a measurement. */
  const uint64_t avail = spill_available_ram(), room = avail / 8 * 7;
  const uint64_t cfg_need = floor - min_cache + r->cache_slots * rec;
  r->resident_capped = 0;
  if (avail && need > cfg_need && need - cfg_need > room) {
    need = cfg_need + room;
    r->resident_capped = 1;
  }
  if (need < floor) need = floor;
  r->resident_budget = need;
  r->prompt_tokens = n_prompt;
  R->need = need;
  snprintf(R->slots_txt, sizeof R->slots_txt, "%lld", (long long)R->cs);
}

/* The first cfg run writes a router trace (unless the caller asked for
 * one), so that the disk can be probed on the records the workload routes
 * to: a disk behind a cache (a VM's host page cache, a SAN) serves those
 * faster than random records of the whole container. */
static void start_trace(roof *R, const spill_config *cfg) {
  R->tpath[0] = 0;
  if (cfg->trace_path) return;
  const char *td = getenv("TMPDIR");
  snprintf(R->tpath, sizeof R->tpath, "%s/spill-roofline-XXXXXX", td && *td ? td : "/tmp");
  int fd = mkstemp(R->tpath);
  if (fd < 0) {
    R->tpath[0] = 0;
    return;
  }
  close(fd);
  if (spill_engine_set_knob(R->eng, "trace", R->tpath, NULL) < 0) {
    unlink(R->tpath);
    R->tpath[0] = 0;
  }
}

/* One round: (3) the cfg run, then (4) the resident run. On a shared
 * machine load drifts within minutes; interleaving puts both legs of a
 * round under the same conditions. Returns 1 to go on, 0 to stop (a run
 * without decode tokens), or an error. */
static int run_round(roof *R, int i, spill_err *e) {
  spill_engine *eng = R->eng;
  spill_run_stats st;
  tok_acc acc;
  int rc;
  /* cfg leg: back to the configured cache */
  if (i > 0) {
    rc = R->cs >= 0 ? spill_engine_set_knob(eng, "cache_slots", R->slots_txt, e)
                    : spill_engine_set_budget(eng, R->cfg_budget, e);
    if (rc < 0) return rc;
  }
  rc = run_workload(eng, R->opt.prompt, R->opt.n_tokens, 1, &st, &acc, e);
  if (i == 0 && R->tpath[0]) spill_engine_set_knob(eng, "trace", "", NULL); /* one run is enough */
  if (rc < 0) return rc;
  R->rates[R->nr++] = st.decode_tok_per_s;
  R->io_wait += acc.tokens ? acc.io_wait_s / acc.tokens : 0;
  R->cfg_acc.demand_bytes += acc.demand_bytes;
  R->cfg_acc.spec_bytes += acc.spec_bytes;
  R->cfg_acc.misses += acc.misses;
  R->cfg_acc.tokens += acc.tokens;
  /* resident leg: a budget holding every expert the workload can touch */
  SPILL_TRY(spill_engine_set_budget(eng, R->need, e));
  SPILL_TRY(spill_engine_set_knob(eng, "cache_slots", "auto", e)); /* no realloc */
  SPILL_TRY(run_workload(eng, R->opt.prompt, R->opt.n_tokens, 1, &st, &acc, e));
  SPILL_TRY(run_workload(eng, R->opt.prompt, R->opt.n_tokens, 0, &st, &acc, e));
  if (!st.tokens_decode) return 0;
  const double sp = st.decode_s / st.tokens_decode;
  if (R->rates[R->nr - 1] > 0 && sp > 0)
    R->paired[R->np++] = R->rates[R->nr - 1] * sp; /* achieved / (1 / sp) */
  if (R->best == 0 || sp < R->best) R->best = sp;
  if (sp > R->worst) R->worst = sp;
  R->hits += st.decode_hits;
  R->accesses += st.decode_hits + st.decode_misses;
  return 1;
}

/* The cfg runs' figures: bytes and misses per token, the achieved rate
 * (median and spread) and the paired fractions. */
static int summarise_runs(roof *R, spill_roofline *r, spill_err *e) {
  const int nr = R->nr, np = R->np;
  r->tokens = nr ? R->cfg_acc.tokens / nr : 0;
  SPILL_FAIL_IF(e, R->cfg_acc.tokens < 1, SPILL_E_INTERNAL,
                "roofline: no decode token was produced");
  r->missed_bytes_per_token = (double)R->cfg_acc.demand_bytes / R->cfg_acc.tokens;
  r->misses_per_token = (double)R->cfg_acc.misses / R->cfg_acc.tokens;
  r->spec_bytes_per_token = (double)R->cfg_acc.spec_bytes / R->cfg_acc.tokens;
  r->read_bytes_per_token = r->missed_bytes_per_token + r->spec_bytes_per_token;
  qsort(R->rates, (size_t)nr, sizeof R->rates[0], cmp_double);
  r->achieved_tok_s = R->rates[nr / 2];
  r->achieved_min_tok_s = R->rates[0];
  r->achieved_max_tok_s = R->rates[nr - 1];
  r->io_wait_s_per_token = R->io_wait / nr;
  if (np) {
    qsort(R->paired, (size_t)np, sizeof R->paired[0], cmp_double);
    r->paired_fraction = R->paired[np / 2];
    r->paired_fraction_min = R->paired[0];
    r->paired_fraction_max = R->paired[np - 1];
  }
  return SPILL_OK;
}

/* (1') the disk again, and (1'') over the workload's own records (recs is
 * freed); keeps the faster probe's figures. */
static int probe_disk_after(const char *model_dir, const spill_roofline_opts *opt,
                            uint64_t *recs, size_t n_rec, spill_roofline *r, spill_err *e) {
  spill_roofline r2;
  memset(&r2, 0, sizeof r2);
  int rc = probe_disk(model_dir, opt->probe_threads, opt->probe_seconds, NULL, 0, &r2, e);
  if (rc < 0) {
    free(recs);
    return rc;
  }
  r->disk_probe2_bytes_per_s = r2.disk_bytes_per_s;
  keep_faster_probe(r, &r2);
  r->workload_records = n_rec;
  if (recs && n_rec) {
    memset(&r2, 0, sizeof r2);
    rc = probe_disk(model_dir, opt->probe_threads, opt->probe_seconds, recs, n_rec, &r2, e);
    free(recs);
    SPILL_TRY(rc);
    r->disk_workload_bytes_per_s = r2.disk_bytes_per_s;
    keep_faster_probe(r, &r2);
  } else {
    free(recs);
  }
  return SPILL_OK;
}

int spill_roofline_measure(const char *model_dir, const spill_config *cfg_in,
                           const spill_roofline_opts *o, spill_roofline *r, spill_err *e) {
  SPILL_FAIL_IF(e, !model_dir || !r, SPILL_E_INVALID_ARG, "roofline: NULL argument");
  memset(r, 0, sizeof *r);
  roof R;
  memset(&R, 0, sizeof R);
  spill_roofline_opts opt = {0};
  if (o) opt = *o;
  if (opt.probe_threads <= 0) opt.probe_threads = 8;
  if (opt.probe_seconds <= 0) opt.probe_seconds = 3.0;
  if (opt.mem_probe_bytes == 0) opt.mem_probe_bytes = 512ull << 20;
  if (opt.n_tokens <= 0) opt.n_tokens = 8;
  if (opt.repeats <= 0) opt.repeats = 3;
  if (opt.repeats > 16) opt.repeats = 16;
  if (!opt.prompt) opt.prompt = PROMPT;
  SPILL_FAIL_IF(e, !opt.prompt[0], SPILL_E_INVALID_ARG, "roofline: empty prompt");
  spill_config cfg;
  if (cfg_in) cfg = *cfg_in;
  else spill_config_default(&cfg);

  SPILL_TRY(probe_disk(model_dir, opt.probe_threads, opt.probe_seconds, NULL, 0, r, e));
  r->disk_probe1_bytes_per_s = r->disk_bytes_per_s;
  SPILL_TRY(probe_mem(opt.mem_probe_bytes, r, e));

  R.opt = opt;
  /* (3) and (4) interleaved in one engine, `repeats` rounds (run_round);
   * the cache is resized in place between the legs */
  SPILL_TRY(spill_engine_open(model_dir, &cfg, &R.eng, e));
  resident_budget(&R, r);
  start_trace(&R, &cfg);
  int rc = SPILL_OK;
  for (int i = 0; i < opt.repeats; i++) {
    rc = run_round(&R, i, e);
    if (rc <= 0) break;
  }
  if (rc > 0) rc = SPILL_OK;
  const int n_dense = spill_engine_info(R.eng)->n_dense_layers;
  spill_engine_close(R.eng);
  size_t n_rec = 0;
  uint64_t *recs = NULL;
  if (R.tpath[0]) {
    if (rc == SPILL_OK) recs = trace_records(R.tpath, n_dense, &n_rec);
    unlink(R.tpath);
  }
  if (rc < 0) {
    free(recs);
    return rc;
  }
  if ((rc = summarise_runs(&R, r, e)) < 0) {
    free(recs);
    return rc;
  }
  SPILL_TRY(probe_disk_after(model_dir, &opt, recs, n_rec, r, e));
  r->resident_hit_rate = R.accesses ? (double)R.hits / (double)R.accesses : 1.0;
  r->compute_s_per_token = R.best;
  r->compute_max_s_per_token = R.worst;
  r->bound_compute_tok_s = r->compute_s_per_token > 0 ? 1.0 / r->compute_s_per_token : 0;
  r->bound_disk_tok_s = r->read_bytes_per_token > 0
                            ? r->disk_bytes_per_s / r->read_bytes_per_token
                            : 1e300;
  r->bound_tok_s = r->bound_disk_tok_s < r->bound_compute_tok_s ? r->bound_disk_tok_s
                                                                : r->bound_compute_tok_s;
  r->fraction = r->bound_tok_s > 0 ? r->achieved_tok_s / r->bound_tok_s : 0;
  return SPILL_OK;
}
