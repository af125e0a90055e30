/* engine/base/alloc.h: aligned allocation with a process-wide tally.
 *
 * Every large buffer of the engine (trunk, cache slots, scratch, KV/state)
 * goes through spill_alloc so that the RAM-budget accounting can compare what
 * the planner promised with what is live. Alignment must be a power of two
 * >= sizeof(void*); 4096 is what O_DIRECT reads need. Thread-safe. */
#ifndef SPILL_BASE_ALLOC_H
#define SPILL_BASE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Returns zeroed memory of `bytes` aligned to `align`, or NULL. Caller owns it
 * and frees it with spill_free(ptr, bytes) (same size as allocated). */
void *spill_alloc(size_t bytes, size_t align);
/* Like spill_alloc but does not zero (for buffers about to be overwritten). */
void *spill_alloc_nozero(size_t bytes, size_t align);
/* Frees what spill_alloc returned; NULL is accepted. */
void spill_free(void *ptr, size_t bytes);
/* Bytes currently live through spill_alloc. */
uint64_t spill_alloc_live_bytes(void);

/* Overflow-checked size arithmetic: return 0 and leave *out unchanged on
 * overflow, 1 on success. */
int spill_mul_size(size_t a, size_t b, size_t *out);
int spill_add_size(size_t a, size_t b, size_t *out);
int spill_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
int spill_add_u64(uint64_t a, uint64_t b, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
