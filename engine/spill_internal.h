/* engine/spill_internal.h: declarations shared by the files of
 * //engine:spill and its tests (not part of the public API): the tokenizer a
 * model directory carries (spill_engine.c, spill_import.c), the RAM plan of a
 * container for an engine's options (spill_info.c) and the engine's
 * allocation-failure test hook (spill_engine.c). */
#ifndef SPILL_INTERNAL_H
#define SPILL_INTERNAL_H

#include "engine/base/status.h"
#include "engine/model/model_memory.h"
#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tokenizer a model directory carries (tokenizer.json / tiktoken.model
 * copied from an HF checkpoint, tokenizer.gguf written from a GGUF; never
 * another *.gguf a user put there), loaded as the engine loads it, with its
 * ids checked against the model's `vocab`. *out = NULL and SPILL_OK when the
 * directory holds none (the engine then keeps the byte tokenizer). On
 * success *out is the caller's (spill_tok_free). The message names the file. */
int spill_model_tokenizer(const char *model_dir, int vocab, spill_tok **out, spill_err *e);

/* spill_plan_model with the state and scratch terms for o (ctx, threads,
 * prefill chunk, act_q8; the int16-LUT choice is the container's, whatever
 * o->rvq3_qlut says): the bytes spill_model_open will allocate. */
int spill_plan_model_run(const char *model_dir, const spill_model_mem_opts *o,
                         uint64_t budget_bytes, uint64_t usable_ram, spill_plan *plan,
                         spill_err *e);

/* Test hook: the nth reallocation of an engine's per-layer tables from now
 * fails (as out of memory); 0 disarms it. Process-wide, not thread-safe:
 * tests only. */
void spill_engine_test_fail_realloc(int nth);

#ifdef __cplusplus
}
#endif
#endif
