/* engine/tok/jinja_internal.h: the Jinja subset interpreter behind
 * spill_chat_render (docs/TOKENIZER.md lists the subset): the AST and the
 * parser/evaluator entry points, above the value layer (jinja_value.h:
 * context, budget, arena, values). Semantics follow Python jinja2 as
 * transformers configures it for chat templates: trim_blocks,
 * lstrip_blocks, loopcontrols, no autoescape, tojson =
 * json.dumps(ensure_ascii=False), raise_exception, strftime_now.
 * Layering: chat_template.c -> jinja_parse.c, jinja_eval.c -> jinja_value.c.
 */
#ifndef SPILL_TOK_JINJA_INTERNAL_H
#define SPILL_TOK_JINJA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/tok/jinja_value.h"

/* ---- AST ---- */
typedef enum {
  JN_LIT, JN_VAR, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST, JN_BIN, JN_UN,
  JN_AND, JN_OR, JN_NOT, JN_COND, JN_LIST, JN_DICT,
  /* statements */
  JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_BREAK, JN_CONTINUE, JN_BODY,
  JN_MACRO, /* name; kw = parameter names, args = their defaults (NULL: none), n; a = body */
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

/* Parses tmpl into a JN_BODY tree (allocated in c->arena); nesting past
 * c->b.max_parse_depth is SPILL_E_TMPL_PARSE_DEPTH. Returns c->err. */
int jinja_parse(jctx *c, const char *tmpl, size_t len, jnode **out);
/* Renders root with the global variables in globals (a dict) under c's
 * budget; *out is malloc'ed (caller frees). Returns c->err. */
int jinja_render(jctx *c, const jnode *root, jdict *globals, char **out, size_t *out_len);

#endif
