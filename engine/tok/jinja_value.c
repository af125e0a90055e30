/* engine/tok/jinja_value.c: the value layer of the Jinja interpreter
 * (jinja_value.h): the render budget and its accounting, the arena, value
 * constructors, lists, dicts, Python equality and the string buffer. The
 * parser and the evaluator both sit above this file and nothing here calls
 * them.
 *
 * The budget is charged where work happens, not guessed per construct: a
 * step per node evaluated (the evaluator), per loop iteration, per arena
 * allocation, per dict entry scanned in 16 and per KiB of string work (the
 * buffer, equality, search), so the gap between two polls of the
 * cancellation flag is bounded in time whatever the template does (about
 * SPILL_CHAT_POLL_STEPS small operations or 4 MiB of memory traffic).
 */
#include "engine/tok/jinja_value.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- budget ---------------------------------------------------------------- */

/* The defaults (docs/RELIABILITY.md, "Chat template budget"): far above what
 * the real templates of engine/tok/testdata/chat need (AST depth <= 20,
 * thousands of steps per message), far below what hurts a server. */
enum { DEFAULT_PARSE_DEPTH = 256, DEFAULT_EVAL_DEPTH = 512 };
#define DEFAULT_STEPS 10000000ull
#define DEFAULT_OUTPUT ((size_t)16 << 20)
#define DEFAULT_MEMORY ((size_t)256 << 20)

void spill_chat_budget_default(spill_chat_budget *b) {
  memset(b, 0, sizeof *b);
  b->max_parse_depth = DEFAULT_PARSE_DEPTH;
  b->max_eval_depth = DEFAULT_EVAL_DEPTH;
  b->max_steps = DEFAULT_STEPS;
  b->max_output_bytes = DEFAULT_OUTPUT;
  b->max_memory_bytes = DEFAULT_MEMORY;
}

void jc_init(jctx *c, const spill_chat_budget *b, spill_err *e) {
  memset(c, 0, sizeof *c);
  c->e = e;
  spill_chat_budget_default(&c->b);
  if (b) {
    if (b->max_parse_depth > 0) c->b.max_parse_depth = b->max_parse_depth;
    if (b->max_eval_depth > 0) c->b.max_eval_depth = b->max_eval_depth;
    if (b->max_steps) c->b.max_steps = b->max_steps;
    if (b->max_output_bytes) c->b.max_output_bytes = b->max_output_bytes;
    if (b->max_memory_bytes) c->b.max_memory_bytes = b->max_memory_bytes;
    c->b.stop_flag = b->stop_flag;
    c->b.cancel = b->cancel;
    c->b.cancel_user = b->cancel_user;
  }
  c->next_poll = SPILL_CHAT_POLL_STEPS < c->b.max_steps ? SPILL_CHAT_POLL_STEPS : c->b.max_steps + 1;
}

int jc_fail(jctx *c, int code, const char *fmt, ...) {
  if (c->err == 0) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->err = code;
    spill_err_set(c->e, code, "chat template: %s", msg);
  }
  return c->err;
}

int jc_step(jctx *c, uint64_t n) {
  c->steps += n;
  if (c->steps < c->next_poll) return c->err;
  if (c->err) return c->err;
  if (c->steps > c->b.max_steps)
    return jc_fail(c, SPILL_E_TMPL_STEPS, "more than %llu evaluation steps (the budget's max_steps)",
                   (unsigned long long)c->b.max_steps);
  uint64_t next = c->steps + SPILL_CHAT_POLL_STEPS;
  c->next_poll = next <= c->b.max_steps ? next : c->b.max_steps + 1;
  if ((c->b.stop_flag && *c->b.stop_flag) || (c->b.cancel && c->b.cancel(c->b.cancel_user)))
    return jc_fail(c, SPILL_E_INTERRUPTED, "rendering cancelled after %llu steps",
                   (unsigned long long)c->steps);
  return SPILL_OK;
}

int jc_enter(jctx *c) {
  if (c->err) return c->err;
  if (c->depth >= c->b.max_eval_depth)
    return jc_fail(c, SPILL_E_TMPL_EVAL_DEPTH,
                   "evaluation nested deeper than %d levels (the budget's max_eval_depth)",
                   c->b.max_eval_depth);
  c->depth++;
  return SPILL_OK;
}

int jc_oom(jctx *c) {
  if (c->err) return c->err;
  return jc_fail(c, SPILL_E_NOMEM, "out of memory");
}

/* ---- arena ---------------------------------------------------------------------- */

void *jc_alloc(jctx *c, size_t n) {
  jarena *a = &c->arena;
  if (c->err) return NULL;
  if (n > c->b.max_memory_bytes) goto over;
  n = (n + 15) & ~(size_t)15;
  if (jc_step(c, 1 + (n >> 10)) < 0) return NULL;
  if (!a->head || a->head->used + n > a->head->cap) {
    size_t cap = n > 65536 ? n : 65536;
    if (a->bytes + sizeof(jarena_block) + cap > c->b.max_memory_bytes) goto over;
    jarena_block *b = malloc(sizeof *b + cap);
    if (!b) {
      jc_fail(c, SPILL_E_NOMEM, "out of memory (allocating %zu bytes with %zu in use)", cap, a->bytes);
      return NULL;
    }
    b->next = a->head;
    b->used = 0;
    b->cap = cap;
    a->head = b;
    a->bytes += sizeof *b + cap;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  memset(p, 0, n);
  return p;
over:
  jc_fail(c, SPILL_E_TMPL_MEMORY,
          "rendering needs more than %zu bytes of memory (the budget's max_memory_bytes; %zu in "
          "use, %zu more asked)",
          c->b.max_memory_bytes, a->bytes, n);
  return NULL;
}

void ja_free(jarena *a) {
  jarena_block *b = a->head;
  while (b) {
    jarena_block *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
  a->bytes = 0;
}

/* ---- values ------------------------------------------------------------------------ */

jv jv_int(int64_t i) { jv v = {0}; v.t = JV_INT; v.u.i = i; return v; }
jv jv_bool(int b) { jv v = {0}; v.t = JV_BOOL; v.u.b = b != 0; return v; }
jv jv_none(void) { jv v = {0}; v.t = JV_NONE; return v; }
jv jv_float(double f) { jv v = {0}; v.t = JV_FLOAT; v.u.f = f; return v; }
jv jv_undef(const char *name) { jv v = {0}; v.t = JV_UNDEF; v.undef_name = name; return v; }

jstr *js_new(jctx *c, size_t n) {
  if (n > c->b.max_memory_bytes) {
    jc_fail(c, SPILL_E_TMPL_MEMORY,
            "a %zu-byte string exceeds the memory budget (the budget's max_memory_bytes, %zu)", n,
            c->b.max_memory_bytes);
    return NULL;
  }
  jstr *s = jc_alloc(c, sizeof(jstr) + n + 1);
  if (s) s->len = n;
  return s;
}

jv jv_str(jctx *c, const char *s, size_t n) {
  jv v = {0};
  jstr *js = js_new(c, n);
  if (!js) { v.t = JV_NONE; return v; }
  if (n) memcpy(js->s, s, n);
  v.t = JV_STR;
  v.u.s = js;
  return v;
}

jlist *jl_new(jctx *c) { return jc_alloc(c, sizeof(jlist)); }

int jl_push(jctx *c, jlist *l, jv v) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    jv *nv = jc_alloc(c, cap * sizeof(jv));
    if (!nv) return jc_oom(c);
    if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = v;
  return SPILL_OK;
}

jdict *jd_new(jctx *c) { return jc_alloc(c, sizeof(jdict)); }

static int str_eq(const jstr *a, const char *b, size_t bl) {
  return a->len == bl && memcmp(a->s, b, bl) == 0;
}

jv *jd_find(jdict *d, const char *k, size_t kl) {
  for (size_t i = 0; i < d->n; i++)
    if (d->k[i].t == JV_STR && str_eq(d->k[i].u.s, k, kl)) return &d->v[i];
  return NULL;
}

jv *jd_find_v(jctx *c, jdict *d, jv key) {
  if (jc_step(c, 1 + (d->n >> 4)) < 0) return NULL;
  if (key.t == JV_STR) return jd_find(d, key.u.s->s, key.u.s->len);
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(c, d->k[i], key)) return &d->v[i];
  return NULL;
}

int jd_set(jctx *c, jdict *d, jv key, jv val) {
  jv *p = jd_find_v(c, d, key);
  if (c->err) return c->err;
  if (p) { *p = val; return SPILL_OK; }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 4;
    jv *k = jc_alloc(c, cap * sizeof(jv)), *v = jc_alloc(c, cap * sizeof(jv));
    if (!k || !v) return jc_oom(c);
    if (d->n) { memcpy(k, d->k, d->n * sizeof(jv)); memcpy(v, d->v, d->n * sizeof(jv)); }
    d->k = k; d->v = v; d->cap = cap;
  }
  d->k[d->n] = key;
  d->v[d->n] = val;
  d->n++;
  return SPILL_OK;
}

/* Lists and dicts recurse, one evaluation level per nesting level. */
static int equal_nested(jctx *c, jv a, jv b) {
  if (jc_enter(c) < 0) return 0;
  int eq = 1;
  if (a.t == JV_LIST) {
    if (a.u.l->n != b.u.l->n) eq = 0;
    for (size_t i = 0; eq && i < a.u.l->n; i++) eq = jv_equal(c, a.u.l->v[i], b.u.l->v[i]);
  } else if (a.u.d != b.u.d) {
    if (a.u.d->ns || b.u.d->ns || a.u.d->n != b.u.d->n) eq = 0;
    for (size_t i = 0; eq && i < a.u.d->n; i++) {
      jv *o = jd_find_v(c, b.u.d, a.u.d->k[i]);
      eq = o && jv_equal(c, a.u.d->v[i], *o);
    }
  }
  jc_leave(c);
  return c->err ? 0 : eq;
}

int jv_equal(jctx *c, jv a, jv b) {
  if (jc_step(c, 1) < 0) return 0;
  if ((a.t == JV_INT || a.t == JV_FLOAT || a.t == JV_BOOL) &&
      (b.t == JV_INT || b.t == JV_FLOAT || b.t == JV_BOOL)) {
    double x = a.t == JV_FLOAT ? a.u.f : a.t == JV_INT ? (double)a.u.i : a.u.b;
    double y = b.t == JV_FLOAT ? b.u.f : b.t == JV_INT ? (double)b.u.i : b.u.b;
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
      int64_t p = a.t == JV_INT ? a.u.i : a.u.b, q = b.t == JV_INT ? b.u.i : b.u.b;
      return p == q;
    }
    return x == y;
  }
  if (a.t != b.t) return 0;
  switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR:
      if (a.u.s->len != b.u.s->len) return 0;
      if (jc_bytes(c, a.u.s->len) < 0) return 0;
      return !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST: case JV_DICT: return equal_nested(c, a, b);
    default: return 0;
  }
}

/* ---- string buffer ---------------------------------------------------------------- */

void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->c->err) { b->failed = 1; return; }
  if (n > b->max || b->n + n > b->max) {
    b->failed = 1;
    if (b->code == SPILL_E_TMPL_OUTPUT)
      jc_fail(b->c, b->code, "the output exceeds %zu bytes (the budget's max_output_bytes)", b->max);
    else
      jc_fail(b->c, b->code,
              "a %zu-byte temporary string exceeds the memory budget (the budget's "
              "max_memory_bytes, %zu)",
              b->n + n, b->max);
    return;
  }
  if (n >= 1024 && jc_bytes(b->c, n) < 0) { b->failed = 1; return; }
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->s, cap);
    if (!p) {
      b->failed = 1;
      jc_fail(b->c, SPILL_E_NOMEM, "out of memory (a %zu-byte string)", cap);
      return;
    }
    b->s = p;
    b->cap = cap;
  }
  if (n) memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

int sb_take(sbuf *b, jv *out) {
  int rc = b->c->err;
  if (rc == 0 && b->failed) rc = jc_oom(b->c);
  if (rc == 0) {
    *out = jv_str(b->c, b->s ? b->s : "", b->n);
    rc = b->c->err;
  }
  free(b->s);
  b->s = NULL;
  b->n = b->cap = 0;
  return rc;
}
