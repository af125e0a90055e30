/* engine/model/model.h: the K3-family forward pass (docs/MODEL.md).
 *
 * A spill_model owns: the open container, the whole trunk in one aligned
 * allocation, per-layer views of every trunk tensor (resolved by name once at
 * open), the sequence state (MLA latent cache, KDA recurrent state and conv
 * rings, GQA KV cache, a sliding-window layer's as a ring of W - 1 + max_chunk
 * rows) sized for a maximum context, all scratch buffers (no
 * allocation per token) and a thread pool. Routed experts come through a
 * spill_expert_source (expert_source.h); placement (cache, disk, prefetch)
 * and thread count never change the logits: experts are accumulated per
 * selection slot and summed in router order, and matvecs are split by rows.
 *
 * Errors: every call returns SPILL_OK or a negative spill_status and fills
 * the spill_err (may be NULL) with a specific message. Thread safety: a model
 * is used by one thread at a time (it runs its own pool internally).
 * Depends on engine/base, engine/format, engine/quant.
 */
#ifndef SPILL_MODEL_MODEL_H
#define SPILL_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"
#include "engine/model/expert_source.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_model spill_model;

/* Observation hook, called by the forward pass (on the forward's thread). */
typedef struct spill_model_observer {
  void *ctx;
  /* After routing MoE layer `layer` for the n_tok tokens of a chunk starting
   * at position pos0 and requesting its experts from the source, before they
   * are consumed. x (n_tok, d_model) is the residual stream entering the MoE
   * (after attention): a lookahead prefetcher may call
   * spill_model_router_topk(m, layer + 1, x + t*D, ...) and its source's
   * prefetch here (queued behind this layer's demand reads). ids/weights (n_tok, top_k) in selection order, final weights (after
   * norm_topk and routed_scale). All pointers valid during the call only. A
   * negative return aborts the forward with that status. May be NULL. */
  int (*on_route)(void *ctx, int layer, int pos0, int n_tok, const float *x,
                  const uint32_t *ids, const float *weights, int k);
} spill_model_observer;

typedef struct spill_model_opts {
  int n_threads;   /* threads of the pool including the caller; <= 0: 1 */
  int ctx;         /* maximum context in tokens; <= 0: 4096 */
  int max_chunk;   /* tokens per prefill chunk; <= 0: 16 */
  int verify;      /* built-in source: crc32 every expert payload it reads */
  /* Trunk residency: 0 = read into anonymous memory (each tensor's crc32
   * checked), 1 = a read-only file-backed mapping of trunk.bin (evictable by
   * the OS under pressure, re-read on fault; crc32s checked at open, one
   * pass over the mapping), 2 = read and mlock()ed (SPILL_E_NOMEM naming RLIMIT_MEMLOCK if
   * the lock is refused). */
  int trunk_mode;
  /* Matvecs / LUT builds with fewer weight MACs run on the calling thread
   * (same numbers, no dispatch cost). <= 0: 32768. Tests set 1 to force
   * every matvec through the pool. */
  int par_min_weights;
  /* A split matvec's task holds at most this many weights (rows rounded to
   * a multiple of 4), so a big matrix (the output matrix) is spread in small
   * pieces and a slow or descheduled thread leaves little behind; the split
   * never changes a bit. <= 0: 262144. Tests set it small so every split
   * path runs on tiny models. */
  int task_max_weights;
  /* 1: matvecs of q4/q8 (group % 32 == 0), q4_k, q5_k and q6_k weights take their
   * input quantised to Q8_0 / Q8_K as ggml's CPU backend does, through the
   * integer kernels (engine/quant/kernels_xq.h); each routed expert input is
   * quantised once per layer and token. 0: f32 inputs. */
  int act_q8;
  /* NULL: the built-in synchronous source over this container. Otherwise
   * copied; the source must outlive the model (or be replaced first). */
  const spill_expert_source *experts;
  const spill_model_observer *observer; /* copied; may be NULL */
  /* Speculation: the most tokens of a verify chunk
   * (spill_model_forward_verify), in [0, max_chunk]; 0 = none. Sizes the
   * per-position logits, the recurrent-state snapshot and the recurrent
   * layers' inputs (model_memory.h). */
  int spec_max;
  /* 1: a decode token's shared experts run as their own row-split matvecs
   * before the MoE layer's parallel region (two or three fork-joins), as
   * they did before they became tasks of it; 0 (the default): tasks of the
   * region. The same bits either way (forward_test compares them). */
  int shared_outside_region;
  /* 1: sliding-window GQA layers keep ctx rows of keys and values (every
   * position: the held sequence can be cut back anywhere); 0: a ring of
   * W - 1 + max_chunk rows (spill_gqa_kv_rows). The logits are the same. */
  int swa_full_kv;
  /* 1: a MoE layer's steps around the routed experts run as their own
   * row-split fork-joins outside its parallel region, as they did before
   * they became tasks of it: a decode token's router and latent down/up
   * projections, and every token's rvq3 gate/up LUT builds. 0 (the
   * default): tasks of the region, so a decode token's MoE layer is one
   * fork-join. The same bits either way (forward_test compares them). */
  int steps_outside_region;
  /* 1: an MLA or KDA layer runs its projections, heads and output
   * projection as their own row-split fork-joins (the code before they
   * became steps of one parallel region per layer); 0 (the default): one
   * fork-join per layer. The same bits either way (forward_test compares
   * them). */
  int attn_outside_region;
} spill_model_opts;

/* Time split and counters of the last spill_model_forward call (all tokens
 * of that call). ns_other = ns_total minus the named parts. */
typedef struct spill_model_stats {
  int n_tokens;
  uint64_t ns_total;
  uint64_t ns_attn;        /* norms + attention of every layer */
  uint64_t ns_router;      /* router matvec, scores, top-k, latent down-projection */
  uint64_t ns_lut;         /* rvq3 LUT builds (layer input and per-expert down) */
  uint64_t ns_expert;      /* routed and shared expert matvecs, dense FFN, latent up */
  uint64_t ns_expert_wait; /* the caller's wait in the MoE regions: blocked in the
                              source's readiness call, or idle for a record or
                              another thread's part (part of ns_total) */
  /* thread-ns: the same summed over every compute thread of the regions (the
   * caller's included): what waiting on records costs the whole pool, not
   * only the caller; with one thread it equals ns_expert_wait */
  uint64_t ns_expert_wait_threads;
  uint64_t ns_lm_head;     /* final norm + output projection */
  uint64_t ns_other;
  uint64_t n_expert_requests; /* ids passed to request() (distinct per layer & chunk) */
  uint64_t n_expert_uses;     /* (token, expert) pairs computed */
  /* fork-joins (work handed to the pool's workers, spill_pool_dispatches):
   * all of the call's, and those of its MoE layers (router to output);
   * deterministic for a given model, input and thread count, 0 with one
   * thread */
  uint64_t n_parallel, n_parallel_moe;
} spill_model_stats;

/* Opens the container in `dir`, reads the trunk, resolves and checks every
 * tensor against the arch (an error names the missing or misshaped tensor),
 * allocates state and scratch for o->ctx tokens and starts the pool. o may
 * be NULL (defaults). On success *out is owned by the caller: close with
 * spill_model_close. */
int spill_model_open(const char *dir, const spill_model_opts *o, spill_model **out,
                     spill_err *e);
void spill_model_close(spill_model *m); /* NULL fine */

/* Clears the sequence state (caches, KDA state, position) for a new sequence. */
void spill_model_reset(spill_model *m);

/* Runs tokens[0..n) at positions pos..pos+n-1 and writes the logits of the
 * last one into logits_last (vocab floats; may be NULL). pos must be 0 (which
 * resets the state) or the number of tokens run since the last reset;
 * pos + n <= ctx (SPILL_E_RANGE otherwise). n > 1 is chunked prefill
 * (chunks of max_chunk). Token ids out of [0, vocab) give SPILL_E_RANGE. After
 * a failure the sequence state is undefined: reset before reuse. */
int spill_model_forward(spill_model *m, const int *tokens, int n, int pos, float *logits_last,
                        spill_err *e);

/* Speculation (docs/MODEL.md "Drafts"): runs tokens[0..n) (1 <= n <=
 * spec_max) as one chunk at positions n_past..n_past+n-1, exactly as a
 * forward would (so a chunk reads each distinct expert once per layer), and
 * keeps every position's logits: spill_model_verify_logits(m) gives (n,
 * vocab) floats, position i's bit-identical to what a forward of the same
 * tokens one at a time gives. Before running, the recurrent layers' state
 * (KDA: S and conv rings) is copied aside and each recurrent layer's input
 * of every chunk token is kept, so that spill_model_verify_keep(m, n_keep)
 * can then make the model hold only the first n_keep (1..n) tokens: the
 * positional caches (GQA, MLA) by lowering n_past (what lies above is only
 * read below n_past), the recurrent states by restoring the copy and
 * re-running only those layers' attention on the kept tokens' saved inputs
 * (no expert is read again). The state after keep(n_keep) is bit-identical
 * to a forward of those n_keep tokens. SPILL_E_INVALID_ARG for n out of
 * [1, spec_max] or a keep without a verify before it; forward's errors. */
int spill_model_forward_verify(spill_model *m, const int *tokens, int n, spill_err *e);
const float *spill_model_verify_logits(const spill_model *m);
int spill_model_verify_keep(spill_model *m, int n_keep, spill_err *e);

/* Lookahead hook: applies blk.layer.ffn_norm and the router of MoE layer
 * `layer` to the residual stream `hidden` (d_model) and writes the k
 * (1..min(n_experts, SPILL_MAX_TOPK)) best experts by selection score
 * (sigmoid + bias, or softmax) in selection order into ids_out and their selection scores into
 * scores_out (may be NULL). With attention residuals (arch.attn_res_block >
 * 0) and tok >= 0, the router's input is predicted as the layer's own FFN
 * mix MIX(bank, hidden, blk.layer.ffn_res_score) over the entries token tok
 * (its index in the chunk being run) has banked so far, then ffn_norm
 * (docs/MODEL.md "Lookahead under AttnRes"); called from the observer of
 * layer `layer` itself this is exactly the forward's routing. tok < 0 (or
 * no AttnRes) reads hidden alone; tok >= the chunk's tokens: SPILL_E_RANGE.
 * Uses its own scratch: may be called from the observer during a forward,
 * not concurrently with itself. */
int spill_model_router_topk(spill_model *m, int layer, const float *hidden, int tok, int k,
                            uint32_t *ids_out, float *scores_out, spill_err *e);

/* Forced routing (docs/MODEL.md "Forced routing"): ids is an (n_pos,
 * n_moe_layers, top_k) table; at sequence position p the i-th MoE layer uses
 * ids[p][i][0..top_k) (in that order, as the selection) instead of its
 * router's top-k. The router still runs: each forced id gets its own score
 * (sigmoid, or softmax over all experts; no selection bias) as its weight,
 * renormalised (norm_topk) and scaled (routed_scale) exactly as a selected
 * id. Everything downstream (expert source, observer, lookahead) is
 * unchanged. A forward reaching a position >= n_pos fails with SPILL_E_RANGE.
 * The table is checked here (SPILL_E_RANGE naming position, MoE layer and
 * slot for an id out of [0, n_experts) or repeated within a layer) and
 * borrowed: it must outlive its use. ids NULL (n_pos ignored) switches back
 * to the routers. Call between forwards only. */
int spill_model_set_forced_routing(spill_model *m, const uint32_t *ids, int n_pos,
                                   spill_err *e);

/* Stop flag (may be NULL): a forward checks *stop before every layer and
 * returns SPILL_E_INTERRUPTED when it is set (the sequence state is then
 * partial: reset before reuse). Borrowed; set between forwards only. */
void spill_model_set_stop(spill_model *m, volatile int *stop);

/* Replaces the expert source (NULL: back to the built-in one). Copied; the
 * source must outlive its use. Call between forwards only. */
void spill_model_set_expert_source(spill_model *m, const spill_expert_source *src);
void spill_model_set_observer(spill_model *m, const spill_model_observer *obs);

/* Sequence state for saving and restoring a conversation (engine's
 * spill_session_save / load). spill_model_state_spans: the floats of layer
 * l's state that a continuation after n_past tokens reads (n_past <= ctx),
 * as up to SPILL_MODEL_STATE_SPANS writable spans ptr[i][0..n[i]) in a fixed
 * order (a sliding-window layer's keys of its last W-1 positions then their
 * values, each in position order, so up to two pieces each where its ring
 * wraps); returns the span count (0 for a bad layer or n_past). The spans
 * of n_past tokens are valid while the model holds n_past tokens or was
 * just reset. spill_model_state_restore: after the caller has filled the
 * spans for n_past (starting from a reset model), makes n_past the
 * position the next forward continues from (SPILL_E_RANGE past ctx). */
#define SPILL_MODEL_STATE_SPANS 4
int spill_model_state_spans(spill_model *m, int l, int n_past, float *ptr[SPILL_MODEL_STATE_SPANS],
                            uint64_t n[SPILL_MODEL_STATE_SPANS]);
int spill_model_state_restore(spill_model *m, int n_past, spill_err *e);
/* The shortest prefix the held sequence can be cut back to by lowering
 * n_past: 0 for positional caches that hold every position (GQA, MLA);
 * n_past when some layer is recurrent (KDA, GDN: their state cannot run
 * backwards); with sliding-window layers, the first position whose W-1
 * predecessors their rings still hold (a ring keeps W - 1 + max_chunk
 * positions). spill_model_rewind cuts back to n in [that, n_past]
 * (SPILL_E_RANGE naming the limit otherwise); the next forward continues
 * at n with the logits a forward of only those n tokens would give. */
int spill_model_rewind_min(const spill_model *m);
int spill_model_rewind(spill_model *m, int n, spill_err *e);
/* 1 when some layer's state is recurrent (KDA): it cannot be cut back to
 * a shorter prefix by lowering n_past, as positional caches (GQA, MLA) can. */
int spill_model_recurrent(const spill_model *m);

/* Borrowed views, valid until close. */
const spill_arch *spill_model_arch(const spill_model *m);
const spill_container *spill_model_container(const spill_model *m);
const spill_model_stats *spill_model_last_stats(const spill_model *m);
int spill_model_n_past(const spill_model *m); /* tokens run since reset */

/* Bytes of sequence state for `ctx` tokens and prefill chunks of max_chunk
 * tokens (<= 0: 16): per MLA layer ctx*(kv_lora_rank + qk_rope_dim) floats,
 * per GQA layer rows*2*n_kv_heads*head_dim floats with rows = ctx, or
 * min(ctx, swa_window - 1 + max_chunk) on a sliding-window layer (a ring),
 * per KDA layer H*d*d + 3*(K-1)*H*d floats (independent of ctx). Saturates
 * at UINT64_MAX on overflow. */
uint64_t spill_model_state_bytes(const spill_arch *a, int ctx, int max_chunk);
/* Bytes of forward scratch for a ctx, thread count and prefill chunk
 * (includes rvq3 LUTs whatever the expert dtype: an upper bound). */
uint64_t spill_model_scratch_bytes(const spill_arch *a, int ctx, int n_threads, int max_chunk);
/* Bytes of the resident trunk allocation of an open model. */
uint64_t spill_model_trunk_bytes(const spill_model *m);
/* How the trunk is held: 0 = read into anonymous memory, 1 = a file-backed
 * mapping of trunk.bin, 2 = read and mlocked (the trunk_mode in effect). */
int spill_model_trunk_residency(const spill_model *m);
/* Forward-pass sections split across the thread pool since open (0 with
 * one thread). */
uint64_t spill_model_parallel_runs(const spill_model *m);
/* Those made inside MoE layers (router to output) since open. */
uint64_t spill_model_parallel_runs_moe(const spill_model *m);
/* MoE regions run on the pool since open: one per MoE layer and forward
 * chunk with n_threads > 1 (moe.c), 0 with one thread. */
uint64_t spill_model_moe_regions(const spill_model *m);
/* Times an idle thread of a MoE region slept after its bounded spin. */
uint64_t spill_model_moe_sleeps(const spill_model *m);
/* Thread-ns every compute thread spent waiting in the MoE regions since open
 * (spill_model_stats.ns_expert_wait_threads, summed over forward calls). */
uint64_t spill_model_moe_wait_threads_ns(const spill_model *m);

#ifdef __cplusplus
}
#endif
#endif
