/* engine/base/clock.h: monotonic time for profiles and progress. */
#ifndef SPILL_BASE_CLOCK_H
#define SPILL_BASE_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds from CLOCK_MONOTONIC; only differences are meaningful. */
uint64_t spill_clock_ns(void);
/* Milliseconds between two spill_clock_ns readings, as double. */
double spill_clock_ms(uint64_t start_ns, uint64_t end_ns);

#ifdef __cplusplus
}
#endif
#endif
