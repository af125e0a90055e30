/* engine/trace/router_trace.h: the router-trace schema (docs/TRACE.md):
 * traces in memory, their reader and their simple-format writer.
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

/* ids of token t, layer index l (0..n_layers-1): top_k entries. */
static inline const uint32_t *spill_trace_ids(const spill_trace *t, uint32_t tok, uint32_t l) {
  return t->ids + ((size_t)tok * t->n_layers + l) * t->top_k;
}

#ifdef __cplusplus
}
#endif
#endif
