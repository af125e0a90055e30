/* server/server_metrics.c: Prometheus counters and histograms of the server
 * (server_metrics.h).
 *
 * Histogram buckets are fixed (seconds, 1 ms .. 60 s, roughly x2.5 apart)
 * so scrapes from different runs can be compared. The exposition follows
 * the text format: # HELP / # TYPE lines, cumulative _bucket{le=...}
 * counts, _sum and _count. The resident set comes from /proc/self/statm
 * (VmRSS) and /proc/self/status (VmHWM) when rendered.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/server_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const double k_bounds[SPILL_SRV_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};
/* the last slot counts any other status */
static const int k_codes[SPILL_SRV_CODES - 1] = {200, 400, 401, 404, 405, 408, 411,
                                                  413, 429, 431, 500, 503, 505};
static const char *const k_eps[SPILL_EP_COUNT] = {"/v1/chat/completions", "/v1/completions",
                                                  "/v1/models", "/health", "/metrics", "other"};
static const char *const k_fin[SPILL_FIN_COUNT] = {"stop", "length", "cancelled", "error"};

void spill_srv_metrics_init(spill_srv_metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
}

void spill_srv_metrics_free(spill_srv_metrics *m) {
  if (m) pthread_mutex_destroy(&m->mu);
}

void spill_srv_metrics_http(spill_srv_metrics *m, spill_srv_endpoint ep, int status) {
  int k = SPILL_SRV_CODES - 1;
  for (int i = 0; i < SPILL_SRV_CODES - 1; i++)
    if (k_codes[i] == status) k = i;
  if ((unsigned)ep >= SPILL_EP_COUNT) ep = SPILL_EP_OTHER;
  pthread_mutex_lock(&m->mu);
  m->http[ep][k]++;
  pthread_mutex_unlock(&m->mu);
}

static void hist_add(spill_srv_hist *h, double s) {
  int b = 0;
  while (b < SPILL_SRV_HIST_BUCKETS && s > k_bounds[b]) b++;
  h->counts[b]++;
  h->sum += s;
  h->count++;
}

void spill_srv_metrics_run(spill_srv_metrics *m, const spill_run_stats *st, spill_srv_finish f) {
  pthread_mutex_lock(&m->mu);
  if ((unsigned)f < SPILL_FIN_COUNT) m->finished[f]++;
  if (st) {
    m->prompt_tokens += (uint64_t)st->tokens_prefill;
    m->prompt_tokens_cached += (uint64_t)st->tokens_cached;
    m->generated_tokens += (uint64_t)st->tokens_decode;
    m->hits += st->demand_hits;
    m->misses += st->demand_misses;
    m->decode_hits += st->decode_hits;
    m->decode_misses += st->decode_misses;
    m->reads += st->reads;
    m->bytes_read += st->bytes_read;
    m->evictions += st->evictions;
    m->spec_issued += st->spec_issued;
    m->spec_used += st->spec_used;
    m->draft_tokens += st->draft_tokens;
    m->draft_accepted += st->draft_accepted;
    m->decode_forwards += st->decode_forwards;
    m->io_wait_s += st->io_wait_s;
    m->prefill_s += st->prefill_s;
    m->decode_s += st->decode_s;
  }
  pthread_mutex_unlock(&m->mu);
}

#define HIST_FN(name, field)                                  \
  void spill_srv_metrics_##name(spill_srv_metrics *m, double s) { \
    pthread_mutex_lock(&m->mu);                               \
    hist_add(&m->field, s);                                   \
    pthread_mutex_unlock(&m->mu);                             \
  }
HIST_FN(ttft, ttft)
HIST_FN(itl, itl)
HIST_FN(queue_wait, queue_wait)

void spill_srv_metrics_queue(spill_srv_metrics *m, int depth, int busy) {
  pthread_mutex_lock(&m->mu);
  m->queue_depth = depth;
  if (busy >= 0) m->busy = busy;
  pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = 1;
      return;
    }
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t c = b->cap ? b->cap * 2 : 8192;
    while (c < b->n + (size_t)k + 1) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = c;
  }
}

static void counter(sbuf *b, const char *name, const char *help, double v) {
  sb(b, "# HELP %s %s\n# TYPE %s counter\n%s %.17g\n", name, help, name, name, v);
}
static void gauge(sbuf *b, const char *name, const char *help, double v) {
  sb(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}
static void hist(sbuf *b, const char *name, const char *help, const spill_srv_hist *h) {
  sb(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  uint64_t cum = 0;
  for (int i = 0; i < SPILL_SRV_HIST_BUCKETS; i++) {
    cum += h->counts[i];
    sb(b, "%s_bucket{le=\"%g\"} %llu\n", name, k_bounds[i], (unsigned long long)cum);
  }
  cum += h->counts[SPILL_SRV_HIST_BUCKETS];
  sb(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name,
     (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static uint64_t proc_rss(uint64_t *hwm) {
  uint64_t rss = 0;
  *hwm = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long v;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "VmRSS: %llu kB", &v) == 1) rss = (uint64_t)v * 1024;
    if (sscanf(line, "VmHWM: %llu kB", &v) == 1) *hwm = (uint64_t)v * 1024;
  }
  fclose(f);
  return rss;
}

char *spill_srv_metrics_render(spill_srv_metrics *m) {
  sbuf b = {0};
  uint64_t hwm, rss = proc_rss(&hwm);
  pthread_mutex_lock(&m->mu);
  sb(&b, "# HELP spill_http_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE spill_http_requests_total counter\n");
  for (int e = 0; e < SPILL_EP_COUNT; e++)
    for (int c = 0; c < SPILL_SRV_CODES; c++) {
      if (!m->http[e][c] && !(e <= SPILL_EP_COMPLETIONS && c == 0)) continue;
      char code[8];
      snprintf(code, sizeof code, "%d", c < SPILL_SRV_CODES - 1 ? k_codes[c] : 0);
      sb(&b, "spill_http_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n", k_eps[e],
         c < SPILL_SRV_CODES - 1 ? code : "other", (unsigned long long)m->http[e][c]);
    }
  sb(&b, "# HELP spill_generations_total Generations run by the engine, by how they ended.\n"
         "# TYPE spill_generations_total counter\n");
  for (int f = 0; f < SPILL_FIN_COUNT; f++)
    sb(&b, "spill_generations_total{finish=\"%s\"} %llu\n", k_fin[f],
       (unsigned long long)m->finished[f]);
  counter(&b, "spill_prompt_tokens_total", "Prompt tokens prefilled (with BOS).",
          (double)m->prompt_tokens);
  counter(&b, "spill_prompt_tokens_cached_total",
          "Prompt tokens not prefilled: their state was kept from the conversation the engine "
          "held (prefix reuse).",
          (double)m->prompt_tokens_cached);
  counter(&b, "spill_generated_tokens_total", "Tokens generated (decode steps, EOS included).",
          (double)m->generated_tokens);
  counter(&b, "spill_expert_cache_hits_total", "Expert demand hits (prefill + decode).",
          (double)m->hits);
  counter(&b, "spill_expert_cache_misses_total", "Expert demand misses (prefill + decode).",
          (double)m->misses);
  counter(&b, "spill_expert_cache_decode_hits_total", "Expert demand hits in decode.",
          (double)m->decode_hits);
  counter(&b, "spill_expert_cache_decode_misses_total", "Expert demand misses in decode.",
          (double)m->decode_misses);
  counter(&b, "spill_expert_cache_evictions_total", "Experts evicted from the cache.",
          (double)m->evictions);
  counter(&b, "spill_expert_reads_total", "Expert records read from storage (demand + prefetch).",
          (double)m->reads);
  counter(&b, "spill_expert_bytes_read_total", "Bytes of expert records read from storage.",
          (double)m->bytes_read);
  counter(&b, "spill_prefetch_issued_total", "Lookahead prefetches issued.", (double)m->spec_issued);
  counter(&b, "spill_prefetch_used_total", "Lookahead prefetches later used.", (double)m->spec_used);
  counter(&b, "spill_draft_tokens_total",
          "Tokens drafted from the context's n-grams and verified (--draft).",
          (double)m->draft_tokens);
  counter(&b, "spill_draft_accepted_total", "Drafted tokens accepted (generated without a step).",
          (double)m->draft_accepted);
  counter(&b, "spill_decode_forwards_total",
          "Decode forward calls (a verify chunk of a token and its drafts is one).",
          (double)m->decode_forwards);
  counter(&b, "spill_io_wait_seconds_total", "Time the compute thread waited for expert reads.",
          m->io_wait_s);
  counter(&b, "spill_prefill_seconds_total", "Wall time in prefill.", m->prefill_s);
  counter(&b, "spill_decode_seconds_total", "Wall time in decode.", m->decode_s);
  hist(&b, "spill_time_to_first_token_seconds",
       "From the request's arrival (queue wait included) to its first generated token.", &m->ttft);
  hist(&b, "spill_inter_token_latency_seconds", "Time between consecutive generated tokens.",
       &m->itl);
  hist(&b, "spill_queue_wait_seconds", "Time a generation request waited for the engine.",
       &m->queue_wait);
  gauge(&b, "spill_queue_depth", "Generation requests waiting for the engine.", m->queue_depth);
  gauge(&b, "spill_queue_capacity", "Waiting requests allowed (--max-queue); more get 429.",
        m->queue_capacity);
  gauge(&b, "spill_engine_busy", "1 while the engine is generating.", m->busy);
  gauge(&b, "spill_budget_bytes", "The engine's RAM budget.", (double)m->budget_bytes);
  gauge(&b, "spill_expert_cache_slots", "Expert cache slots.", (double)m->cache_slots);
  pthread_mutex_unlock(&m->mu);
  gauge(&b, "spill_resident_set_bytes", "This process's resident set (VmRSS) now.", (double)rss);
  gauge(&b, "spill_peak_resident_set_bytes", "This process's peak resident set (VmHWM).",
        (double)hwm);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}
