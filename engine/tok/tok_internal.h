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

/* bytes -> id (open addressing, power-of-two size). */
typedef struct tok_strmap {
  uint32_t *slot; /* id + 1, 0 = empty */
  uint32_t mask;
} tok_strmap;

/* (a, b) -> (rank, id) (open addressing on the 64-bit key). */
typedef struct tok_pairmap {
  uint64_t *key; /* (a << 32 | b) + 1, 0 = empty */
  uint32_t *rank;
  int32_t *id;
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
int tok_alloc_vocab(spill_tok *t, int n_vocab, spill_err *e);
int tok_set_token(spill_tok *t, int32_t id, const char *bytes, size_t len, spill_err *e);
const char *tok_bytes(const spill_tok *t, int32_t id, size_t *len);
int tok_strmap_build(spill_tok *t, spill_err *e);
int32_t tok_strmap_get(const spill_tok *t, const char *s, size_t len);
int tok_pairmap_init(tok_pairmap *m, size_t n, spill_err *e);
/* Inserts (a,b) -> (rank,id) unless (a,b) is present (first rank wins). */
void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
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

/* Ids list growth. */
int tok_ids_push(spill_tok_ids *v, int32_t id, uint32_t off, spill_err *e);

#endif
