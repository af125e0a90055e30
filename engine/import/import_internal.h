/* engine/import/import_internal.h: the importer's private structures, shared
 * by import_plan.c (config / GGUF metadata -> architecture + tensor plan) and
 * import_run.c (conversion, journal, writing). Not a public API.
 */
#ifndef SPILL_IMPORT_INTERNAL_H
#define SPILL_IMPORT_INTERNAL_H

#include "engine/format/container.h"
#include "engine/import/gguf.h"
#include "engine/import/import.h"
#include "engine/import/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct imp_src {
  int is_gguf;
  spill_st_ckpt st;
  spill_gguf gg;
  uint8_t *used;        /* (n source tensors) consumed by the plan */
  char arch_name[32];
  uint32_t fp8_block[2]; /* safetensors FP8 weight_block_size (rows, cols), 0 = none */
} imp_src;

/* One trunk tensor of the container. */
typedef struct imp_trunk {
  char name[SPILL_NAME_MAX];
  const spill_src_tensor *src;
  const spill_src_tensor *scale; /* FP8 weight_scale_inv, or NULL */
  int ndim;                      /* 1 (vector, always f32) or 2 */
  uint64_t rows, cols;           /* container shape (ndim 1: rows = n) */
  int unpermute_heads;           /* > 0: GGUF llama q/k rows, heads of rows/heads each */
} imp_trunk;

/* Sources of one MoE layer's experts, sections gate, up, down. */
typedef struct imp_moe_layer {
  const spill_src_tensor *stacked[SPILL_SEC_COUNT]; /* GGUF (E, rows, cols) */
  const spill_src_tensor **per[SPILL_SEC_COUNT];    /* HF: (E) pointers */
  const spill_src_tensor **scale[SPILL_SEC_COUNT];  /* HF FP8 scale_inv per expert, or NULL */
} imp_moe_layer;

typedef struct imp_plan {
  spill_arch arch;
  int n_trunk;
  imp_trunk *trunk;
  imp_moe_layer *moe; /* (n_moe) */
} imp_plan;

int imp_src_open(imp_src *s, const char *path, spill_err *e);
void imp_src_close(imp_src *s);
const spill_src_tensor *imp_src_find(imp_src *s, const char *name); /* marks it used */
int imp_src_read(const imp_src *s, const spill_src_tensor *t, uint64_t off, void *dst, size_t n,
                 spill_err *e);
int imp_src_n_tensors(const imp_src *s);
const spill_src_tensor *imp_src_tensor(const imp_src *s, int i);

/* GGUF sources: writes the tokenizer.* metadata as dst/tokenizer.gguf
 * (import_tok.c); no-op for other sources. */
int imp_gguf_tokenizer(const imp_src *s, const char *dst, spill_err *e);

/* Builds the plan from the source's config / metadata. */
int imp_plan_build(imp_src *s, imp_plan *p, spill_err *e);
void imp_plan_free(imp_plan *p);

#ifdef __cplusplus
}
#endif
#endif
