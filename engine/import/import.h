/* engine/import/import.h: `spill import`: turns a Hugging Face checkpoint
 * directory (config.json + safetensors) or a GGUF file into a spill
 * container (docs/FORMAT.md) for the architectures of docs/MODEL.md
 * "Imported architectures".
 *
 * Guarantees: `keep` keeps the source's numbers exactly where the container
 * has the source's format (f32/f16/bf16 as is, GGUF Q8_0/Q4_0 as q8/q4 with
 * group 32 without changing a weight) and refuses otherwise, naming the
 * tensor; q8/q4 requantise by rounding and report the relative error of
 * each requantised tensor. An interrupted import resumes from the journal
 * DST/import.journal and ends byte-identical to an uninterrupted one; a
 * different SRC or options on an existing DST is refused naming the
 * difference. Memory: one source tensor (trunk) or one expert's three
 * matrices, plus the converted copy and fixed buffers (docs/MODEL.md).
 * The library never prints: progress goes to the callback.
 */
#ifndef SPILL_IMPORT_IMPORT_H
#define SPILL_IMPORT_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum spill_import_target {
  SPILL_IMPORT_KEEP = 0, /* the source's numbers, or refuse */
  SPILL_IMPORT_Q8 = 1,   /* requantise to q8 (rounding) */
  SPILL_IMPORT_Q4 = 2,   /* requantise to q4 (rounding) */
  SPILL_IMPORT_RVQ3 = 3, /* experts only: k-means residual VQ (3 x 256 x 8, f16 row scales) */
} spill_import_target;

typedef struct spill_import_progress {
  uint64_t bytes_done, bytes_total; /* source bytes of finished / all units */
  int units_done, units_total;      /* trunk tensors + expert records */
  int units_adopted;                /* of units_done: taken over from an interrupted run */
  const char *unit;                 /* the unit just finished */
} spill_import_progress;

typedef void (*spill_import_progress_fn)(void *user, const spill_import_progress *p);

typedef struct spill_import_request {
  const char *src;                 /* checkpoint directory, .safetensors or .gguf file */
  const char *dst;                 /* container directory */
  spill_import_target experts;     /* keep | q8 | q4 | rvq3 */
  spill_import_target trunk;       /* keep | q8 | q4 (norms always f32) */
  uint32_t group;                  /* q8/q4 group when requantising; 0 = 32 */
  spill_import_progress_fn progress; /* may be NULL; called after each unit */
  void *user;
  int threads; /* rvq3 encoder threads, 0 = every online CPU (max 64); the output is the same for any */
} spill_import_request;

typedef struct spill_import_tensor_error {
  char name[96];  /* trunk tensor, or "blk.L.ffn_gate_exps" for a layer's experts */
  double rel_err; /* ||w - w'|| / ||w|| over the tensor (f64) */
} spill_import_tensor_error;

typedef struct spill_import_summary {
  char arch[32];         /* model_type / general.architecture */
  char source[16];       /* "safetensors" or "gguf" */
  int n_tensors, n_records, n_adopted;
  uint64_t src_bytes, dst_bytes;
  double seconds;
  int n_errors;          /* requantised tensors */
  spill_import_tensor_error *errors; /* owned: spill_import_summary_free */
  double max_rel_err;
  char skipped[96];      /* source layers not imported (GLM's MTP layers), "" = none */
} spill_import_summary;

/* The architectures `spill import` reads: one row each of the importer's
 * table (engine/import/arch_registry.c); docs/MODEL.md lists the same. */
typedef struct spill_import_arch {
  const char *name;             /* "Qwen3-MoE", ... */
  const char *hf_model_type[4]; /* config.json model_type values, NULL-terminated */
  const char *gguf_arch;        /* GGUF general.architecture, or NULL */
  const char *gguf_note;        /* a condition on the GGUF ("with experts"), or NULL */
  const char *hf_class;         /* config.json architectures[0] that picks the row whatever the
                                 * model_type (Kimi K3's KimiK3ForConditionalGeneration), or NULL */
} spill_import_arch;

/* The number of rows, and row i (static, never freed; NULL outside
 * [0, n)). Thread-safe. */
int spill_import_n_archs(void);
const spill_import_arch *spill_import_arch_at(int i);

/* Runs the import. On failure DST holds no manifest (nothing `spill verify`
 * accepts) but keeps the journal and finished units for a re-run. */
int spill_import_run(const spill_import_request *r, spill_import_summary *s, spill_err *e);
void spill_import_summary_free(spill_import_summary *s); /* NULL/zeroed fine */

#ifdef __cplusplus
}
#endif
#endif
