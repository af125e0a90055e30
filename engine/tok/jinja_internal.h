/* engine/tok/jinja_internal.h: the Jinja subset interpreter behind
 * spill_chat_render (docs/TOKENIZER.md lists the subset). Values, the AST,
 * the arena that owns both for one render, and the parser/evaluator entry
 * points. Semantics follow Python jinja2 as transformers configures it for
 * chat templates: trim_blocks, lstrip_blocks, loopcontrols, no autoescape,
 * tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now.
 * Everything is allocated from one arena and freed at once: values are
 * immutable except namespaces.
 */
#ifndef SPILL_TOK_JINJA_INTERNAL_H
#define SPILL_TOK_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

/* ---- arena ---- */
typedef struct jarena_block {
  struct jarena_block *next;
  size_t used, cap;
  char data[];
} jarena_block;
typedef struct jarena {
  jarena_block *head;
  int oom;
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL (and a->oom) on failure */
void ja_free(jarena *a);

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
  } u;
  const char *undef_name; /* JV_UNDEF: what was undefined (for errors) */
};
typedef struct jmethod { jv self; const char *name; } jmethod;

/* ---- AST ---- */
typedef enum {
  JN_LIT, JN_VAR, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_BIN, JN_UN,
  JN_AND, JN_OR, JN_NOT, JN_COND, JN_LIST, JN_DICT,
  /* statements */
  JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_BREAK, JN_CONTINUE, JN_BODY,
} jn_type;

typedef struct jnode jnode;
struct jnode {
  jn_type t;
  int line;
  int op;            /* JN_BIN / JN_UN operator; JN_TEST negated */
  const char *name;  /* VAR / ATTR / FILTER / TEST / SET target / FOR targets[0] */
  const char *name2; /* SET ns attribute; FOR second target */
  jv lit;            /* JN_LIT; JN_TEXT uses lit as string */
  jnode *a, *b, *c;  /* operands; IF: a=cond b=then c=else; FOR: a=iter b=body c=else */
  jnode *d;          /* FOR: filter condition */
  jnode **args;      /* CALL/FILTER/TEST args; LIST items; DICT keys; BODY children */
  const char **kw;   /* keyword names (NULL entries = positional) */
  jnode **vals;      /* DICT values */
  int n;             /* number of args / items / children */
};

enum { JOP_ADD = 1, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FDIV, JOP_MOD, JOP_POW, JOP_CAT, JOP_EQ,
       JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN, JOP_NEG, JOP_POS };

typedef struct jctx {
  jarena arena;
  spill_err *e;
  int err; /* first error status */
} jctx;

/* Parses tmpl into a JN_BODY tree (allocated in c->arena). */
int jinja_parse(jctx *c, const char *tmpl, size_t len, jnode **out);
/* Renders root with the global variables in globals (a dict); appends to
 * *out (malloc'ed buffer) */
int jinja_render(jctx *c, const jnode *root, jdict *globals, char **out, size_t *out_len);

/* value helpers shared by the parser and the API glue */
jv jv_str(jctx *c, const char *s, size_t n);
jv jv_int(int64_t i);
jv jv_bool(int b);
jv jv_none(void);
jdict *jd_new(jctx *c);
int jd_set(jctx *c, jdict *d, jv key, jv val);
jlist *jl_new(jctx *c);
int jl_push(jctx *c, jlist *l, jv v);

#endif
