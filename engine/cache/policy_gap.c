/* engine/cache/policy_gap.c: "gap-hd", a replacement policy that ranks
 * residents by hit density (after Beckmann & Sanchez's LHD) computed from a
 * per-key distribution of inter-use gaps (in tokens) conditioned on the
 * key's current age, instead of nextuse's decayed rate plus recency bonus.
 *
 * Model. Time is counted in tokens as in nextuse (a token starts when the
 * layer of the accesses falls back). Every use of key (layer, expert)
 * records the gap since its previous use: 1..GP_GMAX exactly, longer gaps in
 * one tail bucket (with their mean). A key's distribution is its own counts
 * plus GP_PRIOR pseudo-counts of its layer's pooled distribution. At age a
 * (tokens since the last use), the next gap G is conditioned on G >= a when
 * the key's layer is still ahead in the current token, on G >= a + 1 when it
 * has been served. R, the tokens from now to the next use, is G - a plus
 * the layer offset (the key's layer minus the current one, as a fraction of
 * a token). A slot kept for up to E more tokens (E = the cache's mean age at
 * eviction, an online moving average, at least one token) earns
 * P(R <= E) hits and costs E[min(R, E)] slot-tokens; the victim has the
 * smallest ratio (hit density). Below one token's working set E is about a
 * token, so this ranks by the chance of reuse by the next token per slot
 * held, which is where Belady's hits are (docs/CACHE.md).
 *
 * A Mockingjay-style ranking by the same distribution (evict the largest
 * E[R]) and censoring keys idle for GP_GMAX tokens were tried and did not
 * pay (refuted/0115; constants chosen on the OLMoE tuning half only).
 *
 * Admission as nextuse's: a miss into a full cache is refused when the
 * newcomer would itself be the best victim.
 *
 * Cost: per key 34 floats in an 8-way hashed table (GP_KEYS_PER_SLOT per
 * slot, at least GP_KEYS_MIN keys); choose_victim scans the slots once and
 * each slot's score is recomputed at most once per token or use
 * (O(GP_GMAX)). Deterministic; single-threaded.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"

#define GP_GMAX 32u          /* gaps counted exactly up to this many tokens */
#define GP_NB (GP_GMAX + 1u) /* buckets: gaps 1..GMAX, then the tail */
#define GP_WAYS 8u
#define GP_KEYS_PER_SLOT 32u
#define GP_KEYS_MIN 16384u
#define GP_MAX_LAYERS 256u
#define GP_EMPTY UINT64_MAX

#define GP_PRIOR 2.0       /* pseudo-counts of the layer's pooled distribution */
#define GP_HORIZON_MIN 1.0 /* tokens: the least horizon E */
#define GP_EVICT_EWMA 0.01 /* weight of one eviction in the mean eviction age */

typedef struct gp_entry {
  uint64_t key, last; /* last: token of the last use */
  float h[GP_NB];     /* decayed gap counts */
  float tail_sum;     /* sum of tail gaps (decayed like h[GP_GMAX]) */
} gp_entry;

typedef struct gp_state {
  uint32_t n_slots, n_resident, n_sets;
  uint64_t seed, salt;
  gp_entry *tab;                      /* (n_sets * GP_WAYS) */
  double prior[GP_MAX_LAYERS][GP_NB]; /* pooled gap counts per layer */
  double prior_tail[GP_MAX_LAYERS];   /* pooled tail gap sum */
  uint8_t *resident;                  /* (n_slots) */
  uint64_t *key;                      /* (n_slots) */
  double *score;                      /* (n_slots) cached victim score */
  uint64_t *score_tok;                /* (n_slots) token of the score (+1; 0 = stale) */
  uint32_t *score_layer;              /* (n_slots) current layer of the score */
  double evict_age;                   /* EWMA of the age at eviction */
  spill_cache_token_clock clk;
  uint64_t refused_key, refused_tok;
} gp_state;

static void gp_reset(void *p) {
  gp_state *s = (gp_state *)p;
  for (size_t i = 0; i < (size_t)s->n_sets * GP_WAYS; i++) {
    memset(&s->tab[i], 0, sizeof(gp_entry));
    s->tab[i].key = GP_EMPTY;
  }
  memset(s->prior, 0, sizeof(s->prior));
  memset(s->prior_tail, 0, sizeof(s->prior_tail));
  memset(s->resident, 0, s->n_slots);
  memset(s->score_tok, 0, s->n_slots * sizeof(uint64_t));
  s->n_resident = 0;
  uint64_t rng = s->seed;
  s->salt = spill_cache_rng_next(&rng);
  s->evict_age = 1.0;
  memset(&s->clk, 0, sizeof(s->clk));
  s->refused_key = GP_EMPTY;
  s->refused_tok = 0;
}

static void gp_destroy(void *p) {
  gp_state *s = (gp_state *)p;
  if (!s) return;
  free(s->tab);
  free(s->resident);
  free(s->key);
  free(s->score);
  free(s->score_tok);
  free(s->score_layer);
  free(s);
}

static void *gp_create(uint32_t n_slots, uint64_t seed) {
  if (n_slots == 0 || n_slots > (UINT32_MAX >> 8)) return NULL;
  gp_state *s = (gp_state *)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->n_slots = n_slots;
  s->seed = seed;
  uint64_t want = (uint64_t)n_slots * GP_KEYS_PER_SLOT;
  if (want < GP_KEYS_MIN) want = GP_KEYS_MIN;
  uint32_t sets = 1;
  while ((uint64_t)sets * GP_WAYS < want) sets <<= 1;
  s->n_sets = sets;
  s->tab = (gp_entry *)malloc((size_t)sets * GP_WAYS * sizeof(gp_entry));
  s->resident = (uint8_t *)calloc(n_slots, 1);
  s->key = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->score = (double *)calloc(n_slots, sizeof(double));
  s->score_tok = (uint64_t *)calloc(n_slots, sizeof(uint64_t));
  s->score_layer = (uint32_t *)calloc(n_slots, sizeof(uint32_t));
  if (!s->tab || !s->resident || !s->key || !s->score || !s->score_tok || !s->score_layer) {
    gp_destroy(s);
    return NULL;
  }
  gp_reset(s);
  return s;
}

static uint32_t gp_layer(uint64_t key) {
  uint32_t l = (uint32_t)(key >> 32);
  return l < GP_MAX_LAYERS ? l : GP_MAX_LAYERS - 1;
}

/* The key's entry; created (replacing the set's least used) when absent and
 * make != 0, else NULL. */
static gp_entry *gp_find(gp_state *s, uint64_t key, int make) {
  size_t b = (size_t)(spill_cache_mix64(key ^ s->salt) & (s->n_sets - 1)) * GP_WAYS;
  size_t v = b;
  float v_mass = INFINITY;
  for (uint32_t w = 0; w < GP_WAYS; w++) {
    gp_entry *e = &s->tab[b + w];
    if (e->key == key) return e;
    float m = 0;
    if (e->key != GP_EMPTY)
      for (uint32_t i = 0; i < GP_NB; i++) m += e->h[i];
    else m = -1;
    if (m < v_mass) {
      v_mass = m;
      v = b + w;
    }
  }
  if (!make) return NULL;
  gp_entry *e = &s->tab[v];
  memset(e, 0, sizeof(*e));
  e->key = key;
  e->last = GP_EMPTY;
  return e;
}

static void gp_observe(gp_state *s, uint64_t key) {
  spill_cache_token_tick(&s->clk, (uint32_t)(key >> 32));
}

/* Records a use of key now: the gap since its previous use goes into its
 * counts and its layer's prior. Returns the entry. Idempotent within a
 * token (a key is used at most once per token). */
static gp_entry *gp_use(gp_state *s, uint64_t key) {
  gp_entry *e = gp_find(s, key, 1);
  if (e->last == s->clk.tok) return e;
  if (e->last != GP_EMPTY) {
    uint64_t g = s->clk.tok - e->last;
    uint32_t b = g <= GP_GMAX ? (uint32_t)g - 1 : GP_GMAX;
    uint32_t l = gp_layer(key);
    e->h[b] += 1;
    s->prior[l][b] += 1;
    if (b == GP_GMAX) {
      e->tail_sum += (float)g;
      s->prior_tail[l] += (double)g;
    }
  }
  e->last = s->clk.tok;
  return e;
}

/* Tokens from now to the key's next use if its gap is g; off: the key's
 * layer minus the current one, as a fraction of a token. */
static double gp_remaining(uint64_t g, uint64_t age, double off) { return (double)(g - age) + off; }

/* The key's victim score: larger = better victim. */
static double gp_score(const gp_state *s, const gp_entry *e, uint64_t key) {
  uint32_t L = s->clk.max_layer + 1, kl = (uint32_t)(key >> 32), l = s->clk.cur_layer;
  uint32_t pl = gp_layer(key);
  double off = ((double)kl - (double)l) / (double)L;
  if (kl > s->clk.max_layer) off = 0.0;
  uint64_t age = e && e->last != GP_EMPTY ? s->clk.tok - e->last : 0;
  /* the key's layer already served in this token (or the key used by it):
   * its next use is at least one token ahead */
  uint64_t gmin = age + (kl < l || age == 0 ? 1 : 0);
  double psum = 0;
  for (uint32_t i = 0; i < GP_NB; i++) psum += s->prior[pl][i];
  double pw = psum > 0 ? GP_PRIOR / psum : 0;
  double ptail =
      s->prior[pl][GP_GMAX] > 0 ? s->prior_tail[pl] / s->prior[pl][GP_GMAX] : 2.0 * GP_GMAX;
  double horizon = s->evict_age < GP_HORIZON_MIN ? GP_HORIZON_MIN : s->evict_age;
  double mass = 0, hit = 0, cost = 0;
  for (uint32_t i = 0; i < GP_NB; i++) {
    double w = (e ? e->h[i] : 0) + pw * s->prior[pl][i];
    if (w <= 0) continue;
    uint64_t g;
    if (i < GP_GMAX) {
      g = i + 1;
      if (g < gmin) continue;
    } else {
      double tw = (e ? e->h[i] : 0), ts = (e ? e->tail_sum : 0) + pw * s->prior_tail[pl];
      double m = tw + pw * s->prior[pl][i] > 0 ? ts / (tw + pw * s->prior[pl][i]) : ptail;
      g = (uint64_t)(m + 0.5);
      if (g < gmin) g = gmin + (uint64_t)(m / 2); /* older than the tail's mean */
    }
    double r = gp_remaining(g, age, off);
    mass += w;
    if (r <= horizon) hit += w;
    cost += w * (r < horizon ? r : horizon);
  }
  if (mass <= 0) return 0.0;                   /* nothing known: no hit expected */
  return -(hit / (cost > 1e-9 ? cost : 1e-9)); /* low hit density = good victim */
}

static double gp_slot_score(gp_state *s, uint32_t i) {
  if (s->score_tok[i] == s->clk.tok + 1 && s->score_layer[i] == s->clk.cur_layer)
    return s->score[i];
  gp_entry *e = gp_find(s, s->key[i], 0);
  s->score[i] = gp_score(s, e, s->key[i]);
  s->score_tok[i] = s->clk.tok + 1;
  s->score_layer[i] = s->clk.cur_layer;
  return s->score[i];
}

static int gp_admit(void *p, uint64_t key, const uint8_t *evictable) {
  gp_state *s = (gp_state *)p;
  if (key == s->refused_key && s->clk.tok == s->refused_tok) return 0;
  gp_observe(s, key);
  gp_entry *e = gp_find(s, key, 0);
  if (e && e->last == s->clk.tok) return 0; /* re-claim of a refused read */
  e = gp_use(s, key);
  double mine = gp_score(s, e, key);
  int any = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    if (!evictable[i] || !s->resident[i]) continue;
    if (gp_slot_score(s, i) >= mine) return 1;
    any = 1;
  }
  if (!any) return 1;
  s->refused_key = key;
  s->refused_tok = s->clk.tok;
  return 0;
}

static void gp_on_hit(void *p, uint32_t slot, uint64_t key) {
  gp_state *s = (gp_state *)p;
  if (!s->resident[slot]) return;
  gp_observe(s, key);
  gp_use(s, key);
  s->score_tok[slot] = 0;
}

static void gp_on_insert(void *p, uint32_t slot, uint64_t key) {
  gp_state *s = (gp_state *)p;
  if (s->resident[slot]) return;
  gp_observe(s, key);
  gp_use(s, key);
  s->resident[slot] = 1;
  s->n_resident++;
  s->key[slot] = key;
  s->score_tok[slot] = 0;
}

static void gp_on_evict(void *p, uint32_t slot, uint64_t key) {
  gp_state *s = (gp_state *)p;
  if (!s->resident[slot]) return;
  gp_entry *e = gp_find(s, key, 0);
  if (e && e->last != GP_EMPTY) {
    double age = (double)(s->clk.tok - e->last);
    s->evict_age = (1.0 - GP_EVICT_EWMA) * s->evict_age + GP_EVICT_EWMA * age;
  }
  s->resident[slot] = 0;
  s->n_resident--;
}

static int64_t gp_choose_victim(void *p, uint64_t incoming_key, const uint8_t *evictable) {
  gp_state *s = (gp_state *)p;
  gp_observe(s, incoming_key);
  uint32_t best = SPILL_CACHE_NIL;
  double best_d = 0;
  for (uint32_t i = 0; i < s->n_slots; i++) {
    if (!evictable[i] || !s->resident[i]) continue;
    double d = gp_slot_score(s, i);
    if (best == SPILL_CACHE_NIL || d > best_d) {
      best = i;
      best_d = d;
    }
  }
  return best == SPILL_CACHE_NIL ? -1 : (int64_t)best;
}

const spill_cache_policy spill_cache_policy_gap_hd = {
    .name = "gap-hd",
    .create = gp_create,
    .destroy = gp_destroy,
    .reset = gp_reset,
    .on_hit = gp_on_hit,
    .on_insert = gp_on_insert,
    .choose_victim = gp_choose_victim,
    .on_evict = gp_on_evict,
    .admit = gp_admit,
};
