/* engine/trace/router_trace.h: the router-trace schema (docs/TRACE.md):
 * traces in memory, their reader and their simple-format writer, and the
 * engine's per-token outputs (router rows and profile rows), written and
 * read here so that each schema lives in one module.
 *
 * Role: a trace is the routed experts of every token (the simple per-token
 * format and the engine's per-(token, layer) router format). Reading
 * validates untrusted JSONL and fails with "FILE:LINE: json.path: reason".
 * The analysis of traces (statistics, replay, Belady, converters of other
 * tools' formats) is a research tool: research/trace/trace_analysis.h.
 *
 * Invariants of a spill_trace: every token has the same n_layers layers and
 * the same top_k ids per layer, ids are distinct within a layer and lie in
 * [0, n_experts). Depends on engine/base only; the library never prints.
 * Not thread-safe per object; distinct objects are independent.
 */
#ifndef SPILL_TRACE_ROUTER_TRACE_H
#define SPILL_TRACE_ROUTER_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ read */

typedef enum spill_trace_format {
  SPILL_TRACE_SIMPLE = 0, /* {"tok": n, "layers": [[ids], ...]}, one line per token */
  SPILL_TRACE_ROUTER = 1, /* {"tok","pos","phase","layer","ids",...}, one line per (tok, layer) */
} spill_trace_format;

typedef enum spill_trace_phase {
  SPILL_TRACE_PHASE_NONE = 0, /* simple format: not recorded */
  SPILL_TRACE_PHASE_DECODE = 1,
  SPILL_TRACE_PHASE_PREFILL = 2,
} spill_trace_phase;

/* What a trace's header line says about it (docs/TRACE.md "Header line"):
 * where it came from and what its source lacks. All strings are heap copies
 * owned by the trace (spill_trace_free); NULL when not stated. */
typedef struct spill_trace_meta {
  char *model;           /* the model that routed */
  char *source;          /* tool / repository / file the routing came from */
  char *converted_from;  /* `spill trace convert --from` format, if converted */
  uint32_t n_experts;    /* experts per layer the header declares (0 = not declared) */
  uint32_t top_k_native; /* the model's own top-k when the trace's was overridden (0 = same) */
  int rank_order;        /* 1: ids in router-score order; 0: order unknown; -1: not stated */
  char **caveats;        /* (n_caveats) what the source lacks, one sentence each */
  uint32_t n_caveats;
  uint32_t n_sequences;  /* header lines read (a concatenation has several); 0 = none */
} spill_trace_meta;

typedef struct spill_trace {
  spill_trace_format format;
  uint32_t n_tokens, n_layers, n_experts, top_k;
  uint32_t *layer_ids; /* (n_layers) model layer index of each traced layer, ascending */
  int64_t *tok;        /* (n_tokens) the "tok" field, in order of first appearance */
  int64_t *pos;        /* (n_tokens) router format: "pos"; simple: -1 */
  uint8_t *phase;      /* (n_tokens) spill_trace_phase */
  uint32_t *ids;       /* (n_tokens, n_layers, top_k) expert ids in selection order */
  float *weights;      /* (n_tokens, n_layers, top_k) gate weights, or NULL (simple format:
                          when every line has "weights"; router format: never kept) */
  spill_trace_meta meta; /* header line; zeroed (rank_order -1) without one */
  /* Router format only (zero for simple traces): engine-recorded outcomes. */
  uint64_t n_recorded_hits; /* sum of "hit" flags */
  uint64_t n_pred;          /* lookahead ids predicted ("pred" entries) */
  uint64_t n_pred_correct;  /* ... that are among the layer's "ids" */
  /* rows of rolled-back verify-chunk tokens ("rejected": true): validated,
   * counted here and left out of the tokens above (they are not part of the
   * sequence; their hits and predictions are not in the counts above) */
  uint64_t n_rejected_rows;
  /* rows whose "weights" hold a null (the engine wrote a NaN or infinite
   * gate weight as null: the model's numbers went non-finite) */
  uint64_t n_nonfinite_weight_rows;
} spill_trace;

typedef struct spill_trace_read_opts {
  uint32_t n_experts;  /* 0 = infer (max id + 1); else ids must be < n_experts */
  const char *name;    /* name used in errors for spill_trace_parse (NULL: "trace") */
} spill_trace_read_opts;

/* Parses a JSONL trace held in buf[0..len) (need not be NUL-terminated).
 * Blank lines are skipped. Lines of the router format are grouped by "tok"
 * (tokens in order of first appearance, layers sorted ascending). On success
 * *out is filled and owned by the caller (spill_trace_free). Errors:
 * SPILL_E_TRACE with "NAME:LINE: path: reason" (bad JSON, wrong types, ids
 * out of range, duplicate ids, inconsistent layer or id counts, mixed
 * formats, empty trace), SPILL_E_NOMEM. opts may be NULL. */
int spill_trace_parse(const char *buf, size_t len, const spill_trace_read_opts *opts,
                      spill_trace *out, spill_err *e);
/* Reads FILE (at most 4 GiB) and parses it; errors are named after FILE.
 * SPILL_E_IO if it cannot be read. */
int spill_trace_read_file(const char *file, const spill_trace_read_opts *opts, spill_trace *out,
                          spill_err *e);
/* Frees the arrays and zeroes *t. Accepts NULL and a zeroed trace. */
void spill_trace_free(spill_trace *t);

/* ----------------------------------------------------------------- write */

/* Writes t as a simple-format JSONL trace (docs/TRACE.md): a header line
 * from t->meta (always written: it states the expert count), then one line
 * per token with "pos"/"phase" when known and "weights" when t has them.
 * Weights are printed with the fewest digits that read back to the same
 * float. Atomic (temp file + rename). SPILL_E_IO, SPILL_E_NOMEM. */
int spill_trace_write_file(const spill_trace *t, const char *path, spill_err *e);
/* Same text into a malloc'd NUL-terminated buffer (caller frees). */
int spill_trace_format_jsonl(const spill_trace *t, char **out, size_t *len, spill_err *e);

/* --------------------------------------------- the engine's per-token rows */

/* One router-format line (docs/TRACE.md "Router format"): the ids the
 * router selected for one token at one MoE layer, their gate weights, the
 * lookahead's predictions for this layer (decode only) and the hit flag of
 * each id. Arrays are borrowed for the call. */
typedef struct spill_trace_row {
  int64_t tok, pos;
  spill_trace_phase phase;  /* DECODE or PREFILL */
  int layer;                /* model layer index */
  int k;                    /* (k) entries in ids, weights, hit */
  const uint32_t *ids;      /* (k) */
  const float *weights;     /* (k) */
  int n_pred;               /* (n_pred) entries in pred; 0 = none */
  const uint32_t *pred;
  const uint8_t *hit;       /* (k) 1 if the id was served by the cache */
  int rejected;             /* 1: a token of a verify chunk that was rolled back (a rejected
                             * draft): its routing was run and its experts read, but it is
                             * not part of the sequence ("rejected": true) */
} spill_trace_row;

/* Formats r as one line (ending in "\n") into line[0..cap), cap >= 128;
 * returns its length. Lists stop 64 bytes short of cap (8192 bytes hold
 * any row within the schema's limits). */
int spill_trace_row_format(const spill_trace_row *r, char *line, size_t cap);

/* An append-only router-trace file with an optional size cap. */
typedef struct spill_trace_writer {
  FILE *f;            /* NULL: closed (rows are dropped) */
  uint64_t bytes;     /* written so far */
  uint64_t max_bytes; /* 0 = no cap */
  int capped;         /* a row did not fit under max_bytes: nothing more is written */
} spill_trace_writer;

/* Creates/truncates path. SPILL_E_IO "trace PATH: reason". */
int spill_trace_writer_open(spill_trace_writer *w, const char *path, uint64_t max_bytes,
                            spill_err *e);
/* Appends one row; returns 1 if written, 0 if dropped (closed, or the cap
 * reached: then capped is set and later rows are dropped too). */
int spill_trace_writer_row(spill_trace_writer *w, const spill_trace_row *r);
void spill_trace_writer_flush(spill_trace_writer *w);
/* Closes and zeroes *w; accepts NULL and a closed writer. */
void spill_trace_writer_close(spill_trace_writer *w);

/* One per-token profile line (docs/TRACE.md "Profile"): a forward call
 * (one decode token or one prefill chunk) with its time split and reads. */
typedef struct spill_profile_row {
  int pos;                  /* first position of the call */
  spill_trace_phase phase;  /* DECODE or PREFILL */
  int n_tokens;             /* tokens in the call */
  double wall_ms;
  double attention_ms, router_ms, expert_matmul_ms, table_build_ms, lm_head_ms, other_ms;
  double io_wait_ms;        /* compute thread blocked on reads */
  /* every compute thread's wait in the MoE regions, summed (thread-ms);
   * rows of older files without it read as 0 */
  double expert_wait_threads_ms;
  uint64_t reads, bytes_read, demand_hits, demand_misses;
  uint64_t spec_issued, spec_used, spec_wasted;
  double read_p50_ms, read_p99_ms;
  uint64_t major_faults, rss_bytes;
  /* drafts (cfg.draft): tokens drafted into this call (a verify chunk holds
   * the sampled token and its drafts), how many were accepted, and the
   * tokens the call generated (decode: 1 without drafts, accepted + 1 with;
   * prefill: 0). Rows of older files without them read as 0, 0 and (decode)
   * n_tokens. */
  uint64_t drafted, accepted, generated;
  /* context switches of the whole process (every thread: compute, pool,
   * reader, checker) during the call, getrusage's ru_nvcsw and ru_nivcsw;
   * rows of older files without them read as 0 */
  uint64_t ctx_switches_voluntary, ctx_switches_involuntary;
  /* fork-joins of the call (work handed to the compute pool's workers; 0
   * with one thread): all, and those inside MoE layers (router to output).
   * Deterministic for a model, input and thread count. Rows of older files
   * without them read as 0. */
  uint64_t parallel_regions, parallel_regions_moe;
  /* the expert read backend ("pread" or "uring") and why it was chosen
   * (spill_engine_io_backend_why: "auto: io_uring available", "auto: io_uring
   * refused: ...", "set: io_backend pread"); "" in rows of older files.
   * The reader refuses a backend other than pread/uring. */
  char io_backend[8];
  char io_backend_why[256];
} spill_profile_row;

/* Appends p as one line to f and flushes; times are printed to the
 * microsecond (%.3f ms). Returns 1, or 0 if f is NULL. */
int spill_profile_write_row(FILE *f, const spill_profile_row *p);
/* Reads one profile line buf[0..len) (need not be NUL-terminated) into *p.
 * SPILL_E_TRACE "NAME: key: reason" for anything the writer would not
 * produce (missing keys, wrong types, negative or non-integer counters).
 * name may be NULL ("profile"). */
int spill_profile_parse_row(const char *buf, size_t len, const char *name, spill_profile_row *p,
                            spill_err *e);

/* ids of token t, layer index l (0..n_layers-1): top_k entries. */
static inline const uint32_t *spill_trace_ids(const spill_trace *t, uint32_t tok, uint32_t l) {
  return t->ids + ((size_t)tok * t->n_layers + l) * t->top_k;
}

#ifdef __cplusplus
}
#endif
#endif
