/* engine/model/expert_source.h: how the forward pass obtains routed experts.
 *
 * The MoE of a layer asks for every expert it needs at once (request), then
 * consumes them in whatever order they become ready (next_ready) and returns
 * each one (release). The forward pass computes each expert's output into its
 * own buffer and sums them in router order afterwards, so the arrival order
 * never changes the numbers. The built-in implementation below reads records
 * synchronously with pread; the streaming engine (I/O pool + expert cache +
 * prefetch) implements the same struct without touching the forward pass.
 * Depends on engine/base and engine/format only.
 */
#ifndef SPILL_MODEL_EXPERT_SOURCE_H
#define SPILL_MODEL_EXPERT_SOURCE_H

#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_expert_source {
  void *ctx;
  /* All experts a layer needs are requested at once (ids in router order,
   * distinct). Non-blocking. A new request replaces any not-yet-delivered part
   * of the previous one; records already delivered stay pinned until
   * released. Returns SPILL_OK or a negative status with e filled. */
  int (*request)(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e);
  /* Blocks until one requested, not yet returned expert is ready; returns its
   * index into ids and a pointer to its full record (header + payload),
   * pinned until release. Order = arrival order. */
  int (*next_ready)(void *ctx, int *idx, const uint8_t **record, spill_err *e);
  /* Unpins a record obtained from next_ready (one release per delivery). */
  void (*release)(void *ctx, int layer, uint32_t id);
  /* Optional hint: experts likely needed soon (router lookahead); may be NULL. */
  int (*prefetch)(void *ctx, int layer, const uint32_t *ids, int n, spill_err *e);
  /* Optional readiness call (may be NULL: the forward then calls next_ready
   * only while it holds no record). Delivers like next_ready and returns 1,
   * or returns 0 without a record: with wait 0 when none is ready now (it
   * never blocks; it reaps completions and starts reads that were waiting
   * for a free slot), with wait 1 only when none can become ready before a
   * delivered record is released (every slot pinned by them); otherwise
   * wait 1 blocks until one is ready. Negative status on an error. Like
   * every call of the source, one thread at a time: the forward's
   * scheduler serialises them (engine/model/moe.c). */
  int (*poll_ready)(void *ctx, int wait, int *idx, const uint8_t **record, spill_err *e);
} spill_expert_source;

/* The synchronous source: next_ready preads the next requested record (in
 * request order) into one of n_buffers record buffers (4 KiB aligned) and
 * checks it (header always, payload crc32 when verify != 0). n_buffers >= 1
 * bounds how many records may be pinned at once; more gives SPILL_E_INTERNAL
 * from next_ready, and 0 from poll_ready (which reads inline: its wait 0
 * also blocks for the pread).
 * `c` is borrowed and must outlive the source. On success *out is filled and
 * owns its ctx; free it with spill_expert_source_sync_close. Not thread-safe:
 * one consumer. */
int spill_expert_source_sync_open(const spill_container *c, int verify, int n_buffers,
                                  spill_expert_source *out, spill_err *e);
/* Frees a source made by spill_expert_source_sync_open; NULL/zeroed fine. */
void spill_expert_source_sync_close(spill_expert_source *s);

#ifdef __cplusplus
}
#endif
#endif
