/* engine/base/alloc.c: posix_memalign behind a live/peak byte tally (relaxed
 * atomics: the tally is for accounting, not synchronisation). */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include "engine/base/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static _Atomic uint64_t g_live;

/* Buffers of at least this size are mapped directly (and unmapped on free)
 * rather than left to malloc: glibc raises its mmap threshold dynamically
 * after large frees, after which a reopened engine's big buffers came from
 * the brk heap, whose freed pages stay resident, and peak RSS rose 5% over
 * the budget (engine/rss_budget_test). */
#define DIRECT_MAP_BYTES ((size_t)1 << 20)

static void *alloc_impl(size_t bytes, size_t align, int zero) {
  if (align < sizeof(void *)) align = sizeof(void *);
  if (bytes == 0) bytes = 1;
  void *p = NULL;
  if (bytes >= DIRECT_MAP_BYTES) {
    /* over-map by align and trim, so [p, p + bytes) is exactly what
     * spill_free unmaps whatever the alignment */
    size_t extra = align > 4096 ? align : 0, len;
    if (!spill_add_size(bytes, extra, &len)) return NULL;
    /* a zeroed buffer is populated by the kernel in one call (its pages
     * are zero already). On the VMs here a first touch costs ~4 us a 4 KiB
     * page; 2 GiB: 8.05 s touched page by page, 0.48 s populated + 4.13 s
     * for the first user write per page (the VM's shadow page tables fault
     * once more), so the populated path about halves an engine's open */
    const int populate = zero ? MAP_POPULATE : 0;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uint8_t *a = m;
    if (extra) {
      a = (uint8_t *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
      if (a > m) munmap(m, (size_t)(a - m));
      size_t tail = (size_t)(m + len - (a + bytes)) & ~(size_t)4095;
      if (tail) munmap(m + len - tail, tail);
    }
    p = a;
    /* spill_alloc callers rely on the pages being committed (the expert
     * cache touches its slots at init so a budget that does not fit fails
     * there). MAP_POPULATE does not fail when it cannot populate, so write
     * one zero per page: a populated page takes it without a fault, one
     * the kernel left out is committed here */
    if (zero)
      for (size_t off = 0; off < bytes; off += 4096) ((volatile uint8_t *)p)[off] = 0;
  } else {
    if (posix_memalign(&p, align, bytes) != 0) return NULL;
    if (zero) memset(p, 0, bytes);
  }
  atomic_fetch_add_explicit(&g_live, bytes, memory_order_relaxed);
  return p;
}

void *spill_alloc(size_t bytes, size_t align) { return alloc_impl(bytes, align, 1); }
void *spill_alloc_nozero(size_t bytes, size_t align) { return alloc_impl(bytes, align, 0); }

void spill_free(void *ptr, size_t bytes) {
  if (!ptr) return;
  if (bytes == 0) bytes = 1;
  atomic_fetch_sub_explicit(&g_live, bytes, memory_order_relaxed);
  if (bytes >= DIRECT_MAP_BYTES) munmap(ptr, bytes);
  else free(ptr);
}

uint64_t spill_alloc_live_bytes(void) { return atomic_load(&g_live); }

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
