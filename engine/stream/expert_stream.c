/* engine/stream/expert_stream.c: demand + speculative expert reads over the
 * cache and the reader. See expert_stream.h for the contract.
 *
 * Bookkeeping: `items` is the current demand request (one per id, in router
 * order); `inf` is the table of reads in flight, indexed by the I/O tag; a
 * read may serve a demand item (req >= 0), be a prefetch (spec), or both
 * when a demand request finds its expert still loading from a prefetch.
 * Delivered records stay pinned until release(); `pins` maps (layer, id) to
 * what must be unpinned. Hit/miss is decided once, at request time, by the
 * stream itself (the cache's own counters would count a retried claim
 * twice), so hits + misses == requested always holds.
 *
 * Record checks: with verify on (direct and pagecache modes), a read that
 * completes is queued on the record checker (record_check.h) instead of
 * being crc'd here; its in-flight entry, slot pin and buffer stay as they
 * are until the result comes back, and only then is the record made ready
 * (or its error raised) exactly as an inline check would: same status, same
 * message, same counters. When next_ready hands out a record (the consumer
 * goes to compute), it first queues the reads that landed meanwhile and
 * kicks the checker's helper thread, so they are checked during that
 * compute; when it has nothing to hand out, it runs queued checks itself
 * before waiting. Verify off checks inline (64 header bytes). mmap mode
 * keeps the inline check too (as before this change; its records are views
 * into the mapping, not reads into our buffers; off-thread checks were not
 * measured there). */
#define _POSIX_C_SOURCE 200809L
#include "engine/stream/expert_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/base/clock.h"
#include "engine/cache/expert_cache.h"
#include "engine/io/reader.h"
#include "engine/stream/record_check.h"

enum { IT_PENDING = 0, IT_READY = 1, IT_DELIVERED = 2, IT_DEFERRED = 3, IT_DROPPED = 4,
       IT_UNREAD = 5 /* slot claimed, read not yet issued (overlap off) */ };
/* Bounce buffers: a read that finds no cache slot lands in one. Two suffice
 * beside a cache (they only catch the rare all-pinned claim); without a cache
 * every read bounces, so that mode gets 2 x top_k (the planner's min_cache,
 * which no slot uses then) and a layer's reads all fly at once instead of
 * two at a time. */
#define N_BOUNCE_MIN 2

typedef struct item {
  uint32_t id;
  int state;
  int hit;
  int joined;             /* waits for a read it did not issue (prefetch, abandoned request) */
  int retried;            /* ... that failed, so it issued its own */
  spill_cache_entry *ent; /* pinned entry, or NULL */
  int bounce;             /* bounce buffer index, or -1 */
  const uint8_t *data;
} item;

typedef struct inflight {
  int used;
  uint32_t layer, id;
  spill_cache_entry *ent; /* slot being filled, or NULL (bounce / mmap view) */
  int bounce;
  int req;  /* demand item waiting for it, or -1 */
  int spec; /* issued as a prefetch (holds its own pin on ent) */
  int orphan_pins; /* detached demand pins to drop on completion (one per abandoned
                     request that was waiting for this read) */
  const void *data; /* the record, once read (kept while it is checked) */
  size_t bytes;
} inflight;

typedef struct pin {
  uint32_t layer, id;
  spill_cache_entry *ent;
  int bounce;
} pin;

struct spill_stream {
  const spill_container *c;
  spill_stream_opts o;
  spill_io *io;
  uint32_t *file_of_bank; /* io file id per bank index */
  spill_cache *cache;     /* NULL: no cache (or mmap) */
  uint64_t rec_bytes;
  int mmap_mode;
  int direct_fallback;
  /* current demand request */
  int layer, n, cap;
  item *items;
  int *ready_q, rq_head, rq_tail; /* ring of item indices, capacity cap */
  int n_waiting;                  /* items whose read is in flight */
  int n_deferred;
  int n_unread;                   /* IT_UNREAD items (overlap off) */
  uint8_t *last_hits;
  int n_last_hits;
  /* reads in flight */
  inflight *inf;
  int inf_cap, inf_used;
  /* bounce buffers */
  uint8_t **bounce; /* (n_bounce) record buffers */
  int *bounce_busy;  /* (n_bounce) */
  int n_bounce;
  /* delivered, not released */
  pin *pins;
  int n_pins, pins_cap;
  spill_stream_counters k;
  spill_rcheck *chk; /* off-thread record checks (NULL in mmap mode) */
  spill_io_completion comp[64];
};

/* ---------------------------------------------------------------- helpers */

static const spill_bank_info *bank_of(const spill_stream *s, int layer, int *bi) {
  const spill_manifest *m = &s->c->m;
  int i = layer - m->arch.n_dense_layers;
  if (i < 0 || i >= m->n_banks) return NULL;
  *bi = i;
  return &m->banks[i];
}

static int grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elem);
  if (!q) return -1;
  memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  *p = q;
  *cap = nc;
  return 0;
}

static int inf_alloc(spill_stream *s, spill_err *e) {
  for (int i = 0; i < s->inf_cap; i++)
    if (!s->inf[i].used) {
      memset(&s->inf[i], 0, sizeof s->inf[i]);
      s->inf[i].used = 1;
      s->inf[i].req = -1;
      s->inf[i].bounce = -1;
      s->inf_used++;
      return i;
    }
  int old = s->inf_cap;
  if (grow((void **)&s->inf, &s->inf_cap, old + 1, sizeof(inflight)))
    return spill_err_set(e, SPILL_E_NOMEM, "stream: cannot grow the in-flight table");
  s->inf[old].used = 1;
  s->inf[old].req = -1;
  s->inf[old].bounce = -1;
  s->inf_used++;
  return old;
}

static int submit(spill_stream *s, int layer, uint32_t id, void *dst, int tag, spill_err *e) {
  int bi;
  const spill_bank_info *b = bank_of(s, layer, &bi);
  SPILL_FAIL_IF(e, !b, SPILL_E_RANGE, "stream: layer %d has no expert bank", layer);
  SPILL_FAIL_IF(e, id >= b->n_experts, SPILL_E_RANGE, "stream: %s: expert %u out of range (%u)",
                b->file, id, b->n_experts);
  uint64_t off = b->data_offset + (uint64_t)id * b->record_bytes;
  int rc = spill_io_submit(s->io, s->file_of_bank[bi], off, (size_t)s->rec_bytes, dst,
                           (uint64_t)tag);
  if (rc < 0)
    return spill_err_set(e, rc, "stream: %s layer %d expert %u: submit failed (%s)", b->file,
                         layer, id, spill_status_name(rc));
  return SPILL_OK;
}

/* Grows the bounce set to n buffers (never shrinks; idle when unused). */
static int ensure_bounce(spill_stream *s, int n, spill_err *e) {
  if (n <= s->n_bounce) return SPILL_OK;
  uint8_t **b = realloc(s->bounce, (size_t)n * sizeof *b);
  if (b) s->bounce = b;
  int *busy = b ? realloc(s->bounce_busy, (size_t)n * sizeof *busy) : NULL;
  if (busy) s->bounce_busy = busy;
  SPILL_FAIL_IF(e, !b || !busy, SPILL_E_NOMEM, "stream: bounce buffer table");
  for (int i = s->n_bounce; i < n; i++) {
    s->bounce_busy[i] = 0;
    s->bounce[i] = spill_alloc_nozero(s->rec_bytes ? s->rec_bytes : 4096, 4096);
    if (!s->bounce[i])
      return spill_err_set(e, SPILL_E_NOMEM, "stream: cannot allocate a %llu-byte bounce buffer",
                           (unsigned long long)s->rec_bytes);
    s->n_bounce = i + 1;
  }
  return SPILL_OK;
}

static int bounce_wanted(const spill_stream *s, uint32_t cache_slots) {
  const int k = s->c->m.arch.moe.top_k;
  return cache_slots == 0 && 2 * k > N_BOUNCE_MIN ? 2 * k : N_BOUNCE_MIN;
}

static int take_bounce(spill_stream *s) {
  for (int i = 0; i < s->n_bounce; i++)
    if (!s->bounce_busy[i]) {
      s->bounce_busy[i] = 1;
      return i;
    }
  return -1;
}

static void rq_push(spill_stream *s, int i) {
  s->ready_q[s->rq_tail % s->cap] = i;
  s->rq_tail++;
  s->items[i].state = IT_READY;
}

/* Starts the read of demand item i into a cache slot, a bounce buffer or (mmap)
 * a view. Returns 1 if started or satisfied, 0 if it must stay deferred. */
static int start_item(spill_stream *s, int i, int first, spill_err *e) {
  item *it = &s->items[i];
  if (s->mmap_mode) {
    if (first && !s->o.overlap) return 0; /* serial: issued one at a time */
    int t = inf_alloc(s, e);
    SPILL_TRY(t);
    s->inf[t].layer = (uint32_t)s->layer;
    s->inf[t].id = it->id;
    s->inf[t].req = i;
    SPILL_TRY(submit(s, s->layer, it->id, NULL, t, e));
    s->n_waiting++;
    if ((uint64_t)s->n_waiting > s->k.max_waiting) s->k.max_waiting = (uint64_t)s->n_waiting;
    return 1;
  }
  if (s->cache) {
    spill_cache_entry *ent = NULL;
    int out;
    if (first) {
      out = spill_cache_acquire(s->cache, (uint32_t)s->layer, it->id, &ent);
      it->hit = (out == SPILL_CACHE_HIT);
    } else {
      out = spill_cache_claim(s->cache, (uint32_t)s->layer, it->id, 0, &ent);
      if (out == SPILL_CACHE_PRESENT) {
        ent = spill_cache_get(s->cache, (uint32_t)s->layer, it->id);
        out = ent ? SPILL_CACHE_HIT : SPILL_CACHE_ALL_PINNED;
      }
    }
    if (out == SPILL_CACHE_HIT) {
      it->ent = ent;
      if (spill_cache_entry_state(s->cache, ent) == SPILL_CACHE_READY) {
        it->data = ent->data;
        rq_push(s, i);
        return 1;
      }
      /* Still loading (a prefetch): wait for that read. */
      for (int t = 0; t < s->inf_cap; t++)
        if (s->inf[t].used && s->inf[t].ent == ent && s->inf[t].req < 0) {
          s->inf[t].req = i;
          it->joined = 1;
          if (first) s->k.demand_hits_loading++;
          s->n_waiting++;
    if ((uint64_t)s->n_waiting > s->k.max_waiting) s->k.max_waiting = (uint64_t)s->n_waiting;
          return 1;
        }
      spill_cache_release(s->cache, ent);
      it->ent = NULL;
      return spill_err_set(e, SPILL_E_INTERNAL,
                           "stream: layer %d expert %u is loading but no read is in flight",
                           s->layer, it->id);
    }
    if (out == SPILL_CACHE_INSERTED && first && !s->o.overlap) {
      it->ent = ent; /* read issued later, one at a time, by next_ready */
      it->state = IT_UNREAD;
      s->n_unread++;
      return 1;
    }
    if (out == SPILL_CACHE_INSERTED) {
      int t = inf_alloc(s, e);
      if (t < 0) {
        spill_cache_release(s->cache, ent);
        return t;
      }
      it->ent = ent;
      s->inf[t].layer = (uint32_t)s->layer;
      s->inf[t].id = it->id;
      s->inf[t].ent = ent;
      s->inf[t].req = i;
      int rc = submit(s, s->layer, it->id, ent->data, t, e);
      if (rc < 0) {
        spill_cache_discard(s->cache, ent);
        spill_cache_release(s->cache, ent);
        it->ent = NULL;
        s->inf[t].used = 0;
        s->inf_used--;
        return rc;
      }
      s->n_waiting++;
    if ((uint64_t)s->n_waiting > s->k.max_waiting) s->k.max_waiting = (uint64_t)s->n_waiting;
      return 1;
    }
    /* ALL_PINNED: fall through to a bounce buffer unless this is the first
     * try (then wait for releases). BYPASSED (the policy declined to cache
     * it): a bounce buffer at once, unless reads are serial. */
    if (first && (out != SPILL_CACHE_BYPASSED || !s->o.overlap)) return 0;
  } else if (first && !s->o.overlap) {
    return 0;
  }
  int b = take_bounce(s);
  if (b < 0) return 0;
  int t = inf_alloc(s, e);
  if (t < 0) {
    s->bounce_busy[b] = 0;
    return t;
  }
  it->bounce = b;
  s->inf[t].layer = (uint32_t)s->layer;
  s->inf[t].id = it->id;
  s->inf[t].bounce = b;
  s->inf[t].req = i;
  SPILL_TRY(submit(s, s->layer, it->id, s->bounce[b], t, e));
  s->k.bounce_reads++;
  s->n_waiting++;
    if ((uint64_t)s->n_waiting > s->k.max_waiting) s->k.max_waiting = (uint64_t)s->n_waiting;
  return 1;
}

/* Ends the read of in-flight entry `tag` with status rc (err: its detail):
 * counters, cache state, the demand item it serves. A demand failure is
 * returned as an error. */
static int finish(spill_stream *s, int tag, int rc, const spill_err *err, spill_err *e) {
  inflight *f = &s->inf[tag];
  s->k.reads += (rc == SPILL_OK);
  if (rc == SPILL_OK) {
    if (f->spec) s->k.bytes_read_spec += f->bytes;
    else s->k.bytes_read_demand += f->bytes;
    if (f->ent) spill_cache_ready(s->cache, f->ent, f->bytes);
  } else if (f->ent) {
    spill_cache_discard(s->cache, f->ent);
  }
  int fail_up = 0;
  if (f->req >= 0) {
    item *it = &s->items[f->req];
    s->n_waiting--;
    if (rc == SPILL_OK) {
      it->data = f->data;
      rq_push(s, f->req);
    } else if (it->joined && !it->retried) {
      /* It joined a read it did not issue (a prefetch, or a read of an
       * abandoned request, possibly issued while a fault was present) and
       * that read failed: read it once more for this request instead of
       * inheriting the failure. A persistent fault (a damaged record, a
       * bad sector) fails that read the same way, with the same status and
       * message, and then goes up. */
      if (it->ent) spill_cache_release(s->cache, it->ent);
      it->ent = NULL;
      it->joined = 0;
      it->retried = 1;
      it->state = IT_DEFERRED;
      s->n_deferred++;
    } else {
      fail_up = 1;
      /* the demand pin on a failed entry is dropped; the error goes up */
      if (it->ent) spill_cache_release(s->cache, it->ent);
      if (it->bounce >= 0) s->bounce_busy[it->bounce] = 0;
      it->ent = NULL;
      it->bounce = -1;
      it->state = IT_DROPPED;
      spill_err_set(e, rc, "%s", err->msg);
    }
  } else if (f->bounce >= 0) {
    s->bounce_busy[f->bounce] = 0; /* an abandoned demand read */
  }
  if (f->spec && f->ent) spill_cache_release(s->cache, f->ent);
  for (; f->orphan_pins > 0 && f->ent; f->orphan_pins--) spill_cache_release(s->cache, f->ent);
  f->used = 0;
  s->inf_used--;
  return fail_up ? rc : SPILL_OK;
}

/* Handles one completion: a failed read ends here; a good one is checked
 * (header; payload crc32 with verify), by the record checker when verify is
 * on and it runs (the entry then ends in collect), else inline. */
static int on_complete(spill_stream *s, const spill_io_completion *c, spill_err *e) {
  int tag = (int)c->tag;
  inflight *f = &s->inf[tag];
  int rc = SPILL_OK;
  spill_err err = {0};
  if (c->status != SPILL_OK) {
    spill_io_describe(s->io, c, &err);
    rc = c->status;
  } else {
    int bi;
    const spill_bank_info *b = bank_of(s, (int)f->layer, &bi);
    f->data = c->data;
    f->bytes = c->bytes;
    if (s->o.verify && s->chk &&
        spill_rcheck_submit(s->chk, tag, b->file, (int)f->layer, f->id, c->data, c->bytes))
      return SPILL_OK;
    uint64_t t0 = s->o.verify ? spill_clock_ns() : 0;
    rc = spill_record_check(&s->c->m, b->file, (int)f->layer, f->id, c->data, c->bytes,
                            s->o.verify, &err);
    if (s->o.verify) s->k.verify_consumer_ns += spill_clock_ns() - t0;
  }
  return finish(s, tag, rc, &err, e);
}

/* Handles completions: blocks until min_wait arrive (0 polls); *got = how
 * many. Returns the first demand failure. */
static int reap(spill_stream *s, int min_wait, int *got, spill_err *e) {
  uint64_t t0 = spill_clock_ns();
  int n = spill_io_wait(s->io, s->comp, (int)(sizeof s->comp / sizeof s->comp[0]), min_wait);
  s->k.wait_ns += spill_clock_ns() - t0;
  *got = n > 0 ? n : 0;
  SPILL_FAIL_IF(e, n < 0, n, "stream: waiting for reads failed (%s)", spill_status_name(n));
  int first_err = SPILL_OK;
  for (int i = 0; i < n; i++) {
    int rc = on_complete(s, &s->comp[i], first_err ? NULL : e);
    if (rc < 0 && !first_err) first_err = rc;
  }
  return first_err;
}

/* Ends the entries whose checks finished (mode: record_check.h); *got =
 * how many. Returns the first demand failure. */
static int collect(spill_stream *s, int mode, int *got, spill_err *e) {
  spill_rcheck_result r[8];
  int n = spill_rcheck_collect(s->chk, r, 8, mode);
  *got = n;
  int first_err = SPILL_OK;
  for (int i = 0; i < n; i++) {
    int rc = finish(s, r[i].tag, r[i].rc, &r[i].err, first_err ? NULL : e);
    if (rc < 0 && !first_err) first_err = rc;
  }
  return first_err;
}

/* Blocks until at least one read or check in flight has ended (call only
 * with inf_used > 0). Checks come first: a queued one is run here rather
 * than waited for, reads that landed are picked up next, and only then does
 * it wait, for the helper's current check (microseconds) if there is one,
 * else for a read. Returns the first demand failure. */
static int progress(spill_stream *s, spill_err *e) {
  int got = 0;
  int checking = spill_rcheck_pending(s->chk);
  if (checking == 0) return reap(s, 1, &got, e);
  int rc = collect(s, SPILL_RCHECK_STEAL, &got, e);
  if (got) return rc;
  if (s->inf_used > checking) { /* reads still at the device */
    rc = reap(s, 0, &got, e);
    if (got) return rc;
  }
  return collect(s, SPILL_RCHECK_BLOCK, &got, e);
}

/* Drops the undelivered part of the current request. */
static void abandon_request(spill_stream *s) {
  for (int i = 0; i < s->n; i++) {
    item *it = &s->items[i];
    if (it->state == IT_READY) {
      if (it->ent) spill_cache_release(s->cache, it->ent);
      if (it->bounce >= 0) s->bounce_busy[it->bounce] = 0;
    }
    if (it->state == IT_UNREAD) spill_cache_release(s->cache, it->ent); /* never loaded: discarded */
    if (it->state == IT_READY || it->state == IT_DEFERRED || it->state == IT_PENDING ||
        it->state == IT_UNREAD)
      it->state = IT_DROPPED;
  }
  for (int t = 0; t < s->inf_cap; t++) {
    inflight *f = &s->inf[t];
    if (!f->used || f->req < 0) continue;
    if (s->items[f->req].ent && f->ent) f->orphan_pins++;
    f->req = -1;
  }
  s->n_waiting = 0;
  s->n_deferred = 0;
  s->n_unread = 0;
  s->rq_head = s->rq_tail = 0;
  s->n = 0;
}

/* ---------------------------------------------------------------- source */

static int src_request(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
  spill_stream *s = ctx;
  abandon_request(s);
  SPILL_FAIL_IF(e, n < 0, SPILL_E_INVALID_ARG, "stream: negative request");
  if (grow((void **)&s->items, &s->cap, n, sizeof(item)) ||
      !(s->ready_q = realloc(s->ready_q, (size_t)s->cap * sizeof(int))) ||
      !(s->last_hits = realloc(s->last_hits, (size_t)s->cap)))
    return spill_err_set(e, SPILL_E_NOMEM, "stream: cannot grow request tables");
  s->layer = layer;
  s->n = n;
  s->k.requested += (uint64_t)n;
  for (int i = 0; i < n; i++) {
    item *it = &s->items[i];
    memset(it, 0, sizeof *it);
    it->id = ids[i];
    it->bounce = -1;
    it->state = IT_PENDING;
    int rc = start_item(s, i, 1, e);
    if (rc < 0) return rc;
    if (rc == 0) {
      it->state = IT_DEFERRED;
      s->n_deferred++;
    }
    if (it->hit) s->k.demand_hits++;
    else s->k.demand_misses++;
    s->last_hits[i] = (uint8_t)it->hit;
  }
  s->n_last_hits = n;
  return SPILL_OK;
}

/* Without blocking: picks up finished checks (running one queued check on
 * this thread if there is one) and reads that landed; *got = how many
 * entries ended. Returns the first demand failure. */
static int progress_nowait(spill_stream *s, int *got, spill_err *e) {
  int n = 0, rc = SPILL_OK;
  *got = 0;
  if (spill_rcheck_pending(s->chk) > 0) {
    rc = collect(s, SPILL_RCHECK_STEAL, &n, e);
    *got += n;
    if (rc < 0) return rc;
  }
  if (s->inf_used > spill_rcheck_pending(s->chk)) {
    rc = reap(s, 0, &n, e);
    *got += n;
  }
  return rc;
}

/* The readiness call (expert_source.h poll_ready; next_ready is wait 1 with
 * 0 turned into an error): 1 with a record, 0 when none is ready (wait 0)
 * or none can be before a delivered record is released (wait 1). */
static int stream_ready(spill_stream *s, int wait, int *idx, const uint8_t **record,
                        spill_err *e) {
  for (;;) {
    if (s->rq_head < s->rq_tail) {
      if (s->o.verify && s->chk) {
        /* Records that landed meanwhile go to the checker now, so they are
         * checked while this one is computed. */
        int got = 0;
        if (s->inf_used > spill_rcheck_pending(s->chk)) SPILL_TRY(reap(s, 0, &got, e));
        spill_rcheck_kick(s->chk);
      }
      int i = s->ready_q[s->rq_head % s->cap];
      s->rq_head++;
      item *it = &s->items[i];
      it->state = IT_DELIVERED;
      if (grow((void **)&s->pins, &s->pins_cap, s->n_pins + 1, sizeof(pin)))
        return spill_err_set(e, SPILL_E_NOMEM, "stream: cannot grow the pin table");
      s->pins[s->n_pins++] = (pin){(uint32_t)s->layer, it->id, it->ent, it->bounce};
      *idx = i;
      *record = it->data;
      return 1;
    }
    if (s->n_waiting > 0) {
      if (wait) {
        SPILL_TRY(progress(s, e));
      } else {
        int got = 0;
        SPILL_TRY(progress_nowait(s, &got, e));
        if (!got) return 0;
      }
      continue;
    }
    if (s->n_unread > 0) { /* overlap off: the next read, then wait for it */
      for (int i = 0; i < s->n; i++) {
        item *it = &s->items[i];
        if (it->state != IT_UNREAD) continue;
        int t = inf_alloc(s, e);
        SPILL_TRY(t);
        s->inf[t].layer = (uint32_t)s->layer;
        s->inf[t].id = it->id;
        s->inf[t].ent = it->ent;
        s->inf[t].req = i;
        it->state = IT_PENDING;
        s->n_unread--;
        SPILL_TRY(submit(s, s->layer, it->id, it->ent->data, t, e));
        s->n_waiting++;
    if ((uint64_t)s->n_waiting > s->k.max_waiting) s->k.max_waiting = (uint64_t)s->n_waiting;
        break;
      }
      continue;
    }
    if (s->n_deferred > 0) {
      int started = 0;
      for (int i = 0; i < s->n && s->n_deferred > 0; i++) {
        if (s->items[i].state != IT_DEFERRED) continue;
        int rc = start_item(s, i, 0, e);
        if (rc < 0) return rc;
        if (rc == 1) {
          if (s->items[i].state == IT_DEFERRED) s->items[i].state = IT_PENDING;
          s->n_deferred--;
          started++;
          if (!s->o.overlap) break; /* serial: one read at a time */
        }
      }
      if (started) continue;
      if (s->inf_used > 0) { /* prefetches may free slots when they land */
        if (wait) {
          SPILL_TRY(progress(s, e));
        } else {
          int got = 0;
          SPILL_TRY(progress_nowait(s, &got, e));
          if (!got) return 0;
        }
        continue;
      }
      if (s->n_pins > 0) return 0; /* a release frees a slot */
      return spill_err_set(e, SPILL_E_INTERNAL,
                           "stream: layer %d: every cache slot and bounce buffer is pinned "
                           "(%d records held unreleased)",
                           s->layer, s->n_pins);
    }
    return spill_err_set(e, SPILL_E_INTERNAL, "stream: next_ready with nothing requested");
  }
}

static int src_next_ready(void *ctx, int *idx, const uint8_t **record, spill_err *e) {
  spill_stream *s = ctx;
  int rc = stream_ready(s, 1, idx, record, e);
  if (rc < 0) return rc;
  SPILL_FAIL_IF(e, rc == 0, SPILL_E_INTERNAL,
                "stream: layer %d: every cache slot and bounce buffer is pinned "
                "(%d records held unreleased)", s->layer, s->n_pins);
  return SPILL_OK;
}

static int src_poll_ready(void *ctx, int wait, int *idx, const uint8_t **record, spill_err *e) {
  return stream_ready(ctx, wait, idx, record, e);
}

static void src_release(void *ctx, int layer, uint32_t id) {
  spill_stream *s = ctx;
  for (int i = s->n_pins - 1; i >= 0; i--) {
    pin *p = &s->pins[i];
    if (p->layer != (uint32_t)layer || p->id != id) continue;
    if (p->ent) spill_cache_release(s->cache, p->ent);
    if (p->bounce >= 0) s->bounce_busy[p->bounce] = 0;
    s->pins[i] = s->pins[--s->n_pins];
    return;
  }
}

static int src_prefetch(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
  spill_stream *s = ctx;
  if (!s->cache) return SPILL_OK; /* nowhere to keep a prefetched record */
  int bi;
  if (!bank_of(s, layer, &bi)) return SPILL_OK;
  for (int i = 0; i < n; i++) {
    if (spill_cache_contains(s->cache, (uint32_t)layer, ids[i])) continue;
    spill_cache_entry *ent = NULL;
    int out = spill_cache_claim(s->cache, (uint32_t)layer, ids[i], SPILL_CACHE_SPECULATIVE, &ent);
    if (out != SPILL_CACHE_INSERTED) continue;
    int t = inf_alloc(s, e);
    if (t < 0) {
      spill_cache_release(s->cache, ent);
      return t;
    }
    s->inf[t].layer = (uint32_t)layer;
    s->inf[t].id = ids[i];
    s->inf[t].ent = ent;
    s->inf[t].spec = 1;
    int rc = submit(s, layer, ids[i], ent->data, t, e);
    if (rc < 0) {
      spill_cache_discard(s->cache, ent);
      spill_cache_release(s->cache, ent);
      s->inf[t].used = 0;
      s->inf_used--;
      return rc;
    }
  }
  return SPILL_OK;
}

/* ---------------------------------------------------------------- public */

/* Test-only fault hook handed to the reader of every stream opened (see the header). */
static spill_io_fault_fn g_test_fault_fn;
static void *g_test_fault_ctx;

void spill_stream_test_fault_hook(spill_io_fault_fn fn, void *ctx) {
  g_test_fault_fn = fn;
  g_test_fault_ctx = ctx;
}

int spill_stream_open(const spill_container *c, const spill_stream_opts *o, spill_stream **out,
                      spill_err *e) {
  spill_stream *s = calloc(1, sizeof *s);
  SPILL_FAIL_IF(e, !s, SPILL_E_NOMEM, "stream: out of memory");
  s->c = c;
  s->o = *o;
  s->rec_bytes = c->m.record_bytes;
  s->mmap_mode = (o->storage == 2);
  spill_io_opts io = {0};
  io.backend = o->backend == 1 ? SPILL_IO_BACKEND_URING : SPILL_IO_BACKEND_PREAD;
  io.mode = o->storage == 1 ? SPILL_IO_MODE_PAGECACHE
                            : o->storage == 2 ? SPILL_IO_MODE_MMAP : SPILL_IO_MODE_DIRECT;
  io.threads = o->io_threads;
  io.depth = o->io_depth;
  io.max_files = c->m.n_banks + 1;
  io.throttle_bytes_per_s = o->throttle;
  int rc = spill_io_open(&io, &s->io, e);
  if (rc < 0) goto fail;
  if (g_test_fault_fn) spill_io_set_fault_hook(s->io, g_test_fault_fn, g_test_fault_ctx);
  s->file_of_bank = calloc((size_t)(c->m.n_banks ? c->m.n_banks : 1), sizeof(uint32_t));
  if (!s->file_of_bank) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "stream: out of memory");
    goto fail;
  }
  for (int i = 0; i < c->m.n_banks; i++) {
    char path[4096];
    rc = spill_container_path(c, c->m.banks[i].file, path, sizeof path, e);
    if (rc < 0) goto fail;
    rc = spill_io_add_file(s->io, path, &s->file_of_bank[i], e);
    if (rc < 0) goto fail;
    if (io.mode == SPILL_IO_MODE_DIRECT && !spill_io_file_is_direct(s->io, s->file_of_bank[i]))
      s->direct_fallback = 1;
  }
  if (!s->mmap_mode) {
    rc = spill_rcheck_init(&c->m, &s->chk, e);
    if (rc < 0) goto fail;
    rc = ensure_bounce(s, bounce_wanted(s, o->cache_slots), e);
    if (rc < 0) goto fail;
    if (o->cache_slots > 0) {
      spill_cache_config cc = {0};
      cc.n_slots = o->cache_slots;
      cc.slot_bytes = (size_t)s->rec_bytes;
      cc.policy = o->policy;
      cc.seed = o->seed;
      rc = spill_cache_init(&s->cache, &cc, e);
      if (rc < 0) goto fail;
    }
  }
  *out = s;
  return SPILL_OK;
fail:
  spill_stream_close(s);
  return rc;
}

static int drain(spill_stream *s, spill_err *e) {
  abandon_request(s);
  while (s->inf_used > 0) {
    int rc = progress(s, e);
    if (rc < 0 && rc != SPILL_E_IO && rc != SPILL_E_SHORT_READ && rc != SPILL_E_CHECKSUM &&
        rc != SPILL_E_FORMAT)
      return rc;
  }
  return SPILL_OK;
}

int spill_stream_quiesce(spill_stream *s, spill_err *e) {
  while (s->inf_used > 0 && s->n_waiting == 0) SPILL_TRY(progress(s, e));
  return SPILL_OK;
}

void spill_stream_close(spill_stream *s) {
  if (!s) return;
  if (s->io) drain(s, NULL);
  spill_rcheck_free(s->chk); /* joins the helper: no check reads a buffer after this */
  spill_io_close(s->io);
  for (int i = 0; i < s->n_pins; i++)
    if (s->pins[i].ent) spill_cache_release(s->cache, s->pins[i].ent);
  spill_cache_free(s->cache);
  for (int b = 0; b < s->n_bounce; b++) spill_free(s->bounce[b], s->rec_bytes ? s->rec_bytes : 4096);
  free(s->bounce);
  free(s->bounce_busy);
  free(s->file_of_bank);
  free(s->items);
  free(s->ready_q);
  free(s->last_hits);
  free(s->inf);
  free(s->pins);
  free(s);
}

void spill_stream_source(spill_stream *s, spill_expert_source *out) {
  out->ctx = s;
  out->request = src_request;
  out->next_ready = src_next_ready;
  out->release = src_release;
  out->prefetch = src_prefetch;
  out->poll_ready = src_poll_ready;
}

void spill_stream_get_counters(spill_stream *s, spill_stream_counters *out) {
  *out = s->k;
  if (s->chk) {
    uint64_t helper_ns, consumer_ns;
    spill_rcheck_times(s->chk, &helper_ns, &consumer_ns);
    out->verify_helper_ns = helper_ns;
    out->verify_consumer_ns += consumer_ns;
  }
  if (s->cache) {
    spill_cache_counters cc;
    spill_cache_get_counters(s->cache, &cc);
    out->spec_issued = cc.spec_issued;
    out->spec_used = cc.spec_used;
    out->spec_wasted = cc.spec_wasted;
    out->evictions = cc.evictions;
  }
}

void spill_stream_reset_counters(spill_stream *s) {
  memset(&s->k, 0, sizeof s->k);
  if (s->chk) spill_rcheck_reset_times(s->chk);
  if (s->cache) spill_cache_reset_counters(s->cache);
}

void spill_stream_read_latency(spill_stream *s, uint64_t *p50_ns, uint64_t *p99_ns) {
  spill_io_latency_stats st;
  spill_io_get_latency(s->io, &st);
  *p50_ns = st.latency.p50_ns;
  *p99_ns = st.latency.p99_ns;
}

void spill_stream_latency_reset(spill_stream *s) { spill_io_latency_reset(s->io); }

void spill_stream_run_latency(spill_stream *s, uint64_t *p50_ns, uint64_t *p99_ns) {
  spill_io_latency_pct p;
  spill_io_get_run_latency(s->io, &p);
  *p50_ns = p.p50_ns;
  *p99_ns = p.p99_ns;
}

void spill_stream_run_latency_reset(spill_stream *s) { spill_io_run_latency_reset(s->io); }

void spill_stream_io_stats(const spill_stream *s, spill_io_stats *out) {
  spill_io_get_stats(s->io, out);
}

int spill_stream_last_hits(const spill_stream *s, uint8_t *hits, int max) {
  int n = s->n_last_hits < max ? s->n_last_hits : max;
  if (n > 0) memcpy(hits, s->last_hits, (size_t)n);
  return n;
}

int spill_stream_clear(spill_stream *s, int reset_counters, spill_err *e) {
  SPILL_TRY(drain(s, e));
  SPILL_FAIL_IF(e, s->n_pins > 0, SPILL_E_INVALID_ARG,
                "stream: cannot clear with %d records still pinned", s->n_pins);
  if (s->cache) spill_cache_clear(s->cache, reset_counters ? SPILL_CACHE_CLEAR_COUNTERS : 0);
  if (reset_counters) {
    memset(&s->k, 0, sizeof s->k);
    if (s->chk) spill_rcheck_reset_times(s->chk);
  }
  return SPILL_OK;
}

int spill_stream_resize(spill_stream *s, uint32_t cache_slots, spill_err *e) {
  SPILL_TRY(drain(s, e));
  SPILL_FAIL_IF(e, s->n_pins > 0, SPILL_E_INVALID_ARG,
                "stream: cannot resize with %d records still pinned", s->n_pins);
  if (s->mmap_mode) {
    s->o.cache_slots = cache_slots;
    return SPILL_OK;
  }
  if (cache_slots == 0) {
    SPILL_TRY(ensure_bounce(s, bounce_wanted(s, 0), e));
    spill_cache_free(s->cache);
    s->cache = NULL;
  } else if (!s->cache) {
    spill_cache_config cc = {0};
    cc.n_slots = cache_slots;
    cc.slot_bytes = (size_t)s->rec_bytes;
    cc.policy = s->o.policy;
    cc.seed = s->o.seed;
    SPILL_TRY(spill_cache_init(&s->cache, &cc, e));
  } else {
    SPILL_TRY(spill_cache_resize(s->cache, cache_slots, NULL, 0, e));
  }
  s->o.cache_slots = cache_slots;
  return SPILL_OK;
}

uint32_t spill_stream_cache_slots(const spill_stream *s) {
  return s->cache ? spill_cache_n_slots(s->cache) : 0;
}

int spill_stream_evict_page_cache(spill_stream *s, spill_err *e) {
  for (int i = 0; i < s->c->m.n_banks; i++) SPILL_TRY(spill_io_evict_file(s->io, s->file_of_bank[i], e));
  return SPILL_OK;
}

void spill_stream_set_verify(spill_stream *s, int verify) { s->o.verify = verify; }
int spill_stream_direct_fallback(const spill_stream *s) { return s->direct_fallback; }

/* ---------------------------------------------------------------- preload */

/* One preload read: n records of bank `bank` from expert `first`, landing in
 * the adjacent cache slots ents[0..n) (spill_cache_claim_run). */
typedef struct pl_read {
  int bank;
  uint32_t first, n;
  spill_cache_entry **ents; /* (max_run) */
} pl_read;

typedef struct preloader {
  spill_stream *s;
  pl_read *r;     /* (depth) indexed by I/O tag */
  int *free_tags; /* (depth) */
  int n_free_tags, depth, outstanding;
  uint32_t max_run;
  int rc; /* first failure */
  spill_stream_preload_stats st;
} preloader;

/* Ends one preload read: each record checked as a demand read would be, then
 * made ready (or dropped) and unpinned. */
static void pl_finish(preloader *P, const spill_io_completion *c, spill_err *e) {
  spill_stream *s = P->s;
  pl_read *r = &P->r[c->tag];
  const spill_bank_info *b = &s->c->m.banks[r->bank];
  const int layer = s->c->m.arch.n_dense_layers + r->bank;
  spill_err err = {0};
  const int rc = c->status;
  if (rc != SPILL_OK) spill_io_describe(s->io, c, &err);
  for (uint32_t i = 0; i < r->n; i++) {
    spill_cache_entry *ent = r->ents[i];
    int ri = rc;
    if (ri == SPILL_OK)
      ri = spill_record_check(&s->c->m, b->file, layer, r->first + i,
                              (const uint8_t *)c->data + (size_t)i * s->rec_bytes,
                              (size_t)s->rec_bytes, s->o.verify, &err);
    if (ri == SPILL_OK) {
      spill_cache_ready(s->cache, ent, s->rec_bytes);
      P->st.records++;
    } else {
      spill_cache_discard(s->cache, ent);
      if (P->rc == SPILL_OK) P->rc = spill_err_set(e, ri, "preload: %s", err.msg);
    }
    spill_cache_release(s->cache, ent);
  }
  if (rc == SPILL_OK) {
    P->st.reads++;
    P->st.bytes += c->bytes;
  }
  P->free_tags[P->n_free_tags++] = (int)c->tag;
  P->outstanding--;
}

/* Handles completions, blocking for at least one. < 0 only if the reader
 * refuses to wait (a bug: it then holds pins nobody will drop). */
static int pl_reap(preloader *P, spill_err *e) {
  int n = spill_io_wait(P->s->io, P->s->comp, (int)(sizeof P->s->comp / sizeof P->s->comp[0]), 1);
  if (n < 0) {
    if (P->rc == SPILL_OK)
      P->rc = spill_err_set(e, n, "preload: waiting for reads failed (%s)", spill_status_name(n));
    return n;
  }
  for (int i = 0; i < n; i++) pl_finish(P, &P->s->comp[i], e);
  return SPILL_OK;
}

/* Issues the reads of bank bi, record runs in expert order, while free slots
 * last. Returns 1 when the cache has no free slot left, 0 when the bank is
 * done, < 0 when a read could not be issued or waited for (P->rc set). */
static int pl_issue_bank(preloader *P, int bi, spill_err *e) {
  spill_stream *s = P->s;
  const spill_bank_info *b = &s->c->m.banks[bi];
  const uint32_t layer = (uint32_t)(s->c->m.arch.n_dense_layers + bi);
  /* one read spans records only where they lie back to back like the slots */
  const uint32_t run_cap = b->record_bytes == s->rec_bytes ? P->max_run : 1;
  for (uint32_t x = 0; x < b->n_experts && P->rc == SPILL_OK;) {
    if (P->n_free_tags == 0) {
      SPILL_TRY(pl_reap(P, e));
      continue;
    }
    int t = P->free_tags[P->n_free_tags - 1];
    pl_read *r = &P->r[t];
    uint32_t want = b->n_experts - x < run_cap ? b->n_experts - x : run_cap;
    uint32_t k = spill_cache_claim_run(s->cache, layer, x, want, r->ents);
    if (k == 0) {
      if (!spill_cache_contains(s->cache, layer, x)) return 1; /* no free slot */
      P->st.resident++;
      x++;
      continue;
    }
    P->n_free_tags--;
    *r = (pl_read){bi, x, k, r->ents};
    int rc = spill_io_submit(s->io, s->file_of_bank[bi], b->data_offset + (uint64_t)x * b->record_bytes,
                             (size_t)k * s->rec_bytes, r->ents[0]->data, (uint64_t)t);
    if (rc < 0) {
      for (uint32_t i = 0; i < k; i++) {
        spill_cache_discard(s->cache, r->ents[i]);
        spill_cache_release(s->cache, r->ents[i]);
      }
      P->free_tags[P->n_free_tags++] = t;
      return P->rc = spill_err_set(e, rc, "preload: %s layer %u experts %u..%u: submit failed (%s)",
                                   b->file, layer, x, x + k - 1, spill_status_name(rc));
    }
    P->outstanding++;
    x += k;
  }
  return 0;
}

/* Counts the records not loaded once the cache is full: resident or left out. */
static void pl_count_rest(preloader *P) {
  const spill_manifest *m = &P->s->c->m;
  for (int bi = 0; bi < m->n_banks; bi++)
    for (uint32_t x = 0; x < m->banks[bi].n_experts; x++) {
      if (spill_cache_contains(P->s->cache, (uint32_t)(m->arch.n_dense_layers + bi), x)) continue;
      P->st.no_slot++;
    }
}

int spill_stream_preload(spill_stream *s, uint64_t read_bytes, spill_stream_preload_stats *out,
                         spill_err *e) {
  const uint64_t t0 = spill_clock_ns();
  if (out) memset(out, 0, sizeof *out);
  SPILL_FAIL_IF(e, !s->cache, SPILL_E_CONFIG, "preload: no expert cache to fill (%s)",
                s->mmap_mode ? "storage mmap reads views of the banks" : "0 cache slots");
  SPILL_TRY(drain(s, e));
  SPILL_FAIL_IF(e, s->n_pins > 0, SPILL_E_INVALID_ARG,
                "preload: %d records are still pinned", s->n_pins);
  preloader P;
  memset(&P, 0, sizeof P);
  P.s = s;
  uint64_t run = (read_bytes ? read_bytes : SPILL_STREAM_PRELOAD_READ_BYTES) / s->rec_bytes;
  P.max_run = run < 1 ? 1 : run > 4096 ? 4096 : (uint32_t)run;
  P.depth = s->o.io_depth < 1 ? 1 : s->o.io_depth > 64 ? 64 : s->o.io_depth;
  P.r = calloc((size_t)P.depth, sizeof *P.r);
  P.free_tags = calloc((size_t)P.depth, sizeof *P.free_tags);
  spill_cache_entry **ents = calloc((size_t)P.depth * P.max_run, sizeof *ents);
  if (!P.r || !P.free_tags || !ents) {
    free(P.r);
    free(P.free_tags);
    free(ents);
    return spill_err_set(e, SPILL_E_NOMEM, "preload: out of memory");
  }
  for (int t = 0; t < P.depth; t++) {
    P.r[t].ents = ents + (size_t)t * P.max_run;
    P.free_tags[P.n_free_tags++] = P.depth - 1 - t;
  }
  int full = 0;
  for (int bi = 0; bi < s->c->m.n_banks && P.rc == SPILL_OK && !full; bi++)
    full = pl_issue_bank(&P, bi, e) == 1;
  while (P.outstanding > 0 && pl_reap(&P, e) == SPILL_OK) {
  }
  if (full && P.rc == SPILL_OK) {
    P.st.resident = 0; /* recounted with the rest below */
    P.st.no_slot = 0;
    pl_count_rest(&P);
    P.st.resident = spill_cache_n_resident(s->cache) - P.st.records;
  }
  P.st.ns = spill_clock_ns() - t0;
  if (out) *out = P.st;
  free(P.r);
  free(P.free_tags);
  free(ents);
  return P.rc;
}
