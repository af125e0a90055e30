/* engine/trace/trace_internal.h: what the trace readers share, not API.
 *
 * Role: the one way a reader of untrusted trace input reports a problem:
 * SPILL_E_TRACE "NAME:LINE: reason" for a field, SPILL_E_NOMEM "NAME: out of
 * memory". Used by engine/trace/trace_read.c (JSONL traces) and the
 * converters of other tools' traces (research/trace/trace_convert.c), so the
 * two word their errors alike. Visible to those two packages only
 * (engine/trace/BUILD :internal).
 */
#ifndef SPILL_TRACE_INTERNAL_H
#define SPILL_TRACE_INTERNAL_H

#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records SPILL_E_TRACE "name:line: <fmt...>" in e and returns it. */
int spill_trace_fail_at(spill_err *e, const char *name, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records SPILL_E_NOMEM "name: out of memory" in e and returns it. */
int spill_trace_nomem(spill_err *e, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* SPILL_TRACE_INTERNAL_H */
