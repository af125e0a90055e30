/* engine/base/status.c: names and messages of the status enum, and the
 * spill_err detail helpers. Pure libc; never prints. */
#include "engine/base/status.h"

#include <stdio.h>
#include <string.h>

static const struct {
  int code;
  const char *name;
  const char *str;
} k_status[] = {
    {SPILL_OK, "SPILL_OK", "ok"},
    {SPILL_E_INVALID_ARG, "SPILL_E_INVALID_ARG", "invalid argument"},
    {SPILL_E_NOMEM, "SPILL_E_NOMEM", "out of memory"},
    {SPILL_E_IO, "SPILL_E_IO", "i/o error"},
    {SPILL_E_FORMAT, "SPILL_E_FORMAT", "container or manifest is malformed"},
    {SPILL_E_CHECKSUM, "SPILL_E_CHECKSUM", "checksum mismatch"},
    {SPILL_E_VERSION, "SPILL_E_VERSION", "unsupported format version"},
    {SPILL_E_UNSUPPORTED, "SPILL_E_UNSUPPORTED", "unsupported feature"},
    {SPILL_E_RAM_BUDGET, "SPILL_E_RAM_BUDGET", "RAM budget below the floor"},
    {SPILL_E_CONFIG, "SPILL_E_CONFIG", "invalid configuration"},
    {SPILL_E_TRACE, "SPILL_E_TRACE", "invalid router trace"},
    {SPILL_E_RANGE, "SPILL_E_RANGE", "index out of range"},
    {SPILL_E_INTERRUPTED, "SPILL_E_INTERRUPTED", "interrupted"},
    {SPILL_E_SHORT_READ, "SPILL_E_SHORT_READ", "short read"},
    {SPILL_E_INTERNAL, "SPILL_E_INTERNAL", "internal error"},
    {SPILL_E_TMPL_PARSE_DEPTH, "SPILL_E_TMPL_PARSE_DEPTH", "chat template nested too deep"},
    {SPILL_E_TMPL_EVAL_DEPTH, "SPILL_E_TMPL_EVAL_DEPTH", "chat template evaluation nested too deep"},
    {SPILL_E_TMPL_STEPS, "SPILL_E_TMPL_STEPS", "chat template step budget exceeded"},
    {SPILL_E_TMPL_OUTPUT, "SPILL_E_TMPL_OUTPUT", "chat template output budget exceeded"},
    {SPILL_E_TMPL_MEMORY, "SPILL_E_TMPL_MEMORY", "chat template memory budget exceeded"},
    {SPILL_E_NONFINITE, "SPILL_E_NONFINITE", "not a finite number"},
    {SPILL_E_SESSION, "SPILL_E_SESSION", "session state of another model or context size"},
};

const char *spill_status_name(int status) {
  for (size_t i = 0; i < sizeof k_status / sizeof k_status[0]; i++)
    if (k_status[i].code == status) return k_status[i].name;
  return "SPILL_E_UNKNOWN";
}

const char *spill_status_str(int status) {
  for (size_t i = 0; i < sizeof k_status / sizeof k_status[0]; i++)
    if (k_status[i].code == status) return k_status[i].str;
  return "unknown status";
}

int spill_err_vset(spill_err *e, int code, const char *fmt, va_list ap) {
  if (e) {
    e->code = code;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  }
  return code;
}

int spill_err_set(spill_err *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  spill_err_vset(e, code, fmt, ap);
  va_end(ap);
  return code;
}

void spill_err_prefix(spill_err *e, const char *fmt, ...) {
  if (!e) return;
  char pre[SPILL_ERR_MSG_MAX], old[SPILL_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
}

void spill_err_clear(spill_err *e) {
  if (!e) return;
  e->code = 0;
  e->msg[0] = 0;
}
