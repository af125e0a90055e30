/* research/sim/sim.h: a model of decode with no container (docs/SIM.md).
 *
 * Role: predicts hit rate, bytes read and tok/s per RAM budget for a model
 * shape and a machine, without weights. Per MoE layer it takes the routed
 * experts (a router trace, or synthetic routing with a stated popularity
 * skew, next-token reuse and cross-layer co-activation, calibrated by
 * default), drives the engine's own cache policies through engine/cache in
 * simulation mode (same acquire / claim / ready / release
 * calls and pin pattern as engine/stream), models router lookahead (the
 * trace's recorded predictions, or a precision per rank), a reader of N
 * threads on a device of given bandwidth and per-read latency, compute time
 * per layer and per expert, and a memory model of the machine (LRU over
 * trunk pieces and cache slots past physical RAM: page-ins at a stated cost).
 * The device can instead be the engine's bandwidth cap (io_throttle), a
 * token bucket with a burst allowance, modelled exactly.
 *
 * Invariants: deterministic for a config (the synthetic routing and policy
 * seeds are in it); the cache part is exact (the same access sequence gives
 * the engine's counters), the timing part is a model. Configs are untrusted
 * input: errors name the JSON path. Depends on engine/base, cache, trace and
 * plan only; never prints.
 */
#ifndef SPILL_SIM_SIM_H
#define SPILL_SIM_SIM_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/trace/router_trace.h"
#include "research/sim/routing_defaults.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_SIM_MAX_BUDGETS 32
#define SPILL_SIM_MAX_RANKS 16
#define SPILL_SIM_PATH_MAX 512
#define SPILL_SIM_SKEW_MAX 64     /* per-layer popularity entries (resampled by depth) */
#define SPILL_SIM_CAL_TOKENS 150  /* calibration pilot: the OLMoE tuning half's length */
#define SPILL_SIM_CAL_LAYERS 8    /* ... over at most this many layers */
#define SPILL_SIM_CAL_REUSE_X 4   /* reuse is measured on this many times the tokens */

/* Defaults of synthetic routing (per-layer top-10% share, next-token reuse,
 * co-activation, lookahead precision by rank): routing_defaults.h, shared
 * with research/gen. */

typedef enum spill_sim_routing_kind {
  SPILL_SIM_ROUTING_TRACE = 0,     /* a router trace file (either format) */
  SPILL_SIM_ROUTING_SYNTHETIC = 1, /* Zipf popularity, topics: reuse and co-activation */
} spill_sim_routing_kind;

typedef enum spill_sim_la_source {
  SPILL_SIM_LA_PRECISION = 0, /* predictions drawn with the stated precision per rank */
  SPILL_SIM_LA_TRACE = 1,     /* the trace's recorded "pred" ids (router format) */
} spill_sim_la_source;

typedef struct spill_sim_config {
  char name[64];
  /* ---- model shape (from "shape", "dir" via the client, or explicit) */
  char model_dir[SPILL_SIM_PATH_MAX]; /* "dir": the client fills the numbers (spill_sim_set_plan) */
  int ctx, threads;                   /* what the floor is planned for (4096, 2) */
  uint32_t moe_layers, n_experts, top_k;
  uint64_t record_bytes;
  uint64_t trunk_bytes;   /* resident trunk */
  uint64_t floor_bytes;   /* the planner's floor (includes min_cache) */
  uint64_t min_cache_bytes;
  /* ---- routing */
  spill_sim_routing_kind routing;
  char trace_path[SPILL_SIM_PATH_MAX];
  uint32_t tok_begin, tok_end;   /* trace window (tok_end 0 = all) */
  uint32_t synth_tokens;         /* synthetic: decode tokens */
  uint32_t synth_prefill;        /* synthetic: prompt tokens before them */
  double synth_zipf;             /* popularity exponent over a per-layer random ranking */
  double synth_top10_share;      /* > 0: fit the exponent to this top-10% share instead */
  double synth_top10_layers[SPILL_SIM_SKEW_MAX]; /* per-layer top-10% shares (n > 0: used
                                                    instead of the two above, by depth) */
  uint32_t synth_top10_n;
  double synth_reuse;            /* target next-token reuse (fraction of a layer's ids) */
  double synth_coact;            /* target co-activation precision (trace stats' measure) */
  uint64_t synth_seed;
  int prefill_chunk;             /* prompt tokens per chunk (layer-major, as the engine) */
  /* ---- cache */
  char policy[16];
  uint64_t policy_seed;
  int64_t cache_slots;           /* >= 0 overrides the budget's slot count (-1: from budget) */
  /* ---- lookahead (depth 1) */
  int la_width;                  /* experts prefetched per next layer (0 = off) */
  spill_sim_la_source la_source;
  double la_precision[SPILL_SIM_MAX_RANKS]; /* probability the rank-r prediction is right */
  /* ---- reader and device */
  int io_threads;
  double io_bandwidth;           /* bytes/s of the device */
  double io_latency_s;           /* per read, overlapped across threads */
  double io_bucket_burst_s;      /* >= 0: the bandwidth is a token bucket with this burst
                                    (the engine's io_throttle, engine/io: 50 ms) instead of
                                    a device; -1 (default) = device model */
  /* ---- compute */
  double t_layer_s;              /* per MoE layer, before its experts (attention, router,
                                    shared experts, tables): overlaps the layer's reads */
  double t_expert_s;             /* per routed expert applied */
  double t_token_s;              /* per token, outside the MoE layers (lm_head, dense) */
  double layer_overlap;          /* share of t_layer_s run after the layer's reads are
                                    issued (shared experts, tables): 0.5 */
  /* ---- machine memory model */
  uint64_t ram_bytes;            /* physical RAM (0 = no memory model) */
  uint64_t reserved_bytes;       /* held by the OS and other processes */
  uint64_t extra_bytes;          /* engine memory outside the budget (runtime, page cache) */
  int swap;                      /* anonymous memory can be paged out */
  int trunk_file;                /* trunk file-backed (mmap): evicted free, re-read */
  double pagein_bandwidth;       /* bytes/s of page-ins (swap or file faults) */
  double fault_latency_s;        /* per faulted page, serial on the faulting thread */
  uint64_t page_bytes;
  uint32_t trunk_pieces;         /* trunk split in this many LRU units (default 4 per layer) */
  /* ---- budgets */
  int n_budgets;
  uint64_t budgets[SPILL_SIM_MAX_BUDGETS];
} spill_sim_config;

/* Defaults (docs/SIM.md). */
void spill_sim_config_default(spill_sim_config *c);
/* Parses and validates JSON text; source names it in errors
 * ("k3.json: io.bandwidth: expected a size or bytes/s"). Relative trace
 * paths are kept as given. SPILL_E_CONFIG on any problem. */
int spill_sim_config_parse(const char *text, const char *source, spill_sim_config *c,
                           spill_err *e);
int spill_sim_config_load(const char *file, spill_sim_config *c, spill_err *e);
/* For "model": {"dir": ...}: the client (which may open containers) supplies
 * the numbers the planner gives for that model. */
void spill_sim_set_plan(spill_sim_config *c, uint32_t moe_layers, uint32_t n_experts,
                        uint32_t top_k, uint64_t record_bytes, uint64_t trunk_bytes,
                        uint64_t floor_bytes, uint64_t min_cache_bytes);

typedef struct spill_sim_result {
  uint64_t budget;
  uint32_t slots;
  uint64_t over_bytes;          /* engine memory past RAM - reserved (0 = fits) */
  int oom;                      /* no swap and anonymous memory alone does not fit */
  uint32_t tokens;              /* decode tokens measured */
  uint64_t accesses, hits, misses; /* decode demand */
  double hit_rate;
  uint64_t reads, bytes_read, bytes_read_spec;   /* decode */
  uint64_t spec_issued, spec_used, spec_wasted;
  uint64_t la_predicted, la_correct;
  double s_per_token, tok_per_s;
  double compute_s, io_stall_s, paging_s;        /* per token; paging_s: page-ins on the
                                                    compute thread (reader-side ones show
                                                    up as stall) */
  double pagein_bytes, faults;                   /* per token */
} spill_sim_result;

/* The routing the config asks for as a trace (read, windowed, or generated).
 * *out owned by the caller (spill_trace_free). For synthetic routing,
 * *zipf_out gets the exponent used (fitted when top10_share is given). */
int spill_sim_routing(const spill_sim_config *c, spill_trace *out, double *zipf_out, spill_err *e);

/* Runs every budget on trace t. res has c->n_budgets entries. */
int spill_sim_run(const spill_sim_config *c, const spill_trace *t, spill_sim_result *res,
                  spill_err *e);

/* Synthetic routing (sim_routing.c), exposed for tests: n_layers x top_k ids
 * per token from Zipf popularity over a seeded per-layer ranking (exponent
 * f x zipf[l]), with targets for the mean top-10% share (solves f; 0 = f 1),
 * next-token reuse and cross-layer co-activation precision, as
 * spill_trace_compute_stats measures them on SPILL_SIM_CAL_TOKENS tokens
 * (0 = none). The solved knobs are returned in the *_out fields. */
typedef struct spill_sim_synth_params {
  uint32_t n_tokens, n_layers, n_experts, top_k;
  const double *zipf; /* (n_layers) exponents */
  double reuse, coact, top10;
  double skew_out, reuse_p_out, topic_b_out; /* solved: f, reuse and topic probabilities */
} spill_sim_synth_params;
int spill_sim_synth(spill_sim_synth_params *sp, uint64_t seed, spill_trace *out,
                    spill_err *e);
/* Zipf exponent whose top ceil(10%) experts carry `share` of the weight. */
double spill_sim_zipf_for_top10(uint32_t n_experts, double share);

#ifdef __cplusplus
}
#endif
#endif
