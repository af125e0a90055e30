/* engine/io/io_fault.c: a ready-made fault plan for the reader's fault hook
 * (in the spirit of SQLite's test VFS). Tests describe faults as rules
 * (file, offset, skip the first k matches, fire n times) instead of writing
 * a hook each time.
 *
 * Invariants: rules are fixed once the plan is installed; matching counts
 * are relaxed atomics so the hook can run on several reader threads at
 * once, and each match claims a unique index, so "fire on the 3rd read"
 * fires exactly once even under concurrency. Depends on reader.h only.
 */
#include <string.h>

#include "engine/io/reader.h"

void spill_io_fault_plan_init(spill_io_fault_plan *p) {
  if (p) memset(p, 0, sizeof *p);
}

int spill_io_fault_plan_add(spill_io_fault_plan *p,
                            const spill_io_fault_rule *r) {
  if (p == NULL || r == NULL) return SPILL_E_INVALID_ARG;
  if (p->n_rules >= SPILL_IO_FAULT_PLAN_MAX) return SPILL_E_RANGE;
  p->rules[p->n_rules] = *r;
  p->matched[p->n_rules] = 0;
  p->fired[p->n_rules] = 0;
  p->n_rules++;
  return SPILL_OK;
}

uint64_t spill_io_fault_plan_fired(const spill_io_fault_plan *p, int i) {
  if (p == NULL || i < 0 || i >= p->n_rules) return 0;
  return __atomic_load_n(&p->fired[i], __ATOMIC_RELAXED);
}

void spill_io_fault_plan_hook(void *ctx, const spill_io_fault_site *site,
                              spill_io_fault *out) {
  spill_io_fault_plan *p = ctx;
  for (int i = 0; i < p->n_rules; i++) {
    const spill_io_fault_rule *r = &p->rules[i];
    if (r->file_id != SPILL_IO_ANY_FILE && r->file_id != site->file_id)
      continue;
    if (r->offset != SPILL_IO_ANY_OFFSET && r->offset != site->offset)
      continue;
    if (r->first_attempt_only && site->attempt != 0) continue;
    /* Plain uint64_t fields so the struct stays C/C++-friendly; the GCC
     * builtins give them atomic access. */
    uint64_t k = __atomic_fetch_add(&p->matched[i], 1, __ATOMIC_RELAXED);
    if (k < r->skip) continue;
    if (r->times != 0 && k - r->skip >= r->times) continue;
    __atomic_fetch_add(&p->fired[i], 1, __ATOMIC_RELAXED);
    *out = r->fault;
    return;
  }
}
