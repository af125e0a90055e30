/* engine/base/alloc.c: posix_memalign behind a live/peak byte tally (relaxed
 * atomics: the tally is for accounting, not synchronisation). */
#define _POSIX_C_SOURCE 200809L
#include "engine/base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t g_live, g_peak;

static void *alloc_impl(size_t bytes, size_t align, int zero) {
  if (align < sizeof(void *)) align = sizeof(void *);
  if (bytes == 0) bytes = 1;
  void *p = NULL;
  if (posix_memalign(&p, align, bytes) != 0) return NULL;
  if (zero) memset(p, 0, bytes);
  uint64_t live = atomic_fetch_add_explicit(&g_live, bytes, memory_order_relaxed) + bytes;
  uint64_t peak = atomic_load_explicit(&g_peak, memory_order_relaxed);
  while (live > peak &&
         !atomic_compare_exchange_weak_explicit(&g_peak, &peak, live, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
  return p;
}

void *spill_alloc(size_t bytes, size_t align) { return alloc_impl(bytes, align, 1); }
void *spill_alloc_nozero(size_t bytes, size_t align) { return alloc_impl(bytes, align, 0); }

void spill_free(void *ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes == 0) bytes = 1;
  atomic_fetch_sub_explicit(&g_live, bytes, memory_order_relaxed);
  free(ptr);
}

uint64_t spill_alloc_live_bytes(void) { return atomic_load(&g_live); }
uint64_t spill_alloc_peak_bytes(void) { return atomic_load(&g_peak); }

int spill_mul_size(size_t a, size_t b, size_t *out) {
  size_t r;
  if (__builtin_mul_overflow(a, b, &r)) return 0;
  *out = r;
  return 1;
}
int spill_add_size(size_t a, size_t b, size_t *out) {
  size_t r;
  if (__builtin_add_overflow(a, b, &r)) return 0;
  *out = r;
  return 1;
}
int spill_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return 0;
  *out = r;
  return 1;
}
int spill_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return 0;
  *out = r;
  return 1;
}
