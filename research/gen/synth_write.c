/* research/gen/synth_write.c: streams a planned synthetic model through the
 * container writer.
 *
 * Trunk tensors are drawn one at a time (the largest, tok_embd of a twin, is
 * ~150 MB) and handed to spill_writer_tensor. Records are the bulk (tens of
 * GB for a twin): with threads = 1 a generator thread fills a ring of record
 * payloads in (layer, expert) order while the calling thread passes them to
 * spill_writer_record (which checksums and writes them), so PRNG work overlaps
 * crc32 and the write system calls on the machine's two cores. The writer
 * needs records in expert order within a bank; the ring preserves the global
 * order, and values do not depend on it anyway (one PRNG stream per record).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/alloc.h"
#include "research/gen/synth_internal.h"

#define RING_SLOTS 8

typedef struct ring {
  const spill_gen_plan_full *p;
  uint8_t *buf; /* RING_SLOTS payloads */
  size_t slot_bytes;
  uint64_t total; /* records */
  uint64_t produced, consumed;
  int stop;
  pthread_mutex_t mu;
  pthread_cond_t can_produce, can_consume;
} ring;

static void seq_to_record(const spill_manifest *m, uint64_t j, int *layer, uint32_t *expert) {
  uint64_t per = m->arch.moe.n_experts;
  *layer = m->arch.n_dense_layers + (int)(j / per);
  *expert = (uint32_t)(j % per);
}

static void *producer_main(void *arg) {
  ring *r = arg;
  for (uint64_t j = 0; j < r->total; j++) {
    pthread_mutex_lock(&r->mu);
    while (!r->stop && r->produced - r->consumed >= RING_SLOTS)
      pthread_cond_wait(&r->can_produce, &r->mu);
    int stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop) break;
    int layer;
    uint32_t expert;
    seq_to_record(&r->p->m, j, &layer, &expert);
    spill_gen_expert_payload(r->p, layer, expert, r->buf + (j % RING_SLOTS) * r->slot_bytes);
    pthread_mutex_lock(&r->mu);
    r->produced++;
    pthread_cond_signal(&r->can_consume);
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

static int write_trunk(const spill_gen_plan_full *p, spill_writer *w, const spill_gen_opts *o,
                       uint64_t total, uint64_t *done, spill_err *e) {
  const spill_manifest *m = &p->m;
  size_t cap = 0;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].bytes > cap) cap = (size_t)m->tensors[i].bytes;
  uint8_t *buf = spill_alloc_nozero(cap ? cap : 64, 64);
  SPILL_FAIL_IF(e, !buf, SPILL_E_NOMEM, "gen: trunk buffer of %zu bytes", cap);
  int rc = SPILL_OK;
  for (int i = 0; rc == SPILL_OK && i < m->n_tensors; i++) {
    const spill_tensor_info *t = &m->tensors[i];
    rc = spill_gen_tensor_bytes(p, i, buf, e);
    if (rc == SPILL_OK) rc = spill_writer_tensor(w, t->name, buf, (size_t)t->bytes, e);
    *done += t->bytes;
    if (rc == SPILL_OK && o->progress) o->progress(o->progress_ctx, *done, total);
  }
  spill_free(buf, cap ? cap : 64);
  return rc;
}

static int write_records_serial(const spill_gen_plan_full *p, spill_writer *w,
                                const spill_gen_opts *o, uint64_t total, uint64_t *done,
                                spill_err *e) {
  const spill_manifest *m = &p->m;
  uint8_t *buf = spill_alloc_nozero(m->payload_bytes, 4096);
  SPILL_FAIL_IF(e, !buf, SPILL_E_NOMEM, "gen: record buffer");
  int rc = SPILL_OK;
  uint64_t n = (uint64_t)m->n_banks * m->arch.moe.n_experts;
  for (uint64_t j = 0; rc == SPILL_OK && j < n; j++) {
    int layer;
    uint32_t expert;
    seq_to_record(m, j, &layer, &expert);
    spill_gen_expert_payload(p, layer, expert, buf);
    rc = spill_writer_record(w, layer, expert, buf, e);
    *done += m->record_bytes;
    if (rc == SPILL_OK && o->progress) o->progress(o->progress_ctx, *done, total);
  }
  spill_free(buf, m->payload_bytes);
  return rc;
}

static int write_records_pipelined(const spill_gen_plan_full *p, spill_writer *w,
                                   const spill_gen_opts *o, uint64_t total, uint64_t *done,
                                   spill_err *e) {
  const spill_manifest *m = &p->m;
  ring r;
  memset(&r, 0, sizeof r);
  r.p = p;
  r.slot_bytes = ((size_t)m->payload_bytes + 4095) & ~(size_t)4095;
  r.total = (uint64_t)m->n_banks * m->arch.moe.n_experts;
  r.buf = spill_alloc_nozero(r.slot_bytes * RING_SLOTS, 4096);
  SPILL_FAIL_IF(e, !r.buf, SPILL_E_NOMEM, "gen: record ring");
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.can_produce, NULL);
  pthread_cond_init(&r.can_consume, NULL);
  pthread_t th;
  int rc = SPILL_OK;
  if (pthread_create(&th, NULL, producer_main, &r) != 0) {
    rc = spill_err_set(e, SPILL_E_INTERNAL, "gen: cannot start the generator thread");
  } else {
    for (uint64_t j = 0; j < r.total; j++) {
      pthread_mutex_lock(&r.mu);
      while (r.consumed >= r.produced) pthread_cond_wait(&r.can_consume, &r.mu);
      pthread_mutex_unlock(&r.mu);
      int layer;
      uint32_t expert;
      seq_to_record(m, j, &layer, &expert);
      rc = spill_writer_record(w, layer, expert, r.buf + (j % RING_SLOTS) * r.slot_bytes, e);
      pthread_mutex_lock(&r.mu);
      r.consumed++;
      if (rc != SPILL_OK) r.stop = 1;
      pthread_cond_signal(&r.can_produce);
      pthread_mutex_unlock(&r.mu);
      if (rc != SPILL_OK) break;
      *done += m->record_bytes;
      if (o->progress) o->progress(o->progress_ctx, *done, total);
    }
    pthread_join(th, NULL);
  }
  pthread_cond_destroy(&r.can_consume);
  pthread_cond_destroy(&r.can_produce);
  pthread_mutex_destroy(&r.mu);
  spill_free(r.buf, r.slot_bytes * RING_SLOTS);
  return rc;
}

int spill_gen_write(const char *dir, const spill_gen_opts *o, spill_err *e) {
  SPILL_FAIL_IF(e, !dir || !*dir, SPILL_E_INVALID_ARG, "gen: no output directory");
  spill_gen_plan_full p;
  SPILL_TRY(spill_gen_plan_full_make(o, &p, e));
  if (o->summary_out) *o->summary_out = p.sum;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    int err = errno;
    spill_gen_plan_full_free(&p);
    return spill_err_set(e, SPILL_E_IO, "gen: cannot create %s: %s", dir, strerror(err));
  }
  spill_writer *w = NULL;
  int rc = spill_writer_open(dir, &p.m, &w, e);
  if (rc == SPILL_OK) {
    const spill_manifest *m = &p.m;
    uint64_t n_rec = (uint64_t)m->n_banks * m->arch.moe.n_experts;
    uint64_t total = n_rec * m->record_bytes, done = 0;
    for (int i = 0; i < m->n_tensors; i++) total += m->tensors[i].bytes;
    rc = write_trunk(&p, w, o, total, &done, e);
    if (rc == SPILL_OK)
      rc = o->threads > 0 ? write_records_pipelined(&p, w, o, total, &done, e)
                          : write_records_serial(&p, w, o, total, &done, e);
    if (rc == SPILL_OK) {
      rc = spill_writer_finish(w, e);
    } else {
      spill_writer_abort(w);
    }
  }
  spill_gen_plan_full_free(&p);
  if (rc != SPILL_OK) spill_err_prefix(e, "gen %s", dir);
  return rc;
}
