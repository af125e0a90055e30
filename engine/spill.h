/* engine/spill.h: the public API of libspill.
 *
 * spill runs mixture-of-experts language models larger than RAM by streaming
 * the experts each token needs from SSD. Every client (the `spill` CLI, the
 * experiment runner, the simulator, the benchmarks) uses this header.
 *
 * Conventions
 * - Every fallible call returns a spill_status (0 = SPILL_OK, negative =
 *   error; engine/base/status.h, part of this API) and fills the optional
 *   spill_err with a specific detail ("experts-003.bin layer 3 expert 17:
 *   record header crc mismatch"). The library never prints and never exits.
 * - Ownership is stated on each call. close/free functions accept NULL.
 * - A spill_engine is not thread-safe: one thread drives it (it runs its own
 *   worker threads inside). Different engines are independent.
 */
#ifndef SPILL_SPILL_H
#define SPILL_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/plan/ram_plan.h" /* spill_plan: part of this API */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Configuration: every knob of the engine. The same names (snake_case) are
 * CLI flags (--kebab-case) and experiment-config keys. */

typedef struct spill_config {
  uint64_t budget_bytes; /* RAM budget; 0 = the default rule (docs/PLAN.md) */
  int ctx;               /* max context length (tokens); default 4096 */
  int threads;           /* compute threads; default 2 */
  int verify;            /* crc32-check every expert record read; default 0 */
} spill_config;

/* Fills the defaults above. */
void spill_config_default(spill_config *cfg);

/* ------------------------------------------------------------------------ */
/* Model information (from the manifest; no weights are read). */

typedef struct spill_info {
  char name[64];
  char family[32];
  int n_layers, n_moe_layers, n_dense_layers;
  int n_mla, n_kda, n_gqa;     /* attention layers of each kind */
  int d_model, vocab_size;
  int n_experts, top_k, d_expert, d_latent, n_shared;
  char expert_dtype[8];
  uint64_t record_bytes;       /* one expert record */
  uint64_t trunk_bytes;        /* resident trunk (trunk.bin) */
  uint64_t container_bytes;    /* all files */
  uint64_t params_total;       /* every weight (trunk + all experts) */
  uint64_t params_active;      /* per token: trunk minus embeddings + top_k experts */
} spill_info;

/* Reads MODEL_DIR's manifest and fills info. */
int spill_info_read(const char *model_dir, spill_info *info, spill_err *e);

/* Full offline audit of a container: every file's size and crc32, every bank
 * header, every record header and payload crc. progress may be NULL. */
typedef void (*spill_progress_cb)(void *user, uint64_t done, uint64_t total);
int spill_verify(const char *model_dir, spill_progress_cb progress, void *user, spill_err *e);

/* ------------------------------------------------------------------------ */
/* RAM planning (docs/PLAN.md). */

/* Plans MODEL_DIR's RAM at ctx tokens with `threads` compute threads and
 * applies budget_bytes (0 = the default rule on this machine's usable RAM).
 * An explicit budget below the floor fails with SPILL_E_RAM_BUDGET (the plan
 * is still filled, so the floor can be reported). */
int spill_plan_model(const char *model_dir, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e);
/* The same for a published shape without a container ("k3"); usable_ram 0 =
 * this machine. */
int spill_plan_shape(const char *shape, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e);

/* ------------------------------------------------------------------------ */
/* Synthetic models (docs/GEN.md). */

typedef struct spill_gen_request {
  const char *preset;   /* "nano", "mini", or "twin" (K3 proportions scaled to ram_bytes) */
  uint64_t ram_bytes;   /* twin: the machine RAM to scale to (default 8 GiB) */
  uint64_t disk_bytes;  /* twin: container size cap (default 40e9) */
  uint64_t seed;        /* default 1 */
  const char *attn_mix; /* "k3" (default), "mla", "kda", "gqa" */
  const char *trunk_dtype;  /* "q4" (default: q4 bulk, q8 embeddings) or "f32" */
  const char *expert_dtype; /* "rvq3" (default), "f32", "q8", "q4" */
} spill_gen_request;

/* Writes a container into out_dir (created; must not hold a manifest).
 * Deterministic for a seed. progress may be NULL. */
int spill_gen(const char *out_dir, const spill_gen_request *req, spill_progress_cb progress,
              void *user, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
