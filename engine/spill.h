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

#include "engine/base/json_util.h" /* spill_json_parse, spill_json_quote: JSON from and to outside */
#include "engine/base/safe_file.h" /* spill_file_open_read/_write, spill_read_file, spill_path_fmt */
#include "engine/base/status.h"
#include "engine/import/import.h" /* spill_import_run: part of this API */
#include "engine/tok/spill_tok.h"  /* spill_tok_*, spill_chat_*: tokenizers, chat templates */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Configuration: every knob of the engine. The same names (snake_case) are
 * experiment-config keys and, in kebab-case, CLI flags (--io-threads ...);
 * the knob table below (spill_knob_at) lists them with types and ranges. */

typedef enum spill_storage {
  SPILL_STORAGE_DIRECT = 0,    /* O_DIRECT reads into cache slots (page cache bypassed) */
  SPILL_STORAGE_PAGECACHE = 1, /* buffered reads into cache slots */
  SPILL_STORAGE_MMAP = 2,      /* experts are views into a read-only mapping, no app cache */
} spill_storage;

typedef enum spill_trunk_mode {
  SPILL_TRUNK_READ = 0,  /* trunk read into anonymous memory */
  SPILL_TRUNK_MMAP = 1,  /* trunk is a file-backed read-only mapping (evictable) */
  SPILL_TRUNK_MLOCK = 2, /* read into anonymous memory and mlock()ed */
} spill_trunk_mode;

typedef enum spill_io_backend_kind {
  SPILL_IO_PREAD = 0, /* pread worker pool */
  SPILL_IO_URING = 1, /* io_uring, reaped by the compute thread polling the stream */
  SPILL_IO_AUTO = 2,  /* io_uring where the kernel gives a ring at open, else the
                         pread pool; resolved at spill_engine_open (the engine's
                         config then holds the backend chosen, and
                         spill_engine_io_backend_why says why) */
} spill_io_backend_kind;

/* Matvec inputs: f32, or quantised to 8 bits per matvec input (Q8_0 for
 * q4/q8 weights, Q8_K for q4_k/q5_k/q6_k) with integer dot products, as ggml's
 * CPU backend (engine/quant/kernels_xq.h); other weight dtypes stay f32. */
typedef enum spill_act_quant { SPILL_ACT_F32 = 0, SPILL_ACT_Q8 = 1 } spill_act_quant;

/* Sliding-window GQA layers' keys and values (gpt-oss; docs/MODEL.md
 * "Sliding-window KV"). The logits are the same either way. */
typedef enum spill_swa_kv {
  SPILL_SWA_KV_RING = 0, /* a ring of W - 1 + prefill_chunk rows whatever ctx: a prompt
                            that leaves the held conversation more than prefill_chunk
                            tokens before its end is prefilled whole */
  SPILL_SWA_KV_FULL = 1, /* ctx rows, as a full layer: any prefix is kept */
  SPILL_SWA_KV_AUTO = 2, /* full when those ctx rows cost at most 1/8 of the budget
                            (spill_plan.swa_full_extra <= budget / 8), else ring;
                            resolved at spill_engine_open by the planner (the
                            engine's config and plan then hold the choice) */
} spill_swa_kv;

/* Expert preload: none, or every expert record of the model read into the
 * cache before the first token, with large direct reads overlapped across
 * the I/O queue (so decode starts with no expert read left, as an engine
 * that loads the whole model does). `all` needs a cache of every record: with
 * the default budget rule the budget becomes the model's maximum
 * (spill_plan.model_max) when that fits 7/8 of usable RAM; an explicit
 * budget or cache_slots below it, storage mmap, or a model that does not fit
 * fails the open with SPILL_E_RAM_BUDGET / SPILL_E_CONFIG naming what is
 * needed. spill_engine_clear_cache, a budget and a cache_slots change
 * preload again. The time and bytes are in spill_run_stats (preload_*). */
typedef enum spill_preload { SPILL_PRELOAD_NONE = 0, SPILL_PRELOAD_ALL = 1 } spill_preload;

typedef struct spill_config {
  uint64_t budget_bytes;  /* budget: RAM budget; 0 = the default rule (docs/PLAN.md) */
  uint64_t usable_ram;    /* RAM the default rule plans for; 0 = this machine */
  int force_budget;       /* force_budget: accept a budget above 7/8 of usable RAM (0) */
  int64_t cache_slots;    /* cache_slots: -1 = from the budget; 0 = no expert cache */
  int ctx;                /* ctx: max context in tokens (4096) */
  int threads;            /* threads: compute threads (auto = 0: the physical cores of
                             the affinity mask, resolved at engine open) */
  int prefill_chunk;      /* prefill_chunk: prompt tokens per chunk (16; 1 = sequential) */
  int io_threads;         /* io_threads: pread workers (4) */
  int io_depth;           /* io_depth: reads in flight (32) */
  spill_io_backend_kind io_backend; /* io_backend: auto | pread | uring (auto) */
  spill_storage storage;  /* storage: direct | pagecache | mmap */
  spill_trunk_mode trunk; /* trunk: read | mmap | mlock */
  spill_act_quant act_quant; /* act_quant: q8 | f32 matvec inputs (q8: integer dots where the weight dtype has them) */
  spill_preload preload;  /* preload: none | all expert records read at open (none) */
  char policy[16];        /* policy: lru | lfru | wtinylfu | nextuse[-coact|-opt] | arc |
                             s3fifo | gap-hd | mix-hd-opt */
  int lookahead;          /* lookahead: experts prefetched per predicted layer (0 = off) */
  int lookahead_depth;    /* lookahead_depth: 1 or 2 layers ahead */
  int lookahead_prefill;  /* lookahead_prefill: also prefetch during chunked prefill (0) */
  int verify;             /* verify: crc32-check every expert record read (0) */
  int overlap;            /* overlap: issue a layer's reads at once, compute in arrival
                             order (1); 0 = one read at a time, waited for (baseline) */
  uint64_t io_throttle;   /* io_throttle: emulated device bandwidth, bytes/s (0 = none) */
  uint64_t seed;          /* seed: cache policy seed (1) */
  const char *profile_path; /* profile: per-token JSONL profile (NULL = none) */
  const char *trace_path;   /* trace: router trace JSONL (NULL = none) */
  uint64_t trace_max_bytes; /* stop writing the trace past this size (0 = no cap) */
  /* routing_trace: replay this router trace's expert ids instead of the
   * routers' top-k (NULL = the model routes). Read and checked against the
   * model at open; fixed while the engine is open. See spill_routing_trace_inspect. */
  const char *routing_trace;
  /* draft: tokens drafted per greedy decode step from the context's own
   * n-grams and verified in one chunk (docs/MODEL.md "Drafts"); 0 = off.
   * Needs prefill_chunk > draft. Greedy output is identical with and
   * without; sampling (temp > 0) never drafts. */
  int draft;
  int draft_adaptive; /* draft_adaptive: stop drafting while it does not pay (1) */
  /* draft_accept_max: a measurement knob: at most this many drafts of a
   * verify chunk are accepted, the rest rejected as if the model disagreed
   * (the output is unchanged: rejected drafts are rolled back); -1 (off):
   * the model decides. Live. */
  int draft_accept_max;
  /* swa_kv: a sliding-window GQA layer's keys and values (gpt-oss), a
   * spill_swa_kv: ring, full, or auto (the default: full when it costs at
   * most 1/8 of the budget). */
  int swa_kv;
} spill_config;

/* Fills the defaults above. */
void spill_config_default(spill_config *cfg);
/* Sets knob `key` (snake_case, as above) from its text form ("8G", "uring",
 * "true"); SPILL_E_CONFIG with the reason on an unknown key or bad value.
 * String knobs (profile, trace, routing_trace) keep the pointer: it must
 * outlive cfg ("" sets NULL). */
int spill_config_set(spill_config *cfg, const char *key, const char *value, spill_err *e);
/* Writes knob `key`'s value in the text form spill_config_set reads back to
 * the same value ("auto", "268435456", "uring", "true"); SPILL_E_CONFIG on an
 * unknown key, SPILL_E_RANGE if buf (n bytes) is too small. */
int spill_config_get(const spill_config *cfg, const char *key, char *buf, size_t n, spill_err *e);

/* The knob table: every knob of spill_config and of spill_sampling (below),
 * in one list from which the parsers above, the CLI flags and their help, the
 * experiment schema and the docs are derived (engine/spill_config.c). */
typedef enum spill_knob_type {
  SPILL_KNOB_INT,    /* integer in [lo, hi] */
  SPILL_KNOB_FLOAT,  /* finite number in [lo, hi] */
  SPILL_KNOB_BOOL,   /* true/false, on/off, 1/0 */
  SPILL_KNOB_SIZE,   /* bytes: 512M, 8G, 1.5GiB, 123456 */
  SPILL_KNOB_CHOICE, /* one word of spill_knob_choices */
  SPILL_KNOB_PATH,   /* a file name, kept by pointer ("" = none) */
} spill_knob_type;

typedef enum spill_knob_target {
  SPILL_KNOB_CONFIG = 0,   /* a spill_config field: spill_config_set */
  SPILL_KNOB_SAMPLING = 1, /* a spill_sampling field: spill_sampling_set */
} spill_knob_target;

typedef struct spill_knob {
  const char *name;        /* snake_case key; the CLI flag is --kebab-case */
  spill_knob_target target;
  spill_knob_type type;
  int live;                /* spill_engine_set_knob changes it on an open engine
                            * (sampling knobs: per spill_generate call) */
  double lo, hi;           /* INT, FLOAT: accepted range */
  const char *special;     /* a word for a special value ("auto", "default", "off") or NULL */
  double special_value;    /* what it stands for (SIZE: also written as "0" when 0) */
  const char *choices;     /* CHOICE: "a|b|c"; NULL = a registry (spill_knob_choices) */
  const char *arg;         /* metavariable for help texts ("N", "SIZE"); NULL for BOOL, CHOICE */
  const char *help;        /* one line */
  const char *def;         /* the default, as text spill_config_set / spill_sampling_set
                            * read (spill_config_default applies these) */
} spill_knob;

/* Table rows 0 .. spill_knob_count()-1 (static storage; NULL out of range). */
int spill_knob_count(void);
const spill_knob *spill_knob_at(int i);
/* The row named `name` (snake_case), or NULL. */
const spill_knob *spill_knob_find(const char *name);
/* CHOICE knobs: the accepted words as "a|b|c" into buf (n bytes); returns
 * the length (0 for other types). */
int spill_knob_choices(const spill_knob *k, char *buf, size_t n);
/* 1 if v is one of the boolean words a BOOL knob accepts. */
int spill_knob_is_bool_word(const char *v);

/* Knob flags, the one command-line layer of the table (the CLI's commands
 * and `spill serve` use it, so they accept and refuse the same flags).
 * spill_knob_flag: the row whose flag arg is, "--" + the name in kebab-case
 * ("--io-threads"; "--io_threads" is no flag), or NULL.
 * spill_knob_flag_set: applies row k's flag at argv[*i] and its value to
 * cfg (CONFIG rows) or s (SAMPLING rows; either may be NULL when no row of
 * its target is passed): a BOOL flag alone means true and takes the next
 * argument only if it is a boolean word (--overlap false); other flags take
 * the next argument. *i is left on the last argument used. SPILL_E_CONFIG
 * with the reason on a missing or bad value. PATH values are kept by
 * pointer (argv must outlive cfg).
 * spill_knob_flag_help: the flag's help line into buf (n bytes):
 * "  --budget SIZE   RAM budget ... [default]"; returns its length. */
const spill_knob *spill_knob_flag(const char *arg);
struct spill_sampling;
int spill_knob_flag_set(const spill_knob *k, int argc, char **argv, int *i, spill_config *cfg,
                        struct spill_sampling *s, spill_err *e);
int spill_knob_flag_help(const spill_knob *k, char *buf, size_t n);

/* Bytes from "512M", "8G", "1.5GiB", "123456" (K/M/G/T are powers of 1024);
 * 0 if s is not a positive size. */
uint64_t spill_parse_size(const char *s);
/* Offset of the first byte of s[0..n) that is not valid UTF-8 (RFC 3629: no
 * overlongs, surrogates or code points past U+10FFFF), or n when all is: the
 * check manifests get, for clients' own untrusted text (configs, prompts). */
size_t spill_utf8_check(const char *s, size_t n);
/* Names for reports. */
const char *spill_storage_name(spill_storage s);
const char *spill_trunk_mode_name(spill_trunk_mode t);
const char *spill_io_backend_kind_name(spill_io_backend_kind b); /* pread, uring, auto */

/* The expert read backend an engine with io_backend `asked`, storage
 * `storage` and io_depth `io_depth` (0: the default 32) gets on this machine
 * now, and why (written to why, n bytes, NUL-terminated; may be NULL):
 * - pread or uring asked: that backend, "set: io_backend pread" (an engine
 *   asked for uring where the kernel refuses it fails to open, by name);
 * - auto with storage mmap: pread, "auto: storage mmap reads through page
 *   faults; io_uring has no reads to queue";
 * - auto: uring when an io_uring ring of io_depth entries opens (one is
 *   opened and closed here), "auto: io_uring available"; else pread,
 *   "auto: io_uring refused: <the kernel's reason>" (missing from the kernel,
 *   kernel.io_uring_disabled, a seccomp filter, the memlock limit).
 * spill_engine_open resolves auto this way (spill_engine_io_backend_why);
 * `spill info` prints it for the machine it runs on. Thread-safe. */
spill_io_backend_kind spill_io_backend_choose(spill_io_backend_kind asked, spill_storage storage,
                                              int io_depth, char *why, size_t n);

/* ------------------------------------------------------------------------ */
/* Model information (from the manifest; no weights are read). */

typedef struct spill_info {
  char name[64];
  char family[32];
  int n_layers, n_moe_layers, n_dense_layers;
  int n_mla, n_kda, n_gqa, n_gdn; /* attention layers of each kind */
  int d_model, vocab_size;
  int n_experts, top_k, d_expert, d_latent, n_shared;
  char expert_dtype[8];
  uint64_t record_bytes;       /* one expert record */
  uint64_t trunk_bytes;        /* resident trunk (trunk.bin) */
  uint64_t container_bytes;    /* all files */
  uint64_t params_total;       /* every weight (trunk + all experts) */
  uint64_t params_active;      /* per token: trunk minus embeddings + top_k experts */
  int bos_id, eos_id;          /* special token ids; -1 = none (generation stops at EOS) */
  uint64_t container_id;       /* the manifest's identity (v2+; 0 in a v1 container) */
} spill_info;

/* Reads MODEL_DIR's manifest and fills info. */
int spill_info_read(const char *model_dir, spill_info *info, spill_err *e);

/* Full offline audit of a container: every file's size and crc32, every bank
 * header, every record header and payload crc. progress may be NULL. */
typedef void (*spill_progress_cb)(void *user, uint64_t done, uint64_t total);
int spill_verify(const char *model_dir, spill_progress_cb progress, void *user, spill_err *e);

/* ------------------------------------------------------------------------ */
/* RAM planning (docs/PLAN.md): every term the engine keeps in RAM, in bytes.
 *   floor = trunk + attention state at ctx + scratch + a minimum expert cache
 *           of 2 x top_k records;
 *   ws    = record x top_k x MoE layers (one token's expert working set);
 *   recommended = floor + 3 ws.
 * The default budget is the largest of floor + 3ws, + 2ws, + 1ws that fits
 * 7/8 of usable RAM; else the floor, with a warning. The expert cache gets
 * budget - (floor - min_cache). */

typedef struct spill_plan_state {
  uint64_t mla_latent;  /* (kv_lora + rope) floats x ctx x MLA layers */
  uint64_t kda_state;   /* H d^2 floats x KDA layers */
  uint64_t kda_conv;    /* 3 (K-1) H d floats x KDA layers */
  uint64_t gqa_kv;      /* 2 Hk d floats x ctx x GQA layers (full attention) */
  uint64_t gqa_swa_kv;  /* 2 Hk d floats x min(ctx, W - 1 + prefill_chunk) x sliding-window
                         * GQA layers (a ring: does not grow with ctx past W - 1 + chunk);
                         * ctx rows when swa_kv is full (spill_plan.swa_kv) */
  uint64_t gdn_state;   /* Hv d^2 + (K-1)(2 Hk + Hv) d floats x GDN layers */
  uint64_t total;
} spill_plan_state;

/* The forward scratch the model allocates at open (engine/model's memory
 * formula, model_memory.h), for a prefill chunk of prefill_chunk tokens. */
typedef struct spill_plan_scratch {
  uint64_t activations;  /* residual, norms and FFN of a chunk; one token's projections */
  uint64_t attn_scores;  /* one score row of ctx floats per thread */
  uint64_t moe_buffers;  /* router scores, expert inputs, per-selection outputs of a chunk */
  uint64_t rvq_luts;     /* rvq3 LUTs: gate/up of every chunk token's input + one down LUT */
  uint64_t logits;       /* vocab floats */
  uint64_t total;
} spill_plan_scratch;

typedef struct spill_plan {
  int ctx;
  uint64_t trunk;
  spill_plan_state state;
  spill_plan_scratch scratch;
  uint64_t record_bytes;
  uint64_t min_cache; /* 2 x top_k records */
  uint64_t floor;
  uint64_t ws;        /* record x top_k x MoE layers */
  uint64_t recommended;
  uint64_t model_records; /* expert records in the model (MoE layers x n_experts) */
  uint64_t model_max;     /* the most RAM the model can use: every record cached */
  /* machine-dependent part */
  uint64_t usable_ram;
  uint64_t cap;        /* 7/8 usable */
  uint64_t budget;     /* explicit or default */
  int budget_ws;       /* default rule: how many ws above the floor (3,2,1; 0 = floor) */
  int budget_all;      /* default rule: the whole model (model_max <= cap) */
  int budget_explicit;
  int below_recommended_warning; /* default fell back to the floor */
  int budget_above_model; /* budget > model_max: the cache holds every record */
  int budget_forced;      /* explicit budget above the cap, accepted by force */
  uint64_t expert_cache; /* min(budget, model_max) - (floor - min_cache) */
  uint64_t cache_slots;  /* expert_cache / record_bytes */
  /* sliding-window layers: the KV planned (SPILL_SWA_KV_RING or _FULL;
   * SPILL_SWA_KV_AUTO only between counting and the budget, which decides:
   * full when swa_full_extra <= budget / 8, decided once), and the bytes ctx
   * rows on those layers take beyond the rings (0 without sliding layers or
   * when ctx fits a ring; included in state when swa_kv is full) */
  int swa_kv;
  uint64_t swa_full_extra;
} spill_plan;

/* Usable RAM of this machine: min(physical RAM, the memory limit of our
 * cgroup (v2 memory.max or v1 memory.limit_in_bytes)). Reads /proc and /sys. */
uint64_t spill_usable_ram(void);
/* Memory a new allocation can still get now (/proc/meminfo's MemAvailable),
 * 0 when unknown: what a measurement may take on a shared machine. */
uint64_t spill_available_ram(void);
/* Physical cores of this process's affinity mask (SMT siblings once; Linux
 * sysfs topology): what the threads knob's auto (0) resolves to. */
int spill_physical_cores(void);

/* Plans MODEL_DIR's RAM at ctx tokens with `threads` compute threads and
 * applies budget_bytes (0 = the default rule on this machine's usable RAM).
 * An explicit budget below the floor, or one that would use more than 7/8 of
 * usable_ram (after capping the cache at every expert record of the model:
 * plan->budget_above_model), fails with SPILL_E_RAM_BUDGET (the plan is still
 * filled, so the numbers can be reported). The engine accepts the latter with
 * the force_budget knob. The other knobs are their defaults (prefill_chunk 16,
 * act_quant q8, swa_kv auto). */
int spill_plan_model(const char *model_dir, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e);
/* (threads <= 0 here and in spill_plan_shape: the physical cores, as the
 * engine resolves the threads knob's auto.) */
/* The same for a published shape without a container (docs/PLAN.md
 * "Published shapes"): "k3" (Kimi K3 as released, rvq3 experts as in the
 * published container), "k3-mxfp4" (its MXFP4 experts as shipped),
 * "gpt-oss-20b", "gpt-oss-120b", "glm-4.5-air", "glm-4.5", "qwen3.5-35b-a3b",
 * "qwen3.5-397b-a17b" (spill_plan_shape_at lists them with the expert dtype
 * each assumes); the trunk is estimated with spill's q4/q8/f32 formats.
 * usable_ram 0 = this machine. SPILL_E_INVALID_ARG for an unknown shape. */
int spill_plan_shape(const char *shape, int ctx, int threads, uint64_t budget_bytes,
                     uint64_t usable_ram, spill_plan *plan, spill_err *e);
/* Row i (from 0) of the table of published shapes: its name (for
 * spill_plan_shape) and what it is (the model and the expert dtype its
 * figures assume), static strings; SPILL_E_RANGE past the last row. */
int spill_plan_shape_at(int i, const char **name, const char **about);

/* ------------------------------------------------------------------------ */
/* Forced routing from a recorded router trace (docs/MODEL.md "Forced
 * routing", docs/TRACE.md). With cfg.routing_trace set, token i of the trace
 * (file order: simple-format lines in order; router-format lines grouped by
 * "tok" in order of first appearance, whatever their phase) drives sequence
 * position i of every run, prefill and decode alike: the j-th traced layer
 * gives the ids of the model's j-th MoE layer. A run needing more positions
 * than the trace has tokens fails before it starts (SPILL_E_RANGE); there is
 * no wrap-around. The gate weights are the router's own scores at the forced
 * ids, renormalised as usual; cache, reads, lookahead (which still runs the
 * model's routers and is scored against the forced ids) and the router trace
 * output (which records the forced ids) are the real engine's. */

typedef struct spill_routing_trace_info {
  int n_tokens;   /* positions the trace can drive */
  int n_layers;   /* traced layers: must equal the model's MoE layers */
  int n_experts;  /* highest id + 1 (a trace records no expert count) */
  int top_k;      /* ids per layer */
  int router_format; /* 1: the engine's router format; 0: the simple format */
} spill_routing_trace_info;

/* Reads and validates FILE (errors SPILL_E_IO, SPILL_E_TRACE "FILE:LINE:
 * path: reason") and fills info (may be NULL). With model_dir (may be NULL)
 * it also checks the trace against that model: MoE layers, experts per layer
 * and top-k must be equal, otherwise SPILL_E_TRACE naming each difference
 * with both values ("routing trace F: 16 MoE layers, model has 3; top-8,
 * model has top-4"), plus the first line with an id beyond the model's
 * experts. spill_engine_open runs the same check. */
int spill_routing_trace_inspect(const char *file, const char *model_dir,
                                spill_routing_trace_info *info, spill_err *e);
/* ------------------------------------------------------------------------ */
/* The engine: a model opened for inference. */

typedef struct spill_engine spill_engine;

/* Opens MODEL_DIR with cfg (NULL = defaults): plans the RAM budget (an
 * explicit budget below the floor fails with SPILL_E_RAM_BUDGET), reads or
 * maps the trunk, sizes the expert cache, starts the I/O and compute threads.
 * cfg is copied (profile/trace paths are opened here). On success *out is
 * owned by the caller: spill_engine_close. */
int spill_engine_open(const char *model_dir, const spill_config *cfg, spill_engine **out,
                      spill_err *e);
void spill_engine_close(spill_engine *eng); /* NULL fine */

/* The plan the engine runs under and its model info (borrowed, valid until close). */
const spill_plan *spill_engine_plan(const spill_engine *eng);
const spill_info *spill_engine_info(const spill_engine *eng);
const spill_config *spill_engine_config(const spill_engine *eng);
/* Human-readable warnings from open (O_DIRECT fallback, budget at the floor,
 * io_uring unavailable, ...), one per line; "" if none. */
const char *spill_engine_warnings(const spill_engine *eng);
/* Why the engine reads experts with the backend in spill_engine_config's
 * io_backend (never auto once open): spill_io_backend_choose's reason, or
 * "auto: io_uring refused at open: ..." when the probe's ring opened but
 * the stream's did not. Borrowed, valid until close. */
const char *spill_engine_io_backend_why(const spill_engine *eng);

/* Text <-> tokens (the model's tokenizer; synthetic models: bytes). add_bos
 * prepends BOS when the model has one. Writes at most max ids; *n_out gets
 * the count (SPILL_E_RANGE if more than max were needed). */
int spill_tokenize(spill_engine *eng, const char *text, int add_bos, int *tokens, int max,
                   int *n_out, spill_err *e);
/* Bytes of one token into buf (NUL-terminated); returns the byte count. */
int spill_token_to_text(spill_engine *eng, int token, char *buf, size_t n);
/* The model's own tokenizer (engine/tok) when its directory holds
 * tokenizer.json or tiktoken.model (an imported checkpoint): spill_tokenize
 * and spill_token_to_text use it (special tokens in the text are parsed;
 * add_bos adds its BOS/post-processor tokens), and spill_generate's callback
 * then gets whole UTF-8 characters only; special tokens and ids beyond the
 * tokenizer (vocabulary padding) come as "". NULL for synthetic models (the
 * byte tokenizer). Borrowed, valid until close. */
const spill_tok *spill_engine_tokenizer(const spill_engine *eng);
int spill_vocab_size(const spill_engine *eng);

/* Runs tokens[0..n) from position 0 (the sequence is reset) and writes the
 * last position's logits (vocab floats) into logits_last, and, when
 * logits_all is not NULL, every position's logits ((n, vocab) floats; this
 * runs token by token). chunked != 0 uses chunked prefill. */
int spill_eval(spill_engine *eng, const int *tokens, int n, int chunked, float *logits_last,
               float *logits_all, spill_err *e);

/* Sampling: temperature 0 = greedy (argmax, lowest id on ties). Knobs
 * temp, top_k, top_p, sample_seed of the knob table. */
typedef struct spill_sampling {
  float temperature;
  int top_k;     /* 0 = off */
  float top_p;   /* 1 = off */
  uint64_t seed;
} spill_sampling;

/* Greedy: temperature 0, top_k 0, top_p 1, seed 1. */
void spill_sampling_default(spill_sampling *s);
/* As spill_config_set / spill_config_get, for the sampling knobs. */
int spill_sampling_set(spill_sampling *s, const char *key, const char *value, spill_err *e);
int spill_sampling_get(const spill_sampling *s, const char *key, char *buf, size_t n,
                       spill_err *e);

#define SPILL_LA_RANKS 16

/* Runtime paging ("RAM cliff") detection: a decode token whose major page
 * faults (getrusage) reach SPILL_PAGING_FAULTS_PER_TOKEN, for
 * SPILL_PAGING_TOKENS decode tokens in a row, means the machine is paging
 * the engine's memory (a file-backed trunk or mapped banks re-read from disk
 * every token, where the hit rate no longer tells the cost). Prefill and the
 * first decode token are judged too: a cold mapping is faulted in during
 * prefill, so healthy decode tokens take ~0 major faults (twin at 6.5 GiB:
 * 0-1; at the 7.25 GiB cliff: 181 median, up to 95,691). */
#define SPILL_PAGING_FAULTS_PER_TOKEN 32
#define SPILL_PAGING_TOKENS 2

/* Counters of one generate/eval run, or of one token. Deterministic counters
 * (reads, bytes, hits, misses) are exact; times are wall clock. */
typedef struct spill_run_stats {
  int tokens_prefill, tokens_decode;
  double prefill_s, decode_s;
  double decode_tok_per_s;
  uint64_t experts_requested;   /* demand: distinct (layer, expert) per chunk */
  uint64_t demand_hits, demand_misses;       /* prefill + decode */
  uint64_t decode_hits, decode_misses;       /* decode tokens only */
  uint64_t spec_issued, spec_used, spec_wasted;
  uint64_t reads;               /* records read from storage */
  uint64_t bytes_read, bytes_read_demand, bytes_read_spec;
  uint64_t evictions;
  uint64_t major_faults;        /* getrusage ru_majflt delta */
  double io_wait_s;             /* a compute thread blocked in the reader (one at a time:
                                   the thread polling the stream) */
  /* thread-seconds every compute thread spent in the MoE regions with
   * nothing to run: blocked in the reader, or idle until a record or another
   * thread's part arrived (summed over threads; 1 thread: the caller's wait) */
  double expert_wait_threads_s;
  uint64_t max_reads_in_flight; /* most demand reads outstanding at once */
  double read_p50_ms, read_p99_ms; /* over every read of the run (prefill, decode and the
                                    * prefetches it waits for), not one forward call */
  uint64_t peak_rss_bytes;      /* VmHWM at the end */
  uint64_t lookahead_predicted; /* ids predicted (and prefetched when absent) */
  uint64_t lookahead_correct;   /* ... that the real router then selected */
  /* depth-1 predictions by rank (0 = the predicted top-1): how many were made
   * and how many the real router selected (precision at rank r = correct/made) */
  uint64_t lookahead_rank_made[SPILL_LA_RANKS], lookahead_rank_correct[SPILL_LA_RANKS];
  /* depth-2 predictions (lookahead_depth 2: layer L predicting L+2), scored
   * apart from the depth-1 ones above: made, and selected by the router */
  uint64_t lookahead_depth2_predicted, lookahead_depth2_correct;
  /* How the run really ran (so a knob that is ignored shows): the bytes the
   * reader delivered by path (O_DIRECT into the cache, through the page
   * cache, copied from a mapping of the banks), the forward-pass sections
   * split across the compute threads (fork-joins; 0 with one thread), of
   * them those inside MoE layers (router to output), and how the trunk
   * is held (spill_trunk_mode: read into anonymous memory, a file-backed
   * mapping, or read and mlocked). */
  uint64_t bytes_read_direct, bytes_read_buffered, bytes_read_mapped;
  uint64_t compute_parallel_sections, compute_parallel_sections_moe;
  int trunk_mode;
  /* Paging detection (SPILL_PAGING_*), updated while the run goes: in a
   * token callback's stats, paging = 1 from the token that completes the
   * streak on; paging_token = that decode token's index (-1: none yet);
   * paging_tokens = decode tokens so far at or above the fault threshold. */
  int paging;
  int paging_token;
  uint64_t paging_tokens;
  /* The engine's last expert preload (knob preload: at open, or at the
   * clear_cache / budget / cache_slots change before this run), not part of
   * this run's reads, times or counters above: wall seconds, records and
   * bytes read. All 0 with preload none. */
  double preload_s;
  uint64_t preload_records, preload_bytes;
  /* -1; else the position whose logits held a NaN or Inf: spill_generate
   * refuses to sample from them (SPILL_E_NONFINITE) and stops there. */
  int nonfinite_pos;
  /* prompt tokens whose state was kept from the engine's conversation
   * (spill_generate_next with SPILL_GEN_REUSE), not run again; tokens_prefill
   * counts the prompt tokens that were run */
  int tokens_cached;
  /* Drafts (cfg.draft, docs/MODEL.md "Drafts"): tokens drafted and verified,
   * drafts accepted, decode forward calls (a verify chunk is one), and the
   * times the adaptive rule switched drafting off. Generated tokens are
   * tokens_decode; expert bytes per generated token = bytes_read / it. */
  uint64_t draft_tokens, draft_accepted, decode_forwards, draft_switched_off;
  /* expert bytes read (demand and prefetch) during decode only: the
   * numerator of expert bytes per generated token without the prompt's */
  uint64_t bytes_read_decode;
  /* context switches of the whole process during the run's forward calls
   * (getrusage RUSAGE_SELF: the caller, the pool, the pread workers, the
   * record checker): what a hand-off per read costs shows here */
  uint64_t ctx_switches_voluntary, ctx_switches_involuntary;
} spill_run_stats;

/* Called after every generated token with its text; return non-zero to stop.
 * token_stats holds this token's own deltas (decode_s, io_wait_s, hits,
 * misses, reads, bytes, spec counters, major faults), not running totals. */
typedef int (*spill_token_cb)(void *user, int token, const char *text,
                              const spill_run_stats *token_stats);

/* Generates up to n_new tokens after prompt[0..n_prompt) (the sequence is
 * reset first). Stops at EOS, at ctx, when cb returns non-zero, or when
 * *stop_flag (may be NULL) becomes non-zero (e.g. set by a signal handler):
 * then it returns SPILL_E_INTERRUPTED with the stats of what was made. */
int spill_generate(spill_engine *eng, const int *prompt, int n_prompt, int n_new,
                   const spill_sampling *s, spill_token_cb cb, void *user,
                   volatile int *stop_flag, spill_run_stats *stats, spill_err *e);

/* ------------------------------------------------------------------------ */
/* Conversations (docs/MODEL.md "Conversations and sessions"). An engine
 * holds the tokens whose attention state its model holds: after a
 * generation, the prompt and every generated token but a final EOS; after
 * spill_eval, its tokens. spill_generate starts from nothing every time;
 * spill_generate_next can keep what the engine holds. */

/* SPILL_GEN_REUSE: keep the state of the longest common prefix of the
 * engine's tokens and the prompt and run only the rest (at least the last
 * prompt token, unless the prompt equals the engine's tokens and their last
 * logits are held). Positional caches (GQA, MLA) are cut back to the
 * common prefix; a model with a recurrent state (KDA) keeps it only when
 * the engine's tokens are all a prefix of the prompt, else it runs the
 * whole prompt. stats->tokens_cached = the tokens kept. The logits are
 * bit-identical to running the whole prompt.
 * SPILL_GEN_CONTINUE_RNG: when every engine token is kept and the sampling
 * seed equals the one the engine's last generation drew with, the sampler
 * goes on with that generator (so turns of a conversation draw as one
 * sampler would); otherwise it starts from the seed. */
#define SPILL_GEN_REUSE 1
#define SPILL_GEN_CONTINUE_RNG 2

/* spill_generate with flags (SPILL_GEN_*; 0 = spill_generate). */
int spill_generate_next(spill_engine *eng, const int *prompt, int n_prompt, int n_new,
                        const spill_sampling *s, int flags, spill_token_cb cb, void *user,
                        volatile int *stop_flag, spill_run_stats *stats, spill_err *e);
/* The engine's tokens (borrowed into *tokens, may be NULL; valid until the
 * next call on the engine); returns their count. */
int spill_engine_tokens(const spill_engine *eng, const int **tokens);

/* Measurement support for drafts (cfg.draft, docs/MODEL.md "Drafts"): from
 * now on drafts come from seq[0..n) instead of the context's n-grams: the
 * draft after the token at position p is seq[p + 1 ..] (up to cfg.draft
 * tokens, stopping before EOS and at n; nothing at or past n - 1). With the
 * model's own greedy continuation as seq every draft is right, so the
 * acceptance is set by draft_accept_max. Drafts are verified as always: the
 * output is unchanged. The engine copies seq; NULL or n <= 0 goes back to
 * the n-gram lookup. SPILL_E_RANGE for n > ctx or a token outside the
 * vocabulary (nothing changes then). */
int spill_engine_set_draft_source(spill_engine *eng, const int *seq, int n, spill_err *e);

/* Session files (docs/FORMAT.md "Session files"): the engine's tokens, the
 * attention state they left in every layer (GQA keys and values, MLA
 * latents, KDA recurrent states and conv rings), the last logits and the
 * sampler's generator, bound to the container (its id, name and an
 * attention-layout checksum) and to the engine's ctx.
 * spill_session_save writes FILE atomically (a temp file beside it, fsync,
 * rename, fsync of the directory): SPILL_E_IO naming the file; the old file
 * is intact on failure.
 * spill_session_load replaces the engine's conversation with FILE's, so
 * that spill_generate_next(SPILL_GEN_REUSE | SPILL_GEN_CONTINUE_RNG) goes
 * on bit-identically to an engine that never stopped. Errors:
 * SPILL_E_SESSION naming both sides for another model or ctx, SPILL_E_VERSION,
 * SPILL_E_CHECKSUM (header or body crc32), SPILL_E_FORMAT (not a session
 * file, truncated, trailing bytes, a count or token out of range),
 * SPILL_E_IO. On failure the engine's conversation is empty (nothing is
 * kept: the next generation starts from the beginning). Neither call may
 * run during a generation on the same engine. */
int spill_session_save(spill_engine *eng, const char *file, spill_err *e);
int spill_session_load(spill_engine *eng, const char *file, spill_err *e);

/* Experiment support: drop every cached expert (and reset the counters when
 * reset_counters), change the budget (re-plans the cache: slots grow or
 * shrink in place; below the floor is SPILL_E_RAM_BUDGET), evict the
 * container from the page cache (pagecache/mmap cold runs). */
int spill_engine_clear_cache(spill_engine *eng, int reset_counters, spill_err *e);
int spill_engine_set_budget(spill_engine *eng, uint64_t budget_bytes, spill_err *e);
int spill_engine_evict_page_cache(spill_engine *eng, spill_err *e);
/* Changes a live knob (spill_knob.live: lookahead, lookahead_depth,
 * lookahead_prefill, verify, budget, cache_slots (both drop every cached
 * expert), profile and trace (a new path starts a new file; "" stops
 * writing)) without reopening. Other knobs give SPILL_E_CONFIG ("reopen the
 * engine"). */
int spill_engine_set_knob(spill_engine *eng, const char *key, const char *value, spill_err *e);

/* ------------------------------------------------------------------------ */
/* Disk probe: the O_DIRECT read bandwidth of the device under a model (page
 * cache bypassed), the one probe every client uses: `spill roofline`
 * (records mode) and the experiment runner's env.json (sequential mode). */

typedef enum spill_disk_probe_mode {
  /* random whole expert records of the model's banks (or of `records`),
   * `threads` threads each with one read in flight, for `seconds` */
  SPILL_PROBE_RECORDS = 0,
  /* one pass over the largest regular file in model_dir from its start,
   * block_bytes per read, up to max_bytes or EOF, one thread (no manifest
   * needed) */
  SPILL_PROBE_SEQUENTIAL = 1,
} spill_disk_probe_mode;

typedef struct spill_disk_probe_opts {
  spill_disk_probe_mode mode;
  int threads;             /* records: 1..64 (0 = 8) */
  double seconds;          /* records: duration (0 = 3) */
  const uint64_t *records; /* records: draw from these (bank << 32 | expert); NULL = all */
  size_t n_records;
  uint64_t block_bytes;    /* sequential: bytes per read (0 = 4 MiB) */
  uint64_t max_bytes;      /* sequential: stop after this many bytes (0 = 256 MiB) */
} spill_disk_probe_opts;

typedef struct spill_disk_probe_result {
  double bytes_per_s, reads_per_s;
  double p50_ms;         /* records: median read latency (last 4096 reads per thread) */
  uint64_t bytes, reads; /* read in total */
  uint64_t record_bytes; /* records: bytes per read */
  int threads;           /* threads that ran */
  char file[1400];       /* sequential: the file read (set even if it could not be opened) */
} spill_disk_probe_result;

/* Probes the device under MODEL_DIR (o NULL = records mode, defaults).
 * Errors: SPILL_E_IO (no file, O_DIRECT refused, a read failed: the
 * filesystem or device named), SPILL_E_FORMAT etc. from the container
 * (records mode), SPILL_E_INVALID_ARG (a record out of range), SPILL_E_NOMEM.
 * Takes `seconds` (records) or one pass of max_bytes (sequential). */
int spill_disk_probe(const char *model_dir, const spill_disk_probe_opts *o,
                     spill_disk_probe_result *out, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
