/* engine/tok/jinja_value.h: the value layer of the Jinja interpreter, below
 * both the parser (jinja_parse.c) and the evaluator (jinja_eval.c): the
 * render context (jctx) with its budget (spill_chat_budget: steps, depth,
 * memory, output, cancellation), the arena that owns every value and AST
 * node of one render, the value constructors, lists, dicts, equality and the
 * string buffer. Everything is allocated from one arena and freed at once;
 * values are immutable except namespaces.
 *
 * Errors are sticky: the first failure (a budget, an allocation, a syntax or
 * type error) is recorded in jctx.err with its detail in jctx.e, and later
 * ones never overwrite it, so a value that could not be built (NULL from
 * jc_alloc) can never surface as some other error. Depends on engine/base
 * and the public spill_tok.h only.
 */
#ifndef SPILL_TOK_JINJA_VALUE_H
#define SPILL_TOK_JINJA_VALUE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/tok/spill_tok.h"

/* ---- arena ---- */
typedef struct jarena_block {
  struct jarena_block *next;
  size_t used, cap;
  char data[];
} jarena_block;
typedef struct jarena {
  jarena_block *head;
  size_t bytes; /* malloc'ed by the blocks, the figure max_memory_bytes bounds */
} jarena;
void ja_free(jarena *a);

/* ---- render context and budget ---- */
typedef struct jctx {
  jarena arena;
  spill_err *e;
  int err;             /* first error status (sticky), 0 = none */
  spill_chat_budget b; /* every limit filled (no zeros) */
  uint64_t steps, next_poll;
  int depth; /* evaluation nesting now (nodes and nested values) */
} jctx;

/* Sets c's budget from b (NULL or 0 fields = defaults). */
void jc_init(jctx *c, const spill_chat_budget *b, spill_err *e);
/* Records the first error (code, printf detail prefixed "chat template: ")
 * and returns c->err (the first error, which may be an earlier one). */
int jc_fail(jctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Charges n steps; every SPILL_CHAT_POLL_STEPS polls the stop flag and the
 * cancel callback. Returns c->err (SPILL_E_TMPL_STEPS, SPILL_E_INTERRUPTED). */
int jc_step(jctx *c, uint64_t n);
/* Charges the work of scanning or copying `bytes` bytes (1 step per KiB). */
static inline int jc_bytes(jctx *c, size_t bytes) { return jc_step(c, 1 + (bytes >> 10)); }
/* Enters / leaves one level of evaluation nesting (SPILL_E_TMPL_EVAL_DEPTH
 * past the budget; jc_leave only after a successful jc_enter). */
int jc_enter(jctx *c);
static inline void jc_leave(jctx *c) { c->depth--; }
/* n zeroed bytes from the arena, charged to the memory budget and the step
 * counter; NULL (c->err set: SPILL_E_TMPL_MEMORY or SPILL_E_NOMEM) on failure. */
void *jc_alloc(jctx *c, size_t n);
/* c->err if set, else SPILL_E_NOMEM with a detail: what a caller returns
 * after an allocation came back NULL. */
int jc_oom(jctx *c);

/* ---- values ---- */
typedef enum {
  JV_UNDEF = 0,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST,
  JV_DICT,
  JV_FUNC, /* builtin function: i = id */
  JV_METHOD, /* bound method: self + name */
  JV_MACRO,  /* a {% macro %}: its definition and the scope it was defined in */
} jv_type;

typedef struct jv jv;
typedef struct jstr { size_t len; char s[]; } jstr;
typedef struct jlist { size_t n, cap; jv *v; } jlist;
typedef struct jdict { size_t n, cap; jv *k; jv *v; int ns; } jdict; /* ns: a namespace() */

struct jv {
  jv_type t;
  union {
    int b;
    int64_t i;
    double f;
    jstr *s;
    jlist *l;
    jdict *d;
    struct jmethod *m;
    struct jmacro *mac;
  } u;
  const char *undef_name; /* JV_UNDEF: what was undefined (for errors) */
};
typedef struct jmethod { jv self; const char *name; } jmethod;

jv jv_int(int64_t i);
jv jv_bool(int b);
jv jv_none(void);
jv jv_float(double f);
jv jv_undef(const char *name);
/* A string copied into the arena (JV_NONE with c->err set on failure: the
 * evaluator checks c->err after every node, so it never travels). */
jv jv_str(jctx *c, const char *s, size_t n);
/* An arena string of n bytes to fill (NULL on failure, c->err set). */
jstr *js_new(jctx *c, size_t n);

jlist *jl_new(jctx *c);
int jl_push(jctx *c, jlist *l, jv v);
jdict *jd_new(jctx *c);
int jd_set(jctx *c, jdict *d, jv key, jv val);
jv *jd_find(jdict *d, const char *k, size_t kl); /* a str key */
jv *jd_find_v(jctx *c, jdict *d, jv key);        /* any key (jv_equal) */

/* Python ==: 1 equal, 0 not; nested lists/dicts count against the
 * evaluation depth (0 with c->err set past it). */
int jv_equal(jctx *c, jv a, jv b);

/* ---- string buffer (malloc'ed; the output and temporaries) ---- */
typedef struct sbuf {
  char *s;
  size_t n, cap;
  jctx *c;    /* charged and bounded by c's budget */
  size_t max; /* bytes; past it c->err = code */
  int code;   /* SPILL_E_TMPL_OUTPUT (the output) or SPILL_E_TMPL_MEMORY */
  int failed; /* nothing more is appended */
} sbuf;
/* A temporary bounded by the memory budget. */
static inline sbuf sb_temp(jctx *c) {
  sbuf b = {0};
  b.c = c;
  b.max = c->b.max_memory_bytes;
  b.code = SPILL_E_TMPL_MEMORY;
  return b;
}
void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
/* b's bytes as an arena string; frees b. *out is JV_STR, or the error. */
int sb_take(sbuf *b, jv *out);

#endif
