/* engine/tok/tok_bpe.c: the BPE core shared by every tokenizer kind, and the
 * public encode / decode / streaming calls.
 *
 * Encode: UTF-8 repair -> added tokens (a byte trie, leftmost-longest, before
 * any normalisation, as the reference does) -> per segment: NFC or the
 * SentencePiece space rewrite -> regex splits -> BPE per piece. All kinds
 * work on ids of raw-byte tokens (byte-level vocabularies are un-mapped from
 * GPT-2's byte alphabet at load), so a merge is a lookup of the pair (a, b)
 * in one hash table giving (rank, merged id). tiktoken's rule "merge the
 * adjacent pair whose concatenation has the lowest rank" is the same
 * algorithm with that table derived from the ranks (tok_merges_from_ranks).
 * Merging takes the lowest rank, leftmost on ties: a plain scan for short
 * pieces, a binary heap with lazy invalidation for long ones (O(n log n) on
 * a 1 MB whitespace run or a SentencePiece text with no pre-tokenizer).
 */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/tok/tok_internal.h"

/* ---- tables ---------------------------------------------------------------- */

/* Equal bytes (tokens are short: a loop beats a memcmp call). */
static inline int bytes_eq(const char *a, const char *b, size_t len) {
  if (len > 16) return memcmp(a, b, len) == 0;
  for (size_t i = 0; i < len; i++)
    if (a[i] != b[i]) return 0;
  return 1;
}

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* Zeroed memory for the big hash tables (4-32 MB, touched at random while
 * loading): from 2 MiB up an anonymous mapping aligned to 2 MiB with
 * transparent huge pages requested, which turns thousands of page faults
 * into a few (docs/PERFORMANCE.md, tokenizer load); smaller ones calloc. */
#define TABLE_HUGE ((size_t)2 << 20)
static size_t table_len(size_t bytes) { return (bytes + TABLE_HUGE - 1) & ~(TABLE_HUGE - 1); }

static void *table_alloc(size_t bytes) {
  if (bytes < TABLE_HUGE) return calloc(1, bytes);
  size_t len = table_len(bytes);
  char *m = mmap(NULL, len + TABLE_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                 0);
  if (m == MAP_FAILED) return NULL;
  char *a = (char *)(((uintptr_t)m + TABLE_HUGE - 1) & ~(uintptr_t)(TABLE_HUGE - 1));
  if (a > m) munmap(m, (size_t)(a - m));
  if (m + len + TABLE_HUGE > a + len) munmap(a + len, (size_t)(m + TABLE_HUGE - a));
  madvise(a, len, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
  return a;
}

static void table_free(void *p, size_t bytes) {
  if (!p) return;
  if (bytes < TABLE_HUGE) free(p);
  else munmap(p, table_len(bytes));
}

int tok_alloc_vocab(spill_tok *t, int n_vocab, size_t n_entries, spill_err *e) {
  SPILL_FAIL_IF(e, n_vocab <= 0 || n_vocab > (1 << 24), SPILL_E_FORMAT,
                "tokenizer: vocabulary size %d out of range", n_vocab);
  /* The per-id tables cost ~30 bytes an id: sized by the largest id alone,
   * one id of 16777215 in a 4 KB file cost ~490 MB. Ids may leave holes,
   * but no more than the file's own entries (tokens, added tokens, special
   * tokens) plus TOK_ID_SLACK: memory stays proportional to the file. */
  SPILL_FAIL_IF(e, (uint64_t)n_vocab > 2 * (uint64_t)n_entries + TOK_ID_SLACK, SPILL_E_FORMAT,
                "tokenizer: id %d is beyond what %zu entries can number (ids < 2 x entries + %d): "
                "refusing to size tables for %d ids",
                n_vocab - 1, n_entries, TOK_ID_SLACK, n_vocab);
  t->n_vocab = n_vocab;
  t->tok_off = calloc((size_t)n_vocab, sizeof *t->tok_off);
  t->flags = malloc((size_t)n_vocab);
  SPILL_FAIL_IF(e, !t->tok_off || !t->flags, SPILL_E_NOMEM, "tokenizer: no memory for %d tokens",
                n_vocab);
  memset(t->flags, TOK_F_UNUSED, (size_t)n_vocab);
  for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
  t->unk_id = t->bos_id = t->eos_id = -1;
  return SPILL_OK;
}

int tok_set_token(spill_tok *t, int32_t id, const char *bytes, size_t len, spill_err *e) {
  SPILL_FAIL_IF(e, id < 0 || id >= t->n_vocab, SPILL_E_FORMAT,
                "tokenizer: token id %d outside the vocabulary (%d)", id, t->n_vocab);
  SPILL_FAIL_IF(e, len >= (1u << 24), SPILL_E_FORMAT, "tokenizer: token %d is %zu bytes long", id,
                len);
  if (t->arena_len + len + 1 > t->arena_cap) {
    size_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 20;
    while (cap < t->arena_len + len + 1) cap *= 2;
    char *a = realloc(t->arena, cap);
    SPILL_FAIL_IF(e, !a, SPILL_E_NOMEM, "tokenizer: no memory for token text");
    t->arena = a;
    t->arena_cap = cap;
  }
  memcpy(t->arena + t->arena_len, bytes, len);
  t->arena[t->arena_len + len] = '\0';
  t->tok_off[id] = ((uint64_t)t->arena_len << 24) | len;
  t->arena_len += len + 1;
  t->flags[id] &= (uint8_t)~TOK_F_UNUSED;
  if (len > t->max_piece) t->max_piece = len;
  return SPILL_OK;
}

const char *tok_bytes(const spill_tok *t, int32_t id, size_t *len) {
  uint64_t o = t->tok_off[id];
  *len = (size_t)(o & 0xffffff);
  return t->arena + (o >> 24);
}

/* The vocabulary map hashes with a polynomial (h = h * B + byte, seeded 1)
 * so that loaders can derive the hash of a concatenation or of a suffix
 * from hashes they already have (tok_hash_concat); the slot keeps the upper
 * 32 bits of the mixed hash as a tag, so a probe compares token bytes only
 * on a tag match. */
#define TOK_HASH_B 0x100000001b3ull

uint64_t tok_hash(const char *s, size_t len) {
  uint64_t h = 1;
  for (size_t i = 0; i < len; i++) h = h * TOK_HASH_B + (unsigned char)s[i];
  return h;
}

uint64_t tok_hash_pow(size_t n) {
  uint64_t r = 1, b = TOK_HASH_B;
  for (; n; n >>= 1, b *= b)
    if (n & 1) r *= b;
  return r;
}

uint64_t tok_hash_concat(uint64_t ha, uint64_t hb, size_t len_b) {
  return (ha - 1) * tok_hash_pow(len_b) + hb;
}

/* A slot's key without its tag, and the token's head (tok_strmap_slot). */
static inline uint64_t slot_lenid(size_t len, int32_t id) {
  return (uint64_t)((len < 254 ? len : 254) + 1) << 24 | (uint32_t)id;
}
static inline uint64_t slot_head(const char *s, size_t len) {
  uint64_t h = 0;
  memcpy(&h, s, len < 8 ? len : 8);
  return h;
}
#define SLOT_TAG 0xffffffff00000000ull

/* Inserts ids [from, to) (hashes in h[k - from]); first id wins on equal text. */
static void strmap_insert(spill_tok *t, int32_t from, int32_t to, const uint64_t *h) {
  for (int32_t id = from; id < to; id++) {
    if (t->flags[id] & TOK_F_UNUSED) continue;
    size_t len;
    const char *s = tok_bytes(t, id, &len);
    uint64_t m = h[id - from], head = slot_head(s, len);
    uint32_t i = (uint32_t)m & t->vocab.mask;
    uint64_t key = (m & SLOT_TAG) | slot_lenid(len, id);
    for (;;) {
      tok_strmap_slot *v = &t->vocab.slot[i];
      if (v->key == 0) { v->key = key; v->head = head; break; }
      if ((v->key ^ key) >> 24 == 0 && v->head == head) {
        size_t l2;
        const char *s2 = tok_bytes(t, (int32_t)(v->key & 0xffffff), &l2);
        if (l2 == len && bytes_eq(s, s2, len)) { /* duplicate text: first id wins */
          t->vocab_dup = 1;
          break;
        }
      }
      i = (i + 1) & t->vocab.mask;
    }
  }
}

int tok_strmap_build(spill_tok *t, spill_err *e) {
  uint32_t size = 16; /* load <= 2/3: tagged slots keep probes cheap */
  while (size < (uint32_t)t->n_vocab / 2u * 3u) size <<= 1;
  if (t->vocab.slot) table_free(t->vocab.slot, ((size_t)t->vocab.mask + 1) * sizeof *t->vocab.slot);
  t->vocab.slot = table_alloc((size_t)size * sizeof *t->vocab.slot);
  SPILL_FAIL_IF(e, !t->vocab.slot, SPILL_E_NOMEM, "tokenizer: no memory for the vocabulary map");
  t->vocab.mask = size - 1;
  t->vocab_dup = 0;
  enum { B = 64 };
  uint64_t h[B];
  for (int32_t base = 0; base < t->n_vocab; base += B) { /* batches: slot misses overlap */
    int32_t end = t->n_vocab - base < B ? t->n_vocab : base + B;
    for (int32_t id = base; id < end; id++) {
      size_t len;
      const char *s = tok_bytes(t, id, &len);
      h[id - base] = hash_u64(tok_hash(s, len));
      __builtin_prefetch(&t->vocab.slot[(uint32_t)h[id - base] & t->vocab.mask], 1);
    }
    strmap_insert(t, base, end, h);
  }
  return SPILL_OK;
}

/* The lookup from the mixed hash m; tokens over 8 bytes are compared past
 * their head in the arena. */
static inline int32_t strmap_find(const spill_tok *t, const char *s, size_t len, uint64_t m) {
  uint32_t h = (uint32_t)m & t->vocab.mask;
  uint64_t key = (m & SLOT_TAG) | slot_lenid(len, 0), head = slot_head(s, len);
  for (;;) {
    const tok_strmap_slot *v = &t->vocab.slot[h];
    if (v->key == 0) return -1;
    if ((v->key ^ key) >> 24 == 0 && v->head == head) {
      int32_t id = (int32_t)(v->key & 0xffffff);
      if (len <= 8) return id;
      size_t l2;
      const char *s2 = tok_bytes(t, id, &l2);
      if (l2 == len && bytes_eq(s + 8, s2 + 8, len - 8)) return id;
    }
    h = (h + 1) & t->vocab.mask;
  }
}

int32_t tok_strmap_get_h(const spill_tok *t, const char *s, size_t len, uint64_t hash) {
  if (!t->vocab.slot) return -1;
  return strmap_find(t, s, len, hash_u64(hash));
}

void tok_strmap_get_many(const spill_tok *t, size_t n, const char *const *s, const size_t *len,
                         const uint64_t *hash, int32_t *id) {
  const tok_strmap_slot *slot = t->vocab.slot;
  if (!slot) {
    for (size_t k = 0; k < n; k++) id[k] = -1;
    return;
  }
  enum { CHUNK = 256 };
  for (; n > CHUNK; n -= CHUNK, s += CHUNK, len += CHUNK, hash += CHUNK, id += CHUNK)
    tok_strmap_get_many(t, CHUNK, s, len, hash, id);
  /* stage 1: the slots; for a token over 8 bytes, stage 2: the first
   * match's token record, stage 3: its bytes; then the exact lookups */
  uint64_t m[CHUNK];
  int longer = 0;
  for (size_t k = 0; k < n; k++) {
    m[k] = hash_u64(hash[k]);
    __builtin_prefetch(&slot[(uint32_t)m[k] & t->vocab.mask]);
    longer |= len[k] > 8;
  }
  if (longer) {
    for (size_t k = 0; k < n; k++) {
      const tok_strmap_slot *v = &slot[(uint32_t)m[k] & t->vocab.mask];
      id[k] = len[k] > 8 && v->key && (v->key ^ m[k]) >> 32 == 0 ? (int32_t)(v->key & 0xffffff)
                                                                 : -1;
      if (id[k] >= 0) __builtin_prefetch(&t->tok_off[id[k]]);
    }
    for (size_t k = 0; k < n; k++)
      if (id[k] >= 0) __builtin_prefetch(t->arena + (t->tok_off[id[k]] >> 24) + 8);
  }
  for (size_t k = 0; k < n; k++) id[k] = strmap_find(t, s[k], len[k], m[k]);
}

int32_t tok_strmap_get(const spill_tok *t, const char *s, size_t len) {
  return tok_strmap_get_h(t, s, len, tok_hash(s, len));
}

void tok_set_byte_ids(spill_tok *t, int bytelevel) {
  for (int b = 0; b < 256; b++) {
    if (bytelevel) {
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
}

int tok_pairmap_init(tok_pairmap *m, size_t n, spill_err *e) {
  size_t size = 16; /* load <= 2/3 */
  while (size < n / 2 * 3) size <<= 1;
  m->ent = table_alloc(size * sizeof *m->ent);
  SPILL_FAIL_IF(e, !m->ent, SPILL_E_NOMEM, "tokenizer: no memory for %zu merges", n);
  m->mask = (uint32_t)(size - 1);
  return SPILL_OK;
}

void tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
  uint32_t h = (uint32_t)hash_u64(k) & m->mask;
  while (m->ent[h].key != 0) {
    if (m->ent[h].key == k) return;
    h = (h + 1) & m->mask;
  }
  m->ent[h] = (tok_pair_ent){k, rank, id};
}

void tok_pairmap_put_many(tok_pairmap *m, size_t n, const int32_t *abm, const uint32_t *rank,
                          uint32_t rank0) {
  enum { B = 64 };
  uint64_t k[B];
  for (size_t base = 0; base < n; base += B) {
    size_t c = n - base < B ? n - base : B;
    for (size_t i = 0; i < c; i++) {
      const int32_t *x = abm + 3 * (base + i);
      k[i] = (((uint64_t)(uint32_t)x[0] << 32) | (uint32_t)x[1]) + 1;
      __builtin_prefetch(&m->ent[(uint32_t)hash_u64(k[i]) & m->mask], 1);
    }
    for (size_t i = 0; i < c; i++) {
      const int32_t *x = abm + 3 * (base + i);
      tok_pairmap_put(m, x[0], x[1], rank ? rank[base + i] : rank0 + (uint32_t)(base + i), x[2]);
    }
  }
}

int tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
  if (!m->ent) return 0;
  uint64_t k = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
  uint32_t h = (uint32_t)hash_u64(k) & m->mask;
  for (;;) {
    const tok_pair_ent *v = &m->ent[h];
    if (v->key == 0) return 0;
    if (v->key == k) { *rank = v->rank; *id = v->id; return 1; }
    h = (h + 1) & m->mask;
  }
}

int tok_trie_add(spill_tok *t, const char *s, size_t len, int32_t id, spill_err *e) {
  SPILL_FAIL_IF(e, len == 0, SPILL_E_FORMAT, "tokenizer: empty added token %d", id);
  if (t->n_trie == 0) {
    t->cap_trie = 1024;
    t->trie = malloc((size_t)t->cap_trie * sizeof *t->trie);
    SPILL_FAIL_IF(e, !t->trie, SPILL_E_NOMEM, "tokenizer: no memory for added tokens");
    t->trie[0] = (tok_trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
  }
  int32_t node = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    int32_t ch = t->trie[node].first_child;
    while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].next_sibling;
    if (ch < 0) {
      if (t->n_trie == t->cap_trie) {
        tok_trie_node *n2 = realloc(t->trie, (size_t)t->cap_trie * 2 * sizeof *n2);
        SPILL_FAIL_IF(e, !n2, SPILL_E_NOMEM, "tokenizer: no memory for added tokens");
        t->trie = n2;
        t->cap_trie *= 2;
      }
      ch = t->n_trie++;
      t->trie[ch] = (tok_trie_node){-1, t->trie[node].first_child, -1, c};
      t->trie[node].first_child = ch;
    }
    node = ch;
  }
  if (t->trie[node].id < 0) t->trie[node].id = id; /* first definition wins */
  return SPILL_OK;
}

/* Longest added token at s[0..len) (special ones only when allowed): its id
 * and length, or -1. */
static int32_t trie_match(const spill_tok *t, const char *s, size_t len, int special,
                          size_t *mlen) {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    int32_t ch = t->trie[node].first_child;
    while (ch >= 0 && t->trie[ch].byte != c) ch = t->trie[ch].next_sibling;
    if (ch < 0) break;
    node = ch;
    int32_t id = t->trie[node].id;
    if (id >= 0 && (special || !(t->flags[id] & TOK_F_SPECIAL))) {
      best = id;
      *mlen = i + 1;
    }
  }
  return best;
}

/* One batch of tok_merges_from_ranks: every split of ids [from, to). */
typedef struct split_batch {
  const char *s[1024];
  size_t len[1024];
  uint64_t h[1024];
  int32_t got[1024], abm[3 * 512];
  uint32_t rank[512];
} split_batch;

int tok_merges_from_ranks(spill_tok *t, spill_err *e) {
  size_t total = 0, max_len = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    if (t->flags[id] & (TOK_F_UNUSED | TOK_F_ADDED)) continue;
    size_t len;
    tok_bytes(t, id, &len);
    if (len > 1) total += len - 1;
    if (len > max_len) max_len = len;
  }
  SPILL_TRY(tok_pairmap_init(&t->merges, total / 2 + 16, e));
  split_batch *bt = malloc(sizeof *bt);
  uint64_t *pw = malloc((max_len + 1) * sizeof *pw); /* powers of the hash base */
  if (!bt || !pw) {
    free(bt);
    free(pw);
    return spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
  }
  pw[0] = 1;
  for (size_t k = 1; k <= max_len; k++) pw[k] = pw[k - 1] * TOK_HASH_B;
  /* Each split s = s[0..k) + s[k..len) is two lookups, done a batch at a
   * time (misses overlapped); pairs go in in id, then k order (first wins). */
  int32_t id = 0;
  while (id < t->n_vocab) {
    size_t n = 0;
    for (; id < t->n_vocab; id++) {
      if (t->flags[id] & (TOK_F_UNUSED | TOK_F_ADDED)) continue;
      size_t len;
      const char *s = tok_bytes(t, id, &len);
      if (len < 2) continue;
      if (n + 2 * (len - 1) > 1024) break; /* batch full (or > 512 splits: alone below) */
      uint64_t whole = tok_hash(s, len), pre = 1;
      for (size_t k = 1; k < len; k++) {
        pre = pre * TOK_HASH_B + (unsigned char)s[k - 1]; /* hash of s[0..k) */
        bt->s[n] = s, bt->len[n] = k, bt->h[n] = pre;
        /* s[k..len): whole = (pre - 1) * B^(len-k) + its hash */
        bt->s[n + 1] = s + k, bt->len[n + 1] = len - k, bt->h[n + 1] = whole - (pre - 1) * pw[len - k];
        bt->rank[n / 2] = (uint32_t)id;
        n += 2;
      }
    }
    if (n == 0 && id < t->n_vocab) { /* one token of over 512 splits: plain lookups */
      size_t len;
      const char *s = tok_bytes(t, id, &len);
      for (size_t k = 1; k < len; k++) {
        int32_t a = tok_strmap_get(t, s, k), b = a >= 0 ? tok_strmap_get(t, s + k, len - k) : -1;
        if (b >= 0) tok_pairmap_put(&t->merges, a, b, (uint32_t)id, id);
      }
      id++;
      continue;
    }
    tok_strmap_get_many(t, n, bt->s, bt->len, bt->h, bt->got);
    size_t m = 0;
    for (size_t q = 0; q < n; q += 2) {
      if (bt->got[q] < 0 || bt->got[q + 1] < 0) continue;
      bt->abm[3 * m] = bt->got[q];
      bt->abm[3 * m + 1] = bt->got[q + 1];
      bt->abm[3 * m + 2] = (int32_t)bt->rank[q / 2];
      bt->rank[m] = bt->rank[q / 2];
      m++;
    }
    tok_pairmap_put_many(&t->merges, m, bt->abm, bt->rank, 0);
  }
  free(bt);
  free(pw);
  return SPILL_OK;
}

int tok_finish(spill_tok *t, spill_err *e) {
  (void)e;
  t->max_piece = 0;
  for (int32_t id = 0; id < t->n_vocab; id++) {
    if (t->flags[id] & TOK_F_UNUSED) continue;
    size_t len;
    tok_bytes(t, id, &len);
    if (len > t->max_piece) t->max_piece = len;
  }
  return SPILL_OK;
}

/* ---- ids ------------------------------------------------------------------- */

int tok_ids_push(spill_tok_ids *v, int32_t id, uint32_t off, spill_err *e) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 256;
    int32_t *ids = realloc(v->ids, cap * sizeof *ids);
    if (ids) v->ids = ids;
    uint32_t *offs = ids ? realloc(v->offsets, cap * sizeof *offs) : NULL;
    if (offs) v->offsets = offs;
    SPILL_FAIL_IF(e, !ids || !offs, SPILL_E_NOMEM, "tokenizer: no memory for %zu ids", cap);
    v->cap = cap;
  }
  v->ids[v->n] = id;
  v->offsets[v->n] = off;
  v->n++;
  return SPILL_OK;
}

void spill_tok_ids_free(spill_tok_ids *v) {
  if (!v) return;
  free(v->ids);
  free(v->offsets);
  v->ids = NULL;
  v->offsets = NULL;
  v->n = v->cap = 0;
}

/* ---- BPE -------------------------------------------------------------------- */

typedef struct sym {
  int32_t id, prev, next;
  uint32_t off;
} sym;

typedef struct cand {
  uint32_t rank;
  int32_t pos, a, b;
} cand;

typedef struct enc_ctx {
  const spill_tok *t;
  spill_tok_ids *out;
  spill_err *e;
  sym *syms;
  size_t cap_syms;
  cand *heap;
  size_t cap_heap, n_heap;
  size_t base; /* offset of the segment in the repaired text */
} enc_ctx;

static int cand_less(const cand *x, const cand *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static int heap_push(enc_ctx *c, cand v) {
  if (c->n_heap == c->cap_heap) {
    size_t cap = c->cap_heap ? c->cap_heap * 2 : 256;
    cand *h = realloc(c->heap, cap * sizeof *h);
    SPILL_FAIL_IF(c->e, !h, SPILL_E_NOMEM, "tokenizer: no memory for the merge queue");
    c->heap = h;
    c->cap_heap = cap;
  }
  size_t i = c->n_heap++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&v, &c->heap[p])) break;
    c->heap[i] = c->heap[p];
    i = p;
  }
  c->heap[i] = v;
  return SPILL_OK;
}

static cand heap_pop(enc_ctx *c) {
  cand top = c->heap[0], last = c->heap[--c->n_heap];
  size_t i = 0, n = c->n_heap;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const cand *best = &last;
    if (l < n && cand_less(&c->heap[l], best)) { m = l; best = &c->heap[l]; }
    if (r < n && cand_less(&c->heap[r], best)) { m = r; }
    if (m == i) break;
    c->heap[i] = c->heap[m];
    i = m;
  }
  if (n > 0) c->heap[i] = last;
  return top;
}

static int try_pair(enc_ctx *c, int32_t i) {
  sym *s = c->syms;
  int32_t j = s[i].next;
  if (j < 0) return SPILL_OK;
  uint32_t rank;
  int32_t id;
  if (!tok_pairmap_get(&c->t->merges, s[i].id, s[j].id, &rank, &id)) return SPILL_OK;
  return heap_push(c, (cand){rank, i, s[i].id, s[j].id});
}

/* Merges syms[0..n) in place; leaves a linked list from index 0. */
static int bpe_merge(enc_ctx *c, int32_t n) {
  sym *s = c->syms;
  const tok_pairmap *m = &c->t->merges;
  if (n <= 32) { /* short piece: scan for the lowest rank, leftmost on ties */
    int32_t len = n;
    for (;;) {
      uint32_t best = UINT32_MAX;
      int32_t at = -1, bid = -1;
      for (int32_t i = 0; i + 1 < len; i++) {
        uint32_t rank;
        int32_t id;
        if (tok_pairmap_get(m, s[i].id, s[i + 1].id, &rank, &id) && rank < best) {
          best = rank;
          at = i;
          bid = id;
        }
      }
      if (at < 0) break;
      s[at].id = bid;
      memmove(s + at + 1, s + at + 2, (size_t)(len - at - 2) * sizeof *s);
      len--;
    }
    for (int32_t i = 0; i < len; i++) {
      s[i].prev = i - 1;
      s[i].next = i + 1 < len ? i + 1 : -1;
    }
    return SPILL_OK;
  }
  for (int32_t i = 0; i < n; i++) {
    s[i].prev = i - 1;
    s[i].next = i + 1 < n ? i + 1 : -1;
  }
  c->n_heap = 0;
  for (int32_t i = 0; i + 1 < n; i++) SPILL_TRY(try_pair(c, i));
  while (c->n_heap > 0) {
    cand v = heap_pop(c);
    int32_t i = v.pos, j = s[i].next;
    if (s[i].id != v.a || j < 0 || s[j].id != v.b) continue; /* stale */
    uint32_t rank;
    int32_t id;
    tok_pairmap_get(m, v.a, v.b, &rank, &id);
    s[i].id = id;
    s[i].next = s[j].next;
    if (s[j].next >= 0) s[s[j].next].prev = i;
    s[j].id = -1;
    if (s[i].prev >= 0) SPILL_TRY(try_pair(c, s[i].prev));
    SPILL_TRY(try_pair(c, i));
  }
  return SPILL_OK;
}

static int ensure_syms(enc_ctx *c, size_t n) {
  if (n <= c->cap_syms) return SPILL_OK;
  size_t cap = c->cap_syms ? c->cap_syms : 64;
  while (cap < n) cap *= 2;
  sym *s = realloc(c->syms, cap * sizeof *s);
  SPILL_FAIL_IF(c->e, !s, SPILL_E_NOMEM, "tokenizer: no memory for %zu symbols", n);
  c->syms = s;
  c->cap_syms = cap;
  return SPILL_OK;
}

static int emit_syms(enc_ctx *c) {
  for (int32_t i = 0; i >= 0; i = c->syms[i].next)
    SPILL_TRY(tok_ids_push(c->out, c->syms[i].id, (uint32_t)(c->base + c->syms[i].off), c->e));
  return SPILL_OK;
}

/* One pre-token of a byte-level / tiktoken vocabulary. */
static int piece_bytelevel(void *ctx, const char *s, size_t len, size_t off) {
  enc_ctx *c = ctx;
  const spill_tok *t = c->t;
  if (t->ignore_merges || len == 1) {
    int32_t id = tok_strmap_get(t, s, len);
    if (id >= 0) return tok_ids_push(c->out, id, (uint32_t)(c->base + off), c->e);
  }
  SPILL_TRY(ensure_syms(c, len));
  for (size_t i = 0; i < len; i++) {
    int32_t id = t->byte_id[(unsigned char)s[i]];
    SPILL_FAIL_IF(c->e, id < 0, SPILL_E_UNSUPPORTED,
                  "tokenizer: byte 0x%02x has no token in this vocabulary", (unsigned char)s[i]);
    c->syms[i] = (sym){id, 0, 0, (uint32_t)(off + i)};
  }
  SPILL_TRY(bpe_merge(c, (int32_t)len));
  return emit_syms(c);
}

/* One word of a SentencePiece-style BPE: characters, byte fallback, unk. */
static int piece_spm(void *ctx, const char *s, size_t len, size_t off) {
  enc_ctx *c = ctx;
  const spill_tok *t = c->t;
  if (t->ignore_merges) {
    int32_t id = tok_strmap_get(t, s, len);
    if (id >= 0) return tok_ids_push(c->out, id, (uint32_t)(c->base + off), c->e);
  }
  SPILL_TRY(ensure_syms(c, len));
  int32_t n = 0;
  size_t i = 0;
  while (i < len) {
    unsigned char b = (unsigned char)s[i];
    size_t cl = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (i + cl > len) cl = len - i;
    int32_t id = tok_strmap_get(t, s + i, cl);
    if (id >= 0) {
      c->syms[n++] = (sym){id, 0, 0, (uint32_t)(off + i)};
    } else if (t->byte_fallback) {
      for (size_t k = 0; k < cl; k++) {
        int32_t bid = t->byte_id[(unsigned char)s[i + k]];
        SPILL_FAIL_IF(c->e, bid < 0, SPILL_E_FORMAT, "tokenizer: byte fallback token <0x%02X> missing",
                      (unsigned char)s[i + k]);
        c->syms[n++] = (sym){bid, 0, 0, (uint32_t)(off + i + k)};
      }
    } else {
      SPILL_FAIL_IF(c->e, t->unk_id < 0, SPILL_E_UNSUPPORTED,
                    "tokenizer: character at byte %zu is not in the vocabulary and there is no "
                    "unk token", off + i);
      if (!(t->fuse_unk && n > 0 && c->syms[n - 1].id == t->unk_id))
        c->syms[n++] = (sym){t->unk_id, 0, 0, (uint32_t)(off + i)};
    }
    i += cl;
  }
  if (n == 0) return SPILL_OK;
  SPILL_TRY(bpe_merge(c, n));
  return emit_syms(c);
}

static int encode_segment(enc_ctx *c, const char *s, size_t len, size_t base) {
  const spill_tok *t = c->t;
  if (len == 0) return SPILL_OK;
  char *norm = NULL, *spm = NULL;
  size_t nlen = len;
  int rc = SPILL_OK;
  if (t->nfc) {
    rc = tok_nfc(s, len, &norm, &nlen, c->e);
    if (rc < 0) return rc;
    if (norm) s = norm;
  }
  if (t->kind == TOK_SENTENCEPIECE && (t->spm_prepend || t->spm_replace_space)) {
    size_t spaces = 0;
    for (size_t i = 0; i < nlen; i++) spaces += s[i] == ' ';
    spm = malloc(nlen + 2 * spaces + 4);
    if (!spm) {
      free(norm);
      return spill_err_set(c->e, SPILL_E_NOMEM, "tokenizer: no memory for a segment");
    }
    size_t o = 0;
    if (t->spm_prepend == 1 || (t->spm_prepend == 2 && base == 0)) {
      memcpy(spm, "\xE2\x96\x81", 3);
      o = 3;
    }
    for (size_t i = 0; i < nlen; i++) {
      if (s[i] == ' ' && t->spm_replace_space) { memcpy(spm + o, "\xE2\x96\x81", 3); o += 3; }
      else spm[o++] = s[i];
    }
    s = spm;
    nlen = o;
  }
  c->base = base;
  rc = tok_split(t, s, nlen, 0, t->kind == TOK_SENTENCEPIECE ? piece_spm : piece_bytelevel, c,
                 c->e);
  free(norm);
  free(spm);
  return rc;
}

static int is_ws(unsigned char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

int spill_tok_encode(const spill_tok *t, const char *text, size_t len, unsigned flags,
                     spill_tok_ids *out, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out || (!text && len), SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  SPILL_FAIL_IF(e, len > (1u << 30), SPILL_E_RANGE, "tokenizer: text of %zu bytes is over 1 GiB",
                len);
  char *fixed = NULL;
  size_t flen;
  SPILL_TRY(tok_utf8_repair(text, len, &fixed, &flen, e));
  const char *s = fixed ? fixed : text;
  enc_ctx c = {.t = t, .out = out, .e = e};
  int rc = SPILL_OK;
  if (flags & SPILL_TOK_ADD_BOS)
    for (int i = 0; i < t->n_prefix && rc == SPILL_OK; i++)
      rc = tok_ids_push(out, t->prefix_ids[i], 0, e);
  int special = (flags & SPILL_TOK_SPECIAL) != 0;
  size_t seg = 0, i = 0;
  while (rc == SPILL_OK && i < flen) {
    size_t mlen = 0;
    int32_t id = t->trie ? trie_match(t, s + i, flen - i, special, &mlen) : -1;
    if (id < 0) { i++; continue; }
    size_t seg_end = i;
    if (t->flags[id] & TOK_F_LSTRIP)
      while (seg_end > seg && is_ws((unsigned char)s[seg_end - 1])) seg_end--;
    rc = encode_segment(&c, s + seg, seg_end - seg, seg);
    if (rc == SPILL_OK) rc = tok_ids_push(out, id, (uint32_t)i, e);
    i += mlen;
    if (t->flags[id] & TOK_F_RSTRIP)
      while (i < flen && is_ws((unsigned char)s[i])) i++;
    seg = i;
  }
  if (rc == SPILL_OK) rc = encode_segment(&c, s + seg, flen - seg, seg);
  if (rc == SPILL_OK && (flags & SPILL_TOK_ADD_BOS))
    for (int k = 0; k < t->n_suffix && rc == SPILL_OK; k++)
      rc = tok_ids_push(out, t->suffix_ids[k], (uint32_t)flen, e);
  free(c.syms);
  free(c.heap);
  free(fixed);
  return rc;
}

int spill_tok_normalize(const spill_tok *t, const char *text, size_t len, char **out,
                        size_t *out_len, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out || !out_len || (!text && len), SPILL_E_INVALID_ARG,
                "tokenizer: NULL argument");
  char *fixed = NULL, *norm = NULL;
  size_t flen, nlen;
  SPILL_TRY(tok_utf8_repair(text, len, &fixed, &flen, e));
  const char *s = fixed ? fixed : text;
  if (t->nfc) {
    int rc = tok_nfc(s, flen, &norm, &nlen, e);
    if (rc < 0) { free(fixed); return rc; }
  }
  if (norm) { free(fixed); *out = norm; *out_len = nlen; return SPILL_OK; }
  if (fixed) { *out = fixed; *out_len = flen; return SPILL_OK; }
  char *r = malloc(len + 1);
  if (!r) return spill_err_set(e, SPILL_E_NOMEM, "tokenizer: no memory");
  memcpy(r, text, len);
  r[len] = '\0';
  *out = r;
  *out_len = len;
  return SPILL_OK;
}

/* ---- decode ------------------------------------------------------------------- */

/* Bytes id contributes (SentencePiece: U+2581 -> ' ', <0xXX> -> the byte). */
static size_t token_text(const spill_tok *t, int32_t id, char *buf) {
  size_t len;
  const char *s = tok_bytes(t, id, &len);
  if (t->kind != TOK_SENTENCEPIECE || (t->flags[id] & TOK_F_ADDED)) {
    memcpy(buf, s, len);
    return len;
  }
  if (t->flags[id] & TOK_F_BYTE) {
    for (int b = 0; b < 256; b++)
      if (t->byte_id[b] == id) { buf[0] = (char)b; return 1; }
  }
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    if (i + 2 < len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { buf[o++] = ' '; i += 2; }
    else buf[o++] = s[i];
  }
  return o;
}

int spill_tok_decode(const spill_tok *t, const int32_t *ids, size_t n, int skip_special,
                     char **out, size_t *out_len, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out || (!ids && n), SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  size_t cap = 64, len = 0;
  for (size_t i = 0; i < n; i++) {
    SPILL_FAIL_IF(e, ids[i] < 0 || ids[i] >= t->n_vocab || (t->flags[ids[i]] & TOK_F_UNUSED),
                  SPILL_E_RANGE, "tokenizer: id %d at %zu is not a token", ids[i], i);
    size_t l;
    tok_bytes(t, ids[i], &l);
    cap += l;
  }
  char *r = malloc(cap);
  SPILL_FAIL_IF(e, !r, SPILL_E_NOMEM, "tokenizer: no memory to decode %zu ids", n);
  for (size_t i = 0; i < n; i++) {
    if (skip_special && (t->flags[ids[i]] & TOK_F_SPECIAL)) continue;
    len += token_text(t, ids[i], r + len);
  }
  if (t->kind == TOK_SENTENCEPIECE && t->spm_strip_leading && len > 0 && r[0] == ' ') {
    memmove(r, r + 1, len - 1);
    len--;
  }
  r[len] = '\0';
  *out = r;
  if (out_len) *out_len = len;
  return SPILL_OK;
}

/* Length of the complete-or-hopeless prefix of p[0..n): stops before a
 * trailing sequence that may still complete. */
static size_t utf8_ready(const unsigned char *p, size_t n) {
  size_t k = 0; /* trailing continuation bytes */
  while (k < n && k < 4 && (p[n - 1 - k] & 0xC0) == 0x80) k++;
  if (k == n || k >= 4) return n; /* no lead byte in reach: stray bytes, release */
  unsigned b = p[n - 1 - k];
  size_t need = b >= 0xF0 && b <= 0xF4   ? 4
                : b >= 0xE0 && b <= 0xEF ? 3
                : b >= 0xC2 && b <= 0xDF ? 2
                                         : 0;
  if (need == 0 || k + 1 >= need) return n; /* complete, ASCII, or hopeless */
  return n - 1 - k;                         /* hold the incomplete tail */
}

int spill_tok_stream_push(const spill_tok *t, spill_tok_stream *st, int32_t id, int skip_special,
                          char *buf, size_t cap, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !st || !buf, SPILL_E_INVALID_ARG, "tokenizer: NULL argument");
  SPILL_FAIL_IF(e, id < 0 || id >= t->n_vocab || (t->flags[id] & TOK_F_UNUSED), SPILL_E_RANGE,
                "tokenizer: id %d is not a token", id);
  size_t l;
  tok_bytes(t, id, &l);
  SPILL_FAIL_IF(e, cap < l + (size_t)st->n_pend + 1, SPILL_E_RANGE,
                "tokenizer: stream buffer of %zu bytes is too small", cap);
  if (skip_special && (t->flags[id] & TOK_F_SPECIAL)) return 0;
  memcpy(buf, st->pend, (size_t)st->n_pend);
  size_t n = (size_t)st->n_pend;
  size_t tl = token_text(t, id, buf + n);
  if (t->kind == TOK_SENTENCEPIECE && t->spm_strip_leading && !st->started && n == 0 && tl > 0 &&
      buf[0] == ' ') {
    memmove(buf, buf + 1, tl - 1);
    tl--;
  }
  st->started = 1; /* decode strips one leading space of the whole text only */
  n += tl;
  size_t ready = utf8_ready((const unsigned char *)buf, n);
  st->n_pend = (int)(n - ready);
  memcpy(st->pend, buf + ready, (size_t)st->n_pend);
  return (int)ready;
}

int spill_tok_stream_flush(spill_tok_stream *st, char *buf, size_t cap) {
  if (!st || !buf || cap < (size_t)st->n_pend) return SPILL_E_INVALID_ARG;
  int n = st->n_pend;
  memcpy(buf, st->pend, (size_t)n);
  st->n_pend = 0;
  return n;
}

size_t spill_tok_max_piece(const spill_tok *t) { return t ? t->max_piece : 0; }

/* ---- facts ---------------------------------------------------------------------- */

const char *spill_tok_piece(const spill_tok *t, int32_t id, size_t *len) {
  if (!t || id < 0 || id >= t->n_vocab || (t->flags[id] & TOK_F_UNUSED)) return NULL;
  size_t l;
  const char *s = tok_bytes(t, id, &l);
  if (len) *len = l;
  return s;
}

int spill_tok_vocab_size(const spill_tok *t) { return t ? t->n_vocab : 0; }
int32_t spill_tok_bos(const spill_tok *t) { return t ? t->bos_id : -1; }
int32_t spill_tok_eos(const spill_tok *t) { return t ? t->eos_id : -1; }
int spill_tok_is_special(const spill_tok *t, int32_t id) {
  return t && id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_F_SPECIAL) != 0;
}
int32_t spill_tok_find(const spill_tok *t, const char *text, size_t len) {
  if (!t || !text) return -1;
  if (t->trie) {
    size_t m = 0;
    int32_t id = trie_match(t, text, len, 1, &m);
    if (id >= 0 && m == len) return id;
  }
  return tok_strmap_get(t, text, len);
}
const char *spill_tok_chat_template(const spill_tok *t) { return t ? t->chat_template : NULL; }
const char *spill_tok_kind(const spill_tok *t) {
  if (!t) return "";
  return t->kind == TOK_SENTENCEPIECE ? "bpe-sentencepiece"
         : t->kind == TOK_TIKTOKEN    ? "tiktoken"
                                      : "bpe-bytelevel";
}

void spill_tok_free(spill_tok *t) {
  if (!t) return;
  tok_free_splits(t);
  free(t->arena);
  free(t->tok_off);
  free(t->flags);
  if (t->vocab.slot) table_free(t->vocab.slot, ((size_t)t->vocab.mask + 1) * sizeof *t->vocab.slot);
  if (t->merges.ent) table_free(t->merges.ent, ((size_t)t->merges.mask + 1) * sizeof *t->merges.ent);
  free(t->trie);
  free(t->chat_template);
  free(t);
}
