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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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

static int load_config(spill_tok *t, const char *cj, size_t clen, spill_err *e) {
  cJSON *cfg = cJSON_ParseWithLength(cj, clen);
  if (!cfg || !cJSON_IsObject(cfg)) {
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

static int load_model(spill_tok *t, const cJSON *root, hf_state *st, spill_err *e) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
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
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  SPILL_FAIL_IF(e, !cJSON_IsObject(vocab), SPILL_E_FORMAT, "tokenizer.json: model.vocab missing");
  SPILL_FAIL_IF(e, merges && !cJSON_IsArray(merges), SPILL_E_FORMAT,
                "tokenizer.json: model.merges is not an array");
  double max_id = -1;
  const cJSON *it;
  cJSON_ArrayForEach(it, vocab) {
    SPILL_FAIL_IF(e, !cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24) ||
                         it->valuedouble != (double)(int)it->valuedouble,
                  SPILL_E_FORMAT, "tokenizer.json: vocab entry \"%.40s\" has a bad id", it->string);
    if (it->valuedouble > max_id) max_id = it->valuedouble;
  }
  cJSON_ArrayForEach(it, added) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    SPILL_FAIL_IF(e, !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
                         !jstr(it, "content"),
                  SPILL_E_FORMAT, "tokenizer.json: added token without id/content");
    if (id->valuedouble > max_id) max_id = id->valuedouble;
  }
  SPILL_TRY(tok_alloc_vocab(t, (int)max_id + 1, e));
  char *buf = NULL;
  size_t cap = 0;
  cJSON_ArrayForEach(it, vocab) {
    const char *s = it->string;
    size_t len = strlen(s);
    int32_t id = (int32_t)it->valuedouble;
    if (st->bytelevel) {
      if (len + 1 > cap) {
        cap = 2 * len + 64;
        free(buf);
        buf = malloc(cap);
        SPILL_FAIL_IF(e, !buf, SPILL_E_NOMEM, "tokenizer.json: no memory");
      }
      long n = tok_unmap_bytelevel(s, len, buf);
      if (n >= 0) { s = buf; len = (size_t)n; }
    }
    int rc = tok_set_token(t, id, s, len, e);
    if (rc < 0) { free(buf); return rc; }
  }
  SPILL_TRY(tok_strmap_build(t, e));
  /* byte tokens */
  for (int b = 0; b < 256; b++) {
    if (st->bytelevel) {
      char c = (char)b;
      t->byte_id[b] = tok_strmap_get(t, &c, 1);
    } else {
      char name[8];
      snprintf(name, sizeof name, "<0x%02X>", b);
      int32_t id = tok_strmap_get(t, name, 6);
      t->byte_id[b] = id;
      if (id >= 0) t->flags[id] |= TOK_F_BYTE;
    }
  }
  /* merges */
  int n_merges = cJSON_GetArraySize(merges);
  int rc = tok_pairmap_init(&t->merges, (size_t)n_merges + 1, e);
  uint32_t rank = 0;
  if (rc == SPILL_OK) cJSON_ArrayForEach(it, merges) {
    const char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    if (cJSON_IsString(it)) {
      const char *sp = strchr(it->valuestring, ' ');
      if (sp) { a = it->valuestring; la = (size_t)(sp - a); b = sp + 1; lb = strlen(b); }
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
      const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
      if (cJSON_IsString(x) && cJSON_IsString(y)) {
        a = x->valuestring; la = strlen(a); b = y->valuestring; lb = strlen(b);
      }
    }
    if (!a || !b || la == 0 || lb == 0) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "tokenizer.json: merge %u is not a pair", rank);
      break;
    }
    if (la + lb + 1 > cap) {
      cap = 2 * (la + lb) + 64;
      free(buf);
      buf = malloc(cap);
      if (!buf) { rc = spill_err_set(e, SPILL_E_NOMEM, "tokenizer.json: no memory"); break; }
    }
    long na = (long)la, nb = (long)lb;
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    if (st->bytelevel) {
      na = tok_unmap_bytelevel(a, la, buf);
      nb = na >= 0 ? tok_unmap_bytelevel(b, lb, buf + na) : -1;
      if (na < 0 || nb < 0) { /* a token outside the byte alphabet: keep its text */
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        na = (long)la;
        nb = (long)lb;
      }
    }
    int32_t ia = tok_strmap_get(t, buf, (size_t)na), ib = tok_strmap_get(t, buf + na, (size_t)nb);
    int32_t im = tok_strmap_get(t, buf, (size_t)(na + nb));
    if (ia < 0 || ib < 0 || im < 0) {
      rc = spill_err_set(e, SPILL_E_FORMAT,
                         "tokenizer.json: merge %u (\"%.*s\" \"%.*s\") names a token not in the "
                         "vocabulary",
                         rank, (int)la, a, (int)lb, b);
      break;
    }
    tok_pairmap_put(&t->merges, ia, ib, rank, im);
    rank++;
  }
  free(buf);
  SPILL_TRY(rc);
  /* added tokens: matched before splitting */
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
  cJSON *root = cJSON_ParseWithLength(json, len);
  if (!root || !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return spill_err_set(e, SPILL_E_FORMAT, "tokenizer.json: not a JSON object");
  }
  spill_tok *t = calloc(1, sizeof *t);
  int rc = t ? SPILL_OK : spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
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
  if (rc == SPILL_OK) rc = load_model(t, root, &st, e);
  if (rc == SPILL_OK) rc = load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), e);
  if (rc == SPILL_OK && t->n_prefix > 0) t->bos_id = t->prefix_ids[0];
  if (rc == SPILL_OK && config_json) rc = load_config(t, config_json, config_len, e);
  if (rc == SPILL_OK) rc = tok_finish(t, e);
  cJSON_Delete(root);
  if (rc < 0) {
    spill_tok_free(t);
    return rc;
  }
  *out = t;
  return SPILL_OK;
}
