/* research/trace/trace_convert.c: router traces of other tools -> spill_trace.
 *
 * Role: `spill trace convert --from FORMAT`. Each reader fills a builder, one
 * token at a time: per layer its ids in rank order (when the source has an
 * order), its gate weights (when it has them), the token's position and
 * phase. The builder then makes the trace rectangular, as every consumer of
 * a spill_trace needs (router_trace.h invariants): tokens that lack a layer
 * others have are dropped (or, on request, such layers are dropped from all
 * tokens), and every such decision becomes a sentence in meta.caveats, so
 * the converted file says what its source lacks.
 *
 * Sources are untrusted: every field is checked and the first problem is an
 * SPILL_E_TRACE "NAME:LINE: reason" (for JSON sources, the line of the
 * parse error or of the offending token's key). No asserts, no output.
 * Formats (docs/TRACE.md "Converting"): bmoe-csv, hf-router-json,
 * sorted-ids-txt, vllm-routed-json, llama-moe-csv, flashmoe-bin.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/trace/router_trace.h"
#include "engine/trace/trace_internal.h"
#include "research/trace/trace_analysis.h"

#define CV_MAX_LAYERS 4096u
#define CV_MAX_TOPK 1024u
#define CV_MAX_EXPERTS (1u << 20)
#define CV_MAX_CAVEATS 32

static const char *const kSourceNames[SPILL_TRACE_SRC_COUNT] = {
    "bmoe-csv", "hf-router-json", "sorted-ids-txt", "vllm-routed-json", "llama-moe-csv",
    "flashmoe-bin"};

int spill_trace_source_find(const char *name) {
  for (int i = 0; name && i < SPILL_TRACE_SRC_COUNT; i++)
    if (!strcmp(name, kSourceNames[i])) return i;
  return -1;
}

const char *spill_trace_source_name_at(size_t i) {
  return i < SPILL_TRACE_SRC_COUNT ? kSourceNames[i] : NULL;
}

/* ------------------------------------------------------------- builder */

typedef struct btok {
  int64_t pos;
  uint8_t phase;
  uint32_t line; /* first source line of the token */
} btok;

typedef struct builder {
  const char *name; /* current input, for errors */
  uint32_t L, K, E; /* E: declared by the source, 0 = infer */
  btok *tok;
  uint32_t *ids;    /* (cap, L, K) */
  float *w;         /* (cap, L, K) */
  uint16_t *filled; /* (cap, L) ids given so far */
  uint32_t *lline;  /* (cap, L) first line of each (token, layer) */
  size_t n, cap;
  int has_weights, rank_known;
  int absent_ok; /* layers no token has are not traced layers (dense): left out */
  uint32_t max_id;
  char *caveats[CV_MAX_CAVEATS];
  uint32_t n_caveats;
  spill_err *e;
} builder;

/* The current input names every error (engine/trace/trace_internal.h). */
#define bfail(b, line, ...) spill_trace_fail_at((b)->e, (b)->name, (line), __VA_ARGS__)
#define bnomem(b) spill_trace_nomem((b)->e, (b)->name)

static int caveat(builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int caveat(builder *b, const char *fmt, ...) {
  if (b->n_caveats == CV_MAX_CAVEATS) return SPILL_OK;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  size_t n = strlen(msg) + 1;
  char *c = (char *)malloc(n);
  if (!c) return bnomem(b);
  memcpy(c, msg, n);
  b->caveats[b->n_caveats++] = c;
  return SPILL_OK;
}

static void builder_free(builder *b) {
  free(b->tok);
  free(b->ids);
  free(b->w);
  free(b->filled);
  free(b->lline);
  for (uint32_t i = 0; i < b->n_caveats; i++) free(b->caveats[i]);
  memset(b, 0, sizeof *b);
}

/* Appends a token with no layers yet; returns its index in *idx. */
static int b_token(builder *b, int64_t pos, uint8_t phase, uint32_t line, size_t *idx) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    size_t lk = (size_t)b->L * b->K;
    btok *t = (btok *)realloc(b->tok, cap * sizeof *t);
    if (t) b->tok = t;
    uint32_t *ids = (uint32_t *)realloc(b->ids, cap * lk * sizeof *ids);
    if (ids) b->ids = ids;
    float *w = (float *)realloc(b->w, cap * lk * sizeof *w);
    if (w) b->w = w;
    uint16_t *f = (uint16_t *)realloc(b->filled, cap * b->L * sizeof *f);
    if (f) b->filled = f;
    uint32_t *ll = (uint32_t *)realloc(b->lline, cap * b->L * sizeof *ll);
    if (ll) b->lline = ll;
    if (!t || !ids || !w || !f || !ll) return bnomem(b);
    b->cap = cap;
  }
  size_t i = b->n++;
  b->tok[i] = (btok){pos, phase, line};
  memset(b->filled + i * b->L, 0, b->L * sizeof *b->filled);
  memset(b->lline + i * b->L, 0, b->L * sizeof *b->lline);
  *idx = i;
  return SPILL_OK;
}

/* Appends id (with weight w) as the next rank of (token i, layer l). */
static int b_set(builder *b, size_t i, uint32_t l, uint32_t id, float w, uint32_t line) {
  size_t base = (i * b->L + l) * b->K;
  uint16_t *f = b->filled + i * b->L + l;
  if (*f == 0) b->lline[i * b->L + l] = line;
  for (uint32_t k = 0; k < *f; k++)
    if (b->ids[base + k] == id)
      return bfail(b, line, "layer %u: expert %u given twice for one token", l, id);
  if (*f >= b->K) return bfail(b, line, "layer %u: more than %u ids for one token", l, b->K);
  b->ids[base + *f] = id;
  b->w[base + *f] = w;
  (*f)++;
  if (id > b->max_id) b->max_id = id;
  return SPILL_OK;
}

/* Sets the ids of (token i, layer l) at once, in rank order. */
static int b_layer(builder *b, size_t i, uint32_t l, const uint32_t *ids, const float *w,
                   uint32_t n, uint32_t line) {
  if (n != b->K) return bfail(b, line, "layer %u: %u ids, expected %u", l, n, b->K);
  if (b->filled[i * b->L + l])
    return bfail(b, line, "layer %u given twice for one token", l);
  for (uint32_t k = 0; k < n; k++) SPILL_TRY(b_set(b, i, l, ids[k], w ? w[k] : 0.0f, line));
  return SPILL_OK;
}

/* b_finish's view of which layers and tokens survive: keep_l[l] (L),
 * keep_t[i] (n), lacking[l] = how many tokens lack layer l (L). */
typedef struct bkeep {
  uint8_t *keep_l, *keep_t;
  uint32_t *lacking;
  size_t n_incomplete, n_incomplete_prefill;
} bkeep;

/* A layer counts as present for a token only when all K ranks arrived. */
static int b_mark_complete(builder *b, bkeep *k) {
  const uint32_t L = b->L, K = b->K;
  for (uint32_t l = 0; l < L; l++) { /* absent[l]: keep_l doubles as the mark here */
    k->keep_l[l] = 0;
    for (size_t i = 0; i < b->n && !k->keep_l[l]; i++) k->keep_l[l] = b->filled[i * L + l] > 0;
  }
  for (size_t i = 0; i < b->n; i++) {
    int complete = 1;
    for (uint32_t l = 0; l < L; l++) {
      uint16_t f = b->filled[i * L + l];
      if (b->absent_ok && !k->keep_l[l]) continue;
      if (f > 0 && f < K)
        return bfail(b, b->lline[i * L + l], "layer %u of the token at pos %lld: %u of %u ranks",
                     l, (long long)b->tok[i].pos, f, K);
      if (f == 0) {
        complete = 0;
        k->lacking[l]++;
      }
    }
    k->keep_t[i] = (uint8_t)complete;
    if (!complete) {
      k->n_incomplete++;
      k->n_incomplete_prefill += b->tok[i].phase == SPILL_TRACE_PHASE_PREFILL;
    }
  }
  return SPILL_OK;
}

/* Incomplete tokens: drop the layers they lack from every token (on request)
 * or drop those tokens; either way a caveat says what went. */
static int b_drop_incomplete(builder *b, const spill_trace_convert_opts *o, bkeep *k) {
  const uint32_t L = b->L;
  char lay[160] = "";
  for (uint32_t l = 0, n = 0; l < L; l++) {
    k->keep_l[l] = !b->absent_ok || k->keep_l[l];
    if (!k->lacking[l]) continue;
    size_t at = strlen(lay);
    if (n++ < 8) snprintf(lay + at, sizeof lay - at, "%s%u", at ? ", " : "", l);
    else if (n == 9) snprintf(lay + at, sizeof lay - at, ", ...");
  }
  if (k->n_incomplete && o->incomplete == SPILL_TRACE_DROP_LAYERS) {
    uint32_t kept = 0;
    for (uint32_t l = 0; l < L; l++) kept += (k->keep_l[l] = k->keep_l[l] && !k->lacking[l]);
    if (!kept)
      return spill_err_set(b->e, SPILL_E_TRACE, "%s: no layer is present in every token", b->name);
    for (size_t i = 0; i < b->n; i++) k->keep_t[i] = 1;
    return caveat(b, "layer(s) %s missing from %zu of %zu tokens (%zu of them prefill): "
                     "dropped from every token",
                  lay, k->n_incomplete, b->n, k->n_incomplete_prefill);
  }
  if (k->n_incomplete) {
    if (k->n_incomplete == b->n)
      return spill_err_set(b->e, SPILL_E_TRACE,
                           "%s: every token lacks a layer (layers %s); try dropping layers",
                           b->name, lay);
    return caveat(b, "%zu of %zu tokens (%zu prefill) lack layer(s) %s: those tokens are "
                     "dropped",
                  k->n_incomplete, b->n, k->n_incomplete_prefill, lay);
  }
  return SPILL_OK;
}

/* Experts per layer: given, declared by the source, or inferred (caveat). */
static int b_experts(builder *b, const spill_trace_convert_opts *o, uint32_t *E) {
  *E = o->n_experts ? o->n_experts : b->E;
  if (!*E) {
    *E = b->max_id + 1;
    int rc = caveat(b, "experts per layer not recorded by the source: taken as the highest "
                       "id + 1 (%u)",
                    *E);
    if (rc < 0) return rc;
  }
  if (b->max_id >= *E)
    return spill_err_set(b->e, SPILL_E_TRACE, "%s: expert id %u, but the model has %u experts",
                         b->name, b->max_id, *E);
  return SPILL_OK;
}

/* Allocates out's arrays for nt tokens x nl layers and copies the kept
 * (token, layer) ids and weights into them. */
static int b_copy_kept(builder *b, const bkeep *k, size_t nt, uint32_t nl, uint32_t E,
                       spill_trace *out) {
  const uint32_t L = b->L, K = b->K;
  memset(out, 0, sizeof *out);
  out->meta.rank_order = -1;
  out->format = SPILL_TRACE_SIMPLE;
  out->n_tokens = (uint32_t)nt;
  out->n_layers = nl;
  out->n_experts = E;
  out->top_k = K;
  out->layer_ids = (uint32_t *)malloc((size_t)nl * sizeof(uint32_t));
  out->tok = (int64_t *)malloc(nt * sizeof(int64_t));
  out->pos = (int64_t *)malloc(nt * sizeof(int64_t));
  out->phase = (uint8_t *)malloc(nt);
  out->ids = (uint32_t *)malloc(nt * nl * K * sizeof(uint32_t));
  if (b->has_weights) out->weights = (float *)malloc(nt * nl * K * sizeof(float));
  out->meta.caveats = (char **)calloc(b->n_caveats + 1, sizeof(char *));
  if (!out->layer_ids || !out->tok || !out->pos || !out->phase || !out->ids ||
      (b->has_weights && !out->weights) || !out->meta.caveats)
    return bnomem(b);
  for (uint32_t l = 0, j = 0; l < L; l++)
    if (k->keep_l[l]) out->layer_ids[j++] = l;
  size_t j = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (!k->keep_t[i]) continue;
    out->tok[j] = (int64_t)j;
    out->pos[j] = b->tok[i].pos;
    out->phase[j] = b->tok[i].phase;
    uint32_t jl = 0;
    for (uint32_t l = 0; l < L; l++) {
      if (!k->keep_l[l]) continue;
      memcpy(out->ids + (j * nl + jl) * K, b->ids + (i * L + l) * K, K * sizeof(uint32_t));
      if (out->weights)
        memcpy(out->weights + (j * nl + jl) * K, b->w + (i * L + l) * K, K * sizeof(float));
      jl++;
    }
    j++;
  }
  return SPILL_OK;
}

/* out's meta: experts, native top-k, rank order, the names, and the caveats
 * (moved out of the builder). */
static int b_meta(builder *b, const spill_trace_convert_opts *o, const char *from,
                  const char *model, uint32_t E, spill_trace *out) {
  spill_trace_meta *m = &out->meta;
  m->n_experts = E;
  m->top_k_native = o->top_k_native && o->top_k_native != b->K ? o->top_k_native : 0;
  m->rank_order = b->rank_known;
  m->n_sequences = 1;
  const char *strs[3] = {o->model ? o->model : model, o->source, from};
  char **dst[3] = {&m->model, &m->source, &m->converted_from};
  for (int s = 0; s < 3; s++) {
    if (!strs[s]) continue;
    size_t n = strlen(strs[s]) + 1;
    if (!(*dst[s] = (char *)malloc(n))) return bnomem(b);
    memcpy(*dst[s], strs[s], n);
  }
  for (uint32_t i = 0; i < b->n_caveats; i++) {
    m->caveats[i] = b->caveats[i];
    b->caveats[i] = NULL;
  }
  m->n_caveats = b->n_caveats;
  b->n_caveats = 0;
  return SPILL_OK;
}

/* Makes the builder rectangular and moves it into out. */
static int b_finish(builder *b, const spill_trace_convert_opts *o, const char *from,
                    const char *model, spill_trace *out) {
  const uint32_t L = b->L;
  if (b->n == 0) return spill_err_set(b->e, SPILL_E_TRACE, "%s: no tokens", b->name);
  bkeep k = {(uint8_t *)malloc(L), (uint8_t *)malloc(b->n),
             (uint32_t *)calloc(L, sizeof(uint32_t)), 0, 0};
  int rc = SPILL_OK;
  if (!k.keep_l || !k.keep_t || !k.lacking) {
    rc = bnomem(b);
    goto done;
  }
  if ((rc = b_mark_complete(b, &k)) < 0 || (rc = b_drop_incomplete(b, o, &k)) < 0) goto done;
  uint32_t nl = 0;
  size_t nt = 0;
  for (uint32_t l = 0; l < L; l++) nl += k.keep_l[l];
  for (size_t i = 0; i < b->n; i++) nt += k.keep_t[i];
  if (nt > UINT32_MAX) {
    rc = spill_err_set(b->e, SPILL_E_TRACE, "%s: too many tokens", b->name);
    goto done;
  }
  uint32_t E;
  if ((rc = b_experts(b, o, &E)) == SPILL_OK && (rc = b_copy_kept(b, &k, nt, nl, E, out)) == SPILL_OK)
    rc = b_meta(b, o, from, model, E, out);
done:
  free(k.keep_l);
  free(k.keep_t);
  free(k.lacking);
  if (rc < 0) spill_trace_free(out);
  return rc;
}

/* ------------------------------------------------------- line scanning */

typedef struct lines {
  const char *buf;
  size_t len, at;
  uint32_t no;
} lines;

/* Next line (without '\n' and a trailing '\r'); 0 at the end. */
static int next_line(lines *ls, const char **s, size_t *n) {
  if (ls->at >= ls->len) return 0;
  const char *p = ls->buf + ls->at;
  const char *nl = (const char *)memchr(p, '\n', ls->len - ls->at);
  size_t k = nl ? (size_t)(nl - p) : ls->len - ls->at;
  ls->at += k + (nl ? 1 : 0);
  ls->no++;
  if (k && p[k - 1] == '\r') k--;
  *s = p;
  *n = k;
  return 1;
}

/* Strict unsigned integer of the whole field [s, s+n): digits only. */
static int field_u64(const char *s, size_t n, uint64_t hi, uint64_t *out) {
  while (n && (*s == ' ' || *s == '\t')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (n == 0 || n > 19) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v > hi) return -1;
  *out = v;
  return 0;
}

static int field_float(const char *s, size_t n, float *out) {
  char tmp[64];
  while (n && (*s == ' ' || *s == '\t')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  if (n == 0 || n >= sizeof tmp) return -1;
  memcpy(tmp, s, n);
  tmp[n] = 0;
  char *end;
  errno = 0;
  double v = strtod(tmp, &end);
  if (*end || !isfinite(v) || fabs(v) > 3.0e38) return -1;
  *out = (float)v;
  return 0;
}

/* Splits [s, s+n) at commas into at most max fields; returns the count or
 * -1 if there are more. */
static int split_csv(const char *s, size_t n, const char **f, size_t *fl, int max) {
  int k = 0;
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == ',') {
      if (k == max) return -1;
      f[k] = s + start;
      fl[k] = i - start;
      k++;
      start = i + 1;
    }
  }
  return k;
}

/* ------------------------------------------------------------ bmoe-csv */

#define BMOE_MAX_COLS 32

static const char *kv_find(const char *s, size_t n, const char *key, size_t *vn) {
  size_t kl = strlen(key);
  for (size_t i = 0; i + kl < n; i++) {
    if ((i == 0 || s[i - 1] == ' ') && !memcmp(s + i, key, kl) && s[i + kl] == '=') {
      const char *v = s + i + kl + 1;
      size_t m = 0;
      while (v + m < s + n && v[m] != ' ') m++;
      *vn = m;
      return v;
    }
  }
  return NULL;
}

typedef struct tokmap {
  uint64_t *key;
  uint32_t *val;
  size_t cap, n;
} tokmap;

static int tokmap_get(tokmap *m, uint64_t key, uint32_t *val, int *found) {
  if (2 * (m->n + 1) > m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 1024;
    uint64_t *k = (uint64_t *)malloc(cap * sizeof *k);
    uint32_t *v = (uint32_t *)malloc(cap * sizeof *v);
    if (!k || !v) {
      free(k);
      free(v);
      return -1;
    }
    for (size_t i = 0; i < cap; i++) k[i] = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
      if (m->key[i] == UINT64_MAX) continue;
      size_t h = (size_t)((m->key[i] * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
      while (k[h] != UINT64_MAX) h = (h + 1) & (cap - 1);
      k[h] = m->key[i];
      v[h] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = k;
    m->val = v;
    m->cap = cap;
  }
  size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
  while (m->key[h] != UINT64_MAX && m->key[h] != key) h = (h + 1) & (m->cap - 1);
  if (m->key[h] == key) {
    *val = m->val[h];
    *found = 1;
    return 0;
  }
  m->key[h] = key;
  m->val[h] = *val;
  m->n++;
  *found = 0;
  return 0;
}

/* The bmoe-csv reader's state: the header values and the column of each
 * needed field. */
enum { BM_TURN, BM_PHASE, BM_STEP, BM_LAYER, BM_SLOT, BM_EXPERT, BM_WEIGHT, BM_N };
static const char *const kBmoeCols[BM_N] = {"turn", "phase", "step", "layer", "slot", "expert",
                                            "weight"};
typedef struct bmoe {
  int seen_magic, have_cols, n_cols;
  uint64_t L, E, K;
  int col[BM_N];
} bmoe;

/* A '#' line: the "# route_trace v1" magic first, then the model line
 * (n_layer, n_expert, n_expert_used, model); other comments are skipped. */
static int bmoe_comment(builder *b, bmoe *st, const char *s, size_t n, uint32_t no, char *model,
                        size_t model_cap) {
  if (!st->seen_magic) {
    if (n < 16 || memcmp(s, "# route_trace v", 15))
      return bfail(b, no, "expected \"# route_trace v1\" as the first line");
    uint64_t v;
    if (field_u64(s + 15, n - 15, 1000, &v) || v != 1)
      return bfail(b, no, "route_trace version %.*s: only v1 is read", (int)(n - 15), s + 15);
    st->seen_magic = 1;
    return SPILL_OK;
  }
  size_t vn;
  const char *v;
  if (!(v = kv_find(s, n, "n_layer", &vn))) return SPILL_OK;
  if (field_u64(v, vn, CV_MAX_LAYERS, &st->L) || st->L == 0)
    return bfail(b, no, "n_layer: expected integer in [1, %u]", CV_MAX_LAYERS);
  if (!(v = kv_find(s, n, "n_expert", &vn)) || field_u64(v, vn, CV_MAX_EXPERTS, &st->E) ||
      st->E == 0)
    return bfail(b, no, "n_expert: expected integer in [1, %u]", CV_MAX_EXPERTS);
  if (!(v = kv_find(s, n, "n_expert_used", &vn)) || field_u64(v, vn, CV_MAX_TOPK, &st->K) ||
      st->K == 0 || st->K > st->E)
    return bfail(b, no, "n_expert_used: expected integer in [1, n_expert]");
  if ((v = kv_find(s, n, "model", &vn))) {
    /* basename without .gguf */
    const char *base = v;
    for (size_t i = 0; i < vn; i++)
      if (v[i] == '/') base = v + i + 1;
    size_t bl = vn - (size_t)(base - v);
    if (bl > 5 && !memcmp(base + bl - 5, ".gguf", 5)) bl -= 5;
    if (bl >= model_cap) bl = model_cap - 1;
    memcpy(model, base, bl);
    model[bl] = 0;
  }
  return SPILL_OK;
}

/* The column header: every needed column present, and the shape the same
 * as the first input's. */
static int bmoe_header(builder *b, bmoe *st, const char **f, const size_t *fl, int nf,
                       uint32_t no) {
  if (!st->L) return bfail(b, no, "no \"# model=... n_layer=... n_expert=... n_expert_used=...\" line before the column header");
  if (nf < 0) return bfail(b, no, "more than %d columns", BMOE_MAX_COLS);
  for (int c = 0; c < BM_N; c++) {
    st->col[c] = -1;
    for (int i = 0; i < nf; i++)
      if (fl[i] == strlen(kBmoeCols[c]) && !memcmp(f[i], kBmoeCols[c], fl[i])) st->col[c] = i;
    if (st->col[c] < 0) return bfail(b, no, "column header lacks \"%s\"", kBmoeCols[c]);
  }
  if (b->L && (b->L != st->L || b->K != st->K || b->E != st->E))
    return bfail(b, no, "%llu layers x %llu experts, top-%llu; the first input has "
                 "%u x %u, top-%u", (unsigned long long)st->L, (unsigned long long)st->E,
                 (unsigned long long)st->K, b->L, b->E, b->K);
  st->n_cols = nf;
  st->have_cols = 1;
  b->L = (uint32_t)st->L;
  b->K = (uint32_t)st->K;
  b->E = (uint32_t)st->E;
  return SPILL_OK;
}

/* A data row: one (turn, step, layer, slot) -> expert with its weight. */
static int bmoe_row(builder *b, const bmoe *st, tokmap *map, const char **f,
                    const size_t *fl, int nf, uint32_t no) {
  const int *col = st->col;
  if (nf != st->n_cols)
    return bfail(b, no, "%d fields, the header has %d", nf < 0 ? BMOE_MAX_COLS + 1 : nf,
                 st->n_cols);
  uint64_t v[BM_N - 1];
  static const uint64_t hi[BM_N - 1] = {UINT32_MAX - 1, 1, UINT32_MAX, 0, 0, 0};
  for (int c = 0; c < BM_N - 1; c++) {
    uint64_t lim = c == BM_LAYER    ? st->L - 1
                   : c == BM_SLOT   ? st->K - 1
                   : c == BM_EXPERT ? st->E - 1
                                    : hi[c];
    if (field_u64(f[col[c]], fl[col[c]], lim, &v[c]))
      return bfail(b, no, "%s: expected integer in [0, %llu], got \"%.*s\"", kBmoeCols[c],
                   (unsigned long long)lim, (int)(fl[col[c]] > 40 ? 40 : fl[col[c]]),
                   f[col[c]]);
  }
  float w;
  if (field_float(f[col[BM_WEIGHT]], fl[col[BM_WEIGHT]], &w))
    return bfail(b, no, "weight: expected a finite number");
  uint8_t phase = v[BM_PHASE] ? SPILL_TRACE_PHASE_DECODE : SPILL_TRACE_PHASE_PREFILL;
  uint64_t key = (v[BM_TURN] << 32) | v[BM_STEP];
  uint32_t idx = (uint32_t)b->n;
  int found;
  if (tokmap_get(map, key, &idx, &found)) return bnomem(b);
  if (!found) {
    size_t i;
    SPILL_TRY(b_token(b, (int64_t)v[BM_STEP], phase, no, &i));
  } else if (b->tok[idx].phase != phase) {
    return bfail(b, no, "phase %llu, but turn %llu step %llu has phase %d at line %u",
                 (unsigned long long)v[BM_PHASE], (unsigned long long)v[BM_TURN],
                 (unsigned long long)v[BM_STEP], b->tok[idx].phase == SPILL_TRACE_PHASE_DECODE,
                 b->tok[idx].line);
  }
  /* ranks: slot k must land at index k; rows may come in any order. */
  size_t base = ((size_t)idx * b->L + v[BM_LAYER]) * b->K;
  uint16_t *fill = b->filled + (size_t)idx * b->L + v[BM_LAYER];
  uint64_t seen_mask_idx = v[BM_SLOT];
  /* a rank is taken if an earlier row of this (token, layer) set it: we
   * keep ids in slot order, marking empty slots with UINT32_MAX. */
  if (*fill == 0) {
    for (uint32_t k = 0; k < b->K; k++) b->ids[base + k] = UINT32_MAX;
    b->lline[(size_t)idx * b->L + v[BM_LAYER]] = no;
  }
  if (b->ids[base + seen_mask_idx] != UINT32_MAX)
    return bfail(b, no, "layer %llu slot %llu given twice for turn %llu step %llu",
                 (unsigned long long)v[BM_LAYER], (unsigned long long)v[BM_SLOT],
                 (unsigned long long)v[BM_TURN], (unsigned long long)v[BM_STEP]);
  for (uint32_t k = 0; k < b->K; k++)
    if (b->ids[base + k] == (uint32_t)v[BM_EXPERT])
      return bfail(b, no, "layer %llu: expert %llu given twice for turn %llu step %llu",
                   (unsigned long long)v[BM_LAYER], (unsigned long long)v[BM_EXPERT],
                   (unsigned long long)v[BM_TURN], (unsigned long long)v[BM_STEP]);
  b->ids[base + seen_mask_idx] = (uint32_t)v[BM_EXPERT];
  b->w[base + seen_mask_idx] = w;
  (*fill)++;
  if (v[BM_EXPERT] > b->max_id) b->max_id = (uint32_t)v[BM_EXPERT];
  return SPILL_OK;
}

/* The (turn, step) -> token map lives here so every exit frees it. */
static int conv_bmoe(builder *b, const char *buf, size_t len, char *model, size_t model_cap) {
  tokmap map = {0};
  lines ls = {buf, len, 0, 0};
  const char *s;
  size_t n;
  bmoe st = {0};
  int rc = SPILL_OK;
  while (rc == SPILL_OK && next_line(&ls, &s, &n)) {
    if (n == 0) continue;
    if (s[0] == '#') {
      rc = bmoe_comment(b, &st, s, n, ls.no, model, model_cap);
      continue;
    }
    if (!st.seen_magic) {
      rc = bfail(b, ls.no, "expected \"# route_trace v1\" as the first line");
      break;
    }
    const char *f[BMOE_MAX_COLS];
    size_t fl[BMOE_MAX_COLS];
    int nf = split_csv(s, n, f, fl, BMOE_MAX_COLS);
    rc = st.have_cols ? bmoe_row(b, &st, &map, f, fl, nf, ls.no)
                      : bmoe_header(b, &st, f, fl, nf, ls.no);
  }
  free(map.key);
  free(map.val);
  if (rc < 0) return rc;
  if (!st.seen_magic) return bfail(b, ls.no ? ls.no : 1, "empty file: expected \"# route_trace v1\"");
  if (b->n == 0 && st.have_cols) return bfail(b, ls.no, "no data rows");
  if (!st.have_cols) return bfail(b, ls.no, "no column header line");
  b->has_weights = 1;
  b->rank_known = 1;
  return SPILL_OK;
}

/* ------------------------------------------------------ hf-router-json */

/* A forward-only search cursor: tokens come in file order, so each key is
 * looked up from where the previous one was found (linear overall). */
typedef struct cursor {
  size_t at;
  uint32_t line;
} cursor;

/* 1-based line of the next occurrence of needle at or after the cursor
 * (advancing it), else of the first occurrence from the start, else 0. */
static uint32_t line_of(const char *buf, size_t len, cursor *c, const char *needle) {
  size_t nl = strlen(needle);
  for (int pass = 0; pass < 2; pass++) {
    size_t i = pass ? 0 : c->at;
    uint32_t line = pass ? 1 : c->line;
    for (; i + nl <= len; i++) {
      if (buf[i] == '\n') line++;
      else if (buf[i] == needle[0] && !memcmp(buf + i, needle, nl)) {
        if (!pass) {
          c->at = i + nl;
          c->line = line;
        }
        return line;
      }
    }
  }
  return 0;
}

static uint32_t line_at(const char *buf, size_t len, const char *p) {
  uint32_t line = 1;
  for (const char *q = buf; q < p && q < buf + len; q++) line += *q == '\n';
  return line;
}

/* Parses "PREFIX<digits>" into *v. */
static int key_num(const char *key, const char *prefix, uint64_t hi, uint64_t *v) {
  size_t pl = strlen(prefix);
  if (strncmp(key, prefix, pl)) return -1;
  return field_u64(key + pl, strlen(key + pl), hi, v);
}

/* Parses a JSON source into *root by the one reading layer (a repeated key,
 * a NUL or invalid UTF-8 is refused, named by its JSON path or byte:
 * docs/RELIABILITY.md); text that is not JSON at all names the line where
 * it broke. */
static int parse_json(builder *b, const char *buf, size_t len, cJSON **root) {
  spill_err pe = {0};
  if (spill_json_parse(buf, len, NULL, SPILL_E_TRACE, root, &pe) == SPILL_OK) return SPILL_OK;
  const char *end = NULL;
  cJSON *any = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (!any) {
    uint32_t ln = end && end >= buf && end <= buf + len ? line_at(buf, len, end) : 1;
    return bfail(b, ln, "invalid JSON");
  }
  cJSON_Delete(any);
  return spill_err_set(b->e, SPILL_E_TRACE, "%s: %s", b->name, pe.msg);
}

static int conv_hf(builder *b, const char *buf, size_t len, int first_input) {
  cJSON *root;
  SPILL_TRY(parse_json(b, buf, len, &root));
  int rc = SPILL_OK;
  cursor cur = {0, 1};
  char path[160], quoted[96];
  const cJSON *rd = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "router_data")
                                         : NULL;
  if (!cJSON_IsArray(rd)) {
    rc = bfail(b, 1, "router_data: expected an array of {\"token_N\": {...}} objects");
    goto out;
  }
  uint32_t *ids = NULL;
  float *w = NULL;
  int i = 0;
  for (const cJSON *ent = rd->child; ent; ent = ent->next, i++) {
    const cJSON *tk = cJSON_IsObject(ent) ? ent->child : NULL;
    uint64_t pos;
    if (!tk || tk->next || !tk->string || key_num(tk->string, "token_", INT64_MAX, &pos) ||
        !cJSON_IsObject(tk)) {
      rc = bfail(b, line_of(buf, len, &cur, "\"router_data\""),
                 "router_data[%d]: expected one member \"token_N\" holding an object", i);
      break;
    }
    snprintf(quoted, sizeof quoted, "\"%s\"", tk->string);
    uint32_t ln = line_of(buf, len, &cur, quoted);
    if (b->L == 0) {
      /* shape from the first token of the first input */
      int nl = cJSON_GetArraySize(tk);
      const cJSON *l0 = cJSON_GetObjectItemCaseSensitive(tk, "layer_0");
      const cJSON *se = l0 ? cJSON_GetObjectItemCaseSensitive(l0, "selected_experts") : NULL;
      if (nl < 1 || (uint32_t)nl > CV_MAX_LAYERS || !cJSON_IsArray(se) ||
          cJSON_GetArraySize(se) < 1 || (uint32_t)cJSON_GetArraySize(se) > CV_MAX_TOPK) {
        rc = bfail(b, ln, "router_data[%d].%s: expected layer_0..layer_N each with a non-empty "
                          "\"selected_experts\" array",
                   i, tk->string);
        break;
      }
      b->L = (uint32_t)nl;
      b->K = (uint32_t)cJSON_GetArraySize(se);
    }
    if (!ids) {
      ids = (uint32_t *)malloc(b->K * sizeof *ids);
      w = (float *)malloc(b->K * sizeof *w);
      if (!ids || !w) {
        rc = bnomem(b);
        break;
      }
    }
    if ((uint32_t)cJSON_GetArraySize(tk) != b->L) {
      rc = bfail(b, ln, "router_data[%d].%s: %d layers, expected %u", i, tk->string,
                 cJSON_GetArraySize(tk), b->L);
      break;
    }
    size_t ti;
    if ((rc = b_token(b, (int64_t)pos, SPILL_TRACE_PHASE_DECODE, ln, &ti)) < 0) break;
    for (const cJSON *la = tk->child; la && rc == SPILL_OK; la = la->next) {
      uint64_t l;
      snprintf(path, sizeof path, "router_data[%d].%s.%s", i, tk->string,
               la->string ? la->string : "?");
      if (!la->string || key_num(la->string, "layer_", b->L - 1, &l) || !cJSON_IsObject(la)) {
        rc = bfail(b, ln, "%s: expected \"layer_I\" (I < %u) holding an object", path, b->L);
        break;
      }
      const cJSON *se = cJSON_GetObjectItemCaseSensitive(la, "selected_experts");
      const cJSON *sp = cJSON_GetObjectItemCaseSensitive(la, "selected_probs");
      if (!cJSON_IsArray(se) || (uint32_t)cJSON_GetArraySize(se) != b->K) {
        rc = bfail(b, ln, "%s.selected_experts: expected an array of %u ids", path, b->K);
        break;
      }
      if (!cJSON_IsArray(sp) || (uint32_t)cJSON_GetArraySize(sp) != b->K) {
        rc = bfail(b, ln, "%s.selected_probs: expected an array of %u numbers", path, b->K);
        break;
      }
      uint32_t k = 0;
      for (const cJSON *x = se->child; x; x = x->next, k++) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(v >= 0 && v < CV_MAX_EXPERTS && v == floor(v))) {
          rc = bfail(b, ln, "%s.selected_experts[%u]: expected integer in [0, %u]", path, k,
                     CV_MAX_EXPERTS - 1);
          break;
        }
        ids[k] = (uint32_t)v;
      }
      if (rc < 0) break;
      k = 0;
      for (const cJSON *x = sp->child; x; x = x->next, k++) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 3.0e38) {
          rc = bfail(b, ln, "%s.selected_probs[%u]: expected a finite number", path, k);
          break;
        }
        w[k] = (float)x->valuedouble;
      }
      if (rc < 0) break;
      if (b->filled[ti * b->L + l]) {
        rc = bfail(b, ln, "%s: layer given twice", path);
        break;
      }
      rc = b_layer(b, ti, (uint32_t)l, ids, w, b->K, ln);
    }
    if (rc < 0) break;
  }
  free(ids);
  free(w);
  if (rc == SPILL_OK && i == 0) rc = bfail(b, 1, "router_data: empty");
  if (rc == SPILL_OK && first_input) {
    b->has_weights = 1;
    b->rank_known = 1;
  }
out:
  cJSON_Delete(root);
  return rc;
}

/* ------------------------------------------------------ sorted-ids-txt */

static int conv_sorted(builder *b, const char *buf, size_t len, const spill_trace_convert_opts *o,
                       uint32_t *dropped_passes) {
  if (!o->n_layers || o->n_layers > CV_MAX_LAYERS)
    return spill_err_set(b->e, SPILL_E_INVALID_ARG,
                         "%s: sorted-ids-txt needs the layers per pass (1..%u)", b->name,
                         CV_MAX_LAYERS);
  const uint32_t L = o->n_layers;
  /* First pass over the text: the ids of each line, and the line count. */
  lines ls = {buf, len, 0, 0};
  const char *s;
  size_t n;
  uint32_t n_lines = 0, last_count = 0;
  uint32_t *cnt = NULL; /* ids per non-blank line */
  uint32_t *lno = NULL; /* source line of each */
  size_t cap = 0;
  int rc = SPILL_OK;
  while (next_line(&ls, &s, &n)) {
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t')) k++;
    if (k == n) continue;
    if (n_lines == cap) {
      cap = cap ? 2 * cap : 1024;
      uint32_t *c2 = (uint32_t *)realloc(cnt, cap * sizeof *c2);
      if (c2) cnt = c2;
      uint32_t *l2 = (uint32_t *)realloc(lno, cap * sizeof *l2);
      if (l2) lno = l2;
      if (!c2 || !l2) {
        rc = bnomem(b);
        goto out;
      }
    }
    uint32_t c = 1;
    for (size_t i = 0; i < n; i++) c += s[i] == ',';
    cnt[n_lines] = c;
    lno[n_lines] = ls.no;
    n_lines++;
    last_count = c;
  }
  if (n_lines == 0) {
    rc = bfail(b, 1, "no lines");
    goto out;
  }
  if (n_lines % L) {
    rc = bfail(b, lno[n_lines - 1],
               "%u lines is not a whole number of passes of %u layers (file ends inside a pass)",
               n_lines, L);
    goto out;
  }
  uint32_t K = o->top_k ? o->top_k : last_count;
  if (K == 0 || K > CV_MAX_TOPK) {
    rc = bfail(b, lno[n_lines - 1], "top-k %u out of range", K);
    goto out;
  }
  if (b->L == 0) {
    b->L = L;
    b->K = K;
  } else if (b->K != K) {
    rc = bfail(b, lno[n_lines - 1], "%u ids per line, the first input has %u", K, b->K);
    goto out;
  }
  /* Second pass: parse the ids, pass by pass. */
  uint32_t *ids = (uint32_t *)malloc(CV_MAX_TOPK * sizeof *ids);
  if (!ids) {
    rc = bnomem(b);
    goto out;
  }
  ls = (lines){buf, len, 0, 0};
  uint32_t li = 0;
  size_t ti = 0;
  int agg = 0;
  while (rc == SPILL_OK && next_line(&ls, &s, &n)) {
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t')) k++;
    if (k == n) continue;
    uint32_t l = li % L;
    if (l == 0) {
      /* A pass whose lines all hold more than top-k ids is aggregated
       * (a prefill pass: all experts any prompt token used), not per token. */
      agg = 1;
      for (uint32_t j = li; j < li + L; j++) agg &= cnt[j] > K;
      if (agg) (*dropped_passes)++;
      else if ((rc = b_token(b, (int64_t)(li / L), SPILL_TRACE_PHASE_DECODE, ls.no, &ti)) < 0)
        break;
    }
    if (!agg && cnt[li] != K) {
      rc = bfail(b, ls.no, "%u ids, expected %u (top-k) in a per-token pass", cnt[li], K);
      break;
    }
    const char *f[CV_MAX_TOPK];
    size_t fl[CV_MAX_TOPK];
    int nf = split_csv(s, n, f, fl, CV_MAX_TOPK);
    if (nf < 0) {
      rc = bfail(b, ls.no, "more than %u ids", CV_MAX_TOPK);
      break;
    }
    for (int j = 0; j < nf; j++) {
      uint64_t v;
      if (field_u64(f[j], fl[j], CV_MAX_EXPERTS - 1, &v)) {
        rc = bfail(b, ls.no, "id %d: expected integer in [0, %u], got \"%.*s\"", j,
                   CV_MAX_EXPERTS - 1, (int)(fl[j] > 40 ? 40 : fl[j]), f[j]);
        break;
      }
      for (int q = 0; q < j && agg; q++)
        if (ids[q] == (uint32_t)v) {
          rc = bfail(b, ls.no, "id %d: expert %llu given twice", j, (unsigned long long)v);
          break;
        }
      if (rc < 0) break;
      if (j < (int)CV_MAX_TOPK) ids[j] = (uint32_t)v;
      if (agg && v > b->max_id) b->max_id = (uint32_t)v;
    }
    if (rc == SPILL_OK && !agg) rc = b_layer(b, ti, l, ids, NULL, K, ls.no);
    li++;
  }
  free(ids);
out:
  free(cnt);
  free(lno);
  return rc;
}

/* ---------------------------------------------------- vllm-routed-json */

/* One [n_tok][L][K] array of ids (vLLM's prompt_routed_experts or a choice's
 * routed_experts) appended as tokens of `phase`, positions from *pos on. */
static int vllm_block(builder *b, const char *buf, size_t len, const cJSON *arr,
                      const char *path, uint8_t phase, int64_t *pos) {
  uint32_t ln = line_of(buf, len, &(cursor){0, 1}, path[0] == 'p' ? "\"prompt_routed_experts\""
                                                                   : "\"routed_experts\"");
  if (!cJSON_IsArray(arr))
    return bfail(b, ln ? ln : 1, "%s: expected an array [tokens][layers][top_k] of ids", path);
  uint32_t ids[CV_MAX_TOPK];
  int t = 0;
  for (const cJSON *tok = arr->child; tok; tok = tok->next, t++) {
    if (!cJSON_IsArray(tok) || cJSON_GetArraySize(tok) < 1 ||
        (uint32_t)cJSON_GetArraySize(tok) > CV_MAX_LAYERS)
      return bfail(b, ln, "%s[%d]: expected an array of layers", path, t);
    if (b->L == 0) {
      const cJSON *l0 = tok->child;
      int k = cJSON_IsArray(l0) ? cJSON_GetArraySize(l0) : 0;
      if (k < 1 || (uint32_t)k > CV_MAX_TOPK)
        return bfail(b, ln, "%s[%d][0]: expected a non-empty array of at most %u ids", path, t,
                     CV_MAX_TOPK);
      b->L = (uint32_t)cJSON_GetArraySize(tok);
      b->K = (uint32_t)k;
    }
    if ((uint32_t)cJSON_GetArraySize(tok) != b->L)
      return bfail(b, ln, "%s[%d]: %d layers, expected %u", path, t, cJSON_GetArraySize(tok),
                   b->L);
    size_t ti;
    SPILL_TRY(b_token(b, (*pos)++, phase, ln, &ti));
    uint32_t l = 0;
    for (const cJSON *la = tok->child; la; la = la->next, l++) {
      if (!cJSON_IsArray(la) || (uint32_t)cJSON_GetArraySize(la) != b->K)
        return bfail(b, ln, "%s[%d][%u]: expected an array of %u ids", path, t, l, b->K);
      uint32_t k = 0;
      for (const cJSON *x = la->child; x; x = x->next, k++) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!(v >= 0 && v < CV_MAX_EXPERTS && v == floor(v)))
          return bfail(b, ln, "%s[%d][%u][%u]: expected integer in [0, %u]", path, t, l, k,
                       CV_MAX_EXPERTS - 1);
        ids[k] = (uint32_t)v;
      }
      SPILL_TRY(b_layer(b, ti, l, ids, NULL, b->K, ln));
    }
  }
  return SPILL_OK;
}

/* A completion response of vLLM with --enable-return-routed-experts:
 * "prompt_routed_experts" (response level, optional) then choice 0's
 * "routed_experts"; other choices are not converted (caveat). */
static int conv_vllm(builder *b, const char *buf, size_t len, uint32_t *extra_choices,
                     int *had_prompt) {
  cJSON *root;
  SPILL_TRY(parse_json(b, buf, len, &root));
  int rc = SPILL_OK;
  int64_t pos = 0;
  const cJSON *pr = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "prompt_routed_experts") : NULL;
  const cJSON *ch = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "choices") : NULL;
  const cJSON *c0 = cJSON_IsArray(ch) ? ch->child : NULL;
  const cJSON *re = cJSON_IsObject(c0) ? cJSON_GetObjectItemCaseSensitive(c0, "routed_experts") : NULL;
  if (!re) {
    rc = bfail(b, 1, "choices[0].routed_experts: missing (was the server started with "
                     "--enable-return-routed-experts?)");
    goto out;
  }
  if (pr && !cJSON_IsNull(pr)) {
    rc = vllm_block(b, buf, len, pr, "prompt_routed_experts", SPILL_TRACE_PHASE_PREFILL, &pos);
    *had_prompt = 1;
  }
  if (rc == SPILL_OK)
    rc = vllm_block(b, buf, len, re, "choices[0].routed_experts", SPILL_TRACE_PHASE_DECODE, &pos);
  if (rc == SPILL_OK && cJSON_GetArraySize(ch) > 1) *extra_choices += (uint32_t)cJSON_GetArraySize(ch) - 1;
out:
  cJSON_Delete(root);
  return rc;
}

/* -------------------------------------------------------------- driver */

/* ------------------------------------------------------- llama-moe-csv */

/* llama.cpp's llama-moe-trace (examples/moe-trace, MOE_TRACE_OUT) writes
 * the ids of the ffn_moe_topk tensor of every MoE layer of every ubatch,
 * one CSV row per routed activation. Upstream rows are `layer,expert`
 * (header optional); forks add `phase`, `token` (or `pos`) and `rank`
 * columns, named in a header line. Without a token column the tokens are
 * recovered from the row order: a ubatch writes its layers in ascending
 * order, each layer's rows token by token, top-k rows per token. */

enum { LC_LAYER, LC_EXPERT, LC_TOKEN, LC_PHASE, LC_RANK, LC_N };
#define LC_MAX_COLS 16

typedef struct lcsv {
  int col[LC_N]; /* column of each field, -1 absent */
  int n_cols;
  uint32_t header_line; /* 0: no header */
} lcsv;

static int lc_trim_eq(const char *s, size_t n, const char *name) {
  while (n && (*s == ' ' || *s == '\t')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
  return n == strlen(name) && !memcmp(s, name, n);
}

/* Reads the header (if the first non-blank line has a non-numeric field). */
static int lc_header(builder *b, const char *s, size_t n, uint32_t line, lcsv *c) {
  const char *f[LC_MAX_COLS];
  size_t fl[LC_MAX_COLS];
  int nf = split_csv(s, n, f, fl, LC_MAX_COLS);
  if (nf < 0) return bfail(b, line, "more than %d columns", LC_MAX_COLS);
  int numeric = 1;
  for (int i = 0; i < nf; i++) {
    uint64_t v;
    numeric &= !field_u64(f[i], fl[i], UINT64_MAX / 2, &v);
  }
  for (int k = 0; k < LC_N; k++) c->col[k] = -1;
  c->n_cols = nf;
  if (numeric) { /* upstream rows without a header: layer,expert */
    if (nf != 2) return bfail(b, line, "no header and %d fields: expected layer,expert", nf);
    c->col[LC_LAYER] = 0;
    c->col[LC_EXPERT] = 1;
    c->header_line = 0;
    return SPILL_OK;
  }
  static const char *const names[LC_N][3] = {{"layer", NULL, NULL},
                                             {"expert", NULL, NULL},
                                             {"token", "pos", "position"},
                                             {"phase", NULL, NULL},
                                             {"rank", "slot", NULL}};
  for (int i = 0; i < nf; i++)
    for (int k = 0; k < LC_N; k++)
      for (int a = 0; a < 3 && names[k][a]; a++)
        if (lc_trim_eq(f[i], fl[i], names[k][a])) {
          if (c->col[k] >= 0)
            return bfail(b, line, "header: two columns name the %s", names[k][0]);
          c->col[k] = i;
        }
  if (c->col[LC_LAYER] < 0 || c->col[LC_EXPERT] < 0)
    return bfail(b, line, "header: needs columns layer and expert");
  c->header_line = line;
  return SPILL_OK;
}

typedef struct lrow {
  uint64_t layer, expert, token, rank;
  uint8_t phase;
} lrow;

static int lc_row(builder *b, const lcsv *c, const char *s, size_t n, uint32_t line, lrow *r) {
  const char *f[LC_MAX_COLS];
  size_t fl[LC_MAX_COLS];
  int nf = split_csv(s, n, f, fl, LC_MAX_COLS);
  if (nf != c->n_cols) return bfail(b, line, "%d fields, expected %d", nf, c->n_cols);
  static const char *const what[LC_N] = {"layer", "expert", "token", "phase", "rank"};
  const uint64_t hi[LC_N] = {CV_MAX_LAYERS - 1, CV_MAX_EXPERTS - 1, (1ull << 40),
                             0, CV_MAX_TOPK - 1};
  uint64_t *dst[LC_N] = {&r->layer, &r->expert, &r->token, NULL, &r->rank};
  memset(r, 0, sizeof *r);
  r->phase = SPILL_TRACE_PHASE_DECODE;
  for (int k = 0; k < LC_N; k++) {
    int i = c->col[k];
    if (i < 0) continue;
    if (k == LC_PHASE) {
      if (lc_trim_eq(f[i], fl[i], "prefill") || lc_trim_eq(f[i], fl[i], "0"))
        r->phase = SPILL_TRACE_PHASE_PREFILL;
      else if (!lc_trim_eq(f[i], fl[i], "decode") && !lc_trim_eq(f[i], fl[i], "1"))
        return bfail(b, line, "phase: expected prefill or decode, got \"%.*s\"",
                     (int)(fl[i] > 40 ? 40 : fl[i]), f[i]);
      continue;
    }
    if (field_u64(f[i], fl[i], hi[k], dst[k]))
      return bfail(b, line, "%s: expected integer in [0, %llu], got \"%.*s\"", what[k],
                   (unsigned long long)hi[k], (int)(fl[i] > 40 ? 40 : fl[i]), f[i]);
  }
  return SPILL_OK;
}

/* Next non-blank line. */
static int next_data_line(lines *ls, const char **s, size_t *n) {
  while (next_line(ls, s, n)) {
    size_t k = 0;
    while (k < *n && ((*s)[k] == ' ' || (*s)[k] == '\t')) k++;
    if (k < *n) return 1;
  }
  return 0;
}

/* Rows with a token column: (token) -> builder token through map. */
static int lc_by_token(builder *b, const char *buf, size_t len, const lcsv *c, tokmap *map) {
  lines ls = {buf, len, 0, 0};
  const char *s;
  size_t n;
  lrow r;
  int rc = SPILL_OK;
  if (c->header_line) next_data_line(&ls, &s, &n);
  while (rc == SPILL_OK && next_data_line(&ls, &s, &n)) {
    if ((rc = lc_row(b, c, s, n, ls.no, &r)) < 0) break;
    uint32_t idx = (uint32_t)b->n;
    int found = 0;
    if (tokmap_get(map, r.token, &idx, &found) < 0) return bnomem(b);
    if (!found) {
      size_t ti;
      if ((rc = b_token(b, (int64_t)r.token, r.phase, ls.no, &ti)) < 0) break;
    } else if (b->tok[idx].phase != r.phase) {
      rc = bfail(b, ls.no, "token %llu: phase differs from its first row (line %u)",
                 (unsigned long long)r.token, b->tok[idx].line);
      break;
    }
    if (c->col[LC_RANK] >= 0 && r.rank != b->filled[(size_t)idx * b->L + r.layer])
      rc = bfail(b, ls.no, "token %llu layer %llu: rank %llu arrives after %u ranks",
                 (unsigned long long)r.token, (unsigned long long)r.layer,
                 (unsigned long long)r.rank, b->filled[(size_t)idx * b->L + r.layer]);
    else
      rc = b_set(b, idx, (uint32_t)r.layer, (uint32_t)r.expert, 0.0f, ls.no);
  }
  return rc;
}

/* Rows without a token column: ubatches from the row order (see above). */
static int lc_by_order(builder *b, const char *buf, size_t len, const lcsv *c,
                       uint32_t *n_ubatch) {
  lines ls = {buf, len, 0, 0};
  const char *s;
  size_t n;
  lrow r;
  int rc = SPILL_OK;
  const uint32_t K = b->K;
  /* run: consecutive rows of one layer; a run whose layer is below the
   * previous run's starts a ubatch of (run rows / K) tokens */
  uint64_t run_layer = UINT64_MAX, run_rows = 0, ub_rows = 0;
  uint32_t run_line = 0;
  size_t ub_first = 0, ub_tokens = 0;
  const uint32_t ub0 = *n_ubatch;
  if (c->header_line) next_data_line(&ls, &s, &n);
  for (;;) {
    int more = next_data_line(&ls, &s, &n);
    if (more && (rc = lc_row(b, c, s, n, ls.no, &r)) < 0) break;
    if (!more || r.layer != run_layer) { /* close the run */
      if (run_layer != UINT64_MAX) {
        if (run_rows % K)
          return bfail(b, run_line, "layer %llu: %llu rows is not a whole number of tokens "
                                    "of %u ids",
                       (unsigned long long)run_layer, (unsigned long long)run_rows, K);
        if (ub_rows && run_rows != ub_rows)
          return bfail(b, run_line, "layer %llu: %llu rows, the ubatch's first layer had %llu",
                       (unsigned long long)run_layer, (unsigned long long)run_rows,
                       (unsigned long long)ub_rows);
      }
      /* a one-token ubatch after the input's first is a decode step */
      if (run_layer != UINT64_MAX && (!more || r.layer < run_layer) && ub_tokens == 1 &&
          *n_ubatch > ub0 + 1)
        b->tok[ub_first].phase = SPILL_TRACE_PHASE_DECODE;
      if (!more) break;
      if (r.layer < run_layer || run_layer == UINT64_MAX) { /* a new ubatch */
        ub_rows = 0;
        ub_first = b->n;
        ub_tokens = 0;
        (*n_ubatch)++;
      } else {
        ub_rows = run_rows; /* later layers of the ubatch repeat its size */
      }
      run_layer = r.layer;
      run_rows = 0;
      run_line = ls.no;
    }
    size_t t = ub_first + run_rows / K;
    if (!ub_rows && run_rows % K == 0) { /* the ubatch's first layer: a new token */
      size_t ti;
      if ((rc = b_token(b, 0, SPILL_TRACE_PHASE_PREFILL, ls.no, &ti)) < 0) break;
      ub_tokens++;
    } else if (t >= ub_first + ub_tokens) {
      return bfail(b, ls.no, "layer %llu: more rows than the ubatch's first layer had",
                   (unsigned long long)r.layer);
    }
    if ((rc = b_set(b, t, (uint32_t)r.layer, (uint32_t)r.expert, 0.0f, ls.no)) < 0) break;
    run_rows++;
  }
  return rc;
}

/* First pass: the header, the highest layer, and top-k (o->top_k, else the
 * rank column's highest + 1, else the last layer run's rows). */
static int lc_scan(builder *b, const char *buf, size_t len, const spill_trace_convert_opts *o,
                   lcsv *c, uint32_t *L, uint32_t *K) {
  lines ls = {buf, len, 0, 0};
  const char *s;
  size_t n;
  if (!next_data_line(&ls, &s, &n)) return bfail(b, 1, "no rows");
  SPILL_TRY(lc_header(b, s, n, ls.no, c));
  if (!c->header_line) ls = (lines){buf, len, 0, 0};
  lrow r;
  uint64_t max_layer = 0, max_rank = 0, run_layer = UINT64_MAX, run = 0, rows = 0;
  while (next_data_line(&ls, &s, &n)) {
    SPILL_TRY(lc_row(b, c, s, n, ls.no, &r));
    if (r.layer > max_layer) max_layer = r.layer;
    if (r.rank > max_rank) max_rank = r.rank;
    run = r.layer == run_layer ? run + 1 : 1;
    run_layer = r.layer;
    rows++;
  }
  if (!rows) return bfail(b, ls.no, "no rows after the header");
  *L = (uint32_t)max_layer + 1;
  *K = o->top_k ? o->top_k : c->col[LC_RANK] >= 0 ? (uint32_t)max_rank + 1 : (uint32_t)run;
  if (*K == 0 || *K > CV_MAX_TOPK) return bfail(b, ls.no, "top-k %u out of range", *K);
  return SPILL_OK;
}

static int conv_llama(builder *b, const char *buf, size_t len, const spill_trace_convert_opts *o,
                      uint32_t *n_ubatch, int *by_order) {
  lcsv c;
  uint32_t L = 0, K = 0;
  SPILL_TRY(lc_scan(b, buf, len, o, &c, &L, &K));
  if (b->L == 0) {
    b->L = L;
    b->K = K;
    b->absent_ok = 1;
  } else if (b->K != K || b->L < L) {
    return bfail(b, 1, "%u layers x top-%u, the first input has %u x %u", L, K, b->L, b->K);
  }
  if (c.col[LC_TOKEN] >= 0) {
    tokmap map = {0};
    int rc = lc_by_token(b, buf, len, &c, &map);
    free(map.key);
    free(map.val);
    return rc;
  }
  *by_order = 1;
  size_t first = b->n;
  SPILL_TRY(lc_by_order(b, buf, len, &c, n_ubatch));
  for (size_t i = first; i < b->n; i++) b->tok[i].pos = (int64_t)(i - first);
  return SPILL_OK;
}

/* -------------------------------------------------------- flashmoe-bin */

/* Binary routing records as flash-moe-style engines collect them for
 * predictor training: little-endian int32 layer, int32 K, then `hidden`
 * float32 values (the gate input; 0 when the engine writes none), then K
 * int32 expert ids, back to back with no file header. A record whose layer
 * is not above the previous record's starts the next token. */

static int32_t rd_i32(const unsigned char *p) {
  uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  int32_t out;
  memcpy(&out, &v, sizeof out);
  return out;
}

static int fm_fail(builder *b, uint64_t rec, size_t at, const char *what, long long v,
                   const spill_trace_convert_opts *o) {
  return spill_err_set(b->e, SPILL_E_TRACE, "%s: record %llu (byte %zu): %s %lld%s", b->name,
                       (unsigned long long)rec, at, what, v,
                       o->hidden ? "" : " (records with hidden states? give --hidden N)");
}

static int conv_flashmoe(builder *b, const char *buf, size_t len,
                         const spill_trace_convert_opts *o) {
  const unsigned char *u = (const unsigned char *)buf;
  const uint64_t hid = (uint64_t)o->hidden * 4;
  /* first pass: shape and framing */
  uint32_t maxl = 0, K0 = 0;
  uint64_t rec = 0;
  size_t at = 0;
  while (at < len) {
    rec++;
    if (len - at < 8)
      return spill_err_set(b->e, SPILL_E_TRACE, "%s: record %llu (byte %zu): %zu bytes left, "
                           "a record header needs 8", b->name, (unsigned long long)rec, at,
                           len - at);
    int32_t l = rd_i32(u + at), k = rd_i32(u + at + 4);
    if (l < 0 || l >= (int32_t)CV_MAX_LAYERS) return fm_fail(b, rec, at, "layer", l, o);
    if (k < 1 || k > (int32_t)CV_MAX_TOPK) return fm_fail(b, rec, at, "K", k, o);
    if (K0 && (uint32_t)k != K0) return fm_fail(b, rec, at, "K differs from the first record's:", k, o);
    K0 = (uint32_t)k;
    uint64_t need = 8 + hid + 4ull * (uint64_t)k;
    if ((uint64_t)(len - at) < need)
      return spill_err_set(b->e, SPILL_E_TRACE, "%s: record %llu (byte %zu): truncated, %zu "
                           "bytes left of %llu", b->name, (unsigned long long)rec, at, len - at,
                           (unsigned long long)need);
    if ((uint32_t)l > maxl) maxl = (uint32_t)l;
    at += (size_t)need;
  }
  if (!rec) return spill_err_set(b->e, SPILL_E_TRACE, "%s: no records", b->name);
  if (b->L == 0) {
    b->L = maxl + 1;
    b->K = K0;
    b->absent_ok = 1;
  } else if (b->K != K0 || b->L < maxl + 1) {
    return spill_err_set(b->e, SPILL_E_TRACE, "%s: %u layers x top-%u, the first input has "
                         "%u x %u", b->name, maxl + 1, K0, b->L, b->K);
  }
  /* second pass: tokens */
  int64_t prev = -1, pos = 0;
  size_t ti = 0;
  rec = 0;
  for (at = 0; at < len;) {
    rec++;
    int32_t l = rd_i32(u + at);
    if (l <= prev || prev < 0) SPILL_TRY(b_token(b, pos++, SPILL_TRACE_PHASE_DECODE, (uint32_t)rec, &ti));
    prev = l;
    const unsigned char *ids = u + at + 8 + hid;
    for (uint32_t j = 0; j < K0; j++) {
      int32_t id = rd_i32(ids + 4 * j);
      if (id < 0 || id >= (int32_t)CV_MAX_EXPERTS)
        return fm_fail(b, rec, at, "expert id", id, o);
      int rc = b_set(b, ti, (uint32_t)l, (uint32_t)id, 0.0f, (uint32_t)rec);
      if (rc < 0) return rc;
    }
    at += (size_t)(8 + hid + 4ull * K0);
  }
  return SPILL_OK;
}

/* What the llama-moe-csv and flashmoe-bin sources lack. */
static int new_source_caveats(builder *b, spill_trace_source src, int by_order,
                              uint32_t n_ubatch) {
  int rc = SPILL_OK;
  if (src == SPILL_TRACE_SRC_LLAMA_MOE_CSV) {
    b->rank_known = 0;
    rc = caveat(b, "rank order unknown: ids in the order of llama.cpp's ffn_moe_topk tensor, "
                   "which its top-k does not promise to sort");
    if (rc == SPILL_OK) rc = caveat(b, "no gate weights in the source");
    if (rc == SPILL_OK && by_order)
      rc = caveat(b, "no token column: %u ubatch(es) recovered from the row order (layers "
                     "ascending per ubatch, top-%u rows per token); one-token ubatches after "
                     "the first are decode, the rest prefill",
                  n_ubatch, b->K);
  } else if (src == SPILL_TRACE_SRC_FLASHMOE_BIN) {
    b->rank_known = 0;
    rc = caveat(b, "rank order unknown: ids in the order the engine recorded them");
    if (rc == SPILL_OK) rc = caveat(b, "no gate weights in the source");
    if (rc == SPILL_OK)
      rc = caveat(b, "phase and positions not recorded: a record whose layer is not above the "
                     "previous one starts the next token, every token taken as decode");
  }
  return rc;
}

int spill_trace_convert(spill_trace_source src, const char *const *in, const size_t *len,
                        const char *const *names, size_t n_in,
                        const spill_trace_convert_opts *opts, spill_trace *out, spill_err *e) {
  SPILL_FAIL_IF(e, !out || !in || !len || n_in == 0 || (int)src < 0 || src >= SPILL_TRACE_SRC_COUNT,
                SPILL_E_INVALID_ARG, "trace convert: bad arguments");
  memset(out, 0, sizeof *out);
  out->meta.rank_order = -1;
  spill_trace_convert_opts o;
  memset(&o, 0, sizeof o);
  if (opts) o = *opts;
  SPILL_FAIL_IF(e, o.n_experts > CV_MAX_EXPERTS, SPILL_E_INVALID_ARG,
                "trace convert: experts %u is more than %u", o.n_experts, CV_MAX_EXPERTS);
  builder b;
  memset(&b, 0, sizeof b);
  b.e = e;
  char model[256] = "";
  uint32_t dropped = 0, extra_choices = 0, n_ubatch = 0;
  int had_prompt = 0, by_order = 0;
  int rc = SPILL_OK;
  for (size_t i = 0; i < n_in && rc == SPILL_OK; i++) {
    SPILL_FAIL_IF(e, !in[i] && len[i], SPILL_E_INVALID_ARG, "trace convert: NULL input");
    b.name = names && names[i] ? names[i] : "input";
    switch (src) {
      case SPILL_TRACE_SRC_BMOE_CSV:
        rc = conv_bmoe(&b, in[i], len[i], model, sizeof model);
        break;
      case SPILL_TRACE_SRC_HF_ROUTER_JSON:
        rc = conv_hf(&b, in[i], len[i], i == 0);
        break;
      case SPILL_TRACE_SRC_SORTED_IDS_TXT:
        rc = conv_sorted(&b, in[i], len[i], &o, &dropped);
        break;
      case SPILL_TRACE_SRC_VLLM_ROUTED_JSON:
        rc = conv_vllm(&b, in[i], len[i], &extra_choices, &had_prompt);
        break;
      case SPILL_TRACE_SRC_LLAMA_MOE_CSV:
        rc = conv_llama(&b, in[i], len[i], &o, &n_ubatch, &by_order);
        break;
      case SPILL_TRACE_SRC_FLASHMOE_BIN:
        rc = conv_flashmoe(&b, in[i], len[i], &o);
        break;
      default:
        rc = SPILL_E_INVALID_ARG;
    }
  }
  if (rc == SPILL_OK && src == SPILL_TRACE_SRC_BMOE_CSV && b.n > 0) {
    /* bmoe-csv may leave rank slots unset: b_finish checks counts only. */
    rc = caveat(&b, "the recording engine's residency and expert_bytes columns are not "
                    "converted");
  }
  if (rc == SPILL_OK && src == SPILL_TRACE_SRC_HF_ROUTER_JSON)
    rc = caveat(&b, "phase not recorded by the source: every token is taken as decode");
  if (rc == SPILL_OK && src == SPILL_TRACE_SRC_SORTED_IDS_TXT) {
    b.rank_known = 0;
    rc = caveat(&b, "rank order unknown: the source lists each layer's ids sorted ascending");
    if (rc == SPILL_OK) rc = caveat(&b, "no gate weights in the source");
    if (rc == SPILL_OK && dropped)
      rc = caveat(&b, "%u aggregated pass(es) dropped (more than top-%u ids per layer: a "
                      "prefill pass recorded for the whole prompt, not per token)",
                  dropped, b.K);
    if (rc == SPILL_OK)
      rc = caveat(&b, "phase not recorded by the source: per-token passes are taken as decode");
  }
  if (rc == SPILL_OK && src == SPILL_TRACE_SRC_VLLM_ROUTED_JSON) {
    rc = caveat(&b, "no gate weights in the source (vLLM returns expert ids only)");
    if (rc == SPILL_OK)
      rc = caveat(&b, "rank order as vLLM returns the router's top-k ids (not documented)");
    if (rc == SPILL_OK && !had_prompt)
      rc = caveat(&b, "no prompt_routed_experts: the prompt (prefill) tokens are missing");
    if (rc == SPILL_OK && extra_choices)
      rc = caveat(&b, "%u further choice(s) not converted: only choice 0 follows the prompt",
                  extra_choices);
  }
  if (rc == SPILL_OK) rc = new_source_caveats(&b, src, by_order, n_ubatch);
  if (rc == SPILL_OK && o.top_k_native && o.top_k_native != b.K)
    rc = caveat(&b, "top-k overridden from %u to %u by the recording engine: the ids are the "
                    "router's top %u",
                o.top_k_native, b.K, b.K);
  if (rc == SPILL_OK && n_in > 1)
    rc = caveat(&b, "%zu inputs concatenated in the order given (positions restart with each)",
                n_in);
  if (rc == SPILL_OK)
    rc = b_finish(&b, &o, kSourceNames[src], model[0] ? model : NULL, out);
  builder_free(&b);
  return rc;
}
