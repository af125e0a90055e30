/* engine/base/clock.c: CLOCK_MONOTONIC in nanoseconds. */
#define _POSIX_C_SOURCE 200809L
#include "engine/base/clock.h"

#include <time.h>

uint64_t spill_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double spill_clock_ms(uint64_t start_ns, uint64_t end_ns) {
  return (double)(end_ns - start_ns) / 1e6;
}
