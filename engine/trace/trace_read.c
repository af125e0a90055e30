/* engine/trace/trace_read.c: JSONL router traces -> spill_trace.
 *
 * Traces are untrusted input: every line is parsed with cJSON on its own and
 * every field is checked for type, range and shape; the first problem is
 * reported as "NAME:LINE: json.path: reason" and nothing is asserted. The
 * format is detected per line ("layers" = simple, "layer" = router) and may
 * not change within a file. Router lines are grouped by "tok" with a hash
 * map; the records are then sorted by (token, layer), which both detects a
 * (tok, layer) given twice and puts layers in ascending order. The layer set
 * of the first token is the reference every other token must match.
 * Memory: the id pool grows geometrically; nothing is kept per line but one
 * small record (router format) and the ids themselves.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/trace/router_trace.h"
#include "engine/trace/trace_internal.h"

#define TRACE_MAX_LAYERS 4096u
#define TRACE_MAX_TOPK 1024u
#define TRACE_MAX_EXPERTS (1u << 20)
#define TRACE_MAX_FILE_BYTES (4ull << 30)

/* Growable array of fixed-size elements. */
typedef struct vec {
  void *p;
  size_t n, cap, elem;
} vec;

static void *vec_push(vec *v, size_t count) {
  if (v->n + count > v->cap) {
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + count) cap *= 2;
    void *np = realloc(v->p, cap * v->elem);
    if (!np) return NULL;
    v->p = np;
    v->cap = cap;
  }
  void *at = (char *)v->p + v->n * v->elem;
  v->n += count;
  return at;
}

/* One (token, layer) line of the router format. */
typedef struct rec {
  uint32_t tok_idx, layer, line;
  size_t ids_off; /* into the id pool */
} rec;

typedef struct parser {
  const char *name;
  uint32_t given_experts; /* 0 = infer */
  int format;             /* -1 until the first line */
  uint32_t n_layers, top_k, first_line;
  uint32_t max_id;
  vec ids;      /* uint32_t: simple: (tokens, n_layers, top_k); router: per rec */
  vec tok;      /* int64_t per token */
  vec pos;      /* int64_t per token */
  vec phase;    /* uint8_t per token */
  vec tok_line; /* uint32_t: first line of each token */
  vec recs;     /* rec (router) */
  /* tok value -> token index, open addressing (router format) */
  int64_t *map_key;
  uint32_t *map_val;
  size_t map_cap, map_n;
  uint64_t n_hits, n_pred, n_pred_correct, n_rejected, n_nonfinite;
  /* simple format: "weights" on the first token decides whether all have them */
  int has_weights; /* -1 until the first token */
  vec weights;     /* float, like ids */
  spill_trace_meta meta;
  uint32_t *hdr_layer_ids; /* header "layer_ids" (simple format), or NULL */
  uint32_t n_hdr_layer_ids;
  int seen_record;  /* a token line was read */
  spill_err *e;
} parser;

int spill_trace_fail_at(spill_err *e, const char *name, uint32_t line, const char *fmt, ...) {
  char msg[SPILL_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return spill_err_set(e, SPILL_E_TRACE, "%s:%u: %s", name, line, msg);
}

int spill_trace_nomem(spill_err *e, const char *name) {
  return spill_err_set(e, SPILL_E_NOMEM, "%s: out of memory", name);
}

/* The parser's input names every error (trace_internal.h). */
#define fail(ps, line, ...) spill_trace_fail_at((ps)->e, (ps)->name, (line), __VA_ARGS__)
#define nomem(ps) spill_trace_nomem((ps)->e, (ps)->name)

/* 1 if it is an integral number in [lo, hi]. */
static int int_in(const cJSON *it, int64_t lo, int64_t hi, int64_t *out) {
  if (!cJSON_IsNumber(it)) return 0;
  double v = it->valuedouble;
  if (!isfinite(v) || v != floor(v) || v < (double)lo || v > (double)hi) return 0;
  *out = (int64_t)v;
  return 1;
}

static size_t hash_slot(int64_t tok, size_t cap) {
  uint64_t x = (uint64_t)tok * 0x9E3779B97F4A7C15ull;
  return (size_t)((x ^ (x >> 29)) & (cap - 1));
}

static uint32_t id_hi(const parser *ps) {
  return ps->given_experts ? ps->given_experts - 1 : TRACE_MAX_EXPERTS - 1;
}

/* Reads an array of distinct expert ids at path (printf'd by the caller into
 * `path`) into dst[0..n). */
static int read_ids(parser *ps, uint32_t line, const cJSON *arr, const char *path,
                    uint32_t *dst, uint32_t n) {
  uint32_t i = 0;
  for (const cJSON *it = arr->child; it; it = it->next, i++) {
    int64_t v;
    if (!int_in(it, 0, id_hi(ps), &v))
      return fail(ps, line, "%s[%u]: expected integer in [0, %u]", path, i, id_hi(ps));
    for (uint32_t j = 0; j < i; j++)
      if (dst[j] == (uint32_t)v)
        return fail(ps, line, "%s[%u]: duplicate expert id %lld (also at index %u)", path, i,
                    (long long)v, j);
    dst[i] = (uint32_t)v;
    if ((uint32_t)v > ps->max_id) ps->max_id = (uint32_t)v;
  }
  (void)n;
  return SPILL_OK;
}

static int check_topk(parser *ps, uint32_t line, const char *path, int n) {
  if (n < 1) return fail(ps, line, "%s: expected a non-empty array of expert ids", path);
  if ((uint32_t)n > TRACE_MAX_TOPK)
    return fail(ps, line, "%s: %d ids, more than %u", path, n, TRACE_MAX_TOPK);
  if (ps->top_k == 0) {
    ps->top_k = (uint32_t)n;
    ps->first_line = line;
  } else if ((uint32_t)n != ps->top_k) {
    return fail(ps, line, "%s: expected %u ids (as line %u), got %d", path, ps->top_k,
                ps->first_line, n);
  }
  return SPILL_OK;
}

static int push_token(parser *ps, int64_t tok, int64_t pos, uint8_t phase, uint32_t line) {
  int64_t *t = (int64_t *)vec_push(&ps->tok, 1);
  int64_t *p = (int64_t *)vec_push(&ps->pos, 1);
  uint8_t *ph = (uint8_t *)vec_push(&ps->phase, 1);
  uint32_t *ln = (uint32_t *)vec_push(&ps->tok_line, 1);
  if (!t || !p || !ph || !ln) return nomem(ps);
  *t = tok;
  *p = pos;
  *ph = phase;
  *ln = line;
  return SPILL_OK;
}

static int parse_simple(parser *ps, uint32_t line, const cJSON *obj) {
  int64_t tok;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "tok");
  if (!t) return fail(ps, line, "tok: missing key");
  if (!int_in(t, 0, INT64_C(1) << 53, &tok))
    return fail(ps, line, "tok: expected integer >= 0");
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(obj, "layers");
  if (!cJSON_IsArray(layers)) return fail(ps, line, "layers: expected an array of arrays");
  int nl = cJSON_GetArraySize(layers);
  if (nl < 1) return fail(ps, line, "layers: expected at least one layer");
  if ((uint32_t)nl > TRACE_MAX_LAYERS)
    return fail(ps, line, "layers: %d layers, more than %u", nl, TRACE_MAX_LAYERS);
  if (ps->n_layers == 0) ps->n_layers = (uint32_t)nl;
  else if ((uint32_t)nl != ps->n_layers)
    return fail(ps, line, "layers: expected %u layers (as line %u), got %d", ps->n_layers,
                ps->first_line, nl);
  uint32_t l = 0;
  for (const cJSON *la = layers->child; la; la = la->next, l++) {
    char path[48];
    snprintf(path, sizeof path, "layers[%u]", l);
    if (!cJSON_IsArray(la)) return fail(ps, line, "%s: expected an array of expert ids", path);
    SPILL_TRY(check_topk(ps, line, path, cJSON_GetArraySize(la)));
    uint32_t *dst = (uint32_t *)vec_push(&ps->ids, ps->top_k);
    if (!dst) return nomem(ps);
    SPILL_TRY(read_ids(ps, line, la, path, dst, ps->top_k));
  }
  /* Optional "pos", "phase", "weights" (written by `spill trace convert`). */
  int64_t pos = -1;
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "pos");
  if (it && !int_in(it, 0, INT64_C(1) << 53, &pos))
    return fail(ps, line, "pos: expected integer >= 0");
  uint8_t phase = SPILL_TRACE_PHASE_NONE;
  it = cJSON_GetObjectItemCaseSensitive(obj, "phase");
  if (it) {
    if (cJSON_IsString(it) && strcmp(it->valuestring, "decode") == 0)
      phase = SPILL_TRACE_PHASE_DECODE;
    else if (cJSON_IsString(it) && strcmp(it->valuestring, "prefill") == 0)
      phase = SPILL_TRACE_PHASE_PREFILL;
    else return fail(ps, line, "phase: expected \"decode\" or \"prefill\"");
  }
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(obj, "weights");
  if (ps->has_weights < 0) ps->has_weights = w != NULL;
  if (!w != !ps->has_weights)
    return fail(ps, line, "weights: %s (the first token %s them)", w ? "unexpected" : "missing",
                ps->has_weights ? "has" : "does not have");
  if (w) {
    if (!cJSON_IsArray(w) || (uint32_t)cJSON_GetArraySize(w) != ps->n_layers)
      return fail(ps, line, "weights: expected an array of %u arrays (one per layer)",
                  ps->n_layers);
    float *dst = (float *)vec_push(&ps->weights, (size_t)ps->n_layers * ps->top_k);
    if (!dst) return nomem(ps);
    l = 0;
    for (const cJSON *wl = w->child; wl; wl = wl->next, l++) {
      if (!cJSON_IsArray(wl) || (uint32_t)cJSON_GetArraySize(wl) != ps->top_k)
        return fail(ps, line, "weights[%u]: expected %u numbers (one per id)", l, ps->top_k);
      uint32_t k = 0;
      for (const cJSON *x = wl->child; x; x = x->next, k++) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 3.0e38)
          return fail(ps, line, "weights[%u][%u]: expected a finite number", l, k);
        dst[(size_t)l * ps->top_k + k] = (float)x->valuedouble;
      }
    }
  }
  return push_token(ps, tok, pos, phase, line);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = (char *)malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* {"header": {...}}: the first line of a converted trace, and again at the
 * start of each file of a concatenation (then only "experts" is checked). */
static int parse_header(parser *ps, uint32_t line, const cJSON *obj) {
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(obj, "header");
  if (!cJSON_IsObject(h)) return fail(ps, line, "header: expected an object");
  int first = ps->meta.n_sequences == 0;
  if (first && ps->seen_record)
    return fail(ps, line, "header: must come before the first token line");
  ps->meta.n_sequences++;
  int64_t v;
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(h, "experts");
  uint32_t experts = 0;
  if (it) {
    if (!int_in(it, 1, TRACE_MAX_EXPERTS, &v))
      return fail(ps, line, "header.experts: expected integer in [1, %u]", TRACE_MAX_EXPERTS);
    experts = (uint32_t)v;
  }
  if (!first) {
    if (experts != ps->meta.n_experts)
      return fail(ps, line, "header.experts: %u, but the first header says %u", experts,
                  ps->meta.n_experts);
    return SPILL_OK;
  }
  ps->meta.n_experts = experts;
  if (experts && !ps->given_experts) ps->given_experts = experts;
  static const char *const strs[] = {"model", "source", "converted_from"};
  char **dst[] = {&ps->meta.model, &ps->meta.source, &ps->meta.converted_from};
  for (int i = 0; i < 3; i++) {
    it = cJSON_GetObjectItemCaseSensitive(h, strs[i]);
    if (!it) continue;
    if (!cJSON_IsString(it)) return fail(ps, line, "header.%s: expected a string", strs[i]);
    if (!(*dst[i] = dup_str(it->valuestring))) return nomem(ps);
  }
  it = cJSON_GetObjectItemCaseSensitive(h, "top_k_native");
  if (it) {
    if (!int_in(it, 1, TRACE_MAX_TOPK, &v))
      return fail(ps, line, "header.top_k_native: expected integer in [1, %u]", TRACE_MAX_TOPK);
    ps->meta.top_k_native = (uint32_t)v;
  }
  it = cJSON_GetObjectItemCaseSensitive(h, "rank_order");
  if (it) {
    if (cJSON_IsString(it) && !strcmp(it->valuestring, "router")) ps->meta.rank_order = 1;
    else if (cJSON_IsString(it) && !strcmp(it->valuestring, "unknown")) ps->meta.rank_order = 0;
    else return fail(ps, line, "header.rank_order: expected \"router\" or \"unknown\"");
  }
  it = cJSON_GetObjectItemCaseSensitive(h, "caveats");
  if (it) {
    if (!cJSON_IsArray(it)) return fail(ps, line, "header.caveats: expected an array of strings");
    int n = cJSON_GetArraySize(it);
    if (n > 256) return fail(ps, line, "header.caveats: %d entries, more than 256", n);
    ps->meta.caveats = (char **)calloc(n ? (size_t)n : 1, sizeof(char *));
    if (!ps->meta.caveats) return nomem(ps);
    int i = 0;
    for (const cJSON *c = it->child; c; c = c->next, i++) {
      if (!cJSON_IsString(c)) return fail(ps, line, "header.caveats[%d]: expected a string", i);
      if (!(ps->meta.caveats[i] = dup_str(c->valuestring))) return nomem(ps);
      ps->meta.n_caveats++;
    }
  }
  it = cJSON_GetObjectItemCaseSensitive(h, "layer_ids");
  if (it) {
    int n = cJSON_IsArray(it) ? cJSON_GetArraySize(it) : 0;
    if (n < 1 || (uint32_t)n > TRACE_MAX_LAYERS)
      return fail(ps, line, "header.layer_ids: expected a non-empty array of layer indices");
    ps->hdr_layer_ids = (uint32_t *)malloc((size_t)n * sizeof(uint32_t));
    if (!ps->hdr_layer_ids) return nomem(ps);
    int i = 0;
    for (const cJSON *c = it->child; c; c = c->next, i++) {
      if (!int_in(c, 0, TRACE_MAX_LAYERS - 1, &v) ||
          (i > 0 && (uint32_t)v <= ps->hdr_layer_ids[i - 1]))
        return fail(ps, line, "header.layer_ids[%d]: expected ascending integers in [0, %u]", i,
                    TRACE_MAX_LAYERS - 1);
      ps->hdr_layer_ids[i] = (uint32_t)v;
    }
    ps->n_hdr_layer_ids = (uint32_t)n;
  }
  return SPILL_OK;
}

/* tok value -> token index, inserting a new token if absent. */
static int map_get(parser *ps, int64_t tok, uint32_t line, int64_t pos, uint8_t phase,
                   uint32_t *idx) {
  if (2 * (ps->map_n + 1) > ps->map_cap) {
    size_t cap = ps->map_cap ? 2 * ps->map_cap : 1024;
    int64_t *k = (int64_t *)malloc(cap * sizeof(int64_t));
    uint32_t *v = (uint32_t *)malloc(cap * sizeof(uint32_t));
    if (!k || !v) {
      free(k);
      free(v);
      return nomem(ps);
    }
    for (size_t i = 0; i < cap; i++) k[i] = -1;
    for (size_t i = 0; i < ps->map_cap; i++) {
      if (ps->map_key[i] < 0) continue;
      size_t h = hash_slot(ps->map_key[i], cap);
      while (k[h] >= 0) h = (h + 1) & (cap - 1);
      k[h] = ps->map_key[i];
      v[h] = ps->map_val[i];
    }
    free(ps->map_key);
    free(ps->map_val);
    ps->map_key = k;
    ps->map_val = v;
    ps->map_cap = cap;
  }
  size_t h = hash_slot(tok, ps->map_cap);
  while (ps->map_key[h] >= 0 && ps->map_key[h] != tok) h = (h + 1) & (ps->map_cap - 1);
  if (ps->map_key[h] == tok) {
    *idx = ps->map_val[h];
    return SPILL_OK;
  }
  *idx = (uint32_t)ps->tok.n;
  SPILL_TRY(push_token(ps, tok, pos, phase, line));
  ps->map_key[h] = tok;
  ps->map_val[h] = *idx;
  ps->map_n++;
  return SPILL_OK;
}

static int parse_router(parser *ps, uint32_t line, const cJSON *obj) {
  int64_t tok, pos, layer;
  const cJSON *it;
  static const char *const req[] = {"tok", "pos", "phase", "layer", "ids"};
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
    if (!cJSON_GetObjectItemCaseSensitive(obj, req[i]))
      return fail(ps, line, "%s: missing key", req[i]);
  if (!int_in(cJSON_GetObjectItemCaseSensitive(obj, "tok"), 0, INT64_C(1) << 53, &tok))
    return fail(ps, line, "tok: expected integer >= 0");
  if (!int_in(cJSON_GetObjectItemCaseSensitive(obj, "pos"), 0, INT64_C(1) << 53, &pos))
    return fail(ps, line, "pos: expected integer >= 0");
  if (!int_in(cJSON_GetObjectItemCaseSensitive(obj, "layer"), 0, TRACE_MAX_LAYERS - 1, &layer))
    return fail(ps, line, "layer: expected integer in [0, %u]", TRACE_MAX_LAYERS - 1);
  it = cJSON_GetObjectItemCaseSensitive(obj, "phase");
  uint8_t phase;
  if (cJSON_IsString(it) && strcmp(it->valuestring, "decode") == 0) phase = SPILL_TRACE_PHASE_DECODE;
  else if (cJSON_IsString(it) && strcmp(it->valuestring, "prefill") == 0)
    phase = SPILL_TRACE_PHASE_PREFILL;
  else return fail(ps, line, "phase: expected \"decode\" or \"prefill\"");
  /* a rolled-back verify-chunk token: validated, counted, not a sequence token */
  it = cJSON_GetObjectItemCaseSensitive(obj, "rejected");
  if (it && !cJSON_IsBool(it)) return fail(ps, line, "rejected: expected true or false");
  const int rej = it && cJSON_IsTrue(it);

  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(obj, "ids");
  if (!cJSON_IsArray(ids)) return fail(ps, line, "ids: expected an array of expert ids");
  int n = cJSON_GetArraySize(ids);
  SPILL_TRY(check_topk(ps, line, "ids", n));
  size_t off = ps->ids.n;
  uint32_t *dst = (uint32_t *)vec_push(&ps->ids, ps->top_k);
  if (!dst) return nomem(ps);
  SPILL_TRY(read_ids(ps, line, ids, "ids", dst, ps->top_k));

  it = cJSON_GetObjectItemCaseSensitive(obj, "weights");
  if (it) {
    if (!cJSON_IsArray(it)) return fail(ps, line, "weights: expected an array of numbers");
    if (cJSON_GetArraySize(it) != n)
      return fail(ps, line, "weights: expected %d numbers (one per id), got %d", n,
                  cJSON_GetArraySize(it));
    int i = 0, nonfinite = 0;
    for (const cJSON *w = it->child; w; w = w->next, i++) {
      if (cJSON_IsNull(w)) { nonfinite = 1; continue; } /* the engine's NaN / inf weight */
      if (!cJSON_IsNumber(w) || !isfinite(w->valuedouble))
        return fail(ps, line, "weights[%d]: expected a finite number or null", i);
    }
    ps->n_nonfinite += (uint64_t)nonfinite;
  }
  it = cJSON_GetObjectItemCaseSensitive(obj, "hit");
  if (it) {
    if (!cJSON_IsArray(it)) return fail(ps, line, "hit: expected an array of 0/1");
    if (cJSON_GetArraySize(it) != n)
      return fail(ps, line, "hit: expected %d flags (one per id), got %d", n,
                  cJSON_GetArraySize(it));
    int i = 0;
    for (const cJSON *h = it->child; h; h = h->next, i++) {
      int64_t v;
      if (!int_in(h, 0, 1, &v)) return fail(ps, line, "hit[%d]: expected 0 or 1", i);
      if (!rej) ps->n_hits += (uint64_t)v;
    }
  }
  it = cJSON_GetObjectItemCaseSensitive(obj, "pred");
  if (it) {
    if (!cJSON_IsArray(it)) return fail(ps, line, "pred: expected an array of expert ids");
    int i = 0;
    for (const cJSON *p = it->child; p; p = p->next, i++) {
      int64_t v;
      if (!int_in(p, 0, id_hi(ps), &v))
        return fail(ps, line, "pred[%d]: expected integer in [0, %u]", i, id_hi(ps));
      if ((uint32_t)v > ps->max_id) ps->max_id = (uint32_t)v;
      if (rej) continue;
      ps->n_pred++;
      for (int j = 0; j < n; j++)
        if (dst[j] == (uint32_t)v) {
          ps->n_pred_correct++;
          break;
        }
    }
  }

  if (rej) {
    ps->n_rejected++;
    ps->ids.n = off; /* its ids are not a token's */
    return SPILL_OK;
  }
  uint32_t idx;
  SPILL_TRY(map_get(ps, tok, line, pos, phase, &idx));
  const int64_t tpos = ((int64_t *)ps->pos.p)[idx];
  const uint8_t tphase = ((uint8_t *)ps->phase.p)[idx];
  const uint32_t tline = ((uint32_t *)ps->tok_line.p)[idx];
  if (tpos != pos)
    return fail(ps, line, "pos: %lld, but tok %lld has pos %lld at line %u", (long long)pos,
                (long long)tok, (long long)tpos, tline);
  if (tphase != phase)
    return fail(ps, line, "phase: differs from tok %lld's phase at line %u", (long long)tok,
                tline);
  rec *r = (rec *)vec_push(&ps->recs, 1);
  if (!r) return nomem(ps);
  r->tok_idx = idx;
  r->layer = (uint32_t)layer;
  r->line = line;
  r->ids_off = off;
  return SPILL_OK;
}

static int rec_cmp(const void *a, const void *b) {
  const rec *x = (const rec *)a, *y = (const rec *)b;
  if (x->tok_idx != y->tok_idx) return x->tok_idx < y->tok_idx ? -1 : 1;
  if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
  return x->line < y->line ? -1 : (x->line > y->line);
}

/* Sorts the router records and lays their ids out as (tokens, layers, top_k). */
static int finish_router(parser *ps, spill_trace *t) {
  rec *r = (rec *)ps->recs.p;
  size_t nr = ps->recs.n;
  qsort(r, nr, sizeof(rec), rec_cmp);
  for (size_t i = 1; i < nr; i++)
    if (r[i].tok_idx == r[i - 1].tok_idx && r[i].layer == r[i - 1].layer)
      return fail(ps, r[i].line, "layer: tok %lld layer %u already given at line %u",
                  (long long)((int64_t *)ps->tok.p)[r[i].tok_idx], r[i].layer, r[i - 1].line);
  uint32_t nl = 0;
  while (nl < nr && r[nl].tok_idx == 0) nl++;
  t->n_layers = nl;
  t->layer_ids = (uint32_t *)malloc((size_t)nl * sizeof(uint32_t));
  t->ids = (uint32_t *)malloc(nr * ps->top_k * sizeof(uint32_t));
  if (!t->layer_ids || !t->ids) return nomem(ps);
  for (uint32_t l = 0; l < nl; l++) t->layer_ids[l] = r[l].layer;
  const int64_t *tokv = (const int64_t *)ps->tok.p;
  const uint32_t *tline = (const uint32_t *)ps->tok_line.p;
  size_t i = 0;
  for (uint32_t k = 0; k < (uint32_t)ps->tok.n; k++) {
    for (uint32_t l = 0; l < nl; l++, i++) {
      if (i >= nr || r[i].tok_idx != k)
        return fail(ps, tline[k], "layer: tok %lld has no layer %u (tok %lld has %u layers)",
                    (long long)tokv[k], t->layer_ids[l], (long long)tokv[0], nl);
      if (r[i].layer != t->layer_ids[l]) {
        if (r[i].layer > t->layer_ids[l])
          return fail(ps, tline[k], "layer: tok %lld has no layer %u (tok %lld has %u layers)",
                      (long long)tokv[k], t->layer_ids[l], (long long)tokv[0], nl);
        return fail(ps, r[i].line, "layer: %u is not a layer of tok %lld (line %u)", r[i].layer,
                    (long long)tokv[0], tline[0]);
      }
      memcpy(t->ids + i * ps->top_k, (const uint32_t *)ps->ids.p + r[i].ids_off,
             ps->top_k * sizeof(uint32_t));
    }
    if (i < nr && r[i].tok_idx == k)
      return fail(ps, r[i].line, "layer: %u is not a layer of tok %lld (line %u)", r[i].layer,
                  (long long)tokv[0], tline[0]);
  }
  return SPILL_OK;
}

static void parser_free(parser *ps) {
  free(ps->ids.p);
  free(ps->tok.p);
  free(ps->pos.p);
  free(ps->phase.p);
  free(ps->tok_line.p);
  free(ps->recs.p);
  free(ps->map_key);
  free(ps->map_val);
  free(ps->weights.p);
  free(ps->hdr_layer_ids);
  spill_trace meta_only;
  memset(&meta_only, 0, sizeof meta_only);
  meta_only.meta = ps->meta;
  spill_trace_free(&meta_only);
}

static int parse_all(parser *ps, const char *buf, size_t len, spill_trace *t) {
  uint32_t line = 0;
  size_t at = 0;
  while (at < len) {
    const char *s = buf + at;
    const char *nl = (const char *)memchr(s, '\n', len - at);
    size_t n = nl ? (size_t)(nl - s) : len - at;
    at += n + (nl ? 1 : 0);
    line++;
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
    if (k == n) continue;
    /* the one reading layer: a repeated key, a NUL or invalid UTF-8 in a
     * line is refused with the line's number */
    cJSON *obj = NULL;
    spill_err pe = {0};
    if (spill_json_parse(s, n, NULL, SPILL_E_TRACE, &obj, &pe) < 0)
      return fail(ps, line, "%s", pe.msg);
    int rc;
    if (!cJSON_IsObject(obj)) {
      rc = fail(ps, line, "expected a JSON object");
    } else {
      int fmt = cJSON_GetObjectItemCaseSensitive(obj, "header") ? 2
                : cJSON_GetObjectItemCaseSensitive(obj, "layers") ? SPILL_TRACE_SIMPLE
                : cJSON_GetObjectItemCaseSensitive(obj, "layer") ? SPILL_TRACE_ROUTER
                                                                  : -1;
      if (fmt == 2)
        rc = parse_header(ps, line, obj);
      else if (fmt < 0)
        rc = fail(ps, line,
                  "expected key \"layers\" (simple format) or \"layer\" (router format)");
      else if (ps->format >= 0 && fmt != ps->format)
        rc = fail(ps, line, "%s-format line in a %s-format trace",
                  fmt == SPILL_TRACE_SIMPLE ? "simple" : "router",
                  ps->format == SPILL_TRACE_SIMPLE ? "simple" : "router");
      else {
        ps->format = fmt;
        ps->seen_record = 1;
        rc = fmt == SPILL_TRACE_SIMPLE ? parse_simple(ps, line, obj) : parse_router(ps, line, obj);
      }
    }
    cJSON_Delete(obj);
    SPILL_TRY(rc);
  }
  if (ps->tok.n == 0)
    return spill_err_set(ps->e, SPILL_E_TRACE, "%s: no trace lines", ps->name);
  if (ps->tok.n > UINT32_MAX)
    return spill_err_set(ps->e, SPILL_E_TRACE, "%s: too many tokens", ps->name);
  t->meta = ps->meta;
  memset(&ps->meta, 0, sizeof ps->meta);
  t->format = (spill_trace_format)ps->format;
  t->n_tokens = (uint32_t)ps->tok.n;
  t->top_k = ps->top_k;
  t->n_experts = ps->given_experts ? ps->given_experts : ps->max_id + 1;
  if (ps->format == SPILL_TRACE_SIMPLE) {
    t->n_layers = ps->n_layers;
    t->layer_ids = (uint32_t *)malloc((size_t)t->n_layers * sizeof(uint32_t));
    if (!t->layer_ids) return nomem(ps);
    if (ps->hdr_layer_ids && ps->n_hdr_layer_ids != t->n_layers)
      return spill_err_set(ps->e, SPILL_E_TRACE, "%s: header.layer_ids has %u entries, lines have %u layers",
                           ps->name, ps->n_hdr_layer_ids, t->n_layers);
    for (uint32_t l = 0; l < t->n_layers; l++)
      t->layer_ids[l] = ps->hdr_layer_ids ? ps->hdr_layer_ids[l] : l;
    t->ids = (uint32_t *)ps->ids.p;
    ps->ids.p = NULL;
    if (ps->has_weights > 0) {
      t->weights = (float *)ps->weights.p;
      ps->weights.p = NULL;
    }
  } else {
    SPILL_TRY(finish_router(ps, t));
    t->n_recorded_hits = ps->n_hits;
    t->n_pred = ps->n_pred;
    t->n_pred_correct = ps->n_pred_correct;
    t->n_rejected_rows = ps->n_rejected;
    t->n_nonfinite_weight_rows = ps->n_nonfinite;
  }
  t->tok = (int64_t *)ps->tok.p;
  t->pos = (int64_t *)ps->pos.p;
  t->phase = (uint8_t *)ps->phase.p;
  ps->tok.p = ps->pos.p = ps->phase.p = NULL;
  return SPILL_OK;
}

int spill_trace_parse(const char *buf, size_t len, const spill_trace_read_opts *opts,
                      spill_trace *out, spill_err *e) {
  SPILL_FAIL_IF(e, !out || (!buf && len), SPILL_E_INVALID_ARG, "trace: NULL argument");
  memset(out, 0, sizeof(*out));
  parser ps;
  memset(&ps, 0, sizeof ps);
  ps.name = opts && opts->name ? opts->name : "trace";
  ps.given_experts = opts ? opts->n_experts : 0;
  SPILL_FAIL_IF(e, ps.given_experts > TRACE_MAX_EXPERTS, SPILL_E_INVALID_ARG,
                "%s: n_experts %u is more than %u", ps.name, ps.given_experts,
                TRACE_MAX_EXPERTS);
  ps.format = -1;
  ps.e = e;
  ps.ids.elem = sizeof(uint32_t);
  ps.tok.elem = sizeof(int64_t);
  ps.pos.elem = sizeof(int64_t);
  ps.phase.elem = sizeof(uint8_t);
  ps.tok_line.elem = sizeof(uint32_t);
  ps.recs.elem = sizeof(rec);
  ps.weights.elem = sizeof(float);
  ps.has_weights = -1;
  ps.meta.rank_order = -1;
  int rc = parse_all(&ps, buf, len, out);
  parser_free(&ps);
  if (rc < 0) spill_trace_free(out);
  return rc;
}

int spill_trace_read_file(const char *file, const spill_trace_read_opts *opts, spill_trace *out,
                          spill_err *e) {
  SPILL_FAIL_IF(e, !file || !out, SPILL_E_INVALID_ARG, "trace: NULL argument");
  memset(out, 0, sizeof(*out));
  char *buf = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(file, (size_t)TRACE_MAX_FILE_BYTES, &buf, &len, e));
  spill_trace_read_opts o = {0};
  if (opts) o = *opts;
  o.name = file;
  int rc = spill_trace_parse(buf, len, &o, out, e);
  free(buf);
  return rc;
}

void spill_trace_free(spill_trace *t) {
  if (!t) return;
  free(t->layer_ids);
  free(t->tok);
  free(t->pos);
  free(t->phase);
  free(t->ids);
  free(t->weights);
  free(t->meta.model);
  free(t->meta.source);
  free(t->meta.converted_from);
  for (uint32_t i = 0; i < t->meta.n_caveats; i++) free(t->meta.caveats[i]);
  free(t->meta.caveats);
  memset(t, 0, sizeof(*t));
  t->meta.rank_order = -1;
}
