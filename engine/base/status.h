/* engine/base/status.h: the one status enum of spill and the detail message.
 *
 * Role: every fallible call in the engine returns a spill_status (0 = OK,
 * negative = error). Internal calls also fill a spill_err with a specific
 * human-readable detail ("layer 3 expert 17: checksum mismatch"); handles keep
 * the last one so the public API can return it. The numeric values are frozen:
 * new codes are appended, never renumbered. This header is re-exported by the
 * public header engine/spill.h and depends on nothing but libc.
 */
#ifndef SPILL_BASE_STATUS_H
#define SPILL_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spill_status {
  SPILL_OK = 0,
  SPILL_E_INVALID_ARG = -1, /* a caller passed something impossible */
  SPILL_E_NOMEM = -2,       /* allocation failed */
  SPILL_E_IO = -3,          /* a system call on a file failed (EIO, ENOENT, ...) */
  SPILL_E_FORMAT = -4,      /* container bytes or manifest are malformed */
  SPILL_E_CHECKSUM = -5,    /* a crc32 or content hash does not match */
  SPILL_E_VERSION = -6,     /* a format version we do not read */
  SPILL_E_UNSUPPORTED = -7, /* valid but not implemented here (dtype, CPU) */
  SPILL_E_RAM_BUDGET = -8,  /* an explicit budget below the RAM floor */
  SPILL_E_CONFIG = -9,      /* an experiment config or knob is invalid */
  SPILL_E_TRACE = -10,      /* a router trace is malformed or mismatched */
  SPILL_E_RANGE = -11,      /* an index (token, layer, expert) is out of range */
  SPILL_E_INTERRUPTED = -12, /* stopped by the caller (callback, signal) */
  SPILL_E_SHORT_READ = -13, /* a read returned fewer bytes than the record */
  SPILL_E_INTERNAL = -14,   /* a bug of ours that was caught, not asserted */
  SPILL_E_TMPL_PARSE_DEPTH = -15, /* a chat template nests deeper than its budget */
  SPILL_E_TMPL_EVAL_DEPTH = -16,  /* evaluating a template (or a value) nests too deep */
  SPILL_E_TMPL_STEPS = -17,       /* a template rendering ran out of steps */
  SPILL_E_TMPL_OUTPUT = -18,      /* a template rendered more bytes than its budget */
  SPILL_E_TMPL_MEMORY = -19,      /* a template rendering allocated past its budget */
  SPILL_E_NONFINITE = -20,       /* a NaN or Inf where numbers must be finite (weights, logits) */
  SPILL_E_SESSION = -21,         /* a session file belongs to another model or context size */
} spill_status;

/* Static, never-NULL name of a status ("SPILL_E_FORMAT"); unknown codes give
 * "SPILL_E_UNKNOWN". Thread-safe. */
const char *spill_status_name(int status);
/* Static one-line description of a status ("container is malformed"). */
const char *spill_status_str(int status);

#define SPILL_ERR_MSG_MAX 512

/* A status plus its detail message. Zero-initialise before use. */
typedef struct spill_err {
  int code;
  char msg[SPILL_ERR_MSG_MAX];
} spill_err;

/* Records code and a printf-style detail in e (e may be NULL); returns code so
 * it can be used as `return spill_err_set(e, SPILL_E_FORMAT, "...")`. */
int spill_err_set(spill_err *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int spill_err_vset(spill_err *e, int code, const char *fmt, va_list ap);
/* Prepends "prefix: " to e's message (for adding context on the way up). */
void spill_err_prefix(spill_err *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void spill_err_clear(spill_err *e);

/* Early-return helpers. SPILL_TRY propagates a negative status unchanged (the
 * callee already filled the detail); SPILL_FAIL_IF records a detail. */
#define SPILL_TRY(expr)                 \
  do {                                  \
    int spill_try_rc_ = (expr);         \
    if (spill_try_rc_ < 0) return spill_try_rc_; \
  } while (0)

#define SPILL_FAIL_IF(err, cond, code, ...)                    \
  do {                                                         \
    if (cond) return spill_err_set((err), (code), __VA_ARGS__); \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
