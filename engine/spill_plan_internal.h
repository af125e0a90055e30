/* engine/spill_plan_internal.h: the RAM plan of a container for the options
 * an engine runs with, shared by spill_info.c (which implements it) and
 * spill_engine.c (not part of the public API). */
#ifndef SPILL_PLAN_INTERNAL_H
#define SPILL_PLAN_INTERNAL_H

#include "engine/base/status.h"
#include "engine/model/model_memory.h"
#include "engine/spill.h"

/* spill_plan_model with the state and scratch terms for o (ctx, threads,
 * prefill chunk, act_q8; the int16-LUT choice is the container's, whatever
 * o->rvq3_qlut says): the bytes spill_model_open will allocate. */
int spill_plan_model_run(const char *model_dir, const spill_model_mem_opts *o,
                         uint64_t budget_bytes, uint64_t usable_ram, spill_plan *plan,
                         spill_err *e);

#endif
