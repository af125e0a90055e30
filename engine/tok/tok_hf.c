/* engine/tok/tok_hf.c: loads a Hugging Face tokenizer.json (+ optional
 * tokenizer_config.json) into a spill_tok.
 *
 * Supported (docs/TOKENIZER.md): model BPE (byte-level or SentencePiece-style
 * with byte_fallback / unk, ignore_merges, merges as "a b" strings or pairs);
 * normalizers NFC, Prepend, Replace(String), Sequence of these; pre-tokenizers
 * ByteLevel (GPT-2 regex when use_regex, add_prefix_space), Split(Regex or
 * String, Isolated), Metaspace (split false), Sequence of these; added tokens
 * with special / lstrip / rstrip; post-processors TemplateProcessing and
 * ByteLevel; decoders ByteLevel, Metaspace, Replace/ByteFallback/Fuse/Strip.
 * Anything else is refused with SPILL_E_UNSUPPORTED naming the component:
 * a tokenizer we would run wrongly must not load.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/tok/tok_internal.h"

#define GPT2_PATTERN \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jbool(const cJSON *o, const char *k, int dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* Regex-escapes a literal for PCRE2. */
static char *regex_quote(const char *s) {
  size_t n = strlen(s);
  char *r = malloc(2 * n + 1), *o = r;
  if (!r) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (strchr("\\^$.|?*+()[]{}", s[i])) *o++ = '\\';
    *o++ = s[i];
  }
  *o = '\0';
  return r;
}

typedef struct hf_state {
  int bytelevel;         /* a ByteLevel pre-tokenizer or decoder is present */
  int add_prefix_space;  /* ByteLevel add_prefix_space */
} hf_state;

static int load_normalizer(spill_tok *t, const cJSON *n, spill_err *e) {
  if (!n || cJSON_IsNull(n)) return SPILL_OK;
  const char *type = jstr(n, "type");
  SPILL_FAIL_IF(e, !type, SPILL_E_FORMAT, "tokenizer.json: normalizer without a type");
  if (!strcmp(type, "Sequence")) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
    cJSON_ArrayForEach(it, arr) SPILL_TRY(load_normalizer(t, it, e));
    return SPILL_OK;
  }
  if (!strcmp(type, "NFC")) { t->nfc = 1; return SPILL_OK; }
  if (!strcmp(type, "Prepend")) {
    const char *p = jstr(n, "prepend");
    SPILL_FAIL_IF(e, !p || strcmp(p, "\xE2\x96\x81"), SPILL_E_UNSUPPORTED,
                  "tokenizer.json: normalizer Prepend of \"%s\" (only U+2581)", p ? p : "?");
    t->spm_prepend = 1;
    return SPILL_OK;
  }
  if (!strcmp(type, "Replace")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
    const char *from = jstr(pat, "String"), *to = jstr(n, "content");
    SPILL_FAIL_IF(e, !from || !to || strcmp(from, " ") || strcmp(to, "\xE2\x96\x81"),
                  SPILL_E_UNSUPPORTED,
                  "tokenizer.json: normalizer Replace other than ' ' -> U+2581");
    t->spm_replace_space = 1;
    return SPILL_OK;
  }
  return spill_err_set(e, SPILL_E_UNSUPPORTED, "tokenizer.json: normalizer %s is not supported",
                       type);
}

static int load_pretok(spill_tok *t, hf_state *st, const cJSON *p, spill_err *e) {
  if (!p || cJSON_IsNull(p)) return SPILL_OK;
  const char *type = jstr(p, "type");
  SPILL_FAIL_IF(e, !type, SPILL_E_FORMAT, "tokenizer.json: pre_tokenizer without a type");
  if (!strcmp(type, "Sequence")) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *it;
    cJSON_ArrayForEach(it, arr) SPILL_TRY(load_pretok(t, st, it, e));
    return SPILL_OK;
  }
  if (!strcmp(type, "ByteLevel")) {
    st->bytelevel = 1;
    st->add_prefix_space = jbool(p, "add_prefix_space", 0);
    SPILL_FAIL_IF(e, st->add_prefix_space, SPILL_E_UNSUPPORTED,
                  "tokenizer.json: ByteLevel add_prefix_space=true is not supported");
    if (jbool(p, "use_regex", 1)) SPILL_TRY(tok_add_split(t, GPT2_PATTERN, e));
    return SPILL_OK;
  }
  if (!strcmp(type, "Split")) {
    const char *beh = jstr(p, "behavior");
    SPILL_FAIL_IF(e, !beh || strcmp(beh, "Isolated") || jbool(p, "invert", 0),
                  SPILL_E_UNSUPPORTED,
                  "tokenizer.json: Split behavior %s%s is not supported (only Isolated)",
                  beh ? beh : "?", jbool(p, "invert", 0) ? " inverted" : "");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
    const char *re = jstr(pat, "Regex"), *lit = jstr(pat, "String");
    if (re) return tok_add_split(t, re, e);
    SPILL_FAIL_IF(e, !lit, SPILL_E_FORMAT, "tokenizer.json: Split without a pattern");
    char *q = regex_quote(lit);
    SPILL_FAIL_IF(e, !q, SPILL_E_NOMEM, "tokenizer.json: no memory");
    int rc = tok_add_split(t, q, e);
    free(q);
    return rc;
  }
  if (!strcmp(type, "Metaspace")) {
    const char *rep = jstr(p, "replacement");
    const char *scheme = jstr(p, "prepend_scheme");
    SPILL_FAIL_IF(e, rep && strcmp(rep, "\xE2\x96\x81"), SPILL_E_UNSUPPORTED,
                  "tokenizer.json: Metaspace replacement other than U+2581");
    SPILL_FAIL_IF(e, jbool(p, "split", 0), SPILL_E_UNSUPPORTED,
                  "tokenizer.json: Metaspace split=true is not supported");
    t->spm_replace_space = 1;
    if (!scheme) scheme = jbool(p, "add_prefix_space", 1) ? "always" : "never";
    if (!strcmp(scheme, "always")) t->spm_prepend = 1;
    else if (!strcmp(scheme, "first")) t->spm_prepend = 2;
    else SPILL_FAIL_IF(e, strcmp(scheme, "never"), SPILL_E_UNSUPPORTED,
                       "tokenizer.json: Metaspace prepend_scheme %s", scheme);
    return SPILL_OK;
  }
  return spill_err_set(e, SPILL_E_UNSUPPORTED, "tokenizer.json: pre_tokenizer %s is not supported",
                       type);
}

static int load_decoder(spill_tok *t, hf_state *st, const cJSON *d, spill_err *e) {
  if (!d || cJSON_IsNull(d)) return SPILL_OK;
  const char *type = jstr(d, "type");
  SPILL_FAIL_IF(e, !type, SPILL_E_FORMAT, "tokenizer.json: decoder without a type");
  if (!strcmp(type, "Sequence")) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d, "decoders"), *it;
    cJSON_ArrayForEach(it, arr) SPILL_TRY(load_decoder(t, st, it, e));
    return SPILL_OK;
  }
  if (!strcmp(type, "ByteLevel")) { st->bytelevel = 1; return SPILL_OK; }
  if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse")) return SPILL_OK;
  if (!strcmp(type, "Replace")) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(d, "pattern");
    const char *from = jstr(pat, "String"), *to = jstr(d, "content");
    SPILL_FAIL_IF(e, !from || !to || strcmp(from, "\xE2\x96\x81") || strcmp(to, " "),
                  SPILL_E_UNSUPPORTED, "tokenizer.json: decoder Replace other than U+2581 -> ' '");
    return SPILL_OK;
  }
  if (!strcmp(type, "Strip")) {
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(d, "stop");
    const char *content = jstr(d, "content");
    SPILL_FAIL_IF(e, !content || strcmp(content, " ") || !cJSON_IsNumber(start) ||
                         start->valueint > 1 || (cJSON_IsNumber(stop) && stop->valueint != 0),
                  SPILL_E_UNSUPPORTED, "tokenizer.json: decoder Strip other than one leading space");
    t->spm_strip_leading = start->valueint == 1;
    return SPILL_OK;
  }
  if (!strcmp(type, "Metaspace")) {
    const char *scheme = jstr(d, "prepend_scheme");
    int strip = scheme ? strcmp(scheme, "never") != 0 : jbool(d, "add_prefix_space", 1);
    t->spm_strip_leading = strip;
    return SPILL_OK;
  }
  return spill_err_set(e, SPILL_E_UNSUPPORTED, "tokenizer.json: decoder %s is not supported", type);
}

static int32_t template_id(const cJSON *pp, const char *name) {
  const cJSON *sp = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
  const cJSON *tok = cJSON_GetObjectItemCaseSensitive(sp, name);
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids");
  if (cJSON_GetArraySize(ids) != 1) return -1;
  const cJSON *v = cJSON_GetArrayItem(ids, 0);
  return cJSON_IsNumber(v) ? (int32_t)v->valuedouble : -1;
}

static int load_post(spill_tok *t, const cJSON *p, spill_err *e) {
  if (!p || cJSON_IsNull(p)) return SPILL_OK;
  const char *type = jstr(p, "type");
  SPILL_FAIL_IF(e, !type, SPILL_E_FORMAT, "tokenizer.json: post_processor without a type");
  if (!strcmp(type, "Sequence")) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(p, "processors"), *it;
    cJSON_ArrayForEach(it, arr) SPILL_TRY(load_post(t, it, e));
    return SPILL_OK;
  }
  if (!strcmp(type, "ByteLevel")) return SPILL_OK; /* offsets only */
  if (!strcmp(type, "TemplateProcessing")) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *it;
    int seen_seq = 0;
    cJSON_ArrayForEach(it, single) {
      const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
      if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) { seen_seq = 1; continue; }
      const char *name = jstr(sp, "id");
      SPILL_FAIL_IF(e, !name, SPILL_E_FORMAT, "tokenizer.json: TemplateProcessing item");
      int32_t id = template_id(p, name);
      SPILL_FAIL_IF(e, id < 0 || id >= t->n_vocab, SPILL_E_FORMAT,
                    "tokenizer.json: TemplateProcessing token %s has no single id", name);
      if (!seen_seq) {
        SPILL_FAIL_IF(e, t->n_prefix >= 4, SPILL_E_UNSUPPORTED, "tokenizer.json: > 4 prefix tokens");
        t->prefix_ids[t->n_prefix++] = id;
      } else {
        SPILL_FAIL_IF(e, t->n_suffix >= 4, SPILL_E_UNSUPPORTED, "tokenizer.json: > 4 suffix tokens");
        t->suffix_ids[t->n_suffix++] = id;
      }
    }
    return SPILL_OK;
  }
  return spill_err_set(e, SPILL_E_UNSUPPORTED,
                       "tokenizer.json: post_processor %s is not supported", type);
}

/* Token text of a tokenizer_config.json bos/eos entry (string or AddedToken). */
static const char *config_token(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (cJSON_IsString(v)) return v->valuestring;
  return jstr(v, "content");
}

int tok_apply_config(spill_tok *t, const char *cj, size_t clen, spill_err *e) {
  cJSON *cfg = NULL; /* the one reading layer: repeated keys, NULs refused */
  SPILL_TRY(spill_json_parse(cj, clen, "tokenizer_config.json", SPILL_E_FORMAT, &cfg, e));
  if (!cJSON_IsObject(cfg)) {
    cJSON_Delete(cfg);
    return spill_err_set(e, SPILL_E_FORMAT, "tokenizer_config.json: not a JSON object");
  }
  int rc = SPILL_OK;
  const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
  if (bos) t->bos_id = spill_tok_find(t, bos, strlen(bos));
  if (eos) t->eos_id = spill_tok_find(t, eos, strlen(eos));
  if (jbool(cfg, "add_bos_token", 0) && t->n_prefix == 0 && t->bos_id >= 0)
    t->prefix_ids[t->n_prefix++] = t->bos_id;
  if (jbool(cfg, "add_eos_token", 0) && t->n_suffix == 0 && t->eos_id >= 0)
    t->suffix_ids[t->n_suffix++] = t->eos_id;
  const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
  const char *tmpl = NULL;
  if (cJSON_IsString(ct)) tmpl = ct->valuestring;
  else if (cJSON_IsArray(ct)) { /* [{"name": "default", "template": ...}, ...] */
    const cJSON *it;
    cJSON_ArrayForEach(it, ct) {
      const char *name = jstr(it, "name");
      if (name && !strcmp(name, "default")) tmpl = jstr(it, "template");
    }
  }
  if (tmpl) {
    t->chat_template = strdup(tmpl);
    if (!t->chat_template) rc = spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
  }
  cJSON_Delete(cfg);
  return rc;
}

/* ---- the document: vocab and merges by the scanner, the rest by cJSON ---- */

typedef struct vocab_ent {
  int32_t id;
  uint32_t len;
  size_t off; /* into the arena */
} vocab_ent;

/* One merge: its two tokens a then b at off in hf_doc.raw, first as in the
 * file, then (unmap_merges) as vocabulary bytes, un-mapped in place when
 * byte-level (mapped: 1, so an error message can show the file's text). */
typedef struct merge_txt {
  uint32_t off, la, lb, mapped;
} merge_txt;

typedef struct hf_doc {
  cJSON *root; /* every member except model.vocab and model.merges */
  int vocab_seen, merges_seen, vocab_bad, merges_bad;
  vocab_ent *ents; /* model.vocab, its text in the tokenizer's arena */
  size_t n_ents;
  double max_id;
  char *raw; /* model.merges as in the file, a then b */
  merge_txt *ms;
  size_t n_ms;
} hf_doc;

/* Reads the next member key of an object into a malloc'ed string. */
static int member_key(tok_json *j, char **key) {
  size_t k0 = j->i, len;
  SPILL_TRY(tj_string(j, NULL, NULL));
  free(*key);
  *key = malloc(j->i - k0 + 1);
  SPILL_FAIL_IF(j->e, !*key, SPILL_E_NOMEM, "tokenizer.json: no memory");
  j->i = k0;
  SPILL_TRY(tj_string(j, *key, &len));
  (*key)[len] = '\0';
  /* a key is a C string from here on: "model\u0000x" must not read as "model" */
  SPILL_FAIL_IF(j->e, strlen(*key) != len, SPILL_E_FORMAT,
                "%s: member \"%.40s\" holds a NUL (\\u0000) at byte %zu of its key", j->what, *key,
                strlen(*key));
  return tj_expect(j, ':');
}

/* Skips the value at j and adds it, parsed by cJSON, to obj under key. */
static int add_member(tok_json *j, cJSON *obj, const char *key) {
  tj_ws(j);
  size_t v0 = j->i;
  SPILL_TRY(tj_skip(j));
  cJSON *item = NULL; /* the one reading layer: repeated keys, NULs refused */
  spill_err pe = {0};
  if (spill_json_parse(j->s + v0, j->i - v0, NULL, SPILL_E_FORMAT, &item, &pe) < 0)
    return spill_err_set(j->e, SPILL_E_FORMAT, "%s: %s: %s", j->what, key, pe.msg);
  cJSON_AddItemToObject(obj, key, item);
  return SPILL_OK;
}

/* A member the scanner read itself (model.vocab, model.merges) is kept in the
 * tree as null, so a second copy of it is a repeated key there. */
static int add_placeholder(tok_json *j, cJSON *obj, const char *key) {
  cJSON *n = cJSON_CreateNull();
  SPILL_FAIL_IF(j->e, !n, SPILL_E_NOMEM, "tokenizer.json: no memory");
  cJSON_AddItemToObject(obj, key, n);
  return SPILL_OK;
}

/* model.vocab, one pass: token text decoded straight into the arena (room:
 * the document's length), ids checked. */
static int read_vocab(tok_json *j, spill_tok *t, hf_doc *d) {
  size_t cap = 0;
  t->arena = malloc(j->n + 1);
  SPILL_FAIL_IF(j->e, !t->arena, SPILL_E_NOMEM, "tokenizer.json: no memory for the vocabulary");
  t->arena_cap = j->n + 1;
  int first = 1, r;
  SPILL_TRY(tj_expect(j, '{'));
  while ((r = tj_next(j, &first, '}')) == 1) {
    char *dst = t->arena + t->arena_len;
    size_t len;
    double v = -1;
    SPILL_TRY(tj_string(j, dst, &len));
    SPILL_TRY(tj_expect(j, ':'));
    int c = tj_peek(j);
    SPILL_TRY(c == '-' || (c >= '0' && c <= '9') ? tj_number(j, &v) : tj_skip(j));
    dst[len] = '\0';
    SPILL_FAIL_IF(j->e, v < 0 || v >= (1 << 24) || v != (double)(int)v, SPILL_E_FORMAT,
                  "tokenizer.json: vocab entry \"%.40s\" has a bad id", dst);
    if (v > d->max_id) d->max_id = v;
    if (d->n_ents == cap) {
      cap = cap ? 2 * cap : 1 << 16;
      vocab_ent *g = realloc(d->ents, cap * sizeof *g);
      SPILL_FAIL_IF(j->e, !g, SPILL_E_NOMEM, "tokenizer.json: no memory");
      d->ents = g;
    }
    d->ents[d->n_ents++] = (vocab_ent){(int32_t)v, (uint32_t)len, t->arena_len};
    t->arena_len += len + 1;
  }
  return r;
}

/* The common pair form, ["a", "b"] (any whitespace), read in one go at
 * j (on its '['): 1 when it was that (j past the ']'); 0 otherwise (j is
 * then anywhere: the caller restarts the element). */
static int read_pair_fast(tok_json *j, char *buf, size_t *la, size_t *lb) {
  spill_err *keep = j->e, scratch;
  j->e = &scratch; /* a failure here is retried by the general path */
  j->i++;
  int ok = tj_peek(j) == '"' && tj_string(j, buf, la) == SPILL_OK && tj_peek(j) == ',';
  if (ok) {
    j->i++;
    ok = tj_peek(j) == '"' && tj_string(j, buf + *la, lb) == SPILL_OK && tj_peek(j) == ']';
  }
  j->e = keep;
  if (ok) j->i++;
  return ok;
}

/* One merge at j (a "a b" string or an ["a", "b"] pair) decoded into buf:
 * a = buf[0..*la), b = buf[*la..*la + *lb). *ok 0 if it is not a pair. */
static int read_merge(tok_json *j, char *buf, size_t *la, size_t *lb, int *ok) {
  *ok = 0;
  int c = tj_peek(j);
  if (c == '"') {
    size_t len;
    SPILL_TRY(tj_string(j, buf, &len));
    char *sp = memchr(buf, ' ', len);
    if (!sp) return SPILL_OK;
    *la = (size_t)(sp - buf);
    memmove(sp, sp + 1, len - *la - 1);
    *lb = len - *la - 1;
    *ok = *la > 0 && *lb > 0;
    return SPILL_OK;
  }
  if (c != '[') return tj_skip(j);
  size_t open = j->i;
  if (read_pair_fast(j, buf, la, lb)) {
    *ok = *la > 0 && *lb > 0;
    return SPILL_OK;
  }
  j->i = open; /* anything else: element by element */
  size_t n = 0, got = 0;
  j->i++;
  int first = 1, r;
  while ((r = tj_next(j, &first, ']')) == 1) {
    if (n < 2 && tj_peek(j) == '"') {
      size_t len;
      SPILL_TRY(tj_string(j, buf + got, &len));
      if (n == 0) *la = len; else *lb = len;
      got += len;
      n++;
    } else {
      SPILL_TRY(tj_skip(j));
      n = 3;
    }
  }
  SPILL_TRY(r);
  *ok = n == 2 && *la > 0 && *lb > 0;
  return SPILL_OK;
}

/* model.merges, one pass, as written (un-mapped later, once the
 * pre-tokenizer says whether the vocabulary is byte-level). */
static int read_merges(tok_json *j, hf_doc *d) {
  size_t cap = d->n_ents > 1024 ? d->n_ents : 1024, rpos = 0; /* merges ~ vocabulary */
  d->ms = malloc(cap * sizeof *d->ms);
  SPILL_FAIL_IF(j->e, !d->ms, SPILL_E_NOMEM, "tokenizer.json: no memory for the merges");
  SPILL_FAIL_IF(j->e, j->n >= UINT32_MAX, SPILL_E_FORMAT, "tokenizer.json: over 4 GiB");
  d->raw = malloc(j->n + 1);
  SPILL_FAIL_IF(j->e, !d->raw, SPILL_E_NOMEM, "tokenizer.json: no memory for the merges");
  int first = 1, r;
  SPILL_TRY(tj_expect(j, '['));
  while ((r = tj_next(j, &first, ']')) == 1) {
    size_t la = 0, lb = 0;
    int ok;
    SPILL_TRY(read_merge(j, d->raw + rpos, &la, &lb, &ok));
    SPILL_FAIL_IF(j->e, !ok, SPILL_E_FORMAT, "tokenizer.json: merge %zu is not a pair", d->n_ms);
    if (d->n_ms == cap) {
      cap *= 2;
      merge_txt *g = realloc(d->ms, cap * sizeof *g);
      SPILL_FAIL_IF(j->e, !g, SPILL_E_NOMEM, "tokenizer.json: no memory for the merges");
      d->ms = g;
    }
    d->ms[d->n_ms++] = (merge_txt){(uint32_t)rpos, (uint32_t)la, (uint32_t)lb, 0};
    rpos += la + lb;
  }
  return r;
}

/* The members of "model": vocab and merges read here, the rest into obj. */
static int split_model(tok_json *j, cJSON *obj, spill_tok *t, hf_doc *d, char **key) {
  SPILL_TRY(tj_expect(j, '{'));
  int first = 1, r;
  while ((r = tj_next(j, &first, '}')) == 1) {
    SPILL_TRY(member_key(j, key));
    int c = tj_peek(j);
    if (!strcmp(*key, "vocab") && !d->vocab_seen) {
      d->vocab_seen = 1;
      d->vocab_bad = c != '{';
      SPILL_TRY(c == '{' ? read_vocab(j, t, d) : tj_skip(j));
      SPILL_TRY(add_placeholder(j, obj, "vocab"));
    } else if (!strcmp(*key, "merges") && !d->merges_seen) {
      d->merges_seen = 1;
      d->merges_bad = c != '[';
      SPILL_TRY(c == '[' ? read_merges(j, d) : tj_skip(j));
      SPILL_TRY(add_placeholder(j, obj, "merges"));
    } else {
      SPILL_TRY(add_member(j, obj, *key));
    }
  }
  return r;
}

static int split_doc(const char *json, size_t len, spill_tok *t, hf_doc *d, spill_err *e) {
  tok_json j = {json, len, 0, "tokenizer.json", e};
  d->max_id = -1;
  d->root = cJSON_CreateObject();
  SPILL_FAIL_IF(e, !d->root, SPILL_E_NOMEM, "tokenizer.json: no memory");
  char *key = NULL;
  int first = 1, seen_model = 0, r = tj_expect(&j, '{');
  while (r == SPILL_OK && (r = tj_next(&j, &first, '}')) == 1) {
    r = member_key(&j, &key);
    if (r == SPILL_OK && !strcmp(key, "model") && !seen_model && tj_peek(&j) == '{') {
      seen_model = 1;
      cJSON *model = cJSON_CreateObject();
      r = model ? split_model(&j, model, t, d, &key)
                : spill_err_set(e, SPILL_E_NOMEM, "tokenizer.json: no memory");
      if (model) cJSON_AddItemToObject(d->root, "model", model);
    } else if (r == SPILL_OK) {
      r = add_member(&j, d->root, key);
    }
  }
  free(key);
  if (r == SPILL_OK && tj_peek(&j) >= 0) r = tj_fail(&j, "content after the object");
  /* the one JSON layer's rule on the assembled members: a repeated key (cJSON
   * kept the first copy, Python and transformers the last) named by its path */
  if (r == SPILL_OK) r = spill_json_check_tree(d->root, "tokenizer.json", SPILL_E_FORMAT, e);
  return r;
}

static void free_doc(hf_doc *d) {
  cJSON_Delete(d->root);
  free(d->ents);
  free(d->raw);
  free(d->ms);
}

/* ---- model ---------------------------------------------------------------- */

static int check_model(const cJSON *model, spill_err *e) {
  const char *mtype = jstr(model, "type");
  SPILL_FAIL_IF(e, !model, SPILL_E_FORMAT, "tokenizer.json: no model");
  SPILL_FAIL_IF(e, mtype && strcmp(mtype, "BPE"), SPILL_E_UNSUPPORTED,
                "tokenizer.json: model type %s is not supported (only BPE)", mtype);
  const char *csp = jstr(model, "continuing_subword_prefix"),
             *eow = jstr(model, "end_of_word_suffix");
  SPILL_FAIL_IF(e, (csp && *csp) || (eow && *eow), SPILL_E_UNSUPPORTED,
                "tokenizer.json: continuing_subword_prefix / end_of_word_suffix are not supported");
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  SPILL_FAIL_IF(e, cJSON_IsNumber(dropout) && dropout->valuedouble > 0, SPILL_E_UNSUPPORTED,
                "tokenizer.json: BPE dropout is not supported");
  return SPILL_OK;
}

/* Un-maps the vocabulary from GPT-2's byte alphabet (a token outside it keeps
 * its text), gives every entry its id (a later entry with the same id wins),
 * and returns the arena's spare room. */
static int assign_vocab(spill_tok *t, hf_doc *d, int bytelevel, spill_err *e) {
  char scratch[1024], *big = NULL;
  for (size_t k = 0; k < d->n_ents; k++) {
    vocab_ent *v = &d->ents[k];
    char *s = t->arena + v->off;
    if (bytelevel) {
      char *u = v->len <= sizeof scratch ? scratch : (free(big), big = malloc(v->len));
      SPILL_FAIL_IF(e, !u, SPILL_E_NOMEM, "tokenizer.json: no memory");
      long m = tok_unmap_bytelevel(s, v->len, u);
      if (m >= 0) { memcpy(s, u, (size_t)m); v->len = (uint32_t)m; s[m] = '\0'; }
    }
    t->tok_off[v->id] = ((uint64_t)v->off << 24) | v->len;
    t->flags[v->id] &= (uint8_t)~TOK_F_UNUSED;
  }
  free(big);
  if (t->arena_len > 0) {
    char *a = realloc(t->arena, t->arena_len);
    if (a) { t->arena = a; t->arena_cap = t->arena_len; }
  }
  return SPILL_OK;
}

/* The merges' tokens as vocabulary bytes: un-mapped from GPT-2's byte
 * alphabet in place when byte-level (a token outside it keeps its text). */
static int unmap_merges(hf_doc *d, spill_err *e) {
  char small[1024], *big = NULL;
  for (size_t k = 0; k < d->n_ms; k++) {
    merge_txt *x = &d->ms[k];
    char *a = d->raw + x->off, *u = small;
    if ((size_t)x->la + x->lb > sizeof small) {
      free(big);
      u = big = malloc((size_t)x->la + x->lb);
      SPILL_FAIL_IF(e, !big, SPILL_E_NOMEM, "tokenizer.json: no memory");
    }
    long na = tok_unmap_bytelevel(a, x->la, u);
    long nb = na >= 0 ? tok_unmap_bytelevel(a + x->la, x->lb, u + na) : -1;
    if (na < 0 || nb < 0) continue;
    memcpy(a, u, (size_t)(na + nb));
    x->la = (uint32_t)na;
    x->lb = (uint32_t)nb;
    x->mapped = 1;
  }
  free(big);
  return SPILL_OK;
}

/* A merge token as the file wrote it (GPT-2's alphabet re-applied). */
static const char *file_text(const char *s, size_t len, int mapped, char *buf, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 3 < cap; i++) {
    uint32_t cp = mapped ? tok_byte_to_cp((unsigned char)s[i]) : (unsigned char)s[i];
    if (cp < 0x80 || !mapped) buf[o++] = (char)cp;
    else { buf[o++] = (char)(0xC0 | cp >> 6); buf[o++] = (char)(0x80 | (cp & 0x3F)); }
  }
  buf[o] = '\0';
  return buf;
}

/* The merge's result a+b (u[0..len)) is token `guess` when that token's
 * text is exactly u and no other token has the same text (a vocabulary in
 * merge order: id = rank + a constant): a check of one record, in id order,
 * instead of a hash lookup. */
static int result_is(const spill_tok *t, int32_t guess, const char *u, size_t len) {
  if (t->vocab_dup || guess < 0 || guess >= t->n_vocab || (t->flags[guess] & TOK_F_UNUSED))
    return 0;
  size_t l2;
  const char *s2 = tok_bytes(t, guess, &l2);
  return l2 == len && memcmp(s2, u, len) == 0;
}

/* Resolves the merges' tokens a and b (and a+b where result_is cannot tell)
 * in batches whose lookups overlap their cache misses, and fills the pair
 * table in rank order. */
static int resolve_merges(spill_tok *t, const hf_doc *d, spill_err *e) {
  enum { B = 64 };
  const char *s[3 * B];
  size_t len[3 * B];
  uint64_t h[3 * B];
  int32_t id[3 * B], abm[3 * B], c_id[B];
  int64_t delta = -((int64_t)1 << 40); /* id(a+b) - rank of the last merge (none yet) */
  size_t n = d->n_ms;
  SPILL_TRY(tok_pairmap_init(&t->merges, n + 1, e));
  for (size_t base = 0; base < n; base += B) {
    size_t m = n - base < B ? n - base : B, q = 0;
    for (size_t k = 0; k < m; k++) {
      const merge_txt *x = &d->ms[base + k];
      const char *u = d->raw + x->off;
      uint64_t ha = tok_hash(u, x->la), hb = tok_hash(u + x->la, x->lb);
      s[q] = u, len[q] = x->la, h[q++] = ha;
      s[q] = u + x->la, len[q] = x->lb, h[q++] = hb;
      int64_t g = (int64_t)(base + k) + delta;
      c_id[k] = g >= 0 && g < t->n_vocab && result_is(t, (int32_t)g, u, x->la + x->lb)
                    ? (int32_t)g : -1;
      if (c_id[k] < 0) s[q] = u, len[q] = x->la + x->lb, h[q++] = tok_hash_concat(ha, hb, x->lb);
    }
    tok_strmap_get_many(t, q, s, len, h, id);
    q = 0;
    for (size_t k = 0; k < m; k++) {
      const merge_txt *x = &d->ms[base + k];
      abm[3 * k] = id[q++];
      abm[3 * k + 1] = id[q++];
      abm[3 * k + 2] = c_id[k] >= 0 ? c_id[k] : id[q++];
      if (abm[3 * k + 2] >= 0) delta = (int64_t)abm[3 * k + 2] - (int64_t)(base + k);
      char ta[128], tb[128];
      const char *u = d->raw + x->off;
      SPILL_FAIL_IF(e, abm[3 * k] < 0 || abm[3 * k + 1] < 0 || abm[3 * k + 2] < 0, SPILL_E_FORMAT,
                    "tokenizer.json: merge %zu (\"%s\" \"%s\") names a token not in the vocabulary",
                    base + k, file_text(u, x->la, x->mapped, ta, sizeof ta),
                    file_text(u + x->la, x->lb, x->mapped, tb, sizeof tb));
    }
    tok_pairmap_put_many(&t->merges, m, abm, NULL, (uint32_t)base);
  }
  return SPILL_OK;
}

/* added_tokens: matched before splitting. */
static int load_added(spill_tok *t, const cJSON *added, spill_err *e) {
  const cJSON *it;
  cJSON_ArrayForEach(it, added) {
    int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
    const char *content = jstr(it, "content");
    SPILL_FAIL_IF(e, jbool(it, "single_word", 0), SPILL_E_UNSUPPORTED,
                  "tokenizer.json: added token %d with single_word=true", id);
    size_t len = strlen(content);
    size_t have;
    if ((t->flags[id] & TOK_F_UNUSED) || tok_bytes(t, id, &have) == NULL || have != len ||
        memcmp(tok_bytes(t, id, &have), content, len) != 0)
      SPILL_TRY(tok_set_token(t, id, content, len, e));
    t->flags[id] |= TOK_F_ADDED;
    if (jbool(it, "special", 0)) t->flags[id] |= TOK_F_SPECIAL;
    if (jbool(it, "lstrip", 0)) t->flags[id] |= TOK_F_LSTRIP;
    if (jbool(it, "rstrip", 0)) t->flags[id] |= TOK_F_RSTRIP;
    SPILL_TRY(tok_trie_add(t, content, len, id, e));
  }
  return SPILL_OK;
}

static int check_added_ids(const cJSON *added, double *max_id, spill_err *e) {
  const cJSON *it;
  cJSON_ArrayForEach(it, added) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    SPILL_FAIL_IF(e, !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
                         !jstr(it, "content"),
                  SPILL_E_FORMAT, "tokenizer.json: added token without id/content");
    if (id->valuedouble > *max_id) *max_id = id->valuedouble;
  }
  return SPILL_OK;
}

static int load_model(spill_tok *t, hf_doc *d, hf_state *st, spill_err *e) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(d->root, "model");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(d->root, "added_tokens");
  SPILL_TRY(check_model(model, e));
  SPILL_FAIL_IF(e, !d->vocab_seen || d->vocab_bad, SPILL_E_FORMAT,
                "tokenizer.json: model.vocab missing");
  SPILL_FAIL_IF(e, d->merges_bad, SPILL_E_FORMAT, "tokenizer.json: model.merges is not an array");
  double max_id = d->max_id;
  SPILL_TRY(check_added_ids(added, &max_id, e));
  SPILL_TRY(tok_alloc_vocab(t, (int)max_id + 1, d->n_ents + (size_t)cJSON_GetArraySize(added), e));
  SPILL_TRY(assign_vocab(t, d, st->bytelevel, e));
  SPILL_TRY(tok_strmap_build(t, e));
  tok_set_byte_ids(t, st->bytelevel);
  if (st->bytelevel) SPILL_TRY(unmap_merges(d, e));
  SPILL_TRY(resolve_merges(t, d, e));
  SPILL_TRY(load_added(t, added, e));
  t->ignore_merges = jbool(model, "ignore_merges", 0);
  t->byte_fallback = jbool(model, "byte_fallback", 0);
  t->fuse_unk = jbool(model, "fuse_unk", 0);
  const char *unk = jstr(model, "unk_token");
  if (unk) t->unk_id = spill_tok_find(t, unk, strlen(unk));
  return SPILL_OK;
}

int spill_tok_load_hf(const char *json, size_t len, const char *config_json, size_t config_len,
                      spill_tok **out, spill_err *e) {
  SPILL_FAIL_IF(e, !json || !out, SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  *out = NULL;
  hf_doc d = {0};
  spill_tok *t = calloc(1, sizeof *t);
  int rc = t ? split_doc(json, len, t, &d, e)
             : spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
  const cJSON *root = d.root;
  hf_state st = {0};
  if (rc == SPILL_OK) rc = load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), e);
  if (rc == SPILL_OK)
    rc = load_pretok(t, &st, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), e);
  if (rc == SPILL_OK) rc = load_decoder(t, &st, cJSON_GetObjectItemCaseSensitive(root, "decoder"), e);
  if (rc == SPILL_OK) {
    t->kind = st.bytelevel ? TOK_BYTELEVEL : TOK_SENTENCEPIECE;
    if (st.bytelevel && (t->spm_prepend || t->spm_replace_space))
      rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "tokenizer.json: ByteLevel mixed with SentencePiece normalisers");
  }
  if (rc == SPILL_OK) rc = load_model(t, &d, &st, e);
  if (rc == SPILL_OK) rc = load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), e);
  if (rc == SPILL_OK && t->n_prefix > 0) t->bos_id = t->prefix_ids[0];
  if (rc == SPILL_OK && config_json) rc = tok_apply_config(t, config_json, config_len, e);
  if (rc == SPILL_OK) rc = tok_finish(t, e);
  free_doc(&d);
  if (rc < 0) {
    spill_tok_free(t);
    return rc;
  }
  *out = t;
  return SPILL_OK;
}
