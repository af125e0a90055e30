/* research/trace/trace_analysis.h: router-trace analysis (docs/TRACE.md,
 * docs/CACHE.md): converters of other tools' traces, locality statistics,
 * and replay through the expert cache (online policies and Belady's MIN).
 *
 * Role: the offline side of expert caching, a research tool beside the
 * inference library. Stats summarise locality; replay drives the very
 * spill_cache code the engine uses (simulation mode, spill_cache_access) or
 * the offline optimum. Traces come from the schema module (engine/trace,
 * router_trace.h). Depends on engine/base, engine/cache and engine/trace
 * only; never prints. Not thread-safe per object.
 */
#ifndef SPILL_RESEARCH_TRACE_ANALYSIS_H
#define SPILL_RESEARCH_TRACE_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/trace/router_trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --------------------------------------------------------------- convert */

/* Source formats of other tools (docs/TRACE.md "Converting"). */
typedef enum spill_trace_source {
  SPILL_TRACE_SRC_BMOE_CSV = 0,       /* llama.cpp-based `--route-trace` CSV (BigMoeOnEdge) */
  SPILL_TRACE_SRC_HF_ROUTER_JSON = 1, /* transformers capture: JSON per sequence, "router_data" */
  SPILL_TRACE_SRC_SORTED_IDS_TXT = 2, /* one line per (pass, layer): sorted ids (mixtral-offloading) */
  SPILL_TRACE_SRC_VLLM_ROUTED_JSON = 3, /* vLLM --enable-return-routed-experts response JSON */
  SPILL_TRACE_SRC_LLAMA_MOE_CSV = 4,    /* llama.cpp's llama-moe-trace CSV (MOE_TRACE_OUT) */
  SPILL_TRACE_SRC_FLASHMOE_BIN = 5,     /* binary records: int32 layer, int32 K, [hidden], ids */
  SPILL_TRACE_SRC_COUNT
} spill_trace_source;

/* Name <-> enum ("bmoe-csv", "hf-router-json", "sorted-ids-txt",
 * "vllm-routed-json", "llama-moe-csv", "flashmoe-bin"); find
 * returns -1 for an unknown name, name_at NULL past the end. */
int spill_trace_source_find(const char *name);
const char *spill_trace_source_name_at(size_t i);

typedef enum spill_trace_incomplete {
  SPILL_TRACE_DROP_TOKENS = 0, /* drop tokens that lack a layer others have (default) */
  SPILL_TRACE_DROP_LAYERS = 1, /* keep every token, drop layers some token lacks */
} spill_trace_incomplete;

typedef struct spill_trace_convert_opts {
  uint32_t n_experts;    /* 0 = from the source (bmoe-csv header) or highest id + 1 */
  uint32_t n_layers;     /* sorted-ids-txt: layers per pass (required there); else 0 */
  uint32_t top_k;        /* sorted-ids-txt: ids per decode line (0 = the last line's);
                            llama-moe-csv without a token column: rows per token (0 = the
                            last layer run's length) */
  uint32_t hidden;       /* flashmoe-bin: f32 hidden-state values per record (0 = none) */
  uint32_t top_k_native; /* the model's own top-k if the source overrode it (0 = same) */
  const char *model;     /* recorded in the header (NULL: the source's, if any) */
  const char *source;    /* recorded in the header (provenance; NULL: none) */
  spill_trace_incomplete incomplete;
} spill_trace_convert_opts;

/* Converts n_in source files of format src into one trace: inputs are
 * concatenated in order (each is one sequence; hf-router-json takes one
 * file per sequence, the others usually one). in[i][0..len[i]) need not be
 * NUL-terminated; names[i] is used in errors. The result has weights, pos
 * and phase where the source has them and meta.caveats listing what it
 * lacks. Malformed input: SPILL_E_TRACE "NAME:LINE: reason" (first
 * problem). SPILL_E_INVALID_ARG for bad options, SPILL_E_NOMEM. */
int spill_trace_convert(spill_trace_source src, const char *const *in, const size_t *len,
                        const char *const *names, size_t n_in,
                        const spill_trace_convert_opts *opts, spill_trace *out, spill_err *e);

/* ----------------------------------------------------------------- stats */

typedef struct spill_trace_layer_stats {
  uint32_t layer;          /* model layer index */
  uint32_t distinct;       /* experts used at least once */
  double gini;             /* Gini coefficient of the n_experts use counts (0 = uniform) */
  double top10_share;      /* share of activations of the top ceil(10%) experts */
  double reuse_next;       /* this layer's next-token reuse (ids of t also used by t-1) */
  /* Precision of predicting this layer's ids from the previous traced layer's
   * (same token) by co-activation counts learned online; -1 for layer 0 or
   * when the co-activation table is too big (see spill_trace_stats). */
  double coact_precision;
} spill_trace_layer_stats;

/* Reuse distance buckets, in tokens since the same (layer, expert) was last
 * used: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, >128, and first use. */
#define SPILL_TRACE_RD_BUCKETS 10
/* Upper bound of bucket i (inclusive; 0 for ">128" and "first use"). */
uint32_t spill_trace_rd_bucket_hi(int i);

/* Fractions of the pool at which stats report Belady's hit rate. */
#define SPILL_TRACE_BELADY_POINTS 3
extern const double spill_trace_belady_fracs[SPILL_TRACE_BELADY_POINTS]; /* 0.03 0.06 0.12 */

typedef struct spill_trace_stats {
  uint32_t n_tokens, n_layers, n_experts, top_k;
  uint64_t accesses;         /* n_tokens * n_layers * top_k */
  uint32_t pool;             /* n_layers * n_experts (layer, expert) pairs */
  double touched_per_token;  /* distinct (layer, expert) pairs per token, mean */
  uint32_t touched_total;    /* distinct pairs over the whole trace */
  double reuse_next;         /* pairs of token t also used by t-1 / pairs of t, t >= 1 */
  /* Smallest number of pairs that carry >= 50/80/95% of all activations, and
   * as a fraction of the pool. */
  uint32_t cover_pairs[3];
  double cover_frac[3];
  double gini_mean, top10_share_mean; /* means over layers */
  spill_trace_layer_stats *layers;    /* (n_layers), owned: spill_trace_stats_free */
  /* Router format: engine-recorded hit rate and lookahead precision (-1 if n/a). */
  double recorded_hit_rate, lookahead_precision;
  /* Reuse distance distribution: accesses per bucket (SPILL_TRACE_RD_BUCKETS). */
  uint64_t reuse_dist[SPILL_TRACE_RD_BUCKETS];
  /* Cross-layer co-activation: how well layer l's ids predict layer l+1's
   * for the same token. For every token t >= 1 of the window and every pair
   * of consecutive traced layers, the top_k experts of layer l+1 with the
   * highest sum of co-activation counts C[l][a][b] over a in ids(t, l)
   * (counted on tokens before t; ties: more popular, then lower id) are the
   * prediction; precision = predicted ids that are used / top_k. Baselines
   * with the same online knowledge: the top_k most popular of layer l+1 so
   * far, and layer l+1's ids of the previous token. -1 when n_layers < 2 or
   * n_layers * n_experts^2 exceeds 2^26 (table too big). */
  double coact_precision, coact_popular_precision, coact_prev_token_precision;
  /* Belady's MIN (demand, no bypass) hit rate with round(frac * pool) slots
   * (at least 1) for frac in spill_trace_belady_fracs. */
  uint32_t belady_slots[SPILL_TRACE_BELADY_POINTS];
  double belady_hit_rate[SPILL_TRACE_BELADY_POINTS];
} spill_trace_stats;

/* Computes the statistics of tokens [tok_begin, tok_end) of t (tok_end 0 =
 * n_tokens). SPILL_E_INVALID_ARG on an empty or out-of-range window,
 * SPILL_E_NOMEM. *out owns its layers array: spill_trace_stats_free. */
int spill_trace_compute_stats(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end,
                              spill_trace_stats *out, spill_err *e);
void spill_trace_stats_free(spill_trace_stats *s); /* accepts NULL */

/* ---------------------------------------------------------------- chunks */

/* Verify chunks (docs/MODEL.md "Drafts"): for consecutive, non-overlapping
 * chunks of k tokens inside [tok_begin, tok_end) (tok_end 0 = n_tokens),
 * the distinct experts a chunk selects per layer (what it loads once)
 * against k x top_k (what k single-token steps load without a cache). */
typedef struct spill_trace_chunk_stats {
  int k;
  uint64_t chunks;        /* whole chunks in the window */
  double union_per_layer; /* mean distinct experts of a chunk per layer */
  double ratio;           /* union_per_layer / (k x top_k) */
} spill_trace_chunk_stats;
/* SPILL_E_INVALID_ARG for k outside [1, 64] or a bad window; SPILL_E_NOMEM. */
int spill_trace_chunk_union(const spill_trace *t, uint32_t tok_begin, uint32_t tok_end, int k,
                            spill_trace_chunk_stats *out, spill_err *e);

/* ---------------------------------------------------------------- replay */

typedef struct spill_trace_replay_result {
  uint64_t hits, accesses;
  double hit_rate; /* hits / accesses */
} spill_trace_replay_result;

/* Replays tokens [tok_begin, tok_end) (tok_end 0 = all) from a cold cache of
 * n_slots slots: for each token, its layers in order, each layer's ids in
 * selection order, one demand access per (layer, expert). policy is a cache
 * policy name (spill_cache_policy_find: the engine's own implementation,
 * driven through spill_cache_access in simulation mode), "belady" (offline
 * MIN: always insert on a miss, evict the resident used farthest in the
 * future) or "belady-bypass" (MIN that may also decline to insert a key whose
 * next use is farther than every resident's). Errors: SPILL_E_INVALID_ARG
 * (unknown policy, n_slots 0, bad window), SPILL_E_NOMEM.
 *
 * flags: SPILL_TRACE_REPLAY_BATCH replays an online policy the way the
 * streaming engine asks the cache (engine/stream/expert_stream.c): a layer's
 * ids are acquired together, each entry (hit or claimed miss) stays pinned
 * until the whole layer has been acquired, then all are marked ready and
 * released. Pinned entries cannot be victims, so this is what the engine's
 * decode hit rate is (docs/CACHE.md "Through the engine"). A layer whose
 * misses find every slot pinned counts them as misses not cached (the
 * engine reads them into bounce buffers). Belady ignores the flag. */
#define SPILL_TRACE_REPLAY_BATCH 1u
int spill_trace_replay(const spill_trace *t, const char *policy, uint32_t n_slots, uint64_t seed,
                       uint32_t tok_begin, uint32_t tok_end, unsigned flags,
                       spill_trace_replay_result *out, spill_err *e);

/* Belady on a raw access sequence of dense keys in [0, n_keys): hits of MIN
 * with n_slots slots; bypass != 0 allows declining insertion. Returns the
 * hit count, or -1 on allocation failure / a key out of range. */
int64_t spill_trace_belady_hits(const uint32_t *keys, size_t n, uint32_t n_keys,
                                uint32_t n_slots, int bypass);

/* The i-th replayable policy name (the cache's policies, then "belady",
 * "belady-bypass"), or NULL past the end. */
const char *spill_trace_policy_name_at(size_t i);

#ifdef __cplusplus
}
#endif
#endif
