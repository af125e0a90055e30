/* engine/stream/expert_stream.h: the streaming expert source.
 *
 * Implements spill_expert_source (engine/model/expert_source.h) over the
 * expert cache (engine/cache) and the reader (engine/io): a layer's experts
 * are requested at once; cached ones are ready immediately, the others are
 * read in parallel into cache slots (direct or buffered) and handed to the
 * forward pass in arrival order; mmap mode hands out views of a read-only
 * mapping with no application cache. Prefetch hints (router lookahead) claim
 * slots speculatively and read in the background; a demand request that
 * finds its expert still loading waits for that read instead of issuing
 * another. When every slot is pinned the request waits for releases and, as
 * a last resort, reads into a bounce buffer, so any cache size (even 0)
 * makes progress. Every record is checked before it is handed out (header
 * always, payload crc32 with verify); with verify on, outside mmap mode, the
 * check runs beside the consumer on a helper thread of the stream (the
 * consumer runs a queued check itself when it has nothing else to do), so
 * checking overlaps with compute; a record is delivered only once checked,
 * and a failed check is reported for that (layer, expert) as an inline
 * check would. One consumer thread; the I/O threads and the checker never
 * touch engine state. Depends on base, format, cache, io and model (for the
 * source interface) only.
 */
#ifndef SPILL_STREAM_EXPERT_STREAM_H
#define SPILL_STREAM_EXPERT_STREAM_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"
#include "engine/io/reader.h"
#include "engine/model/expert_source.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_stream_opts {
  int storage;          /* 0 direct, 1 pagecache, 2 mmap (spill_storage) */
  int backend;          /* 0 pread pool, 1 io_uring */
  int io_threads;       /* pread workers */
  int io_depth;         /* reads in flight */
  uint64_t throttle;    /* bytes/s, 0 = none */
  uint32_t cache_slots; /* 0 = no cache (bounce buffers only); ignored in mmap mode */
  const char *policy;   /* cache policy name */
  uint64_t seed;
  int verify;
  int overlap;          /* 1: a layer's reads are all issued at once and consumed in
                           arrival order; 0: one read at a time, each waited for
                           before the next (the no-overlap baseline) */
} spill_stream_opts;

/* Deterministic counters, cumulative since open or the last reset. */
typedef struct spill_stream_counters {
  uint64_t requested;        /* demand ids requested */
  uint64_t demand_hits;      /* found in the cache (ready or loading) */
  uint64_t demand_hits_loading; /* ... of which a read (a prefetch) was still in flight */
  uint64_t demand_misses;
  uint64_t spec_issued, spec_used, spec_wasted;
  uint64_t reads;            /* records read from storage (demand + spec) */
  uint64_t bytes_read_demand, bytes_read_spec;
  uint64_t bounce_reads;     /* demand reads that went to a bounce buffer */
  uint64_t evictions;
  uint64_t wait_ns;          /* time blocked in next_ready waiting for reads */
  uint64_t max_waiting;      /* most demand reads in flight at once (1 with overlap off) */
  /* Timings (not deterministic), verify on only: ns spent in record checks
   * on the stream's helper thread, and ns the consumer (compute) thread
   * spent on checks: checks it ran itself, waits for the helper and
   * wake-ups of it. The second is what verify costs the compute thread. */
  uint64_t verify_helper_ns;
  uint64_t verify_consumer_ns;
} spill_stream_counters;

typedef struct spill_stream spill_stream;

/* Opens a stream over container c (borrowed; must outlive the stream).
 * Errors: SPILL_E_UNSUPPORTED (io_uring refused), SPILL_E_NOMEM (cache
 * slots), SPILL_E_IO. On success *out is owned by the caller. */
int spill_stream_open(const spill_container *c, const spill_stream_opts *o, spill_stream **out,
                      spill_err *e);
void spill_stream_close(spill_stream *s); /* NULL fine; waits for reads in flight */

/* The source to give the model (valid while the stream lives). */
void spill_stream_source(spill_stream *s, spill_expert_source *out);

void spill_stream_get_counters(spill_stream *s, spill_stream_counters *out);
void spill_stream_reset_counters(spill_stream *s);
/* Per-read latency (submit -> completion) since the last reset, in ns. */
void spill_stream_read_latency(spill_stream *s, uint64_t *p50_ns, uint64_t *p99_ns);
void spill_stream_latency_reset(spill_stream *s);
/* The same over the run window (every read since spill_stream_run_latency_reset;
 * spill_stream_latency_reset leaves it alone). */
void spill_stream_run_latency(spill_stream *s, uint64_t *p50_ns, uint64_t *p99_ns);
void spill_stream_run_latency_reset(spill_stream *s);
/* The reader's counters since open (bytes by path: O_DIRECT, page cache,
 * mapping). */
void spill_stream_io_stats(const spill_stream *s, spill_io_stats *out);
/* Hit (1) / miss (0) of each id of the last demand request, in request
 * order; returns the count (<= max). */
int spill_stream_last_hits(const spill_stream *s, uint8_t *hits, int max);

/* Waits for every read in flight (prefetches included) to land; nothing
 * requested stays undelivered. Call between runs for exact counters. */
int spill_stream_quiesce(spill_stream *s, spill_err *e);
/* Drops every cached expert (waits for prefetches in flight first). */
int spill_stream_clear(spill_stream *s, int reset_counters, spill_err *e);
/* Changes the number of cache slots in place (drops everything). */
int spill_stream_resize(spill_stream *s, uint32_t cache_slots, spill_err *e);
uint32_t spill_stream_cache_slots(const spill_stream *s);
/* Preload: every expert record read into the cache before decode. */
typedef struct spill_stream_preload_stats {
  uint64_t records;  /* records read into the cache and checked */
  uint64_t resident; /* records that were already cached (not read again) */
  uint64_t no_slot;  /* records left out: the cache had no free slot for them */
  uint64_t bytes;    /* bytes read */
  uint64_t reads;    /* read requests (each up to read_bytes, whole records) */
  uint64_t ns;       /* wall time of the preload */
} spill_stream_preload_stats;

/* Default bytes per preload read (spill_stream_preload, read_bytes 0). */
#define SPILL_STREAM_PRELOAD_READ_BYTES (16u << 20)

/* Reads the container's expert records (bank order, then expert order) into
 * free cache slots, never evicting: runs of adjacent records go into
 * adjacent slots (spill_cache_claim_run) with one read of up to read_bytes
 * (0 = SPILL_STREAM_PRELOAD_READ_BYTES; whole records, at least one), up to
 * io_depth reads in flight through the stream's reader (same storage mode,
 * backend and throttle as demand reads). Each record gets the same check as
 * a demand read (header; crc32 with verify) before it is made ready. When
 * the cache has fewer free slots than records, the first ones in that
 * order are loaded (no_slot counts the rest). Counters of demand reads,
 * prefetches and hits are not touched (the reader's byte counters and the
 * cache's `preloaded` are). Waits for reads in flight first; fails with
 * SPILL_E_INVALID_ARG while records are pinned, SPILL_E_CONFIG without a
 * cache (mmap storage, or 0 slots), and on a read or check failure with
 * that record's error (every read in flight is waited for, the failed
 * records are dropped, the ones already loaded stay). */
int spill_stream_preload(spill_stream *s, uint64_t read_bytes, spill_stream_preload_stats *out,
                         spill_err *e);

/* Evicts the banks from the OS page cache (cold runs of pagecache/mmap). */
int spill_stream_evict_page_cache(spill_stream *s, spill_err *e);
/* Emulated bandwidth and verify can change between runs. */
void spill_stream_set_verify(spill_stream *s, int verify);
/* 1 if a direct-mode bank fell back to buffered reads (filesystem refused O_DIRECT). */
int spill_stream_direct_fallback(const spill_stream *s);

/* Test only (fault injection through a whole engine, engine/stream/
 * fault_test.cc): every stream opened after this call installs fn(ctx) as its
 * reader's fault hook (engine/io/reader.h); NULL installs none. Process-wide;
 * call it while no stream is being opened. fn runs on I/O threads. */
void spill_stream_test_fault_hook(spill_io_fault_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
