/* research/roofline/spill_roofline.c: spill_roofline_measure (spill_roofline.h).
 *
 * Three probes and two kinds of engine run, in this order so the probes do
 * not compete with the engine: (1) the disk probe reads random whole records
 * of the model's own banks with O_DIRECT (page cache bypassed), each thread
 * one pread in flight (run again after the engine runs: on a shared disk the
 * bandwidth drifts, and the bound uses the faster probe so that it stays a
 * bound); (2) the memory probe sums a buffer (best of 3 passes, 2 threads);
 * then, in one engine, `repeats` rounds of (3) the cfg run: cfg's cache,
 * cleared, greedy decode, and (4) the resident run: the cache resized to a
 * budget holding every expert the workload can touch, the workload run once
 * to fill it and once timed.
 * The library never prints; everything lands in spill_roofline.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/clock.h"
#include "engine/format/container.h"
#include "engine/spill.h"
#include "engine/trace/router_trace.h"
#include "research/roofline/spill_roofline.h"

#define PROMPT "The quick brown fox"

/* ---- disk probe ---- */

typedef struct disk_probe {
  int *fds;
  int n_banks;
  uint32_t n_experts;
  uint64_t record_bytes, data_offset;
  uint64_t deadline_ns;
  /* NULL: random records of every bank; else records drawn from this list
   * (bank << 32 | expert), the ones a workload routed to */
  const uint64_t *pairs;
  size_t n_pairs;
  /* per-thread results */
  uint64_t bytes[64], reads[64];
  int failed[64];
  uint64_t lat_ns[64][4096];
} disk_probe;

typedef struct probe_arg {
  disk_probe *p;
  int t;
} probe_arg;

static void *disk_thread(void *arg) {
  probe_arg *a = arg;
  disk_probe *p = a->p;
  const int t = a->t;
  void *buf = spill_alloc_nozero(p->record_bytes, 4096);
  if (!buf) {
    p->failed[t] = 1;
    return NULL;
  }
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
  while (spill_clock_ns() < p->deadline_ns) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int b;
    uint64_t ex;
    if (p->pairs) {
      const uint64_t pr = p->pairs[(x >> 11) % p->n_pairs];
      b = (int)(pr >> 32);
      ex = pr & 0xffffffffu;
    } else {
      b = (int)(x % (uint64_t)p->n_banks);
      ex = (x >> 20) % p->n_experts;
    }
    const off_t off = (off_t)(p->data_offset + ex * p->record_bytes);
    const uint64_t t0 = spill_clock_ns();
    uint64_t done = 0;
    while (done < p->record_bytes) {
      ssize_t r = pread(p->fds[b], (char *)buf + done, p->record_bytes - done, off + (off_t)done);
      if (r <= 0) {
        p->failed[t] = 1;
        spill_free(buf, p->record_bytes);
        return NULL;
      }
      done += (uint64_t)r;
    }
    p->lat_ns[t][p->reads[t] % 4096] = spill_clock_ns() - t0;
    p->bytes[t] += done;
    p->reads[t]++;
  }
  spill_free(buf, p->record_bytes);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int probe_disk(const char *dir, int threads, double seconds, const uint64_t *pairs,
                      size_t n_pairs, spill_roofline *r, spill_err *e) {
  spill_container c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(spill_container_open(dir, &c, e));
  int rc = SPILL_OK;
  disk_probe *p = calloc(1, sizeof *p);
  if (!p || c.m.n_banks < 1) {
    rc = spill_err_set(e, p ? SPILL_E_INVALID_ARG : SPILL_E_NOMEM,
                       p ? "roofline: %s has no expert banks" : "roofline: probe state", dir);
    goto out;
  }
  p->n_banks = c.m.n_banks;
  p->n_experts = c.m.banks[0].n_experts;
  p->record_bytes = c.m.banks[0].record_bytes;
  p->data_offset = c.m.banks[0].data_offset;
  p->pairs = pairs;
  p->n_pairs = n_pairs;
  for (size_t i = 0; i < n_pairs; i++)
    if ((int)(pairs[i] >> 32) >= p->n_banks || (pairs[i] & 0xffffffffu) >= p->n_experts) {
      rc = spill_err_set(e, SPILL_E_INTERNAL, "roofline: probe record %zu out of range", i);
      goto out;
    }
  p->fds = malloc((size_t)p->n_banks * sizeof *p->fds);
  if (!p->fds) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "roofline: fds");
    goto out;
  }
  for (int b = 0; b < p->n_banks; b++) p->fds[b] = -1;
  for (int b = 0; b < p->n_banks; b++) {
    char path[4096];
    if ((rc = spill_container_path(&c, c.m.banks[b].file, path, sizeof path, e)) < 0) goto out;
    p->fds[b] = open(path, O_RDONLY | O_DIRECT);
    if (p->fds[b] < 0) {
      rc = spill_err_set(e, SPILL_E_IO, "roofline: cannot open %s with O_DIRECT", path);
      goto out;
    }
  }
  if (threads > 64) threads = 64;
  pthread_t th[64];
  probe_arg args[64];
  const uint64_t t0 = spill_clock_ns();
  p->deadline_ns = t0 + (uint64_t)(seconds * 1e9);
  int started = 0;
  for (int t = 0; t < threads; t++) {
    args[t].p = p;
    args[t].t = t;
    if (pthread_create(&th[t], NULL, disk_thread, &args[t]) != 0) break;
    started++;
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  const double el = (double)(spill_clock_ns() - t0) / 1e9;
  uint64_t bytes = 0, reads = 0;
  int failed = started < threads;
  for (int t = 0; t < started; t++) {
    bytes += p->bytes[t];
    reads += p->reads[t];
    failed |= p->failed[t];
  }
  if (failed || reads == 0) {
    rc = spill_err_set(e, SPILL_E_IO, "roofline: disk probe failed on %s (O_DIRECT reads)", dir);
    goto out;
  }
  /* median latency over the kept samples (the last 4096 per thread) */
  uint64_t n_lat = 0;
  uint64_t *lat = malloc(sizeof(uint64_t) * 4096 * (size_t)started);
  if (lat) {
    for (int t = 0; t < started; t++) {
      const uint64_t k = p->reads[t] < 4096 ? p->reads[t] : 4096;
      memcpy(lat + n_lat, p->lat_ns[t], k * sizeof(uint64_t));
      n_lat += k;
    }
    qsort(lat, n_lat, sizeof *lat, cmp_u64);
    r->disk_p50_ms = n_lat ? lat[n_lat / 2] / 1e6 : 0;
    free(lat);
  }
  r->record_bytes = p->record_bytes;
  r->probe_threads = started;
  r->disk_bytes_per_s = (double)bytes / el;
  r->disk_reads_per_s = (double)reads / el;
out:
  if (p && p->fds)
    for (int b = 0; b < p->n_banks; b++)
      if (p->fds[b] >= 0) close(p->fds[b]);
  if (p) free(p->fds);
  free(p);
  spill_container_close(&c);
  return rc;
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
  uint64_t *buf = spill_alloc_nozero((size_t)bytes, 4096);
  SPILL_FAIL_IF(e, !buf, SPILL_E_NOMEM, "roofline: memory probe buffer of %llu bytes",
                (unsigned long long)bytes);
  const size_t n = (size_t)(bytes / 8);
  for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page */
  double best = 0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < 3; pass++) {
    mem_arg a[2] = {{buf, n / 2, 0}, {buf + n / 2, n - n / 2, 0}};
    pthread_t th;
    const uint64_t t0 = spill_clock_ns();
    const int two = pthread_create(&th, NULL, mem_thread, &a[1]) == 0;
    mem_thread(&a[0]);
    if (two) pthread_join(th, NULL);
    else mem_thread(&a[1]);
    const double s = (double)(spill_clock_ns() - t0) / 1e9;
    sink += a[0].sum + a[1].sum;
    if (s > 0 && (double)bytes / s > best) best = (double)bytes / s;
  }
  (void)sink;
  spill_free(buf, (size_t)bytes);
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

int spill_roofline_measure(const char *model_dir, const spill_config *cfg_in,
                           const spill_roofline_opts *o, spill_roofline *r, spill_err *e) {
  SPILL_FAIL_IF(e, !model_dir || !r, SPILL_E_INVALID_ARG, "roofline: NULL argument");
  memset(r, 0, sizeof *r);
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

  /* (3) and (4) interleaved in one engine, `repeats` rounds: a cfg run
   * (cache as configured, cleared first), then the resident budget (cache
   * resized in place, one untimed run to fill it, one timed run). On a
   * shared machine load drifts within minutes; interleaving puts both legs
   * of a round under the same conditions. */
  spill_engine *eng = NULL;
  SPILL_TRY(spill_engine_open(model_dir, &cfg, &eng, e));
  const spill_plan *pl = spill_engine_plan(eng);
  const spill_info *info = spill_engine_info(eng);
  const int64_t cs = spill_engine_config(eng)->cache_slots;
  r->cache_slots = cs >= 0 ? (uint64_t)cs : pl->cache_slots;
  r->budget = pl->budget;
  const uint64_t cfg_budget = pl->budget;
  const uint64_t floor = pl->floor, min_cache = pl->min_cache, cap = pl->cap;
  const int n_moe = info->n_moe_layers, top_k = info->top_k, n_exp = info->n_experts;
  const uint64_t rec = info->record_bytes;
  int n_prompt = 0;
  {
    int toks[256];
    spill_err e2 = {0};
    spill_tokenize(eng, opt.prompt, 1, toks, 256, &n_prompt, &e2);
  }
  uint64_t per_layer = (uint64_t)(n_prompt + opt.n_tokens) * (uint64_t)top_k;
  if (per_layer > (uint64_t)n_exp) per_layer = (uint64_t)n_exp;
  uint64_t need = floor - min_cache + per_layer * (uint64_t)n_moe * rec + 2 * (uint64_t)top_k * rec;
  if (need > cap && cap > floor) need = cap;
  if (need < floor) need = floor;
  r->resident_budget = need;
  char slots_txt[32];
  snprintf(slots_txt, sizeof slots_txt, "%lld", (long long)cs);

  /* the first cfg run writes a router trace (unless the caller asked for
   * one), so that the disk can be probed on the records the workload routes
   * to: a disk behind a cache (a VM's host page cache, a SAN) serves those
   * faster than random records of the whole container */
  char tpath[4096] = "";
  if (!cfg.trace_path) {
    const char *td = getenv("TMPDIR");
    snprintf(tpath, sizeof tpath, "%s/spill-roofline-XXXXXX", td && *td ? td : "/tmp");
    int fd = mkstemp(tpath);
    if (fd >= 0) {
      close(fd);
      if (spill_engine_set_knob(eng, "trace", tpath, NULL) < 0) {
        unlink(tpath);
        tpath[0] = 0;
      }
    } else {
      tpath[0] = 0;
    }
  }
  spill_run_stats st;
  tok_acc acc, cfg_acc = {0};
  double rates[16], io_wait = 0, best = 0, worst = 0, paired[16];
  int np = 0;
  uint64_t hits = 0, accesses = 0;
  int rc = SPILL_OK, nr = 0;
  for (int i = 0; i < opt.repeats && rc == SPILL_OK; i++) {
    /* cfg leg: back to the configured cache */
    if (i > 0) {
      rc = cs >= 0 ? spill_engine_set_knob(eng, "cache_slots", slots_txt, e)
                   : spill_engine_set_budget(eng, cfg_budget, e);
      if (rc < 0) break;
    }
    rc = run_workload(eng, opt.prompt, opt.n_tokens, 1, &st, &acc, e);
    if (i == 0 && tpath[0]) spill_engine_set_knob(eng, "trace", "", NULL); /* one run is enough */
    if (rc < 0) break;
    rates[nr++] = st.decode_tok_per_s;
    io_wait += acc.tokens ? acc.io_wait_s / acc.tokens : 0;
    cfg_acc.demand_bytes += acc.demand_bytes;
    cfg_acc.spec_bytes += acc.spec_bytes;
    cfg_acc.misses += acc.misses;
    cfg_acc.tokens += acc.tokens;
    /* resident leg: a budget holding every expert the workload can touch */
    if ((rc = spill_engine_set_budget(eng, need, e)) < 0) break;
    if ((rc = spill_engine_set_knob(eng, "cache_slots", "auto", e)) < 0) break; /* no realloc */
    if ((rc = run_workload(eng, opt.prompt, opt.n_tokens, 1, &st, &acc, e)) < 0) break;
    if ((rc = run_workload(eng, opt.prompt, opt.n_tokens, 0, &st, &acc, e)) < 0) break;
    if (!st.tokens_decode) break;
    const double sp = st.decode_s / st.tokens_decode;
    if (rates[nr - 1] > 0 && sp > 0) paired[np++] = rates[nr - 1] * sp; /* achieved / (1 / sp) */
    if (best == 0 || sp < best) best = sp;
    if (sp > worst) worst = sp;
    hits += st.decode_hits;
    accesses += st.decode_hits + st.decode_misses;
  }
  const int n_dense = info->n_dense_layers;
  spill_engine_close(eng);
  size_t n_rec = 0;
  uint64_t *recs = NULL;
  if (tpath[0]) {
    if (rc == SPILL_OK) recs = trace_records(tpath, n_dense, &n_rec);
    unlink(tpath);
  }
  if (rc < 0) {
    free(recs);
    return rc;
  }
  r->tokens = nr ? cfg_acc.tokens / nr : 0;
  SPILL_FAIL_IF(e, cfg_acc.tokens < 1, SPILL_E_INTERNAL, "roofline: no decode token was produced");
  r->missed_bytes_per_token = (double)cfg_acc.demand_bytes / cfg_acc.tokens;
  r->misses_per_token = (double)cfg_acc.misses / cfg_acc.tokens;
  r->spec_bytes_per_token = (double)cfg_acc.spec_bytes / cfg_acc.tokens;
  r->read_bytes_per_token = r->missed_bytes_per_token + r->spec_bytes_per_token;
  r->prompt_tokens = n_prompt;
  qsort(rates, (size_t)nr, sizeof rates[0], cmp_double);
  r->achieved_tok_s = rates[nr / 2];
  r->achieved_min_tok_s = rates[0];
  r->achieved_max_tok_s = rates[nr - 1];
  r->io_wait_s_per_token = io_wait / nr;
  if (np) {
    qsort(paired, (size_t)np, sizeof paired[0], cmp_double);
    r->paired_fraction = paired[np / 2];
    r->paired_fraction_min = paired[0];
    r->paired_fraction_max = paired[np - 1];
  }

  /* (1') the disk again; keep the faster probe's figures */
  {
    spill_roofline r2;
    memset(&r2, 0, sizeof r2);
    SPILL_TRY(probe_disk(model_dir, opt.probe_threads, opt.probe_seconds, NULL, 0, &r2, e));
    r->disk_probe2_bytes_per_s = r2.disk_bytes_per_s;
    keep_faster_probe(r, &r2);
    /* (1'') the same probe over the workload's own records */
    r->workload_records = n_rec;
    if (recs && n_rec) {
      memset(&r2, 0, sizeof r2);
      const int prc = probe_disk(model_dir, opt.probe_threads, opt.probe_seconds, recs, n_rec, &r2, e);
      free(recs);
      SPILL_TRY(prc);
      r->disk_workload_bytes_per_s = r2.disk_bytes_per_s;
      keep_faster_probe(r, &r2);
    } else {
      free(recs);
    }
  }
  r->resident_hit_rate = accesses ? (double)hits / (double)accesses : 1.0;
  r->compute_s_per_token = best;
  r->compute_max_s_per_token = worst;

  r->bound_compute_tok_s = r->compute_s_per_token > 0 ? 1.0 / r->compute_s_per_token : 0;
  r->bound_disk_tok_s = r->read_bytes_per_token > 0
                            ? r->disk_bytes_per_s / r->read_bytes_per_token
                            : 1e300;
  r->bound_tok_s = r->bound_disk_tok_s < r->bound_compute_tok_s ? r->bound_disk_tok_s
                                                                : r->bound_compute_tok_s;
  r->fraction = r->bound_tok_s > 0 ? r->achieved_tok_s / r->bound_tok_s : 0;
  return SPILL_OK;
}
