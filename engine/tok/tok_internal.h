/* engine/tok/tok_internal.h: the loaded tokenizer's tables, shared by the
 * loaders (tok_hf.c, tok_tiktoken.c, tok_gguf.c), the text passes
 * (tok_text.c: UTF-8 repair, NFC, regex splits) and the BPE core
 * (tok_bpe.c). Not part of the public API.
 *
 * Invariants: token bytes live in one arena; every id < n_vocab has an entry
 * (possibly empty, flagged TOK_F_UNUSED); merges map a pair of ids to the id
 * of their concatenation with a rank (lower merges first).
 */
#ifndef SPILL_TOK_TOK_INTERNAL_H
#define SPILL_TOK_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/tok/spill_tok.h"

#define TOK_MAX_SPLITS 4

enum { TOK_BYTELEVEL = 0, TOK_SENTENCEPIECE = 1, TOK_TIKTOKEN = 2 };
enum {
  TOK_F_SPECIAL = 1, /* special added token (control) */
  TOK_F_ADDED = 2,   /* matched before splitting */
  TOK_F_BYTE = 4,    /* <0xXX> byte-fallback token */
  TOK_F_UNUSED = 8,  /* id with no token */
  TOK_F_LSTRIP = 16, /* added token swallows whitespace on its left */
  TOK_F_RSTRIP = 32, /* ... on its right */
};

/* bytes -> id (open addressing, power-of-two size). A slot holds the
 * token's first 8 bytes, so a token of up to 8 bytes (most of a vocabulary,
 * and most halves of a merge) is found and checked without touching the
 * token records or the arena: one cache line per lookup. */
typedef struct tok_strmap_slot {
  uint64_t key;  /* hash tag << 32 | (min(len, 254) + 1) << 24 | id; 0 = empty */
  uint64_t head; /* bytes [0, min(len, 8)), little-endian, zero-padded */
} tok_strmap_slot;
typedef struct tok_strmap {
  tok_strmap_slot *slot;
  uint32_t mask;
} tok_strmap;

/* (a, b) -> (rank, id) (open addressing on the 64-bit key; one entry is one
 * 16-byte record, so a lookup touches one cache line). */
typedef struct tok_pair_ent {
  uint64_t key; /* (a << 32 | b) + 1, 0 = empty */
  uint32_t rank;
  int32_t id;
} tok_pair_ent;
typedef struct tok_pairmap {
  tok_pair_ent *ent;
  uint32_t mask;
} tok_pairmap;

/* A trie over the added tokens' bytes (leftmost-longest matching). */
typedef struct tok_trie_node {
  int32_t first_child, next_sibling, id; /* id -1: not a token end */
  unsigned char byte;
} tok_trie_node;

struct spill_tok {
  int kind;
  int n_vocab;
  char *arena;
  size_t arena_len, arena_cap;
  uint64_t *tok_off; /* (offset << 24 | length) into arena, per id */
  uint8_t *flags;
  tok_strmap vocab; /* token bytes -> id (not the added tokens matched by the trie) */
  int vocab_dup;    /* two ids share a text (the map keeps the first) */
  tok_pairmap merges;
  int32_t byte_id[256]; /* byte-level: the single-byte token; SPM: <0xXX>; -1 */
  int ignore_merges;
  int nfc;
  int spm_prepend;         /* SPM normaliser: prepend U+2581 */
  int spm_replace_space;   /* SPM normaliser: ' ' -> U+2581 */
  int spm_strip_leading;   /* SPM decoder: strip one leading space */
  int byte_fallback;
  int32_t unk_id;
  int fuse_unk;
  void *split_code[TOK_MAX_SPLITS]; /* pcre2_code*, applied in sequence */
  int n_splits;
  tok_trie_node *trie;
  int n_trie, cap_trie;
  int32_t bos_id, eos_id;
  int32_t prefix_ids[4], n_prefix; /* post-processor: tokens before the text */
  int32_t suffix_ids[4], n_suffix; /* ... and after */
  char *chat_template;
  size_t max_piece;
};

/* Arena / tables (tok_bpe.c). */
/* Sizes the per-id tables for ids [0, n_vocab); n_entries is how many
 * tokens the file defines: n_vocab above 2 x n_entries + TOK_ID_SLACK is
 * refused (SPILL_E_FORMAT naming the id), before anything is allocated. */
#define TOK_ID_SLACK 1024
int tok_alloc_vocab(spill_tok *t, int n_vocab, size_t n_entries, spill_err *e);
int tok_set_token(spill_tok *t, int32_t id, const char *bytes, size_t len, spill_err *e);
const char *tok_bytes(const spill_tok *t, int32_t id, size_t *len);
int tok_strmap_build(spill_tok *t, spill_err *e);
int32_t tok_strmap_get(const spill_tok *t, const char *s, size_t len);
/* Fill t->byte_id: byte-level vocabularies map byte b to the token whose
 * text is that byte; others to the "<0xHH>" byte-fallback token, flagged
 * TOK_F_BYTE. Needs the string map. */
void tok_set_byte_ids(spill_tok *t, int bytelevel);
/* The map's hash of s (tok_hash), of a concatenation a+b from the hashes of
 * a and b (no pass over the bytes), and the lookup with a known hash. */
uint64_t tok_hash(const char *s, size_t len);
uint64_t tok_hash_pow(size_t n);
uint64_t tok_hash_concat(uint64_t ha, uint64_t hb, size_t len_b);
int32_t tok_strmap_get_h(const spill_tok *t, const char *s, size_t len, uint64_t hash);
/* n lookups at once (hash[k] of s[k][0..len[k])) -> id[k], the same answers
 * as tok_strmap_get_h; the table's cache misses overlap (prefetch per stage),
 * which is what the loaders' hundreds of thousands of lookups pay for. */
void tok_strmap_get_many(const spill_tok *t, size_t n, const char *const *s, const size_t *len,
                         const uint64_t *hash, int32_t *id);
int tok_pairmap_init(tok_pairmap *m, size_t n, spill_err *e);
/* Inserts (a,b) -> (rank,id) unless (a,b) is present (first rank wins). */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
/* tok_pairmap_put of n (a, b, id) triples abm[3k..3k+2] with ranks rank[k]
 * (rank NULL: rank0 + k), in order, the table's cache misses overlapped. */
void tok_pairmap_put_many(tok_pairmap *m, size_t n, const int32_t *abm, const uint32_t *rank,
                          uint32_t rank0);
int tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id);
int tok_trie_add(spill_tok *t, const char *s, size_t len, int32_t id, spill_err *e);
/* Derives the tiktoken merge table: every split of every token into two
 * tokens, ranked by the whole token's rank (= its id). */
int tok_merges_from_ranks(spill_tok *t, spill_err *e);
int tok_finish(spill_tok *t, spill_err *e); /* max_piece, sanity checks */

/* Text passes (tok_text.c). */
/* WHATWG UTF-8 decode with U+FFFD replacement; *out malloc'ed. Returns 0 and
 * sets *out NULL when text is already valid (no copy). */
int tok_utf8_repair(const char *s, size_t len, char **out, size_t *out_len, spill_err *e);
int tok_nfc(const char *s, size_t len, char **out, size_t *out_len, spill_err *e);
/* Compiles a split regex (JS-compatible \s, PCRE2 JIT) into t->split_code. */
int tok_add_split(spill_tok *t, const char *pattern, spill_err *e);
void tok_free_splits(spill_tok *t);
/* Calls fn on each piece of s (gaps and matches, "Isolated" behaviour),
 * after all split regexes in sequence. */
typedef int (*tok_piece_fn)(void *ctx, const char *s, size_t len, size_t off);
int tok_split(const spill_tok *t, const char *s, size_t len, size_t off, tok_piece_fn fn,
              void *ctx, spill_err *e);
/* GPT-2 bytes_to_unicode: byte -> code point, and back (-1 if not mapped). */
uint32_t tok_byte_to_cp(unsigned b);
int tok_cp_to_byte(uint32_t cp);
/* Decodes a byte-level-mapped UTF-8 string to raw bytes (in place safe:
 * out may be s). Returns the raw length, or -1 if a character is not in the
 * byte map. */
long tok_unmap_bytelevel(const char *s, size_t len, char *out);

/* JSON scanner (tok_json.c) over s[0..n), position i; errors are
 * SPILL_E_FORMAT naming `what` and the byte offset. */
typedef struct tok_json {
  const char *s;
  size_t n, i;
  const char *what;
  spill_err *e;
} tok_json;
/* Skips whitespace; a run (a pretty-printed file's indentation) goes to
 * tj_ws_run, which takes 16 bytes per step. */
size_t tj_ws_run(const char *s, size_t i, size_t n);
static inline void tj_ws(tok_json *j) {
  if (j->i < j->n) {
    char c = j->s[j->i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') j->i = tj_ws_run(j->s, j->i + 1, j->n);
  }
}
/* The next non-space byte, -1 at the end. */
static inline int tj_peek(tok_json *j) {
  tj_ws(j);
  return j->i < j->n ? (unsigned char)j->s[j->i] : -1;
}
int tj_fail(tok_json *j, const char *what);
int tj_expect(tok_json *j, char c);
/* A string: decoded into out (room for the raw length suffices; NULL skips). */
int tj_string(tok_json *j, char *out, size_t *len);
int tj_number(tok_json *j, double *v);
int tj_skip(tok_json *j); /* any value, validated */
/* Inside an object or array: 1 if another element follows (after the ','),
 * 0 at the closing bracket (consumed), < 0 on a syntax error. *first starts 1. */
int tj_next(tok_json *j, int *first, char close);

/* tokenizer_config.json (tok_hf.c): bos_token / eos_token (a string or an
 * AddedToken object) looked up in t, add_bos_token / add_eos_token, and
 * chat_template (a string, or the list's "default" entry). */
int tok_apply_config(spill_tok *t, const char *cj, size_t clen, spill_err *e);

/* Ids list growth. */
int tok_ids_push(spill_tok_ids *v, int32_t id, uint32_t off, spill_err *e);

#endif
