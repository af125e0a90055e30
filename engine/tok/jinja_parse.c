/* engine/tok/jinja_parse.c: Jinja template -> AST, with jinja2's lexer
 * rules for whitespace as transformers sets them for chat templates:
 * newlines normalised to \n, one trailing newline dropped
 * (keep_trailing_newline=False), "-" strips all whitespace on that side,
 * trim_blocks drops the first newline after a block or comment tag,
 * lstrip_blocks strips spaces/tabs between a line start and a block or
 * comment tag ("+" disables either). Expressions follow jinja2's grammar and
 * precedence (parser.py): cond-expr > or > and > not > compare > + - > ~ >
 * * / // % > ** > unary - + > primary, postfix (. [] ()), filters (|) and
 * tests (is). Statements: if/elif/else, for (targets, "if" filter, else),
 * set (name, ns.attr, block set), break/continue, generation (transparent),
 * macro (parameters with defaults; at the template's top level or inside
 * an if, never inside a loop or another macro, whose scopes end before a
 * macro stored away could be called). Anything else (call, include,
 * extends, ...) is SPILL_E_UNSUPPORTED
 * naming the tag; syntax errors are SPILL_E_FORMAT with the line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tok/jinja_internal.h"

/* ---- segments ---------------------------------------------------------------- */

enum { SEG_TEXT, SEG_VAR, SEG_BLOCK, SEG_COMMENT };
typedef struct seg {
  int kind, line;
  const char *s;
  size_t len;
} seg;

typedef struct parser {
  jctx *c;
  seg *segs;
  int n_segs, pos;
  /* expression tokens of the current tag */
  const char *p, *end;
  int line;
  /* current token */
  int tk; /* 'n' name, 'i' int, 'f' float, 's' string, 'o' operator, 0 eof */
  const char *ts;
  size_t tl;
  jv tv; /* literal value */
  char op[3];
  int depth; /* nesting of expressions and blocks being parsed now */
  int in_scope; /* inside a for loop or a macro body (no macro definitions there) */
} parser;

static int perr(parser *P, int code, const char *fmt, const char *arg) {
  if (P->c->err == 0) {
    P->c->err = code;
    spill_err_set(P->c->e, code, "chat template line %d: %s%s", P->line, fmt, arg ? arg : "");
  }
  return P->c->err;
}

/* One more level of nesting (a parenthesis, an operand, a block): the
 * parser recurses, so the budget bounds its stack. */
static int deeper(parser *P) {
  if (P->depth >= P->c->b.max_parse_depth) {
    if (P->c->err == 0) {
      P->c->err = SPILL_E_TMPL_PARSE_DEPTH;
      spill_err_set(P->c->e, SPILL_E_TMPL_PARSE_DEPTH,
                    "chat template line %d: nested deeper than %d levels (the budget's "
                    "max_parse_depth)",
                    P->line, P->c->b.max_parse_depth);
    }
    return P->c->err;
  }
  P->depth++;
  return SPILL_OK;
}

static int is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

/* Finds the end of a tag body starting at p (skipping string literals);
 * returns the position of close ("}}", "%}", "#}") or NULL. */
static const char *find_close(const char *p, const char *end, char close0, int comment) {
  while (p + 1 < end) {
    if (!comment && (*p == '\'' || *p == '"')) {
      char q = *p++;
      while (p < end && *p != q) {
        if (*p == '\\' && p + 1 < end) p++;
        p++;
      }
      if (p < end) p++;
      continue;
    }
    if (*p == close0 && p[1] == '}') return p;
    p++;
  }
  return NULL;
}

static int segment(parser *P, const char *src, size_t len) {
  jctx *c = P->c;
  /* normalise newlines */
  char *t = jc_alloc(c, len + 1);
  if (!t) return jc_oom(c);
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (src[i] == '\r') {
      t[n++] = '\n';
      if (i + 1 < len && src[i + 1] == '\n') i++;
    } else {
      t[n++] = src[i];
    }
  }
  if (n > 0 && t[n - 1] == '\n') n--; /* keep_trailing_newline=False */
  int cap = 64;
  P->segs = jc_alloc(c, (size_t)cap * sizeof(seg));
  if (!P->segs) return jc_oom(c);
  const char *p = t, *end = t + n;
  int line = 1, line_starting = 1;
  while (p < end) {
    const char *q = p;
    while (q + 1 < end && !(q[0] == '{' && (q[1] == '{' || q[1] == '%' || q[1] == '#'))) q++;
    if (q + 1 >= end) q = end;
    const char *tstart = p;
    size_t tlen = (size_t)(q - p);
    int kind = -1;
    char strip_l = 0;
    if (q < end) {
      kind = q[1] == '{' ? SEG_VAR : q[1] == '%' ? SEG_BLOCK : SEG_COMMENT;
      if (q + 2 < end && (q[2] == '-' || q[2] == '+')) strip_l = q[2];
      if (strip_l == '-') {
        while (tlen > 0 && is_ws(tstart[tlen - 1])) tlen--;
      } else if (strip_l != '+' && kind != SEG_VAR) { /* lstrip_blocks */
        size_t lp = tlen;
        while (lp > 0 && tstart[lp - 1] != '\n') lp--;
        if (lp > 0 || line_starting) {
          int all_ws = tlen > lp;
          for (size_t k = lp; k < tlen; k++)
            if (!is_ws(tstart[k])) all_ws = 0;
          if (all_ws) tlen = lp;
        }
      }
    }
    if (tlen > 0) {
      if (P->n_segs + 2 >= cap) {
        seg *s2 = jc_alloc(c, (size_t)cap * 2 * sizeof(seg));
        if (!s2) return jc_oom(c);
        memcpy(s2, P->segs, (size_t)P->n_segs * sizeof(seg));
        P->segs = s2;
        cap *= 2;
      }
      P->segs[P->n_segs++] = (seg){SEG_TEXT, line, tstart, tlen};
    }
    for (const char *k = p; k < q; k++) line += *k == '\n';
    if (q >= end) break;
    const char *body = q + 2 + (strip_l ? 1 : 0);
    const char *close = find_close(body, end, kind == SEG_VAR ? '}' : kind == SEG_BLOCK ? '%' : '#',
                                   kind == SEG_COMMENT);
    if (!close) {
      P->line = line;
      return perr(P, SPILL_E_FORMAT, "unclosed tag", NULL);
    }
    const char *bend = close;
    char strip_r = 0;
    if (bend > body && (bend[-1] == '-' || bend[-1] == '+')) {
      strip_r = bend[-1];
      bend--;
    }
    if (kind != SEG_COMMENT) {
      if (P->n_segs + 2 >= cap) {
        seg *s2 = jc_alloc(c, (size_t)cap * 2 * sizeof(seg));
        if (!s2) return jc_oom(c);
        memcpy(s2, P->segs, (size_t)P->n_segs * sizeof(seg));
        P->segs = s2;
        cap *= 2;
      }
      P->segs[P->n_segs++] = (seg){kind, line, body, (size_t)(bend - body)};
    }
    for (const char *k = q; k < close + 2; k++) line += *k == '\n';
    p = close + 2;
    line_starting = 0;
    if (strip_r == '-') {
      while (p < end && is_ws(*p)) {
        line_starting = *p == '\n';
        line += *p == '\n';
        p++;
      }
    } else if (strip_r != '+' && kind != SEG_VAR && p < end && *p == '\n') { /* trim_blocks */
      p++;
      line++;
      line_starting = 1;
    }
  }
  return SPILL_OK;
}

/* ---- expression tokens --------------------------------------------------------- */

static int utf8_put(char *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
  o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
  return 4;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static int next(parser *P) {
  while (P->p < P->end && is_ws(*P->p)) P->p++;
  P->ts = P->p;
  if (P->p >= P->end) { P->tk = 0; P->tl = 0; return SPILL_OK; }
  char ch = *P->p;
  if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
    while (P->p < P->end && ((*P->p >= 'a' && *P->p <= 'z') || (*P->p >= 'A' && *P->p <= 'Z') ||
                              (*P->p >= '0' && *P->p <= '9') || *P->p == '_'))
      P->p++;
    P->tk = 'n';
    P->tl = (size_t)(P->p - P->ts);
    return SPILL_OK;
  }
  if (ch >= '0' && ch <= '9') {
    int is_float = 0;
    char buf[64];
    size_t bn = 0;
    while (P->p < P->end && bn < 60) {
      char d = *P->p;
      if ((d >= '0' && d <= '9') || d == '_') { if (d != '_') buf[bn++] = d; P->p++; continue; }
      if (d == '.' && !is_float && P->p + 1 < P->end && P->p[1] >= '0' && P->p[1] <= '9') {
        is_float = 1; buf[bn++] = d; P->p++; continue;
      }
      if ((d == 'e' || d == 'E') && P->p + 1 < P->end) {
        is_float = 1; buf[bn++] = d; P->p++;
        if (P->p < P->end && (*P->p == '+' || *P->p == '-')) buf[bn++] = *P->p++;
        continue;
      }
      break;
    }
    buf[bn] = 0;
    P->tk = is_float ? 'f' : 'i';
    if (is_float) { P->tv.t = JV_FLOAT; P->tv.u.f = strtod(buf, NULL); }
    else {
      /* jinja2 has unbounded integers; ours are 64-bit: refuse what does not fit */
      errno = 0;
      P->tv.t = JV_INT;
      P->tv.u.i = strtoll(buf, NULL, 10);
      if (errno == ERANGE) return perr(P, SPILL_E_FORMAT, "integer literal outside 64 bits", NULL);
    }
    P->tl = (size_t)(P->p - P->ts);
    return SPILL_OK;
  }
  if (ch == '\'' || ch == '"') {
    const char *s = ++P->p;
    size_t cap = 0;
    while (P->p < P->end && *P->p != ch) {
      if (*P->p == '\\' && P->p + 1 < P->end) P->p++;
      P->p++;
      cap++;
    }
    if (P->p >= P->end) return perr(P, SPILL_E_FORMAT, "unterminated string", NULL);
    char *o = jc_alloc(P->c, sizeof(jstr) + (size_t)(P->p - s) * 2 + 8);
    if (!o) return jc_oom(P->c);
    jstr *js = (jstr *)o;
    size_t n = 0;
    for (const char *k = s; k < P->p; k++) {
      if (*k != '\\') { js->s[n++] = *k; continue; }
      k++;
      switch (*k) {
        case 'n': js->s[n++] = '\n'; break;
        case 't': js->s[n++] = '\t'; break;
        case 'r': js->s[n++] = '\r'; break;
        case 'b': js->s[n++] = '\b'; break;
        case 'f': js->s[n++] = '\f'; break;
        case 'v': js->s[n++] = '\v'; break;
        case 'a': js->s[n++] = '\a'; break;
        case '0': js->s[n++] = '\0'; break;
        case '\\': js->s[n++] = '\\'; break;
        case '\'': js->s[n++] = '\''; break;
        case '"': js->s[n++] = '"'; break;
        case '\n': break; /* line continuation */
        case 'x': case 'u': case 'U': {
          int digits = *k == 'x' ? 2 : *k == 'u' ? 4 : 8;
          uint32_t cp = 0;
          int ok = 1;
          for (int d = 0; d < digits; d++) {
            int h = k + 1 + d < P->p ? hexval(k[1 + d]) : -1;
            if (h < 0) { ok = 0; break; }
            cp = cp * 16 + (uint32_t)h;
          }
          if (!ok || cp > 0x10FFFF) return perr(P, SPILL_E_FORMAT, "bad escape in a string", NULL);
          k += digits;
          n += (size_t)utf8_put(js->s + n, cp);
          break;
        }
        default: js->s[n++] = '\\'; js->s[n++] = *k; break; /* Python keeps unknown escapes */
      }
    }
    js->len = n;
    P->p++;
    P->tk = 's';
    P->tv.t = JV_STR;
    P->tv.u.s = js;
    P->tl = (size_t)(P->p - P->ts);
    return SPILL_OK;
  }
  static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
  for (int k = 0; ops2[k]; k++)
    if (P->p + 1 < P->end && P->p[0] == ops2[k][0] && P->p[1] == ops2[k][1]) {
      P->op[0] = P->p[0]; P->op[1] = P->p[1]; P->op[2] = 0;
      P->p += 2;
      P->tk = 'o';
      P->tl = 2;
      return SPILL_OK;
    }
  if (strchr("+-*/%~<>=()[]{},.:|", ch)) {
    P->op[0] = ch; P->op[1] = 0;
    P->p++;
    P->tk = 'o';
    P->tl = 1;
    return SPILL_OK;
  }
  char bad[2] = {ch, 0};
  return perr(P, SPILL_E_FORMAT, "unexpected character ", bad);
}

static int is_op(parser *P, const char *op) { return P->tk == 'o' && !strcmp(P->op, op); }
static int is_name(parser *P, const char *nm) {
  return P->tk == 'n' && P->tl == strlen(nm) && !memcmp(P->ts, nm, P->tl);
}
static const char *tok_name(parser *P) {
  char *s = jc_alloc(P->c, P->tl + 1);
  if (s) memcpy(s, P->ts, P->tl);
  return s;
}
static int expect_op(parser *P, const char *op) {
  if (!is_op(P, op)) return perr(P, SPILL_E_FORMAT, "expected ", op);
  return next(P);
}

static jnode *mk(parser *P, jn_type t) {
  jnode *n = jc_alloc(P->c, sizeof *n);
  if (n) { n->t = t; n->line = P->line; }
  else jc_oom(P->c);
  return n;
}

/* A growable array of nodes in the arena. */
typedef struct nvec { jnode **v; const char **kw; int n, cap; } nvec;
static int nv_push(parser *P, nvec *a, jnode *x, const char *kw) {
  if (a->n == a->cap) {
    int cap = a->cap ? a->cap * 2 : 4;
    jnode **v = jc_alloc(P->c, (size_t)cap * sizeof *v);
    const char **k = jc_alloc(P->c, (size_t)cap * sizeof *k);
    if (!v || !k) return jc_oom(P->c);
    if (a->n) { memcpy(v, a->v, (size_t)a->n * sizeof *v); memcpy(k, a->kw, (size_t)a->n * sizeof *k); }
    a->v = v; a->kw = k; a->cap = cap;
  }
  a->v[a->n] = x;
  a->kw[a->n] = kw;
  a->n++;
  return SPILL_OK;
}

static int expr(parser *P, jnode **out);
static int unary(parser *P, int with_filter, jnode **out);
static int not_expr(parser *P, jnode **out);

#define PTRY(x) do { int rc_ = (x); if (rc_ < 0) return rc_; } while (0)

/* (args) after '(' was seen: positional and keyword arguments. */
static int call_args(parser *P, nvec *a) {
  PTRY(next(P)); /* past ( */
  while (!is_op(P, ")")) {
    const char *kw = NULL;
    if (P->tk == 'n') { /* name= ? */
      const char *save_p = P->p;
      const char *save_ts = P->ts;
      size_t save_tl = P->tl;
      const char *nm = tok_name(P);
      PTRY(next(P));
      if (is_op(P, "=")) { kw = nm; PTRY(next(P)); }
      else { P->p = save_p; P->ts = save_ts; P->tl = save_tl; P->tk = 'n'; }
    }
    jnode *x;
    PTRY(expr(P, &x));
    PTRY(nv_push(P, a, x, kw));
    if (is_op(P, ",")) PTRY(next(P));
    else if (!is_op(P, ")")) return perr(P, SPILL_E_FORMAT, "expected , or ) in a call", NULL);
  }
  return next(P);
}

static int primary(parser *P, jnode **out) {
  jnode *n = NULL;
  if (P->tk == 's' || P->tk == 'i' || P->tk == 'f') {
    n = mk(P, JN_LIT);
    if (!n) return SPILL_E_NOMEM;
    n->lit = P->tv;
    PTRY(next(P));
    /* adjacent string literals concatenate */
    while (n->lit.t == JV_STR && P->tk == 's') {
      jstr *a = n->lit.u.s, *b = P->tv.u.s;
      jstr *c = jc_alloc(P->c, sizeof(jstr) + a->len + b->len + 1);
      if (!c) return SPILL_E_NOMEM;
      memcpy(c->s, a->s, a->len);
      memcpy(c->s + a->len, b->s, b->len);
      c->len = a->len + b->len;
      n->lit.u.s = c;
      PTRY(next(P));
    }
  } else if (P->tk == 'n') {
    if (is_name(P, "true") || is_name(P, "True") || is_name(P, "false") || is_name(P, "False")) {
      n = mk(P, JN_LIT);
      if (!n) return SPILL_E_NOMEM;
      n->lit = jv_bool(P->ts[0] == 't' || P->ts[0] == 'T');
    } else if (is_name(P, "none") || is_name(P, "None")) {
      n = mk(P, JN_LIT);
      if (!n) return SPILL_E_NOMEM;
      n->lit = jv_none();
    } else {
      n = mk(P, JN_VAR);
      if (!n) return SPILL_E_NOMEM;
      n->name = tok_name(P);
    }
    PTRY(next(P));
  } else if (is_op(P, "(")) {
    PTRY(next(P));
    if (is_op(P, ")")) { /* empty tuple */
      n = mk(P, JN_LIST);
      if (!n) return SPILL_E_NOMEM;
      PTRY(next(P));
    } else {
      PTRY(expr(P, &n));
      if (is_op(P, ",")) { /* tuple */
        nvec a = {0};
        PTRY(nv_push(P, &a, n, NULL));
        while (is_op(P, ",")) {
          PTRY(next(P));
          if (is_op(P, ")")) break;
          jnode *x;
          PTRY(expr(P, &x));
          PTRY(nv_push(P, &a, x, NULL));
        }
        n = mk(P, JN_LIST);
        if (!n) return SPILL_E_NOMEM;
        n->args = a.v;
        n->n = a.n;
      }
      PTRY(expect_op(P, ")"));
    }
  } else if (is_op(P, "[")) {
    PTRY(next(P));
    nvec a = {0};
    while (!is_op(P, "]")) {
      jnode *x;
      PTRY(expr(P, &x));
      PTRY(nv_push(P, &a, x, NULL));
      if (is_op(P, ",")) PTRY(next(P));
      else if (!is_op(P, "]")) return perr(P, SPILL_E_FORMAT, "expected , or ] in a list", NULL);
    }
    PTRY(next(P));
    n = mk(P, JN_LIST);
    if (!n) return SPILL_E_NOMEM;
    n->args = a.v;
    n->n = a.n;
  } else if (is_op(P, "{")) {
    PTRY(next(P));
    nvec k = {0}, v = {0};
    while (!is_op(P, "}")) {
      jnode *x, *y;
      PTRY(expr(P, &x));
      PTRY(expect_op(P, ":"));
      PTRY(expr(P, &y));
      PTRY(nv_push(P, &k, x, NULL));
      PTRY(nv_push(P, &v, y, NULL));
      if (is_op(P, ",")) PTRY(next(P));
      else if (!is_op(P, "}")) return perr(P, SPILL_E_FORMAT, "expected , or } in a dict", NULL);
    }
    PTRY(next(P));
    n = mk(P, JN_DICT);
    if (!n) return SPILL_E_NOMEM;
    n->args = k.v;
    n->vals = v.v;
    n->n = k.n;
  } else {
    return perr(P, SPILL_E_FORMAT, "expected an expression", NULL);
  }
  *out = n;
  return SPILL_OK;
}

static int postfix(parser *P, jnode **io) {
  for (;;) {
    if (is_op(P, ".")) {
      PTRY(next(P));
      if (P->tk != 'n' && P->tk != 'i') return perr(P, SPILL_E_FORMAT, "expected a name after .", NULL);
      jnode *n = mk(P, P->tk == 'n' ? JN_ATTR : JN_ITEM);
      if (!n) return SPILL_E_NOMEM;
      n->a = *io;
      if (P->tk == 'n') n->name = tok_name(P);
      else { n->b = mk(P, JN_LIT); if (!n->b) return SPILL_E_NOMEM; n->b->lit = P->tv; }
      PTRY(next(P));
      *io = n;
    } else if (is_op(P, "[")) {
      PTRY(next(P));
      jnode *parts[3] = {NULL, NULL, NULL};
      int slice = 0, k = 0;
      while (!is_op(P, "]")) {
        if (is_op(P, ":")) {
          slice = 1;
          if (++k > 2) return perr(P, SPILL_E_FORMAT, "bad slice", NULL);
          PTRY(next(P));
          continue;
        }
        PTRY(expr(P, &parts[k]));
        if (!is_op(P, ":") && !is_op(P, "]")) return perr(P, SPILL_E_FORMAT, "expected ] ", NULL);
      }
      PTRY(next(P));
      jnode *n = mk(P, slice ? JN_SLICE : JN_ITEM);
      if (!n) return SPILL_E_NOMEM;
      n->a = *io;
      if (slice) { n->b = parts[0]; n->c = parts[1]; n->d = parts[2]; }
      else n->b = parts[0];
      if (!slice && !n->b) return perr(P, SPILL_E_FORMAT, "empty subscript", NULL);
      *io = n;
    } else if (is_op(P, "(")) {
      nvec a = {0};
      PTRY(call_args(P, &a));
      jnode *n = mk(P, JN_CALL);
      if (!n) return SPILL_E_NOMEM;
      n->a = *io;
      n->args = a.v;
      n->kw = a.kw;
      n->n = a.n;
      *io = n;
    } else {
      return SPILL_OK;
    }
  }
}

static int filter_expr(parser *P, jnode **io) {
  for (;;) {
    if (is_op(P, "|")) {
      PTRY(next(P));
      if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a filter name", NULL);
      jnode *n = mk(P, JN_FILTER);
      if (!n) return SPILL_E_NOMEM;
      n->name = tok_name(P);
      n->a = *io;
      PTRY(next(P));
      if (is_op(P, "(")) {
        nvec a = {0};
        PTRY(call_args(P, &a));
        n->args = a.v; n->kw = a.kw; n->n = a.n;
      }
      *io = n;
    } else if (is_name(P, "is")) {
      PTRY(next(P));
      jnode *n = mk(P, JN_TEST);
      if (!n) return SPILL_E_NOMEM;
      if (is_name(P, "not")) { n->op = 1; PTRY(next(P)); }
      if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a test name", NULL);
      n->name = tok_name(P);
      n->a = *io;
      PTRY(next(P));
      if (is_op(P, "(")) {
        nvec a = {0};
        PTRY(call_args(P, &a));
        n->args = a.v; n->kw = a.kw; n->n = a.n;
      } else if (P->tk == 's' || P->tk == 'i' || P->tk == 'f' ||
                 (P->tk == 'n' && !is_name(P, "and") && !is_name(P, "or") && !is_name(P, "else") &&
                  !is_name(P, "if") && !is_name(P, "in") && !is_name(P, "is") &&
                  !is_name(P, "not"))) {
        /* one argument without parentheses: "is divisibleby 3", "is sameas none" */
        jnode *x;
        PTRY(primary(P, &x));
        PTRY(postfix(P, &x));
        nvec a = {0};
        PTRY(nv_push(P, &a, x, NULL));
        n->args = a.v; n->kw = a.kw; n->n = 1;
      }
      *io = n;
    } else if (is_op(P, "(")) {
      PTRY(postfix(P, io));
    } else {
      return SPILL_OK;
    }
  }
}

static int unary(parser *P, int with_filter, jnode **out) {
  jnode *n;
  if (is_op(P, "-") || is_op(P, "+")) {
    int neg = is_op(P, "-");
    PTRY(next(P));
    jnode *x;
    PTRY(deeper(P)); /* "- - - x" recurses */
    int rc = unary(P, 0, &x);
    P->depth--;
    PTRY(rc);
    n = mk(P, JN_UN);
    if (!n) return SPILL_E_NOMEM;
    n->op = neg ? JOP_NEG : JOP_POS;
    n->a = x;
  } else {
    PTRY(primary(P, &n));
  }
  PTRY(postfix(P, &n));
  if (with_filter) PTRY(filter_expr(P, &n));
  *out = n;
  return SPILL_OK;
}


static int binop(parser *P, int op, jnode *a, jnode *b, jnode **out) {
  jnode *n = mk(P, JN_BIN);
  if (!n) return SPILL_E_NOMEM;
  n->op = op; n->a = a; n->b = b;
  *out = n;
  return SPILL_OK;
}

static int pow_expr(parser *P, jnode **out) {
  PTRY(unary(P, 1, out));
  while (is_op(P, "**")) {
    PTRY(next(P));
    jnode *b;
    PTRY(unary(P, 1, &b));
    PTRY(binop(P, JOP_POW, *out, b, out));
  }
  return SPILL_OK;
}

static int math2(parser *P, jnode **out) {
  PTRY(pow_expr(P, out));
  for (;;) {
    int op = is_op(P, "*") ? JOP_MUL : is_op(P, "/") ? JOP_DIV : is_op(P, "//") ? JOP_FDIV
             : is_op(P, "%") ? JOP_MOD : 0;
    if (!op) return SPILL_OK;
    PTRY(next(P));
    jnode *b;
    PTRY(pow_expr(P, &b));
    PTRY(binop(P, op, *out, b, out));
  }
}

static int concat(parser *P, jnode **out) {
  PTRY(math2(P, out));
  while (is_op(P, "~")) {
    PTRY(next(P));
    jnode *b;
    PTRY(math2(P, &b));
    PTRY(binop(P, JOP_CAT, *out, b, out));
  }
  return SPILL_OK;
}

static int math1(parser *P, jnode **out) {
  PTRY(concat(P, out));
  for (;;) {
    int op = is_op(P, "+") ? JOP_ADD : is_op(P, "-") ? JOP_SUB : 0;
    if (!op) return SPILL_OK;
    PTRY(next(P));
    jnode *b;
    PTRY(concat(P, &b));
    PTRY(binop(P, op, *out, b, out));
  }
}

static int compare(parser *P, jnode **out) {
  jnode *left;
  PTRY(math1(P, &left));
  jnode *result = NULL;
  for (;;) {
    int op = is_op(P, "==") ? JOP_EQ : is_op(P, "!=") ? JOP_NE : is_op(P, "<") ? JOP_LT
             : is_op(P, "<=") ? JOP_LE : is_op(P, ">") ? JOP_GT : is_op(P, ">=") ? JOP_GE
             : is_name(P, "in") ? JOP_IN : 0;
    if (!op && is_name(P, "not")) { /* "not in" */
      const char *save_p = P->p, *save_ts = P->ts;
      size_t save_tl = P->tl;
      PTRY(next(P));
      if (!is_name(P, "in")) { P->p = save_p; P->ts = save_ts; P->tl = save_tl; P->tk = 'n'; break; }
      op = JOP_NOTIN;
    }
    if (!op) break;
    PTRY(next(P));
    jnode *right;
    PTRY(math1(P, &right));
    jnode *cmp;
    PTRY(binop(P, op, left, right, &cmp));
    if (result) { /* chained: a < b < c == (a < b) and (b < c) */
      jnode *n = mk(P, JN_AND);
      if (!n) return SPILL_E_NOMEM;
      n->a = result; n->b = cmp;
      result = n;
    } else {
      result = cmp;
    }
    left = right;
  }
  *out = result ? result : left;
  return SPILL_OK;
}

static int not_expr(parser *P, jnode **out) {
  if (is_name(P, "not")) {
    PTRY(next(P));
    jnode *x;
    PTRY(deeper(P)); /* "not not x" recurses */
    int rc = not_expr(P, &x);
    P->depth--;
    PTRY(rc);
    jnode *n = mk(P, JN_NOT);
    if (!n) return SPILL_E_NOMEM;
    n->a = x;
    *out = n;
    return SPILL_OK;
  }
  return compare(P, out);
}


static int and_expr(parser *P, jnode **out) {
  PTRY(not_expr(P, out));
  while (is_name(P, "and")) {
    PTRY(next(P));
    jnode *b;
    PTRY(not_expr(P, &b));
    jnode *n = mk(P, JN_AND);
    if (!n) return SPILL_E_NOMEM;
    n->a = *out; n->b = b;
    *out = n;
  }
  return SPILL_OK;
}

static int or_expr(parser *P, jnode **out) {
  PTRY(and_expr(P, out));
  while (is_name(P, "or")) {
    PTRY(next(P));
    jnode *b;
    PTRY(and_expr(P, &b));
    jnode *n = mk(P, JN_OR);
    if (!n) return SPILL_E_NOMEM;
    n->a = *out; n->b = b;
    *out = n;
  }
  return SPILL_OK;
}

static int expr_at(parser *P, jnode **out) {
  PTRY(or_expr(P, out));
  while (is_name(P, "if")) {
    PTRY(next(P));
    jnode *cond, *other = NULL;
    PTRY(or_expr(P, &cond));
    if (is_name(P, "else")) {
      PTRY(next(P));
      PTRY(expr(P, &other));
    }
    jnode *n = mk(P, JN_COND);
    if (!n) return SPILL_E_NOMEM;
    n->a = cond; n->b = *out; n->c = other;
    *out = n;
  }
  return SPILL_OK;
}

static int expr(parser *P, jnode **out) {
  PTRY(deeper(P));
  int rc = expr_at(P, out);
  P->depth--;
  return rc;
}

/* ---- statements ------------------------------------------------------------------ */

static int start_tag(parser *P, const seg *s) {
  P->p = s->s;
  P->end = s->s + s->len;
  P->line = s->line;
  return next(P);
}

static int end_of_tag(parser *P) {
  if (P->tk != 0) return perr(P, SPILL_E_FORMAT, "unexpected text at the end of a tag", NULL);
  return SPILL_OK;
}

static int body(parser *P, const char *const *stops, jnode **out, const char **stop);

/* {% if %} ... {% elif %} ... {% else %} ... {% endif %} */
static int tag_if(parser *P, jnode **out) {
  jnode *n = mk(P, JN_IF), *cur;
  if (!n) return SPILL_E_NOMEM;
  cur = n;
  PTRY(next(P));
  PTRY(expr(P, &cur->a));
  PTRY(end_of_tag(P));
  static const char *const ifstops[] = {"elif", "else", "endif", NULL};
  for (;;) {
    const char *st;
    jnode *b;
    PTRY(body(P, ifstops, &b, &st));
    if (!st) return perr(P, SPILL_E_FORMAT, "if without endif", NULL);
    cur->b = b;
    if (!strcmp(st, "endif")) { PTRY(end_of_tag(P)); break; }
    if (!strcmp(st, "else")) {
      PTRY(end_of_tag(P));
      static const char *const elsestops[] = {"endif", NULL};
      PTRY(body(P, elsestops, &cur->c, &st));
      if (!st) return perr(P, SPILL_E_FORMAT, "if without endif", NULL);
      PTRY(end_of_tag(P));
      break;
    }
    jnode *e2 = mk(P, JN_IF); /* elif */
    if (!e2) return SPILL_E_NOMEM;
    PTRY(expr(P, &e2->a));
    PTRY(end_of_tag(P));
    jnode *wrap = mk(P, JN_BODY);
    if (!wrap) return SPILL_E_NOMEM;
    wrap->args = jc_alloc(P->c, sizeof(jnode *));
    if (!wrap->args) return SPILL_E_NOMEM;
    wrap->args[0] = e2;
    wrap->n = 1;
    cur->c = wrap;
    cur = e2;
  }
  *out = n;
return SPILL_OK;
}

/* {% for x[, y] in iterable [if cond] %} ... [{% else %} ...] {% endfor %} */
static int tag_for(parser *P, jnode **out) {
  jnode *n = mk(P, JN_FOR);
  if (!n) return SPILL_E_NOMEM;
  PTRY(next(P));
  if (is_op(P, "(")) PTRY(next(P));
  if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a loop variable", NULL);
  n->name = tok_name(P);
  PTRY(next(P));
  if (is_op(P, ",")) {
    PTRY(next(P));
    if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a loop variable", NULL);
    n->name2 = tok_name(P);
    PTRY(next(P));
  }
  if (is_op(P, ")")) PTRY(next(P));
  if (!is_name(P, "in")) return perr(P, SPILL_E_FORMAT, "expected in", NULL);
  PTRY(next(P));
  PTRY(or_expr(P, &n->a)); /* the iterable: no cond-expr (its "if" is the filter) */
  if (is_name(P, "if")) {
    PTRY(next(P));
    PTRY(or_expr(P, &n->d));
  }
  if (is_name(P, "recursive")) return perr(P, SPILL_E_UNSUPPORTED, "recursive loops", NULL);
  PTRY(end_of_tag(P));
  static const char *const forstops[] = {"else", "endfor", NULL};
  const char *st;
  P->in_scope++;
  int brc = body(P, forstops, &n->b, &st);
  P->in_scope--;
  PTRY(brc);
  if (!st) return perr(P, SPILL_E_FORMAT, "for without endfor", NULL);
  PTRY(end_of_tag(P));
  if (!strcmp(st, "else")) {
    static const char *const endfor[] = {"endfor", NULL};
    PTRY(body(P, endfor, &n->c, &st));
    if (!st) return perr(P, SPILL_E_FORMAT, "for without endfor", NULL);
    PTRY(end_of_tag(P));
  }
  *out = n;
return SPILL_OK;
}

/* {% set name[.attr] = expr %} or {% set name %} ... {% endset %} */
static int tag_set(parser *P, jnode **out) {
  PTRY(next(P));
  if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a name after set", NULL);
  jnode *n = mk(P, JN_SET);
  if (!n) return SPILL_E_NOMEM;
  n->name = tok_name(P);
  PTRY(next(P));
  if (is_op(P, ".")) {
    PTRY(next(P));
    if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected an attribute name", NULL);
    n->name2 = tok_name(P);
    PTRY(next(P));
  }
  /* the name the set assigns, made once (a set in a loop runs many times) */
  const char *key = n->name2 ? n->name2 : n->name;
  n->lit = jv_str(P->c, key, strlen(key));
  if (P->c->err) return P->c->err;
  if (is_op(P, "=")) {
    PTRY(next(P));
    PTRY(expr(P, &n->a));
    PTRY(end_of_tag(P));
  } else { /* block set */
    if (n->name2) return perr(P, SPILL_E_UNSUPPORTED, "block set of an attribute", NULL);
    PTRY(end_of_tag(P));
    static const char *const endset[] = {"endset", NULL};
    const char *st;
    PTRY(body(P, endset, &n->a, &st));
    if (!st) return perr(P, SPILL_E_FORMAT, "set without endset", NULL);
    PTRY(end_of_tag(P));
    n->t = JN_SETBLOCK;
  }
  *out = n;
return SPILL_OK;
}

/* {% macro name(p, q=default, ...) %} ... {% endmacro %} */
static int tag_macro(parser *P, jnode **out) {
  if (P->in_scope) return perr(P, SPILL_E_UNSUPPORTED, "a macro defined inside a loop or a macro", NULL);
  PTRY(next(P));
  if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a macro name", NULL);
  jnode *n = mk(P, JN_MACRO);
  if (!n) return SPILL_E_NOMEM;
  n->name = tok_name(P);
  PTRY(next(P));
  PTRY(expect_op(P, "("));
  nvec a = {0};
  while (!is_op(P, ")")) {
    if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a macro parameter name", NULL);
    const char *pn = tok_name(P);
    for (int k = 0; k < a.n; k++)
      if (!strcmp(a.kw[k], pn)) return perr(P, SPILL_E_FORMAT, "macro parameter repeated: ", pn);
    PTRY(next(P));
    jnode *dflt = NULL;
    if (is_op(P, "=")) {
      PTRY(next(P));
      PTRY(expr(P, &dflt));
    } else if (a.n > 0 && a.v[a.n - 1]) {
      return perr(P, SPILL_E_FORMAT, "a macro parameter without a default after one with: ", pn);
    }
    PTRY(nv_push(P, &a, dflt, pn));
    if (is_op(P, ",")) PTRY(next(P));
    else if (!is_op(P, ")")) return perr(P, SPILL_E_FORMAT, "expected , or ) in a macro's parameters", NULL);
  }
  PTRY(next(P));
  PTRY(end_of_tag(P));
  n->args = a.v;
  n->kw = a.kw;
  n->n = a.n;
  static const char *const endmacro[] = {"endmacro", NULL};
  const char *st;
  P->in_scope++;
  int brc = body(P, endmacro, &n->a, &st);
  P->in_scope--;
  PTRY(brc);
  if (!st) return perr(P, SPILL_E_FORMAT, "macro without endmacro", NULL);
  if (is_name(P, n->name)) PTRY(next(P)); /* {% endmacro name %} */
  PTRY(end_of_tag(P));
  *out = n;
  return SPILL_OK;
}

/* {% break %} / {% continue %} */
static int tag_loopctl(parser *P, jnode **out) {
  jnode *n = mk(P, is_name(P, "break") ? JN_BREAK : JN_CONTINUE);
  if (!n) return SPILL_E_NOMEM;
  PTRY(next(P));
  PTRY(end_of_tag(P));
  *out = n;
return SPILL_OK;
}

/* {% generation %} ... {% endgeneration %}: transformers' assistant-mask marker, rendered transparently */
static int tag_generation(parser *P, jnode **out) {
  PTRY(next(P));
  PTRY(end_of_tag(P));
  static const char *const endgen[] = {"endgeneration", NULL};
  const char *st;
  jnode *b;
  PTRY(body(P, endgen, &b, &st));
  if (!st) return perr(P, SPILL_E_FORMAT, "generation without endgeneration", NULL);
  PTRY(end_of_tag(P));
  *out = b;
return SPILL_OK;
}

/* Block tags by their first word. */
static const struct {
  const char *name;
  int (*fn)(parser *P, jnode **out);
} TAGS[] = {
    {"if", tag_if},       {"for", tag_for},           {"set", tag_set},
    {"break", tag_loopctl}, {"continue", tag_loopctl}, {"generation", tag_generation},
    {"macro", tag_macro},
};

/* Parses segments into a body until a block tag whose first word is in
 * stops (NULL-terminated); *stop gets that word (or NULL at the end). The
 * parser is left positioned after the stop tag's first word. */
static int body_at(parser *P, const char *const *stops, jnode **out, const char **stop) {
  nvec kids = {0};
  *stop = NULL;
  while (P->pos < P->n_segs) {
    const seg *s = &P->segs[P->pos++];
    if (s->kind == SEG_TEXT) {
      jnode *n = mk(P, JN_TEXT);
      if (!n) return SPILL_E_NOMEM;
      n->lit = jv_str(P->c, s->s, s->len);
      PTRY(nv_push(P, &kids, n, NULL));
      continue;
    }
    PTRY(start_tag(P, s));
    if (s->kind == SEG_VAR) {
      jnode *x;
      PTRY(expr(P, &x));
      PTRY(end_of_tag(P));
      jnode *n = mk(P, JN_OUT);
      if (!n) return SPILL_E_NOMEM;
      n->a = x;
      PTRY(nv_push(P, &kids, n, NULL));
      continue;
    }
    if (P->tk != 'n') return perr(P, SPILL_E_FORMAT, "expected a tag name", NULL);
    for (int k = 0; stops && stops[k]; k++)
      if (is_name(P, stops[k])) {
        *stop = stops[k];
        PTRY(next(P));
        goto done;
      }
    int (*tag)(parser *, jnode **) = NULL;
    for (size_t k = 0; k < sizeof TAGS / sizeof *TAGS; k++)
      if (is_name(P, TAGS[k].name)) tag = TAGS[k].fn;
    if (!tag) {
      const char *nm = tok_name(P);
      return perr(P, SPILL_E_UNSUPPORTED, "unsupported tag: ", nm);
    }
    jnode *n;
    PTRY(tag(P, &n));
    PTRY(nv_push(P, &kids, n, NULL));
  }
done:;
  jnode *b = mk(P, JN_BODY);
  if (!b) return SPILL_E_NOMEM;
  b->args = kids.v;
  b->n = kids.n;
  *out = b;
  return SPILL_OK;
}

static int body(parser *P, const char *const *stops, jnode **out, const char **stop) {
  PTRY(deeper(P));
  int rc = body_at(P, stops, out, stop);
  P->depth--;
  return rc;
}

/* The tree's depth (what the evaluator recurses through): chains of
 * operators, attributes, subscripts and filters are parsed by loops but
 * nest in the tree, so the recursion guard alone does not bound it. The
 * walk stops at the budget, so it is itself bounded. */
static int tree_depth_ok(parser *P, const jnode *n, int d) {
  if (!n) return SPILL_OK;
  if (d > P->c->b.max_parse_depth) {
    P->line = n->line;
    P->depth = P->c->b.max_parse_depth;
    return deeper(P);
  }
  PTRY(tree_depth_ok(P, n->a, d + 1));
  PTRY(tree_depth_ok(P, n->b, d + 1));
  PTRY(tree_depth_ok(P, n->c, d + 1));
  PTRY(tree_depth_ok(P, n->d, d + 1));
  for (int i = 0; i < n->n; i++) {
    if (n->args) PTRY(tree_depth_ok(P, n->args[i], d + 1));
    if (n->vals) PTRY(tree_depth_ok(P, n->vals[i], d + 1));
  }
  return SPILL_OK;
}

int jinja_parse(jctx *c, const char *tmpl, size_t len, jnode **out) {
  parser P = {0};
  P.c = c;
  int rc = segment(&P, tmpl, len);
  const char *st;
  if (rc == SPILL_OK) rc = body(&P, NULL, out, &st);
  if (rc == SPILL_OK) rc = tree_depth_ok(&P, *out, 1);
  if (c->err) return c->err;
  if (rc < 0) c->err = rc;
  return rc;
}
