/* engine/model/expert_source_sync.c: the built-in synchronous expert source.
 *
 * request() only remembers the ids; next_ready() preads the next requested
 * record (request order) with spill_container_read_record, which checks the
 * header (and the payload crc32 when verify is set), into a free buffer of a
 * small fixed set (4 KiB aligned, allocated at open). A buffer stays pinned
 * until release(layer, id). No prefetch, no cache: this is the baseline the
 * streaming engine replaces, and the reference for "placement never changes
 * numerics".
 */
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/model/expert_source.h"

typedef struct sync_src {
  const spill_container *c;
  int verify;
  int n_buf;
  size_t rec_bytes;
  uint8_t **buf;
  int *pin_layer; /* -1 = free */
  uint32_t *pin_id;
  int layer;      /* of the current request */
  uint32_t *ids;  /* (cap) */
  int cap, n, next;
} sync_src;

static int sync_request(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e) {
  sync_src *s = ctx;
  SPILL_FAIL_IF(e, n < 0 || n > s->cap, SPILL_E_INVALID_ARG,
                "sync expert source: request of %d experts (capacity %d)", n, s->cap);
  SPILL_FAIL_IF(e, !spill_container_bank(s->c, layer), SPILL_E_RANGE,
                "sync expert source: layer %d is not a MoE layer", layer);
  s->layer = layer;
  if (n) memcpy(s->ids, ids, (size_t)n * sizeof *ids);
  s->n = n;
  s->next = 0;
  return SPILL_OK;
}

/* Reads the next requested record into a free buffer: 1, or 0 when every
 * buffer is pinned. */
static int sync_read_next(sync_src *s, int *idx, const uint8_t **record, spill_err *e) {
  SPILL_FAIL_IF(e, s->next >= s->n, SPILL_E_INVALID_ARG,
                "sync expert source: next_ready with nothing outstanding");
  int b = 0;
  while (b < s->n_buf && s->pin_layer[b] >= 0) b++;
  if (b == s->n_buf) return 0;
  const uint32_t id = s->ids[s->next];
  SPILL_TRY(spill_container_read_record(s->c, s->layer, id, s->buf[b], s->verify, e));
  s->pin_layer[b] = s->layer;
  s->pin_id[b] = id;
  *idx = s->next++;
  *record = s->buf[b];
  return 1;
}

static int sync_next_ready(void *ctx, int *idx, const uint8_t **record, spill_err *e) {
  sync_src *s = ctx;
  int rc = sync_read_next(s, idx, record, e);
  if (rc < 0) return rc;
  SPILL_FAIL_IF(e, rc == 0, SPILL_E_INTERNAL,
                "sync expert source: all %d buffers pinned (missing release?)", s->n_buf);
  return SPILL_OK;
}

static int sync_poll_ready(void *ctx, int wait, int *idx, const uint8_t **record, spill_err *e) {
  (void)wait; /* a pread is synchronous: ready as soon as a buffer is free */
  return sync_read_next(ctx, idx, record, e);
}

static void sync_release(void *ctx, int layer, uint32_t id) {
  sync_src *s = ctx;
  for (int b = 0; b < s->n_buf; b++)
    if (s->pin_layer[b] == layer && s->pin_id[b] == id) {
      s->pin_layer[b] = -1;
      return;
    }
}

void spill_expert_source_sync_close(spill_expert_source *src) {
  if (!src || !src->ctx) return;
  sync_src *s = src->ctx;
  if (s->buf)
    for (int b = 0; b < s->n_buf; b++) spill_free(s->buf[b], s->rec_bytes);
  free(s->buf);
  free(s->pin_layer);
  free(s->pin_id);
  free(s->ids);
  free(s);
  memset(src, 0, sizeof *src);
}

int spill_expert_source_sync_open(const spill_container *c, int verify, int n_buffers,
                                  spill_expert_source *out, spill_err *e) {
  SPILL_FAIL_IF(e, !c || !out || n_buffers < 1, SPILL_E_INVALID_ARG,
                "sync expert source: bad arguments");
  memset(out, 0, sizeof *out);
  SPILL_FAIL_IF(e, c->m.record_bytes == 0 || c->m.record_bytes > SIZE_MAX, SPILL_E_FORMAT,
                "sync expert source: record size %llu", (unsigned long long)c->m.record_bytes);
  sync_src *s = calloc(1, sizeof *s);
  SPILL_FAIL_IF(e, !s, SPILL_E_NOMEM, "sync expert source");
  out->ctx = s;
  s->c = c;
  s->verify = verify;
  s->n_buf = n_buffers;
  s->rec_bytes = (size_t)c->m.record_bytes;
  s->cap = c->m.arch.moe.n_experts > 0 ? c->m.arch.moe.n_experts : 1;
  s->buf = calloc((size_t)n_buffers, sizeof *s->buf);
  s->pin_layer = malloc((size_t)n_buffers * sizeof *s->pin_layer);
  s->pin_id = calloc((size_t)n_buffers, sizeof *s->pin_id);
  s->ids = calloc((size_t)s->cap, sizeof *s->ids);
  if (!s->buf || !s->pin_layer || !s->pin_id || !s->ids) {
    spill_expert_source_sync_close(out);
    return spill_err_set(e, SPILL_E_NOMEM, "sync expert source");
  }
  for (int b = 0; b < n_buffers; b++) {
    s->pin_layer[b] = -1;
    s->buf[b] = spill_alloc_nozero(s->rec_bytes, SPILL_PAGE);
    if (!s->buf[b]) {
      spill_expert_source_sync_close(out);
      return spill_err_set(e, SPILL_E_NOMEM, "sync expert source: %d buffers of %zu bytes",
                           n_buffers, s->rec_bytes);
    }
  }
  out->request = sync_request;
  out->next_ready = sync_next_ready;
  out->release = sync_release;
  out->prefetch = NULL;
  out->poll_ready = sync_poll_ready;
  return SPILL_OK;
}
