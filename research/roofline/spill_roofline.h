/* research/roofline/spill_roofline.h: the roofline measurement (`spill
 * roofline`, docs/PERFORMANCE.md): what this machine allows for a model and
 * how close the engine gets.
 *
 * A research tool, not part of the inference library: it drives an engine
 * through the public API (engine/spill.h) and reads the router trace it
 * wrote through the trace schema (engine/trace). Never prints.
 */
#ifndef SPILL_ROOFLINE_SPILL_ROOFLINE_H
#define SPILL_ROOFLINE_SPILL_ROOFLINE_H

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Roofline (docs/PERFORMANCE.md): what this machine allows for a model and
 * how close the engine gets, measured in one call.
 *   disk    random O_DIRECT reads of whole expert records from the model's
 *           own banks, probe_threads threads each with one read in flight:
 *           before the engine runs, after them, and after them again over
 *           only the records the workload routed to (from a router trace of
 *           the first cfg run, unless cfg sets its own trace path); the
 *           fastest of the three is the disk leg;
 *   memory  read bandwidth of a buffer of mem_probe_bytes, 2 threads;
 *   compute decode seconds per token with every expert the workload needs
 *           resident: a budget holding all of them (the container's experts,
 *           or what the run can touch), one untimed run to fill the cache,
 *           then `repeats` timed runs; the fastest counts (a roofline is a
 *           best case; resident_hit_rate says whether it all hit);
 *   missed  demand bytes read per decode token with cfg's cache, starting
 *           cold (cache cleared), on the same workload, `repeats` times; the
 *           median decode tok/s is the achieved rate.
 *   read    every byte read per decode token (demand + lookahead prefetch):
 *           what the disk has to deliver, so the disk leg uses it.
 * bound = min(disk / read, 1 / compute) tok/s; fraction = achieved / bound.
 * Workload: greedy decode of n_tokens after the prompt (default "The quick
 * brown fox"; a short prompt keeps the resident run's cache small on big
 * models).
 * One engine; the two kinds of run alternate (cfg, resident, cfg, ...) with
 * the cache resized in place, so that both legs see the same machine load.
 * Takes seconds to minutes (a cold twin token reads ~2.3 GB). */
typedef struct spill_roofline_opts {
  int probe_threads;        /* 0 = 8 */
  double probe_seconds;     /* disk probe duration; 0 = 3 */
  uint64_t mem_probe_bytes; /* 0 = 512 MiB */
  int n_tokens;             /* decode tokens per run; 0 = 8 */
  int repeats;              /* timed runs of each kind; 0 = 3 */
  const char *prompt;       /* NULL = "The quick brown fox" */
} spill_roofline_opts;

typedef struct spill_roofline {
  uint64_t record_bytes;
  int probe_threads;
  double disk_bytes_per_s, disk_reads_per_s, disk_p50_ms; /* the fastest of the three probes */
  double disk_probe1_bytes_per_s; /* before the cfg runs */
  double disk_probe2_bytes_per_s; /* after them (a shared disk drifts) */
  double disk_workload_bytes_per_s; /* after them, over the records the first cfg run routed to
                                     * (0: no trace); a disk behind a cache serves these faster */
  uint64_t workload_records;        /* distinct records in that set */
  double mem_bytes_per_s;
  double compute_s_per_token;   /* resident run: decode_s / tokens */
  double resident_hit_rate;     /* decode hits / accesses of the resident run */
  uint64_t resident_budget;
  int resident_capped;          /* 1: the resident budget was cut to the cfg cache plus
                                 * 7/8 of MemAvailable (a shared machine's free memory),
                                 * so resident_hit_rate may be below 1 */
  double missed_bytes_per_token, misses_per_token; /* cfg's cache, cold start */
  double read_bytes_per_token;   /* demand + speculative bytes per decode token */
  double spec_bytes_per_token;   /* of which lookahead prefetch */
  int prompt_tokens;             /* of the workload */
  uint64_t cache_slots, budget;  /* of the cfg run */
  int tokens;                    /* decode tokens of the cfg run */
  double io_wait_s_per_token;    /* cfg run: compute thread blocked on reads */
  double bound_disk_tok_s;       /* disk / read (nothing read: infinity) */
  double bound_compute_tok_s;    /* 1 / compute */
  double bound_tok_s;            /* min of the two */
  double achieved_tok_s;         /* cfg runs: median */
  double achieved_min_tok_s, achieved_max_tok_s; /* their spread */
  double compute_max_s_per_token; /* slowest resident run (spread) */
  double fraction;               /* achieved / bound */
  /* Per round: the cfg run's tok/s over the same round's resident tok/s
   * (median, min, max): how close decoding with the configured cache gets to
   * decoding with everything resident, under the same machine load. */
  double paired_fraction, paired_fraction_min, paired_fraction_max;
} spill_roofline;

/* Measures the roofline of MODEL_DIR under cfg (NULL = defaults); o may be
 * NULL. Errors as spill_engine_open, SPILL_E_IO from the probes. */
int spill_roofline_measure(const char *model_dir, const spill_config *cfg,
                           const spill_roofline_opts *o, spill_roofline *out, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
