/* engine/cache/policy_nextuse.c: "nextuse", an online approximation of
 * Belady's MIN for MoE routing: evict the expert whose next use is expected
 * farthest away.
 *
 * Model. A decode step touches layer 0..L-1 in order, so time is counted in
 * tokens (a token starts when the layer of the accesses wraps around) and a
 * key (layer, expert) can be reused at most once per token. Its chance p of
 * being used by a given token is estimated from two terms measured on the
 * OLMoE trace (docs/CACHE.md): a long-run rate, an exponentially decayed use
 * count with a half-life of NU_HALF_LIFE tokens (LRFU's CRF; survives
 * eviction in a bounded ghost table), plus a recency bonus NU_RECENCY / d
 * for a key last used d tokens ago (43.7% of keys used by one token are used
 * by the next, against 12.5% on average). The expected distance to the next
 * use is then 1/p tokens plus the layer phase: how far the key's layer lies
 * ahead of the layer being served, as a fraction of a token (layer-aware:
 * of two equally likely keys, the one whose layer comes later is needed
 * later). The victim has the largest expected distance.
 *
 * Admission: when a newly inserted key would itself be the best victim, it
 * becomes the "scratch" entry and is the next one evicted, so a cold key
 * cannot push out a warm one (Belady with bypass, emulated in a cache that
 * must place every miss). A hit clears the mark. Marks are per slot: the
 * engine claims a layer's misses pinned in one batch, so several newcomers
 * can be marked before any of them may be evicted.
 *
 * Cost: choose_victim and a full-cache insert each scan the slots once
 * (O(n_slots), no allocation); the ghost table is 8-way set-associative,
 * NU_GHOST_PER_SLOT entries per slot (at least NU_GHOST_MIN), 24 bytes each.
 * Deterministic for a seed (it salts the ghost hash); single-threaded.
 *
 * "nextuse-coact" adds cross-layer co-activation: within a token, layer l's
 * ids predict layer l+1's (docs/CACHE.md: 35-61% precision online on five
 * real families, 12-17 pp above the previous token's ids). It counts, in two
 * hashed tables of 2^20 saturating 16-bit counters (4 MiB), how often expert
 * a at layer l and expert b at layer l+1 were used by one token, and how
 * often a was used. While the current token is at layer l, a resident of
 * layer l+1 gets p_co = mean over the ids a seen at layer l so far of
 * count(a, b) / count(a), and its distance becomes (1 - p_co) / p + phase:
 * a key the next layer is likely to ask for is not evicted now. No constant
 * was tuned (weights 1.5-3 on p_co change nothing on the tuning halves);
 * refuted/0107-0108 hold the other attempts. With admission (below) its
 * gain over nextuse shrinks to +-0.2 pp.
 *
 * "nextuse-opt" learns from Belady's past decisions (Hawkeye-style): it
 * replays the last 8 x n_slots accesses (at least 2048) through OPTgen's
 * occupancy vector, which tells at every reuse whether MIN with n_slots
 * slots would have kept the key since its previous use, and trains a
 * saturating counter per (key, tokens between its last two uses) with the
 * answer. A resident's distance is stretched by up to 7/16 as the counter of
 * its last use says MIN would not keep it (nu_opt_adjust). Cost: one pass
 * over the reuse interval per access (at most the window), 1.6 MiB of tables.
 * Constants were tuned on the first half of the OLMoE trace only; refuted/
 * 0101-0104 hold the variants that did not pay.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"

#define NU_HALF_LIFE 32.0 /* tokens */
#define NU_RECENCY 0.2    /* bonus probability for a key used by the previous token */
#define NU_PHASE 1.0      /* weight of the layer phase, in tokens */
#define NU_WAYS 8u
#define NU_GHOST_PER_SLOT 32u
#define NU_GHOST_MIN 8192u
#define NU_RESCALE_TOKENS 2048u /* renormalise values every this many tokens */
#define NU_EMPTY_KEY UINT64_MAX
#define NU_CO_SIZE (1u << 20) /* co-activation counters per table */
#define NU_CO_MAXK 64u        /* ids remembered per layer and token */
#define NU_OPT_LAST (1u << 16) /* last-access entries (direct-mapped by key hash) */
#define NU_OPT_PRED (1u << 14) /* keep/evict counters */

typedef struct nu_state {
  uint32_t n_slots, n_resident;
  uint64_t seed, salt;
  double rate_gain; /* 1 - 2^(-1/H): turns a decayed count into a per-token rate */
  /* per slot */
  uint8_t *resident;  /* (n_slots) */
  uint64_t *key;      /* (n_slots) */
  double *val;        /* (n_slots) sum of 2^((t_i - base) / H) over uses t_i */
  uint64_t *last;     /* (n_slots) token of the last use */
  uint8_t *scratch;   /* (n_slots) 1: marked for eviction first (admission refused) */
  uint32_t n_scratch; /* marked slots */
  /* ghost history of evicted keys */
  uint32_t n_sets;    /* power of two */
  uint64_t *g_key;    /* (n_sets * NU_WAYS) */
  double *g_val;      /* (n_sets * NU_WAYS) */
  uint64_t *g_last;   /* (n_sets * NU_WAYS) */
  /* token clock */
  spill_cache_token_clock clk;
  uint64_t base;      /* token of the value base */
  double w_now;       /* 2^((clk.tok - base) / H) */
  /* nextuse-coact only (co == NULL otherwise) */
  uint16_t *co;                           /* (NU_CO_SIZE) count of (l, a) then (l + 1, b) */
  uint16_t *co_n;                         /* (NU_CO_SIZE) count of (l, a) */
  uint32_t prev_ids[NU_CO_MAXK], n_prev;  /* ids of the previous layer of this token */
  uint32_t cur_ids[NU_CO_MAXK], n_cur;    /* ids of the current layer so far */
  uint32_t co_layer;                      /* layer of cur_ids, UINT32_MAX = none */
  /* nextuse-opt only (opt_occ == NULL otherwise): Hawkeye-style learning
   * from Belady's past decisions (see nu_opt_train) */
  uint16_t *opt_occ;      /* (opt_w) MIN's occupancy at each recent access time */
  uint32_t opt_w;         /* history window in accesses, power of two */
  uint64_t opt_t;         /* accesses so far */
  uint64_t *opt_lkey;     /* (NU_OPT_LAST) last access of a key: key, */
  uint64_t *opt_lt;       /* ... its access time, */
  uint64_t *opt_ltok;     /* ... its token, */
  uint8_t *opt_lctx;      /* ... and the context it had then */
  int8_t *opt_pred;       /* (NU_OPT_PRED) keep/evict counters by (key, context) */
  int8_t *slot_pred;      /* (n_slots) the counter of the slot's key at its last use */
  uint64_t opt_trained;   /* key whose access admit already learned from */
  int8_t opt_trained_pred; /* ... and the counter it got */
  /* admit: the last refused key and the token that asked for it */
  uint64_t refused_key, refused_tok;
} nu_state;

static void nu_reset(void *p) {
  nu_state *s = (nu_state *)p;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    s->resident[i] = 0;
    s->key[i] = 0;
    s->val[i] = 0;
    s->last[i] = 0;
    s->scratch[i] = 0;
  }
  for (size_t i = 0; i < (size_t)s->n_sets * NU_WAYS; i++) {
    s->g_key[i] = NU_EMPTY_KEY;
    s->g_val[i] = 0;
    s->g_last[i] = 0;
  }
  s->n_resident = 0;
  s->n_scratch = 0;
  uint64_t rng = s->seed;
  s->salt = spill_cache_rng_next(&rng);
  memset(&s->clk, 0, sizeof(s->clk));
  s->base = 0;
  s->w_now = 1.0;
  if (s->co) {
    memset(s->co, 0, NU_CO_SIZE * sizeof(uint16_t));
    memset(s->co_n, 0, NU_CO_SIZE * sizeof(uint16_t));
  }
  s->n_prev = s->n_cur = 0;
  s->co_layer = UINT32_MAX;
  s->refused_key = NU_EMPTY_KEY;
  s->refused_tok = 0;
  if (s->opt_occ) {
    memset(s->opt_occ, 0, (size_t)s->opt_w * sizeof(uint16_t));
    for (uint32_t i = 0; i < NU_OPT_LAST; i++) s->opt_lkey[i] = NU_EMPTY_KEY;
    memset(s->opt_lt, 0, NU_OPT_LAST * sizeof(uint64_t));
    memset(s->opt_ltok, 0, NU_OPT_LAST * sizeof(uint64_t));
    memset(s->opt_lctx, 0, NU_OPT_LAST);
    memset(s->opt_pred, 0, NU_OPT_PRED);
    memset(s->slot_pred, 0, s->n_slots);
  }
  s->opt_t = 0;
  s->opt_trained = NU_EMPTY_KEY;
}

static void nu_destroy(void *p) {
  nu_state *s = (nu_state *)p;
  if (!s) return;
  free(s->resident);
  free(s->key);
  free(s->val);
  free(s->last);
  free(s->scratch);
  free(s->g_key);
  free(s->g_val);
  free(s->g_last);
  free(s->co);
  free(s->co_n);
  free(s->opt_occ);
  free(s->opt_lkey);
  free(s->opt_lt);
  free(s->opt_ltok);
  free(s->opt_lctx);
  free(s->opt_pred);
  free(s->slot_pred);
  free(s);
}

static void *nu_create(uint32_t n_slots, uint64_t seed) {
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 8)) return NULL;
  nu_state *s = (nu_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->seed = seed;
  s->rate_gain = 1.0 - exp2(-1.0 / NU_HALF_LIFE);
  uint64_t want = (uint64_t)n_slots * NU_GHOST_PER_SLOT;
  if (want < NU_GHOST_MIN) want = NU_GHOST_MIN;
  uint32_t sets = 1;
  while ((uint64_t)sets * NU_WAYS < want) sets <<= 1;
  s->n_sets = sets;
  size_t g = (size_t)sets * NU_WAYS;
  s->resident = (uint8_t *)calloc(n_slots, 1);
  s->key = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->val = (double *)calloc(n_slots, sizeof(double));
  s->last = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->scratch = (uint8_t *)calloc(n_slots, 1);
  s->g_key = (uint64_t *)calloc(g, sizeof(uint64_t));
  s->g_val = (double *)calloc(g, sizeof(double));
  s->g_last = (uint64_t *)calloc(g, sizeof(uint64_t));
  if (!s->resident || !s->key || !s->val || !s->last || !s->scratch || !s->g_key || !s->g_val ||
      !s->g_last) {
    nu_destroy(s);
    return NULL;
  }
  nu_reset(s);
  return s;
}

static inline uint32_t key_layer(uint64_t key) { return (uint32_t)(key >> 32); }

static inline size_t co_slot(uint32_t l, uint32_t a, uint32_t b) {
  return (size_t)(spill_cache_mix64(((uint64_t)l << 42) ^ ((uint64_t)a << 21) ^ b) &
                  (NU_CO_SIZE - 1));
}

/* nextuse-coact: learns from the demand access of key (its layer's id list
 * of the current token, and the pairs with the previous layer's ids). */
static void nu_coact_observe(nu_state *s, uint64_t key) {
  uint32_t l = key_layer(key), e = (uint32_t)key;
  if (l != s->co_layer) {
    if (s->co_layer != UINT32_MAX && l == s->co_layer + 1) {
      memcpy(s->prev_ids, s->cur_ids, s->n_cur * sizeof(uint32_t));
      s->n_prev = s->n_cur;
    } else {
      s->n_prev = 0;
    }
    s->n_cur = 0;
    s->co_layer = l;
  }
  for (uint32_t i = 0; i < s->n_cur; i++)
    if (s->cur_ids[i] == e) return;
  if (s->n_cur < NU_CO_MAXK) s->cur_ids[s->n_cur++] = e;
  size_t n = co_slot(l, e, UINT32_MAX);
  if (s->co_n[n] < UINT16_MAX) s->co_n[n]++;
  if (l == 0) return;
  for (uint32_t i = 0; i < s->n_prev; i++) {
    size_t c = co_slot(l - 1, s->prev_ids[i], e);
    if (s->co[c] < UINT16_MAX) s->co[c]++;
  }
}

/* P(key is used by the current token | the current layer's ids so far), or
 * -1 when key is not of the next layer. */
static double nu_coact_p(const nu_state *s, uint64_t key) {
  uint32_t kl = key_layer(key), e = (uint32_t)key;
  if (s->co_layer == UINT32_MAX || kl != s->co_layer + 1 || s->n_cur == 0) return -1;
  double sum = 0;
  for (uint32_t i = 0; i < s->n_cur; i++) {
    uint16_t n = s->co_n[co_slot(s->co_layer, s->cur_ids[i], UINT32_MAX)];
    if (n) sum += (double)s->co[co_slot(s->co_layer, s->cur_ids[i], e)] / (double)n;
  }
  double p = sum / (double)s->n_cur;
  return p > 1 ? 1 : p;
}

/* Moves the value base to the current token so values stay far from
 * overflow; every value is scaled by the same factor, so no order changes. */
static void nu_rescale(nu_state *s) {
  double f = 1.0 / s->w_now;
  for (uint32_t i = 0; i < s->n_slots; i++) s->val[i] *= f;
  for (size_t i = 0; i < (size_t)s->n_sets * NU_WAYS; i++) {
    if (s->g_key[i] == NU_EMPTY_KEY) continue;
    s->g_val[i] *= f;
    if (s->g_val[i] < 1e-12) s->g_key[i] = NU_EMPTY_KEY; /* faded to nothing */
  }
  s->base = s->clk.tok;
  s->w_now = 1.0;
}

/* Advances the token clock on the access of key: a new token starts when the
 * layer falls back below the current token's highest layer by more than the
 * lookahead slack (prefetches run up to 2 layers ahead of demand). */
static void nu_observe(nu_state *s, uint64_t key) {
  int started = spill_cache_token_tick(&s->clk, key_layer(key));
  if (!started) return;
  s->w_now = exp2((double)(s->clk.tok - s->base) / NU_HALF_LIFE);
  if (s->clk.tok - s->base >= NU_RESCALE_TOKENS) nu_rescale(s);
}

/* nextuse-opt: OPTgen (Hawkeye, Jain & Lin 2016) over the last opt_w
 * accesses. On every demand access of key at time t, whose previous access
 * was at t0 within the window: MIN would have kept key from t0 to t iff
 * fewer than n_slots intervals already cover every time in [t0, t) (the
 * occupancy vector, one count per access time); if so the interval is added.
 * The answer trains a counter indexed by (key, context at t0) up (MIN kept
 * it) or down; a previous access beyond the window trains it down. The
 * context is how many tokens passed between the key's previous use and the
 * one before (1, 2, 3-8, more or none): next-token reuse is where MIN's hits
 * are. Returns the counter for (key, context now), which ranks key until
 * its next use (nu_opt_adjust). */
static int8_t nu_opt_train(nu_state *s, uint64_t key) {
  const uint64_t t = s->opt_t++;
  const uint32_t W = s->opt_w;
  s->opt_occ[t & (W - 1)] = 0;
  size_t h = (size_t)(spill_cache_mix64(key ^ s->salt) & (NU_OPT_LAST - 1));
  uint8_t ctx = 3;
  if (s->opt_lkey[h] == key) {
    uint64_t t0 = s->opt_lt[h], d = s->clk.tok - s->opt_ltok[h];
    ctx = d <= 1 ? 0 : d == 2 ? 1 : d <= 8 ? 2 : 3;
    size_t pi = (size_t)(spill_cache_mix64(key * 4 + s->opt_lctx[h]) & (NU_OPT_PRED - 1));
    int kept = t - t0 < W;
    for (uint64_t u = t0; kept && u < t; u++)
      if (s->opt_occ[u & (W - 1)] >= s->n_slots) kept = 0;
    if (kept) {
      for (uint64_t u = t0; u < t; u++) s->opt_occ[u & (W - 1)]++;
      if (s->opt_pred[pi] < 3) s->opt_pred[pi]++;
    } else if (s->opt_pred[pi] > -4) {
      s->opt_pred[pi]--;
    }
  }
  s->opt_lkey[h] = key;
  s->opt_lt[h] = t;
  s->opt_ltok[h] = s->clk.tok;
  s->opt_lctx[h] = ctx;
  return s->opt_pred[(size_t)(spill_cache_mix64(key * 4 + ctx) & (NU_OPT_PRED - 1))];
}

/* Expected tokens until key's next use (larger = better victim). */
static double nu_distance(const nu_state *s, uint64_t key, double val, uint64_t last) {
  double p = s->rate_gain * val / s->w_now;
  uint64_t d = s->clk.tok > last ? s->clk.tok - last : 1;
  p += NU_RECENCY / (double)d;
  if (p < 1e-9) p = 1e-9;
  uint32_t L = s->clk.max_layer + 1, kl = key_layer(key), l = s->clk.cur_layer;
  if (s->co) {
    double pc = nu_coact_p(s, key);
    if (pc >= 0) return (1.0 - pc) / p + NU_PHASE / (double)L;
  }
  double phase = kl == l ? 1.0 : (double)((kl + L - l % L) % L) / (double)L;
  if (kl > s->clk.max_layer) phase = 1.0;
  return 1.0 / p + NU_PHASE * phase;
}

/* nextuse-opt's ranking: a resident's expected distance is stretched by up
 * to 7/16 as its keep/evict counter falls from 3 (MIN kept it every time)
 * to -4. Shape and weight chosen on the OLMoE tuning half only (refuted/
 * 0109: averse-first eviction, as Hawkeye does, and stronger weights). */
static double nu_opt_adjust(double d, int8_t pred) { return d * (1.0 + (3.0 - pred) / 16.0); }

/* Distance of resident slot i, with nextuse-opt's penalty for a key MIN
 * would not keep. */
static double nu_slot_distance(const nu_state *s, uint32_t i) {
  double d = nu_distance(s, s->key[i], s->val[i], s->last[i]);
  if (s->opt_occ) d = nu_opt_adjust(d, s->slot_pred[i]);
  return d;
}

static size_t ghost_set(const nu_state *s, uint64_t key) {
  return (size_t)(spill_cache_mix64(key ^ s->salt) & (s->n_sets - 1)) * NU_WAYS;
}

/* Takes key out of the ghost table: its value and last use (0, 0 if absent). */
static void ghost_take(nu_state *s, uint64_t key, double *val, uint64_t *last) {
  size_t b = ghost_set(s, key);
  *val = 0;
  *last = 0;
  for (uint32_t w = 0; w < NU_WAYS; w++) {
    if (s->g_key[b + w] != key) continue;
    *val = s->g_val[b + w];
    *last = s->g_last[b + w];
    s->g_key[b + w] = NU_EMPTY_KEY;
    return;
  }
}

/* Remembers an evicted key, replacing the set's empty or smallest entry. */
static void ghost_put(nu_state *s, uint64_t key, double val, uint64_t last) {
  size_t b = ghost_set(s, key), v = b;
  for (uint32_t w = 0; w < NU_WAYS; w++) {
    if (s->g_key[b + w] == NU_EMPTY_KEY) {
      v = b + w;
      break;
    }
    if (s->g_val[b + w] < s->g_val[v]) v = b + w;
  }
  s->g_key[v] = key;
  s->g_val[v] = val;
  s->g_last[v] = last;
}

static void nu_unmark(nu_state *s, uint32_t slot) {
  if (!s->scratch[slot]) return;
  s->scratch[slot] = 0;
  s->n_scratch--;
}

/* Finds key in the ghost table: its entry index, or -1. */
static int64_t ghost_find(const nu_state *s, uint64_t key) {
  size_t b = ghost_set(s, key);
  for (uint32_t w = 0; w < NU_WAYS; w++)
    if (s->g_key[b + w] == key) return (int64_t)(b + w);
  return -1;
}

/* Admission on a miss into a full cache: key is refused when it would itself
 * be the best victim (its expected distance, counting this use, is above
 * every evictable resident's; ties admit it). A refused key's use goes into its ghost
 * entry. This is Belady-with-bypass's rule made online; replay and engine
 * then agree, since a refused key needs no slot while the engine's batch of
 * claims is pinned (docs/CACHE.md). */
static int nu_admit(void *p, uint64_t key, const uint8_t *evictable) {
  nu_state *s = (nu_state *)p;
  /* A key is used at most once per token: asked again by the token that
   * already recorded its use (the last refusal, or any refusal whose ghost
   * entry says so), it is the caller re-claiming a deferred read (the stream
   * defers a declined miss when both bounce buffers are busy). */
  if (key == s->refused_key && s->clk.tok == s->refused_tok) return 0;
  nu_observe(s, key);
  int64_t g = ghost_find(s, key);
  if (g >= 0 && s->g_last[g] == s->clk.tok) return 0;
  if (s->co) nu_coact_observe(s, key);
  double val = (g >= 0 ? s->g_val[g] : 0) + s->w_now;
  double mine = nu_distance(s, key, val, s->clk.tok);
  if (s->opt_occ) {
    s->opt_trained = key;
    s->opt_trained_pred = nu_opt_train(s, key);
    mine = nu_opt_adjust(mine, s->opt_trained_pred);
  }
  int any = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    if (!evictable[i] || !s->resident[i]) continue;
    if (nu_slot_distance(s, i) >= mine) return 1;
    any = 1;
  }
  if (!any) return 1; /* nothing evictable: the cache reports ALL_PINNED */
  if (g >= 0) {
    s->g_val[g] = val;
    s->g_last[g] = s->clk.tok;
  } else {
    ghost_put(s, key, val, s->clk.tok);
  }
  s->refused_key = key;
  s->refused_tok = s->clk.tok;
  return 0;
}

static void nu_use(nu_state *s, uint32_t slot) {
  s->val[slot] += s->w_now;
  s->last[slot] = s->clk.tok;
}

static void nu_on_hit(void *p, uint32_t slot, uint64_t key) {
  nu_state *s = (nu_state *)p;
  if (!s->resident[slot]) return;
  nu_observe(s, key);
  if (s->co) nu_coact_observe(s, key);
  if (s->opt_occ) {
    s->opt_trained = NU_EMPTY_KEY;
    s->slot_pred[slot] = nu_opt_train(s, key);
  }
  nu_use(s, slot);
  nu_unmark(s, slot);
}

static void nu_on_insert(void *p, uint32_t slot, uint64_t key) {
  nu_state *s = (nu_state *)p;
  if (s->resident[slot]) return;
  nu_observe(s, key);
  s->resident[slot] = 1;
  s->n_resident++;
  s->key[slot] = key;
  ghost_take(s, key, &s->val[slot], &s->last[slot]);
  if (s->co) nu_coact_observe(s, key);
  if (s->opt_occ) {
    s->slot_pred[slot] = s->opt_trained == key ? s->opt_trained_pred : nu_opt_train(s, key);
    s->opt_trained = NU_EMPTY_KEY;
  }
  nu_use(s, slot);
  nu_unmark(s, slot);
  if (s->n_resident < s->n_slots) return;
  /* Full: admit only if some other resident is a better victim. */
  double mine = nu_slot_distance(s, slot);
  for (uint32_t i = 0; i < s->n_slots; i++)
    if (i != slot && s->resident[i] && nu_slot_distance(s, i) > mine) return;
  s->scratch[slot] = 1;
  s->n_scratch++;
}

static void nu_on_evict(void *p, uint32_t slot, uint64_t key) {
  nu_state *s = (nu_state *)p;
  if (!s->resident[slot]) return;
  ghost_put(s, key, s->val[slot], s->last[slot]);
  s->resident[slot] = 0;
  s->n_resident--;
  s->val[slot] = 0;
  nu_unmark(s, slot);
}

static int64_t nu_choose_victim(void *p, uint64_t incoming_key, const uint8_t *evictable) {
  nu_state *s = (nu_state *)p;
  nu_observe(s, incoming_key);
  /* A marked newcomer goes first; when a layer's batch of misses left
   * several marks (the engine pins them until the layer is served, so each
   * later miss of the batch must pass over them), the marked one with the
   * largest distance. */
  uint32_t best = SPILL_CACHE_NIL;
  double best_d = -1.0;
  int marked = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    if (!evictable[i]) continue;
    if (s->n_scratch && marked && !s->scratch[i]) continue;
    double d = nu_slot_distance(s, i);
    if (s->n_scratch && s->scratch[i] && !marked) {
      marked = 1;
      best = i;
      best_d = d;
      continue;
    }
    if (best == SPILL_CACHE_NIL || d > best_d) {
      best = i;
      best_d = d;
    }
  }
  return best == SPILL_CACHE_NIL ? -1 : (int64_t)best;
}

static void *nu_create_coact(uint32_t n_slots, uint64_t seed) {
  nu_state *s = (nu_state *)nu_create(n_slots, seed);
  if (!s) return NULL;
  s->co = (uint16_t *)calloc(NU_CO_SIZE, sizeof(uint16_t));
  s->co_n = (uint16_t *)calloc(NU_CO_SIZE, sizeof(uint16_t));
  if (!s->co || !s->co_n) {
    nu_destroy(s);
    return NULL;
  }
  nu_reset(s);
  return s;
}

static void *nu_create_opt(uint32_t n_slots, uint64_t seed) {
  nu_state *s = (nu_state *)nu_create(n_slots, seed);
  if (!s) return NULL;
  uint32_t w = 2048;
  while (w < 8u * n_slots && w < (1u << 20)) w <<= 1;
  s->opt_w = w;
  s->opt_occ = (uint16_t *)calloc(w, sizeof(uint16_t));
  s->opt_lkey = (uint64_t *)calloc(NU_OPT_LAST, sizeof(uint64_t));
  s->opt_lt = (uint64_t *)calloc(NU_OPT_LAST, sizeof(uint64_t));
  s->opt_ltok = (uint64_t *)calloc(NU_OPT_LAST, sizeof(uint64_t));
  s->opt_lctx = (uint8_t *)calloc(NU_OPT_LAST, 1);
  s->opt_pred = (int8_t *)calloc(NU_OPT_PRED, 1);
  s->slot_pred = (int8_t *)calloc(n_slots, 1);
  if (!s->opt_occ || !s->opt_lkey || !s->opt_lt || !s->opt_ltok || !s->opt_lctx ||
      !s->opt_pred || !s->slot_pred) {
    nu_destroy(s);
    return NULL;
  }
  nu_reset(s);
  return s;
}

const spill_cache_policy spill_cache_policy_nextuse_opt = {
    .name = "nextuse-opt",
    .create = nu_create_opt,
    .destroy = nu_destroy,
    .reset = nu_reset,
    .on_hit = nu_on_hit,
    .on_insert = nu_on_insert,
    .choose_victim = nu_choose_victim,
    .on_evict = nu_on_evict,
    .admit = nu_admit,
};

const spill_cache_policy spill_cache_policy_nextuse_coact = {
    .name = "nextuse-coact",
    .create = nu_create_coact,
    .destroy = nu_destroy,
    .reset = nu_reset,
    .on_hit = nu_on_hit,
    .on_insert = nu_on_insert,
    .choose_victim = nu_choose_victim,
    .on_evict = nu_on_evict,
    .admit = nu_admit,
};

const spill_cache_policy spill_cache_policy_nextuse = {
    .name = "nextuse",
    .create = nu_create,
    .destroy = nu_destroy,
    .reset = nu_reset,
    .on_hit = nu_on_hit,
    .on_insert = nu_on_insert,
    .choose_victim = nu_choose_victim,
    .on_evict = nu_on_evict,
    .admit = nu_admit,
};
