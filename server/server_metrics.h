/* server/server_metrics.h: the counters behind GET /metrics (Prometheus
 * text format 0.0.4).
 *
 * Role: HTTP threads count requests by endpoint and status; the engine
 * thread adds each finished generation's spill_run_stats (so the expert
 * cache, read and token counters are exactly the sums of the engine's own
 * per-run counters, the numbers `spill run` / `spill bench` print) and its
 * latencies (time to first token from request arrival, inter-token gaps).
 * One mutex; every call is thread-safe. No engine calls: gauges that come
 * from the engine (budget, cache slots) are set by the server.
 */
#ifndef SPILL_SERVER_METRICS_H
#define SPILL_SERVER_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spill_srv_endpoint {
  SPILL_EP_CHAT = 0,
  SPILL_EP_COMPLETIONS,
  SPILL_EP_MODELS,
  SPILL_EP_HEALTH,
  SPILL_EP_METRICS,
  SPILL_EP_OTHER,
  SPILL_EP_COUNT
} spill_srv_endpoint;

#define SPILL_SRV_HIST_BUCKETS 14
#define SPILL_SRV_CODES 14

typedef struct spill_srv_hist {
  uint64_t counts[SPILL_SRV_HIST_BUCKETS + 1]; /* last: +Inf */
  double sum;
  uint64_t count;
} spill_srv_hist;

typedef enum spill_srv_finish {
  SPILL_FIN_STOP = 0,   /* EOS or a stop sequence */
  SPILL_FIN_LENGTH,     /* max_tokens or the context */
  SPILL_FIN_CANCELLED,  /* client went away */
  SPILL_FIN_ERROR,      /* the engine failed */
  SPILL_FIN_COUNT
} spill_srv_finish;

typedef struct spill_srv_metrics {
  pthread_mutex_t mu;
  uint64_t http[SPILL_EP_COUNT][SPILL_SRV_CODES];
  uint64_t finished[SPILL_FIN_COUNT];
  uint64_t prompt_tokens, prompt_tokens_cached, generated_tokens;
  uint64_t hits, misses, decode_hits, decode_misses, reads, bytes_read, evictions;
  uint64_t spec_issued, spec_used;
  uint64_t draft_tokens, draft_accepted, decode_forwards; /* --draft */
  double io_wait_s, prefill_s, decode_s;
  spill_srv_hist ttft, itl, queue_wait;
  int queue_depth, queue_capacity, busy;
  uint64_t budget_bytes, cache_slots;
} spill_srv_metrics;

void spill_srv_metrics_init(spill_srv_metrics *m);
void spill_srv_metrics_free(spill_srv_metrics *m);
void spill_srv_metrics_http(spill_srv_metrics *m, spill_srv_endpoint ep, int status);
/* One generation's engine counters and outcome. */
void spill_srv_metrics_run(spill_srv_metrics *m, const spill_run_stats *st, spill_srv_finish f);
void spill_srv_metrics_ttft(spill_srv_metrics *m, double s);
void spill_srv_metrics_itl(spill_srv_metrics *m, double s);
void spill_srv_metrics_queue_wait(spill_srv_metrics *m, double s);
/* busy < 0: unchanged */
void spill_srv_metrics_queue(spill_srv_metrics *m, int depth, int busy);
/* The exposition text (malloc'ed; caller frees), with this process's
 * resident set read from /proc/self at the call. NULL out of memory. */
char *spill_srv_metrics_render(spill_srv_metrics *m);

#ifdef __cplusplus
}
#endif
#endif
