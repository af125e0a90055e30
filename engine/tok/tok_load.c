/* engine/tok/tok_load.c: tokenizer sources other than tokenizer.json text:
 * the path dispatcher (spill_tok_load) and tiktoken rank files.
 *
 * tiktoken: one "base64(token bytes) rank" per line; the rank is the id.
 * Merging follows tiktoken exactly (lowest rank of the concatenation, whole
 * piece looked up first), through the merge table derived from the ranks.
 * The split regex is not in the file: SPILL_TOK_PAT_* (tok_patterns.c) give
 * the ones of o200k, cl100k and Kimi K2.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/tok/tok_internal.h"

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Decodes base64 s[0..n) into out; returns the length or -1. */
static long b64decode(const char *s, size_t n, unsigned char *out) {
  if (n % 4) return -1;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int v[4];
    for (int k = 0; k < 4; k++) {
      unsigned char c = (unsigned char)s[i + k];
      v[k] = c == '=' && i + 4 == n && k >= 2 ? -2 : b64val(c);
      if (v[k] == -1) return -1;
    }
    if (v[0] < 0 || v[1] < 0 || (v[2] == -2 && v[3] != -2)) return -1;
    out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
    if (v[2] >= 0) out[o++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
    if (v[3] >= 0) out[o++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
  }
  return (long)o;
}

int spill_tok_load_tiktoken(const char *ranks, size_t len, const char *pattern,
                            const char *const *special_text, const int *special_id,
                            int n_specials, spill_tok **out, spill_err *e) {
  SPILL_FAIL_IF(e, !ranks || !out || (n_specials > 0 && (!special_text || !special_id)),
                SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  *out = NULL;
  /* pass 1: count lines, max rank */
  long max_id = -1;
  size_t lines = 0;
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && ranks[j] != '\n') j++;
    size_t k = i;
    while (k < j && ranks[k] != ' ') k++;
    if (j > i) {
      SPILL_FAIL_IF(e, k >= j, SPILL_E_FORMAT, "tiktoken: line %zu has no rank", lines + 1);
      long r = 0;
      for (size_t q = k + 1; q < j; q++) {
        if (ranks[q] == '\r' && q + 1 == j) break;
        SPILL_FAIL_IF(e, ranks[q] < '0' || ranks[q] > '9' || r > (1 << 24), SPILL_E_FORMAT,
                      "tiktoken: line %zu: bad rank", lines + 1);
        r = r * 10 + (ranks[q] - '0');
      }
      if (r > max_id) max_id = r;
      lines++;
    }
    i = j + 1;
  }
  SPILL_FAIL_IF(e, lines == 0, SPILL_E_FORMAT, "tiktoken: no ranks");
  for (int s = 0; s < n_specials; s++)
    if (special_id[s] > max_id) max_id = special_id[s];
  spill_tok *t = calloc(1, sizeof *t);
  SPILL_FAIL_IF(e, !t, SPILL_E_NOMEM, "tokenizer: no memory");
  t->kind = TOK_TIKTOKEN;
  t->ignore_merges = 1;
  int rc = tok_alloc_vocab(t, (int)max_id + 1, lines + (size_t)n_specials, e);
  unsigned char buf[1024];
  size_t line = 0;
  for (size_t i = 0; rc == SPILL_OK && i < len;) {
    size_t j = i;
    while (j < len && ranks[j] != '\n') j++;
    if (j > i) {
      line++;
      size_t k = i;
      while (ranks[k] != ' ') k++;
      long r = 0; /* digits checked by pass 1; never past the line (no NUL needed) */
      for (size_t q = k + 1; q < j && ranks[q] >= '0' && ranks[q] <= '9'; q++)
        r = r * 10 + (ranks[q] - '0');
      long n = k - i <= sizeof buf * 3 / 4 ? b64decode(ranks + i, k - i, buf) : -1;
      if (n <= 0) rc = spill_err_set(e, SPILL_E_FORMAT, "tiktoken: line %zu: bad base64", line);
      else if (!(t->flags[r] & TOK_F_UNUSED))
        rc = spill_err_set(e, SPILL_E_FORMAT, "tiktoken: line %zu: rank %ld twice", line, r);
      else rc = tok_set_token(t, (int32_t)r, (const char *)buf, (size_t)n, e);
    }
    i = j + 1;
  }
  if (rc == SPILL_OK) rc = tok_strmap_build(t, e);
  for (int b = 0; rc == SPILL_OK && b < 256; b++) {
    char c = (char)b;
    t->byte_id[b] = tok_strmap_get(t, &c, 1);
  }
  if (rc == SPILL_OK) rc = tok_merges_from_ranks(t, e);
  for (int s = 0; rc == SPILL_OK && s < n_specials; s++) {
    int32_t id = special_id[s];
    const char *txt = special_text[s];
    if (id < 0 || !txt || !*txt) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "tiktoken: special token %d is invalid", s);
      break;
    }
    if (t->flags[id] & TOK_F_UNUSED) rc = tok_set_token(t, id, txt, strlen(txt), e);
    if (rc == SPILL_OK) {
      t->flags[id] |= TOK_F_ADDED | TOK_F_SPECIAL;
      rc = tok_trie_add(t, txt, strlen(txt), id, e);
    }
  }
  if (rc == SPILL_OK) rc = tok_add_split(t, pattern ? pattern : SPILL_TOK_PAT_O200K, e);
  if (rc == SPILL_OK) rc = tok_finish(t, e);
  if (rc < 0) {
    spill_tok_free(t);
    return rc;
  }
  *out = t;
  return SPILL_OK;
}

/* ---- files --------------------------------------------------------------------- */

/* The one whole-file reader (engine/base/safe_file.h): a FIFO or a
 * directory in place of a tokenizer file is refused by kind, never waited
 * on; at most 2 GiB. */
static int read_file(const char *path, char **out, size_t *len, spill_err *e) {
  return spill_read_file(path, (size_t)1 << 31, out, len, e);
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* Kimi's tokenizer_config.json lists its specials in added_tokens_decoder;
 * without it, a tiktoken file loads with no specials. */
int tok_load_gguf(const char *path, spill_tok **out, spill_err *e); /* tok_gguf.c */

/* tiktoken's own special tokens of its two public encodings (they live in
 * tiktoken's code, not in the rank files). */
static const char *const O200K_SPECIAL[] = {"<|endoftext|>", "<|endofprompt|>"};
static const int O200K_SPECIAL_ID[] = {199999, 200018};
static const char *const CL100K_SPECIAL[] = {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>",
                                             "<|fim_suffix|>", "<|endofprompt|>"};
static const int CL100K_SPECIAL_ID[] = {100257, 100258, 100259, 100260, 100276};

/* Kimi's special tokens (tokenization_kimi.py, which llama.cpp's converter
 * runs for kimi-k2 / kimi-linear / kimi-k3): the 256 ids right after the
 * ranks (id = number of ranks + slot) are special, named by
 * tokenizer_config.json's added_tokens_decoder ({"ID": {"content": ...}}),
 * the others "<|reserved_token_ID|>". Entries outside the 256 slots are not
 * tokens there either (ignored, as the reference ignores them). K3 names 16
 * slots (from ID 163584: [BOS], [EOS], <|end_of_msg|>, <|open|>, <|close|>,
 * <|sep|>, ...; docs/TOKENIZER.md). names[] and ids[] get KIMI_SLOTS
 * entries; reserved[] holds the generated names. cfg may be NULL. */
#define KIMI_SLOTS 256
static int kimi_specials(const char *ranks, size_t len, const cJSON *cfg, const char **names,
                         int *ids, char (*reserved)[32], spill_err *e) {
  long n_base = 0; /* len(ranks): the non-empty lines (pass 1 of the loader checks them) */
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && ranks[j] != '\n') j++;
    if (j > i) n_base++;
    i = j + 1;
  }
  SPILL_FAIL_IF(e, n_base > (1L << 24), SPILL_E_FORMAT, "tiktoken: %ld ranks", n_base);
  for (int k = 0; k < KIMI_SLOTS; k++) {
    ids[k] = (int)n_base + k;
    snprintf(reserved[k], sizeof reserved[k], "<|reserved_token_%d|>", ids[k]);
    names[k] = reserved[k];
  }
  const cJSON *dec = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") : NULL;
  if (!dec || cJSON_IsNull(dec)) return SPILL_OK;
  SPILL_FAIL_IF(e, !cJSON_IsObject(dec), SPILL_E_FORMAT,
                "tokenizer_config.json: added_tokens_decoder is not an object");
  const cJSON *it;
  cJSON_ArrayForEach(it, dec) {
    const char *key = it->string;
    char *end = NULL;
    errno = 0;
    long id = strtol(key, &end, 10);
    SPILL_FAIL_IF(e, !*key || *end || errno || id < 0, SPILL_E_FORMAT,
                  "tokenizer_config.json: added_tokens_decoder key \"%.40s\" is not a token id", key);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    SPILL_FAIL_IF(e, !cJSON_IsString(c) || !c->valuestring[0], SPILL_E_FORMAT,
                  "tokenizer_config.json: added_tokens_decoder[\"%ld\"] has no content string", id);
    if (id >= n_base && id < n_base + KIMI_SLOTS) names[id - n_base] = c->valuestring;
  }
  return SPILL_OK;
}

/* A tiktoken rank file; for Kimi's tiktoken.model (pattern KIMI) with
 * tokenizer_config.json beside it when present (cfg_path; may be absent),
 * whose specials, BOS/EOS and chat template it applies. */
static int load_tiktoken_file(const char *path, const char *pattern, const char *cfg_path,
                              spill_tok **out, spill_err *e) {
  char *b, *cj = NULL;
  size_t n, cn = 0;
  SPILL_TRY(read_file(path, &b, &n, e));
  const char *const *sp = NULL;
  const int *sid = NULL;
  int nsp = 0, rc = SPILL_OK;
  if (pattern == SPILL_TOK_PAT_O200K) { sp = O200K_SPECIAL; sid = O200K_SPECIAL_ID; nsp = 2; }
  if (pattern == SPILL_TOK_PAT_CL100K) { sp = CL100K_SPECIAL; sid = CL100K_SPECIAL_ID; nsp = 5; }
  cJSON *cfg = NULL;
  const char *kn[KIMI_SLOTS];
  int kid[KIMI_SLOTS];
  char (*reserved)[32] = NULL;
  if (pattern == SPILL_TOK_PAT_KIMI) {
    if (cfg_path && is_file(cfg_path)) {
      rc = read_file(cfg_path, &cj, &cn, e);
      if (rc == SPILL_OK) rc = spill_json_parse(cj, cn, cfg_path, SPILL_E_FORMAT, &cfg, e);
      if (rc == SPILL_OK && !cJSON_IsObject(cfg))
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: not a JSON object", cfg_path);
    }
    reserved = rc == SPILL_OK ? malloc(KIMI_SLOTS * sizeof *reserved) : NULL;
    if (rc == SPILL_OK && !reserved) rc = spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
    if (rc == SPILL_OK) rc = kimi_specials(b, n, cfg, kn, kid, reserved, e);
    sp = kn;
    sid = kid;
    nsp = KIMI_SLOTS;
  }
  if (rc == SPILL_OK) {
    rc = spill_tok_load_tiktoken(b, n, pattern, sp, sid, nsp, out, e);
    if (rc < 0) spill_err_prefix(e, "%s", path);
  }
  if (rc == SPILL_OK && cj) {
    rc = tok_apply_config(*out, cj, cn, e);
    if (rc < 0) {
      spill_err_prefix(e, "%s", cfg_path);
      spill_tok_free(*out);
      *out = NULL;
    }
  }
  cJSON_Delete(cfg);
  free(reserved);
  free(cj);
  free(b);
  return rc;
}

/* tokenizer.json is mapped, not read: 10 MB of copying and of fresh pages
 * was a measurable part of the load (docs/PERFORMANCE.md). Its parser never
 * reads past the length. An empty file is read. */
static int map_file(const char *path, const char **out, size_t *len, int *mapped, spill_err *e) {
  int fd;
  SPILL_TRY(spill_file_open_read(path, 0, &fd, e));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > (1LL << 31)) {
    close(fd);
    *mapped = 0;
    return read_file(path, (char **)out, len, e);
  }
  void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  SPILL_FAIL_IF(e, p == MAP_FAILED, SPILL_E_IO, "%s: mmap: %s", path, strerror(errno));
  *out = p;
  *len = (size_t)st.st_size;
  *mapped = 1;
  return SPILL_OK;
}

/* dir-of(path)/name into buf (name alone when path has no directory). */
static void beside(const char *path, const char *name, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  int dl = slash ? (int)(slash - path) + 1 : 0;
  if (snprintf(buf, cap, "%.*s%s", dl, path, name) >= (int)cap) buf[0] = '\0';
}

/* chat_template.jinja (the file transformers saves a chat template to since
 * it left tokenizer_config.json) replaces the config's template, as
 * transformers reads it. A template is text: NUL bytes or invalid UTF-8 are
 * refused (SPILL_E_FORMAT). */
static int load_template_file(spill_tok *t, const char *path, spill_err *e) {
  char *b;
  size_t n;
  SPILL_TRY(read_file(path, &b, &n, e));
  size_t bad = spill_json_utf8_check(b, n);
  const char *nul = memchr(b, 0, n);
  if (nul && (size_t)(nul - b) < bad) bad = (size_t)(nul - b);
  if (bad < n) {
    free(b);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: not UTF-8 text (byte %zu)", path, bad);
  }
  free(t->chat_template);
  t->chat_template = b;
  return SPILL_OK;
}

static int load_hf_files(const char *json_path, const char *config_path, spill_tok **out,
                         spill_err *e) {
  const char *j = NULL;
  char *c = NULL;
  size_t jn, cn = 0;
  int mapped;
  SPILL_TRY(map_file(json_path, &j, &jn, &mapped, e));
  int rc = SPILL_OK;
  if (config_path && is_file(config_path)) rc = read_file(config_path, &c, &cn, e);
  if (rc == SPILL_OK) rc = spill_tok_load_hf(j, jn, c, cn, out, e);
  if (mapped) munmap((void *)j, jn);
  else free((void *)j);
  free(c);
  return rc;
}

/* The one search order of a directory's tokenizer (spill_tok.h). */
int spill_tok_locate(const char *dir, int flags, char *path, size_t cap, spill_err *e) {
  static const char *const names[] = {"tokenizer.json", "tiktoken.model", "tokenizer.gguf"};
  SPILL_FAIL_IF(e, !dir || !path || cap == 0, SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  path[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    int n = snprintf(path, cap, "%s/%s", dir, names[i]);
    SPILL_FAIL_IF(e, n < 0 || (size_t)n >= cap, SPILL_E_IO, "%s: path too long", dir);
    if (is_file(path)) return 1;
  }
  path[0] = '\0';
  if (!(flags & SPILL_TOK_ANY_GGUF)) return 0;
  DIR *d = opendir(dir);
  SPILL_FAIL_IF(e, !d, SPILL_E_IO, "%s: %s", dir, strerror(errno));
  struct dirent *de;
  int rc = 0;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (!ends_with(de->d_name, ".gguf")) continue;
    int n = snprintf(path, cap, "%s/%s", dir, de->d_name);
    rc = n < 0 || (size_t)n >= cap ? spill_err_set(e, SPILL_E_IO, "%s: path too long", dir) : 1;
  }
  closedir(d);
  if (rc != 1) path[0] = '\0';
  return rc;
}

int spill_tok_load(const char *path, spill_tok **out, spill_err *e) {
  SPILL_FAIL_IF(e, !path || !out, SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  *out = NULL;
  struct stat st;
  SPILL_FAIL_IF(e, stat(path, &st) != 0, SPILL_E_IO, "%s: %s", path, strerror(errno));
  char file[4096], buf[64];
  if (S_ISDIR(st.st_mode)) {
    int found = spill_tok_locate(path, SPILL_TOK_ANY_GGUF, file, sizeof file, e);
    if (found < 0) return found;
    SPILL_FAIL_IF(e, !found, SPILL_E_IO,
                  "%s: no tokenizer.json, tiktoken.model or .gguf in this directory", path);
    path = file;
  }
  /* a file: by its name (the names spill_tok_locate finds), else sniffed */
  int fd;
  SPILL_TRY(spill_file_open_read(path, 0, &fd, e));
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  close(fd);
  size_t n = got > 0 ? (size_t)got : 0;
  if ((n >= 4 && !memcmp(buf, "GGUF", 4)) || ends_with(path, ".gguf")) return tok_load_gguf(path, out, e);
  size_t i = 0;
  while (i < n && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
  /* tokenizer_config.json and chat_template.jinja beside the file, if any */
  char cfg[4096], tpl[4096];
  beside(path, "tokenizer_config.json", cfg, sizeof cfg);
  beside(path, "chat_template.jinja", tpl, sizeof tpl);
  int rc;
  if ((i < n && buf[i] == '{') || ends_with(path, "tokenizer.json")) {
    rc = load_hf_files(path, cfg, out, e);
  } else {
    const char *pat = ends_with(path, "tiktoken.model") ? SPILL_TOK_PAT_KIMI
                      : strstr(path, "cl100k")            ? SPILL_TOK_PAT_CL100K
                                                          : SPILL_TOK_PAT_O200K;
    rc = load_tiktoken_file(path, pat, cfg, out, e);
  }
  if (rc == SPILL_OK && is_file(tpl)) {
    rc = load_template_file(*out, tpl, e);
    if (rc < 0) {
      spill_tok_free(*out);
      *out = NULL;
    }
  }
  return rc;
}
