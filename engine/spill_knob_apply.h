/* engine/spill_knob_apply.h: what a change of a live knob does to an open
 * engine, as a column of the knob table (engine/spill_config.c), so
 * spill_engine_set_knob dispatches on the row, not on knob names. Private
 * to //engine:spill (spill_config.c fills it, spill_engine.c acts on it). */
#ifndef SPILL_ENGINE_SPILL_KNOB_APPLY_H
#define SPILL_ENGINE_SPILL_KNOB_APPLY_H

typedef enum spill_knob_apply {
  SPILL_KNOB_APPLY_NONE = 0,    /* fixed at open (spill_knob.live == 0) */
  SPILL_KNOB_APPLY_FIELD,       /* the config field is read where it is used */
  SPILL_KNOB_APPLY_VERIFY,      /* the stream's crc check is switched */
  SPILL_KNOB_APPLY_BUDGET,      /* a new budget: the cache resized */
  SPILL_KNOB_APPLY_CACHE_SLOTS, /* a new slot count: the cache resized */
  SPILL_KNOB_APPLY_PROFILE,     /* the per-token profile reopened */
  SPILL_KNOB_APPLY_TRACE,       /* the router trace reopened */
} spill_knob_apply;

/* The row's apply kind; SPILL_KNOB_APPLY_NONE for an unknown name. */
spill_knob_apply spill_knob_apply_of(const char *name);

#endif
