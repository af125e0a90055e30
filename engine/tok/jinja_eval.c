/* engine/tok/jinja_eval.c: evaluates the AST of jinja_parse.c with Python
 * jinja2 semantics (the byte-for-byte oracle is tools/tok/jinja_oracle.py):
 * Python truthiness, str() of values (None, True, 1.0, ['a'], {'k': 1}),
 * code-point string indexing and slicing, undefined values that print as ""
 * and fail on use, for-loop scoping (a set inside a loop does not leak; a
 * namespace attribute does), loop.* variables, and the filters, tests,
 * string/dict methods and globals chat templates use (docs/TOKENIZER.md has
 * the list). Anything outside the list fails with SPILL_E_UNSUPPORTED
 * naming it, never silently.
 */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "engine/tok/jinja_internal.h"

/* ---- evaluation state ------------------------------------------------------------- */

typedef struct frame { jdict *vars; struct frame *up; } frame;

/* A macro value: its definition (JN_MACRO) and the frame it was defined in,
 * whose variables it sees at call time (jinja2's closures bind late). The
 * parser allows definitions only where that frame outlives every call: the
 * template's top level. */
typedef struct jmacro { const jnode *def; frame *scope; } jmacro;

typedef struct ev {
  jctx *c;
  frame *top;
  sbuf out;
  int line;
  int brk; /* 1 break, 2 continue */
} ev;

static int fail(ev *E, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ev *E, int code, const char *fmt, ...) {
  if (E->c->err == 0) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    E->c->err = code;
    spill_err_set(E->c->e, code, "chat template line %d: %s", E->line, msg);
  }
  return E->c->err;
}

#define ETRY(x) do { int rc_ = (x); if (rc_ < 0) return rc_; } while (0)

static const char *type_name(jv v) {
  switch (v.t) {
    case JV_UNDEF: return "undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return "list";
    case JV_DICT: return v.u.d->ns ? "Namespace" : "dict";
    case JV_MACRO: return "Macro";
    default: return "function";
  }
}

static int truthy(jv v) {
  switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->ns || v.u.d->n != 0;
    default: return 1;
  }
}

/* Python float repr. */
static void float_repr(double f, char *buf, size_t cap) {
  if (isnan(f)) { snprintf(buf, cap, "nan"); return; }
  if (isinf(f)) { snprintf(buf, cap, f < 0 ? "-inf" : "inf"); return; }
  char tmp[64];
  int p;
  for (p = 1; p <= 17; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
    if (strtod(tmp, NULL) == f) break;
  }
  int exp10 = atoi(strchr(tmp, 'e') + 1);
  if (exp10 >= -4 && exp10 < 16) {
    int decimals = p - 1 - exp10;
    if (decimals < 1) decimals = 1;
    snprintf(buf, cap, "%.*f", decimals, f);
    /* drop trailing zeros beyond one decimal */
    size_t n = strlen(buf);
    while (n > 2 && buf[n - 1] == '0' && buf[n - 2] != '.') buf[--n] = 0;
  } else {
    /* d.ddde+XX: mantissa digits then Python's exponent format */
    char mant[40];
    snprintf(mant, sizeof mant, "%.*e", p - 1, f);
    char *e = strchr(mant, 'e');
    *e = 0;
    snprintf(buf, cap, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
}

static void py_repr_str(sbuf *b, const jstr *s) {
  int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
  char q = has_sq && !has_dq ? '"' : '\'';
  sb_put(b, &q, 1);
  for (size_t i = 0; i < s->len; i++) {
    unsigned char ch = (unsigned char)s->s[i];
    char esc[8];
    if (ch == (unsigned char)q || ch == '\\') { esc[0] = '\\'; esc[1] = (char)ch; sb_put(b, esc, 2); }
    else if (ch == '\n') sb_put(b, "\\n", 2);
    else if (ch == '\r') sb_put(b, "\\r", 2);
    else if (ch == '\t') sb_put(b, "\\t", 2);
    else if (ch < 0x20 || ch == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", ch); sb_put(b, esc, 4); }
    else sb_put(b, (const char *)&ch, 1);
  }
  sb_put(b, &q, 1);
}

/* str() (repr for items inside lists and dicts); nested values count
 * against the evaluation depth (b->c->err set past it). */
static void to_str(sbuf *b, jv v, int repr) {
  char buf[64];
  switch (v.t) {
    case JV_UNDEF: if (repr) sb_puts(b, "Undefined"); break;
    case JV_NONE: sb_puts(b, "None"); break;
    case JV_BOOL: sb_puts(b, v.u.b ? "True" : "False"); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(b, buf); break;
    case JV_FLOAT: float_repr(v.u.f, buf, sizeof buf); sb_puts(b, buf); break;
    case JV_STR: if (repr) py_repr_str(b, v.u.s); else sb_put(b, v.u.s->s, v.u.s->len); break;
    case JV_LIST:
      if (jc_enter(b->c) < 0) { b->failed = 1; break; }
      sb_puts(b, "[");
      for (size_t i = 0; i < v.u.l->n && !b->failed; i++) {
        if (i) sb_puts(b, ", ");
        to_str(b, v.u.l->v[i], 1);
      }
      sb_puts(b, "]");
      jc_leave(b->c);
      break;
    case JV_DICT:
      if (v.u.d->ns) { sb_puts(b, "<Namespace>"); break; }
      if (jc_enter(b->c) < 0) { b->failed = 1; break; }
      sb_puts(b, "{");
      for (size_t i = 0; i < v.u.d->n && !b->failed; i++) {
        if (i) sb_puts(b, ", ");
        to_str(b, v.u.d->k[i], 1);
        sb_puts(b, ": ");
        to_str(b, v.u.d->v[i], 1);
      }
      sb_puts(b, "}");
      jc_leave(b->c);
      break;
    default: sb_puts(b, "<function>"); break;
  }
}

static int jv_tostr(ev *E, jv v, jv *out) {
  if (v.t == JV_STR) { *out = v; return SPILL_OK; }
  sbuf b = sb_temp(E->c);
  to_str(&b, v, 0);
  return sb_take(&b, out);
}

/* JSON as Python's json.dumps(ensure_ascii=False[, indent][, sort_keys]). */
static int to_json_at(ev *E, sbuf *b, jv v, int indent, int depth, int sort_keys);
/* Nested values count against the evaluation depth. */
static int to_json(ev *E, sbuf *b, jv v, int indent, int depth, int sort_keys) {
  ETRY(jc_enter(E->c));
  int rc = to_json_at(E, b, v, indent, depth, sort_keys);
  jc_leave(E->c);
  return rc < 0 ? rc : E->c->err;
}

/* n spaces (an indent), charged as string work */
static void pad(sbuf *b, size_t n) {
  static const char sp[64] = "                                                                ";
  if (n > b->max) n = b->max + 1; /* fails in sb_put */
  while (n > 0 && !b->failed) {
    size_t k = n < sizeof sp ? n : sizeof sp;
    sb_put(b, sp, k);
    n -= k;
    if ((n & 4095) < k && jc_bytes(b->c, 4096) < 0) b->failed = 1;
  }
}

static int to_json_at(ev *E, sbuf *b, jv v, int indent, int depth, int sort_keys) {
  char buf[64];
  switch (v.t) {
    case JV_NONE: sb_puts(b, "null"); return SPILL_OK;
    case JV_BOOL: sb_puts(b, v.u.b ? "true" : "false"); return SPILL_OK;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); sb_puts(b, buf); return SPILL_OK;
    case JV_FLOAT:
      if (isnan(v.u.f)) sb_puts(b, "NaN");
      else if (isinf(v.u.f)) sb_puts(b, v.u.f < 0 ? "-Infinity" : "Infinity");
      else { float_repr(v.u.f, buf, sizeof buf); sb_puts(b, buf); }
      return SPILL_OK;
    case JV_STR: {
      sb_puts(b, "\"");
      const jstr *s = v.u.s;
      for (size_t i = 0; i < s->len; i++) {
        unsigned char ch = (unsigned char)s->s[i];
        if (ch == '"') sb_puts(b, "\\\"");
        else if (ch == '\\') sb_puts(b, "\\\\");
        else if (ch == '\n') sb_puts(b, "\\n");
        else if (ch == '\r') sb_puts(b, "\\r");
        else if (ch == '\t') sb_puts(b, "\\t");
        else if (ch == '\b') sb_puts(b, "\\b");
        else if (ch == '\f') sb_puts(b, "\\f");
        else if (ch < 0x20) { snprintf(buf, sizeof buf, "\\u%04x", ch); sb_puts(b, buf); }
        else sb_put(b, (const char *)&ch, 1);
      }
      sb_puts(b, "\"");
      return SPILL_OK;
    }
    case JV_LIST:
    case JV_DICT: {
      int is_list = v.t == JV_LIST;
      size_t n = is_list ? v.u.l->n : v.u.d->n;
      if (!is_list && v.u.d->ns) return fail(E, SPILL_E_CONFIG, "tojson: a namespace is not JSON");
      sb_puts(b, is_list ? "[" : "{");
      if (n == 0) { sb_puts(b, is_list ? "]" : "}"); return SPILL_OK; }
      size_t *order = jc_alloc(E->c, n * sizeof *order);
      if (!order) return jc_oom(E->c);
      for (size_t i = 0; i < n; i++) order[i] = i;
      if (!is_list && sort_keys) { /* insertion sort by key bytes (str keys) */
        for (size_t i = 0; i < n; i++)
          if (v.u.d->k[i].t != JV_STR)
            return fail(E, SPILL_E_UNSUPPORTED, "tojson(sort_keys=true) of a dict with a %s key",
                        type_name(v.u.d->k[i]));
        for (size_t i = 1; i < n; i++)
          for (size_t j = i; j > 0; j--) {
            ETRY(jc_step(E->c, 1));
            const jstr *x = v.u.d->k[order[j - 1]].u.s, *y = v.u.d->k[order[j]].u.s;
            size_t m = x->len < y->len ? x->len : y->len;
            int c = memcmp(x->s, y->s, m);
            if (c > 0 || (c == 0 && x->len > y->len)) {
              size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
            } else break;
          }
      }
      for (size_t k = 0; k < n; k++) {
        size_t i = order[k];
        if (k) sb_puts(b, indent >= 0 ? "," : ", ");
        if (indent >= 0) {
          sb_puts(b, "\n");
          pad(b, (size_t)indent * (size_t)(depth + 1));
        }
        int rc;
        if (is_list) {
          rc = to_json(E, b, v.u.l->v[i], indent, depth + 1, sort_keys);
        } else {
          jv key = v.u.d->k[i];
          rc = SPILL_OK;
          if (key.t != JV_STR) { /* Python converts int/float/bool/None keys */
            sbuf kb = sb_temp(E->c);
            if (key.t == JV_BOOL) sb_puts(&kb, key.u.b ? "true" : "false");
            else if (key.t == JV_NONE) sb_puts(&kb, "null");
            else to_str(&kb, key, 0);
            rc = sb_take(&kb, &key);
          }
          if (rc == SPILL_OK) rc = to_json(E, b, key, indent, depth + 1, sort_keys);
          sb_puts(b, ": ");
          if (rc == SPILL_OK) rc = to_json(E, b, v.u.d->v[i], indent, depth + 1, sort_keys);
        }
        if (rc < 0) return rc;
      }
      if (indent >= 0) {
        sb_puts(b, "\n");
        pad(b, (size_t)indent * (size_t)depth);
      }
      sb_puts(b, is_list ? "]" : "}");
      return SPILL_OK;
    }
    case JV_UNDEF: return fail(E, SPILL_E_CONFIG, "tojson: '%s' is undefined", v.undef_name ? v.undef_name : "value");
    default: return fail(E, SPILL_E_CONFIG, "tojson: a function is not JSON");
  }
}

/* ---- strings as code points --------------------------------------------------------- */

/* Both scan the string, so both are charged as string work. */
static size_t cp_count(jctx *c, const jstr *s) {
  jc_bytes(c, s->len);
  size_t n = 0;
  for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
  return n;
}

/* byte offset of code point k (k <= count) */
static size_t cp_offset(jctx *c, const jstr *s, size_t k) {
  size_t i = 0;
  while (i < s->len && k > 0) {
    i++;
    while (i < s->len && ((unsigned char)s->s[i] & 0xC0) == 0x80) i++;
    k--;
  }
  jc_bytes(c, i);
  return i;
}

static int py_space(int32_t cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* next code point at s[i], advancing i */
static int32_t cp_next(const char *s, size_t len, size_t *i) {
  int32_t cp;
  utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(len - *i), &cp);
  if (n <= 0) { cp = (unsigned char)s[*i]; n = 1; }
  *i += (size_t)n;
  return cp;
}

static int in_chars(int32_t cp, const jstr *chars) {
  if (!chars) return py_space(cp);
  size_t i = 0;
  while (i < chars->len)
    if (cp_next(chars->s, chars->len, &i) == cp) return 1;
  return 0;
}

static jv str_strip(ev *E, const jstr *s, const jstr *chars, int left, int right) {
  size_t a = 0, b = s->len;
  if (left)
    while (a < b) {
      size_t i = a;
      int32_t cp = cp_next(s->s, b, &i);
      if (!in_chars(cp, chars)) break;
      a = i;
    }
  if (right)
    while (b > a) {
      size_t st = b - 1;
      while (st > a && ((unsigned char)s->s[st] & 0xC0) == 0x80) st--;
      size_t i = st;
      int32_t cp = cp_next(s->s, b, &i);
      if (!in_chars(cp, chars)) break;
      b = st;
    }
  return jv_str(E->c, s->s + a, b - a);
}

static jv str_case(ev *E, const jstr *s, int mode /* 0 lower 1 upper 2 title 3 capitalize */) {
  jstr *js = js_new(E->c, s->len * 4 + 4);
  if (!js) return jv_none(); /* E->c->err is set */
  char *o = js->s;
  size_t i = 0, n = 0;
  int prev_cased = 0, first = 1;
  while (i < s->len) {
    int32_t cp = cp_next(s->s, s->len, &i);
    int32_t r;
    if (mode == 0) r = utf8proc_tolower(cp);
    else if (mode == 1) r = utf8proc_toupper(cp);
    else if (mode == 2) r = prev_cased ? utf8proc_tolower(cp) : utf8proc_totitle(cp);
    else r = first ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
    const utf8proc_property_t *pr = utf8proc_get_property(cp);
    int cased = pr->category == UTF8PROC_CATEGORY_LU || pr->category == UTF8PROC_CATEGORY_LL ||
                pr->category == UTF8PROC_CATEGORY_LT;
    prev_cased = cased;
    first = 0;
    n += (size_t)utf8proc_encode_char(r, (utf8proc_uint8_t *)o + n);
  }
  js->len = n;
  o[n] = 0;
  jv v = {0};
  v.t = JV_STR;
  v.u.s = js;
  return v;
}

/* Byte offset of sub in s at or after from, or -1 (glibc's memmem is
 * linear; charged as string work). */
static int64_t str_find(jctx *c, const jstr *s, const jstr *sub, size_t from) {
  if (sub->len == 0) return (int64_t)from;
  if (from > s->len) return -1;
  jc_bytes(c, s->len - from);
  const char *p = memmem(s->s + from, s->len - from, sub->s, sub->len);
  return p ? (int64_t)(p - s->s) : -1;
}

/* ---- evaluation -------------------------------------------------------------------- */

static int eval(ev *E, const jnode *n, jv *out);
static int exec_body(ev *E, const jnode *n);
static int set_var(ev *E, const char *name, jv v);

static jv lookup(ev *E, const char *name) {
  for (frame *f = E->top; f; f = f->up) {
    jc_step(E->c, f->vars->n >> 4); /* a scan of the scope (a caller's dict can be big) */
    jv *v = jd_find(f->vars, name, strlen(name));
    if (v) return *v;
  }
  return jv_undef(name);
}

enum { F_RAISE = 1, F_NAMESPACE, F_RANGE, F_STRFTIME, F_DICT };

static int need_defined(ev *E, jv v, const char *what) {
  if (v.t == JV_UNDEF)
    return fail(E, SPILL_E_CONFIG, "'%s' is undefined%s%s", v.undef_name ? v.undef_name : "value",
                what ? " in " : "", what ? what : "");
  return SPILL_OK;
}

static int getattr_v(ev *E, jv obj, const char *name, jv *out) {
  ETRY(need_defined(E, obj, NULL));
  if (obj.t == JV_DICT) {
    static const char *const methods[] = {"items", "keys", "values", "get", NULL};
    if (!obj.u.d->ns)
      for (int k = 0; methods[k]; k++)
        if (!strcmp(name, methods[k])) goto method;
    ETRY(jc_step(E->c, obj.u.d->n >> 4));
    jv *v = jd_find(obj.u.d, name, strlen(name));
    *out = v ? *v : jv_undef(name);
    return SPILL_OK;
  }
  if (obj.t == JV_STR || obj.t == JV_LIST) goto method;
  *out = jv_undef(name);
  return SPILL_OK;
method:;
  jmethod *m = jc_alloc(E->c, sizeof *m);
  if (!m) return jc_oom(E->c);
  m->self = obj;
  m->name = name;
  jv v = {0};
  v.t = JV_METHOD;
  v.u.m = m;
  *out = v;
  return SPILL_OK;
}

static int getitem_v(ev *E, jv obj, jv key, jv *out) {
  ETRY(need_defined(E, obj, NULL));
  if (obj.t == JV_DICT) {
    jv *v = jd_find_v(E->c, obj.u.d, key);
    if (v) { *out = *v; return SPILL_OK; }
    if (key.t == JV_STR) {
      char *nm = jc_alloc(E->c, key.u.s->len + 1);
      if (nm) memcpy(nm, key.u.s->s, key.u.s->len);
      *out = jv_undef(nm);
      return SPILL_OK;
    }
    *out = jv_undef("item");
    return SPILL_OK;
  }
  if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
    int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
    int64_t n = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)cp_count(E->c, obj.u.s);
    if (i < 0) i += n;
    if (i < 0 || i >= n) { *out = jv_undef("index"); return SPILL_OK; }
    if (obj.t == JV_LIST) *out = obj.u.l->v[i];
    else {
      size_t a = cp_offset(E->c, obj.u.s, (size_t)i), b = a;
      if (b < obj.u.s->len) b++;
      while (b < obj.u.s->len && ((unsigned char)obj.u.s->s[b] & 0xC0) == 0x80) b++;
      *out = jv_str(E->c, obj.u.s->s + a, b - a);
    }
    return SPILL_OK;
  }
  if (key.t == JV_STR) {
    char *nm = jc_alloc(E->c, key.u.s->len + 1);
    if (!nm) return jc_oom(E->c);
    memcpy(nm, key.u.s->s, key.u.s->len);
    return getattr_v(E, obj, nm, out);
  }
  *out = jv_undef("item");
  return SPILL_OK;
}

static int slice_v(ev *E, jv obj, jv a, jv b, jv c, jv *out) {
  ETRY(need_defined(E, obj, "a slice"));
  if (obj.t != JV_LIST && obj.t != JV_STR) return fail(E, SPILL_E_CONFIG, "cannot slice a %s", type_name(obj));
  int64_t n = obj.t == JV_LIST ? (int64_t)obj.u.l->n : (int64_t)cp_count(E->c, obj.u.s);
  int64_t step = c.t == JV_INT ? c.u.i : 1;
  if (step == 0) return fail(E, SPILL_E_CONFIG, "slice step cannot be zero");
  int64_t lo, hi;
  /* Python's slice.indices */
  if (a.t == JV_INT) { lo = a.u.i; if (lo < 0) lo += n; if (lo < 0) lo = step < 0 ? -1 : 0; if (lo >= n) lo = step < 0 ? n - 1 : n; }
  else lo = step < 0 ? n - 1 : 0;
  if (b.t == JV_INT) { hi = b.u.i; if (hi < 0) hi += n; if (hi < 0) hi = step < 0 ? -1 : 0; if (hi >= n) hi = step < 0 ? n - 1 : n; }
  else hi = step < 0 ? -1 : n;
  if (obj.t == JV_LIST) {
    jlist *l = jl_new(E->c);
    if (!l) return jc_oom(E->c);
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) ETRY(jl_push(E->c, l, obj.u.l->v[i]));
    out->t = JV_LIST;
    out->u.l = l;
    return SPILL_OK;
  }
  /* code point k starts at byte off[k] (identity for ASCII): one scan */
  const jstr *str = obj.u.s;
  size_t *off = NULL;
  if ((size_t)n != str->len) {
    off = jc_alloc(E->c, ((size_t)n + 1) * sizeof *off);
    if (!off) return jc_oom(E->c);
    size_t k = 0;
    for (size_t i = 0; i < str->len; i++)
      if (((unsigned char)str->s[i] & 0xC0) != 0x80) off[k++] = i;
    off[k] = str->len;
  }
  sbuf sb = sb_temp(E->c);
  for (int64_t i = lo; (step > 0 ? i < hi : i > hi) && !sb.failed; i += step) {
    size_t x = off ? off[i] : (size_t)i, y = off ? off[i + 1] : (size_t)i + 1;
    sb_put(&sb, str->s + x, y - x);
    if (((i - lo) & 1023) == 0) ETRY(jc_step(E->c, 1));
  }
  return sb_take(&sb, out);
}

/* Arguments of a call / filter / test, evaluated. */
typedef struct args {
  int n;
  jv v[8];
  const char *kw[8];
} args;

static int eval_args(ev *E, const jnode *n, args *A) {
  A->n = 0;
  if (n->n > 8) return fail(E, SPILL_E_UNSUPPORTED, "more than 8 arguments");
  for (int i = 0; i < n->n; i++) {
    ETRY(eval(E, n->args[i], &A->v[i]));
    A->kw[i] = n->kw ? n->kw[i] : NULL;
    A->n++;
  }
  return SPILL_OK;
}

/* positional i or keyword name */
static jv *arg(args *A, int pos, const char *name) {
  int p = 0;
  for (int i = 0; i < A->n; i++) {
    if (A->kw[i]) { if (name && !strcmp(A->kw[i], name)) return &A->v[i]; continue; }
    if (p++ == pos) return &A->v[i];
  }
  return NULL;
}

static int str_arg(ev *E, jv *v, const char *what, const jstr **out) {
  if (!v || v->t == JV_NONE) { *out = NULL; return SPILL_OK; }
  if (v->t != JV_STR) return fail(E, SPILL_E_CONFIG, "%s: expected a string, got %s", what, type_name(*v));
  *out = v->u.s;
  return SPILL_OK;
}

/* ---- methods: strings and dicts, dispatched by name ---- */

/* str.strip / lstrip / rstrip([chars]) */
static int sm_strip(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  const jstr *chars = NULL;
  ETRY(str_arg(E, arg(A, 0, "chars"), nm, &chars));
  *out = str_strip(E, s, chars, nm[0] != 'r', nm[0] != 'l');
  return SPILL_OK;
}

/* str.startswith / endswith(str or list of str) */
static int sm_affix(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  jv *p = arg(A, 0, NULL);
  if (!p) return fail(E, SPILL_E_CONFIG, "%s() needs an argument", nm);
  int hit = 0;
  jlist one = {1, 1, p};
  jlist *l = p->t == JV_LIST ? p->u.l : &one;
  for (size_t i = 0; i < l->n; i++) {
    if (l->v[i].t != JV_STR) return fail(E, SPILL_E_CONFIG, "%s(): expected a string", nm);
    const jstr *x = l->v[i].u.s;
    if (x->len <= s->len &&
        !memcmp(nm[0] == 's' ? s->s : s->s + s->len - x->len, x->s, x->len))
      hit = 1;
  }
  *out = jv_bool(hit);
  return SPILL_OK;
}

/* str.split / rsplit([sep[, maxsplit]]) (rsplit without maxsplit) */
static int sm_split(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  const jstr *sep = NULL;
  ETRY(str_arg(E, arg(A, 0, "sep"), nm, &sep));
  jv *ms = arg(A, 1, "maxsplit");
  int64_t maxsplit = ms && ms->t == JV_INT ? ms->u.i : -1;
  if (nm[0] == 'r' && maxsplit >= 0) return fail(E, SPILL_E_UNSUPPORTED, "rsplit with maxsplit");
  jlist *l = jl_new(E->c);
  if (!l) return jc_oom(E->c);
  if (sep) {
    if (sep->len == 0) return fail(E, SPILL_E_CONFIG, "empty separator");
    size_t from = 0;
    int64_t k = 0;
    for (;;) {
      int64_t at = (maxsplit < 0 || k < maxsplit) ? str_find(E->c, s, sep, from) : -1;
      if (at < 0) { ETRY(jl_push(E->c, l, jv_str(E->c, s->s + from, s->len - from))); break; }
      ETRY(jl_push(E->c, l, jv_str(E->c, s->s + from, (size_t)at - from)));
      from = (size_t)at + sep->len;
      k++;
    }
  } else { /* whitespace runs */
    size_t i = 0;
    int64_t k = 0;
    while (i < s->len) {
      size_t j = i;
      while (j < s->len) { size_t t = j; if (!py_space(cp_next(s->s, s->len, &t))) break; j = t; }
      i = j;
      if (i >= s->len) break;
      if (maxsplit >= 0 && k >= maxsplit) {
        jv rest = str_strip(E, &(jstr){0}, NULL, 0, 0);
        (void)rest;
        jstr *tail = jv_str(E->c, s->s + i, s->len - i).u.s;
        ETRY(jl_push(E->c, l, str_strip(E, tail, NULL, 0, 1)));
        break;
      }
      while (j < s->len) { size_t t = j; if (py_space(cp_next(s->s, s->len, &t))) break; j = t; }
      ETRY(jl_push(E->c, l, jv_str(E->c, s->s + i, j - i)));
      k++;
      i = j;
    }
  }
  out->t = JV_LIST;
  out->u.l = l;
  return SPILL_OK;
}

/* str.lower / upper / title / capitalize */
static int sm_case(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  (void)A;
  *out = str_case(E, s, nm[0] == 'l' ? 0 : nm[0] == 'u' ? 1 : nm[0] == 't' ? 2 : 3);
  return SPILL_OK;
}

/* str.replace(old, new[, count]) */
static int sm_replace(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  const jstr *a = NULL, *b = NULL;
  ETRY(str_arg(E, arg(A, 0, NULL), nm, &a));
  ETRY(str_arg(E, arg(A, 1, NULL), nm, &b));
  if (!a || !b) return fail(E, SPILL_E_CONFIG, "replace() needs two strings");
  jv *cnt = arg(A, 2, "count");
  int64_t limit = cnt && cnt->t == JV_INT ? cnt->u.i : -1;
  if (a->len == 0) return fail(E, SPILL_E_UNSUPPORTED, "replace() of an empty string");
  sbuf sb = sb_temp(E->c);
  size_t from = 0;
  int64_t k = 0;
  for (;;) {
    int64_t at = (limit < 0 || k < limit) ? str_find(E->c, s, a, from) : -1;
    if (at < 0) { sb_put(&sb, s->s + from, s->len - from); break; }
    sb_put(&sb, s->s + from, (size_t)at - from);
    sb_put(&sb, b->s, b->len);
    from = (size_t)at + a->len;
    k++;
  }
  return sb_take(&sb, out);
}

/* str.find / count(sub), in code points */
static int sm_find_count(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  const jstr *a = NULL;
  ETRY(str_arg(E, arg(A, 0, NULL), nm, &a));
  if (!a) return fail(E, SPILL_E_CONFIG, "%s() needs a string", nm);
  if (nm[0] == 'f') {
    int64_t at = str_find(E->c, s, a, 0);
    size_t cps = 0;
    if (at >= 0) for (int i = 0; i < at; i++) cps += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    *out = jv_int(at < 0 ? -1 : (int64_t)cps);
  } else {
    int64_t k = 0;
    size_t from = 0;
    if (a->len == 0) k = (int64_t)cp_count(E->c, s) + 1;
    else for (int64_t at; (at = str_find(E->c, s, a, from)) >= 0; from = (size_t)at + a->len) k++;
    *out = jv_int(k);
  }
  return SPILL_OK;
}

/* str.join(list of str) */
static int sm_join(ev *E, const char *nm, const jstr *s, args *A, jv *out) {
  (void)nm;
  jv *it = arg(A, 0, NULL);
  if (!it || it->t != JV_LIST) return fail(E, SPILL_E_CONFIG, "join() needs a list");
  sbuf sb = sb_temp(E->c);
  for (size_t i = 0; i < it->u.l->n; i++) {
    if (i) sb_put(&sb, s->s, s->len);
    if (it->u.l->v[i].t != JV_STR) { free(sb.s); return fail(E, SPILL_E_CONFIG, "join(): item %zu is not a string", i); }
    sb_put(&sb, it->u.l->v[i].u.s->s, it->u.l->v[i].u.s->len);
  }
  return sb_take(&sb, out);
}

static const struct {
  const char *name;
  int (*fn)(ev *E, const char *nm, const jstr *s, args *A, jv *out);
} STR_METHODS[] = {
    {"strip", sm_strip},     {"lstrip", sm_strip},         {"rstrip", sm_strip},
    {"startswith", sm_affix}, {"endswith", sm_affix},      {"split", sm_split},
    {"rsplit", sm_split},    {"lower", sm_case},           {"upper", sm_case},
    {"title", sm_case},      {"capitalize", sm_case},      {"replace", sm_replace},
    {"find", sm_find_count}, {"count", sm_find_count},     {"join", sm_join},
};

/* dict.get(key[, default]); keys / values / items() */
static int dict_method(ev *E, const char *nm, jdict *d, args *A, jv *out) {
  if (!strcmp(nm, "get")) {
    jv *k = arg(A, 0, NULL), *dflt = arg(A, 1, NULL);
    if (!k) return fail(E, SPILL_E_CONFIG, "get() needs a key");
    jv *v = jd_find_v(E->c, d, *k);
    *out = v ? *v : dflt ? *dflt : jv_none();
    return SPILL_OK;
  }
  jlist *l = jl_new(E->c);
  if (!l) return jc_oom(E->c);
  for (size_t i = 0; i < d->n; i++) {
    if (!strcmp(nm, "keys")) ETRY(jl_push(E->c, l, d->k[i]));
    else if (!strcmp(nm, "values")) ETRY(jl_push(E->c, l, d->v[i]));
    else {
      jlist *pair = jl_new(E->c);
      if (!pair) return jc_oom(E->c);
      ETRY(jl_push(E->c, pair, d->k[i]));
      ETRY(jl_push(E->c, pair, d->v[i]));
      jv pv = {0};
      pv.t = JV_LIST;
      pv.u.l = pair;
      ETRY(jl_push(E->c, l, pv));
    }
  }
  out->t = JV_LIST;
  out->u.l = l;
  return SPILL_OK;
}

static int call_method(ev *E, jmethod *m, args *A, jv *out) {
  jv self = m->self;
  const char *nm = m->name;
  if (self.t == JV_STR) {
    for (size_t k = 0; k < sizeof STR_METHODS / sizeof *STR_METHODS; k++)
      if (!strcmp(nm, STR_METHODS[k].name)) return STR_METHODS[k].fn(E, nm, self.u.s, A, out);
  } else if (self.t == JV_DICT) {
    return dict_method(E, nm, self.u.d, A, out);
  }
  return fail(E, SPILL_E_UNSUPPORTED, "method %s.%s() is not supported", type_name(self), nm);
}

static int call_func(ev *E, int id, args *A, jv *out) {
  switch (id) {
    case F_RAISE: {
      jv *m = arg(A, 0, NULL);
      jv s = {0};
      if (m) ETRY(jv_tostr(E, *m, &s));
      if (E->c->err == 0) {
        E->c->err = SPILL_E_CONFIG;
        spill_err_set(E->c->e, SPILL_E_CONFIG, "chat template raised: %.*s",
                      s.t == JV_STR ? (int)s.u.s->len : 0, s.t == JV_STR ? s.u.s->s : "");
      }
      return SPILL_E_CONFIG;
    }
    case F_NAMESPACE:
    case F_DICT: {
      jdict *d = jd_new(E->c);
      if (!d) return jc_oom(E->c);
      d->ns = id == F_NAMESPACE;
      for (int i = 0; i < A->n; i++) {
        if (!A->kw[i]) {
          if (A->v[i].t == JV_DICT) {
            for (size_t k = 0; k < A->v[i].u.d->n; k++) ETRY(jd_set(E->c, d, A->v[i].u.d->k[k], A->v[i].u.d->v[k]));
            continue;
          }
          return fail(E, SPILL_E_UNSUPPORTED, "positional argument to namespace()/dict()");
        }
        ETRY(jd_set(E->c, d, jv_str(E->c, A->kw[i], strlen(A->kw[i])), A->v[i]));
      }
      out->t = JV_DICT;
      out->u.d = d;
      return SPILL_OK;
    }
    case F_RANGE: {
      int64_t v[3] = {0, 0, 1};
      if (A->n < 1 || A->n > 3) return fail(E, SPILL_E_CONFIG, "range() takes 1 to 3 arguments");
      for (int i = 0; i < A->n; i++) {
        if (A->v[i].t != JV_INT) return fail(E, SPILL_E_CONFIG, "range(): expected integers");
      }
      if (A->n == 1) v[1] = A->v[0].u.i;
      else { v[0] = A->v[0].u.i; v[1] = A->v[1].u.i; if (A->n == 3) v[2] = A->v[2].u.i; }
      if (v[2] == 0) return fail(E, SPILL_E_CONFIG, "range() step is zero");
      jlist *l = jl_new(E->c);
      if (!l) return jc_oom(E->c);
      int64_t count = 0;
      for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1];) {
        if (++count > 100000) return fail(E, SPILL_E_CONFIG, "range() is longer than 100000");
        ETRY(jc_step(E->c, 1));
        ETRY(jl_push(E->c, l, jv_int(i)));
        if (__builtin_add_overflow(i, v[2], &i)) break; /* past the end of 64 bits */
      }
      out->t = JV_LIST;
      out->u.l = l;
      return SPILL_OK;
    }
    case F_STRFTIME: {
      jv *f = arg(A, 0, NULL);
      if (!f || f->t != JV_STR) return fail(E, SPILL_E_CONFIG, "strftime_now() needs a format");
      char fmt[256], buf[512];
      snprintf(fmt, sizeof fmt, "%.*s", (int)f->u.s->len, f->u.s->s);
      time_t now = time(NULL);
      struct tm tmv;
      localtime_r(&now, &tmv);
      size_t n = strftime(buf, sizeof buf, fmt, &tmv);
      *out = jv_str(E->c, buf, n);
      return SPILL_OK;
    }
    default: return fail(E, SPILL_E_INTERNAL, "unknown function");
  }
}

static int length_of(ev *E, jv v, int64_t *n) {
  if (v.t == JV_STR) *n = (int64_t)cp_count(E->c, v.u.s);
  else if (v.t == JV_LIST) *n = (int64_t)v.u.l->n;
  else if (v.t == JV_DICT) *n = (int64_t)v.u.d->n;
  else if (v.t == JV_UNDEF) *n = 0;
  else return fail(E, SPILL_E_CONFIG, "object of type '%s' has no len()", type_name(v));
  return SPILL_OK;
}

/* Items to iterate: list items, dict keys, string characters. */
static int iter_list(ev *E, jv v, jlist **out) {
  if (v.t == JV_LIST) { *out = v.u.l; return SPILL_OK; }
  jlist *l = jl_new(E->c);
  if (!l) return jc_oom(E->c);
  if (v.t == JV_DICT && !v.u.d->ns) {
    for (size_t i = 0; i < v.u.d->n; i++) ETRY(jl_push(E->c, l, v.u.d->k[i]));
  } else if (v.t == JV_STR) {
    const jstr *str = v.u.s;
    for (size_t a = 0, b; a < str->len; a = b) { /* one code point each */
      b = a + 1;
      while (b < str->len && ((unsigned char)str->s[b] & 0xC0) == 0x80) b++;
      ETRY(jl_push(E->c, l, jv_str(E->c, str->s + a, b - a)));
    }
  } else if (v.t != JV_UNDEF) {
    return fail(E, SPILL_E_CONFIG, "'%s' object is not iterable", type_name(v));
  }
  *out = l;
  return SPILL_OK;
}

static int apply_test(ev *E, const char *nm, jv v, args *A, int *out);

/* ---- filters, dispatched by name (FILTERS) ---- */

/* | length count */
static int f_length(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  int64_t n = 0;
  ETRY(length_of(E, v, &n));
  *out = jv_int(n);
  return SPILL_OK;
}

/* | tojson */
static int f_tojson(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  jv *ind = arg(A, 0, "indent");
  jv *sk = arg(A, 1, "sort_keys");
  int indent = ind && ind->t == JV_INT ? (int)ind->u.i : -1;
  if (ind && ind->t != JV_INT && ind->t != JV_NONE) return fail(E, SPILL_E_UNSUPPORTED, "tojson indent must be an integer");
  for (int i = 0; i < A->n; i++)
    if (A->kw[i] && strcmp(A->kw[i], "indent") && strcmp(A->kw[i], "sort_keys") &&
        strcmp(A->kw[i], "ensure_ascii"))
      return fail(E, SPILL_E_UNSUPPORTED, "tojson(%s=...)", A->kw[i]);
  /* transformers' tojson defaults to ensure_ascii=False, which is what
   * to_json writes; True (\uXXXX escapes) is not implemented */
  jv *ea = arg(A, 99, "ensure_ascii");
  if (ea && truthy(*ea)) return fail(E, SPILL_E_UNSUPPORTED, "tojson(ensure_ascii=true)");
  sbuf b = sb_temp(E->c);
  int rc = to_json(E, &b, v, indent, 0, sk && truthy(*sk));
  if (rc < 0) { free(b.s); return rc; }
  return sb_take(&b, out);
}

/* | trim */
static int f_trim(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  ETRY(need_defined(E, v, "trim"));
  jv s;
  ETRY(jv_tostr(E, v, &s));
  const jstr *chars = NULL;
  ETRY(str_arg(E, arg(A, 0, "chars"), "trim", &chars));
  *out = str_strip(E, s.u.s, chars, 1, 1);
  return SPILL_OK;
}

/* | string */
static int f_string(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  if (v.t == JV_UNDEF) { *out = jv_str(E->c, "", 0); return SPILL_OK; }
  return jv_tostr(E, v, out);
}

/* | upper lower title capitalize */
static int f_case(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)A;
  jv s;
  ETRY(jv_tostr(E, v, &s));
  *out = str_case(E, s.u.s, nm[0] == 'l' ? 0 : nm[0] == 'u' ? 1 : nm[0] == 't' ? 2 : 3);
  return SPILL_OK;
}

/* | default d */
static int f_default(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  jv *dflt = arg(A, 0, "default_value");
  jv *boolean = arg(A, 1, "boolean");
  int use = v.t == JV_UNDEF || (boolean && truthy(*boolean) && !truthy(v));
  *out = use ? (dflt ? *dflt : jv_str(E->c, "", 0)) : v;
  return SPILL_OK;
}

/* | first last */
static int f_first(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)A;
  jlist *l;
  ETRY(iter_list(E, v, &l));
  *out = l->n ? l->v[nm[0] == 'f' ? 0 : l->n - 1] : jv_undef(nm);
  return SPILL_OK;
}

/* | list */
static int f_list(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  jlist *l;
  ETRY(iter_list(E, v, &l));
  out->t = JV_LIST;
  out->u.l = l;
  return SPILL_OK;
}

/* | reverse */
static int f_reverse(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  if (v.t == JV_STR || v.t == JV_LIST) return slice_v(E, v, jv_undef(NULL), jv_undef(NULL), jv_int(-1), out);
  return fail(E, SPILL_E_CONFIG, "reverse of a %s", type_name(v));
}

/* | join */
static int f_join(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  jlist *l;
  ETRY(iter_list(E, v, &l));
  const jstr *sep = NULL;
  ETRY(str_arg(E, arg(A, 0, "d"), "join", &sep));
  sbuf b = sb_temp(E->c);
  for (size_t i = 0; i < l->n; i++) {
    if (i && sep) sb_put(&b, sep->s, sep->len);
    jv s;
    int rc = jv_tostr(E, l->v[i], &s);
    if (rc < 0) { free(b.s); return rc; }
    sb_put(&b, s.u.s->s, s.u.s->len);
  }
  return sb_take(&b, out);
}

/* | int */
static int f_int(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  if (v.t == JV_INT) *out = v;
  else if (v.t == JV_FLOAT) {
    if (!(v.u.f > -9223372036854775808.0 && v.u.f < 9223372036854775808.0))
      return fail(E, SPILL_E_CONFIG, "int of %g: outside 64-bit integers", v.u.f);
    *out = jv_int((int64_t)v.u.f);
  }
  else if (v.t == JV_BOOL) *out = jv_int(v.u.b);
  else if (v.t == JV_STR) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(v.u.s->len < 60 ? v.u.s->len : 60), v.u.s->s);
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno == ERANGE) return fail(E, SPILL_E_CONFIG, "int of '%s': outside 64-bit integers", buf);
    *out = jv_int(*end == 0 && end != buf ? x : 0);
  } else *out = jv_int(0);
  return SPILL_OK;
}

/* | float */
static int f_float(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)E;
  (void)nm;
  (void)A;
  if (v.t == JV_INT) *out = jv_float((double)v.u.i);
  else if (v.t == JV_FLOAT) *out = v;
  else *out = jv_float(0);
  return SPILL_OK;
}

/* | abs */
static int f_abs(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  if (v.t == JV_INT) {
    if (v.u.i == INT64_MIN) return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
    *out = jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
  }
  else if (v.t == JV_FLOAT) *out = jv_float(fabs(v.u.f));
  else return fail(E, SPILL_E_CONFIG, "abs of a %s", type_name(v));
  return SPILL_OK;
}

/* | items */
static int f_items(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  (void)A;
  if (v.t != JV_DICT) return fail(E, SPILL_E_CONFIG, "items of a %s", type_name(v));
  jmethod m = {v, "items"};
  args none = {0};
  return call_method(E, &m, &none, out);
}

/* | dictsort(case_sensitive=false, by='key', reverse=false): the (key,
 * value) pairs sorted as jinja2 sorts them (Python's stable sort; strings
 * compared by code point, lower-cased unless case_sensitive; numbers by
 * value). Keys that Python could not compare (a string and a number) fail. */
typedef struct ds_item { jv key; size_t idx; int num; double d; } ds_item;
static int ds_key_cmp(const ds_item *a, const ds_item *b) {
  int c = 0;
  if (a->num) c = a->d < b->d ? -1 : a->d > b->d;
  else {
    size_t la = a->key.u.s->len, lb = b->key.u.s->len;
    c = memcmp(a->key.u.s->s, b->key.u.s->s, la < lb ? la : lb);
    if (c == 0) c = la < lb ? -1 : la > lb;
  }
  return c;
}
/* ties keep their order (a stable sort, reverse=True included) */
static int ds_cmp(const void *pa, const void *pb) {
  const ds_item *a = pa, *b = pb;
  int c = ds_key_cmp(a, b);
  return c ? c : a->idx < b->idx ? -1 : a->idx > b->idx;
}
static int ds_cmp_rev(const void *pa, const void *pb) {
  const ds_item *a = pa, *b = pb;
  int c = -ds_key_cmp(a, b);
  return c ? c : a->idx < b->idx ? -1 : a->idx > b->idx;
}
static int f_dictsort(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  if (v.t != JV_DICT || v.u.d->ns) return fail(E, SPILL_E_CONFIG, "dictsort of a %s", type_name(v));
  jv *cs = arg(A, 0, "case_sensitive"), *by = arg(A, 1, "by"), *rev = arg(A, 2, "reverse");
  for (int i = 0; i < A->n; i++)
    if (A->kw[i] && strcmp(A->kw[i], "case_sensitive") && strcmp(A->kw[i], "by") && strcmp(A->kw[i], "reverse"))
      return fail(E, SPILL_E_CONFIG, "dictsort() got an unexpected keyword argument '%s'", A->kw[i]);
  int by_value = 0;
  if (by) {
    if (by->t != JV_STR || (strcmp(by->u.s->s, "key") && strcmp(by->u.s->s, "value")))
      return fail(E, SPILL_E_CONFIG, "You can only sort by either \"key\" or \"value\"");
    by_value = by->u.s->s[0] == 'v';
  }
  const jdict *d = v.u.d;
  ETRY(jc_step(E->c, d->n));
  ds_item *it = jc_alloc(E->c, (d->n + 1) * sizeof *it);
  if (!it) return jc_oom(E->c);
  int kinds = 0; /* 1 strings, 2 numbers */
  for (size_t i = 0; i < d->n; i++) {
    jv k = by_value ? d->v[i] : d->k[i];
    it[i].idx = i;
    if (k.t == JV_STR) {
      kinds |= 1;
      it[i].key = cs && truthy(*cs) ? k : str_case(E, k.u.s, 0);
      if (E->c->err) return E->c->err;
    } else if (k.t == JV_INT || k.t == JV_BOOL || k.t == JV_FLOAT) {
      kinds |= 2;
      it[i].num = 1;
      it[i].d = k.t == JV_INT ? (double)k.u.i : k.t == JV_BOOL ? k.u.b : k.u.f;
    } else {
      return fail(E, SPILL_E_CONFIG, "dictsort of a %s %s", type_name(k), by_value ? "value" : "key");
    }
  }
  if (kinds == 3) return fail(E, SPILL_E_CONFIG, "dictsort: '<' not supported between 'str' and a number");
  qsort(it, d->n, sizeof *it, rev && truthy(*rev) ? ds_cmp_rev : ds_cmp);
  jlist *l = jl_new(E->c);
  if (!l) return jc_oom(E->c);
  for (size_t i = 0; i < d->n; i++) {
    jlist *pair = jl_new(E->c);
    if (!pair) return jc_oom(E->c);
    ETRY(jl_push(E->c, pair, d->k[it[i].idx]));
    ETRY(jl_push(E->c, pair, d->v[it[i].idx]));
    jv pv = {0};
    pv.t = JV_LIST;
    pv.u.l = pair;
    ETRY(jl_push(E->c, l, pv));
  }
  out->t = JV_LIST;
  out->u.l = l;
  return SPILL_OK;
}

/* | safe e escape */
static int f_safe(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)A;
  if (nm[0] != 's') return fail(E, SPILL_E_UNSUPPORTED, "filter %s", nm);
  *out = v;
  return SPILL_OK;
}

/* | replace */
static int f_replace(ev *E, const char *nm, jv v, args *A, jv *out) {
  (void)nm;
  jv s;
  ETRY(jv_tostr(E, v, &s));
  jmethod m = {s, "replace"};
  return call_method(E, &m, A, out);
}

/* | selectattr rejectattr map select reject */
static int f_selectattr(ev *E, const char *nm, jv v, args *A, jv *out) {
  jlist *l;
  ETRY(iter_list(E, v, &l));
  jlist *r = jl_new(E->c);
  if (!r) return jc_oom(E->c);
  int is_attr = strstr(nm, "attr") != NULL, is_map = !strcmp(nm, "map");
  jv *attr = is_attr ? arg(A, 0, NULL) : is_map ? arg(A, 99, "attribute") : NULL;
  if ((is_attr || is_map) && (!attr || attr->t != JV_STR))
    return fail(E, SPILL_E_UNSUPPORTED, "%s without an attribute name", nm);
  jv *test = arg(A, is_attr ? 1 : 0, NULL);
  if (is_map) {
    for (size_t i = 0; i < l->n; i++) {
      jv x;
      ETRY(getitem_v(E, l->v[i], *attr, &x));
      if (x.t == JV_UNDEF) { jv *d = arg(A, 99, "default"); if (d) x = *d; }
      ETRY(jl_push(E->c, r, x));
    }
  } else {
    int want = nm[0] == 's';
    for (size_t i = 0; i < l->n; i++) {
      jv x = l->v[i];
      if (is_attr) ETRY(getitem_v(E, l->v[i], *attr, &x));
      int ok;
      if (test) {
        if (test->t != JV_STR) return fail(E, SPILL_E_CONFIG, "%s: test name must be a string", nm);
        char tn[64];
        snprintf(tn, sizeof tn, "%.*s", (int)test->u.s->len, test->u.s->s);
        args ta = {0};
        for (int k = (is_attr ? 2 : 1); k < A->n && ta.n < 8; k++) { ta.v[ta.n] = A->v[k]; ta.kw[ta.n++] = A->kw[k]; }
        ETRY(apply_test(E, tn, x, &ta, &ok));
      } else {
        ok = truthy(x);
      }
      if (ok == want) ETRY(jl_push(E->c, r, l->v[i]));
    }
  }
  out->t = JV_LIST;
  out->u.l = r;
  return SPILL_OK;
}

static const struct {
  const char *name;
  int (*fn)(ev *E, const char *nm, jv v, args *A, jv *out);
} FILTERS[] = {
    {"length", f_length},
    {"count", f_length},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"string", f_string},
    {"upper", f_case},
    {"lower", f_case},
    {"title", f_case},
    {"capitalize", f_case},
    {"default", f_default},
    {"d", f_default},
    {"first", f_first},
    {"last", f_first},
    {"list", f_list},
    {"reverse", f_reverse},
    {"join", f_join},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"items", f_items},
    {"dictsort", f_dictsort},
    {"safe", f_safe},
    {"e", f_safe},
    {"escape", f_safe},
    {"replace", f_replace},
    {"selectattr", f_selectattr},
    {"rejectattr", f_selectattr},
    {"map", f_selectattr},
    {"select", f_selectattr},
    {"reject", f_selectattr},
};

static int apply_filter(ev *E, const char *nm, jv v, args *A, jv *out) {
  for (size_t k = 0; k < sizeof FILTERS / sizeof *FILTERS; k++)
    if (!strcmp(nm, FILTERS[k].name)) return FILTERS[k].fn(E, nm, v, A, out);
  return fail(E, SPILL_E_UNSUPPORTED, "filter %s is not supported", nm);
}

static int apply_test(ev *E, const char *nm, jv v, args *A, int *out) {
  jv *a0 = arg(A, 0, NULL);
  if (!strcmp(nm, "defined")) *out = v.t != JV_UNDEF;
  else if (!strcmp(nm, "undefined")) *out = v.t == JV_UNDEF;
  else if (!strcmp(nm, "none")) *out = v.t == JV_NONE;
  else if (!strcmp(nm, "string")) *out = v.t == JV_STR;
  else if (!strcmp(nm, "number")) *out = v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
  else if (!strcmp(nm, "integer")) *out = v.t == JV_INT;
  else if (!strcmp(nm, "float")) *out = v.t == JV_FLOAT;
  else if (!strcmp(nm, "boolean")) *out = v.t == JV_BOOL;
  else if (!strcmp(nm, "true")) *out = v.t == JV_BOOL && v.u.b;
  else if (!strcmp(nm, "false")) *out = v.t == JV_BOOL && !v.u.b;
  else if (!strcmp(nm, "mapping")) *out = v.t == JV_DICT && !v.u.d->ns;
  else if (!strcmp(nm, "iterable")) *out = v.t == JV_LIST || v.t == JV_STR || (v.t == JV_DICT && !v.u.d->ns);
  else if (!strcmp(nm, "sequence")) *out = v.t == JV_LIST || v.t == JV_STR || (v.t == JV_DICT && !v.u.d->ns);
  else if (!strcmp(nm, "callable")) *out = v.t == JV_FUNC || v.t == JV_METHOD || v.t == JV_MACRO;
  else if (!strcmp(nm, "odd") || !strcmp(nm, "even")) {
    if (v.t != JV_INT) return fail(E, SPILL_E_CONFIG, "%s test of a %s", nm, type_name(v));
    *out = (int)((v.u.i % 2 + 2) % 2) == (nm[0] == 'o');
  } else if (!strcmp(nm, "divisibleby")) {
    if (v.t != JV_INT || !a0 || a0->t != JV_INT || a0->u.i == 0) return fail(E, SPILL_E_CONFIG, "divisibleby needs integers");
    *out = v.u.i % a0->u.i == 0;
  } else if (!strcmp(nm, "eq") || !strcmp(nm, "equalto") || !strcmp(nm, "==")) {
    if (!a0) return fail(E, SPILL_E_CONFIG, "%s needs an argument", nm);
    *out = jv_equal(E->c, v, *a0);
  } else if (!strcmp(nm, "ne") || !strcmp(nm, "!=")) {
    if (!a0) return fail(E, SPILL_E_CONFIG, "%s needs an argument", nm);
    *out = !jv_equal(E->c, v, *a0);
  } else if (!strcmp(nm, "sameas")) {
    if (!a0) return fail(E, SPILL_E_CONFIG, "sameas needs an argument");
    *out = (v.t == a0->t) && (v.t == JV_NONE || v.t == JV_UNDEF ||
                              (v.t == JV_BOOL && v.u.b == a0->u.b) ||
                              (v.t == JV_LIST && v.u.l == a0->u.l) || (v.t == JV_DICT && v.u.d == a0->u.d));
  } else if (!strcmp(nm, "in")) {
    if (!a0) return fail(E, SPILL_E_CONFIG, "in needs an argument");
    jlist *l;
    if (a0->t == JV_STR && v.t == JV_STR) *out = str_find(E->c, a0->u.s, v.u.s, 0) >= 0;
    else {
      ETRY(iter_list(E, *a0, &l));
      *out = 0;
      for (size_t i = 0; i < l->n; i++) if (jv_equal(E->c, l->v[i], v)) *out = 1;
    }
  } else if (!strcmp(nm, "lower") || !strcmp(nm, "upper")) {
    if (v.t != JV_STR) return fail(E, SPILL_E_CONFIG, "%s test of a %s", nm, type_name(v));
    jv c = str_case(E, v.u.s, nm[0] == 'u');
    *out = jv_equal(E->c, c, v);
  } else {
    return fail(E, SPILL_E_UNSUPPORTED, "test %s is not supported", nm);
  }
  return SPILL_OK;
}

static int num(jv v, double *d, int64_t *i, int *is_int) {
  if (v.t == JV_INT) { *i = v.u.i; *d = (double)v.u.i; *is_int = 1; return 1; }
  if (v.t == JV_BOOL) { *i = v.u.b; *d = v.u.b; *is_int = 1; return 1; }
  if (v.t == JV_FLOAT) { *d = v.u.f; *is_int = 0; return 1; }
  return 0;
}

/* Arithmetic and comparison of two numbers (x, y; xi, yi when ints);
 * *done 0 when op is none of these. */
static int num_binop(ev *E, int op, double x, double y, int64_t xi, int64_t yi, int ints, jv *out,
                     int *done) {
  *done = 1;
  switch (op) {
    /* jinja2's integers are unbounded, ours 64-bit: an overflow is an
     * error, never a wrapped (or undefined) value */
    case JOP_ADD:
    case JOP_SUB:
    case JOP_MUL: {
      if (!ints) {
        *out = jv_float(op == JOP_ADD ? x + y : op == JOP_SUB ? x - y : x * y);
        return SPILL_OK;
      }
      int64_t r;
      int ovf = op == JOP_ADD   ? __builtin_add_overflow(xi, yi, &r)
                : op == JOP_SUB ? __builtin_sub_overflow(xi, yi, &r)
                                : __builtin_mul_overflow(xi, yi, &r);
      if (ovf) return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
      *out = jv_int(r);
      return SPILL_OK;
    }
    case JOP_DIV:
      if (y == 0) return fail(E, SPILL_E_CONFIG, "division by zero");
      *out = jv_float(x / y);
      return SPILL_OK;
    case JOP_FDIV:
    case JOP_MOD:
      if (y == 0) return fail(E, SPILL_E_CONFIG, "division by zero");
      if (ints) {
        if (xi == INT64_MIN && yi == -1)
          return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
        int64_t q = xi / yi, r = xi % yi;
        if (r != 0 && ((r < 0) != (yi < 0))) { q--; r += yi; }
        *out = jv_int(op == JOP_FDIV ? q : r);
      } else {
        double q = floor(x / y), r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        *out = jv_float(op == JOP_FDIV ? q : r);
      }
      return SPILL_OK;
    case JOP_POW:
      if (ints && yi >= 0) { /* by squaring, every step checked */
        int64_t r = 1, b = xi, k = yi;
        while (k > 0) {
          if ((k & 1) && __builtin_mul_overflow(r, b, &r))
            return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
          k >>= 1;
          if (k > 0 && __builtin_mul_overflow(b, b, &b))
            return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
        }
        *out = jv_int(r);
      }
      else *out = jv_float(pow(x, y));
      return SPILL_OK;
    case JOP_LT: *out = jv_bool(x < y); return SPILL_OK;
    case JOP_LE: *out = jv_bool(x <= y); return SPILL_OK;
    case JOP_GT: *out = jv_bool(x > y); return SPILL_OK;
    case JOP_GE: *out = jv_bool(x >= y); return SPILL_OK;
  }
  *done = 0;
  return SPILL_OK;
}

/* a + b of two strings, built in the arena at once */
static int concat2(ev *E, const jstr *a, const jstr *b, jv *out) {
  jstr *r = js_new(E->c, a->len + b->len);
  if (!r) return jc_oom(E->c);
  ETRY(jc_bytes(E->c, r->len));
  memcpy(r->s, a->s, a->len);
  memcpy(r->s + a->len, b->s, b->len);
  out->t = JV_STR;
  out->u.s = r;
  return SPILL_OK;
}

/* + of two strings or two lists, string comparison, string * int;
 * *done 0 otherwise. */
static int seq_binop(ev *E, int op, jv a, jv b, jv *out, int *done) {
  *done = 1;
  if (a.t == JV_STR && b.t == JV_STR) {
    if (op == JOP_ADD) return concat2(E, a.u.s, b.u.s, out);
    if (op >= JOP_LT && op <= JOP_GE) {
      size_t m = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
      int c = memcmp(a.u.s->s, b.u.s->s, m);
      if (c == 0) c = a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
      *out = jv_bool(op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0);
      return SPILL_OK;
    }
  }
  if (a.t == JV_LIST && b.t == JV_LIST && op == JOP_ADD) {
    jlist *l = jl_new(E->c);
    if (!l) return jc_oom(E->c);
    size_t n = a.u.l->n + b.u.l->n;
    if (n > E->c->b.max_memory_bytes / sizeof(jv))
      return jc_fail(E->c, SPILL_E_TMPL_MEMORY, "a list of %zu items exceeds the memory budget", n);
    l->v = n ? jc_alloc(E->c, n * sizeof(jv)) : NULL;
    if (n && !l->v) return jc_oom(E->c);
    if (a.u.l->n) memcpy(l->v, a.u.l->v, a.u.l->n * sizeof(jv));
    if (b.u.l->n) memcpy(l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(jv));
    l->n = l->cap = n;
    out->t = JV_LIST;
    out->u.l = l;
    return SPILL_OK;
  }
  if (op == JOP_MUL && ((a.t == JV_STR && b.t == JV_INT) || (a.t == JV_INT && b.t == JV_STR))) {
    jv s = a.t == JV_STR ? a : b;
    int64_t k = a.t == JV_INT ? a.u.i : b.u.i;
    int64_t total;
    if (__builtin_mul_overflow(k, (int64_t)s.u.s->len, &total) || total > (1 << 24))
      return fail(E, SPILL_E_CONFIG, "string repetition too long");
    if (k < 0) k = 0, total = 0;
    jstr *r = js_new(E->c, (size_t)total);
    if (!r) return jc_oom(E->c);
    ETRY(jc_bytes(E->c, (size_t)total));
    for (int64_t i = 0; i < k; i++) memcpy(r->s + (size_t)i * s.u.s->len, s.u.s->s, s.u.s->len);
    out->t = JV_STR;
    out->u.s = r;
    return SPILL_OK;
  }
  *done = 0;
  return SPILL_OK;
}

static int binop(ev *E, int op, jv a, jv b, jv *out) {
  if (op == JOP_EQ) { *out = jv_bool(jv_equal(E->c, a, b)); return SPILL_OK; }
  if (op == JOP_NE) { *out = jv_bool(!jv_equal(E->c, a, b)); return SPILL_OK; }
  if (op == JOP_IN || op == JOP_NOTIN) {
    args A = {1, {b}, {NULL}};
    int r;
    ETRY(need_defined(E, b, "'in'"));
    ETRY(apply_test(E, "in", a, &A, &r));
    *out = jv_bool(op == JOP_IN ? r : !r);
    return SPILL_OK;
  }
  if (op == JOP_CAT) {
    jv x, y;
    ETRY(jv_tostr(E, a, &x));
    ETRY(jv_tostr(E, b, &y));
    return concat2(E, x.u.s, y.u.s, out);
  }
  ETRY(need_defined(E, a, "an operation"));
  ETRY(need_defined(E, b, "an operation"));
  double x = 0, y = 0;
  int64_t xi = 0, yi = 0;
  int xint = 0, yint = 0;
  int an = num(a, &x, &xi, &xint), bn = num(b, &y, &yi, &yint);
  if (an && bn) {
    int numeric;
    ETRY(num_binop(E, op, x, y, xi, yi, xint && yint, out, &numeric));
    if (numeric) return SPILL_OK;
  }
  int done;
  ETRY(seq_binop(E, op, a, b, out, &done));
  if (done) return SPILL_OK;
  static const char *names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", "<=", ">", ">="};
  return fail(E, SPILL_E_CONFIG, "unsupported operand types for %s: '%s' and '%s'",
              op < (int)(sizeof names / sizeof *names) ? names[op] : "?", type_name(a), type_name(b));
}

/* A call: a global function (range, namespace, ...) or a method. */
/* Runs body with the output captured into *out (a string), scope as the
 * innermost frame. The capture is output: the output budget bounds it. */
static int capture(ev *E, const jnode *body, frame *scope, jv *out) {
  sbuf saved = E->out;
  frame *top = E->top;
  int brk = E->brk;
  E->out.s = NULL;
  E->out.n = E->out.cap = 0;
  E->out.failed = 0;
  E->top = scope;
  E->brk = 0;
  int rc = exec_body(E, body);
  sbuf got = E->out;
  E->out = saved;
  E->top = top;
  E->brk = brk;
  if (rc < 0) { free(got.s); return rc; }
  if (got.failed) { free(got.s); return jc_oom(E->c); }
  return sb_take(&got, out);
}

/* A macro call (jinja2's Macro.__call__): positional arguments fill the
 * parameters in order, keywords by name; a parameter left over takes its
 * default (evaluated now, in the call's frame, so it may use the
 * parameters before it) or is undefined. Too many arguments, an unknown
 * keyword or a parameter given twice are errors, as in jinja2 (which has
 * varargs/kwargs/caller: not supported here). Returns the rendered body. */
static int call_macro(ev *E, const jmacro *m, args *A, jv *out) {
  const jnode *d = m->def;
  jv *bound = jc_alloc(E->c, (size_t)(d->n + 1) * (sizeof *bound + 1));
  if (!bound) return jc_oom(E->c);
  char *given = (char *)(bound + d->n + 1); /* zeroed by jc_alloc */
  int pos = 0;
  for (int i = 0; i < A->n; i++) {
    int k = -1;
    if (!A->kw[i]) {
      if (pos >= d->n)
        return fail(E, SPILL_E_CONFIG, "macro '%s' takes not more than %d argument(s)", d->name, d->n);
      k = pos++;
    } else {
      for (int j = 0; j < d->n; j++)
        if (!strcmp(d->kw[j], A->kw[i])) k = j;
      if (k < 0) return fail(E, SPILL_E_CONFIG, "macro '%s' takes no keyword argument '%s'", d->name, A->kw[i]);
    }
    if (given[k])
      return fail(E, SPILL_E_CONFIG, "macro '%s' got multiple values for argument '%s'", d->name, d->kw[k]);
    given[k] = 1;
    bound[k] = A->v[i];
  }
  frame f = {jd_new(E->c), m->scope};
  if (!f.vars) return jc_oom(E->c);
  frame *top = E->top;
  E->top = &f;
  int rc = SPILL_OK;
  for (int k = 0; rc == SPILL_OK && k < d->n; k++) {
    jv v = given[k] ? bound[k] : jv_undef(d->kw[k]);
    if (!given[k] && d->args[k]) rc = eval(E, d->args[k], &v);
    if (rc == SPILL_OK) rc = set_var(E, d->kw[k], v);
  }
  E->top = top;
  if (rc < 0) return rc;
  return capture(E, d->a, &f, out);
}

static int eval_call(ev *E, const jnode *n, jv *out) {
  jv f;
  ETRY(eval(E, n->a, &f));
  args A;
  ETRY(eval_args(E, n, &A));
  E->line = n->line;
  if (f.t == JV_FUNC) return call_func(E, (int)f.u.i, &A, out);
  if (f.t == JV_METHOD) return call_method(E, f.u.m, &A, out);
  if (f.t == JV_MACRO) return call_macro(E, f.u.mac, &A, out);
  if (f.t == JV_UNDEF) return fail(E, SPILL_E_CONFIG, "'%s' is undefined", f.undef_name ? f.undef_name : "function");
  return fail(E, SPILL_E_CONFIG, "'%s' object is not callable", type_name(f));
}

/* Unary - and + (booleans count as integers, as in Python). */
static int eval_unary(ev *E, const jnode *n, jv *out) {
  jv a;
  ETRY(eval(E, n->a, &a));
  if (a.t == JV_INT && n->op == JOP_NEG && a.u.i == INT64_MIN)
    return fail(E, SPILL_E_CONFIG, "integer overflow (templates use 64-bit integers)");
  if (a.t == JV_INT) *out = jv_int(n->op == JOP_NEG ? -a.u.i : a.u.i);
  else if (a.t == JV_FLOAT) *out = jv_float(n->op == JOP_NEG ? -a.u.f : a.u.f);
  else if (a.t == JV_BOOL) *out = jv_int(n->op == JOP_NEG ? -a.u.b : a.u.b);
  else return fail(E, SPILL_E_CONFIG, "bad operand type for unary -: '%s'", type_name(a));
  return SPILL_OK;
}

/* A list or tuple literal. */
static int eval_list(ev *E, const jnode *n, jv *out) {
  jlist *l = jl_new(E->c);
  if (!l) return jc_oom(E->c);
  for (int i = 0; i < n->n; i++) {
    jv x;
    ETRY(eval(E, n->args[i], &x));
    ETRY(jl_push(E->c, l, x));
  }
  out->t = JV_LIST;
  out->u.l = l;
  return SPILL_OK;
}

/* A dict literal. */
static int eval_dict(ev *E, const jnode *n, jv *out) {
  jdict *d = jd_new(E->c);
  if (!d) return jc_oom(E->c);
  for (int i = 0; i < n->n; i++) {
    jv k, v;
    ETRY(eval(E, n->args[i], &k));
    ETRY(eval(E, n->vals[i], &v));
    ETRY(jd_set(E->c, d, k, v));
  }
  out->t = JV_DICT;
  out->u.d = d;
  return SPILL_OK;
}

/* Every node evaluated is a step and a level of nesting; an error recorded
 * anywhere inside (a budget, an allocation) is returned here at the latest,
 * so a value that could not be built never travels on. */
static int eval_at(ev *E, const jnode *n, jv *out);
static int eval(ev *E, const jnode *n, jv *out) {
  ETRY(jc_step(E->c, 1));
  ETRY(jc_enter(E->c));
  int rc = eval_at(E, n, out);
  jc_leave(E->c);
  return rc < 0 ? rc : E->c->err;
}

static int eval_at(ev *E, const jnode *n, jv *out) {
  E->line = n->line;
  switch (n->t) {
    case JN_LIT: *out = n->lit; return SPILL_OK;
    case JN_VAR: *out = lookup(E, n->name); return SPILL_OK;
    case JN_ATTR: {
      jv o;
      ETRY(eval(E, n->a, &o));
      return getattr_v(E, o, n->name, out);
    }
    case JN_ITEM: {
      jv o, k;
      ETRY(eval(E, n->a, &o));
      ETRY(eval(E, n->b, &k));
      return getitem_v(E, o, k, out);
    }
    case JN_SLICE: {
      jv o, a = jv_undef(NULL), b = jv_undef(NULL), c = jv_undef(NULL);
      ETRY(eval(E, n->a, &o));
      if (n->b) ETRY(eval(E, n->b, &a));
      if (n->c) ETRY(eval(E, n->c, &b));
      if (n->d) ETRY(eval(E, n->d, &c));
      return slice_v(E, o, a, b, c, out);
    }
    case JN_CALL: return eval_call(E, n, out);
    case JN_FILTER: {
      jv v;
      ETRY(eval(E, n->a, &v));
      args A;
      ETRY(eval_args(E, n, &A));
      E->line = n->line;
      return apply_filter(E, n->name, v, &A, out);
    }
    case JN_TEST: {
      jv v;
      ETRY(eval(E, n->a, &v));
      args A;
      ETRY(eval_args(E, n, &A));
      int r;
      E->line = n->line;
      ETRY(apply_test(E, n->name, v, &A, &r));
      *out = jv_bool(n->op ? !r : r);
      return SPILL_OK;
    }
    case JN_BIN: {
      jv a, b;
      ETRY(eval(E, n->a, &a));
      ETRY(eval(E, n->b, &b));
      E->line = n->line;
      return binop(E, n->op, a, b, out);
    }
    case JN_UN: return eval_unary(E, n, out);
    case JN_AND: {
      ETRY(eval(E, n->a, out));
      if (!truthy(*out)) return SPILL_OK;
      return eval(E, n->b, out);
    }
    case JN_OR: {
      ETRY(eval(E, n->a, out));
      if (truthy(*out)) return SPILL_OK;
      return eval(E, n->b, out);
    }
    case JN_NOT: {
      jv a;
      ETRY(eval(E, n->a, &a));
      *out = jv_bool(!truthy(a));
      return SPILL_OK;
    }
    case JN_COND: {
      jv c;
      ETRY(eval(E, n->a, &c));
      if (truthy(c)) return eval(E, n->b, out);
      if (n->c) return eval(E, n->c, out);
      *out = jv_undef("else");
      return SPILL_OK;
    }
    case JN_LIST: return eval_list(E, n, out);
    case JN_DICT: return eval_dict(E, n, out);
    default: return fail(E, SPILL_E_INTERNAL, "statement used as an expression");
  }
}

static int set_var(ev *E, const char *name, jv v) {
  return jd_set(E->c, E->top->vars, jv_str(E->c, name, strlen(name)), v);
}

static int exec_at(ev *E, const jnode *n);
static int exec_node(ev *E, const jnode *n) {
  ETRY(jc_step(E->c, 1));
  ETRY(jc_enter(E->c));
  int rc = exec_at(E, n);
  jc_leave(E->c);
  return rc < 0 ? rc : E->c->err;
}

/* A for loop's "if" filter: the items for which n->d is truthy, each bound
 * to the loop's names in the loop's frame (E->top) while it is tested. */
static int for_filter(ev *E, const jnode *n, jlist *items, jlist **out) {
  jlist *sel = jl_new(E->c);
  if (!sel) return jc_oom(E->c);
  *out = sel;
  int rc = SPILL_OK;
  for (size_t i = 0; rc == SPILL_OK && i < items->n; i++) {
    jv x = items->v[i], c;
    rc = jc_step(E->c, 1);
    if (rc < 0) break;
    if (n->name2) {
      if (x.t != JV_LIST || x.u.l->n != 2) return fail(E, SPILL_E_CONFIG, "cannot unpack into 2 names");
      rc = set_var(E, n->name, x.u.l->v[0]);
      if (rc == SPILL_OK) rc = set_var(E, n->name2, x.u.l->v[1]);
    } else {
      rc = set_var(E, n->name, x);
    }
    if (rc == SPILL_OK) rc = eval(E, n->d, &c);
    if (rc == SPILL_OK && truthy(c)) rc = jl_push(E->c, sel, x);
  }
  return rc;
}

static int exec_at(ev *E, const jnode *n) {
  E->line = n->line;
  switch (n->t) {
    case JN_TEXT: sb_put(&E->out, n->lit.u.s->s, n->lit.u.s->len); return SPILL_OK;
    case JN_OUT: {
      jv v;
      ETRY(eval(E, n->a, &v));
      to_str(&E->out, v, 0);
      return SPILL_OK;
    }
    case JN_BODY: return exec_body(E, n);
    case JN_IF: {
      jv c;
      ETRY(eval(E, n->a, &c));
      if (truthy(c)) return exec_body(E, n->b);
      if (n->c) return exec_body(E, n->c);
      return SPILL_OK;
    }
    case JN_SET: {
      jv v;
      ETRY(eval(E, n->a, &v));
      if (n->name2) {
        jv ns = lookup(E, n->name);
        if (ns.t != JV_DICT || !ns.u.d->ns)
          return fail(E, SPILL_E_CONFIG, "cannot assign attribute on non-namespace object '%s'", n->name);
        return jd_set(E->c, ns.u.d, n->lit, v);
      }
      return jd_set(E->c, E->top->vars, n->lit, v);
    }
    case JN_SETBLOCK: { /* the capture is output: the output budget bounds it */
      sbuf saved = E->out;
      E->out.s = NULL;
      E->out.n = E->out.cap = 0;
      int rc = exec_body(E, n->a);
      sbuf got = E->out;
      E->out = saved;
      jv v;
      if (rc < 0) { free(got.s); return rc; }
      ETRY(sb_take(&got, &v));
      return set_var(E, n->name, v);
    }
    case JN_MACRO: {
      jmacro *m = jc_alloc(E->c, sizeof *m);
      if (!m) return jc_oom(E->c);
      m->def = n;
      m->scope = E->top;
      jv v = {0};
      v.t = JV_MACRO;
      v.u.mac = m;
      return set_var(E, n->name, v);
    }
    case JN_BREAK: E->brk = 1; return SPILL_OK;
    case JN_CONTINUE: E->brk = 2; return SPILL_OK;
    case JN_FOR: {
      jv it;
      ETRY(eval(E, n->a, &it));
      if (it.t == JV_UNDEF) ETRY(need_defined(E, it, "a for loop"));
      jlist *items;
      ETRY(iter_list(E, it, &items));
      frame f = {jd_new(E->c), E->top};
      if (!f.vars) return jc_oom(E->c);
      E->top = &f;
      int rc = SPILL_OK;
      /* the "if" filter runs first (loop.length counts what passes) */
      jlist *sel = items;
      if (n->d) rc = for_filter(E, n, items, &sel);
      size_t len = rc == SPILL_OK ? sel->n : 0;
      /* One loop object per loop, updated in place (as jinja2's
       * LoopContext is): its keys and the loop variables' names are made
       * once, so an iteration allocates nothing of its own. */
      static const char *const lk[] = {"index0", "index", "revindex0", "revindex", "first", "last",
                                       "length", "previtem", "nextitem", "depth", "depth0"};
      enum { NLK = sizeof lk / sizeof *lk };
      jdict *loop = len ? jd_new(E->c) : NULL;
      jv kname = {0}, kname2 = {0}, kloop = {0};
      if (len) {
        if (!loop) rc = jc_oom(E->c);
        for (size_t k = 0; rc == SPILL_OK && k < NLK; k++)
          rc = jd_set(E->c, loop, jv_str(E->c, lk[k], strlen(lk[k])), jv_none());
        kname = jv_str(E->c, n->name, strlen(n->name));
        if (n->name2) kname2 = jv_str(E->c, n->name2, strlen(n->name2));
        kloop = jv_str(E->c, "loop", 4);
        if (E->c->err) rc = E->c->err;
      }
      for (size_t i = 0; rc == SPILL_OK && i < len; i++) {
        rc = jc_step(E->c, 1); /* an iteration is a step even with an empty body */
        if (rc < 0) break;
        f.vars->n = 0; /* fresh scope per iteration */
        jv x = sel->v[i];
        if (n->name2) {
          if (x.t != JV_LIST || x.u.l->n != 2) { rc = fail(E, SPILL_E_CONFIG, "cannot unpack into 2 names"); break; }
          rc = jd_set(E->c, f.vars, kname, x.u.l->v[0]);
          if (rc == SPILL_OK) rc = jd_set(E->c, f.vars, kname2, x.u.l->v[1]);
        } else {
          rc = jd_set(E->c, f.vars, kname, x);
        }
        jv lv[NLK] = {
            jv_int((int64_t)i), jv_int((int64_t)i + 1), jv_int((int64_t)(len - i - 1)),
            jv_int((int64_t)(len - i)), jv_bool(i == 0), jv_bool(i + 1 == len), jv_int((int64_t)len),
            i > 0 ? sel->v[i - 1] : jv_undef("previtem"),
            i + 1 < len ? sel->v[i + 1] : jv_undef("nextitem"), jv_int(1), jv_int(0),
        };
        memcpy(loop->v, lv, sizeof lv);
        jv lvv = {0};
        lvv.t = JV_DICT;
        lvv.u.d = loop;
        if (rc == SPILL_OK) rc = jd_set(E->c, f.vars, kloop, lvv);
        if (rc == SPILL_OK) rc = exec_body(E, n->b);
        if (E->brk == 1) { E->brk = 0; break; }
        E->brk = 0;
      }
      E->top = f.up;
      if (rc == SPILL_OK && len == 0 && n->c) rc = exec_body(E, n->c);
      return rc;
    }
    default: return fail(E, SPILL_E_INTERNAL, "expression used as a statement");
  }
}

static int exec_body(ev *E, const jnode *n) {
  if (n->t != JN_BODY) return exec_node(E, n);
  for (int i = 0; i < n->n; i++) {
    ETRY(exec_node(E, n->args[i]));
    if (E->brk) return SPILL_OK;
  }
  return SPILL_OK;
}

int jinja_render(jctx *c, const jnode *root, jdict *globals, char **out, size_t *out_len) {
  ev E = {0};
  E.c = c;
  E.out.c = c;
  E.out.max = c->b.max_output_bytes;
  E.out.code = SPILL_E_TMPL_OUTPUT;
  /* builtins below the caller's globals */
  jdict *builtins = jd_new(c);
  if (!builtins) return jc_oom(c);
  static const struct { const char *name; int id; } fns[] = {
      {"raise_exception", F_RAISE}, {"namespace", F_NAMESPACE}, {"range", F_RANGE},
      {"strftime_now", F_STRFTIME}, {"dict", F_DICT}};
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
    jv f = {0};
    f.t = JV_FUNC;
    f.u.i = fns[i].id;
    int rc = jd_set(c, builtins, jv_str(c, fns[i].name, strlen(fns[i].name)), f);
    if (rc < 0) return rc;
  }
  frame fb = {builtins, NULL}, fg = {globals, &fb}, ft = {jd_new(c), &fg};
  if (!ft.vars) return jc_oom(c);
  E.top = &ft;
  int rc = exec_body(&E, root);
  if (rc == SPILL_OK && !E.out.s) sb_put(&E.out, "", 0);
  if (rc == SPILL_OK && E.out.failed) rc = jc_oom(c);
  if (c->err) rc = c->err;
  if (rc < 0) {
    free(E.out.s);
    return rc;
  }
  *out = E.out.s;
  *out_len = E.out.n;
  return SPILL_OK;
}
