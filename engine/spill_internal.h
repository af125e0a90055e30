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

/* The conversation an engine holds (spill_engine.c keeps it; spill_session.c
 * saves and restores it): tokens[0, n_past) are the tokens whose state the
 * model holds (n_past = spill_model_n_past); logits (vocab floats) are
 * position logits_pos - 1's when logits_pos == n_past; the sampler's
 * generator state rng, drawn from seed, when rng_valid. */
typedef struct spill_engine_conv {
  int *tokens;   /* (ctx) */
  float *logits; /* (vocab) */
  int logits_pos;
  uint64_t seed, rng;
  int rng_valid;
} spill_engine_conv;
struct spill_model;
/* Borrowed views of an open engine's parts. */
spill_engine_conv *spill_engine_conv_of(spill_engine *g);
struct spill_model *spill_engine_model_of(spill_engine *g);
const char *spill_engine_dir_of(const spill_engine *g);

/* Test hook: the nth reallocation of an engine's per-layer tables from now
 * fails (as out of memory); 0 disarms it. Process-wide, not thread-safe:
 * tests only. */
void spill_engine_test_fail_realloc(int nth);

#ifdef __cplusplus
}
#endif
#endif
