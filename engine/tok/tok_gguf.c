/* engine/tok/tok_gguf.c: a tokenizer from a GGUF file's tokenizer.ggml.*
 * metadata (read with engine/import's GGUF reader), so a GGUF alone brings
 * its tokenizer.
 *
 * tokenizer.ggml.model "gpt2": byte-level BPE; tokens are GPT-2-mapped
 * strings, merges "a b" strings, and the pre-tokenizer is named by
 * tokenizer.ggml.pre (the names llama.cpp's converter writes; each maps to
 * the split regexes of the original tokenizer.json, and "qwen2" also to its
 * NFC normaliser, which llama.cpp itself skips). Token types 3 (control)
 * and 4 (user-defined) are added tokens matched before splitting; control
 * ones are special.
 * tokenizer.ggml.model "llama": SentencePiece vocabulary with scores, merged
 * as llama.cpp does: the adjacent pair whose concatenation is a token with
 * the highest score merges first (leftmost on ties), characters missing from
 * the vocabulary fall back to <0xXX> byte tokens, ' ' -> U+2581 with one
 * U+2581 prepended (tokenizer.ggml.add_space_prefix, default true).
 * BOS/EOS from tokenizer.ggml.{bos,eos}_token_id, add_bos_token /
 * add_eos_token; tokenizer.chat_template is kept.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/import/gguf.h"
#include "engine/tok/tok_internal.h"

int tok_load_gguf(const char *path, spill_tok **out, spill_err *e);

#define QWEN2_PAT                                                                           \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5 (llama.cpp's QWEN35): Qwen2's split with combining marks kept in
 * words, [\p{L}\p{M}]+ and [^\s\p{L}\p{M}\p{N}] */
#define QWEN35_PAT                                                                     \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                  \
  "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_PAT                                                                              \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
  "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT2_PAT \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Pre-tokenizer names -> split regexes (in order), NFC, ignore_merges. */
static const struct pre_def {
  const char *name;
  const char *pat[3];
  int nfc, ignore_merges;
} PRE[] = {
    {"qwen2", {QWEN2_PAT}, 1, 0},
    {"qwen35", {QWEN35_PAT}, 1, 0},
    {"llama-bpe", {LLAMA3_PAT}, 0, 1},
    {"llama3", {LLAMA3_PAT}, 0, 1},
    /* GLM-4.5/4.6/4.7 (llama.cpp's CHATGLM4: Llama 3's split, merges applied) */
    {"glm4", {LLAMA3_PAT}, 0, 0},
    {"chatglm-bpe", {LLAMA3_PAT}, 0, 0},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
      "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     0, 0},
    {"gpt-2", {GPT2_PAT}, 0, 0},
    {"olmo", {GPT2_PAT}, 0, 0},
    {"default", {GPT2_PAT}, 0, 0},
    {"gpt-4o", {SPILL_TOK_PAT_O200K}, 0, 1},
    {"kimi-k2", {SPILL_TOK_PAT_KIMI}, 0, 1},
};

static const spill_gguf_kv *str_array(const spill_gguf *g, const char *key) {
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  if (!kv || kv->type != SPILL_GGUF_ARRAY || kv->elem != SPILL_GGUF_STRING) return NULL;
  return kv;
}

static int opt_int(const spill_gguf *g, const char *key, int64_t dflt, int64_t *out, spill_err *e) {
  *out = dflt;
  if (!spill_gguf_find_kv(g, key)) return SPILL_OK;
  return spill_gguf_get_i64(g, key, out, e);
}

static int opt_bool(const spill_gguf *g, const char *key, int dflt, int *out, spill_err *e) {
  *out = dflt;
  if (!spill_gguf_find_kv(g, key)) return SPILL_OK;
  return spill_gguf_get_bool(g, key, out, e);
}

/* SentencePiece score merging: rank = dense rank of -score. */
static int spm_merges(spill_tok *t, const spill_gguf_kv *scores, spill_err *e) {
  size_t n = (size_t)t->n_vocab;
  double *sc = malloc(n * sizeof *sc);
  int32_t *order = malloc(n * sizeof *order);
  uint32_t *rank = malloc(n * sizeof *rank);
  if (!sc || !order || !rank) {
    free(sc); free(order); free(rank);
    return spill_err_set(e, SPILL_E_NOMEM, "gguf tokenizer: no memory");
  }
  int rc = SPILL_OK;
  for (size_t i = 0; i < n && rc == SPILL_OK; i++) {
    sc[i] = 0;
    if (scores) rc = spill_gguf_arr_f64(scores, i, &sc[i], e);
    order[i] = (int32_t)i;
  }
  /* sort ids by score descending (shell sort, stable enough: equal scores share a rank) */
  for (size_t gap = n / 2; rc == SPILL_OK && gap > 0; gap /= 2)
    for (size_t i = gap; i < n; i++) {
      int32_t x = order[i];
      size_t j = i;
      while (j >= gap && sc[order[j - gap]] < sc[x]) { order[j] = order[j - gap]; j -= gap; }
      order[j] = x;
    }
  uint32_t r = 0;
  for (size_t i = 0; rc == SPILL_OK && i < n; i++) {
    if (i > 0 && sc[order[i]] != sc[order[i - 1]]) r++;
    rank[order[i]] = r;
  }
  if (rc == SPILL_OK) {
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
      size_t len;
      if (t->flags[id] & (TOK_F_UNUSED | TOK_F_ADDED | TOK_F_BYTE)) continue;
      tok_bytes(t, id, &len);
      if (len > 1) total += len - 1;
    }
    rc = tok_pairmap_init(&t->merges, total / 2 + 16, e);
  }
  for (int32_t id = 0; rc == SPILL_OK && id < t->n_vocab; id++) {
    if (t->flags[id] & (TOK_F_UNUSED | TOK_F_ADDED | TOK_F_BYTE)) continue;
    size_t len;
    const char *s = tok_bytes(t, id, &len);
    for (size_t k = 1; k < len; k++) {
      if (((unsigned char)s[k] & 0xC0) == 0x80) continue; /* split at character boundaries */
      int32_t a = tok_strmap_get(t, s, k), b = tok_strmap_get(t, s + k, len - k);
      if (a >= 0 && b >= 0) tok_pairmap_put(&t->merges, a, b, rank[id], id);
    }
  }
  free(sc);
  free(order);
  free(rank);
  return rc;
}

/* Grows a scratch buffer to at least n bytes. */
static int grow(char **buf, size_t *cap, size_t n, spill_err *e) {
  if (n <= *cap) return SPILL_OK;
  char *nb = realloc(*buf, n);
  SPILL_FAIL_IF(e, !nb, SPILL_E_NOMEM, "gguf tokenizer: no memory");
  *buf = nb;
  *cap = n;
  return SPILL_OK;
}

/* tokenizer.ggml.tokens (+ token_type): pass 1 the ordinary tokens (the
 * vocabulary map holds only these), pass 2 the added ones (3 control =
 * special, 4 user-defined) into the trie. */
static int load_tokens(const spill_gguf_kv *tokens, const spill_gguf_kv *types, int bytelevel,
                       spill_tok *t, spill_err *e) {
  char *buf = NULL;
  size_t cap = 0;
  int rc = SPILL_OK;
  for (uint64_t i = 0; rc == SPILL_OK && i < tokens->n; i++) {
    int64_t ty = 1;
    if (types) rc = spill_gguf_arr_i64(types, i, &ty, e);
    if (rc < 0) break;
    const char *s = tokens->str[i];
    size_t sl = (size_t)tokens->str_len[i];
    if (ty == 3 || ty == 4) continue; /* added tokens: pass 2 */
    if (bytelevel && ty != 6) {
      rc = grow(&buf, &cap, sl + 1, e);
      if (rc < 0) break;
      long n = tok_unmap_bytelevel(s, sl, buf);
      if (n >= 0) { s = buf; sl = (size_t)n; }
    }
    rc = tok_set_token(t, (int32_t)i, s, sl, e);
    if (rc == SPILL_OK && ty == 5) t->flags[i] |= TOK_F_UNUSED;
    if (rc == SPILL_OK && ty == 2) t->unk_id = (int32_t)i;
  }
  free(buf);
  if (rc == SPILL_OK) rc = tok_strmap_build(t, e);
  for (uint64_t i = 0; rc == SPILL_OK && i < tokens->n; i++) {
    int64_t ty = 1;
    if (types) rc = spill_gguf_arr_i64(types, i, &ty, e);
    if (rc < 0 || (ty != 3 && ty != 4)) continue;
    const char *s = tokens->str[i];
    size_t sl = (size_t)tokens->str_len[i];
    rc = tok_set_token(t, (int32_t)i, s, sl, e);
    if (rc == SPILL_OK) {
      t->flags[i] |= TOK_F_ADDED | (ty == 3 ? TOK_F_SPECIAL : 0);
      if (sl > 0) rc = tok_trie_add(t, s, sl, (int32_t)i, e);
    }
  }
  return rc;
}

/* Byte-level BPE: tokenizer.ggml.merges ("a b" in GPT-2's alphabet) and the
 * split regexes named by tokenizer.ggml.pre. */
static int load_bpe(const spill_gguf *g, const char *pre, spill_tok *t, spill_err *e) {
  const spill_gguf_kv *merges = str_array(g, "tokenizer.ggml.merges");
  SPILL_FAIL_IF(e, !merges, SPILL_E_FORMAT, "gguf: tokenizer.ggml.merges missing");
  int rc = tok_pairmap_init(&t->merges, (size_t)merges->n + 1, e);
  char *buf = NULL;
  size_t cap = 0;
  for (uint64_t r = 0; rc == SPILL_OK && r < merges->n; r++) {
    const char *m = merges->str[r];
    size_t ml = (size_t)merges->str_len[r];
    const char *sp = memchr(m, ' ', ml);
    if (!sp || sp == m || sp + 1 == m + ml) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "gguf: merge %llu is not \"a b\"", (unsigned long long)r);
      break;
    }
    rc = grow(&buf, &cap, ml + 1, e);
    if (rc < 0) break;
    size_t la = (size_t)(sp - m), lb = ml - la - 1;
    long na = tok_unmap_bytelevel(m, la, buf);
    long nb2 = na >= 0 ? tok_unmap_bytelevel(sp + 1, lb, buf + na) : -1;
    if (na < 0 || nb2 < 0) {
      memcpy(buf, m, la);
      memcpy(buf + la, sp + 1, lb);
      na = (long)la;
      nb2 = (long)lb;
    }
    int32_t ia = tok_strmap_get(t, buf, (size_t)na), ib = tok_strmap_get(t, buf + na, (size_t)nb2);
    int32_t im = tok_strmap_get(t, buf, (size_t)(na + nb2));
    if (ia < 0 || ib < 0 || im < 0) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "gguf: merge %llu names a token not in the vocabulary",
                         (unsigned long long)r);
      break;
    }
    tok_pairmap_put(&t->merges, ia, ib, (uint32_t)r, im);
  }
  free(buf);
  SPILL_TRY(rc);
  const struct pre_def *pd = NULL;
  for (size_t k = 0; k < sizeof PRE / sizeof *PRE; k++)
    if (pre && !strcmp(pre, PRE[k].name)) pd = &PRE[k];
  SPILL_FAIL_IF(e, !pd, SPILL_E_UNSUPPORTED, "gguf: tokenizer.ggml.pre \"%s\" is not supported",
                pre ? pre : "(absent)");
  for (int k = 0; k < 3 && pd->pat[k]; k++) SPILL_TRY(tok_add_split(t, pd->pat[k], e));
  t->nfc = pd->nfc;
  t->ignore_merges = pd->ignore_merges;
  return SPILL_OK;
}

/* BOS/EOS ids and whether to add them; the chat template. */
static int load_specials(const spill_gguf *g, int bytelevel, spill_tok *t, spill_err *e) {
  int64_t bos, eos;
  int add_bos, add_eos;
  SPILL_TRY(opt_int(g, "tokenizer.ggml.bos_token_id", -1, &bos, e));
  SPILL_TRY(opt_int(g, "tokenizer.ggml.eos_token_id", -1, &eos, e));
  SPILL_FAIL_IF(e, bos >= t->n_vocab || eos >= t->n_vocab, SPILL_E_FORMAT,
                "gguf: tokenizer.ggml.%s_token_id %lld is outside the vocabulary of %d tokens",
                bos >= t->n_vocab ? "bos" : "eos", (long long)(bos >= t->n_vocab ? bos : eos),
                t->n_vocab);
  t->bos_id = (int32_t)bos;
  t->eos_id = (int32_t)eos;
  SPILL_TRY(opt_bool(g, "tokenizer.ggml.add_bos_token", !bytelevel, &add_bos, e));
  SPILL_TRY(opt_bool(g, "tokenizer.ggml.add_eos_token", 0, &add_eos, e));
  if (add_bos && bos >= 0) t->prefix_ids[t->n_prefix++] = (int32_t)bos;
  if (add_eos && eos >= 0) t->suffix_ids[t->n_suffix++] = (int32_t)eos;
  if (spill_gguf_find_kv(g, "tokenizer.chat_template")) {
    const char *ct;
    uint64_t cl;
    SPILL_TRY(spill_gguf_get_str(g, "tokenizer.chat_template", &ct, &cl, e));
    t->chat_template = malloc((size_t)cl + 1);
    SPILL_FAIL_IF(e, !t->chat_template, SPILL_E_NOMEM, "gguf tokenizer: no memory");
    memcpy(t->chat_template, ct, (size_t)cl);
    t->chat_template[cl] = '\0';
  }
  return SPILL_OK;
}

static int load(const spill_gguf *g, spill_tok *t, spill_err *e) {
  const char *model = NULL, *pre = NULL;
  uint64_t len;
  SPILL_TRY(spill_gguf_get_str(g, "tokenizer.ggml.model", &model, &len, e));
  if (spill_gguf_find_kv(g, "tokenizer.ggml.pre"))
    SPILL_TRY(spill_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &len, e));
  int bytelevel = !strcmp(model, "gpt2");
  SPILL_FAIL_IF(e, !bytelevel && strcmp(model, "llama"), SPILL_E_UNSUPPORTED,
                "gguf: tokenizer.ggml.model \"%s\" is not supported (gpt2, llama)", model);
  const spill_gguf_kv *tokens = str_array(g, "tokenizer.ggml.tokens");
  SPILL_FAIL_IF(e, !tokens || tokens->n == 0 || tokens->n > (1u << 24), SPILL_E_FORMAT,
                "gguf: tokenizer.ggml.tokens missing or not an array of strings");
  const spill_gguf_kv *types = spill_gguf_find_kv(g, "tokenizer.ggml.token_type");
  SPILL_FAIL_IF(e, types && (types->type != SPILL_GGUF_ARRAY || types->n != tokens->n),
                SPILL_E_FORMAT, "gguf: tokenizer.ggml.token_type does not match the tokens");
  const spill_gguf_kv *scores = spill_gguf_find_kv(g, "tokenizer.ggml.scores");
  SPILL_FAIL_IF(e, scores && (scores->type != SPILL_GGUF_ARRAY || scores->n != tokens->n),
                SPILL_E_FORMAT, "gguf: tokenizer.ggml.scores does not match the tokens");
  t->kind = bytelevel ? TOK_BYTELEVEL : TOK_SENTENCEPIECE;
  SPILL_TRY(tok_alloc_vocab(t, (int)tokens->n, (size_t)tokens->n, e));
  SPILL_TRY(load_tokens(tokens, types, bytelevel, t, e));
  tok_set_byte_ids(t, bytelevel);
  if (bytelevel) {
    SPILL_TRY(load_bpe(g, pre, t, e));
  } else {
    int prefix = 1;
    SPILL_TRY(opt_bool(g, "tokenizer.ggml.add_space_prefix", 1, &prefix, e));
    t->spm_prepend = prefix;
    t->spm_replace_space = 1;
    t->spm_strip_leading = prefix;
    t->byte_fallback = 1;
    SPILL_TRY(spm_merges(t, scores, e));
  }
  SPILL_TRY(load_specials(g, bytelevel, t, e));
  return tok_finish(t, e);
}

int tok_load_gguf(const char *path, spill_tok **out, spill_err *e) {
  *out = NULL;
  spill_gguf g;
  memset(&g, 0, sizeof g);
  SPILL_TRY(spill_gguf_open(path, &g, e));
  spill_tok *t = calloc(1, sizeof *t);
  int rc = t ? load(&g, t, e) : spill_err_set(e, SPILL_E_NOMEM, "gguf tokenizer: no memory");
  spill_gguf_close(&g);
  if (rc < 0) {
    spill_tok_free(t);
    return rc;
  }
  *out = t;
  return SPILL_OK;
}
