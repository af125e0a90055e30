/* engine/stream/record_check.h: expert record checks (header + payload
 * crc32, spill_record_check with verify) run beside the consumer thread.
 *
 * The stream queues every record that arrived with verify on; when the
 * consumer is about to compute it kicks the helper thread, which checks the
 * queued records in FIFO order beside that compute, and when the consumer
 * would otherwise wait it runs the next queued check itself (so a record
 * that arrives while the consumer is idle costs no thread hand-off). A
 * result (status and the exact detail of spill_record_check) comes back to
 * the consumer by tag; the record's buffer must stay untouched and alive
 * until then. Only the stream uses it; internal to engine/stream. Depends
 * on base and format only; never touches cache or engine state.
 *
 * Threads: submit/collect/free from the one consumer thread; the helper
 * thread only reads the submitted record and the (read-only) manifest.
 */
#ifndef SPILL_STREAM_RECORD_CHECK_H
#define SPILL_STREAM_RECORD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_rcheck spill_rcheck;

typedef struct spill_rcheck_result {
  int tag;
  int rc;       /* spill_record_check's status */
  spill_err err; /* its detail when rc < 0 */
} spill_rcheck_result;

/* m is borrowed (must outlive the checker). The helper thread starts on the
 * first kick. Errors: SPILL_E_NOMEM. */
int spill_rcheck_init(const spill_manifest *m, spill_rcheck **out, spill_err *e);
/* Stops the helper. Every submitted check must have been collected. NULL fine. */
void spill_rcheck_free(spill_rcheck *v);

/* Queues the check of the record of (file, layer, id) at data (bytes long)
 * under tag (>= 0, unique among checks not yet collected). Returns 1 if
 * queued, 0 if no helper can run (thread creation failed, or out of memory):
 * the caller then checks inline. */
int spill_rcheck_submit(spill_rcheck *v, int tag, const char *file, int layer, uint32_t id,
                        const void *data, size_t bytes);
/* Wakes the helper (starting it on first use) if enough checks are queued
 * to be worth a wake-up (record_check.c): call when the consumer is about
 * to be busy. */
void spill_rcheck_kick(spill_rcheck *v);

enum {
  SPILL_RCHECK_POLL = 0,  /* finished checks only */
  SPILL_RCHECK_STEAL = 1, /* ... else run one queued check on this thread */
  SPILL_RCHECK_BLOCK = 2, /* ... else wait for the helper's current check */
};
/* Returns up to max finished checks (>= 0). With STEAL or BLOCK it returns
 * at least one whenever a submitted check is not yet collected. */
int spill_rcheck_collect(spill_rcheck *v, spill_rcheck_result *out, int max, int mode);
/* Checks submitted and not yet collected. */
int spill_rcheck_pending(const spill_rcheck *v);

/* Time spent in checks (ns): on the helper thread, and on the consumer
 * (checks it ran, waits for the helper, kicks), since init or the last
 * reset. */
void spill_rcheck_times(spill_rcheck *v, uint64_t *helper_ns, uint64_t *consumer_ns);
void spill_rcheck_reset_times(spill_rcheck *v);

#ifdef __cplusplus
}
#endif
#endif
